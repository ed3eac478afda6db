"""The decoder-only transformer as pure functions of a parameter pytree (layers stacked for lax.scan)."""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from rlpt import kernels
from rlpt.kernels.mask import attention_mask
from rlpt.kernels.reference import MASK_VALUE
from rlpt.models.config import DTYPES, ModelConfig, resolved_attention_impl, resolved_remat
from rlpt.models.quant import dequantize_kv, empty_kv, is_int8_kv, quantize_kv
from rlpt.models.rope import apply_rope, rope_cos_sin
from rlpt.models.xla_cpu import materialized, on_cpu
from rlpt.parallel.rules import constrain

ACT = ("batch", "act_seq", "act_embed")


def _write_rows(cache, new, index, axis=1):
    """Per-row write of T new entries at each row's own index (B,): cache (B, .., S, ..) <- new (B, .., T, ..)
    along `axis`. For T=1 XLA emits one small scatter that updates the (donated) cache in place."""
    write = lambda c, u, i: jax.lax.dynamic_update_slice_in_dim(c, u, i, axis=axis - 1)  # noqa: E731
    return jax.vmap(write)(cache, new, index)


# XLA:CPU upcasts a 16-bit float scatter to f32 (the whole cache converted there and back for every decoded
# token); a cache in these dtypes is stored as its uint16 bits, which are written in place.
_BITS = {jnp.dtype(jnp.bfloat16): jnp.uint16, jnp.dtype(jnp.float16): jnp.uint16}


def _cache_store(x):
    """K/V values (in the compute dtype) -> the cache's stored form."""
    bits = _BITS.get(jnp.dtype(x.dtype))
    return x if bits is None else jax.lax.bitcast_convert_type(x, bits)


def _cache_load(buf, dtype):
    """A cache buffer (or a slice of it) -> K/V values in `dtype`: bits bitcast back, int8 dequantized."""
    if is_int8_kv(buf):
        return dequantize_kv(buf, dtype)
    return buf if buf.dtype == dtype else jax.lax.bitcast_convert_type(buf, dtype)


def _cache_write(buf, x, index):
    """x (B, KV, T, Dh) in the compute dtype written into one layer's buffer (B, KV, S, Dh) at each row's index
    (B,): stored as `_cache_store`'s form, or as int8 values with their per-slot scales (`init_cache`)."""
    if is_int8_kv(buf):
        new = quantize_kv(x)
        return dataclasses.replace(buf, qvalue=_write_rows(buf.qvalue, new.qvalue, index, axis=2),
                                   scale=_write_rows(buf.scale, new.scale, index, axis=2))
    return _write_rows(buf, _cache_store(x), index, axis=2)


def param_axes(cfg: ModelConfig) -> dict:
    """Logical axis names of every parameter, the same tree structure as `init_params`."""
    layers = {
        "attn_norm": ("layers", "norm"),
        "wq": ("layers", "embed", "heads", "head_dim"),
        "wk": ("layers", "embed", "kv_heads", "head_dim"),
        "wv": ("layers", "embed", "kv_heads", "head_dim"),
        "wo": ("layers", "heads", "head_dim", "embed"),
        "mlp_norm": ("layers", "norm"),
        "w_gate": ("layers", "embed", "mlp"),
        "w_up": ("layers", "embed", "mlp"),
        "w_down": ("layers", "mlp", "embed"),
    }
    if cfg.qkv_bias:
        layers |= {"bq": ("layers", "heads", "head_dim"), "bk": ("layers", "kv_heads", "head_dim"),
                   "bv": ("layers", "kv_heads", "head_dim")}
    if cfg.o_bias:
        layers["bo"] = ("layers", "norm")
    if cfg.mlp_bias:
        layers |= {"b_gate": ("layers", "mlp"), "b_up": ("layers", "mlp"), "b_down": ("layers", "norm")}
    if cfg.qk_norm:
        layers |= {"q_norm": ("layers", "qk_norm_dim"), "k_norm": ("layers", "qk_norm_dim")}
    axes = {"embed": ("vocab", "embed"), "layers": layers, "final_norm": ("norm",)}
    if not cfg.tie_embeddings:
        axes["lm_head"] = ("embed", "vocab")
    return axes


