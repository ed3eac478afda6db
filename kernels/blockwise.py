"""Memory-efficient XLA attention: online softmax over key blocks, blockwise custom_vjp backward."""
import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from rlpt.kernels.mask import attention_mask
from rlpt.kernels.reference import MASK_VALUE


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Static attention options shared by the blockwise, ring and flash paths."""
    causal: bool = True
    sliding_window: int | None = None
    scale: float | None = None
    logit_softcap: float | None = None
    block_q: int = 512
    block_k: int = 512


def varying_axes(x):
    """The shard_map axes x varies over (jax 0.10 spells it `manual_axis_type.varying`, older `vma`)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    return set(mat.varying) if mat is not None else set(getattr(aval, "vma", None) or ())


def match_vma(x, *likes):
    """Cast a fresh constant `x` to vary over the shard_map axes any of `likes` varies over (no-op outside
    shard_map); scan and cond need carries typed like the values that flow into them."""
    axes = set()
    for like in likes:
        axes |= varying_axes(like)
    return lax.pcast(x, tuple(sorted(axes)), to="varying") if axes else x


def blocks_may_interact(qp, qs, kp, ks, cfg):
    """Scalar bool: False only if no query in the block can see any key (sound, from ranges).

    qp, qs: (B, bq) positions / segments; kp, ks: (B, bk). Padding (segment 0) is excluded from the ranges.
    """
    big = jnp.iinfo(jnp.int32).max
    q_valid, k_valid = qs != 0, ks != 0
    q_lo, q_hi = jnp.min(jnp.where(q_valid, qp, big)), jnp.max(jnp.where(q_valid, qp, -big))
    k_lo, k_hi = jnp.min(jnp.where(k_valid, kp, big)), jnp.max(jnp.where(k_valid, kp, -big))
    qs_lo, qs_hi = jnp.min(jnp.where(q_valid, qs, big)), jnp.max(qs)
    ks_lo, ks_hi = jnp.min(jnp.where(k_valid, ks, big)), jnp.max(ks)
    ok = jnp.any(q_valid) & jnp.any(k_valid) & (qs_lo <= ks_hi) & (ks_lo <= qs_hi)
    if cfg.causal:
        ok &= k_lo <= q_hi
    if cfg.sliding_window is not None:
        ok &= (q_lo - k_hi) < cfg.sliding_window
        if not cfg.causal:
            ok &= (k_lo - q_hi) < cfg.sliding_window
    return ok


def pad_to(x, n, axis=1):
    """Zero-pad axis `axis` up to length n (segment 0 marks the padding as masked)."""
    pad = n - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def _get(x, start, size):
    return lax.dynamic_slice_in_dim(x, start, size, axis=1)


def _put(x, update, start):
    return lax.dynamic_update_slice_in_dim(x, update, start, axis=1)


def block_sizes(Tq, Tk, cfg):
    """Effective (block_q, block_k): the configured sizes, capped at the sequence lengths."""
    return min(cfg.block_q, Tq), min(cfg.block_k, Tk)


