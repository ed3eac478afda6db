"""The jitted pieces of generation: prefill, the decode while_loop, continuation and row insertion."""
import functools

import jax
import jax.numpy as jnp

from rlpt.models.ops import resolved_ops
from rlpt.models.ops.xla_cpu_decode import DecodeLayout, decode_layout, decode_logits
from rlpt.models.quant import dense_params, quantized_params
from rlpt.models.transformer import hidden_states, init_cache, logits_from_hidden, merged_params
from rlpt.sampling.methods import row_uniforms, sample
from rlpt.sampling.sharding import constrain_cache
from rlpt.sampling.state import CACHE_FULL, LENGTH, RUNNING, STOP, SamplingState, empty_state


def emit(state: SamplingState, logits, methods: tuple, stop_ids: tuple) -> SamplingState:
    """Draw the next token of every live row from its logits (B, V) and record it; finished rows keep theirs."""
    active = ~state.done
    uniforms = row_uniforms(state.rng, state.row_ids, state.lengths)
    token, sampling_lp, raw_lp = sample(methods, logits, uniforms)
    B, N = state.tokens.shape
    rows, col = jnp.arange(B), jnp.minimum(state.lengths, N - 1)

    def put(buf, value):
        return buf.at[rows, col].set(jnp.where(active, value, buf[rows, col]))

    lengths = state.lengths + active
    stop = active & jnp.isin(token, jnp.asarray(stop_ids, jnp.int32)) if stop_ids else jnp.zeros_like(active)
    at_limit = active & ~stop & (lengths >= state.max_new)
    # The token just drawn needs a free slot in the next step; without one the row cannot go on.
    full = active & ~stop & ~at_limit & (state.cache["index"] >= state.capacity)
    finish = jnp.where(stop, STOP, jnp.where(at_limit, LENGTH, jnp.where(full, CACHE_FULL, state.finish)))
    return state.replace(tokens=put(state.tokens, token), logprobs=put(state.logprobs, sampling_lp),
                         raw_logprobs=put(state.raw_logprobs, raw_lp), lengths=lengths,
                         last_token=jnp.where(active, token, state.last_token),
                         done=state.done | stop | at_limit | full, finish=finish)


def _last_logits(params, cfg, hidden, lengths):
    """Logits (B, V) at position lengths-1 of hidden (B, T, D); the head runs on one position per row."""
    last = jnp.take_along_axis(hidden, jnp.maximum(lengths - 1, 0)[:, None, None], axis=1)
    return logits_from_hidden(params, cfg, last)[:, 0]


@functools.partial(jax.jit, static_argnames=("cfg", "methods", "stop_ids", "n", "cache_len", "width",
                                             "kv_cache_dtype"))
def prefill(params, tokens, prompt_lengths, max_new, rng, row_ids, *, cfg, methods, stop_ids, n, cache_len, width,
            kv_cache_dtype=None, prefix=None, embeds=None):
    """Run right-padded prompts (B, T) through the model once and draw each row's first token.

    Returns the state of B * n rows (prompt-major): the prompt's cache is broadcast to its n samples.
    max_new and row_ids (B * n,), rng (2,) uint32 key data; cache_len slots per row (the last one is scratch).
    params: the model's, or `sampler_params` (quantized weights run dequantized in the compute dtype: the first
    token's log-prob is the quantized sampler's own). kv_cache_dtype: `init_cache`'s (None or "int8").
    prefix: `prefix_kv`'s K/V of P tokens every prompt starts with (then `tokens` are the prompts after them,
    prompt_lengths theirs): copied into slots 0..P-1 of every row, not recomputed.
    embeds (B, T, D): the prompts' input embeddings instead of the token lookup (a VLM's, images spliced in at
    their image tokens, rlpt.models.vision); decoding reads the images from the cache, never recomputes them.
    """
    B, T = tokens.shape
    params = dense_params(params, cfg.dtype)
    segments = (jnp.arange(T)[None] < prompt_lengths[:, None]).astype(jnp.int32)
    cache = init_cache(cfg, B, cache_len, kv_cache_dtype)
    P = 0 if prefix is None else jax.tree.leaves(prefix)[0].shape[1]
    if prefix is not None:
        cache = _with_prefix(cache, prefix, P)
    # The prompts fill slots 0..P+T-1 only: attending to those (not the whole cache_len) keeps the scores at
    # T x (P + T) (the rest are empty, masked slots: the same softmax).
    positions = P + jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    hidden, cache = hidden_states(params, cfg, tokens, positions, segments, cache=cache,
                                  cache_window=P + T if P + T < cache_len else None, embeds=embeds)
    logits = _last_logits(params, cfg, hidden, prompt_lengths)
    # Padding went into slots len..T-1 as segment 0; pointing index at len lets decoding overwrite them.
    prompt_lengths = prompt_lengths + P
    cache = dict(cache, index=prompt_lengths.astype(jnp.int32))
    if n > 1:
        cache = jax.tree.map(lambda x: jnp.repeat(x, n, axis=0), cache)
        logits, prompt_lengths = jnp.repeat(logits, n, axis=0), jnp.repeat(prompt_lengths, n)
    state = empty_state(constrain_cache(cache), B * n, width, max_new, rng, row_ids)
    state = state.replace(positions=prompt_lengths.astype(jnp.int32))
    return emit(state, logits, methods, stop_ids)


