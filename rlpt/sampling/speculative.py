"""Speculative decoding: a small draft model proposes k tokens per row, the target checks them in one forward.

Each round, for every live row: the draft decodes k tokens from its own KV cache (d_1..d_k, each drawn from the
draft's sampling distribution q_i), the target runs the row's last token and the k drafts as one (k + 1)-token
forward over its KV cache, giving its sampling distributions p_0..p_k; draft i is kept while u_i < p(d_i) / q(d_i)
(modified rejection sampling, Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"),
and the row then takes one more token: from the residual max(0, p - q) (normalised) at the first rejection, or from
p_k when all k were kept. The tokens a row emits are distributed exactly as the target's own sampling
distribution (temperature, top-k/top-p/min-p as in `rlpt.sampling.generate`); with greedy they are the target's
argmax tokens. A round emits 1 to k + 1 tokens per row for one target forward.

Rejected drafts leave K/V in slots past the row's new cache index; the next round writes its k + 1 tokens from that
index, over all of them (and a causal mask by position hides them meanwhile). The draft decodes k + 1 steps per
round (the last one writes d_k into its cache, so it holds every kept token whatever the verdict).
Recorded log-probs are the target's: `Generation.logprobs` the raw policy's (temperature 1, no truncation),
`sampling_logprobs` those of the distribution the token follows; both come from the target's verification forward,
so they equal a teacher-forced pass up to float rounding, as plain sampling's do.
"""
import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlpt.models import Model
from rlpt.models.ops.xla_cpu_decode import DecodeLayout, decode_blocks, decode_embed, decode_head
from rlpt.models.transformer import (
    cached_layers,
    embed_tokens,
    layer_list,
    logits_from_hidden,
    merged_params,
    rms_norm,
)
from rlpt.sampling import engine
from rlpt.sampling.generate import (
    Generation,
    _mesh_scope,
    check_request,
    pad_prompts,
    plan_cache,
    seed_key,
    to_generation,
)
from rlpt.sampling.methods import Greedy, apply_methods, categorical, resolve_sampling, row_uniforms
from rlpt.sampling.sharding import constrain_cache
from rlpt.sampling.state import LENGTH, STOP, SamplingState

# Salts of the three random streams a round draws from (drafts, acceptance tests, replacement tokens); each
# draw is keyed by (row id, index of the token it decides), like plain sampling's.
_DRAFT, _ACCEPT, _RESIDUAL = 0x5D1, 0x5D2, 0x5D3


@dataclasses.dataclass
class SpeculativeGeneration(Generation):
    """A `Generation` plus the round counts: `proposed` drafts checked, `accepted` of them kept (both over live
    rows), `rounds` target forwards after the prefill."""

    proposed: int = 0
    accepted: int = 0
    rounds: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Fraction of the drafts the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per target forward, over all rows (the prefill's first token not counted)."""
        return float(np.sum(np.maximum(self.lengths - 1, 0))) / max(self.rounds, 1)


@flax.struct.dataclass
class SpeculativeState:
    target: SamplingState
    draft_cache: dict
    proposed: jax.Array  # () int32
    accepted: jax.Array  # () int32
    rounds: jax.Array  # () int32


def _stream(rng, salt: int):
    return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(rng), salt))


def _draw(methods, logits, uniforms):
    """Tokens (B,) from sampling-distribution logits (B, V) (already through the methods)."""
    if any(isinstance(m, Greedy) for m in methods):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return categorical(jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True)), uniforms)


def _at(x, tokens):
    return jnp.take_along_axis(x, tokens[..., None], axis=-1)[..., 0]


def _propose(methods, state: SamplingState, k: int, step):
    """k drafts per row (B, k) and their sampling-distribution log-probs (B, k, V). step(i, token) feeds token
    (B,) at index i of the round to the draft (which keeps its cache) and returns its logits (B, V); it is called
    k + 1 times: the last call writes d_k, and its logits are not computed (nothing reads them)."""
    stream = _stream(state.rng, _DRAFT)
    token, drafts, logq = state.last_token, [], []
    for i in range(k + 1):
        logits = step(i, token)
        if i == k:
            break
        adjusted = apply_methods(methods, logits)
        token = _draw(methods, adjusted, row_uniforms(stream, state.row_ids, state.lengths + i))
        drafts.append(token)
        logq.append(jax.nn.log_softmax(adjusted, axis=-1))
    return jnp.stack(drafts, 1), jnp.stack(logq, 1)