def param_shapes(cfg: ModelConfig) -> dict:
    L, D, F, H, KV, Dh, V = (cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
                             cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size)
    dims = {"layers": L, "embed": D, "mlp": F, "heads": H, "kv_heads": KV, "head_dim": Dh, "qk_norm_dim": Dh,
            "vocab": V, "norm": D}
    return jax.tree.map(lambda names: tuple(dims[n] for n in names), param_axes(cfg),
                        is_leaf=lambda x: isinstance(x, tuple))


def init_params(cfg: ModelConfig, rng) -> dict:
    """Weights ~ N(0, initializer_range), norms 1, biases 0 (HF's init), in cfg.param_dtype."""
    shapes = param_shapes(cfg)
    flat, treedef = jax.tree.flatten_with_path(shapes, is_leaf=lambda x: isinstance(x, tuple))
    keys = jax.random.split(rng, len(flat))
    leaves = []
    for (path, shape), key in zip(flat, keys):
        name = path[-1].key
        if "norm" in name:
            leaves.append(jnp.ones(shape, cfg.pdtype))
        elif name.startswith("b"):
            leaves.append(jnp.zeros(shape, cfg.pdtype))
        else:
            leaves.append((cfg.initializer_range * jax.random.normal(key, shape, jnp.float32)).astype(cfg.pdtype))
    return jax.tree.unflatten(treedef, leaves)


def rms_norm(x, weight, eps):
    """HF RMSNorm: normalise in float32, cast back, then scale."""
    return _scale(rms_normalize(x, eps), weight)


