"""Reward mixtures outside the single-turn path and their audits: multi-turn episodes are rewarded through the
mixture; a judge component shapes a tiny RL run and its disagreement with the verifier is a metric; a
shaping component that pays while the verifier's outcome falls raises a 'reward_hacking' alert."""
import dataclasses
import json
import types

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.config.tasks import RewardComponentConfig, RewardConfig
from rlpt.observe.alerts import AlertSink
from rlpt.observe.components import RewardAuditObserver, component_row
from rlpt.rewards import RewardMixture, RewardModelJudge, Verdict
from rlpt.rewards.judges import JUDGES, register_judge
from rlpt.rewards.mixture import mix_rewards
from rlpt.tasks.base import Task


def _task(domain: str, id: str, prompt: str) -> Task:
    return Task(domain, id, prompt, 0, {}, env_id="fake")


class TwoStepEnv:
    """Ends after two actions with the verifier verdict of a task the policy solves half-way."""

    def reset(self, seed=None, options=None):
        self.n = 0
        return "call a tool", {}

    def step(self, action):
        self.n += 1
        done = self.n >= 2
        info = {"verdict": {"score": 1.0, "passed": True, "details": {"process": 0.5}}} if done else {}
        return "ok", float(done), done, False, info

    def close(self):
        pass


def _mixture(components, **kw):
    table = {k: RewardComponentConfig(**v) for k, v in components.items()}
    return RewardMixture(RewardConfig(name="t", components=table, **kw))


def test_multi_turn_episodes_scored_by_the_mixture():
    from rlpt.config.schema import RolloutConfig
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.models.config import ModelConfig
    from rlpt.rollout.multi_turn import rollout

    tok = builtin_tokenizer()
    mcfg = ModelConfig(family="qwen2", vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, max_position_embeddings=512, qkv_bias=True, tie_embeddings=True)
    model = init_model(mcfg, seed=3)
    model.params["embed"] = model.params["embed"].at[2].set(model.params["embed"][2] * 40.0)  # short turns
    rcfg = RolloutConfig(prompts_per_step=2, group_size=2, max_new_tokens=64, max_prompt_len=32,
                         episode_timeout_s=600.0)
    tasks = [_task("fake", f"t{i}", "unused") for i in range(2)]
    traj = rollout(model, tok, tasks, rcfg, seed=7, version=0, max_turns=3, make_env=lambda t: TwoStepEnv())
    mix = _mixture({"correctness": {"weight": 1.0}, "process": {"weight": 0.5},
                    "length_penalty": {"weight": 0.1, "target_chars": 0, "max_chars": 10}}, clip_high=2.0)
    scored = mix_rewards(traj, mix)
    assert "done" in traj.status
    for r, status in enumerate(traj.status):
        c = scored.components[r]
        if status == "done":
            assert c["correctness"] == 1.0 and c["process"] == 0.5
        else:  # cut or crashed: the verifier's outcome and its process credit are 0
            assert c["correctness"] == 0.0 and c["process"] == 0.0
        # length shaping reads the policy's own turns, not the tool output appended between them
        assert c["length_penalty"] == -min(1.0, len(traj.reward_texts[r]) / 10)
        assert np.isclose(scored.rewards[r], c["correctness"] + 0.5 * c["process"] + 0.1 * c["length_penalty"])
    assert mix_rewards(scored, mix) is scored  # scored once


@pytest.fixture
def digit_judge():
    """A judge that likes digits: the share of digit characters in the response."""
    def scorer(prompts, responses):
        return np.asarray([sum(c.isdigit() for c in r) / max(len(r), 1) for r in responses])

    register_judge("digits", RewardModelJudge(scorer, squash="clip"), replace=True)
    yield JUDGES["digits"]
    del JUDGES["digits"]


def test_judge_disagreement_metric(digit_judge):
    tasks = [_task("arith/add", "a", "1+1="), _task("strings/rev", "b", "rev ab")]
    traj = types.SimpleNamespace(tasks=tasks, group_ids=np.array([0, 0, 1, 1]), passed=np.array([1, 0, 1, 0], bool),
                                 verdicts=[Verdict(float(p), bool(p), {"process": float(p)}) for p in (1, 0, 1, 0)],
                                 reward_texts=["2", "7", "ba", "9"], texts=["2", "7", "ba", "9"], verify_s=0.0,
                                 components=None, rewards=np.zeros(4, np.float32))
    mix = _mixture({"correctness": {"weight": 1.0}, "judge_digits": {"weight": 0.5}})
    rewards, parts = mix.score_batch([tasks[g] for g in traj.group_ids], traj.reward_texts, traj.verdicts)
    traj.components = parts
    row = component_row(traj)
    # arith: the judge likes both digits (pass and fail): 1 of 2 disagree; strings: it fails the right "ba"
    # and passes the wrong "9": both disagree
    assert row["judge_disagreement/digits/arith/add"] == 0.5
    assert row["judge_disagreement/digits/strings/rev"] == 1.0
    assert row["reward_component/judge_digits"] == 0.75
    np.testing.assert_allclose(rewards, [1.0, 0.5, 1.0, 0.5])


