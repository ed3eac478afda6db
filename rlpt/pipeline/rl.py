"""The RL loop: sample tasks, generate, verify, advantages, update, sync weights; sync or async."""
import dataclasses
import json
import logging
import os
import queue
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.config.schema import Config
from rlpt.observe.tensorboard import TBWriter
from rlpt.rollout.single_turn import rollout, to_rows
from rlpt.train.loop import Progress, make_trainer, maybe_resume, to_float
from rlpt.train.losses import rl_loss

log = logging.getLogger(__name__)


def encode_state(state: dict) -> dict:
    """Curriculum state (numpy arrays, ints) -> JSON-able."""
    return {k: {"__nd__": v.tolist(), "dtype": str(v.dtype)} if isinstance(v, np.ndarray) else v
            for k, v in state.items()}


def decode_state(state: dict) -> dict:
    return {k: np.asarray(v["__nd__"], v["dtype"]) if isinstance(v, dict) and "__nd__" in v else v
            for k, v in state.items()}


def rl_config(cfg: Config) -> Config:
    """The stage config: RL steps and learning rate on the shared optimizer schema."""
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=cfg.rl.lr),
                               train=dataclasses.replace(cfg.train, steps=cfg.rl.steps))


def make_batch(traj, cfg: Config, row_len: int) -> tuple[dict, dict]:
    """Rows with advantages from the registry; old_logp = the rollout's log-probs (behaviour policy)."""
    from rlpt.algos import dynamic_sampling_keep, get_advantage, soft_overlong_penalty

    algo = cfg.rl.algo
    rows = to_rows(traj, row_len)
    rewards = jnp.asarray(traj.rewards)
    if algo.overlong_buffer > 0:
        rewards = rewards + soft_overlong_penalty(jnp.asarray(traj.lengths), cfg.rl.rollout.max_new_tokens,
                                                  algo.overlong_buffer, penalty_factor=algo.overlong_penalty)
    mask = jnp.asarray(rows["loss_mask"])
    if algo.overlong_filter:
        mask = mask * (1.0 - jnp.asarray(traj.truncated, jnp.float32))[:, None]
    num_groups = int(traj.group_ids.max()) + 1
    adv, _ = get_advantage(algo.advantage)(rewards, mask, jnp.asarray(traj.group_ids), num_groups=num_groups,
                                           **algo.advantage_kwargs)
    kept = 1.0
    if algo.dynamic_sampling:
        _, keep_rows = dynamic_sampling_keep(rewards, jnp.asarray(traj.group_ids), num_groups)
        keep_rows = jnp.asarray(keep_rows, jnp.float32)
        mask = mask * keep_rows[:, None]
        kept = float(jnp.mean(keep_rows))
    rows["loss_mask"] = np.asarray(mask, np.float32)
    rows["advantages"] = np.asarray(adv, np.float32) * rows["loss_mask"]
    rows["old_logp"] = rows["rollout_logp"]
    return rows, {"rollout/kept_fraction": kept}


class Producer:
    """Generates and verifies batches; in async mode on a background thread, ahead of the trainer by at
    most max_staleness policy versions (it waits for the trainer before starting a batch that would be
    staler)."""

    def __init__(self, cfg: Config, tok, curriculum, cstate, start_step: int, model, asynchronous: bool):
        self.cfg, self.tok, self.curriculum = cfg, tok, curriculum
        self.cstate_lock = threading.Lock()
        self.cstate = cstate
        self.model, self.version = model, start_step
        self.cond = threading.Condition()
        self.next_step = start_step + 1
        self.asynchronous = asynchronous
        self.q: queue.Queue = queue.Queue(maxsize=max(cfg.rl.max_staleness, 1))
        self.error = None
        if asynchronous:
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()

    def publish(self, model, version: int):
        """Weight sync: the sampler takes the trainer's new params (same mesh: no copy)."""
        with self.cond:
            self.model, self.version = model, version
            self.cond.notify_all()

    def produce(self, step: int):
        rcfg = self.cfg.rl.rollout
        with self.cond:
            if self.asynchronous:
                # Batch `step` is consumed at trainer version step-1: its policy may lag by max_staleness.
                self.cond.wait_for(lambda: self.version >= step - 1 - self.cfg.rl.max_staleness)
            model, version = self.model, self.version
        rng = np.random.default_rng([self.cfg.train.seed, 11, step])
        with self.cstate_lock:
            tasks = self.curriculum.tasks(self.cstate, step, rng, rcfg.prompts_per_step)
        return rollout(model, self.tok, tasks, rcfg, seed=self.cfg.train.seed * 1_000_003 + step, version=version)

    def _loop(self):
        try:
            for step in range(self.next_step, self.cfg.rl.steps + 1):
                self.q.put((step, self.produce(step)))
        except BaseException as e:  # noqa: BLE001  (re-raised in the trainer thread)
            self.error = e
            self.q.put((None, None))

    def get(self, step: int):
        if not self.asynchronous:
            return self.produce(step)
        got_step, traj = self.q.get()
        if self.error is not None:
            raise RuntimeError("rollout producer failed") from self.error
        assert got_step == step, (got_step, step)
        return traj


