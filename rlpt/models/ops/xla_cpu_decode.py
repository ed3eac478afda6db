"""The XLA:CPU backend's decode step: activations laid out feature-major, (features, rows), weights as (out, in).

A decode step multiplies a few dozen rows by every weight matrix. XLA:CPU runs those products up to ~1.8x
faster as (out, in) weights times (in, rows) activations than as (rows, in) times (in, out): the 8 MLPs of the
sampler benchmark's model at 32 rows take 5.7 ms against 9.2-10.2 ms (2-core AVX2 CPU, docs/benchmarks.md),
and a transpose around each product alone does not get there (7.3 ms: XLA folds it back into the dot). So the
residual stream stays (D, B) through the layers; only the small per-row pieces (q, k, v and the attention
output, (B, heads, Dh)) are transposed (into their own buffers, `materialized`), and the attention over
the cache is the model's own (`cached_attend`).
The math is `transformer.hidden_states` with a cache (same dtypes, roundings and cache writes), up to the
summation order of the products.
"""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import qwix

from rlpt.models import quant
from rlpt.models.config import DTYPES, ModelConfig
from rlpt.models.ops.lora import LoraWeight
from rlpt.models.ops.xla_cpu import gate_up_dtype, materialized, rms_normalize, swiglu
from rlpt.models.rope import rope_cos_sin
from rlpt.models.transformer import cached_attend, layer_list, over_cache, qkv_tail
from rlpt.parallel.rules import constrain

COLUMNS = ("act_embed", "batch")  # logical axes of a (D, B) activation


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeLayout:
    """`decode_params`' weights, marked as such: the sampler's decode loop (`rlpt.sampling.engine.decode`) runs
    `decode_logits` on these and the model's own cached forward on plain params."""

    weights: dict


@functools.partial(jax.jit, static_argnums=1)
def decode_layout(params, cfg: ModelConfig) -> DecodeLayout:
    """`decode_params` in one compiled call (a copy of every weight: build it once per weight version)."""
    return DecodeLayout(decode_params(params, cfg))


def decode_params(params, cfg: ModelConfig) -> dict:
    """The weights as `decode_logits` reads them: per-layer dicts (a list), each projection (out, in) in the
    compute dtype, out-side biases and norm scales as (features, 1) columns; q/k/v biases and QK norms keep
    their (heads, Dh) layout (they apply after the transpose to rows); a `LoraWeight` is merged; a
    `quant.QuantizedMatrix` (`quant.quantized_params`) becomes an (out, in) `qwix.QArray` that `project`
    contracts. Build once per weight version: outside a decode loop, not inside it (every step would copy every
    weight)."""
    dt = cfg.dtype

    def out_in(w, n_in):  # (in..., out...) with n_in input axes -> (out, in), in the compute dtype
        if quant.is_quantized(w):
            return w.out_in()
        w = w.merged() if isinstance(w, LoraWeight) else w
        return w.reshape(math.prod(w.shape[:n_in]), -1).T.astype(dt)

    def col(b, dtype=dt):
        return b.reshape(-1, 1).astype(dtype)

    layers = []
    for lp in layer_list(params["layers"]):
        fm = {"wqkv": quant.concat_out([out_in(lp[w], 1) for w in ("wq", "wk", "wv")]),
              "wo": out_in(lp["wo"], 2),
              "w_gate_up": quant.concat_out([out_in(lp[w], 1) for w in ("w_gate", "w_up")]),
              "w_down": out_in(lp["w_down"], 1), "attn_norm": col(lp["attn_norm"]), "mlp_norm": col(lp["mlp_norm"])}
        fm |= {k: lp[k] for k in ("bq", "bk", "bv", "q_norm", "k_norm") if k in lp}
        fm |= {k: col(lp[k]) for k in ("bo", "b_down") if k in lp}
        # at 16 bits the gate/up biases add to the f32 accumulators in their own dtype, as `xla_cpu.add_bias` does there
        fm |= {k: col(lp[k], lp[k].dtype) for k in ("b_gate", "b_up") if k in lp}
        layers.append(fm)
    head = params["embed"] if cfg.tie_embeddings else params["lm_head"].T  # (V, D)
    return {"embed": params["embed"], "layers": layers, "final_norm": col(params["final_norm"]),
            "head": head.astype(dt)}


def _norm(x, w, eps):
    """`transformer.rms_norm` of x (D, B) over its features, scale w (D, 1)."""
    return w * rms_normalize(x, eps, axis=0)