def _draft_round(dweights, dcfg, methods, state: SamplingState, dcache, k: int):
    """`_propose` with a separate draft: its drafts, their log-probs and its cache with last_token and d_1..d_k
    written."""
    seg = (~state.done).astype(jnp.int32)
    caches = [dcache]

    def step(i, token):
        logits, cache = engine._step_logits(dweights, dcfg, token, state.positions + i, seg, caches[-1], None)
        caches.append(cache)
        return logits

    drafts, logq = _propose(methods, state, k, step)
    return drafts, logq, caches[-1]


def _target_logits(params, cfg, state: SamplingState, drafts):
    """The target's logits (B, k + 1, V) of each row's last token and its k drafts (B, k), as one (k + 1)-token
    forward over its cache, and the cache after it."""
    feed = jnp.concatenate([state.last_token[:, None], drafts], axis=1)
    positions, segments = _feed_slots(state, feed.shape[1])
    x, cache = _layers(params, cfg, _embed(params, cfg, feed), positions, segments, state.cache, slice(None))
    return _head(params, cfg, x, positions), cache


def _feed_slots(state: SamplingState, T: int):
    """positions and segment ids (B, T) of T tokens fed to every row from its next free slot (live rows only)."""
    positions = state.positions[:, None] + jnp.arange(T, dtype=jnp.int32)[None]
    return positions, jnp.broadcast_to((~state.done)[:, None], positions.shape).astype(jnp.int32)


# LayerSkip-style self-speculation (Elhoushi et al. 2024, "LayerSkip: Enabling Early Exit Inference and
# Self-Speculative Decoding"): the draft is the target's first E layers with its final norm and head. Its steps
# write those E layers' K/V straight into the target's cache (the same weights on the same tokens: the K/V the
# target would write), and the verification runs only the remaining layers, on the hidden states the draft's
# steps left after layer E. No draft cache, no draft prefill, and a verification that skips E of L layers.
# The target's forward in pieces (embedding, a range of layers, final norm and head), for both verifications;
# hidden states are in the weights' own layout: XLA:CPU's decode layout keeps (D, B * T) columns, the params
# (B, T, D) rows.

def _embed(weights, cfg, tokens):
    if isinstance(weights, DecodeLayout):
        return decode_embed(weights.weights, cfg, tokens)
    return embed_tokens(weights, cfg, tokens)


def _layers(weights, cfg, x, positions, segments, cache, which):
    if isinstance(weights, DecodeLayout):
        return decode_blocks(weights.weights, cfg, x, positions, segments, cache, None, which)
    return cached_layers(weights, cfg, x, positions, segments, cache, which)


def _head(weights, cfg, x, positions):
    """Logits (B, T, V) of the last layer's hidden states x."""
    if isinstance(weights, DecodeLayout):
        return decode_head(weights.weights, cfg, x, positions).reshape(*positions.shape, -1)
    return logits_from_hidden(weights, cfg, rms_norm(cfg, x, weights["final_norm"]))


def _join_columns(weights, xs):
    """The hidden states of T single-token steps (each one column per row) as one T-token input."""
    if isinstance(weights, DecodeLayout):  # (D, B) each -> (D, B * T), token t of row b at column b * T + t
        return jnp.stack(xs, axis=-1).reshape(xs[0].shape[0], -1)
    return jnp.concatenate(xs, axis=1)  # (B, 1, D) each -> (B, T, D)


def _self_draft_round(weights, cfg, exit_layer: int, methods, state: SamplingState, k: int):
    """`_propose` with the target's first exit_layer layers: the drafts, their log-probs, the hidden states after
    layer exit_layer of the row's last token and its k drafts, and the target's cache with those layers' K/V
    written."""
    seg = (~state.done).astype(jnp.int32)[:, None]
    caches, xs = [state.cache], []

    def step(i, token):
        pos = (state.positions + i)[:, None]
        x, cache = _layers(weights, cfg, _embed(weights, cfg, token[:, None]), pos, seg,
                           dict(caches[-1], index=state.cache["index"] + i), slice(0, exit_layer))
        caches.append(cache)
        xs.append(x)
        return _head(weights, cfg, x, pos)[:, 0]

    drafts, logq = _propose(methods, state, k, step)
    return drafts, logq, xs, caches[-1]