def _with_prefix(cache, prefix, P):
    """`init_cache`'s cache with the prefix's K/V (per layer (KV, P, Dh), an int8 cache's values and scales alike)
    in slots 0..P-1 of every row, as positions 0..P-1 of segment 1, and every row's index at P."""
    B = cache["index"].shape[0]

    def put(buf, kv):
        return buf.at[:, :, :P].set(jnp.broadcast_to(kv[None], (B,) + kv.shape).astype(buf.dtype))

    k = tuple(jax.tree.map(put, buf, kv) for buf, kv in zip(cache["k"], prefix["k"], strict=True))
    v = tuple(jax.tree.map(put, buf, kv) for buf, kv in zip(cache["v"], prefix["v"], strict=True))
    return dict(cache, k=k, v=v, positions=cache["positions"].at[:, :P].set(jnp.arange(P, dtype=jnp.int32)),
                segment_ids=cache["segment_ids"].at[:, :P].set(1), index=jnp.full((B,), P, jnp.int32))


@functools.partial(jax.jit, static_argnames=("cfg", "kv_cache_dtype"))
def prefix_kv(params, tokens, *, cfg, kv_cache_dtype=None):
    """The K/V (in the cache's stored form) of the tokens (P,) at positions 0..P-1: {"k", "v"}: per layer (KV, P,
    Dh) (an int8 cache: its values and scales), what `prefill(prefix=...)` copies into every row."""
    params = dense_params(params, cfg.dtype)
    cache = init_cache(cfg, 1, tokens.shape[0], kv_cache_dtype)
    _, cache = hidden_states(params, cfg, tokens[None], None, None, cache=cache)
    first = functools.partial(jax.tree.map, lambda x: x[0])
    return {"k": tuple(first(k) for k in cache["k"]), "v": tuple(first(v) for v in cache["v"])}


def decode_weights(model, *, quant="none", quant_group=128):
    """The weights `decode` reads for `model`, chosen once per generation by the model's ops backend
    (`rlpt.models.ops.resolved_ops`, which honours `compiling_for`): with `xla_cpu` (CPU by default) the
    feature-major `DecodeLayout` (a copy of every weight, measured faster on XLA:CPU), built once per weight
    version and kept on the model (`Model.derived`); with `reference` (other backends by default) the
    params as they are (decode runs the model's own cached forward; the per-layer slices fuse into its matmuls),
    except that matrices stored wider than the compute dtype (an f32 policy sampled in bf16) are cast once per
    weight version, not read wide and converted at every decoded token.
    quant "int8" / "int4": the same from `sampler_params`' quantized weights (on CPU a DecodeLayout of int8 /
    int4 (out, in) weights that `xla_cpu_decode.project` contracts; elsewhere the quantized params, which the model's
    forward reads dequantized)."""
    cpu_layout = resolved_ops(model.config) == "xla_cpu"
    if quant != "none":
        qparams = sampler_params(model, quant, quant_group)
        if cpu_layout:
            return model.derived(f"decode_layout_{_quant_key(quant, quant_group)}",
                                 lambda _, cfg: decode_layout(qparams, cfg))
        return qparams
    if cpu_layout:
        return model.derived("decode_layout", decode_layout)
    if all(jnp.dtype(model.params["layers"][w].dtype) == jnp.dtype(model.config.dtype) for w in _MATRICES):
        return model.params
    return model.derived("decode_matrices", _matrices_in_compute_dtype)


_MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # the layers' weights `dense` contracts


def sampler_params(model, quant="none", quant_group=128):
    """The params prefill and append run for `quant`: model.params ("none"), or its layer matrices quantized
    (`rlpt.models.quant.quantized_params`: "int8" per output channel, "int4" per group of quant_group inputs),
    built once per weight version and kept on the model (`Model.derived`)."""
    if quant == "none":
        return model.params
    return model.derived(f"quantized_{_quant_key(quant, quant_group)}",
                         lambda params, cfg: quantized_params(merged_params(params), cfg, quant, quant_group))


def _quant_key(quant, quant_group):
    return f"{quant}_g{quant_group}" if quant == "int4" else quant


def _matrices_in_compute_dtype(params, cfg):
    """params with the embedding, head and layer matrices in the compute dtype, the dtype `dense` and the embedding
    lookup cast them to anyway (the same results); norms and biases keep theirs (f32 bias adds stay f32)."""
    params = merged_params(params)
    cast = {k: params[k].astype(cfg.dtype) for k in ("embed", "lm_head") if k in params}
    layers = dict(params["layers"], **{w: params["layers"][w].astype(cfg.dtype) for w in _MATRICES})
    return dict(params, layers=layers, **cast)


