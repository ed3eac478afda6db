"""Pallas flash attention (forward and FlashAttention-2 style backward): Triton on GPU, interpret mode on CPU.

Without a GPU and without `interpret=True`, dispatch falls back to the XLA blockwise path and says so once
with logging.warning. The kernels see the same positions / segment ids as every other implementation.
"""
import functools
import logging
import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from rlpt.kernels.blockwise import BlockConfig, blocks_may_interact, blockwise_attention, output_delta, pad_to
from rlpt.kernels.reference import MASK_VALUE

log = logging.getLogger(__name__)


def _pair_mask(qp, qs, kp, ks, cfg):
    """(bq,) and (bk,) ids -> (bq, bk) visibility, the same rule as kernels.mask.attention_mask."""
    mask = (qs[:, None] == ks[None, :]) & (qs[:, None] != 0)
    if cfg.causal:
        mask &= qp[:, None] >= kp[None, :]
    if cfg.sliding_window is not None:
        mask &= (qp[:, None] - kp[None, :]) < cfg.sliding_window
        if not cfg.causal:
            mask &= (kp[None, :] - qp[:, None]) < cfg.sliding_window
    return mask


def _scores(q, k, cfg, scale):
    """q (bq, D), k (bk, D) -> softcapped f32 scores (bq, bk) and the tanh (or None) for the backward."""
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
    if cfg.logit_softcap is None:
        return s, None
    t = jnp.tanh(s / cfg.logit_softcap)
    return cfg.logit_softcap * t, t


