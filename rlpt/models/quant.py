"""Quantized sampling on Qwix: weight-only int8 / int4 layer weights and an int8 KV cache.

Weights: the seven layer matrices (q/k/v, output, gate/up, down) are quantized once per weight version
(`quantized_params`, `rlpt.sampling.engine.sampler_params`), symmetric absmax from the f32 weights
(`qwix.quantize`): int8 with one scale per output channel, int4 with one scale per (group of `quant_group` input
features, output channel). The embedding, the LM head, norms and biases are not quantized (the head's error would
go straight into the logits; embedding and head are kept in the compute dtype). The sampler's model is the
dequantized weights: decoding contracts the quantized weights (`project`), prefill, continuation and the
plain-params decode path dequantize them in the compute dtype (`dense_params`, `qwix.dequantize`) and run the
model's own forward, so every log-prob the sampler reports is this model's. Activations stay in the compute
dtype (weight-only: no activation quantization).

KV cache (`kv_cache_dtype="int8"`): each layer's K and V buffers are a `qwix.QArray`, int8 values (B, KV, S, Dh)
and one f32 scale per (row, KV head, slot) (B, KV, S, 1), absmax over head_dim, written in place with the values
(`rlpt.models.transformer.cached_attend`) and dequantized by attention.
"""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import qwix

QUANT_MODES = ("none", "int8", "int4")
KV_CACHE_DTYPES = (None, "int8")
_QTYPES = {"int8": jnp.int8, "int4": jnp.int4}
# layer weight -> its number of input axes (the weights are (in..., out...) per layer, stacked over layers)
QUANTIZED = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "w_gate": 1, "w_up": 1, "w_down": 1}


@functools.partial(jax.tree_util.register_dataclass, data_fields=("q",), meta_fields=("shape",))
@dataclasses.dataclass(frozen=True)
class QuantizedMatrix:
    """A layer weight quantized for sampling: q a `qwix.QArray` (layers..., in, out) with its input axes flattened
    to `in` and its output axes to `out`; shape: one layer's weight shape (in..., out...). Slicing the leaves
    over the layer axis (`transformer.layer_list`, `lax.scan`) gives one layer's QuantizedMatrix."""

    q: qwix.QArray
    shape: tuple

    def dequantized(self, dtype):
        """The weight this stands for, in `dtype` (the product of values and scales in `dtype`, as
        `qwix.dot_general` dequantizes a float-activation product), in its own (layers..., in..., out...) shape."""
        return qwix.dequantize(self.q.astype(dtype)).reshape(self.q.shape[:-2] + self.shape)

    def out_in(self) -> qwix.QArray:
        """One layer's weight as an (out, in) QArray (scale (out, 1) per channel, or (out, in / group))."""
        if self.q.ndim != 2:
            raise ValueError(f"out_in needs one layer's weight; got {self.q.shape}")
        return self.q.T


def check_quant(cfg, quant: str, quant_group: int, kv_cache_dtype) -> None:
    """Raise ValueError naming the setting (`quant`, `quant_group`, `kv_cache_dtype`) that this model cannot take.

    int4 groups split each quantized weight's input dimension (hidden_size for q/k/v and gate/up, num_heads *
    head_dim for the output projection, intermediate_size for down), so `quant_group` must divide all three."""
    if quant not in QUANT_MODES:
        raise ValueError(f"quant={quant!r}; expected one of {QUANT_MODES}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}; expected None (the compute dtype) or 'int8'")
    if quant != "int4":
        return
    if isinstance(quant_group, bool) or not isinstance(quant_group, int) or quant_group < 1:
        raise ValueError(f"quant_group={quant_group!r}; expected an integer >= 1")
    sizes = {"hidden_size": cfg.hidden_size, "num_heads * head_dim": cfg.num_heads * cfg.head_dim,
             "intermediate_size": cfg.intermediate_size}
    bad = {k: v for k, v in sizes.items() if v % quant_group}
    if bad:
        fits = [g for g in (256, 128, 64, 32, 16) if all(v % g == 0 for v in sizes.values())]
        raise ValueError(f"quant_group={quant_group} does not divide {bad} (int4 groups split each weight's input "
                         f"dimension: {sizes}); groups that fit: {fits or 'none of 16..256'}")