def _step_logits(weights, cfg, tokens, positions, segment_ids, cache, window):
    """Logits (B, V) of one new token per row (B,) and the new cache: `decode_logits` on a `DecodeLayout`, the
    model's cached forward (T = 1, as prefill and append run it) on plain params (quantized ones dequantized)."""
    if isinstance(weights, DecodeLayout):
        return decode_logits(weights.weights, cfg, tokens, positions, segment_ids, cache, window)
    weights = dense_params(weights, cfg.dtype)
    hidden, cache = hidden_states(weights, cfg, tokens[:, None], positions[:, None], segment_ids[:, None],
                                  cache=cache, cache_window=window)
    return logits_from_hidden(weights, cfg, hidden)[:, 0], cache


def decode_step(weights, cfg, methods, stop_ids, state: SamplingState, window=None) -> SamplingState:
    """Write every live row's last token into the cache and draw the next one.

    weights: `decode_weights(model)` (see `decode`); window: attend to the first `window` cache slots only (they
    must hold every slot written so far and in this step).
    """
    active = ~state.done
    logits, cache = _step_logits(weights, cfg, state.last_token, state.positions, active.astype(jnp.int32),
                                 state.cache, window)
    # Finished rows wrote a segment-0 (invisible) token into their next free slot; do not advance them.
    cache = constrain_cache(dict(cache, index=jnp.where(active, cache["index"], state.cache["index"])))
    state = state.replace(cache=cache, positions=state.positions + active, step=state.step + 1)
    return emit(state, logits, methods, stop_ids)


@functools.partial(jax.jit, static_argnames=("cfg", "methods", "stop_ids", "window"), donate_argnames=("state",))
def decode(weights, state: SamplingState, target_done, max_steps, *, cfg, methods, stop_ids,
           window=None) -> SamplingState:
    """Decode until at least target_done rows are done or max_steps steps ran (both dynamic scalars).

    weights: `decode_weights(model)`, made once per weight version, not per call. window (static): attention
    reads the first `window` cache slots only; the caller guarantees that every row's index stays below it for
    these max_steps steps (`generate` decodes in phases of growing windows)."""
    def cond(carry):
        s, k = carry
        return (jnp.sum(s.done) < target_done) & (k < max_steps)

    def body(carry):
        s, k = carry
        return decode_step(weights, cfg, methods, stop_ids, s, window), k + 1

    state, _ = jax.lax.while_loop(cond, body, (state, jnp.zeros((), jnp.int32)))
    return state


@functools.partial(jax.jit, static_argnames=("cfg", "methods", "stop_ids", "width"), donate_argnames=("state",))
def append(params, state: SamplingState, feed, feed_lengths, max_new, *, cfg, methods, stop_ids, width,
           embeds=None):
    """Continue rows with right-padded tokens feed (B, Ta): each live row's feed starts with its last token.

    Rows with feed_lengths 0 stay finished. Returns a state with fresh (B, width) buffers whose first
    token is drawn after the feed; the prefix already in the cache is not recomputed. embeds (B, Ta, D): the
    feed's input embeddings instead of the token lookup (a VLM's new images spliced in at their image tokens).
    """
    B, Ta = feed.shape
    params = dense_params(params, cfg.dtype)
    live = feed_lengths > 0
    segments = (jnp.arange(Ta)[None] < feed_lengths[:, None]).astype(jnp.int32)
    positions = state.positions[:, None] + jnp.arange(Ta, dtype=jnp.int32)[None]
    hidden, cache = hidden_states(params, cfg, feed, positions, segments, cache=state.cache, embeds=embeds)
    logits = _last_logits(params, cfg, hidden, feed_lengths)
    cache = constrain_cache(dict(cache, index=state.cache["index"] + feed_lengths))
    # A fresh random stream per turn (token t of turn 2 must not reuse turn 1's draw for token t).
    rng = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(state.rng), 1))
    new = empty_state(cache, B, width, max_new, rng, state.row_ids)
    new = new.replace(positions=state.positions + feed_lengths, last_token=state.last_token, done=~live,
                      finish=jnp.where(live, RUNNING, state.finish), step=state.step)
    return emit(new, logits, methods, stop_ids)


@functools.partial(jax.jit, donate_argnames=("state",))
def insert_rows(state: SamplingState, new: SamplingState, slots) -> SamplingState:
    """Put the rows of `new` (k rows) into `state` at rows `slots` (k,); an out-of-range slot drops its row."""
    def put(axis):
        def f(dst, src):
            index = (slice(None),) * axis + (slots,)
            return dst.at[index].set(src, mode="drop")
        return f

    cache = jax.tree.map(put(0), state.cache, new.cache)
    fields = ("tokens", "logprobs", "raw_logprobs", "last_token", "positions", "lengths", "max_new", "done",
              "finish", "row_ids")
    return state.replace(cache=cache, **{f: put(0)(getattr(state, f), getattr(new, f)) for f in fields})
