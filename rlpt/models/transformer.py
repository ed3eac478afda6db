"""The decoder-only transformer (Llama 2/3, Qwen2/2.5/3) as pure functions of a parameter pytree.

Read top to bottom: parameters (`param_axes`, `init_params`), the attention and MLP blocks, the layer stack
(`hidden_states`, layers stacked for `lax.scan`), the head (`logits_from_hidden`, `forward`) and the KV cache
(`init_cache`). Features: RMSNorm, RoPE (`rlpt.models.rope`), grouped-query attention, QKV / output / MLP biases,
QK-norm, sliding windows, tied embeddings, LoRA weights applied in the forward pass (`LoraWeight`).

Every numeric primitive comes from `ops_for(cfg)` (`rlpt.models.ops`): plain jnp on GPU/TPU (`ops.reference`),
XLA:CPU's measured rewrites of the same math on CPU (`ops.xla_cpu`), chosen once by `model.ops`. Attention other
than the built-in "dense" one comes from `rlpt.kernels` (`model.attention_impl`).
"""
import functools

import jax
import jax.numpy as jnp

from rlpt import kernels
from rlpt.models.config import DTYPES, ModelConfig, resolved_attention_impl, resolved_remat
from rlpt.models.ops import ops_for
from rlpt.models.ops.lora import LoraWeight, merged_params  # noqa: F401  (re-exported: the model's weight types)
from rlpt.models.ops.reference import write_rows
from rlpt.models.quant import empty_kv
from rlpt.models.rope import apply_rope, rope_cos_sin
from rlpt.parallel.rules import constrain

ACT = ("batch", "act_seq", "act_embed")


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


def dense(cfg: ModelConfig, eq, x, w, out_dtype=None):
    """einsum(eq, x, w) in the compute dtype accumulating in f32, rounded to out_dtype (default: the compute
    dtype); w may be a `LoraWeight`."""
    return ops_for(cfg).dense(eq, x, w, cfg.dtype, out_dtype)


def rms_norm(cfg: ModelConfig, x, weight):
    return ops_for(cfg).rms_norm(x, weight, cfg.rms_norm_eps)


# ---- attention ----

def _project_qkv(cfg, lp, x, cos, sin):
    """q (B, T, H, Dh), k and v (B, T, KV, Dh) of x (B, T, D): projections, biases, QK norm, RoPE."""
    q = dense(cfg, "btd,dhk->bthk", x, lp["wq"])
    k = dense(cfg, "btd,dhk->bthk", x, lp["wk"])
    v = dense(cfg, "btd,dhk->bthk", x, lp["wv"])
    return qkv_tail(cfg, lp, q, k, v, cos, sin)


def qkv_tail(cfg, lp, q, k, v, cos, sin):
    """What follows the q/k/v projections (B, T, heads, Dh): biases, QK norm, RoPE."""
    ops = ops_for(cfg)
    if cfg.qkv_bias:
        q, k, v = ops.add_bias(q, lp["bq"]), ops.add_bias(k, lp["bk"]), ops.add_bias(v, lp["bv"])
    if cfg.qk_norm:
        q, k = rms_norm(cfg, q, lp["q_norm"]), rms_norm(cfg, k, lp["k_norm"])
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return constrain(q, ("batch", "act_seq", "act_heads", "act_head_dim")), k, v


def _output_projection(cfg, lp, out):
    out = dense(cfg, "bthk,hkd->btd", out, lp["wo"])
    return ops_for(cfg).add_bias(out, lp["bo"]) if cfg.o_bias else out


def _attention(cfg, q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, self_attention=False):
    """Cache-less causal attention of q over k/v (B, S, KV, Dh): the ops' own ("dense") or a kernel, by
    cfg.attention_impl; self_attention: q and k/v are the same columns."""
    impl, ops = resolved_attention_impl(cfg), ops_for(cfg)
    if impl == "dense" and self_attention:
        return ops.self_attention(q, k, v, q_positions, q_segment_ids, sliding_window=cfg.sliding_window)
    if impl == "dense":
        return ops.attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids,
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
    q, k = ops_for(cfg).attention_inputs(q, k)
    out = _attention(cfg, q, k, v, positions, positions, segment_ids, segment_ids, self_attention=True)
    return _output_projection(cfg, lp, out), None