def _rest_logits(weights, cfg, exit_layer: int, state: SamplingState, xs, cache):
    """The target's logits (B, k + 1, V) from the self-draft's hidden states xs after layer exit_layer: the
    remaining layers as one (k + 1)-token forward over their cache buffers; and the cache after it."""
    positions, segments = _feed_slots(state, len(xs))
    x, cache = _layers(weights, cfg, _join_columns(weights, xs), positions, segments,
                       dict(cache, index=state.cache["index"]), slice(exit_layer, None))
    return _head(weights, cfg, x, positions), cache


def _verdict(methods, state: SamplingState, drafts, logq, raw):
    """The target's verdict on the drafts (B, k) from its logits raw (B, k + 1, V): (emitted tokens (B, k + 1),
    how many of them each row takes (B,), raw and sampling log-probs (B, k + 1), kept drafts (B,))."""
    B, k = drafts.shape
    raw = raw.astype(jnp.float32)  # (B, k + 1, V)
    V = raw.shape[-1]
    adjusted = apply_methods(methods, raw.reshape(B * (k + 1), V)).reshape(B, k + 1, V)
    logp = jax.nn.log_softmax(adjusted, axis=-1)
    greedy = any(isinstance(m, Greedy) for m in methods)

    idx = state.lengths[:, None] + jnp.arange(k, dtype=jnp.int32)[None]  # index of the token each draft decides
    if greedy:
        keep = drafts == jnp.argmax(adjusted[:, :k], axis=-1)
    else:
        u = jax.vmap(lambda c: row_uniforms(_stream(state.rng, _ACCEPT), state.row_ids, c), 1, 1)(idx)
        keep = u < jnp.exp(_at(logp[:, :k], drafts) - _at(logq, drafts))
    kept = jnp.sum(jnp.cumprod(keep.astype(jnp.int32), axis=1), axis=1)  # leading drafts kept, 0..k

    p_next = jnp.take_along_axis(adjusted, kept[:, None, None], axis=1)[:, 0]  # (B, V) at the first rejection
    if greedy:
        extra = jnp.argmax(p_next, axis=-1).astype(jnp.int32)
    else:
        probs = jnp.exp(jnp.take_along_axis(logp, kept[:, None, None], axis=1)[:, 0])
        q_rejected = jnp.exp(jnp.take_along_axis(logq, jnp.minimum(kept, k - 1)[:, None, None], axis=1)[:, 0])
        residual = jnp.maximum(probs - jnp.where((kept < k)[:, None], q_rejected, 0.0), 0.0)
        # p == q up to rounding leaves no residual mass; the replacement then follows p itself.
        residual = jnp.where(jnp.sum(residual, axis=-1, keepdims=True) > 0, residual, probs)
        extra = categorical(residual, row_uniforms(_stream(state.rng, _RESIDUAL), state.row_ids,
                                                   state.lengths + kept))
    cols = jnp.arange(k + 1)[None]
    emitted = jnp.where(cols < kept[:, None], jnp.pad(drafts, ((0, 0), (0, 1))), extra[:, None])
    raw_lp = _at(jax.nn.log_softmax(raw, axis=-1), emitted)
    sampling_lp = jnp.zeros_like(raw_lp) if greedy else _at(logp, emitted)
    return emitted, kept + 1, raw_lp, sampling_lp, kept


