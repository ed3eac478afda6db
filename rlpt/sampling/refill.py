"""Slot refill: a queue of prompts feeds the rows of one static batch as they finish (long-tail rollouts)."""
import jax
import numpy as np

from rlpt.models.quant import check_quant
from rlpt.sampling import engine
from rlpt.sampling.generate import (
    DECODE_PHASE,
    Generation,
    _mesh_scope,
    bucket,
    check_request,
    next_window,
    pad_prompts,
    plan_cache,
    seed_key,
)
from rlpt.sampling.methods import resolve_sampling
from rlpt.sampling.state import FINISH_REASONS


def generate_refill(model, prompt_tokens, max_new_tokens, *, slots, n=1, temperature=1.0, top_k=None,
                    top_p=None, stop_ids=(), seed=0, min_p=None, max_cache_len=None, mesh=None,
                    decode_phase=DECODE_PHASE, row_offset=0, quant="none", quant_group=128,
                    kv_cache_dtype=None, sampling=None) -> Generation:
    """Like `generate`, but decodes in a static batch of `slots` rows and refills finished rows from a queue.

    The R = len(prompts) * n rows (prompt-major, as in `generate`) are queued; each time rows finish, the
    decode loop returns, their results are collected and queued rows are prefilled into the free slots.
    Row r draws with the same per-row key as in `generate`, so results do not depend on the slot or on
    which rows share the batch. Returns a `Generation` without live state. decode_phase: as in `generate`,
    each decode call attends to the cache prefix its live rows fill by its end (`next_window` of the fullest
    live row); 0: the whole cache. row_offset: as in `generate`. quant, quant_group, kv_cache_dtype, sampling: as
    in `generate`.
    """
    temperature, top_k, top_p, min_p = resolve_sampling(sampling, temperature, top_k, top_p, min_p)
    cfg = model.config
    check_quant(cfg, quant, quant_group, kv_cache_dtype)
    req = check_request(cfg, prompt_tokens, max_new_tokens, n, temperature, top_k, top_p, min_p, stop_ids)
    methods, prompts, limits, width, stop_ids = req.methods, req.prompts, req.limits, req.width, req.stop_ids
    if int(slots) != slots or slots < 1:
        raise ValueError(f"slots={slots!r}; expected an integer >= 1")
    R = len(prompts) * n
    T, cache_len = plan_cache(prompts, width, max_cache_len)
    static = dict(cfg=cfg, methods=methods, stop_ids=stop_ids)

    def prefill_rows(rows, batch):
        """Prefill queued rows (padded to `batch` with 1-token dummies that finish at once)."""
        rows = list(rows) + [-1] * (batch - len(rows))
        tokens, lengths = pad_prompts([prompts[r // n] if r >= 0 else [0] for r in rows], T)
        limit = np.where(np.asarray(rows) >= 0, limits[rows], 1)
        row_ids = (np.maximum(rows, 0) + row_offset).astype(np.uint32)
        return engine.prefill(params, tokens, lengths, limit, seed_key(seed), row_ids,
                              n=1, cache_len=cache_len, width=width, kv_cache_dtype=kv_cache_dtype, **static)

    out_tokens = np.zeros((R, width), np.int32)
    out_raw, out_lp = np.zeros((R, width), np.float32), np.zeros((R, width), np.float32)
    out_len, out_finish = np.zeros(R, np.int32), [None] * R
    queue = list(range(R))
    owners = np.full(slots, -1)
    with _mesh_scope(mesh):
        params = engine.sampler_params(model, quant, quant_group)
        weights = engine.decode_weights(model, quant=quant, quant_group=quant_group)
        first = queue[:slots]
        del queue[:slots]
        state = prefill_rows(first, slots)
        owners[:len(first)] = first
        while True:
            host = jax.device_get({"done": state.done, "tokens": state.tokens, "raw": state.raw_logprobs,
                                   "lp": state.logprobs, "lengths": state.lengths, "finish": state.finish,
                                   "index": state.cache["index"]})
            for slot in np.flatnonzero(host["done"] & (owners >= 0)):
                r = owners[slot]
                out_tokens[r], out_raw[r], out_lp[r] = host["tokens"][slot], host["raw"][slot], host["lp"][slot]
                out_len[r], out_finish[r] = host["lengths"][slot], FINISH_REASONS[host["finish"][slot]]
                owners[slot] = -1
            free = np.flatnonzero(owners < 0)
            if queue and len(free):
                take = queue[:len(free)]
                del queue[:len(free)]
                k = min(bucket(len(take)), slots)
                new = prefill_rows(take, k)
                targets = np.full(k, slots, np.int32)  # out of range: dropped
                targets[:len(take)] = free[:len(take)]
                state = engine.insert_rows(state, new, targets)
                owners[free[:len(take)]] = take
                continue  # a refilled row may already be done (stop id or limit at its first token)
            if (owners < 0).all():
                break
            done_now = int(host["done"].sum())
            target = done_now + 1 if queue else slots
            # every live row's data lies below its own index; finished rows' writes are never read
            window, steps = next_window(int(host["index"][~host["done"]].max()), cache_len, decode_phase)
            state = engine.decode(weights, state, target, width if steps is None else min(steps, width),
                                  window=window, **static)
    return Generation(tokens=out_tokens, logprobs=out_raw, sampling_logprobs=out_lp, lengths=out_len,
                      finish_reason=out_finish)
