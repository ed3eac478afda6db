"""Agentic RL with partial rollouts on repository tasks, killed mid-run and resumed (`train.resume=auto`): the
episodes paused in the checkpoint (workspace files, tokens, log-probs, counters) continue exactly, so the resumed
run's trajectories, metrics and final parameters equal an uninterrupted run's.

Fast variant: an observer raises mid-run in-process (after a checkpoint, with steps logged past it). Slow
variant: a subprocess SIGKILLed after its second checkpoint, while episodes are in flight.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from rlpt.config import compose

TINY = ["stage=agent", "domains.include=[agent/repo]", "domains.tiers=[1]", "curriculum=fixed",
        "model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=2",
        "rl.rollout.group_size=2", "rl.rollout.max_new_tokens=256", "rl.rollout.max_prompt_len=512",
        "rl.rollout.max_turns=3", "rl.rollout.partial.enabled=true", "rl.rollout.partial.extra_groups=2",
        "rl.rollout.partial.max_lag=2", "train.progress=false", "rl.steps=5", "train.ckpt_every=2"]
COMPARED = ("loss", "grad_norm", "reward_mean", "response_len", "entropy", "episode_staleness_max",
            "continued_fraction")


class Record:
    """Observer: a digest of each step's trajectories (tokens, log-probs, masks, rewards) to a JSONL file."""

    def __init__(self, path):
        self.path = path

    def on_step(self, step, traj, row):
        h = hashlib.sha256()
        for a in (traj.response, traj.rollout_logp, traj.policy_mask, traj.rewards, traj.row_versions):
            h.update(np.ascontiguousarray(a).tobytes())
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, "digest": h.hexdigest(), "tasks": [t.id for t in traj.tasks],
                                "status": traj.status, "versions": traj.row_versions.tolist()}) + "\n")
        if step == getattr(self, "crash_at", None):
            raise Crash(step)

    def close(self):
        return {}


class Crash(Exception):
    pass


def policy(cfg):
    from rlpt.models import init_model

    m = init_model(cfg.model, 0)
    emb = m.params["embed"]  # a frequent end-of-turn token: short turns, several per episode
    m.params["embed"] = emb.at[2].set(emb[2] * 40.0)
    return m


def train(out_dir, crash_at=None, extra=()):
    from rlpt.models import builtin_tokenizer
    from rlpt.pipeline.agent import agent_rollout
    from rlpt.pipeline.rl import run_rl

    cfg = compose(TINY + list(extra))
    rec = Record(os.path.join(out_dir, "traj.jsonl"))
    rec.crash_at = crash_at
    return run_rl(cfg, builtin_tokenizer(), init_model=policy(cfg), out_dir=str(out_dir), observers=[rec],
                  rollout_fn=agent_rollout(cfg))


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def _compare(full_dir, cut_dir, full, resumed):
    got, want = rows(cut_dir / "metrics.jsonl"), rows(full_dir / "metrics.jsonl")
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5]
    for a, b in zip(got, want):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, a["step"]
    assert any(r["continued_fraction"] > 0 for r in want), "no episode was paused: the test would prove nothing"
    traj_want = {r["step"]: r for r in rows(full_dir / "traj.jsonl")}
    traj_got = rows(cut_dir / "traj.jsonl")
    assert traj_got[-1]["step"] == 5
    # episodes begun by policy 0 or 1 (steps 1-2) trained after the resume: they came back from the checkpoint
    assert any(r["step"] >= 3 and min(r["versions"]) <= 1 for r in traj_got)
    for r in traj_got:  # steps run twice (after the checkpoint) drew the same episodes both times
        assert r == traj_want[r["step"]], r["step"]
    for a, b in zip(jax.tree.leaves(full["model"].params), jax.tree.leaves(resumed["model"].params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_crash_and_resume_with_paused_episodes_is_exact(tmp_path, mode):
    (tmp_path / "full").mkdir()
    (tmp_path / "cut").mkdir()
    extra = [f"rl.mode={mode}", "rl.max_staleness=1"]
    full = train(tmp_path / "full", extra=extra)
    with pytest.raises(Crash):  # checkpoint at 2 (with its paused episodes); step 3 logged, then killed
        train(tmp_path / "cut", crash_at=3, extra=extra)
    assert [r["step"] for r in rows(tmp_path / "cut" / "metrics.jsonl")] == [1, 2]
    resumed = train(tmp_path / "cut", extra=extra)
    _compare(tmp_path / "full", tmp_path / "cut", full, resumed)


SCRIPT = """
import sys
sys.path.insert(0, sys.argv[2])
from test_agent_resume import train
train(sys.argv[1])
"""


def _spawn(out_dir):
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")
    log = open(os.path.join(out_dir, "run.log"), "a")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out_dir), os.path.dirname(__file__)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_sigkill_mid_episode_and_resume_is_exact(tmp_path):
    for d in ("full", "cut"):
        (tmp_path / d).mkdir()
    assert _spawn(tmp_path / "full").wait(timeout=1800) == 0
    proc = _spawn(tmp_path / "cut")
    ckpt, deadline = tmp_path / "cut" / "checkpoints", time.time() + 1800
    while not (ckpt.exists() and any(d.isdigit() and int(d) >= 4 for d in os.listdir(ckpt))):
        assert proc.poll() is None and time.time() < deadline, "run ended before its second checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # step 5's episodes (two groups paused since earlier steps) are in flight
    proc.wait()
    assert _spawn(tmp_path / "cut").wait(timeout=1800) == 0
    got, want = rows(tmp_path / "cut" / "metrics.jsonl"), rows(tmp_path / "full" / "metrics.jsonl")
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5]
    for a, b in zip(got, want):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, a["step"]
    traj_want = {r["step"]: r for r in rows(tmp_path / "full" / "traj.jsonl")}
    assert all(r == traj_want[r["step"]] for r in rows(tmp_path / "cut" / "traj.jsonl"))
