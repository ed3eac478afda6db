"""`generate` and `continue_generation`: the host-side API over the jitted prefill / decode / append."""
import contextlib
import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from rlpt.models.quant import check_quant, is_int8_kv
from rlpt.models.vision import VisionLanguageModel
from rlpt.parallel.rules import axis_split, current_mesh
from rlpt.sampling import engine
from rlpt.sampling.methods import make_methods, resolve_sampling
from rlpt.sampling.state import FINISH_REASONS, SamplingState

MIN_BUCKET = 8
# At least this many decode steps in `generate`'s first decode call (`decode_phases`: each call attends to the
# cache prefix filled by its end, in windows that double).
DECODE_PHASE = 32
# XLA:TPU's default layout for a (B, KV, S, Dh) cache buffer whose S is not a multiple of its 8-row tile keeps S
# out of the tile ((B, S, KV, Dh) in memory) while the decode loop computes on (B, KV, S, Dh): every decode call
# then copied each layer's cache into the loop's layout and back, as much memory again as the cache.
CACHE_SLOTS_MULTIPLE = 8


@dataclasses.dataclass
class Generation:
    """New tokens of R = B * n rows, prompt-major (the n samples of prompt 0 first), N = max new tokens.

    `logprobs` are under the raw policy (temperature 1, no top-k/top-p/min-p): the log-softmax of the model's
    logits at each sampled token, equal to a teacher-forced forward pass; use them for importance ratios.
    `sampling_logprobs` are under the distribution the token was actually drawn from (after temperature and
    truncation; 0 for greedy). Both are 0 past a row's length, where `tokens` hold pad_id.
    """

    tokens: np.ndarray  # (R, N) int32
    logprobs: np.ndarray  # (R, N) f32 raw policy
    sampling_logprobs: np.ndarray  # (R, N) f32 sampling distribution
    lengths: np.ndarray  # (R,) int32
    finish_reason: list  # R of "stop", "length", "cache_full"
    state: SamplingState | None = dataclasses.field(default=None, repr=False)  # live cache for continuation


def bucket(length: int) -> int:
    """Round a length up to a power of two (at least MIN_BUCKET) so jitted shapes repeat."""
    return max(MIN_BUCKET, 1 << (max(length, 1) - 1).bit_length())


def _mesh_scope(mesh):
    return jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()


def _check_prompts(prompt_tokens, vocab_size: int) -> list[list[int]]:
    if isinstance(prompt_tokens, (str, bytes)) or not isinstance(prompt_tokens, Sequence) or not prompt_tokens:
        raise ValueError("prompt_tokens must be a non-empty list of token-id lists")
    prompts = []
    for i, p in enumerate(prompt_tokens):
        p = np.asarray(p).tolist() if not isinstance(p, list) else p
        if not isinstance(p, list) or any(isinstance(t, list) for t in p):
            raise ValueError(f"prompt_tokens[{i}] must be a flat list of token ids")
        if len(p) == 0:
            raise ValueError(f"prompt_tokens[{i}] is empty; every prompt needs at least one token")
        bad = [t for t in p if not 0 <= int(t) < vocab_size]
        if bad:
            raise ValueError(f"prompt_tokens[{i}] has token ids outside [0, {vocab_size}): {bad[:5]}")
        prompts.append([int(t) for t in p])
    return prompts


def _per_row(max_new_tokens, count: int, what: str) -> np.ndarray:
    limits = np.broadcast_to(np.asarray(max_new_tokens, np.int64), (count,)) if np.ndim(max_new_tokens) == 0 \
        else np.asarray(max_new_tokens, np.int64)
    if limits.shape != (count,):
        raise ValueError(f"max_new_tokens has {limits.size} entries; expected one per {what} ({count})")
    if (limits < 1).any():
        raise ValueError(f"max_new_tokens must be >= 1; got {limits.min()}")
    return limits.astype(np.int32)


def check_stop_ids(stop_ids, vocab_size: int) -> tuple:
    stop_ids = tuple(sorted({int(t) for t in stop_ids}))
    if any(not 0 <= t < vocab_size for t in stop_ids):
        raise ValueError(f"stop_ids {stop_ids} must lie in [0, {vocab_size})")
    return stop_ids