def pad_queries(q, positions, segments, bq):
    """q (B, T, H, D) -> grouped-ready padded q (B, Tp, H, D) and ids (B, Tp); Tp a multiple of bq."""
    Tp = -(-q.shape[1] // bq) * bq
    return pad_to(q, Tp), pad_to(positions, Tp), pad_to(segments, Tp)


def group_heads(x, KV):
    """(B, T, H, D) -> (B, T, KV, G, D) with G = H // KV query heads per key/value head."""
    B, T, H, D = x.shape
    if H % KV:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({KV})")
    return x.reshape(B, T, KV, H // KV, D)


def _scores(qi, kj, cfg, scale):
    """qi (B, bq, KV, G, D), kj (B, bk, KV, D) -> softcapped f32 scores (B, bq, KV, G, bk), tanh or None."""
    s = jnp.einsum("bqkgd,bskd->bqkgs", qi, kj, preferred_element_type=jnp.float32) * scale
    if cfg.logit_softcap is None:
        return s, None
    t = jnp.tanh(s / cfg.logit_softcap)
    return cfg.logit_softcap * t, t


def _block_mask(qp, qs, kp, ks, cfg):
    """(B, bq) and (B, bk) ids -> mask (B, bq, 1, 1, bk) broadcasting over (KV, G)."""
    mask = attention_mask(qp, kp, qs, ks, causal=cfg.causal, sliding_window=cfg.sliding_window)
    return mask[:, 0, :, None, None, :]


def init_state(qg, *likes):
    """Online-softmax state for grouped q (B, Tq, KV, G, D): acc (same shape), running max m and sum l
    (B, Tq, KV, G), all float32; m starts at the finite mask value so masked rows never see inf - inf."""
    acc = match_vma(jnp.zeros(qg.shape, jnp.float32), qg, *likes)
    m = match_vma(jnp.full(qg.shape[:-1], MASK_VALUE, jnp.float32), qg, *likes)
    return acc, m, jnp.zeros_like(m)


def attend_blocks(state, qg, k, v, qpos, kpos, qseg, kseg, cfg, scale):
    """Fold keys k, v (B, Tk, KV, D) into the online-softmax state of grouped queries qg (B, Tq, KV, G, D).

    Tq and Tk must be multiples of the block sizes (see pad_queries). Key blocks that no query of a query
    block can see (by position / segment ranges) are skipped with lax.cond.
    """
    bq, bk = block_sizes(qg.shape[1], k.shape[1], cfg)

    def q_body(i, state):
        acc, m, l = state
        qi, qp, qs = _get(qg, i * bq, bq), _get(qpos, i * bq, bq), _get(qseg, i * bq, bq)

        def k_body(j, blk):
            kj, vj, kp, ks = (_get(x, j * bk, bk) for x in (k, v, kpos, kseg))

            def visit(blk):
                acc, m, l = blk
                s, _ = _scores(qi, kj, cfg, scale)
                mask = _block_mask(qp, qs, kp, ks, cfg)
                s = jnp.where(mask, s, MASK_VALUE)
                m_new = jnp.maximum(m, jnp.max(s, axis=-1))
                p = jnp.where(mask, jnp.exp(s - m_new[..., None]), 0.0)
                corr = jnp.exp(m - m_new)
                pv = jnp.einsum("bqkgs,bskd->bqkgd", p.astype(v.dtype), vj,
                                preferred_element_type=jnp.float32)
                return acc * corr[..., None] + pv, m_new, l * corr + jnp.sum(p, axis=-1)

            return lax.cond(blocks_may_interact(qp, qs, kp, ks, cfg), visit, lambda b: b, blk)

        blk = lax.fori_loop(0, k.shape[1] // bk, k_body, tuple(_get(x, i * bq, bq) for x in (acc, m, l)))
        return tuple(_put(x, b, i * bq) for x, b in zip((acc, m, l), blk))

    return lax.fori_loop(0, qg.shape[1] // bq, q_body, state)


def finalize_state(state):
    """State -> out (B, Tq, H, D) and lse (B, H, Tq), float32; out 0 and lse -inf where nothing was seen."""
    acc, m, l = state
    B, T, KV, G, D = acc.shape
    seen = l > 0
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)
    return out.reshape(B, T, KV * G, D), lse.reshape(B, T, KV * G).transpose(0, 2, 1)


def blockwise_forward(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg):
    """Online-softmax attention. Returns out (B, Tq, H, D) float32 and lse (B, H, Tq) float32."""
    Tq, D, KV = q.shape[1], q.shape[3], k.shape[2]
    scale = D ** -0.5 if cfg.scale is None else cfg.scale
    bq, bk = block_sizes(Tq, k.shape[1], cfg)
    q, qpos, qseg = pad_queries(q, q_positions, q_segment_ids, bq)
    k, kpos, kseg = pad_queries(k, kv_positions, kv_segment_ids, bk)
    v = pad_to(v, k.shape[1])
    qg = group_heads(q, KV)
    state = attend_blocks(init_state(qg, k, v, qpos, kpos), qg, k, v, qpos, kpos, qseg, kseg, cfg, scale)
    out, lse = finalize_state(state)
    return out[:, :Tq], lse[:, :, :Tq]


def grouped_rows(x, KV):
    """(B, H, T) row statistics -> (B, T, KV, G)."""
    B, H, T = x.shape
    return x.transpose(0, 2, 1).reshape(B, T, KV, H // KV)


def backward_blocks(grads, qg, k, v, qpos, kpos, qseg, kseg, lse, dog, delta, cfg, scale):
    """Add this key set's attention gradients into grads = (dq, dk, dv), float32 accumulators.

    qg, dog: (B, Tq, KV, G, D) grouped q and dout; lse, delta: (B, Tq, KV, G) with lse finite (0 on rows
    that saw nothing); k, v: (B, Tk, KV, D). dq has qg's shape; dk, dv have k's. Outer loop over key
    blocks, inner over query blocks; every accumulator is updated in place.
    """
    bq, bk = block_sizes(qg.shape[1], k.shape[1], cfg)

    def k_body(j, grads):
        dq, dk, dv = grads
        kj, vj, kp, ks = (_get(x, j * bk, bk) for x in (k, v, kpos, kseg))

        def q_body(i, carry):
            dq, dkj, dvj = carry
            qi, doi, lsei, dli, qp, qs = (_get(x, i * bq, bq) for x in (qg, dog, lse, delta, qpos, qseg))

            def visit(blk):
                dkj, dvj, dqi = blk
                s, t = _scores(qi, kj, cfg, scale)
                p = jnp.where(_block_mask(qp, qs, kp, ks, cfg), jnp.exp(s - lsei[..., None]), 0.0)
                dvj = dvj + jnp.einsum("bqkgs,bqkgd->bskd", p.astype(doi.dtype), doi,
                                       preferred_element_type=jnp.float32)
                dp = jnp.einsum("bqkgd,bskd->bqkgs", doi, vj, preferred_element_type=jnp.float32)
                ds = p * (dp - dli[..., None])
                if t is not None:
                    ds = ds * (1.0 - t * t)
                ds = ds * scale
                dqi = dqi + jnp.einsum("bqkgs,bskd->bqkgd", ds.astype(kj.dtype), kj,
                                       preferred_element_type=jnp.float32)
                dkj = dkj + jnp.einsum("bqkgs,bqkgd->bskd", ds.astype(qi.dtype), qi,
                                       preferred_element_type=jnp.float32)
                return dkj, dvj, dqi

            blk = (dkj, dvj, _get(dq, i * bq, bq))
            dkj, dvj, dqi = lax.cond(blocks_may_interact(qp, qs, kp, ks, cfg), visit, lambda b: b, blk)
            return _put(dq, dqi, i * bq), dkj, dvj

        init = (dq, _get(dk, j * bk, bk), _get(dv, j * bk, bk))
        dq, dkj, dvj = lax.fori_loop(0, qg.shape[1] // bq, q_body, init)
        return dq, _put(dk, dkj, j * bk), _put(dv, dvj, j * bk)

    return lax.fori_loop(0, k.shape[1] // bk, k_body, grads)


def output_delta(out, dout, lse, dlse):
    """delta (B, H, Tq) = rowsum(dout * out) - dlse, the softmax-backward row term (0 dlse if lse=-inf)."""
    d = jnp.einsum("bqhd,bqhd->bhq", dout.astype(jnp.float32), out.astype(jnp.float32))
    return d - jnp.where(jnp.isfinite(lse), dlse, 0.0)


def prepare_backward(q, dout, lse, delta, q_positions, q_segment_ids, KV, bq):
    """Pad and group the query-side backward inputs -> qg, dog, lse_g (finite), delta_g, qpos, qseg."""
    Tp = -(-q.shape[1] // bq) * bq
    qg = group_heads(pad_to(q, Tp), KV)
    dog = group_heads(pad_to(dout, Tp), KV)
    lse_g = pad_to(grouped_rows(jnp.where(jnp.isfinite(lse), lse, 0.0), KV), Tp)
    delta_g = pad_to(grouped_rows(delta, KV), Tp)
    return qg, dog, lse_g, delta_g, pad_to(q_positions, Tp), pad_to(q_segment_ids, Tp)


def blockwise_backward(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, lse, dout, delta,
                       cfg):
    """Gradients of attention from the saved lse and delta = rowsum(dout * out) - dlse.

    lse, delta: (B, H, Tq) float32 (lse may be -inf on rows with no visible key); dout: (B, Tq, H, D).
    Returns dq (B, Tq, H, D), dk, dv (B, Tk, KV, D), all float32.
    """
    B, Tq, H, D = q.shape
    Tk, KV = k.shape[1], k.shape[2]
    scale = D ** -0.5 if cfg.scale is None else cfg.scale
    bq, bk = block_sizes(Tq, Tk, cfg)
    qg, dog, lse_g, delta_g, qpos, qseg = prepare_backward(q, dout, lse, delta, q_positions, q_segment_ids,
                                                           KV, bq)
    k, kpos, kseg = pad_queries(k, kv_positions, kv_segment_ids, bk)
    v = pad_to(v, k.shape[1])
    like = (qg, dog, k, v, qpos, kpos)
    dk0 = match_vma(jnp.zeros(k.shape, jnp.float32), *like)
    grads = (match_vma(jnp.zeros(qg.shape, jnp.float32), *like), dk0, dk0)
    dq, dk, dv = backward_blocks(grads, qg, k, v, qpos, kpos, qseg, kseg, lse_g, dog, delta_g, cfg, scale)
    return dq.reshape(B, -1, H, D)[:, :Tq], dk[:, :Tk], dv[:, :Tk]


@partial(jax.custom_vjp, nondiff_argnums=(7,))
def blockwise_vjp(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg):
    out, lse = blockwise_forward(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg)
    return out.astype(q.dtype), lse


def blockwise_vjp_fwd(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg):
    out, lse = blockwise_vjp(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg)
    return (out, lse), (q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, out, lse)


def blockwise_vjp_bwd(cfg, res, cts):
    q, k, v, qpos, kpos, qseg, kseg, out, lse = res
    dout, dlse = cts
    delta = output_delta(out, dout, lse, dlse)
    dq, dk, dv = blockwise_backward(q, k, v, qpos, kpos, qseg, kseg, lse, dout, delta, cfg)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


blockwise_vjp.defvjp(blockwise_vjp_fwd, blockwise_vjp_bwd)


def blockwise_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *,
                        causal=True, sliding_window=None, scale=None, logit_softcap=None,
                        block_q=512, block_k=512):
    """Same contract as `reference_attention`, in O(T * block) memory.

    q: (B, Tq, H, D); k, v: (B, Tk, KV, D); positions / segment ids (B, Tq), (B, Tk) int32.
    Returns out (B, Tq, H, D) in q.dtype and lse (B, H, Tq) float32. The backward saves only
    q, k, v, out, lse (plus the int positions / segment ids) and recomputes scores block by block.
    """
    cfg = BlockConfig(causal, sliding_window, scale, logit_softcap, block_q, block_k)
    return blockwise_vjp(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, cfg)
