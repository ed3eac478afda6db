"""Kill mid-RL and resume: the run continues exactly as uninterrupted (curriculum, data and sampler rng included).

Fast variant: an observer raises mid-run in-process (after a checkpoint, with logged steps past it), then the run
resumes. Slow variant: `python -m rlpt.train` in a subprocess, SIGKILLed after a checkpoint, resumed.
"""
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

TINY = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "rl.rollout.max_new_tokens=6", "rl.rollout.max_prompt_len=24",
        "domains.include=[arith/add]", "domains.tiers=[1,2]", "curriculum=adaptive", "curriculum.min_samples=4",
        "curriculum.start_tier_index=1", "curriculum.replay_fraction=0.25", "train.progress=false"]
COMPARED = ("loss", "grad_norm", "reward_mean", "pass_rate", "response_len", "entropy", "policy_version")


def shaped_rollout(model, tok, tasks, rcfg, *, seed, version):
    """The single-turn rollout with a dense reward (digits written), so a random policy gets gradients."""
    from rlpt.rollout.single_turn import rollout

    return rollout(model, tok, tasks, rcfg, seed=seed, version=version,
                   reward_fn=lambda task, text, score: score + 0.1 * sum(c.isdigit() for c in text))


class Crash(Exception):
    pass


class CrashAt:
    def __init__(self, step):
        self.step = step

    def on_step(self, step, traj, row):
        if step == self.step:
            raise Crash(step)

    def close(self):
        return {}


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def _run(cfg, out_dir, observers=()):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl

    return run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(out_dir),
                  observers=observers, rollout_fn=shaped_rollout)


PPO = ["rl.algo.advantage=gae", "rl.ppo_epochs=2", "rl.algo.kl_coef=0.1", "rl.algo.kl_in=reward"]


@pytest.mark.parametrize("mode,extra", [("sync", []), ("async", []), ("sync", PPO)],
                         ids=["sync", "async", "ppo-value-head-2-epochs"])
def test_resume_after_crash_is_exact(tmp_path, mode, extra, shared_compiles):
    cfg = compose(TINY + ["rl.steps=6", "train.ckpt_every=3", f"rl.mode={mode}", "rl.max_staleness=1"] + extra)
    full = _run(cfg, tmp_path / "full")
    with pytest.raises(Crash):
        _run(cfg, tmp_path / "cut", observers=[CrashAt(5)])  # checkpoint at 3; step 4 logged, then killed
    assert [r["step"] for r in rows(tmp_path / "cut" / "metrics.jsonl")] == [1, 2, 3, 4]
    resumed = _run(cfg, tmp_path / "cut")
    got, want = rows(tmp_path / "cut" / "metrics.jsonl"), rows(tmp_path / "full" / "metrics.jsonl")
    assert [r["step"] for r in got] == list(range(1, 7))  # the steps after the checkpoint are logged once
    compared = COMPARED + (("critic/vf_loss", "critic/value_mean", "kl_reward/kl") if extra else ())
    for a, b in zip(got, want):
        assert {k: a[k] for k in compared} == {k: b[k] for k in compared}, a["step"]
    assert len({r["loss"] for r in want}) > 1 and any(r["loss"] != 0 for r in want)
    for k, v in full["curriculum_state"].items():
        np.testing.assert_array_equal(resumed["curriculum_state"][k], v, err_msg=k)
    assert full["curriculum_state"]["demotions"] > 0  # the adaptive state really moved
    for a, b in zip(jax.tree.leaves(full["model"].params), jax.tree.leaves(resumed["model"].params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if extra:  # another rl.ppo_epochs would misread the checkpoint's step: refused
        with pytest.raises(ValueError, match="rl.ppo_epochs=3, but the checkpoint .* rl.ppo_epochs=2"):
            _run(compose(TINY + ["rl.steps=8", "train.ckpt_every=3", f"rl.mode={mode}"] + extra + ["rl.ppo_epochs=3"]),
                 tmp_path / "cut")
    if mode == "async":
        assert max(r["staleness"] for r in want) == 1


SCRIPT = """
import sys
from rlpt.config import compose
from rlpt.models import builtin_tokenizer, init_model
from rlpt.pipeline.rl import run_rl
sys.path.insert(0, sys.argv[3])
from test_rl_resume import TINY, shaped_rollout
cfg = compose(TINY + ["rl.steps=10", "train.ckpt_every=3", "rl.mode=" + sys.argv[2]])
run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=sys.argv[1], rollout_fn=shaped_rollout)
"""


def _train(out_dir, mode):
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, "run.log"), "a")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out_dir), mode, os.path.dirname(__file__)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_and_resume_is_exact(tmp_path, mode):
    assert _train(tmp_path / "full", mode).wait(timeout=1800) == 0
    proc = _train(tmp_path / "cut", mode)
    ckpt = tmp_path / "cut" / "checkpoints"
    deadline = time.time() + 1800
    while not (ckpt.exists() and any(d.isdigit() and int(d) >= 6 for d in os.listdir(ckpt))):
        assert proc.poll() is None and time.time() < deadline, "run ended before its second checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _train(tmp_path / "cut", mode).wait(timeout=1800) == 0  # train.resume=auto (the default)
    got, want = rows(tmp_path / "cut" / "metrics.jsonl"), rows(tmp_path / "full" / "metrics.jsonl")
    assert [r["step"] for r in got] == list(range(1, 11))
    for a, b in zip(got, want):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, a["step"]
