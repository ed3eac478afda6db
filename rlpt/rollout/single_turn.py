"""Single-turn rollouts: G samples per task through the sampler's shared prefill, verified per domain."""
import dataclasses
import time

import numpy as np

from rlpt.fleet import VerifyItem, current
from rlpt.rollout.format import batch_prompts, fit_width, policy_vision, response_text, sampler_images
from rlpt.sampling import PrefixCache, generate, generate_refill
from rlpt.sampling.methods import SamplingParams


@dataclasses.dataclass
class Trajectories:
    """A batch of R = tasks x G finished samples (host arrays; token in, token out).

    prompt: list of prompt id lists; response: (R, N) sampled ids; lengths (R,); rollout_logp (R, N) raw
    policy log-probs from the sampler; rewards (R,); passed (R,); group_ids (R,); truncated (R,)
    (hit the token limit without a stop); version: the policy version that generated them.
    Multi-turn rollouts (rlpt.rollout.multi_turn) also fill: policy_mask (R, N) 1 on tokens the policy
    sampled, 0 on tool output the environment appended (None: every response token is the policy's);
    turns (R,) policy turns; tool_calls (R,) tool calls executed; spans: per row (kind, start, end) response
    slices, kind 'policy' or 'tool'; status: per row how the episode ended.
    Rewards: verdicts (R,) the verifier's Verdict per row and reward_texts (R,) the text a reward mixture
    scores (the policy's own text) let rlpt.pipeline.producer.mix_rewards recompute `rewards` through the
    configured mixture; it fills components (R,) {component: value} (None: rewards are the verifier's
    score, or a custom reward_fn's, and no mixture was applied).
    """

    tasks: list
    prompts: list[list[int]]
    response: np.ndarray
    lengths: np.ndarray
    rollout_logp: np.ndarray
    rewards: np.ndarray
    passed: np.ndarray
    group_ids: np.ndarray
    truncated: np.ndarray
    version: int
    gen_s: float
    verify_s: float
    texts: list[str]
    policy_mask: np.ndarray | None = None
    turns: np.ndarray | None = None
    tool_calls: np.ndarray | None = None
    spans: list | None = None
    status: list | None = None
    verdicts: list | None = None
    reward_texts: list[str] | None = None
    components: list[dict[str, float]] | None = None
    prefix_stats: dict | None = None  # rl.rollout.prefix_cache_min_tokens: PrefixCache.stats() of the step
    images: list | None = None  # a vision-language policy: per row its prompt's pixel_values (n, C, H, W)
    dropped: np.ndarray | None = None  # (R,) rows whose task had a corrupt image: sampled on blank pixels, no loss
    # (R,) partial rollouts (rlpt.rollout.partial): the policy version that sampled each row's first token (older
    # than `version` for an episode continued from an earlier step)
    row_versions: np.ndarray | None = None


def concat_trajectories(parts: list, tasks: list) -> Trajectories:
    """One batch from consecutive shares of a step (the processes' Trajectories in process order) over `tasks`,
    the step's whole task list: rows and groups in order, (R, N) arrays padded with 0 to the widest share,
    gen_s and verify_s the slowest share's."""
    if len(parts) == 1:
        return parts[0]
    first, out = parts[0], {}
    for f in dataclasses.fields(Trajectories):
        values = [getattr(p, f.name) for p in parts]
        if f.name in ("tasks", "version") or all(v is None for v in values):
            continue
        if f.name in ("gen_s", "verify_s"):
            out[f.name] = max(values)
        elif f.name == "prefix_stats":
            out[f.name] = {k: float(np.mean([v[k] for v in values])) for k in values[0]}
        elif f.name == "group_ids":
            offsets = np.cumsum([0] + [len(p.tasks) for p in parts[:-1]])
            out[f.name] = np.concatenate([v + o for v, o in zip(values, offsets)])
        elif isinstance(values[0], np.ndarray) and values[0].ndim == 2:
            width = max(v.shape[1] for v in values)
            out[f.name] = np.concatenate([np.pad(v, ((0, 0), (0, width - v.shape[1]))) for v in values])
        elif isinstance(values[0], np.ndarray):
            out[f.name] = np.concatenate(values)
        else:
            out[f.name] = [x for v in values for x in v]
    return dataclasses.replace(first, tasks=list(tasks), **out)