@dataclasses.dataclass(frozen=True)
class Request:
    """A sampling call's checked inputs: the methods chain, the prompts as lists, per-row limits (R = prompts *
    n, prompt-major), the widest limit and the sorted stop ids."""

    methods: tuple
    prompts: list
    limits: np.ndarray
    width: int
    stop_ids: tuple


def check_request(cfg, prompt_tokens, max_new_tokens, n, temperature, top_k, top_p, min_p, stop_ids) -> Request:
    """The checks every sampling entry point (`generate`, `generate_refill`, `speculative_generate`) runs on its
    arguments; a ValueError names the bad one."""
    methods = make_methods(temperature, top_k, top_p, min_p)
    prompts = _check_prompts(prompt_tokens, cfg.vocab_size)
    if int(n) != n or n < 1:
        raise ValueError(f"n={n!r}; expected an integer >= 1")
    limits = np.repeat(_per_row(max_new_tokens, len(prompts), "prompt"), n)
    return Request(methods, prompts, limits, int(limits.max()), check_stop_ids(stop_ids, cfg.vocab_size))


def seed_key(seed: int):
    """(2,) uint32 Threefry key data for `seed`; rows draw from it by global row id (prompt * n + sample)."""
    return jax.random.key_data(jax.random.key(int(seed)))


def plan_cache(prompts, width: int, max_cache_len, prefix: int = 0):
    """(prompt bucket T, cache slots for these prompts) after `prefix` cached slots; capacity = prefix + slots - 1
    (one scratch slot). Without max_cache_len, prefix + slots is rounded up to a multiple of CACHE_SLOTS_MULTIPLE
    (up to 7 slots more; rows still stop at their max_new_tokens)."""
    longest = max(len(p) for p in prompts)
    T = bucket(longest)
    if max_cache_len is None:
        step = CACHE_SLOTS_MULTIPLE
        capacity = -(-(prefix + T + width + 1) // step) * step - 1 - prefix
    else:
        capacity = int(max_cache_len)
    if longest > capacity:
        raise ValueError(f"a prompt has {longest} tokens but the cache holds {capacity} (max_cache_len); "
                         "raise max_cache_len or shorten the prompt")
    return min(T, capacity + 1), capacity + 1


def prefill_copies(prompts: int, n: int, mesh) -> int:
    """How many copies of each prompt the prefill runs: 1, or n when the mesh's batch axes split the prompts' n
    samples (prompts * n rows) but not the prompts (16 prompts x 8 samples on 32 chips). Then each row is prefilled
    from its own copy of its prompt, so every device runs rows / devices rows and holds only their cache, instead of
    running every prompt and holding the whole prompts' cache (n times the prefill FLOPs in all, 1 / devices of
    the rows on each). The rows' first tokens are the same: each row draws from its global row id."""
    split = axis_split("batch", mesh)
    return n if n > 1 and prompts % split and (prompts * n) % split == 0 else 1


def pad_prompts(prompts, T: int, pad_id: int = 0):
    """Right-padded (B, T) int32 tokens and (B,) lengths."""
    tokens = np.full((len(prompts), T), pad_id, np.int32)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)] = p
    return tokens, np.asarray([len(p) for p in prompts], np.int32)


def to_generation(state: SamplingState, keep_state: bool) -> Generation:
    host = jax.device_get({"tokens": state.tokens, "raw": state.raw_logprobs, "lp": state.logprobs,
                           "lengths": state.lengths, "finish": state.finish})
    return Generation(tokens=host["tokens"], logprobs=host["raw"], sampling_logprobs=host["lp"],
                      lengths=host["lengths"], finish_reason=[FINISH_REASONS[f] for f in host["finish"]],
                      state=state if keep_state else None)