def speculative_round(params, cfg, dweights, dcfg, methods, stop_ids, k, s: SpeculativeState,
                      exit_layer: int = 0) -> SpeculativeState:
    """One draft-then-verify round for every live row (finished rows keep their state). exit_layer > 0: the
    draft is the target's first exit_layer layers, sharing its cache (dweights, dcfg and the draft cache unused)."""
    state = s.target
    active = ~state.done
    if exit_layer:
        drafts, logq, xs, cache = _self_draft_round(params, cfg, exit_layer, methods, state, k)
        raw, cache = _rest_logits(params, cfg, exit_layer, state, xs, cache)
    else:
        drafts, logq, dcache = _draft_round(dweights, dcfg, methods, state, s.draft_cache, k)
        raw, cache = _target_logits(params, cfg, state, drafts)
    emitted, count, raw_lp, sampling_lp, kept = _verdict(methods, state, drafts, logq, raw)

    B, N = state.tokens.shape
    cols = jnp.arange(k + 1, dtype=jnp.int32)[None]
    # A row takes its emitted tokens up to the first stop id and its max_new limit.
    is_stop = jnp.isin(emitted, jnp.asarray(stop_ids, jnp.int32)) if stop_ids else jnp.zeros_like(emitted, bool)
    first_stop = jnp.min(jnp.where(is_stop & (cols < count[:, None]), cols, k + 1), axis=1)
    room = state.max_new - state.lengths
    take = jnp.where(active, jnp.minimum(jnp.minimum(count, first_stop + 1), room), 0)
    stopped = active & (first_stop < take)
    at_limit = active & ~stopped & (state.lengths + take >= state.max_new)

    where_to = jnp.where(cols < take[:, None], state.lengths[:, None] + cols, N)  # N: dropped
    rows = jnp.arange(B)[:, None]

    def put(buf, values):
        return buf.at[rows, where_to].set(values, mode="drop")

    last = jnp.take_along_axis(emitted, jnp.maximum(take - 1, 0)[:, None], axis=1)[:, 0]
    index = jnp.where(active, state.cache["index"] + take, state.cache["index"])
    cache = constrain_cache(dict(cache, index=index))
    dcache = s.draft_cache if exit_layer else constrain_cache(dict(dcache, index=index))
    finish = jnp.where(stopped, STOP, jnp.where(at_limit, LENGTH, state.finish))
    target = state.replace(
        tokens=put(state.tokens, emitted), logprobs=put(state.logprobs, sampling_lp),
        raw_logprobs=put(state.raw_logprobs, raw_lp), cache=cache, lengths=state.lengths + take,
        positions=state.positions + take, last_token=jnp.where(active, last, state.last_token),
        done=state.done | stopped | at_limit, finish=finish, step=state.step + 1)
    n_active = jnp.sum(active.astype(jnp.int32))
    return SpeculativeState(target=target, draft_cache=dcache, proposed=s.proposed + k * n_active,
                            accepted=s.accepted + jnp.sum(jnp.where(active, kept, 0)), rounds=s.rounds + 1)


@functools.partial(jax.jit, static_argnames=("cfg", "dcfg", "methods", "stop_ids", "k", "exit_layer"),
                   donate_argnames=("s",))
def speculative_decode(params, dweights, s: SpeculativeState, *, cfg, dcfg, methods, stop_ids, k, exit_layer=0):
    """Rounds until every row is done (exit_layer: `speculative_round`'s)."""
    def cond(s):
        return ~jnp.all(s.target.done)

    return jax.lax.while_loop(cond, functools.partial(speculative_round, params, cfg, dweights, dcfg, methods,
                                                      stop_ids, k, exit_layer=exit_layer), s)


def _verify_weights(model):
    """The target's weights for the verification forward: on CPU the sampler's feature-major `DecodeLayout`
    (its k + 1 tokens per row are k + 1 columns), elsewhere the params with their layers split once."""
    weights = engine.decode_weights(model)
    return weights if isinstance(weights, DecodeLayout) else model.derived("verify_params", _verify_params)


def _verify_params(params, cfg):
    """params with the layers split into a list (and LoRA merged) once per weight version: slicing the stacked
    layers inside the decode loop would copy every weight each round (4x the cost of a verification forward at
    batch 1 on CPU)."""
    params = merged_params(params)
    return dict(params, layers=layer_list(params["layers"]))


def self_draft_layers(target, layers) -> int:
    """A self-draft's layer count, checked: a ValueError names a count outside 1..num_layers - 1."""
    L = target.config.num_layers
    if isinstance(layers, bool) or int(layers) != layers or not 1 <= layers < L:
        raise ValueError(f"draft={layers!r}: a self-draft takes 1..{L - 1} of the target's {L} layers")
    return int(layers)


def self_draft(target, layers: int):
    """The self-draft `speculative_generate(target, layers, ...)` runs, as a standalone draft: the target's
    first `layers` layers with its own final norm and head, as (a Model of them, the weights its decoding reads).
    The Model's layers are a copy, sliced once per weight version; the decoding weights are the target's own (on
    CPU its `DecodeLayout` with the layer list cut: the same arrays). `speculative_generate` with an int draft
    shares more than this: its draft steps write the target's cache and its verification starts after them."""
    n = self_draft_layers(target, layers)

    def build(params, cfg):
        params = merged_params(params)
        layers = jax.tree.map(lambda a: a[:n], params["layers"])
        return Model(dataclasses.replace(cfg, num_layers=n), dict(params, layers=layers))

    draft = target.derived(f"self_draft_{n}", build)
    weights = engine.decode_weights(target)
    if isinstance(weights, DecodeLayout):
        return draft, DecodeLayout(dict(weights.weights, layers=weights.weights["layers"][:n]))
    return draft, engine.decode_weights(draft)