def rms_normalize(x, eps, axis=-1):
    """x / rms(x) over `axis`, computed in float32 and cast back to x's dtype (RMSNorm before its scale)."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=axis, keepdims=True) + eps)).astype(x.dtype)


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


def _is_16bit(dtype) -> bool:
    return jnp.dtype(dtype).itemsize == 2


@jax.custom_vjp
def _scale(x, weight):
    """weight (cast to x's dtype) * x, weight broadcast over x's leading axes."""
    return weight.astype(x.dtype) * x


def _scale_fwd(x, weight):
    return _scale(x, weight), (x, weight)


def _scale_bwd(res, g):
    x, weight = res
    dw = _sum_rows(g.astype(jnp.float32) * x.astype(jnp.float32), weight.ndim, _is_16bit(x.dtype))
    return (g * weight.astype(g.dtype)).astype(x.dtype), dw.astype(weight.dtype)


_scale.defvjp(_scale_fwd, _scale_bwd)


@jax.custom_vjp
def add_bias(x, b):
    """x + b (cast to x's dtype), b broadcast over x's leading axes; its gradient is `_sum_rows`."""
    return x + b.astype(x.dtype)


def _add_bias_fwd(x, b):
    return add_bias(x, b), b


def _add_bias_bwd(b, g):
    return g, _sum_rows(g, b.ndim, _is_16bit(g.dtype)).astype(b.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


@functools.partial(jax.tree_util.register_dataclass, data_fields=("base", "a", "b"), meta_fields=("scale",))
@dataclasses.dataclass(frozen=True)
class LoraWeight:
    """A frozen weight plus a low-rank adapter, applied by `dense` as x @ base + scale * (x @ a) @ b.

    base (in..., out...), a (in..., r), b (r, out...) for one layer, or each with the same leading (layers,)
    axis (stacked: `lax.scan` and `layer_list` slice all three). Gradients reach a and b only; nothing of
    base's size is computed in the forward or backward pass."""

    base: jax.Array
    a: jax.Array
    b: jax.Array
    scale: float

    @property
    def dtype(self):
        return self.base.dtype

    def merged(self):
        """base + scale * a @ b, added in f32 and rounded to base's dtype: the weight this stands for."""
        lead = self.a.ndim + self.b.ndim - 2 - self.base.ndim  # 1 when stacked over layers, else 0
        n_in = self.a.ndim - 1 - lead
        shape = self.base.shape
        a = self.a.reshape(*shape[:lead], math.prod(shape[lead:lead + n_in]), -1).astype(jnp.float32)
        b = self.b.reshape(*shape[:lead], self.b.shape[lead], -1).astype(jnp.float32)
        delta = jnp.einsum("...ir,...ro->...io", a, b).reshape(shape)
        return (self.base.astype(jnp.float32) + self.scale * delta).astype(self.base.dtype)


def merged_params(params):
    """params with every `LoraWeight` replaced by its merged weight (export, the sampler's policy)."""
    return jax.tree.map(lambda w: w.merged() if isinstance(w, LoraWeight) else w, params,
                        is_leaf=lambda w: isinstance(w, LoraWeight))


def dense(eq, x, w, dtype, out_dtype=None):
    """einsum in the compute dtype, accumulating in f32 (bf16's fast path on XLA:CPU too). The result is in
    out_dtype (default: the compute dtype). Differentiated through `_dense_vjp`. w may be a `LoraWeight`."""
    out_dtype = jnp.dtype(dtype if out_dtype is None else out_dtype)
    if isinstance(w, LoraWeight):
        return _lora_dense(eq, x, w, jnp.dtype(dtype), out_dtype)
    return _dense_vjp(eq, x, w, jnp.dtype(dtype), out_dtype)


def _lora_dense(eq, x, w: LoraWeight, dtype, out_dtype):
    """`dense` of a LoraWeight: the frozen product and the rank-r path (x @ a rounded to the compute dtype, as
    any activation), summed in f32 and rounded once. eq's weight subscripts list base's input axes first."""
    (xs, ws), out = eq.split("->")[0].split(","), eq.split("->")[1]
    n_in = w.a.ndim - 1
    w_in, w_out = ws[:n_in], ws[n_in:]
    if not set(w_in) <= set(xs) or set(w_out) & set(xs):
        raise ValueError(f"dense({eq!r}): a LoraWeight's {n_in} input axes must lead the weight's subscripts")
    r = next(c for c in "rzyxwvu" if c not in eq)
    rows = "".join(c for c in xs if c not in w_in)
    base = _frozen_dense_vjp(eq, x, w.base, dtype, jnp.dtype(jnp.float32), jnp.dtype(x.dtype))
    xa = _dense_vjp(f"{xs},{w_in}{r}->{rows}{r}", x, w.a, dtype, dtype)
    delta = _dense_vjp(f"{rows}{r},{r}{w_out}->{out}", xa, w.b, dtype, jnp.dtype(jnp.float32))
    return (base + w.scale * delta).astype(out_dtype)


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
    if _SMALL_OPERAND_COPIED and on_cpu():
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


# Switches for this module's measured rewrites of the plain forms (_SMALL_OPERAND_COPIED, _RECOMPUTED_FALLBACK,
# _OWN_BUFFERS): on by default, each faster in the train-step benchmark's profile; tests flip them before
# tracing to compare with the plain forms.
_SMALL_OPERAND_COPIED = True


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
        if _SMALL_OPERAND_COPIED and on_cpu() and b.shape[-1] < a.shape[-1]:
            # b's (N, Q, Dh) is smaller than the (queries, keys) block a: the dot writes (N, Dh, S)
            return _small_operand_copied("nabd", "nabs", "nsd", b, a)
        return jnp.einsum("nabs,nabd->nsd", a, b, preferred_element_type=jnp.float32)
    return jnp.einsum("nqs,nqd->nsd", a, b, preferred_element_type=jnp.float32)


def dense_self_attention(q, k, v, positions, segment_ids, *, sliding_window=None):
    """Causal self-attention without a cache, the same math as kernels' reference (f32 softmax, same mask).

    q (B, T, H, Dh), k/v (B, T, KV, Dh), positions/segment_ids (B, T) -> (B, T, H, Dh) in q.dtype; rows that
    see no key (padding) give 0. Faster on XLA:CPU than the reference: heads are laid out as plain batched
    (B*KV, T*G, Dh) matmuls, the mask is one additive bias, and a custom VJP saves the probabilities so the
    backward pass touches each (T, S) score block about half as often as autodiff would.
    """
    return dense_attention(q, k, v, positions, positions, segment_ids, segment_ids, sliding_window=sliding_window,
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


def dense_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, sliding_window=None,
                    causal_chunks: int = 1):
    """`dense_self_attention` of T queries over S other keys (B, S, KV, Dh): causal by global positions.

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


def _project_qkv(cfg, lp, x, cos, sin):
    """q (B, T, H, Dh), k and v (B, T, KV, Dh) of x (B, T, D): projections, biases, QK norm, RoPE."""
    dt = cfg.dtype
    q = dense("btd,dhk->bthk", x, lp["wq"], dt)
    k = dense("btd,dhk->bthk", x, lp["wk"], dt)
    v = dense("btd,dhk->bthk", x, lp["wv"], dt)
    return qkv_tail(cfg, lp, q, k, v, cos, sin)


def qkv_tail(cfg, lp, q, k, v, cos, sin):
    """What follows the q/k/v projections (B, T, heads, Dh): biases, QK norm, RoPE."""
    if cfg.qkv_bias:
        q, k, v = add_bias(q, lp["bq"]), add_bias(k, lp["bk"]), add_bias(v, lp["bv"])
    if cfg.qk_norm:
        q, k = rms_norm(q, lp["q_norm"], cfg.rms_norm_eps), rms_norm(k, lp["k_norm"], cfg.rms_norm_eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return constrain(q, ("batch", "act_seq", "act_heads", "act_head_dim")), k, v


def _output_projection(cfg, lp, out):
    out = dense("bthk,hkd->btd", out, lp["wo"], cfg.dtype)
    return add_bias(out, lp["bo"]) if cfg.o_bias else out


def _attention(cfg, q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, self_attention=False):
    """Cache-less causal attention of q over k/v (B, S, KV, Dh) by cfg.attention_impl; self_attention: q and
    k/v are the same columns (dense attention then skips the blocks above the diagonal, `causal_chunks`)."""
    impl = resolved_attention_impl(cfg)
    if impl == "dense" and self_attention:
        return dense_self_attention(q, k, v, q_positions, q_segment_ids, sliding_window=cfg.sliding_window)
    if impl == "dense":
        return dense_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids,
                               sliding_window=cfg.sliding_window)
    return kernels.attention(q, k, v, q_positions=q_positions, kv_positions=kv_positions,
                             q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids, causal=True,
                             sliding_window=cfg.sliding_window, impl=impl)


def _attention_block(cfg, lp, x, cos, sin, positions, segment_ids, kv_cache, cache_index, window=None):
    """Self-attention for x (B, T, D); with a cache, new K/V are written at cache_index (B,) and the queries
    attend to the first `window` slots (all when None; kv_cache's positions/segment_ids come cut to it)."""
    q, k, v = _project_qkv(cfg, lp, x, cos, sin)
    if kv_cache is not None:
        out, new_cache = cached_attend(cfg, q, k, v, positions, segment_ids, kv_cache, cache_index, window)
        return _output_projection(cfg, lp, out), new_cache
    if _OWN_BUFFERS and on_cpu():
        q, k = _own_buffer(q), _own_buffer(k)
    out = _attention(cfg, q, k, v, positions, positions, segment_ids, segment_ids, self_attention=True)
    return _output_projection(cfg, lp, out), None


def cached_attend(cfg, q, k, v, positions, segment_ids, kv_cache, cache_index, window=None):
    """Write k/v (B, T, KV, Dh) into one layer's cache at cache_index (B,) and attend q (B, T, H, Dh) to its
    first `window` slots: (out (B, T, H, Dh), the layer's new {"k", "v"} buffers)."""
    # The cache is (B, KV, S, Dh) and holds K/V in the compute dtype (`init_cache`), 16-bit floats as their bits,
    # or int8 with per-slot scales.
    kk = _cache_write(kv_cache["k"], k.transpose(0, 2, 1, 3), cache_index)
    vv = _cache_write(kv_cache["v"], v.transpose(0, 2, 1, 3), cache_index)
    w = slice(None, window)
    out = cached_attention(q, _cache_load(kk[:, :, w], cfg.dtype), _cache_load(vv[:, :, w], cfg.dtype), positions,
                           kv_cache["positions"], segment_ids, kv_cache["segment_ids"],
                           sliding_window=cfg.sliding_window)
    return out, {"k": kk, "v": vv}


_OWN_BUFFERS = True


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


def _mlp_block(cfg, lp, x):
    dt = cfg.dtype
    acc = gate_up_dtype(cfg)
    gate = dense("btd,df->btf", x, lp["w_gate"], dt, acc)
    up = dense("btd,df->btf", x, lp["w_up"], dt, acc)
    if cfg.mlp_bias:
        gate, up = add_bias(gate, lp["b_gate"]), add_bias(up, lp["b_up"])
    h = constrain(swiglu(cfg, gate, up), ("batch", "act_seq", "act_mlp"))
    out = dense("btf,fd->btd", h, lp["w_down"], dt)
    return add_bias(out, lp["b_down"]) if cfg.mlp_bias else out


def gate_up_dtype(cfg):
    """The dtype the gate and up projections come out in: 16-bit compute keeps their f32 accumulators, which
    `swiglu` reads (`_swiglu`); f32 compute uses the plain formula."""
    return jnp.dtype(jnp.float32) if _is_16bit(cfg.dtype) else jnp.dtype(cfg.dtype)


def swiglu(cfg, gate, up):
    """silu(gate) * up in the compute dtype, from projections in `gate_up_dtype`."""
    return _swiglu(gate, up, jnp.dtype(cfg.dtype)) if _is_16bit(cfg.dtype) else jax.nn.silu(gate) * up


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


def _block(cfg, x, lp, cos, sin, positions, segment_ids, kv_cache, cache_index, window=None):
    h = rms_norm(x, lp["attn_norm"], cfg.rms_norm_eps)
    attn, new_cache = _attention_block(cfg, lp, h, cos, sin, positions, segment_ids, kv_cache, cache_index,
                                       window)
    return _residual_mlp(cfg, lp, x, attn), new_cache


def _residual_mlp(cfg, lp, x, attn):
    """The rest of a block after attention: residual add, then the MLP on the post-attention norm."""
    x = constrain(x + attn, ACT)
    x = x + _mlp_block(cfg, lp, rms_norm(x, lp["mlp_norm"], cfg.rms_norm_eps))
    return constrain(x, ACT)


_REMAT = {
    "full": None,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def hidden_states(params, cfg: ModelConfig, tokens, positions=None, segment_ids=None, *, cache=None,
                  cache_window=None, embeds=None):
    """Final-norm hidden states (B, T, D) for tokens (B, T); returns (hidden, new_cache or None).

    embeds (B, T, D): the input embeddings to use instead of looking `tokens` up (a VLM's text embeddings with
    image features spliced in at its image tokens, rlpt.models.vision).

    positions (B, T) default to arange; segment_ids (B, T) default to ones (0 marks padding).
    cache: from `init_cache`; the T new tokens are written at cache["index"] (B,) and attend to every
    filled slot of their segment. cache_window (static): attention reads only the first cache_window slots,
    which must hold every slot written so far and now (decoding a short prefix of a long cache reads less).
    """
    B, T = tokens.shape
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    if segment_ids is None:
        segment_ids = jnp.ones((B, T), jnp.int32)
    positions, segment_ids = positions.astype(jnp.int32), segment_ids.astype(jnp.int32)
    x = jnp.take(params["embed"], tokens, axis=0) if embeds is None else embeds
    x = constrain(x.astype(cfg.dtype), ACT)
    cos, sin = rope_cos_sin(cfg, positions)
    if cache is not None:
        x, new_cache = _cached_layers(params, cfg, x, cos, sin, positions, segment_ids, cache, cache_window)
        return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), new_cache

    def body(x, lp):
        return _block(cfg, x, lp, cos, sin, positions, segment_ids, None, None)[0]

    x = _run_layers(cfg, body, x, params["layers"])
    return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), None


def _run_layers(cfg, body, carry, layers):
    """carry through body(carry, layer_params) for every layer: remat per cfg.remat, lax.scan or unrolled."""
    remat = resolved_remat(cfg)
    if remat != "none":
        body = jax.checkpoint(body, policy=_REMAT[remat], prevent_cse=not cfg.scan_layers)
    if cfg.scan_layers:
        return jax.lax.scan(lambda c, lp: (body(c, lp), None), carry, layers)[0]
    for lp in layer_list(layers):
        carry = body(carry, lp)
    return carry


# Attention impls that shard the sequence over the mesh's "seq" axis (rlpt.kernels.ring).
SEQUENCE_SHARDED_IMPLS = ("ring", "allgather")


def attention_over_two_key_sets(cfg, q, q_positions, q_segment_ids, first: tuple, second: tuple):
    """Attention of q (B, T, H, Dh) over the union of two key sets, each (k, v, positions, segment_ids) with
    k, v (B, S_i, KV, Dh): one kernel call per set, merged by their log-sum-exps (exact; each set may be in its
    own column layout). A query that sees no key of a set gets weight 0 from it; one that sees none at all, 0."""
    impl = resolved_attention_impl(cfg)
    parts = [kernels.attention(q, k, v, q_positions=q_positions, kv_positions=kpos, q_segment_ids=q_segment_ids,
                               kv_segment_ids=kseg, causal=True, sliding_window=cfg.sliding_window, impl=impl,
                               return_lse=True) for k, v, kpos, kseg in (first, second)]
    (o1, l1), (o2, l2) = parts  # out (B, T, H, Dh), lse (B, H, T) f32, -inf where a query saw nothing
    top = jax.lax.stop_gradient(jnp.maximum(l1, l2))  # any shift gives the same value: keep it out of the grad
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    w1, w2 = jnp.exp(l1 - top), jnp.exp(l2 - top)
    total = w1 + w2
    w1, w2 = (jnp.transpose(w / jnp.where(total > 0, total, 1.0), (0, 2, 1))[..., None] for w in (w1, w2))
    return (o1.astype(jnp.float32) * w1 + o2.astype(jnp.float32) * w2).astype(q.dtype)


def hidden_states_shared_prefix(params, cfg: ModelConfig, prefix: tuple, rows: tuple, group: int):
    """Final-norm hidden states (B, K, D) of `rows`, each attending to its group's shared `prefix` and then
    causally to itself; the prefix runs through the model once per group instead of once per row.

    prefix = (tokens, positions, segment_ids), each (B/group, Tp): the columns every row of a group has in
    common before its own (segment 0: not there). rows = (tokens, positions, segment_ids), each (B, K):
    rows g*group .. (g+1)*group-1 continue prefix g, at positions after it. Row r's hidden state equals that of
    one row holding prefix g then rows[r] (`hidden_states`), up to float summation order; gradients reach the
    prefix through its K/V, broadcast to the group (the broadcast's transpose sums them). GRPO-style groups
    sample `group` responses to one prompt, so the prompt's forward and backward are paid once, not G times.
    With a sequence-sharded attention (ring / allgather) the two streams may each be in their own column layout
    (`rlpt.train.losses.lay_out_stream`): the rows then attend to the prefix and to themselves separately and
    the two results merge by their log-sum-exps (`attention_over_two_key_sets`).
    """
    (pt, pp, ps), (rt, rp, rs) = prefix, rows
    P, B = pt.shape[0], rt.shape[0]
    if P * group != B:
        raise ValueError(f"shared prefix: {P} prefixes x group {group} != {B} rows")
    pp, ps, rp, rs = (a.astype(jnp.int32) for a in (pp, ps, rp, rs))
    xp = constrain(jnp.take(params["embed"], pt, axis=0).astype(cfg.dtype), ACT)
    xr = constrain(jnp.take(params["embed"], rt, axis=0).astype(cfg.dtype), ACT)
    cos_p, sin_p = rope_cos_sin(cfg, pp)
    cos_r, sin_r = rope_cos_sin(cfg, rp)

    def with_prefix(a_prefix, a_rows):  # each row's keys: its group's prefix, then its own columns
        return jnp.concatenate([jnp.repeat(a_prefix, group, axis=0), a_rows], axis=1)

    kv_pos, kv_seg = with_prefix(pp, rp), with_prefix(ps, rs)
    split = resolved_attention_impl(cfg) in SEQUENCE_SHARDED_IMPLS

    def rows_attention(qr, kp, vp, kr, vr):
        if split:  # each stream keeps its own column layout: attend to each, merge by log-sum-exp
            rep = functools.partial(jnp.repeat, repeats=group, axis=0)
            return attention_over_two_key_sets(cfg, qr, rp, rs, (rep(kp), rep(vp), rep(pp), rep(ps)),
                                               (kr, vr, rp, rs))
        return _attention(cfg, qr, with_prefix(kp, kr), with_prefix(vp, vr), rp, kv_pos, rs, kv_seg)

    def body(carry, lp):
        xp, xr = carry
        qp, kp, vp = _project_qkv(cfg, lp, rms_norm(xp, lp["attn_norm"], cfg.rms_norm_eps), cos_p, sin_p)
        qr, kr, vr = _project_qkv(cfg, lp, rms_norm(xr, lp["attn_norm"], cfg.rms_norm_eps), cos_r, sin_r)
        att_p = _attention(cfg, qp, kp, vp, pp, pp, ps, ps, self_attention=True)
        att_r = rows_attention(qr, kp, vp, kr, vr)
        return tuple(_residual_mlp(cfg, lp, x, _output_projection(cfg, lp, att))
                     for x, att in ((xp, att_p), (xr, att_r)))

    _, xr = _run_layers(cfg, body, (xp, xr), params["layers"])
    return rms_norm(xr, params["final_norm"], cfg.rms_norm_eps)


def layer_list(layers) -> list:
    """Per-layer parameter dicts from the stacked (L, ...) layer tree; a list passes through unchanged.

    A decode loop splits once, outside its while_loop: slicing inside would copy every weight each step.
    """
    if isinstance(layers, (list, tuple)):
        return list(layers)
    num_layers = jax.tree.leaves(layers)[0].shape[0]
    return [jax.tree.map(lambda a, i=i: a[i], layers) for i in range(num_layers)]


def _cached_layers(params, cfg, x, cos, sin, positions, segment_ids, cache, window=None):
    """The layers over `init_cache`'s per-layer buffers, unrolled: each layer writes its own K/V buffer in place
    (a scan would slice and re-stack the whole cache every call). params["layers"] may be a `layer_list`."""
    def block(x, lp, lc, index):
        return _block(cfg, x, lp, cos, sin, positions, segment_ids, lc, index, window)

    return over_cache(block, x, layer_list(params["layers"]), positions, segment_ids, cache, window)


def over_cache(block, x, layers, positions, segment_ids, cache, window=None):
    """x through block(x, layer_params, layer_cache, index) -> (x, {"k", "v"}) for each layer and its cache
    buffers; the cache's positions/segment ids take the new (B, T) entries at cache["index"] and the layers
    see them cut to `window`. Returns (x, the new cache, its index advanced by T)."""
    index = cache["index"]
    kv_positions = _write_rows(cache["positions"], positions, index)
    kv_segments = _write_rows(cache["segment_ids"], segment_ids, index)
    ks, vs = [], []
    seen = {"positions": kv_positions[:, :window], "segment_ids": kv_segments[:, :window]}  # what attention reads
    for lp, k, v in zip(layers, cache["k"], cache["v"], strict=True):
        x, new = block(x, lp, {"k": k, "v": v, **seen}, index)
        ks.append(new["k"])
        vs.append(new["v"])
    return x, {"k": tuple(ks), "v": tuple(vs), "positions": kv_positions, "segment_ids": kv_segments,
               "index": index + positions.shape[1]}


def lm_head(params, cfg: ModelConfig):
    """The (D, V) output projection (the transposed embedding when tied)."""
    return params["embed"].T if cfg.tie_embeddings else params["lm_head"]


def logits_from_hidden(params, cfg: ModelConfig, hidden):
    """Logits (B, T, V) in cfg.logits_dtype from hidden states (B, T, D)."""
    # A tied head is used as it lies (V, D): with the transposed embedding, XLA:CPU folds the transpose of the
    # bf16 weight gradient into a dot form its runtime rejects ("Unsupported element type for DotThunk").
    if cfg.tie_embeddings:
        logits = dense("btd,vd->btv", hidden, params["embed"], cfg.dtype, DTYPES[cfg.logits_dtype])
    else:
        logits = dense("btd,dv->btv", hidden, params["lm_head"], cfg.dtype, DTYPES[cfg.logits_dtype])
    return constrain(logits, ("batch", "act_seq", "act_vocab"))


def forward(params, cfg: ModelConfig, tokens, positions=None, segment_ids=None, *, cache=None, embeds=None):
    """Logits (B, T, V) for tokens (B, T) (or their input embeddings `embeds`); with a cache, (logits, new_cache)."""
    hidden, new_cache = hidden_states(params, cfg, tokens, positions, segment_ids, cache=cache, embeds=embeds)
    logits = logits_from_hidden(params, cfg, hidden)
    return logits if cache is None else (logits, new_cache)


def init_cache(cfg: ModelConfig, batch: int, max_len: int, kv_cache_dtype: str | None = None) -> dict:
    """An empty KV cache of max_len slots per row; slots start as padding (segment 0).

    k, v: tuples of L per-layer buffers (B, KV, S, Dh), so a decode step updates each in place and attention
    reads it without a transpose; positions, segment_ids (B, S); index (B,) the next free slot of each row.
    kv_cache_dtype None: K/V in the compute dtype (16-bit floats stored as their uint16 bits); "int8": each buffer is a
    `qwix.QArray` of int8 values and f32 scales (B, KV, S, 1), one per (row, KV head, slot) (`rlpt.models.quant`).
    The caller keeps index + T <= max_len: inside jit a write past the end is clamped by XLA and would
    overwrite earlier slots (rlpt.sampling checks this on the host and reserves a scratch slot).
    """
    shape = (batch, cfg.num_kv_heads, max_len, cfg.head_dim)
    if kv_cache_dtype is None:
        store = _BITS.get(jnp.dtype(cfg.dtype), cfg.dtype)
        make = functools.partial(jnp.zeros, shape, store)
    elif kv_cache_dtype == "int8":
        make = functools.partial(empty_kv, shape)
    else:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}; expected None (the compute dtype) or 'int8'")
    return {"k": tuple(make() for _ in range(cfg.num_layers)),
            "v": tuple(make() for _ in range(cfg.num_layers)),
            "positions": jnp.zeros((batch, max_len), jnp.int32),
            "segment_ids": jnp.zeros((batch, max_len), jnp.int32),
            "index": jnp.zeros((batch,), jnp.int32)}