def generate(model, prompt_tokens, max_new_tokens, *, n=1, temperature=1.0, top_k=None, top_p=None,
             stop_ids=(), seed=0, min_p=None, max_cache_len=None, mesh=None, keep_state=True,
             decode_phase=DECODE_PHASE, row_offset=0, quant="none", quant_group=128,
             kv_cache_dtype=None, prefix_cache=None, images=None, sampling=None) -> Generation:
    """Sample continuations of ragged prompts with a KV cache; see `Generation` for the result.

    max_new_tokens: an int, or one limit per prompt. temperature 0 is greedy. The cache holds
    max_cache_len tokens per row (prompt + generated; default: the prompt bucket + max_new_tokens); a row
    that fills it ends with finish reason "cache_full". Under `mesh` rows shard over the data axes and heads
    over `tensor` (place params with `shard_params` first). keep_state keeps the cache for
    `continue_generation`. decode_phase: decode in calls whose attention reads only the cache prefix filled
    by their end, the first call at least decode_phase steps long and the windows doubling (`decode_phases`;
    0: one call over the whole cache). Each window is one more compiled shape; the results are the same up to
    float rounding (a sum over fewer masked slots). row_offset: the global id of this call's first row (rows draw
    from `seed` by global row id), so a process sampling its share of a batch (rows row_offset .. row_offset +
    R - 1) draws what one process sampling the whole batch draws for them.
    quant: "none", or sample from the model with its layer weights quantized, "int8" (one scale per output
    channel) or "int4" (one per quant_group input features; quant_group must divide hidden_size,
    num_heads * head_dim and intermediate_size), quantized once per weight version (`rlpt.models.quant`); the
    log-probs are that model's. kv_cache_dtype: None (the compute dtype) or "int8" (per-slot scales).
    prefix_cache: a `rlpt.sampling.PrefixCache`: the prompts' common prefix (a system prompt, a few-shot
    preamble) is taken from it or computed once and stored there, instead of once per prompt (the same results
    up to float rounding; its counters give the hit rate).
    images: with a `rlpt.models.vision.VisionLanguageModel`, the pixel values (N, C, H, W) of the images the
    prompts' image tokens stand for, in prompt order (`rlpt.models.image_processing.preprocess`); the tower runs
    once, in the prefill, and decoding reads the images from the KV cache.
    sampling: a `SamplingParams` (temperature, top_k, top_p, min_p passed whole); it replaces those keywords.
    """
    temperature, top_k, top_p, min_p = resolve_sampling(sampling, temperature, top_k, top_p, min_p)
    model, embed_fn = _vision_inputs(model, prompt_tokens, images, prefix_cache)
    cfg = model.config
    check_quant(cfg, quant, quant_group, kv_cache_dtype)
    req = check_request(cfg, prompt_tokens, max_new_tokens, n, temperature, top_k, top_p, min_p, stop_ids)
    methods, prompts, limits, width, stop_ids = req.methods, req.prompts, req.limits, req.width, req.stop_ids

    with _mesh_scope(mesh):
        params = engine.sampler_params(model, quant, quant_group)
        P, prefix = 0, None
        if prefix_cache is not None:
            compute = lambda t: engine.prefix_kv(params, t, cfg=cfg, kv_cache_dtype=kv_cache_dtype)  # noqa: E731
            P, prefix = prefix_cache.lookup(model, prompts, (quant, quant_group, kv_cache_dtype), compute)
        T, cache_len = plan_cache([p[P:] for p in prompts], width, None if max_cache_len is None
                                  else max_cache_len - P, prefix=P)
        cache_len += P
        tokens, lengths = pad_prompts([p[P:] for p in prompts], T)
        copies = 1 if embed_fn is not None else prefill_copies(len(prompts), int(n), current_mesh())
        if copies > 1:
            tokens, lengths = np.repeat(tokens, copies, axis=0), np.repeat(lengths, copies)
        row_ids = np.arange(row_offset, row_offset + len(prompts) * n, dtype=np.uint32)
        state = engine.prefill(params, tokens, lengths, limits, seed_key(seed), row_ids, cfg=cfg, methods=methods,
                               stop_ids=stop_ids, n=int(n) // copies, cache_len=cache_len, width=width,
                               kv_cache_dtype=kv_cache_dtype, prefix=prefix,
                               embeds=None if embed_fn is None else embed_fn(tokens, lengths))
        weights = engine.decode_weights(model, quant=quant, quant_group=quant_group)
        for steps, window in decode_phases(P + int(lengths.max()), width, cache_len, decode_phase):
            state = engine.decode(weights, state, len(prompts) * n, steps, cfg=cfg, methods=methods,
                                  stop_ids=stop_ids, window=window)
    return to_generation(state, keep_state)