def run_rl(cfg: Config, tok, *, init_model, out_dir: str, evaluate_fn=None) -> dict:
    """Train `init_model` with RL; returns summary metrics and per-step history."""
    from rlpt.tasks.curriculum import build_curriculum

    rcfg = rl_config(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out_dir=out_dir)))
    algo = cfg.rl.algo
    frozen = (lambda m: {"ref": m.params}) if algo.kl_coef > 0 and algo.kl_in == "loss" else None
    asynchronous = cfg.rl.mode == "async"
    if cfg.rl.mode not in ("sync", "async"):
        raise ValueError(f"rl.mode={cfg.rl.mode!r}; expected 'sync' or 'async'")
    trainer = make_trainer(rcfg, rl_loss(algo), init=init_model, extra_frozen=frozen, donate=not asynchronous)
    curriculum = build_curriculum(cfg.curriculum, cfg.domains)
    cstate = curriculum.init_state()
    meta = maybe_resume(trainer)
    if meta is not None:
        cstate = decode_state(meta["curriculum"])
    start = int(trainer.state.step)
    row_len = cfg.rl.rollout.max_prompt_len + cfg.rl.rollout.max_new_tokens
    is_main = jax.process_index() == 0
    tb = TBWriter(os.path.join(out_dir, "tb")) if is_main else None
    mlog = open(os.path.join(out_dir, "metrics.jsonl"), "a") if is_main else None
    producer = Producer(cfg, tok, curriculum, cstate, start, trainer.model(), asynchronous)
    progress = Progress(cfg.rl.steps, start, cfg.train.log_every, cfg.train.progress)
    history, evals = [], {}
    times = {"generate": 0.0, "verify": 0.0, "train": 0.0, "idle": 0.0}
    t_loop = time.time()
    for step in range(start + 1, cfg.rl.steps + 1):
        t0 = time.time()
        traj = producer.get(step)
        waited = time.time() - t0
        staleness = (step - 1) - traj.version
        assert 0 <= staleness <= (cfg.rl.max_staleness if asynchronous else 0), (step, traj.version)
        batch, bmetrics = make_batch(traj, cfg, row_len)
        t1 = time.time()
        metrics = to_float(trainer.step(batch))
        train_s = time.time() - t1
        producer.publish(trainer.model(), step)
        with producer.cstate_lock:
            producer.cstate = curriculum.update(producer.cstate, [
                (t.domain, t.difficulty, int(t.id.rsplit(":s", 1)[1]), float(traj.passed[i * cfg.rl.rollout.group_size:
                                                           (i + 1) * cfg.rl.rollout.group_size].mean()))
                for i, t in enumerate(traj.tasks)])
            cstate = producer.cstate
        times["generate"] += traj.gen_s
        times["verify"] += traj.verify_s
        times["train"] += train_s
        times["idle"] += waited
        ntok = max(metrics.pop("policy_tokens"), 1.0)
        row = {"step": step, "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
               "reward_mean": float(traj.rewards.mean()), "reward_std": float(traj.rewards.std()),
               "pass_rate": float(traj.passed.mean()), "response_len": float(traj.lengths.mean()),
               "entropy": metrics.pop("entropy_sum") / ntok, "logp_gap": metrics.pop("logp_gap_sum") / ntok,
               "staleness": staleness, "gen_s": traj.gen_s, "verify_s": traj.verify_s, "train_s": train_s,
               "idle_s": waited} | bmetrics
        row |= {k: v / ntok for k, v in metrics.items() if k.startswith("pg/")}
        for d in sorted({t.domain for t in traj.tasks}):
            idx = [i for i, t in enumerate(traj.tasks) if t.domain == d]
            r = np.concatenate([traj.rewards[i * cfg.rl.rollout.group_size:(i + 1) * cfg.rl.rollout.group_size]
                                for i in idx])
            row[f"reward/{d}"] = float(r.mean())
        history.append(row)
        if tb:
            tb.scalars({k: v for k, v in row.items() if k != "step"}, step)
            tb.histogram("reward/hist", traj.rewards, step)
            if step % max(cfg.train.log_every, 1) == 0:
                tb.text("samples", f"{traj.tasks[0].prompt!r} -> {traj.texts[0]!r} (reward {traj.rewards[0]})", step)
        if mlog:
            mlog.write(json.dumps(row) + "\n")
            mlog.flush()
        progress.update(step, {k: row[k] for k in ("loss", "reward_mean", "pass_rate")})
        ck = trainer.checkpointer
        if ck is not None and (step % cfg.train.ckpt_every == 0 or step == cfg.rl.steps):
            ck.save(step, trainer.state, {"curriculum": encode_state(cstate)}, force=True)
        if evaluate_fn is not None and cfg.rl.eval_every > 0 and step % cfg.rl.eval_every == 0 \
                and step != cfg.rl.steps:
            evals[step] = evaluate_fn(trainer.model())
    progress.close()
    if trainer.checkpointer is not None:
        trainer.checkpointer.close()
    if tb:
        tb.close()
        mlog.close()
    wall = time.time() - t_loop
    n = max(cfg.rl.steps - start, 1)
    summary = {"rl_steps": cfg.rl.steps, "rl_mode": cfg.rl.mode, "rl_wall_s": round(wall, 2),
               "trainer_idle_fraction": times["idle"] / max(wall, 1e-9),
               "time_split_s": {k: round(v, 2) for k, v in times.items()},
               "s_per_step": wall / n, "max_staleness_seen": max((h["staleness"] for h in history), default=0),
               "final_reward": float(np.mean([h["reward_mean"] for h in history[-10:]])) if history else None}
    return {"summary": summary, "history": history, "evals": evals, "model": trainer.model(),
            "curriculum_state": cstate}