def test_judge_component_shapes_rl(digit_judge, tmp_path):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl

    tiny = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
            "rl.rollout.group_size=4", "domains.include=[arith/add]", "train.ckpt_every=0", "train.progress=false",
            "rl.rollout.max_new_tokens=6", "rl.rollout.max_prompt_len=24", "rl.steps=2", "observe.tensorboard=false"]
    cfg = compose(tiny)
    comps = dict(cfg.reward.components, judge_digits=RewardComponentConfig(weight=0.5))
    cfg = dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, name="judged", components=comps))
    res = run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(tmp_path))
    s = res["summary"]
    assert set(s["reward_components"]) == {"correctness", "judge_digits"}
    assert s["reward_components"]["judge_digits"] > 0  # random text holds digits: the judge pays
    assert all("judge_disagreement/digits/arith/add" in h for h in res["history"])
    assert digit_judge.counts["calls"] == 2  # one batched call per step


def _step(domain_scores, fmt):
    """One step's trajectories: outcome scores and format values, one task of 4 samples in domain 'd'."""
    tasks = [_task("d", "x", "p")]
    return types.SimpleNamespace(tasks=tasks, group_ids=np.zeros(4, int), passed=np.asarray(domain_scores) >= 1.0,
                                 verdicts=[Verdict(s, s >= 1.0, {"process": s}) for s in domain_scores],
                                 components=[{"correctness": s, "format": f} for s, f in zip(domain_scores, fmt)])


@pytest.mark.parametrize("outcome_after, alerts", [((0, 0, 0, 0), 1), ((1, 1, 1, 1), 0)])
def test_shaping_component_paying_while_outcome_falls_alerts(tmp_path, outcome_after, alerts):
    sink = AlertSink(str(tmp_path))
    audit = RewardAuditObserver(sink, window=2, baseline=3, min_samples=4, bins=10, ks_threshold=0.3,
                                psi_threshold=0.2)
    before = (1, 0, 1, 0)
    for step in range(1, 6):
        late = step > 3
        row = {}
        audit.on_step(step, _step(outcome_after if late else before, (1, 1, 1, 1) if late else (0, 0, 0, 1)), row)
        assert row["reward_share/d/format"] >= 0
    out = audit.close()
    sink.close()
    assert out["reward_hacking_alerts"] == alerts
    recs = [json.loads(line) for line in open(sink.path)]
    assert len(recs) == alerts
    if alerts:
        r = recs[0]
        assert r["kind"] == "reward_hacking" and r["component"] == "format" and r["domain"] == "d"
        assert r["component_after"] > r["component_before"] and r["outcome_after"] < r["outcome_before"]


def test_judge_disagreement_rising_alerts(tmp_path):
    """A judge that pays the failures more and more: its disagreement with the verifier climbs slowly, each
    step only a little above the last (a rolling baseline would follow it), the outcome stays put."""
    sink = AlertSink(str(tmp_path))
    audit = RewardAuditObserver(sink, window=2, baseline=3, min_samples=4, bins=10, ks_threshold=0.3,
                                psi_threshold=0.2)
    outcome = (1, 0, 0, 0)
    for step in range(1, 9):
        k = min(3, step // 2)  # failed samples the judge passes: 0, 1, 1, 2, 2, 3, 3, 3
        traj = _step(outcome, (0, 0, 0, 0))
        traj.components = [{"correctness": float(o), "judge_x": 1.0 if (o or i <= k) else 0.0}
                           for i, o in enumerate(outcome)]
        audit.on_step(step, traj, {})
    out = audit.close()
    sink.close()
    recs = [json.loads(line) for line in open(sink.path)]
    # both signs: the judge's pay rose with a flat outcome, and it disagrees with the verifier more
    assert out["reward_hacking_alerts"] == 2 and {r["component"] for r in recs} == {"judge_disagreement/x", "judge_x"}
