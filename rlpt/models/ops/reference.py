"""The reference ops: plain jnp, differentiated by autodiff. What GPU and TPU compile (`model.ops=auto`).

Every op here is the definition `rlpt.models.ops.xla_cpu` must equal (values and gradients, tests/models/
test_ops_backends.py). The model (`rlpt.models.transformer`) calls them through `ops_for(cfg)`:

- `dense`: an einsum in the compute dtype accumulating in f32, rounded to out_dtype; a `LoraWeight` applies its
  adapter in the forward pass (`lora.lora_dense`).
- `rms_norm` (`rms_normalize`, then `norm_scale`), `add_bias`.
- `self_attention`, `attention`: causal attention without a cache, kernels' reference math (f32 softmax).
- `cached_attention`: attention over the (B, KV, S, Dh) KV cache; `cache_store_dtype` / `cache_write` /
  `cache_load`.
- `swiglu` of the gate and up projections, which come out in `gate_up_dtype`.
- `attention_inputs` (q, k before attention) and `buffered` (values computed once, e.g. RoPE's tables): here
  plain calls; the CPU backend gives them their own buffers.
"""
import dataclasses

import jax
import jax.numpy as jnp

from rlpt.kernels.mask import attention_mask
from rlpt.kernels.reference import MASK_VALUE, reference_attention
from rlpt.models.ops.lora import LoraWeight, lora_dense
from rlpt.models.quant import dequantize_kv, is_int8_kv, quantize_kv


def matmul(eq, x, w, dtype, out_dtype):
    """einsum(eq, x, w) with both operands in `dtype`, accumulating in f32, rounded to out_dtype."""
    out = jnp.einsum(eq, x.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)
    return out.astype(out_dtype)


def frozen_matmul(eq, x, w, dtype, out_dtype):
    """`matmul` of a weight that takes no gradient (a LoRA base): autodiff computes dx only."""
    return matmul(eq, x, jax.lax.stop_gradient(w), dtype, out_dtype)


def dense(eq, x, w, dtype, out_dtype=None):
    """einsum in the compute dtype, accumulating in f32; the result in out_dtype (default: the compute dtype).
    w may be a `LoraWeight`."""
    out_dtype = jnp.dtype(dtype if out_dtype is None else out_dtype)
    if isinstance(w, LoraWeight):
        return lora_dense(matmul, frozen_matmul, eq, x, w, jnp.dtype(dtype), out_dtype)
    return matmul(eq, x, w, jnp.dtype(dtype), out_dtype)


def rms_normalize(x, eps, axis=-1):
    """x / rms(x) over `axis`, computed in float32 and cast back to x's dtype (RMSNorm before its scale)."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=axis, keepdims=True) + eps)).astype(x.dtype)


def norm_scale(x, weight):
    """weight (cast to x's dtype) * x, weight broadcast over x's leading axes."""
    return weight.astype(x.dtype) * x


def rms_norm(x, weight, eps):
    """HF RMSNorm: normalise in float32, cast back, then scale."""
    return norm_scale(rms_normalize(x, eps), weight)


def add_bias(x, b):
    """x + b (cast to x's dtype), b broadcast over x's leading axes."""
    return x + b.astype(x.dtype)


def gate_up_dtype(dtype):
    """The dtype the MLP's gate and up projections come out in."""
    return jnp.dtype(dtype)


def swiglu(gate, up, dtype):
    """silu(gate) * up in the compute dtype."""
    return (jax.nn.silu(gate) * up).astype(dtype)


def attention_inputs(q, k):
    """q and k as attention reads them (the CPU backend writes them into their own buffers first)."""
    return q, k


def buffered(fn, again):
    """fn(): a value computed once for the whole model (the CPU backend keeps XLA from fusing it into every use;
    `again` is its loop's runtime trip flag there)."""
    del again
    return fn()


def attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, sliding_window=None):
    """Causal attention of q (B, T, H, Dh) over k/v (B, S, KV, Dh) by global positions, kernels' reference math:
    f32 softmax, rows that see no key give 0; (B, T, H, Dh) in q.dtype."""
    return reference_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, causal=True,
                               sliding_window=sliding_window)[0]