def project(w, x, out_dtype):
    """(out, in) @ (in, B) accumulating in f32, rounded to out_dtype; a quantized w (a `qwix.QArray`) by
    `quant.project`."""
    if isinstance(w, qwix.QArray):
        return quant.project(w, x, out_dtype)
    return jnp.matmul(w, x, preferred_element_type=jnp.float32).astype(out_dtype)


def _mlp(cfg, lp, h):
    gate, up = jnp.split(project(lp["w_gate_up"], h, gate_up_dtype(cfg.dtype)), 2)
    if cfg.mlp_bias:
        gate, up = gate + lp["b_gate"].astype(gate.dtype), up + lp["b_up"].astype(up.dtype)
    out = project(lp["w_down"], constrain(swiglu(gate, up, cfg.dtype), ("act_mlp", "batch")), cfg.dtype)
    return out + lp["b_down"] if cfg.mlp_bias else out


def decode_logits(dparams, cfg: ModelConfig, tokens, positions, segment_ids, cache, window=None):
    """Logits in cfg.logits_dtype of new tokens, and the new cache: tokens, positions, segment_ids (B,) (one token
    per row: logits (B, V)) or (B, T) (T tokens per row, e.g. a speculative verification: logits (B, T, V)).

    dparams: `decode_params`; cache: `init_cache`'s, the tokens written from cache["index"] (B,), as
    `hidden_states(..., cache=cache, cache_window=window)` does; the B * T tokens are the columns."""
    single = tokens.ndim == 1
    if single:
        tokens, positions, segment_ids = tokens[:, None], positions[:, None], segment_ids[:, None]
    x, new_cache = decode_blocks(dparams, cfg, decode_embed(dparams, cfg, tokens), positions, segment_ids, cache,
                                 window)
    logits = decode_head(dparams, cfg, x, positions)
    return (logits if single else logits.reshape(*tokens.shape, -1)), new_cache


def decode_embed(dparams, cfg: ModelConfig, tokens):
    """The input columns (D, B * T) of tokens (B, T), row-major (token t of row b is column b * T + t)."""
    return constrain(jnp.take(dparams["embed"], tokens.reshape(-1), axis=0).astype(cfg.dtype).T, COLUMNS)


def _own(positions):
    """fn() in its own buffers (`materialized`), where XLA would fold the transpose into the matmul."""
    again = jnp.min(positions) < 0  # never true for a decoded token: `materialized` runs once
    return lambda fn: materialized(fn, again)


def decode_blocks(dparams, cfg: ModelConfig, x, positions, segment_ids, cache, window=None, layers=slice(None)):
    """Columns x (D, B * T) through the decoder layers `layers` (a slice of them: a self-draft runs the first
    ones, its verification the rest) over their cache buffers; positions, segment_ids (B, T). Returns (x, the cache
    with those layers' K/V, the T tokens' positions and segments written at cache["index"], index advanced by T)."""
    dt, eps = cfg.dtype, cfg.rms_norm_eps
    (B, T), H, KV, Dh = positions.shape, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pos, seg = positions.astype(jnp.int32), segment_ids.astype(jnp.int32)
    cos, sin = rope_cos_sin(cfg, pos)
    own = _own(pos)

    def rows(q, k, v):  # (heads * Dh, B * T) each -> (B, T, heads, Dh), transposed in their own buffers
        return own(lambda: tuple(a.T.reshape(B, T, -1, Dh) for a in (q, k, v)))

    def block(x, lp, lc, index):
        h = _norm(x, lp["attn_norm"], eps)
        q, k, v = rows(*jnp.split(project(lp["wqkv"], h, dt), (H * Dh, (H + KV) * Dh)))
        q, k, v = qkv_tail(cfg, lp, q, k, v, cos, sin)
        out, new = cached_attend(cfg, q, k, v, pos, seg, lc, index, window)
        attn = project(lp["wo"], out.reshape(B * T, H * Dh).T, dt)
        x = constrain(x + (attn + lp["bo"] if cfg.o_bias else attn), COLUMNS)
        return constrain(x + _mlp(cfg, lp, _norm(x, lp["mlp_norm"], eps)), COLUMNS), new

    return over_cache(block, x, dparams["layers"], pos, seg, cache, window, layers)


def decode_head(dparams, cfg: ModelConfig, x, positions):
    """Logits (B * T, V) in cfg.logits_dtype of the last layer's columns x (D, B * T) (positions (B, T))."""
    h = _norm(x, dparams["final_norm"], cfg.rms_norm_eps)
    logits = project(dparams["head"], h, DTYPES[cfg.logits_dtype])  # (V, B * T)
    return constrain(_own(positions)(lambda: logits.T), ("batch", "act_vocab"))