def cached_attend(cfg, q, k, v, positions, segment_ids, kv_cache, cache_index, window=None):
    """Write k/v (B, T, KV, Dh) into one layer's cache at cache_index (B,) and attend q (B, T, H, Dh) to its
    first `window` slots: (out (B, T, H, Dh), the layer's new {"k", "v"} buffers)."""
    ops = ops_for(cfg)  # the cache is (B, KV, S, Dh) in the ops' stored form, or int8 with per-slot scales
    kk = ops.cache_write(kv_cache["k"], k.transpose(0, 2, 1, 3), cache_index)
    vv = ops.cache_write(kv_cache["v"], v.transpose(0, 2, 1, 3), cache_index)
    w = slice(None, window)
    out = ops.cached_attention(q, ops.cache_load(kk[:, :, w], cfg.dtype), ops.cache_load(vv[:, :, w], cfg.dtype),
                               positions, kv_cache["positions"], segment_ids, kv_cache["segment_ids"],
                               sliding_window=cfg.sliding_window)
    return out, {"k": kk, "v": vv}


# ---- MLP and block ----

def _mlp_block(cfg, lp, x):
    ops = ops_for(cfg)
    acc = ops.gate_up_dtype(cfg.dtype)  # the reference: the compute dtype; on CPU at 16 bits: the f32 accumulators
    gate = dense(cfg, "btd,df->btf", x, lp["w_gate"], acc)
    up = dense(cfg, "btd,df->btf", x, lp["w_up"], acc)
    if cfg.mlp_bias:
        gate, up = ops.add_bias(gate, lp["b_gate"]), ops.add_bias(up, lp["b_up"])
    h = constrain(ops.swiglu(gate, up, cfg.dtype), ("batch", "act_seq", "act_mlp"))
    out = dense(cfg, "btf,fd->btd", h, lp["w_down"])
    return ops.add_bias(out, lp["b_down"]) if cfg.mlp_bias else out


def _block(cfg, x, lp, cos, sin, positions, segment_ids, kv_cache, cache_index, window=None):
    h = rms_norm(cfg, x, lp["attn_norm"])
    attn, new_cache = _attention_block(cfg, lp, h, cos, sin, positions, segment_ids, kv_cache, cache_index,
                                       window)
    return _residual_mlp(cfg, lp, x, attn), new_cache


def _residual_mlp(cfg, lp, x, attn):
    """The rest of a block after attention: residual add, then the MLP on the post-attention norm."""
    x = constrain(x + attn, ACT)
    x = x + _mlp_block(cfg, lp, rms_norm(cfg, x, lp["mlp_norm"]))
    return constrain(x, ACT)


# ---- the layer stack ----

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
    x = embed_tokens(params, cfg, tokens) if embeds is None else constrain(embeds.astype(cfg.dtype), ACT)
    cos, sin = rope_cos_sin(cfg, positions)
    if cache is not None:
        x, new_cache = _cached_layers(params, cfg, x, cos, sin, positions, segment_ids, cache, cache_window)
        return rms_norm(cfg, x, params["final_norm"]), new_cache

    def body(x, lp):
        return _block(cfg, x, lp, cos, sin, positions, segment_ids, None, None)[0]

    x = _run_layers(cfg, body, x, params["layers"])
    return rms_norm(cfg, x, params["final_norm"]), None


def embed_tokens(params, cfg: ModelConfig, tokens):
    """The input embeddings (B, T, D) of tokens (B, T), in the compute dtype."""
    return constrain(jnp.take(params["embed"], tokens, axis=0).astype(cfg.dtype), ACT)


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
    the two results merge by their log-sum-exps (`kernels.attention_over_two_key_sets`).
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
    split = resolved_attention_impl(cfg) in kernels.SEQUENCE_SHARDED_IMPLS

    def rows_attention(qr, kp, vp, kr, vr):
        if split:  # each stream keeps its own column layout: attend to each, merge by log-sum-exp
            rep = functools.partial(jnp.repeat, repeats=group, axis=0)
            return kernels.attention_over_two_key_sets(
                qr, rp, rs, (rep(kp), rep(vp), rep(pp), rep(ps)), (kr, vr, rp, rs), sliding_window=cfg.sliding_window,
                impl=resolved_attention_impl(cfg))
        return _attention(cfg, qr, with_prefix(kp, kr), with_prefix(vp, vr), rp, kv_pos, rs, kv_seg)

    def body(carry, lp):
        xp, xr = carry
        qp, kp, vp = _project_qkv(cfg, lp, rms_norm(cfg, xp, lp["attn_norm"]), cos_p, sin_p)
        qr, kr, vr = _project_qkv(cfg, lp, rms_norm(cfg, xr, lp["attn_norm"]), cos_r, sin_r)
        att_p = _attention(cfg, qp, kp, vp, pp, pp, ps, ps, self_attention=True)
        att_r = rows_attention(qr, kp, vp, kr, vr)
        return tuple(_residual_mlp(cfg, lp, x, _output_projection(cfg, lp, att))
                     for x, att in ((xp, att_p), (xr, att_r)))

    _, xr = _run_layers(cfg, body, (xp, xr), params["layers"])
    return rms_norm(cfg, xr, params["final_norm"])