def self_attention(q, k, v, positions, segment_ids, *, sliding_window=None):
    """`attention` of T queries over the same T columns' keys."""
    return attention(q, k, v, positions, positions, segment_ids, segment_ids, sliding_window=sliding_window)


def cached_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, sliding_window=None):
    """Attention of q (B, T, H, Dh) over a KV cache k/v (B, KV, S, Dh): kernels' reference math and mask.

    The cache keeps each (row, KV head) block (S, Dh) contiguous, so both matmuls read it where it lies (a
    (B, S, KV, Dh) layout costs a transposed copy of the whole cache per layer per decoded token).
    positions / segment ids (B, T) and (B, S); rows that see no key give 0.
    """
    B, T, H, D = q.shape
    KV, S = k.shape[1], k.shape[2]
    G = H // KV
    qg = q.reshape(B, T, KV, G, D).transpose(0, 2, 1, 3, 4).reshape(B, KV, T * G, D)
    s = jnp.einsum("bkqd,bksd->bkqs", qg, k, preferred_element_type=jnp.float32) * D ** -0.5
    mask = attention_mask(q_positions, kv_positions, q_segment_ids, kv_segment_ids, causal=True,
                          sliding_window=sliding_window)  # (B, 1, T, S)
    mask = jnp.broadcast_to(mask[:, :, :, None], (B, 1, T, G, S)).reshape(B, 1, T * G, S)
    s = jnp.where(mask, s, MASK_VALUE)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.where(mask, jnp.exp(s - m), 0.0)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    p = p / jnp.where(denom > 0, denom, 1.0)
    out = jnp.einsum("bkqs,bksd->bkqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.reshape(B, KV, T, G, D).transpose(0, 2, 1, 3, 4).reshape(B, T, H, D).astype(q.dtype)


def write_rows(cache, new, index, axis=1):
    """Per-row write of T new entries at each row's own index (B,): cache (B, .., S, ..) <- new (B, .., T, ..)
    along `axis`. For T=1 XLA emits one small scatter that updates the (donated) cache in place."""
    write = lambda c, u, i: jax.lax.dynamic_update_slice_in_dim(c, u, i, axis=axis - 1)  # noqa: E731
    return jax.vmap(write)(cache, new, index)


def cache_store_dtype(dtype):
    """The dtype a KV cache buffer (`transformer.init_cache`) holds K/V values of the compute dtype in."""
    return jnp.dtype(dtype)


def cache_load(buf, dtype):
    """A cache buffer (or a slice of it) -> K/V values in `dtype`: an int8 cache dequantized, a cache of 16-bit
    floats stored as their uint16 bits (`xla_cpu.cache_store_dtype`) bitcast back."""
    if is_int8_kv(buf):
        return dequantize_kv(buf, dtype)
    if buf.dtype == jnp.uint16:
        return jax.lax.bitcast_convert_type(buf, dtype)
    return buf.astype(dtype)


def cache_write(buf, x, index):
    """x (B, KV, T, Dh) in the compute dtype written into one layer's buffer (B, KV, S, Dh) at each row's index
    (B,), in the buffer's form: values, their uint16 bits, or int8 values with their per-slot scales."""
    if is_int8_kv(buf):
        new = quantize_kv(x)
        return dataclasses.replace(buf, qvalue=write_rows(buf.qvalue, new.qvalue, index, axis=2),
                                   scale=write_rows(buf.scale, new.scale, index, axis=2))
    new = jax.lax.bitcast_convert_type(x, jnp.uint16) if buf.dtype == jnp.uint16 else x.astype(buf.dtype)
    return write_rows(buf, new, index, axis=2)