def verify_all(tok, tasks, group_size, response, lengths, reward_fn=None):
    """(rewards, passed, texts, verdicts, policy texts) per sample, verified by the current fleet (rlpt.fleet:
    this process unless the run set fleet=ray); a crashing verifier scores 0 (a Verdict with the error in details)
    and the run goes on."""

    fleet = current()
    batch = fleet.new_batch()
    own = [response_text(tok, response[r, :int(lengths[r])]) for r in range(response.shape[0])]
    items = [VerifyItem(f"{batch}/{r}", tasks[r // group_size], text) for r, text in enumerate(own)]
    rewards, passed, texts, verdicts = [], [], [], []
    for item, (verdict, error) in zip(items, fleet.verify(items)):
        texts.append(item.text if error is None else f"{item.text}\n[verifier error: {error}]")
        score = float(verdict.score)
        rewards.append(reward_fn(item.task, item.text, score) if reward_fn is not None else score)
        passed.append(bool(verdict.passed))
        verdicts.append(verdict)
    return np.asarray(rewards, np.float32), np.asarray(passed, bool), texts, verdicts, own


def prefix_cache(rcfg):
    """The step's `PrefixCache` (rl.rollout.prefix_cache_min_tokens > 0), else None."""

    if rcfg.prefix_cache_min_tokens and rcfg.refill:
        raise ValueError("rl.rollout.prefix_cache_min_tokens > 0 does not combine with rl.rollout.refill=true "
                         "(slot refill prefills rows one batch at a time); set one of them off")
    return PrefixCache(min_tokens=rcfg.prefix_cache_min_tokens) if rcfg.prefix_cache_min_tokens else None


def rollout(model, tok, tasks, rcfg, *, seed: int, version: int, reward_fn=None, row_offset: int = 0) -> Trajectories:
    """Generate rcfg.group_size samples per task and verify them. Rewards are the verifier's scores (the run's
    reward mixture replaces them: rlpt.pipeline.producer.mix_rewards); reward_fn(task, text, score) -> float
    sets them instead, as the one component 'reward_fn', and no mixture is applied. row_offset: the global id of
    the first row (a process's share of a step: rows draw as in one process, `rlpt.sampling.generate`)."""

    vision = policy_vision(model)  # a VisionLanguageModel: image tasks carry their pixels
    prompts, pixels, ok = batch_prompts(tok, tasks, vision)
    for t, ids in zip(tasks, prompts):
        if len(ids) > rcfg.max_prompt_len:
            raise ValueError(f"task {t.id}: prompt of {len(ids)} tokens exceeds rl.rollout.max_prompt_len="
                             f"{rcfg.max_prompt_len}")
    if pixels is not None and rcfg.refill:
        raise ValueError("rl.rollout.refill=true does not combine with model.vision (slot refill prefills rows "
                         "without their images); set rl.rollout.refill=false")
    t0 = time.time()
    sampling = dict(n=rcfg.group_size, sampling=SamplingParams.of(rcfg), stop_ids=tuple(tok.eos_ids), seed=seed,
                    row_offset=row_offset)
    quant = dict(quant=rcfg.quant, quant_group=rcfg.quant_group, kv_cache_dtype=rcfg.kv_cache_dtype)
    prefix = prefix_cache(rcfg)
    if rcfg.refill:
        slots = rcfg.refill_slots or max(1, len(prompts) * rcfg.group_size // 2)
        out = generate_refill(model, prompts, rcfg.max_new_tokens, slots=slots, **sampling, **quant)
    else:
        out = generate(model, prompts, rcfg.max_new_tokens, keep_state=False, prefix_cache=prefix, **sampling,
                       **quant, **sampler_images(pixels))
    response, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    gen_s = time.time() - t0
    t0 = time.time()
    rewards, passed, texts, verdicts, own = verify_all(tok, tasks, rcfg.group_size, response, lengths, reward_fn)
    G = rcfg.group_size
    components = [{"reward_fn": float(r)} for r in rewards] if reward_fn is not None else None
    return Trajectories(tasks=tasks, prompts=[p for p in prompts for _ in range(G)], response=response,
                        lengths=lengths, rollout_logp=np.asarray(out.logprobs, np.float32), rewards=rewards,
                        passed=passed, group_ids=np.repeat(np.arange(len(tasks)), G),
                        truncated=np.array([f != "stop" for f in out.finish_reason]), version=version,
                        gen_s=gen_s, verify_s=time.time() - t0, texts=texts, verdicts=verdicts, reward_texts=own,
                        components=components, prefix_stats=prefix.stats() if prefix is not None else None,
                        images=None if vision is None else [px for px in pixels for _ in range(G)],
                        dropped=None if vision is None else np.repeat(~np.asarray(ok, bool), G))


def to_rows(traj: Trajectories, row_len: int, images_per_row: int = 1) -> dict[str, np.ndarray]:
    """Train rows (R, W): prompt + response, loss mask on the response tokens the policy produced
    (with a policy_mask, tool tokens inside the response get loss mask 0 and rollout log-prob 0).
    A vision-language policy's rows (traj.images) also carry pixel_values (R, images_per_row, C, H, W) and
    num_images (R,) (`rlpt.train.losses.decoder_inputs`).

    row_len is the most a row may hold; W = `fit_width` of the batch's longest row (a power of two, at most
    row_len), so short rollouts do not pay for padding up to the configured maximum.
    """
    R = len(traj.prompts)
    sizes = [len(p) + int(n) - 1 for p, n in zip(traj.prompts, traj.lengths)]  # shifted: inputs per row
    if max(sizes) > row_len:
        r = int(np.argmax(sizes))
        raise ValueError(f"row {r}: {sizes[r]} tokens exceed the RL row length {row_len}")
    row_len = fit_width(max(sizes), row_len)
    out = {k: np.zeros((R, row_len), np.int32) for k in ("inputs", "targets", "positions", "segment_ids")}
    out["loss_mask"] = np.zeros((R, row_len), np.float32)
    out["rollout_logp"] = np.zeros((R, row_len), np.float32)
    for r in range(R):
        p = traj.prompts[r]
        n = int(traj.lengths[r])
        seq = list(p) + [int(t) for t in traj.response[r, :n]]
        L = len(seq) - 1
        out["inputs"][r, :L] = seq[:-1]
        out["targets"][r, :L] = seq[1:]
        out["positions"][r, :L] = np.arange(L)
        out["segment_ids"][r, :L] = 1
        start = len(p) - 1  # target index of the first generated token
        own = 1.0 if traj.policy_mask is None else traj.policy_mask[r, :n]
        out["loss_mask"][r, start:start + n] = own
        out["rollout_logp"][r, start:start + n] = traj.rollout_logp[r, :n] * own
    if traj.images is not None:
        shape = next((px.shape[1:] for px in traj.images if len(px)), None)
        out["num_images"] = np.asarray([len(px) for px in traj.images], np.int32)
        if shape is not None and int(out["num_images"].max()) > images_per_row:
            r = int(np.argmax(out["num_images"]))
            raise ValueError(f"row {r} (task {traj.tasks[r * len(traj.tasks) // R].id}): {out['num_images'][r]} "
                             f"images exceed data.images_per_row={images_per_row}")
        if shape is not None:
            out["pixel_values"] = np.zeros((R, images_per_row, *shape), np.float32)
            for r, px in enumerate(traj.images):
                out["pixel_values"][r, :len(px)] = px
        else:
            del out["num_images"]
    return out


def response_window(traj: Trajectories, width: int) -> np.ndarray:
    """(R, K) column indices of `to_rows` rows (width W) that cover every response target of each row.

    K = `fit_width` of the longest response (a power of two, at most W, so few shapes compile); row r's window
    starts at its first response target, moved left where the row would run past W, so the K columns are
    distinct, inside the row, and hold all of its loss-mask columns. rl_loss computes logits only there.
    """
    K = fit_width(int(np.max(traj.lengths)), width)
    starts = np.asarray([len(p) - 1 for p in traj.prompts], np.int32)
    starts = np.minimum(starts, width - K)
    return starts[:, None] + np.arange(K, dtype=np.int32)[None, :]
