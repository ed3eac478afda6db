"""The RL loop: sample tasks, generate, verify, advantages, update, sync weights; sync or async."""
import contextlib
import dataclasses
import functools
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.algos import dynamic_sampling_keep, get_advantage, get_kl, kl_in_reward, soft_overlong_penalty
from rlpt.algos.options import check_algo_options
from rlpt.config.schema import Config
from rlpt.eval.heldout import family_means
from rlpt.fleet import make_fleet, use
from rlpt.observe.alerts import get_alert_hook
from rlpt.observe.components import component_row, run_means
from rlpt.observe.observers import default_observers
from rlpt.observe.tags import task_outcomes
from rlpt.parallel import axis_rules, split_devices
from rlpt.pipeline.producer import Producer
from rlpt.rewards.mixture import RewardMixture
from rlpt.rollout.single_turn import response_window, rollout, to_rows
from rlpt.tasks.curriculum import build_curriculum, decode_state, encode_state
from rlpt.tasks.mixture import rl_domains
from rlpt.train.heads import init_head, make_head_trainer
from rlpt.train.loop import (
    LoopHooks,
    RunLog,
    make_trainer,
    maybe_resume,
    microbatch,
    run_loop,
    shard_batch,
    to_float,
)
from rlpt.train.losses import rl_loss, token_logprobs_entropy

log = logging.getLogger(__name__)


def rl_config(cfg: Config) -> Config:
    """The stage config: RL learning rate, and optimizer steps (rl.steps x rl.ppo_epochs: the schedule's length)
    on the shared optimizer schema."""
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=cfg.rl.lr),
                               train=dataclasses.replace(cfg.train, steps=cfg.rl.steps * cfg.rl.ppo_epochs))


def base_rows(traj, cfg: Config, row_len: int) -> dict:
    """The trajectories as train rows (`to_rows`) with their logit window (rl.exec.logits_window), no advantages."""
    rows = to_rows(traj, row_len, cfg.data.images_per_row)
    if cfg.rl.exec.logits_window:
        rows["window"] = response_window(traj, rows["inputs"].shape[1])
        if cfg.rl.exec.share_prefix:
            check_shared_prefix(rows, cfg.rl.rollout.group_size)
    return rows


def make_batch(traj, cfg: Config, row_len: int, ref_logp: np.ndarray | None = None,
               values: np.ndarray | None = None, rows: dict | None = None) -> tuple[dict, dict]:
    """Rows with advantages from the registry; old_logp = the rollout's log-probs (behaviour policy).

    ref_logp (B, T), the reference policy's log-probs of the rows' targets (rl.algo.kl_in=reward): the advantage
    estimator gets token rewards r_t - kl_coef * kl_t (`rlpt.algos.kl_in_reward` on the rollout log-probs; an
    outcome estimator sums them per row, as verl's use_kl_in_reward).
    values (B, T), the value head's V(s_t) before the update (rl.algo.advantage=gae): the estimator's input, and
    with its returns the value loss's targets (batch old_values, returns).
    rows: `base_rows(traj, cfg, row_len)` built already (filled in place), else built here."""
    algo = cfg.rl.algo
    rows = base_rows(traj, cfg, row_len) if rows is None else rows
    rewards = jnp.asarray(traj.rewards)
    if algo.overlong_buffer > 0:
        rewards = rewards + soft_overlong_penalty(jnp.asarray(traj.lengths), cfg.rl.rollout.max_new_tokens,
                                                  algo.overlong_buffer, penalty_factor=algo.overlong_penalty)
    mask = jnp.asarray(rows["loss_mask"])
    if traj.dropped is not None:  # rows whose task had a corrupt image (model.vision): sampled, never trained on
        mask = mask * (1.0 - jnp.asarray(traj.dropped, jnp.float32))[:, None]
    if algo.overlong_filter:
        mask = mask * (1.0 - jnp.asarray(traj.truncated, jnp.float32))[:, None]
    num_groups = int(traj.group_ids.max()) + 1
    outcome, extra = rewards, {}
    if ref_logp is not None:
        rewards = kl_in_reward(rewards, jnp.asarray(rows["rollout_logp"]), jnp.asarray(ref_logp), mask,
                               algo.kl_coef, algo.kl_estimator)
        kl = get_kl(algo.kl_estimator)(jnp.asarray(rows["rollout_logp"]), jnp.asarray(ref_logp)) * mask
        extra["kl_reward/kl"] = float(jnp.sum(kl) / jnp.maximum(jnp.sum(mask), 1.0))  # mean kl_t per policy token
    if values is not None:
        values = jnp.asarray(values) * mask
    adv, returns = get_advantage(algo.advantage)(rewards, mask, jnp.asarray(traj.group_ids), num_groups=num_groups,
                                                 values=values, **algo.advantage_kwargs)
    kept = 1.0
    if algo.dynamic_sampling:
        _, keep_rows = dynamic_sampling_keep(outcome, jnp.asarray(traj.group_ids), num_groups)
        keep_rows = jnp.asarray(keep_rows, jnp.float32)
        mask = mask * keep_rows[:, None]
        kept = float(jnp.mean(keep_rows))
    rows["loss_mask"] = np.asarray(mask, np.float32)
    rows["advantages"] = np.asarray(adv, np.float32) * rows["loss_mask"]
    rows["old_logp"] = rows["rollout_logp"]
    if values is not None:
        rows["old_values"] = np.asarray(values, np.float32)
        rows["returns"] = np.asarray(returns, np.float32) * rows["loss_mask"]
    if traj.dropped is not None:
        extra["rollout/dropped_images"] = float(np.sum(traj.dropped))
    return rows, {"rollout/kept_fraction": kept} | extra


