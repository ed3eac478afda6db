"""The XLA:CPU ops: `reference`'s math, rewritten where a measured profile of XLA:CPU showed its choices costly.

`model.ops=auto` picks this backend on CPU (`rlpt.models.ops.ops_for`); GPU and TPU compile `reference`. Each
rewrite equals the reference form in values and gradients (tests/models/test_ops_backends.py) and says in its
docstring what it answers and what it measured (the 10M train-step benchmark, `scripts/bench/train_step.py`,
and the sampler benchmark, `scripts/bench/sampler.py`, on 2-core x86 VMs; docs/benchmarks.md). In short:

- `dense`: a custom VJP that rounds the incoming cotangent to the compute dtype once (16-bit backward matmuls,
  as torch autocast's) and computes weight gradients with the smaller operand's free axes first
  (`_weight_grad`: f32 train step +4-7%; the tied head's (tokens, vocab) cotangent no longer copied, 20 ms).
- `norm_scale` (RMSNorm's weight) and `add_bias`: their gradients are sums over all tokens, run as matmuls at 16 bits
  (`_sum_rows`: ~4 ms each -> ~0.2 ms, ~9% of the bf16 step).
- `self_attention` / `attention`: batched (B*KV, T*G, Dh) matmuls, one additive mask, a VJP that saves the
  probabilities, and causal block skipping (`causal_chunks`: attention forward+backward 1.4x in f32, train step
  1.06-1.09x) with a recomputing fallback branch.
- `attention_inputs`: q and k written into their own buffers before attention's layout copy (3.2 -> 1.1 ms for q
  per layer); `buffered`: RoPE's cos/sin computed once, not fused into every layer (~10% of the step).
- `swiglu` on the f32 accumulators of the gate/up projections with its own VJP (MLP elementwise 70 -> 52 ms).
- `cache_store_dtype`: a 16-bit KV cache stored as its uint16 bits (XLA:CPU upcast a bf16 scatter: bf16 decode 1.23x).
- The feature-major decode step is `rlpt.models.ops.xla_cpu_decode` (decode up to 1.8x on the MLPs).

The switches `_SMALL_OPERAND_COPIED`, `_RECOMPUTED_FALLBACK` and `_OWN_BUFFERS` (on) let tests compare a rewrite
with its plain form; flip them before tracing.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.kernels.mask import attention_mask
from rlpt.kernels.reference import MASK_VALUE
from rlpt.models.ops import reference
from rlpt.models.ops.lora import LoraWeight, lora_dense
from rlpt.models.ops.reference import (  # noqa: F401  the ops this backend takes from the reference as they are
    cache_load,
    cache_write,
    cached_attention,
    rms_normalize,
)

_SMALL_OPERAND_COPIED = True
_RECOMPUTED_FALLBACK = True
_OWN_BUFFERS = True


def materialized(fn, again):
    """fn() (an array or a pytree of them) computed into its own buffers: the body of a while loop of 1 trip (2
    when the runtime bool `again` holds; the same values), which XLA cannot fold into its neighbours. An
    optimization barrier does not do it on CPU (it is expanded before fusion) and a small conditional becomes a
    select. Reach for it only where a measured fusion or layout choice of XLA:CPU is the problem."""
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn))
    trips = 1 + again.astype(jnp.int32)
    return jax.lax.while_loop(lambda c: c[0] < trips, lambda c: (c[0] + 1, fn()), (jnp.zeros((), jnp.int32), zeros))[1]


def buffered(fn, again):
    """fn() in its own buffers (`materialized`). RoPE's cos/sin: left to itself XLA fuses them into every layer's
    RoPE, forward and backward, and evaluates them once per head there (~5 ms per fusion in the 10M train-step
    benchmark: ~10% of the step)."""
    return materialized(fn, again)


def _is_16bit(dtype) -> bool:
    return jnp.dtype(dtype).itemsize == 2


def dense(eq, x, w, dtype, out_dtype=None):
    """`reference.dense` differentiated through `_dense_vjp`. w may be a `LoraWeight`."""
    out_dtype = jnp.dtype(dtype if out_dtype is None else out_dtype)
    if isinstance(w, LoraWeight):
        return lora_dense(_dense_vjp, _frozen_matmul, eq, x, w, jnp.dtype(dtype), out_dtype)
    return _dense_vjp(eq, x, w, jnp.dtype(dtype), out_dtype)


def _frozen_matmul(eq, x, w, dtype, out_dtype):
    return _frozen_dense_vjp(eq, x, w, dtype, out_dtype, jnp.dtype(x.dtype))


def rms_norm(x, weight, eps):
    return norm_scale(rms_normalize(x, eps), weight)


def _sum_rows(a, trailing: int, as_matmul: bool):
    """f32 sum of a over every axis but its last `trailing`; as_matmul: as a matmul with a ones vector.

    The gradients of biases and norm scales are such sums over all tokens. In a bf16 train step XLA:CPU
    rewrites them into pairwise reduce-windows that take ~4 ms each on the train-step benchmark's 4096 x 256
    cotangents (~9% of the step); the matmul is a library call (~0.2 ms). In an f32 step the plain sum is
    the faster one."""
    keep = a.shape[a.ndim - trailing:]
    if not as_matmul:
        return jnp.sum(a.astype(jnp.float32), axis=tuple(range(a.ndim - trailing)))
    rows = a.reshape(-1, math.prod(keep))
    out = jnp.einsum("m,mk->k", jnp.ones(rows.shape[:1], rows.dtype), rows, preferred_element_type=jnp.float32)
    return out.reshape(keep)


@jax.custom_vjp
def norm_scale(x, weight):
    """`reference.norm_scale`; its weight gradient is `_sum_rows`."""
    return weight.astype(x.dtype) * x


def _scale_fwd(x, weight):
    return norm_scale(x, weight), (x, weight)


def _scale_bwd(res, g):
    x, weight = res
    dw = _sum_rows(g.astype(jnp.float32) * x.astype(jnp.float32), weight.ndim, _is_16bit(x.dtype))
    return (g * weight.astype(g.dtype)).astype(x.dtype), dw.astype(weight.dtype)


norm_scale.defvjp(_scale_fwd, _scale_bwd)


@jax.custom_vjp
def add_bias(x, b):
    """x + b (cast to x's dtype), b broadcast over x's leading axes; its gradient is `_sum_rows`."""
    return x + b.astype(x.dtype)


def _add_bias_fwd(x, b):
    return add_bias(x, b), b


def _add_bias_bwd(b, g):
    return g, _sum_rows(g, b.ndim, _is_16bit(g.dtype)).astype(b.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3, 4))
def _dense_vjp(eq, x, w, dtype, out_dtype):
    """einsum(eq, x, w) in `dtype` with f32 accumulation, rounded to out_dtype; its backward:

    - at a 16-bit compute dtype autodiff would hand each matmul's transpose the cotangent of its f32
      accumulator (a 16-bit x f32 product, which XLA runs as an f32 matmul: the whole backward at f32 speed);
      this VJP rounds the incoming cotangent to the compute dtype once, as torch autocast's backward does, so
      the input and weight gradients are 16-bit matmuls accumulating in f32;
    - in every dtype the weight gradient takes `_weight_grad`'s operand order, and comes back in w's dtype
      straight from its f32 accumulator (f32 master weights get an unrounded gradient).
    """
    out = jnp.einsum(eq, x.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)
    return out.astype(out_dtype)


def _dense_vjp_fwd(eq, x, w, dtype, out_dtype):
    return _dense_vjp(eq, x, w, dtype, out_dtype), (x, w)


def _dense_vjp_bwd(eq, dtype, out_dtype, res, g):
    x, w = res
    (xs, ws), out = eq.split("->")[0].split(","), eq.split("->")[1]
    g = g.astype(dtype)
    dx = jnp.einsum(f"{out},{ws}->{xs}", g, w.astype(dtype), preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), _weight_grad(xs, out, ws, x.astype(dtype), g).astype(w.dtype)


_dense_vjp.defvjp(_dense_vjp_fwd, _dense_vjp_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3, 4, 5))
def _frozen_dense_vjp(eq, x, w, dtype, out_dtype, x_dtype):
    """`_dense_vjp` of a frozen weight: the backward computes dx (in x_dtype) only and keeps only w as its
    residual (no weight gradient: w's cotangent is a symbolic zero)."""
    return _dense_vjp(eq, x, w, dtype, out_dtype)


def _frozen_dense_fwd(eq, x, w, dtype, out_dtype, x_dtype):
    return _dense_vjp(eq, x, w, dtype, out_dtype), w


def _frozen_dense_bwd(eq, dtype, out_dtype, x_dtype, w, g):
    (xs, ws), out = eq.split("->")[0].split(","), eq.split("->")[1]
    dx = jnp.einsum(f"{out},{ws}->{xs}", g.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)
    return dx.astype(x_dtype), None


_frozen_dense_vjp.defvjp(_frozen_dense_fwd, _frozen_dense_bwd)


def _weight_grad(xs, out, ws, x, g):
    """einsum(f"{xs},{out}->{ws}", x, g) in f32: the weight gradient, a contraction over the token axes.

    On CPU it is computed with the smaller operand's free axes first (`_small_operand_copied`): left to itself
    XLA:CPU copied the larger one into a transposed layout, e.g. the head's (tokens, vocab) cotangent (64 MB
    in bf16, 128 MB in f32 in the train-step benchmark) and the MLP's (tokens, mlp) activations for the down
    projection (f32 train step 1.04-1.07x in interleaved A/Bs on an AVX2 CPU, docs/benchmarks.md)."""
    if _SMALL_OPERAND_COPIED:
        if x.size <= g.size:
            return _small_operand_copied(xs, out, ws, x, g)
        return _small_operand_copied(out, xs, ws, g, x)
    return jnp.einsum(f"{xs},{out}->{ws}", x, g, preferred_element_type=jnp.float32)


def _small_operand_copied(sx, sy, out, x, y):
    """einsum(f"{sx},{sy}->{out}", x, y) in f32, computed with x's free axes ahead of y's and transposed to `out`
    after: XLA:CPU copies the operand whose free axes lead a dot's output into a transposed layout, and x should
    be the smaller one. The transpose comes out of `materialized` (XLA folds a plain one back into the dot, and
    the bf16 dot form that gives is one its runtime rejects)."""
    batch = "".join(c for c in out if c in sx and c in sy)
    order = batch + "".join(c for c in out if c in sx and c not in sy) + "".join(
        c for c in out if c in sy and c not in sx)
    res = jnp.einsum(f"{sx},{sy}->{order}", x, y, preferred_element_type=jnp.float32)
    perm = tuple(order.index(c) for c in out)
    if perm == tuple(range(len(perm))):
        return res
    return materialized(lambda: res.transpose(perm), jnp.isnan(res.reshape(-1)[0]))


def _masked_scores(qt, kt, bias, scale):
    """qt (N, T*G, D), kt (N, S, D), bias (B, T, S) with N = B*KV -> f32 scores (N, T*G, S), scaled and masked."""
    N, TG, _ = qt.shape
    B, T, S = bias.shape
    s = jnp.einsum("nqd,nsd->nqs", qt, kt, preferred_element_type=jnp.float32)
    return (s.reshape(B, N // B, T, TG // T, S) * scale + bias[:, None, :, None, :]).reshape(N, TG, S)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _dense_core(qt, kt, vt, bias, scale):
    return _dense_core_fwd(qt, kt, vt, bias, scale)[0]


def _dense_core_fwd(qt, kt, vt, bias, scale):
    s = _masked_scores(qt, kt, bias, scale)
    m = jnp.max(s, axis=-1, keepdims=True)
    # Unnormalised probabilities: masked entries are exactly 0 in every row that sees a key; p is kept for
    # the backward pass (it is written once anyway), so nothing is recomputed.
    p = jnp.exp(s - m)
    l = jnp.sum(p, axis=-1, keepdims=True)
    p_low = p.astype(vt.dtype)
    out = jnp.einsum("nqs,nsd->nqd", p_low, vt, preferred_element_type=jnp.float32) / l
    out = out.astype(qt.dtype)
    # 16-bit compute keeps the probabilities as the matmul reads them (half the bytes written and read back);
    # the backward's ds, rounded to 16 bits for its matmuls anyway, takes one more rounding from them.
    return out, (qt, kt, vt, p_low if _is_16bit(vt.dtype) else p, l, out)


_RECOMPUTED_FALLBACK = True


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _recomputed_core(qt, kt, vt, bias, scale):
    """_dense_core that keeps only its inputs and recomputes the probabilities in the backward pass: the
    fallback branch of the causal-chunk `lax.cond`, whose saved residuals the taken branch would otherwise
    have to fill with zeros (a (B*KV, T*G, S) f32 block per layer, every step)."""
    return _dense_core_fwd(qt, kt, vt, bias, scale)[0]


def _recomputed_core_fwd(qt, kt, vt, bias, scale):
    return _recomputed_core(qt, kt, vt, bias, scale), (qt, kt, vt, bias)


def _recomputed_core_bwd(scale, inputs, dout):
    return _dense_core_bwd(scale, _dense_core_fwd(*inputs, scale)[1], dout)


_recomputed_core.defvjp(_recomputed_core_fwd, _recomputed_core_bwd)


def _dense_core_bwd(scale, res, dout):
    qt, kt, vt = res[:3]
    dq, dk, dv = _core_grads(scale, res, dout)
    # bias is built from integer ids, so it carries no gradient (None: a zero cotangent)
    return dq.astype(qt.dtype), dk.astype(kt.dtype), dv.astype(vt.dtype), None


def _core_grads(scale, res, dout):
    """f32 (dq, dk, dv) of _dense_core from its residuals and the output cotangent."""
    qt, kt, vt, p, l, out = res
    dof = dout.astype(jnp.float32) / l  # folds the softmax normaliser into dout (T*G values, not T*G*S)
    delta = jnp.sum(dof * out.astype(jnp.float32), axis=-1, keepdims=True)
    dof = dof.astype(vt.dtype)
    dv = _contract_queries(p.astype(vt.dtype), dof)
    ds = p * (jnp.einsum("nqd,nsd->nqs", dof, vt, preferred_element_type=jnp.float32) - delta) * scale
    dq = jnp.einsum("nqs,nsd->nqd", ds.astype(kt.dtype), kt, preferred_element_type=jnp.float32)
    dk = _contract_queries(ds.astype(qt.dtype), qt)
    return dq, dk, dv


_dense_core.defvjp(_dense_core_fwd, _dense_core_bwd)


def _contract_queries(a, b):
    """einsum("nqs,nqd->nsd", a, b) accumulating in f32 (the key-side gradients of attention).

    16-bit operands: the query axis is split in two (two contracting axes, the same sum): XLA:CPU runs a
    batched 16-bit dot whose only contracting axis leads both operands as an f32 dot after converting them,
    4x slower on the (32, 1024, 256) blocks of the train-step benchmark. f32 operands keep the plain form
    (the split is slower there)."""
    N, Q = a.shape[:2]
    if _is_16bit(a.dtype) and Q % 2 == 0:
        a, b = a.reshape(N, 2, Q // 2, a.shape[-1]), b.reshape(N, 2, Q // 2, b.shape[-1])
        if _SMALL_OPERAND_COPIED and b.shape[-1] < a.shape[-1]:
            # b's (N, Q, Dh) is smaller than the (queries, keys) block a: the dot writes (N, Dh, S)
            return _small_operand_copied("nabd", "nabs", "nsd", b, a)
        return jnp.einsum("nabs,nabd->nsd", a, b, preferred_element_type=jnp.float32)
    return jnp.einsum("nqs,nqd->nsd", a, b, preferred_element_type=jnp.float32)


def self_attention(q, k, v, positions, segment_ids, *, sliding_window=None):
    """Causal self-attention without a cache, the same math as kernels' reference (f32 softmax, same mask).

    q (B, T, H, Dh), k/v (B, T, KV, Dh), positions/segment_ids (B, T) -> (B, T, H, Dh) in q.dtype; rows that
    see no key (padding) give 0. Faster on XLA:CPU than the reference: heads are laid out as plain batched
    (B*KV, T*G, Dh) matmuls, the mask is one additive bias, and a custom VJP saves the probabilities so the
    backward pass touches each (T, S) score block about half as often as autodiff would.
    """
    return attention(q, k, v, positions, positions, segment_ids, segment_ids, sliding_window=sliding_window,
                           causal_chunks=causal_chunks(q.shape[1]))


def causal_chunks(T: int) -> int:
    """Query chunks for causal block skipping in self-attention of T columns: 4 from 128 columns on (the
    (32, 1024, 256) score block of the train-step benchmark: attention forward+backward 1.4x in f32), else 1."""
    return 4 if T >= 128 and T % 4 == 0 else 1


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _chunked_core(qt, kt, vt, bias, scale, chunks):
    """_dense_core per query chunk over the keys of its own and earlier column chunks only."""
    return _chunked_core_fwd(qt, kt, vt, bias, scale, chunks)[0]


def _chunk_slices(T: int, TG: int, chunks: int):
    """(query columns, key prefix, bias rows) of each chunk of T columns (TG query rows: T * group)."""
    G, c = TG // T, T // chunks
    return [(slice(i * c * G, (i + 1) * c * G), slice(0, (i + 1) * c), slice(i * c, (i + 1) * c))
            for i in range(chunks)]


def _chunked_core_fwd(qt, kt, vt, bias, scale, chunks):
    outs, residuals = [], []
    for q, k, t in _chunk_slices(bias.shape[1], qt.shape[1], chunks):
        out, res = _dense_core_fwd(qt[:, q], kt[:, k], vt[:, k], bias[:, t, k], scale)
        outs.append(out)
        residuals.append(res)
    return jnp.concatenate(outs, axis=1), tuple(residuals)


def _chunked_core_bwd(scale, chunks, res, dout):
    """Per-chunk gradients assembled in f32 and cast once: the query chunks are disjoint (one concatenate),
    the key prefixes overlap (their gradients add up). Autodiff of the slices would add zero-padded 16-bit
    cotangents, converting and rounding at every add (~5 ms per layer on the train-step benchmark)."""
    q_dtype = res[0][0].dtype
    kt, vt = res[-1][1:3]  # the last chunk attends to every key
    dqs, dk, dv = [], jnp.zeros(kt.shape, jnp.float32), jnp.zeros(vt.shape, jnp.float32)
    for (q, k, _), r in zip(_chunk_slices(kt.shape[1], dout.shape[1], chunks), res, strict=True):
        dq_i, dk_i, dv_i = _core_grads(scale, r, dout[:, q])
        dqs.append(dq_i)
        dk, dv = dk.at[:, k].add(dk_i), dv.at[:, k].add(dv_i)
    return jnp.concatenate(dqs, axis=1).astype(q_dtype), dk.astype(kt.dtype), dv.astype(vt.dtype), None


_chunked_core.defvjp(_chunked_core_fwd, _chunked_core_bwd)


def attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, sliding_window=None,
                    causal_chunks: int = 1):
    """`self_attention` of T queries over S other keys (B, S, KV, Dh): causal by global positions.

    causal_chunks > 1 (self-attention only: T == S, column i of the queries is column i of the keys) splits the
    queries into that many column chunks, each attending to the keys of its own and earlier chunks: the blocks
    above the diagonal are not computed. That is exact when no query sees a key in a later column chunk
    (positions increase along the columns within each segment: packing, padding and every rlpt layout); the
    mask is checked on the device and a batch that breaks it runs the full block (`lax.cond`), so the result is
    the same either way.
    """
    B, T, H, D = q.shape
    S, KV = k.shape[1], k.shape[2]
    G = H // KV
    mask = attention_mask(q_positions, kv_positions, q_segment_ids, kv_segment_ids, causal=True,
                          sliding_window=sliding_window)[:, 0]  # (B, T, S)
    bias = jnp.where(mask, 0.0, MASK_VALUE)
    qt = q.reshape(B, T, KV, G, D).transpose(0, 2, 1, 3, 4).reshape(B * KV, T * G, D)
    kt, vt = (x.transpose(0, 2, 1, 3).reshape(B * KV, S, D) for x in (k, v))
    scale = D ** -0.5
    if causal_chunks > 1:
        if T != S or T % causal_chunks:
            raise ValueError(f"dense_attention: causal_chunks={causal_chunks} needs self-attention with a column "
                             f"count divisible by it; got {T} queries over {S} keys")
        col = np.arange(T) // (T // causal_chunks)
        later = jnp.asarray(col[None, :] > col[:, None])  # (T, S): key chunk after the query's chunk
        skippable = ~jnp.any(mask & later)
        out = jax.lax.cond(skippable, lambda *a: _chunked_core(*a, scale, causal_chunks),
                           lambda *a: (_recomputed_core if _RECOMPUTED_FALLBACK else _dense_core)(*a, scale),
                           qt, kt, vt, bias)
    else:
        out = _dense_core(qt, kt, vt, bias, scale)
    out = out.reshape(B, KV, T, G, D).transpose(0, 2, 1, 3, 4).reshape(B, T, H, D)
    return jnp.where(jnp.any(mask, axis=-1)[:, :, None, None], out, 0).astype(q.dtype)


def attention_inputs(q, k):
    """q and k, each written out in its own buffer (`_own_buffer`)."""
    return (_own_buffer(q), _own_buffer(k)) if _OWN_BUFFERS else (q, k)


@jax.custom_vjp
def _own_buffer(x):
    """x, written out in its own layout before attention reorders it, and likewise its gradient (on CPU).

    XLA fuses RoPE into the copy that lays the heads out for attention's batched matmuls (and the RoPE
    backward into the copy back); that fused loop reads the rotated pairs across the transposed layout and is
    3x slower than the two passes apart (3.2 vs 1.1 ms for q in the train-step benchmark)."""
    return materialized(lambda: x, jnp.isnan(x.reshape(-1)[0]))


def _own_buffer_fwd(x):
    return _own_buffer(x), None


def _own_buffer_bwd(_, g):
    return (_own_buffer(g),)


_own_buffer.defvjp(_own_buffer_fwd, _own_buffer_bwd)





def gate_up_dtype(dtype):
    """16-bit compute keeps the gate/up projections' f32 accumulators, which `swiglu` reads (`_swiglu`); f32
    compute uses the plain formula."""
    return jnp.dtype(jnp.float32) if _is_16bit(dtype) else jnp.dtype(dtype)


def swiglu(gate, up, dtype):
    """silu(gate) * up in the compute dtype, from projections in `gate_up_dtype`."""
    return _swiglu(gate, up, jnp.dtype(dtype)) if _is_16bit(dtype) else reference.swiglu(gate, up, dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _swiglu(gate, up, dtype):
    """silu(gate) * up in f32, rounded to dtype: gate/up are the f32 accumulators of their projections.

    At 16-bit compute autodiff of the plain formula rounds both projections, evaluates the sigmoid on the
    rounded gate, keeps its pieces as residuals and runs forward and backward as five separate passes over the
    (tokens, mlp) activations (~5 ms per layer of the train-step benchmark); here the forward is one pass
    and the backward one pass per gradient."""
    return (jax.nn.silu(gate) * up).astype(dtype)


def _swiglu_fwd(gate, up, dtype):
    return _swiglu(gate, up, dtype), (gate, up)


def _swiglu_bwd(dtype, res, dh):
    gate, up = res
    dh = dh.astype(jnp.float32)
    sig = jax.nn.sigmoid(gate)
    dgate = dh * up * sig * (1.0 + gate * (1.0 - sig))
    return dgate.astype(gate.dtype), (dh * gate * sig).astype(up.dtype)


_swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def cache_store_dtype(dtype):
    """uint16 for a 16-bit compute dtype: the KV cache holds its values' bits (`reference.cache_write` and
    `cache_load` read and write either form). XLA:CPU upcasts a 16-bit float scatter to f32, converting the whole
    cache there and back for every decoded token (bf16 decode 1.23x slower); a uint16 scatter is in place."""
    return jnp.dtype(jnp.uint16) if _is_16bit(dtype) else jnp.dtype(dtype)