def _dot_t(a, b):
    """a.T @ b in float32: (n, x), (n, y) -> (x, y)."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _fwd_kernel(q_ref, k_ref, v_ref, qp_ref, qs_ref, kp_ref, ks_ref, o_ref, lse_ref, *, cfg, scale):
    """One (query block, batch, head): online softmax over the key blocks this block can see."""
    bk = cfg.block_k
    q, qp, qs = q_ref[...], qp_ref[...], qs_ref[...]
    bq, D = q.shape

    def body(j, carry):
        sl = pl.ds(j * bk, bk)
        kp, ks = kp_ref[sl], ks_ref[sl]

        def visit(carry):
            acc, m, l = carry
            s, _ = _scores(q, k_ref[sl, :], cfg, scale)
            mask = _pair_mask(qp, qs, kp, ks, cfg)
            s = jnp.where(mask, s, MASK_VALUE)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            p = jnp.where(mask, jnp.exp(s - m_new[:, None]), 0.0)
            corr = jnp.exp(m - m_new)
            v = v_ref[sl, :]
            pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
            return acc * corr[:, None] + pv, m_new, l * corr + jnp.sum(p, axis=-1)

        return lax.cond(blocks_may_interact(qp, qs, kp, ks, cfg), visit, lambda c: c, carry)

    init = (jnp.zeros((bq, D), jnp.float32), jnp.full((bq,), MASK_VALUE, jnp.float32),
            jnp.zeros((bq,), jnp.float32))
    acc, m, l = lax.fori_loop(0, k_ref.shape[0] // bk, body, init)
    seen = l > 0
    o_ref[...] = (acc / jnp.where(seen, l, 1.0)[:, None]).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)


def _grad_block(q, do, lse, dl, k, v, qp, qs, kp, ks, cfg, scale):
    """Probabilities p and score gradients ds (bq, bk) of one block pair, scale folded into ds."""
    s, t = _scores(q, k, cfg, scale)
    p = jnp.where(_pair_mask(qp, qs, kp, ks, cfg), jnp.exp(s - lse[:, None]), 0.0)
    dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    ds = p * (dp - dl[:, None])
    if t is not None:
        ds = ds * (1.0 - t * t)
    return p, ds * scale


def _dkv_kernel(q_ref, do_ref, lse_ref, dl_ref, qp_ref, qs_ref, k_ref, v_ref, kp_ref, ks_ref, dk_ref, dv_ref,
                *, cfg, scale, groups):
    """One (key block, batch, kv head): dK, dV summed over the kv head's query heads and all query blocks."""
    bq = cfg.block_q
    k, v, kp, ks = k_ref[...], v_ref[...], kp_ref[...], ks_ref[...]
    carry = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    for g in range(groups):  # static: a handful of query heads per kv head
        def body(i, carry, g=g):
            sl = pl.ds(i * bq, bq)
            qp, qs = qp_ref[sl], qs_ref[sl]

            def visit(carry):
                dk, dv = carry
                q, do = q_ref[sl, g, :], do_ref[sl, g, :]
                p, ds = _grad_block(q, do, lse_ref[g, sl], dl_ref[g, sl], k, v, qp, qs, kp, ks, cfg, scale)
                return dk + _dot_t(ds.astype(q.dtype), q), dv + _dot_t(p.astype(do.dtype), do)

            return lax.cond(blocks_may_interact(qp, qs, kp, ks, cfg), visit, lambda c: c, carry)

        carry = lax.fori_loop(0, q_ref.shape[0] // bq, body, carry)
    dk_ref[...], dv_ref[...] = carry


def _dq_kernel(q_ref, do_ref, lse_ref, dl_ref, qp_ref, qs_ref, k_ref, v_ref, kp_ref, ks_ref, dq_ref, *, cfg,
               scale):
    """One (query block, batch, head): dQ over all key blocks."""
    bk = cfg.block_k
    q, do, lse, dl, qp, qs = q_ref[...], do_ref[...], lse_ref[...], dl_ref[...], qp_ref[...], qs_ref[...]

    def body(j, dq):
        sl = pl.ds(j * bk, bk)
        kp, ks = kp_ref[sl], ks_ref[sl]

        def visit(dq):
            k = k_ref[sl, :]
            _, ds = _grad_block(q, do, lse, dl, k, v_ref[sl, :], qp, qs, kp, ks, cfg, scale)
            return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

        return lax.cond(blocks_may_interact(qp, qs, kp, ks, cfg), visit, lambda c: c, dq)

    dq_ref[...] = lax.fori_loop(0, k_ref.shape[0] // bk, body, jnp.zeros(q.shape, jnp.float32))


def _compiler_params(interpret, D):
    """Triton launch parameters on GPU (imported lazily so CPU-only installs never touch the GPU backend)."""
    if interpret:
        return None
    from jax.experimental.pallas import triton as pltriton
    return pltriton.CompilerParams(num_warps=4 if D <= 64 else 8, num_stages=2)


def _specs(B, Tq, Tk, H, KV, D, cfg):
    """BlockSpecs shared by the kernels, keyed by role; grids are (blocks, batch, heads)."""
    G, bq, bk = H // KV, cfg.block_q, cfg.block_k
    return {
        "q_blk": pl.BlockSpec((None, bq, None, D), lambda i, b, h: (b, i, h, 0)),
        "kv_all": pl.BlockSpec((None, Tk, None, D), lambda i, b, h: (b, 0, h // G, 0)),
        "qid_blk": pl.BlockSpec((None, bq), lambda i, b, h: (b, i)),
        "kid_all": pl.BlockSpec((None, Tk), lambda i, b, h: (b, 0)),
        "row_blk": pl.BlockSpec((None, None, bq), lambda i, b, h: (b, h, i)),
        # key-major grid (key block, batch, kv head): all query heads of this kv head
        "q_grp": pl.BlockSpec((None, Tq, G, D), lambda j, b, h: (b, 0, h, 0)),
        "row_grp": pl.BlockSpec((None, G, Tq), lambda j, b, h: (b, h, 0)),
        "qid_all": pl.BlockSpec((None, Tq), lambda j, b, h: (b, 0)),
        "kv_blk": pl.BlockSpec((None, bk, None, D), lambda j, b, h: (b, j, h, 0)),
        "kid_blk": pl.BlockSpec((None, bk), lambda j, b, h: (b, j)),
    }


def _forward(q, k, v, qpos, kpos, qseg, kseg, cfg, interpret):
    """Padded inputs -> out (B, Tq, H, D) in q.dtype and lse (B, H, Tq) float32."""
    B, Tq, H, D = q.shape
    Tk, KV = k.shape[1], k.shape[2]
    sp = _specs(B, Tq, Tk, H, KV, D, cfg)
    scale = D ** -0.5 if cfg.scale is None else cfg.scale
    return pl.pallas_call(
        partial(_fwd_kernel, cfg=cfg, scale=scale), grid=(Tq // cfg.block_q, B, H),
        in_specs=[sp["q_blk"], sp["kv_all"], sp["kv_all"], sp["qid_blk"], sp["qid_blk"], sp["kid_all"],
                  sp["kid_all"]],
        out_specs=[sp["q_blk"], sp["row_blk"]],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, Tq), jnp.float32)],
        interpret=interpret, compiler_params=_compiler_params(interpret, D), name="flash_attention_fwd",
    )(q, k, v, qpos, qseg, kpos, kseg)


def _backward(q, k, v, qpos, kpos, qseg, kseg, out, lse, dout, dlse, cfg, interpret):
    """Padded inputs and cotangents -> dq, dk, dv in float32 (key-major dK/dV, query-major dQ kernels)."""
    B, Tq, H, D = q.shape
    Tk, KV = k.shape[1], k.shape[2]
    sp = _specs(B, Tq, Tk, H, KV, D, cfg)
    scale = D ** -0.5 if cfg.scale is None else cfg.scale
    delta = output_delta(out, dout, lse, dlse)
    lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
    common = dict(interpret=interpret, compiler_params=_compiler_params(interpret, D))
    dk, dv = pl.pallas_call(
        partial(_dkv_kernel, cfg=cfg, scale=scale, groups=H // KV), grid=(Tk // cfg.block_k, B, KV),
        in_specs=[sp["q_grp"], sp["q_grp"], sp["row_grp"], sp["row_grp"], sp["qid_all"], sp["qid_all"],
                  sp["kv_blk"], sp["kv_blk"], sp["kid_blk"], sp["kid_blk"]],
        out_specs=[sp["kv_blk"], sp["kv_blk"]],
        out_shape=[jax.ShapeDtypeStruct(k.shape, jnp.float32)] * 2, name="flash_attention_dkv", **common,
    )(q, dout, lse, delta, qpos, qseg, k, v, kpos, kseg)
    dq = pl.pallas_call(
        partial(_dq_kernel, cfg=cfg, scale=scale), grid=(Tq // cfg.block_q, B, H),
        in_specs=[sp["q_blk"], sp["q_blk"], sp["row_blk"], sp["row_blk"], sp["qid_blk"], sp["qid_blk"],
                  sp["kv_all"], sp["kv_all"], sp["kid_all"], sp["kid_all"]],
        out_specs=sp["q_blk"],
        out_shape=jax.ShapeDtypeStruct(q.shape, jnp.float32), name="flash_attention_dq", **common,
    )(q, dout, lse, delta, qpos, qseg, k, v, kpos, kseg)
    return dq, dk, dv


@partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _flash(q, k, v, qpos, kpos, qseg, kseg, cfg, interpret):
    return _forward(q, k, v, qpos, kpos, qseg, kseg, cfg, interpret)


def _flash_fwd(q, k, v, qpos, kpos, qseg, kseg, cfg, interpret):
    out, lse = _forward(q, k, v, qpos, kpos, qseg, kseg, cfg, interpret)
    return (out, lse), (q, k, v, qpos, kpos, qseg, kseg, out, lse)


def _flash_bwd(cfg, interpret, res, cts):
    q, k, v = res[:3]
    dq, dk, dv = _backward(*res, *cts, cfg, interpret)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


@functools.cache
def _warn_fallback(backend):
    log.warning("flash attention: no GPU (JAX backend %r) and interpret=False; using the XLA blockwise "
                "path instead of the Pallas kernels", backend)


def flash_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, causal=True,
                    sliding_window=None, scale=None, logit_softcap=None, block_q=128, block_k=128,
                    interpret=False):
    """Pallas flash attention with the reference contract.

    q: (B, Tq, H, D); k, v: (B, Tk, KV, D); positions / segment ids (B, Tq), (B, Tk) int32.
    Returns out (B, Tq, H, D) in q.dtype and lse (B, H, Tq) float32 (-inf on rows that see nothing).
    interpret=True runs the kernels in Pallas interpret mode (any backend, for tests). On GPU the kernels
    compile through Pallas' Triton lowering (D a power of two >= 16). Elsewhere this falls back to
    blockwise_attention and logs that once.
    """
    backend = jax.default_backend()
    if not interpret and backend != "gpu":
        _warn_fallback(backend)
        return blockwise_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids,
                                   causal=causal, sliding_window=sliding_window, scale=scale,
                                   logit_softcap=logit_softcap, block_q=max(block_q, 512),
                                   block_k=max(block_k, 512))
    D, Tq, Tk = q.shape[3], q.shape[1], k.shape[1]
    if not interpret and (D < 16 or D & (D - 1)):
        raise ValueError(f"flash attention on GPU needs a power-of-two head dim >= 16, got D={D}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"query heads ({q.shape[2]}) must be a multiple of key/value heads ({k.shape[2]})")
    bq, bk = min(block_q, Tq), min(block_k, Tk)
    cfg = BlockConfig(causal, sliding_window, scale, logit_softcap, bq, bk)
    Tq_p, Tk_p = math.ceil(Tq / bq) * bq, math.ceil(Tk / bk) * bk
    padq = lambda x: pad_to(x, Tq_p)
    padk = lambda x: pad_to(x, Tk_p)
    out, lse = _flash(padq(q), padk(k), padk(v), padq(q_positions), padk(kv_positions), padq(q_segment_ids),
                      padk(kv_segment_ids), cfg, interpret)
    return out[:, :Tq], lse[:, :, :Tq]