def shared_prefix_group(cfg: Config) -> int | None:
    """The group size the RL loss shares prompts over (rl.exec.share_prefix), or None; checks micro-batches
    hold whole groups. Pass it to `rl_loss(cfg.rl.algo, group)` (run_rl does)."""
    if not cfg.rl.exec.share_prefix:
        return None
    if cfg.rl.rollout.prompts_per_step % cfg.optim.grad_accum:
        raise ValueError(f"rl.exec.share_prefix: rl.rollout.prompts_per_step={cfg.rl.rollout.prompts_per_step} is "
                         f"not divisible by optim.grad_accum={cfg.optim.grad_accum}, so a micro-batch would split "
                         "a group; change one or set rl.exec.share_prefix=false")
    return cfg.rl.rollout.group_size


def check_shared_prefix(rows: dict, group: int) -> None:
    """rl.exec.share_prefix's premise: rows come in consecutive groups of `group` whose columns before the
    window start are identical (one prompt, sampled G times). Raises naming the first group where not."""
    B, W = rows["inputs"].shape
    if B % group:
        raise ValueError(f"rl.exec.share_prefix: {B} rows are not whole groups of rl.rollout.group_size={group}")
    starts = rows["window"][:, 0].reshape(-1, group)
    for g in range(B // group):
        r0, s = g * group, int(starts[g, 0])
        same = (starts[g] == s).all() and all(
            (rows[k][r0:r0 + group, :s] == rows[k][r0, :s]).all() for k in ("inputs", "positions", "segment_ids"))
        if not same:
            raise ValueError(f"rl.exec.share_prefix: the rows of group {g} (rows {r0}..{r0 + group - 1}) do not "
                             "share their columns before the logit window; set rl.exec.share_prefix=false")


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _trainer_forward(model_cfg, params, batch, group=None, values=False):
    """log p(target) (A, b, K or T) for micro-batches (A, b, ...), one micro-batch at a time; values=True: the
    value head's V(s_t) instead (params {"lm", "head"})."""
    if values:
        return jax.lax.map(lambda mb: token_logprobs_entropy(params["lm"], model_cfg, mb, group,
                                                             value_head=params["head"])[2], batch)
    return jax.lax.map(lambda mb: token_logprobs_entropy(params, model_cfg, mb, group)[0], batch)


def recompute_old_logp(trainer, batch: dict, group: int | None = None) -> dict:
    """The batch with old_logp = the trainer's log-probs of its targets under the current params, before this
    update (no gradient), 0 off the loss mask; rollout_logp stays the sampler's.

    rl.algo.old_logp=recompute: the PPO ratio is taken against the trainer's own forward, so the rollout /
    trainer mismatch (another numeric path, or an older policy in async mode: decoupled PPO's proximal
    policy) is left to rl.algo.correction_level. Runs in the step's micro-batches (optim.grad_accum);
    group: the shared-prefix group size (rl.exec.share_prefix), None for full rows.
    """
    logp = rows_logp(trainer, trainer.model().params, batch, group)
    return dict(batch, old_logp=logp * np.asarray(batch["loss_mask"], np.float32))


def rows_logp(trainer, params, batch: dict, group: int | None = None, values: bool = False) -> np.ndarray:
    """(B, T) log-probs of the batch rows' targets under `params` (the trainer's model config, its mesh and
    micro-batches; no gradient), in row columns (0 outside a logit window); values=True: the value head's
    V(s_t) under params {"lm", "head"} instead."""
    keys = ("inputs", "targets", "positions", "segment_ids") + tuple(
        k for k in ("window", "pixel_values", "num_images") if k in batch)
    rows = microbatch({k: np.asarray(batch[k]) for k in keys}, trainer.cfg.optim.grad_accum)
    with jax.set_mesh(trainer.mesh), axis_rules(trainer.cfg.mesh.rules):
        logp = _trainer_forward(trainer.model_cfg, params, shard_batch(rows, trainer.mesh), group, values)
    logp = np.asarray(logp, np.float32).reshape(len(batch["inputs"]), -1)
    if "window" in batch:  # back to row columns
        full = np.zeros(batch["inputs"].shape, np.float32)
        np.put_along_axis(full, np.asarray(batch["window"]), logp, axis=1)
        logp = full
    return logp


def check_algo(algo) -> None:
    """Fail early on rl.algo settings that would be silently ignored (`rlpt.algos.options`; compose runs it too)."""
    if algo.old_logp not in ("rollout", "recompute"):
        raise ValueError(f"rl.algo.old_logp={algo.old_logp!r}; expected 'rollout' or 'recompute'")
    check_algo_options(algo)


def generated_tokens(traj) -> int:
    """Tokens the policy sampled (multi-turn: tool observations inside the response are not counted)."""
    if traj.policy_mask is None:
        return int(np.sum(traj.lengths))
    return int(sum(np.sum(traj.policy_mask[r, :int(n)]) for r, n in enumerate(traj.lengths)))


def step_row(step: int, traj, metrics: dict, bmetrics: dict, group_size: int) -> dict:
    """One metrics.jsonl row: rewards, pass rate, loss terms per policy token, staleness (timings added later)."""
    ntok = max(metrics.pop("policy_tokens"), 1.0)
    row = {"step": step, "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
           "reward_mean": float(traj.rewards.mean()), "reward_std": float(traj.rewards.std()),
           "pass_rate": float(traj.passed.mean()), "response_len": float(traj.lengths.mean()),
           "entropy": metrics.pop("entropy_sum") / ntok, "logp_gap": metrics.pop("logp_gap_sum") / ntok,
           "staleness": (step - 1) - traj.version, "policy_version": traj.version,
           "tokens_generated": generated_tokens(traj), "tokens_trained": ntok} | bmetrics
    row |= {k: v / ntok for k, v in metrics.items() if k.startswith(("pg/", "critic/"))}
    if traj.row_versions is not None:  # partial rollouts: episodes begun by older policies
        lag = (step - 1) - traj.row_versions
        row |= {"episode_staleness_max": int(lag.max()), "episode_staleness_mean": float(lag.mean()),
                "continued_fraction": float(np.mean(traj.row_versions < traj.version))}
    for d in sorted({t.domain for t in traj.tasks}):
        idx = [i for i, t in enumerate(traj.tasks) if t.domain == d]
        row[f"reward/{d}"] = float(np.concatenate([traj.rewards[i * group_size:(i + 1) * group_size]
                                                   for i in idx]).mean())
    task_rewards = traj.rewards.reshape(len(traj.tasks), group_size).mean(axis=1)
    for key, stat in family_means(traj.tasks, task_rewards).items():  # code/*: one per problem family
        row[f"reward_family/{key}"] = stat["mean"]
    return row | component_row(traj)


def idle_fraction(rows: list[dict]) -> float:
    """Share of the loop's wall time the trainer spends outside train steps, in steady state: the first row
    (compilation of the sampler and the train step) is left out when there are others."""
    rows = rows[1:] if len(rows) > 1 else rows
    return sum(r["idle_s"] for r in rows) / max(sum(r["step_s"] for r in rows), 1e-9)


def run_rl(cfg: Config, tok, *, init_model, out_dir: str, evaluate_fn=None, observers=None, rollout_fn=None,
           rescore=None) -> dict:
    """Train `init_model` with RL; returns summary metrics, per-step history, evals, the model, curriculum state.

    observers: objects with on_step(step, traj, row) and close() -> dict (merged into the summary); None: the
    ones cfg.observe enables (TensorBoard, drift, trajectory and failure logs; rlpt.observe.default_observers).
    rollout_fn(model, tok, tasks, rcfg, *, seed, version) -> Trajectories replaces the single-turn rollout
    (e.g. multi-turn agents). Rewards come from the reward mixture cfg.reward (rlpt.rewards.RewardMixture:
    verifier outcome, process credit, format, length shaping, judges, per-domain tables) over the rollout's
    verdicts; judges named in it must be registered first.
    rescore(traj) -> (traj, metrics) replaces a step's rewards in the trainer's thread before its batch is built,
    e.g. PPO-RLHF's reward-model term (`rlpt.pipeline.ppo_rlhf`); its metrics join the step's row.
    rl.algo.advantage=gae trains a value head beside the policy (rl.critic; params {"lm", "head"},
    `rlpt.train.heads`): its values before the update feed GAE and the value loss.
    The trainer's idle time is the loop's wall time outside train steps (sync: while
    generating, verifying and preparing the batch; async: while waiting for the producer; both: checkpointing,
    logging, observers), evaluation excluded.
    """
    if cfg.rl.mode not in ("sync", "async"):
        raise ValueError(f"rl.mode={cfg.rl.mode!r}; expected 'sync' or 'async'")
    check_algo(cfg.rl.algo)
    if cfg.model.vision is not None:  # before any compile: combinations the image rows do not support yet
        for key, on in (("rl.exec.share_prefix", cfg.rl.exec.share_prefix), ("rl.rollout.refill",
                                                                             cfg.rl.rollout.refill)):
            if on:
                raise ValueError(f"{key}=true does not combine with model.vision yet; set {key}=false")
    asynchronous = cfg.rl.mode == "async"
    os.makedirs(out_dir, exist_ok=True)
    rcfg = rl_config(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out_dir=out_dir)))
    algo, G = cfg.rl.algo, cfg.rl.rollout.group_size
    frozen = (lambda m: {"ref": m.params}) if algo.kl_coef > 0 else None  # the KL reference (loss or reward)
    # Async keeps older policy versions alive for the producer, so their buffers cannot be donated.
    share = shared_prefix_group(cfg)
    trainer_devices, sampler_devices = None, None
    if cfg.rl.placement == "split":  # the sampler on its own devices, the trainer's mesh on the rest
        trainer_devices, sampler_devices = split_devices(cfg.rl.sampler_devices)
    critic = cfg.rl.critic if algo.advantage == "gae" else None
    if critic is not None:  # PPO with a value head: params {"lm", "head"}
        head = init_head(init_model.config.hidden_size, cfg.train.seed + 9)
        trainer = make_head_trainer(rcfg, rl_loss(algo, share, cfg.data.cp_layout, critic), init_model, head,
                                    ref=algo.kl_coef > 0, head_lr=critic.lr or None, donate=not asynchronous,
                                    devices=trainer_devices)
    else:
        trainer = make_trainer(rcfg, rl_loss(algo, share, cfg.data.cp_layout), init=init_model,
                               extra_frozen=frozen, donate=not asynchronous, devices=trainer_devices)
    kl_reward = algo.kl_coef > 0 and algo.kl_in == "reward"
    # The advantages need the trainer (the reference's log-probs, the value head) or a rescore: the producer
    # only builds the rows, the trainer's thread the batch.
    deferred = kl_reward or critic is not None or rescore is not None
    # the run's task mixture: the domains group and/or prompt files (data=rl_jsonl), as domain_mixture reads it
    curriculum = build_curriculum(cfg.curriculum, rl_domains(cfg))
    cstate = curriculum.init_state()
    meta = maybe_resume(trainer)
    epochs = cfg.rl.ppo_epochs
    if meta is not None:
        cstate = decode_state(meta["curriculum"])
        if meta.get("ppo_epochs", 1) != epochs:  # checkpoints are named by optimizer step: steps x epochs
            raise ValueError(f"rl.ppo_epochs={epochs}, but the checkpoint in {out_dir} was written with "
                             f"rl.ppo_epochs={meta.get('ppo_epochs', 1)}; resume with that value or a new out_dir")
    start = int(trainer.state.step) // epochs
    rollout_fn = rollout_fn or rollout
    stateful = getattr(rollout_fn, "stateful", False)  # partial rollouts: paused episodes live in the checkpoint
    if stateful and meta is not None:
        rollout_fn.load(meta.get("episodes"), start)
    row_len = cfg.rl.rollout.max_prompt_len + cfg.rl.rollout.max_new_tokens
    runlog = RunLog(out_dir, resume_at=start, tensorboard=False)  # TensorBoard: an observer
    n_restored = len(runlog.history)
    if observers is None:
        observers = default_observers(cfg, out_dir)
    ckpt_every = cfg.train.ckpt_every if trainer.checkpointer is not None else 0
    prepare = (lambda traj: (base_rows(traj, cfg, row_len), {})) if deferred else (
        lambda traj: make_batch(traj, cfg, row_len))
    producer = Producer(cfg, tok, curriculum, cstate, start, trainer.model(), rollout_fn,
                        prepare, asynchronous=asynchronous, ckpt_every=ckpt_every,
                        mixture=RewardMixture(cfg.reward), sampler_devices=sampler_devices)
    n_params = int(sum(np.size(x) for x in jax.tree.leaves(trainer.model().params)))
    bound = producer.lag
    evals = {}
    times = {"generate": 0.0, "verify": 0.0, "train": 0.0, "idle": 0.0, "loop": 0.0}
    cur = {"carry": 0.0}  # this step's trajectories and clocks
    # where the rollouts' verifications (and multi-turn environments) run: this process or Ray actors (fleet=ray)
    fleet_scope = contextlib.ExitStack()  # closed (fleet released) in the finally below
    fleet = fleet_scope.enter_context(make_fleet(cfg.fleet, alert_hooks=[get_alert_hook(h)
                                                                         for h in cfg.observe.alert_hooks]))
    fleet_scope.enter_context(use(fleet))

    def next_batch(step):
        cur["t0"] = time.time()
        if "t_tail" in cur:  # the last step's checkpoint, observers and logging: idle time too (evaluation not)
            cur["carry"] = cur["t0"] - cur["t_tail"] - cur.pop("eval_s", 0.0)
        traj, batch, bmetrics = producer.get(step)
        staleness = (step - 1) - traj.version
        if not 0 <= staleness <= bound:
            raise AssertionError(f"step {step}: batch from policy version {traj.version} has staleness "
                                 f"{staleness} outside [0, {bound}] (rl.max_staleness, rl.mode={cfg.rl.mode})")
        cur["t1"] = time.time()
        if rescore is not None:
            traj, rescore_metrics = rescore(traj)
            bmetrics = bmetrics | rescore_metrics
        if deferred:  # the reference's log-probs and the values before the update, then the advantages
            ref_logp = rows_logp(trainer, trainer.state.frozen["ref"], batch, share) if kl_reward else None
            values = None if critic is None else rows_logp(trainer, trainer.state.params, batch, share, values=True)
            batch, more = make_batch(traj, cfg, row_len, ref_logp=ref_logp, values=values, rows=batch)
            bmetrics = bmetrics | more
        if algo.old_logp == "recompute":
            batch = recompute_old_logp(trainer, batch, share)
        cur["traj"], cur["step"] = traj, step
        return batch, bmetrics

    def train(batch):
        nonlocal cstate
        for _ in range(epochs):  # rl.ppo_epochs passes over the batch; the last pass's metrics are logged
            metrics = to_float(trainer.step(batch))
        cur["train_s"] = time.time() - cur["t1"]
        cstate = curriculum.update(cstate, task_outcomes(cur["traj"], G))
        producer.publish(cur["step"], trainer.model(), cstate)
        return metrics

    def row(step, metrics, bmetrics):
        traj, train_s = cur["traj"], cur["train_s"]
        out = step_row(step, traj, metrics, bmetrics, G) | {"weight_sync_s": producer.sync_s}
        step_s = time.time() - cur["t0"] + cur["carry"]
        out |= {"gen_s": traj.gen_s, "verify_s": traj.verify_s, "train_s": train_s, "idle_s": step_s - train_s,
                "step_s": step_s}
        out |= traj.prefix_stats or {}
        out |= fleet.step_stats() if cfg.fleet.kind != "none" else {}
        for k, v in (("generate", traj.gen_s), ("verify", traj.verify_s), ("train", train_s),
                     ("idle", step_s - train_s), ("loop", step_s)):
            times[k] += v
        cur["t_tail"] = time.time()
        return out

    def after(step, out):
        for obs in observers:
            obs.on_step(step, cur["traj"], out)

    def evaluate(step):
        t = time.time()
        evals[step] = evaluate_fn(trainer.model())
        cur["eval_s"] = time.time() - t
        return {}

    def checkpoint_meta():
        meta = {"curriculum": encode_state(cstate), "ppo_epochs": epochs}
        if stateful:
            meta["episodes"] = rollout_fn.state_at(int(trainer.state.step) // epochs)
        return meta

    closed = []
    try:
        loop = run_loop(trainer, next_batch, LoopHooks(
            train=train, row=row, after=after, meta=checkpoint_meta,
            evaluate=evaluate if evaluate_fn is not None else None),
            steps=cfg.rl.steps, start=start, log=runlog, log_every=cfg.train.log_every, progress=cfg.train.progress,
            eval_every=cfg.rl.eval_every, show=("loss", "reward_mean", "pass_rate"))
    finally:  # also on an error: stop the producer thread and finish pending checkpoint writes
        producer.close()
        fleet_scope.close()
        runlog.close()
        closed = [obs.close() for obs in observers]  # also on an error: logs get their end markers
    history = loop.history
    n = max(cfg.rl.steps - start, 1)
    summary = {"rl_steps": cfg.rl.steps, "rl_mode": cfg.rl.mode, "rl_wall_s": round(times["loop"], 2),
               "trainer_idle_fraction": idle_fraction(history[n_restored:]),
               "time_split_s": {k: round(v, 2) for k, v in times.items()},
               "s_per_step": times["loop"] / n, "max_staleness": bound,
               "max_staleness_seen": max((h["staleness"] for h in history), default=0),
               "tokens_generated": int(sum(h.get("tokens_generated", 0) for h in history)),
               "tokens_trained": float(sum(h.get("tokens_trained", 0.0) for h in history)),
               "n_params": n_params,
               "final_reward": float(np.mean([h["reward_mean"] for h in history[-10:]])) if history else None}
    summary |= {"placement": cfg.rl.placement, "trainer_devices": trainer.mesh.size,
                "sampler_devices": len(sampler_devices) if sampler_devices else jax.local_device_count(),
                "weight_sync_s": float(np.mean([h.get("weight_sync_s", 0.0) for h in history])) if history else 0.0}
    summary["reward"] = cfg.reward.name
    summary["fleet"] = cfg.fleet.kind
    if fleet.quarantined:
        summary["fleet_quarantined"] = dict(fleet.quarantined)
    summary["reward_components"] = run_means(history)
    for extra in closed:
        summary |= extra
    return {"summary": summary, "history": history, "evals": evals, "model": trainer.model(),
            "curriculum_state": cstate}