def quantize_matrix(w, n_in: int, quant: str, group: int) -> QuantizedMatrix:
    """w (layers, in..., out...) with n_in input axes -> a QuantizedMatrix (absmax, from w in f32)."""
    layers, shape = w.shape[:1], w.shape[1:]
    flat = w.astype(jnp.float32).reshape(*layers, math.prod(shape[:n_in]), math.prod(shape[n_in:]))
    tiled = {1: group} if quant == "int4" else None
    q = qwix.quantize(flat, _QTYPES[quant], channelwise_axes=(0, 2), tiled_axes=tiled)
    return QuantizedMatrix(q, tuple(shape))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def quantized_params(params, cfg, quant: str, quant_group: int) -> dict:
    """params (merged: no `LoraWeight`) with the layer matrices as `QuantizedMatrix` and the embedding and head in
    the compute dtype (the dtype every product casts them to: the same results, read at half the bytes from an
    f32 policy). One compiled call; build it once per weight version."""
    layers = dict(params["layers"])
    for name, n_in in QUANTIZED.items():
        layers[name] = quantize_matrix(layers[name], n_in, quant, quant_group)
    cast = {k: params[k].astype(cfg.dtype) for k in ("embed", "lm_head") if k in params}
    return dict(params, layers=layers, **cast)


def is_quantized(w) -> bool:
    return isinstance(w, QuantizedMatrix)


def dense_params(params, dtype):
    """params with every `QuantizedMatrix` dequantized in `dtype` (the compute dtype); plain params unchanged."""
    if not any(is_quantized(w) for w in jax.tree.leaves(params, is_leaf=is_quantized)):
        return params
    return jax.tree.map(lambda w: w.dequantized(dtype) if is_quantized(w) else w, params, is_leaf=is_quantized)


def project(w: qwix.QArray, x, out_dtype):
    """A quantized (out, in) weight times activations x (in, B), accumulating in f32, rounded to out_dtype.

    Per-channel scales (int8) factor out of the sum: the int8 values (exact in bf16) are contracted with x and the
    (out, 1) scales multiply the f32 accumulator, the weight is never formed. Hand-written because
    `qwix.dot_general` with a float activation always dequantizes the weight first (its product-then-scale path
    needs both operands quantized, i.e. int8 activations too, which is another model). Grouped scales (int4) vary
    along the contraction and cannot factor out of one product, so those go through `qwix.dot_general`, which
    dequantizes in x's dtype (as `dense_params` does) and contracts.
    In the decode while_loop the int8 -> compute-dtype conversion (and int4's dequantization) is loop-invariant, and
    XLA:CPU hoists it out of the loop: the loop then multiplies a converted copy made once per decode call, at
    full-precision speed (docs/sampling.md, "Quantized sampling")."""
    if w.scale.shape[-1] == 1:
        acc = jnp.matmul(w.qvalue.astype(x.dtype), x, preferred_element_type=jnp.float32) * w.scale
    else:
        acc = qwix.dot_general(w.astype(x.dtype), x, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return acc.astype(out_dtype)


def concat_out(ws):
    """(out_i, in) weights, plain or quantized, concatenated along out (their scales with them)."""
    if isinstance(ws[0], qwix.QArray):
        return jax.tree.map(lambda *a: jnp.concatenate(a), *ws)
    return jnp.concatenate(ws)


def empty_kv(shape) -> qwix.QArray:
    """An empty int8 K or V buffer (B, KV, S, Dh) with its per-slot scales (B, KV, S, 1)."""
    return qwix.QArray(jnp.zeros(shape, jnp.int8), jnp.zeros(shape[:-1] + (1,), jnp.float32))


def quantize_kv(x) -> qwix.QArray:
    """K or V entries x (B, KV, T, Dh) -> int8 values and f32 scales (B, KV, T, 1), absmax over head_dim."""
    return qwix.quantize(x.astype(jnp.float32), jnp.int8, channelwise_axes=(0, 1, 2))


def dequantize_kv(buf: qwix.QArray, dtype):
    """An int8 cache buffer (or a slice of it) -> values in `dtype` (products in f32, rounded once)."""
    return qwix.dequantize(buf).astype(dtype)


def is_int8_kv(buf) -> bool:
    return isinstance(buf, qwix.QArray)