def check_draft(target, draft):
    """A draft must share the target's vocabulary (the same token ids); a ValueError names the mismatch."""
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise ValueError(f"draft vocab_size {dv} != target vocab_size {tv}: speculative decoding needs a draft "
                         "with the target's tokenizer (the same token ids)")


def speculative_generate(target, draft, prompt_tokens, max_new_tokens, *, k=4, n=1, temperature=1.0, top_k=None,
                         top_p=None, min_p=None, stop_ids=(), seed=0, mesh=None,
                         row_offset=0, sampling=None, shared_cache=True) -> SpeculativeGeneration:
    """Sample from `target` with `draft` proposing k tokens per round; the same arguments and result as
    `rlpt.sampling.generate` (rows prompt-major, n samples per prompt sharing one prefill), plus the draft
    statistics (`SpeculativeGeneration`). The tokens follow the target's sampling distribution exactly (greedy:
    the target's own argmax tokens); the result holds no live cache (continuation is not supported). sampling: a
    `SamplingParams`, as in `generate`. draft: a Model with the target's vocabulary, or an int n: the target's
    own first n layers with its head, reading the target's weights (LayerSkip's self-speculation: its steps write
    the target's cache and the verification runs only the layers after them). shared_cache=False (an ablation):
    the int draft keeps its own cache and prefill and the verification runs every layer (`self_draft`)."""
    temperature, top_k, top_p, min_p = resolve_sampling(sampling, temperature, top_k, top_p, min_p)
    exit_layer, dweights = 0, None
    if isinstance(draft, (int, np.integer)) and shared_cache:  # bool too: self_draft_layers names it
        exit_layer = self_draft_layers(target, draft)
    elif isinstance(draft, (int, np.integer)):
        draft, dweights = self_draft(target, draft)
    else:
        check_draft(target, draft)
    if int(k) != k or k < 1:
        raise ValueError(f"k={k!r}; expected an integer >= 1 (drafts per round)")
    cfg, params = target.config, target.params
    req = check_request(cfg, prompt_tokens, max_new_tokens, n, temperature, top_k, top_p, min_p, stop_ids)
    methods, prompts, limits, width, stop_ids = req.methods, req.prompts, req.limits, req.width, req.stop_ids
    # Room for the last round's k + 1 writes past a row's final token (one slot stays scratch).
    T, cache_len = plan_cache(prompts, width + k + 1, None)
    tokens, lengths = pad_prompts(prompts, T)
    with _mesh_scope(mesh):
        row_ids = np.arange(row_offset, row_offset + len(prompts) * n, dtype=np.uint32)
        common = dict(methods=methods, stop_ids=stop_ids, n=int(n), cache_len=cache_len, width=width)
        state = engine.prefill(params, tokens, lengths, limits, seed_key(seed), row_ids, cfg=cfg, **common)
        if exit_layer:  # the draft's steps write the target's own cache: no draft cache, no draft prefill
            dweights, dcfg, dcache = None, None, {}
        else:
            dweights = engine.decode_weights(draft) if dweights is None else dweights
            dcfg = draft.config
            dcache = engine.prefill(draft.params, tokens, lengths, limits, seed_key(seed), row_ids, cfg=dcfg,
                                    **common).cache
        s = SpeculativeState(target=state, draft_cache=dcache, proposed=jnp.zeros((), jnp.int32),
                             accepted=jnp.zeros((), jnp.int32), rounds=jnp.zeros((), jnp.int32))
        s = speculative_decode(_verify_weights(target), dweights, s, cfg=cfg, dcfg=dcfg, methods=methods,
                               stop_ids=stop_ids, k=int(k), exit_layer=exit_layer)
    gen = to_generation(s.target, keep_state=False)
    stats = jax.device_get({"p": s.proposed, "a": s.accepted, "r": s.rounds})
    return SpeculativeGeneration(**{f.name: getattr(gen, f.name) for f in dataclasses.fields(Generation)},
                                 proposed=int(stats["p"]), accepted=int(stats["a"]), rounds=int(stats["r"]))