def layer_list(layers) -> list:
    """Per-layer parameter dicts from the stacked (L, ...) layer tree; a list passes through unchanged.

    A decode loop splits once, outside its loop body: slicing inside would copy every weight each step.
    """
    if isinstance(layers, (list, tuple)):
        return list(layers)
    num_layers = jax.tree.leaves(layers)[0].shape[0]
    return [jax.tree.map(lambda a, i=i: a[i], layers) for i in range(num_layers)]


def _cached_layers(params, cfg, x, cos, sin, positions, segment_ids, cache, window=None, which=slice(None)):
    """The layers over `init_cache`'s per-layer buffers, unrolled: each layer writes its own K/V buffer in place
    (a scan would slice and re-stack the whole cache every call). params["layers"] may be a `layer_list`.
    which: the layers to run (a slice; `cached_layers`)."""
    def block(x, lp, lc, index):
        return _block(cfg, x, lp, cos, sin, positions, segment_ids, lc, index, window)

    return over_cache(block, x, layer_list(params["layers"]), positions, segment_ids, cache, window, which)


def cached_layers(params, cfg: ModelConfig, x, positions, segment_ids, cache, which=slice(None)):
    """Hidden states x (B, T, D) entering layer `which.start` through the layers `which` selects, over their cache
    buffers (`over_cache`): (x after them, not normed; the new cache). A self-draft runs its first layers
    token by token and its verification the rest on the drafts' hidden states (`rlpt.sampling.speculative`)."""
    positions, segment_ids = positions.astype(jnp.int32), segment_ids.astype(jnp.int32)
    cos, sin = rope_cos_sin(cfg, positions)
    return _cached_layers(params, cfg, x, cos, sin, positions, segment_ids, cache, None, which)


def over_cache(block, x, layers, positions, segment_ids, cache, window=None, which=slice(None)):
    """x through block(x, layer_params, layer_cache, index) -> (x, {"k", "v"}) for each layer and its cache
    buffers (the layers `which` selects: a slice of them; the others' buffers are kept as they are); the cache's
    positions/segment ids take the new (B, T) entries at cache["index"] and the layers see them cut to `window`.
    Returns (x, the new cache, its index advanced by T)."""
    index = cache["index"]
    kv_positions = write_rows(cache["positions"], positions, index)
    kv_segments = write_rows(cache["segment_ids"], segment_ids, index)
    ks, vs = list(cache["k"]), list(cache["v"])
    if len(layers) != len(ks):
        raise ValueError(f"{len(layers)} layers' params for a cache of {len(ks)} layers")
    seen = {"positions": kv_positions[:, :window], "segment_ids": kv_segments[:, :window]}  # what attention reads
    for i in range(len(ks))[which]:
        x, new = block(x, layers[i], {"k": ks[i], "v": vs[i], **seen}, index)
        ks[i], vs[i] = new["k"], new["v"]
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
        logits = dense(cfg, "btd,vd->btv", hidden, params["embed"], DTYPES[cfg.logits_dtype])
    else:
        logits = dense(cfg, "btd,dv->btv", hidden, params["lm_head"], DTYPES[cfg.logits_dtype])
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
    kv_cache_dtype None: K/V in the compute dtype (`ops.xla_cpu` stores 16-bit floats as their uint16 bits);
    "int8": each buffer is a `qwix.QArray` of int8 values and f32 scales (B, KV, S, 1), one per (row, KV head,
    slot) (`rlpt.models.quant`).
    The caller keeps index + T <= max_len: inside jit a write past the end is clamped by XLA and would
    overwrite earlier slots (rlpt.sampling checks this on the host and reserves a scratch slot).
    """
    shape = (batch, cfg.num_kv_heads, max_len, cfg.head_dim)
    if kv_cache_dtype is None:
        make = functools.partial(jnp.zeros, shape, ops_for(cfg).cache_store_dtype(cfg.dtype))
    elif kv_cache_dtype == "int8":
        make = functools.partial(empty_kv, shape)
    else:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}; expected None (the compute dtype) or 'int8'")
    return {"k": tuple(make() for _ in range(cfg.num_layers)),
            "v": tuple(make() for _ in range(cfg.num_layers)),
            "positions": jnp.zeros((batch, max_len), jnp.int32),
            "segment_ids": jnp.zeros((batch, max_len), jnp.int32),
            "index": jnp.zeros((batch,), jnp.int32)}
