"""The configured reward mixture reaches RL: `reward=short` / `reward=layered` change the rewards and the updates
of a tiny run against `reward=correctness` on the same seed; a zero-weight component changes nothing; the
per-component breakdown reaches metrics, the trajectory log and the summary."""
import dataclasses

import jax
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.config.tasks import RewardComponentConfig
from rlpt.observe.trajectory_log import read_trajectories

# A random-init policy writing up to 32 tokens: its responses run from 0 to ~30 characters, so `short`'s
# length penalty (past 16 characters) varies inside groups from step 1; layered's format component pays 0.1
# to all but the rare empty response (one in the 96 samples here, at step 3), a constant shift GRPO's group
# normalisation cancels elsewhere.
TINY = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=8",
        "rl.rollout.group_size=4", "domains.include=[arith/add]", "train.ckpt_every=0", "train.progress=false",
        "rl.rollout.max_new_tokens=32", "rl.rollout.max_prompt_len=24", "rl.steps=3", "observe.tensorboard=false"]


def _run(cfg, out_dir):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl

    return run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(out_dir))


def _rewards(res):
    return [h["reward_mean"] for h in res["history"]]


def _params_differ(a, b) -> bool:
    return any(not np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a["model"].params), jax.tree.leaves(b["model"].params)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_compiles):
    out = {}
    for name in ("correctness", "short", "layered"):
        out[name] = _run(compose(TINY + [f"reward={name}"]), tmp_path_factory.mktemp(name))
    base = compose(TINY + ["reward=correctness"])
    zero = dict(base.reward.components, format=RewardComponentConfig(weight=0.0))
    cfg = dataclasses.replace(base, reward=dataclasses.replace(base.reward, components=zero))
    out["zero_format"] = _run(cfg, tmp_path_factory.mktemp("zero_format"))
    return out


def test_mixtures_change_rewards_and_updates(runs):
    base = runs["correctness"]
    for name in ("short", "layered"):
        r, b = _rewards(runs[name]), _rewards(base)
        print(f"{name}: rewards {r} vs correctness {b}")
        assert r != b, name
        if name == "layered":  # the premise of the update check: somewhere the format component varied
            assert any(h["reward_component/format"] not in (0.0, 1.0) for h in runs[name]["history"])
        assert _params_differ(runs[name], base), f"reward={name} left the parameter update unchanged"
    # a length penalty only ever subtracts; the clip keeps every reward inside [clip_low, clip_high]
    assert all(a <= b + 1e-6 for a, b in zip(_rewards(runs["short"]), _rewards(base)))


def test_zero_weight_component_has_no_effect(runs):
    a, b = runs["zero_format"], runs["correctness"]
    assert _rewards(a) == _rewards(b)
    assert not _params_differ(a, b)
    assert "format" in a["summary"]["reward_components"]  # computed and logged, just not paid


def test_components_logged(runs):
    res = runs["layered"]
    comps = res["summary"]["reward_components"]
    assert set(comps) == {"correctness", "format", "length_penalty"}, comps
    assert res["summary"]["reward"] == "layered"
    row = res["history"][0]
    for name in comps:
        assert f"reward_component/arith/add/{name}" in row and f"reward_component/{name}" in row
    assert np.isclose(comps["format"], np.mean([h["reward_component/format"] for h in res["history"]]))
    assert runs["correctness"]["summary"]["reward_components"].keys() == {"correctness"}
    recs = read_trajectories(res["summary"]["trajectory_log_dir"])
    assert recs and all(set(r["components"]) == set(comps) and "outcome" in r for r in recs)
    # the logged reward is the weighted, clipped sum of the logged components (layered: 1, 0.1, 0.1)
    for r in recs[:8]:
        c = r["components"]
        want = np.clip(c["correctness"] + 0.1 * c["format"] + 0.1 * c["length_penalty"], -1.0, 1.5)
        assert np.isclose(r["reward"], want, atol=1e-6)