def _vision_inputs(model, prompts, images, prefix_cache):
    """(the decoder to sample from, embed_fn(tokens, lengths) -> prefill embeddings or None) for `generate`."""

    if not isinstance(model, VisionLanguageModel):
        if images is not None:
            raise ValueError(f"generate(images=...) needs a VisionLanguageModel, got {type(model).__name__}")
        return model, None
    if prefix_cache is not None:
        raise ValueError("generate: prefix_cache does not combine with a VisionLanguageModel (image tokens look "
                         "alike across prompts but stand for different images)")
    model.check_image_tokens([list(p) for p in prompts], 0 if images is None else len(images))
    text = model.text_model()
    if images is None or not len(images):
        return text, None
    return text, lambda tokens, lengths: model.prompt_embeds(tokens, lengths, images)


def next_window(filled: int, cache_len: int, phase: int | None) -> tuple[int | None, int | None]:
    """(attention window, most steps) for a decode call whose live rows' next free slot is at most `filled`:
    the window bucket(filled + phase) holds every slot written in that many steps (a row at index i writes
    slots i .. i + steps - 1); (None, None): the whole cache, no step limit (phase 0 or None, or the window
    would not be smaller than the cache)."""
    window = bucket(filled + phase) if phase else cache_len
    if window >= cache_len:
        return None, None
    return window, window - filled


def decode_phases(longest: int, width: int, cache_len: int, phase: int | None):
    """(steps, attention window) of each decode call after a prefill whose longest prompt has `longest` tokens.

    Decoding writes slot index + k at step k, so the filled prefix of the cache grows during decoding: each
    call attends to `next_window` of the slots filled so far, so the first window is bucket(longest + phase)
    (a power of two), each later one twice the previous, the last the whole cache. A 128-token decode after
    32-token prompts reads 120 slots per step on average instead of 161, in three compiled shapes that repeat
    across prompt lengths and token budgets. phase 0 or None decodes in one call over the whole cache.
    """
    out, done = [], 0
    while done < width:  # as many steps as one call takes: prefill drew the first token, the last may find all done
        window, steps = next_window(longest + done, cache_len, phase)
        steps = width - done if steps is None else min(width - done, steps)
        out.append((steps, window))
        done += steps
    return out


def continue_generation(model, generation: Generation, appended, max_new_tokens, *, temperature=1.0,
                        top_k=None, top_p=None, stop_ids=(), min_p=None, mesh=None,
                        keep_state=True, decode_phase=DECODE_PHASE, quant="none", quant_group=128,
                        kv_cache_dtype=None, images=None, sampling=None) -> Generation:
    """Append tokens to finished rows and keep decoding from the cached prefix (multi-turn).

    appended: one entry per row of `generation`: a list of token ids (e.g. a tool's output, may be empty)
    to add after the row's generated tokens, or None to leave the row finished (it then returns 0 tokens).
    The row's sequence so far (prompt + every generated token) is not recomputed. `generation` is consumed:
    its cache moves into the result. decode_phase: as in `generate`, from the fullest row's filled slots.
    quant, quant_group: as in `generate` (pass the generation's own to continue the same sampler);
    kv_cache_dtype: the generation's (its cache is continued as it is; another value is an error). sampling: as
    in `generate`.
    images: with a `rlpt.models.vision.VisionLanguageModel`, the pixel values (N, C, H, W) of the images the
    appended tokens' image tokens stand for, in row order (e.g. a screenshot in a tool's observation); the tower
    runs on these only: earlier turns' images stay in the cache.
    """
    temperature, top_k, top_p, min_p = resolve_sampling(sampling, temperature, top_k, top_p, min_p)

    vlm = model if isinstance(model, VisionLanguageModel) else None
    if vlm is not None:
        vlm.check_image_tokens([list(a or []) for a in appended], 0 if images is None else len(images))
        model = vlm.text_model()
    elif images is not None:
        raise ValueError(f"continue_generation(images=...) needs a VisionLanguageModel, got {type(model).__name__}")
    cfg = model.config
    check_quant(cfg, quant, quant_group, kv_cache_dtype)
    state = generation.state
    if state is None:
        raise ValueError("generation has no live state: it was made with keep_state=False or already continued")
    cached = "int8" if is_int8_kv(state.cache["k"][0]) else None
    if kv_cache_dtype != cached:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r}, but the generation's cache holds {cached!r} K/V "
                         "(generate's kv_cache_dtype); a continuation keeps the cache as it is")
    R = state.tokens.shape[0]
    if len(appended) != R:
        raise ValueError(f"appended has {len(appended)} entries; expected one per row ({R})")
    methods = make_methods(temperature, top_k, top_p, min_p)
    stop_ids = check_stop_ids(stop_ids, cfg.vocab_size)
    limits = _per_row(max_new_tokens, R, "row")
    index, last, capacity = np.asarray(state.cache["index"]), np.asarray(state.last_token), state.capacity
    feeds = []
    for r, extra in enumerate(appended):
        if extra is None:
            feeds.append([])
            continue
        if generation.finish_reason[r] == "cache_full":
            raise ValueError(f"row {r} ended with a full cache; it cannot be continued")
        extra = [int(t) for t in extra]
        if any(not 0 <= t < cfg.vocab_size for t in extra):
            raise ValueError(f"appended[{r}] has token ids outside [0, {cfg.vocab_size})")
        feeds.append([int(last[r])] + extra)
        if index[r] + len(feeds[r]) > capacity:
            raise ValueError(f"row {r}: {index[r]} cached + {len(feeds[r])} new tokens exceed the cache "
                             f"({capacity}); raise max_cache_len")
    longest = max(len(f) for f in feeds)
    if longest == 0:
        raise ValueError("appended is all None: no row to continue")
    # Padding is written too (as invisible segment 0), so the padded width must fit every row's free slots.
    free = capacity + 1 - index
    Ta = bucket(longest) if bucket(longest) <= free.min() else longest
    if Ta > free.min():
        r = int(np.argmin(free))
        raise ValueError(f"row {r} has {free[r]} free cache slots, fewer than the {Ta} appended this turn; "
                         "raise max_cache_len")
    feed, feed_lengths = pad_prompts([f or [0] for f in feeds], Ta)
    feed_lengths = np.where([len(f) > 0 for f in feeds], feed_lengths, 0).astype(np.int32)
    limits = np.where(feed_lengths > 0, limits, 0).astype(np.int32)
    # Token buffers a power of two wide (rows still stop at their own limits): the remaining budgets differ from
    # turn to turn, and every distinct width compiled its own append and decode, holding host memory for each.
    width = bucket(int(limits.max()))
    generation.state = None
    with _mesh_scope(mesh):
        params = engine.sampler_params(model, quant, quant_group)
        embeds = None
        if images is not None and len(images):  # column 0 is each row's last sampled token: never an image
            embeds = vlm.feed_embeds(feed, feed_lengths, images)
        state = engine.append(params, state, feed, feed_lengths, limits, cfg=cfg, methods=methods,
                              stop_ids=stop_ids, width=width, embeds=embeds)
        filled = int((index + feed_lengths).max())  # every row's data lies below its own index
        weights = engine.decode_weights(model, quant=quant, quant_group=quant_group)
        for steps, window in decode_phases(filled, width, capacity + 1, decode_phase):
            state = engine.decode(weights, state, R, steps, cfg=cfg, methods=methods, stop_ids=stop_ids,
                                  window=window)
    out = to_generation(state, keep_state)
    wanted = int(limits.max())  # the arrays as wide as the largest limit, as before the bucketing
    return dataclasses.replace(out, tokens=out.tokens[:, :wanted], logprobs=out.logprobs[:, :wanted],
                               sampling_logprobs=out.sampling_logprobs[:, :wanted])
