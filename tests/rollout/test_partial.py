"""Partial rollouts: a step ends once prompts_per_step groups have ended; the rest are paused in saved form and
continued by the next step, exactly (log-probs against a teacher-forced pass, a reloaded state gives the same
step); workspaces are saved and restored file for file."""
import importlib.util
import os

import jax
import numpy as np
import pytest
from rlpt.envs.builtin_tasks import EnvTask
from rlpt.envs.sandbox.workspace import dump_tree, load_tree

from rlpt.config.schema import PartialConfig, RolloutConfig
from rlpt.rollout.partial import PartialRollout
from rlpt.rollout.single_turn import to_rows
from rlpt.train.losses import token_logprobs


def _bench():
    """scripts/bench/partial_rollout.py, whose ToolEnv (ends with reward 1 after meta['turns'] calls; its state is
    the call count) these tests run on, without the sleep."""
    spec = importlib.util.spec_from_file_location("partial_rollout_bench", os.path.join(
        os.path.dirname(__file__), "..", "..", "scripts", "bench", "partial_rollout.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ToolEnv = _bench().ToolEnv


RCFG = RolloutConfig(prompts_per_step=2, group_size=2, max_new_tokens=160, temperature=1.0, max_prompt_len=64,
                     max_turns=6, partial=PartialConfig(enabled=True, extra_groups=2, max_lag=2))


def _tasks(step, turns):
    return [EnvTask("fake", f"s{step}t{i}", "unused", meta={"turns": t}) for i, t in enumerate(turns)]


def _partial(log):
    return PartialRollout(RCFG, max_turns=RCFG.max_turns, make_env=lambda task: ToolEnv(0.0, log))


def test_pause_and_continue(model, tok):
    log = []
    pr = _partial(log)
    assert pr.tasks_wanted() == 4  # prompts_per_step + extra_groups on the first step
    t1 = pr(model, tok, _tasks(1, [1, 5, 1, 5]), RCFG, seed=11, version=0, step=1)
    # the two one-turn groups end first and form the batch; the five-turn groups are paused after one turn
    assert [t.id for t in t1.tasks] == ["s1t0", "s1t2"] and t1.rewards.tolist() == [1.0] * 4
    assert [g["step"] for g in pr.state_at(1)] == [1, 1] and pr.tasks_wanted() == 2
    paused = [e for g in pr.state_at(1) for e in g["eps"]]
    assert all(e["status"] == "running" and e["turns"] == 1 for e in paused)
    assert [g["env"] for g in pr.state_at(1)] == [[{"n": 1}] * 2] * 2
    t2 = pr(model, tok, _tasks(2, [1, 1]), RCFG, seed=12, version=1, step=2)
    # step 2: the paused groups reach max_lag at step 3 at the latest; here the new one-turn groups end first
    assert [t.id for t in t2.tasks] == ["s2t0", "s2t1"]
    t3 = pr(model, tok, _tasks(3, [1, 1]), RCFG, seed=13, version=2, step=3)
    # step 3: the groups of step 1 are max_lag (2) steps old: run to the end, and trained first (oldest)
    assert [t.id for t in t3.tasks] == ["s1t1", "s1t3"]
    assert t3.row_versions.tolist() == [0] * 4 and t3.version == 2
    assert t3.rewards.tolist() == [1.0] * 4 and t3.turns.tolist() == [5] * 4
    # the env saw its count continue across the pauses (restored, not restarted)
    assert sorted(n for tid, n in log if tid == "s1t1") == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    # Continued decoding (a fresh prefill of prompt + tokens so far) samples with the right log-probs: the same
    # model throughout, so every policy token's rollout log-prob equals a teacher-forced pass over the row.
    rows = to_rows(t3, RCFG.max_prompt_len + RCFG.max_new_tokens)
    lp = np.asarray(token_logprobs(model.params, model.config, {k: jax.numpy.asarray(v) for k, v in rows.items()}))
    m = rows["loss_mask"] > 0
    np.testing.assert_allclose(lp[m], rows["rollout_logp"][m], atol=2e-4)
    assert m.sum() == t3.policy_mask.sum()


def test_reloaded_state_continues_exactly(model, tok):
    a, b = _partial([]), _partial([])
    a(model, tok, _tasks(1, [1, 4, 2, 4]), RCFG, seed=21, version=0, step=1)
    b.load(a.state_at(1), 1)
    ta = a(model, tok, _tasks(2, [2, 1]), RCFG, seed=22, version=1, step=2)
    tb = b(model, tok, _tasks(2, [2, 1]), RCFG, seed=22, version=1, step=2)
    for f in ("response", "rollout_logp", "policy_mask", "rewards", "lengths", "row_versions"):
        np.testing.assert_array_equal(getattr(ta, f), getattr(tb, f), err_msg=f)
    assert a.state_at(2) == b.state_at(2)
    with pytest.raises(ValueError, match="partial.enabled=false"):
        _partial([]).load(None, 3)


def test_env_without_saved_state_is_refused(model, tok):
    class Plain(ToolEnv):
        episode_state = None

    pr = PartialRollout(RCFG, max_turns=6, make_env=lambda task: Plain(0.0))
    t = pr(model, tok, _tasks(1, [1, 6, 1, 6]), RCFG, seed=5, version=0, step=1)
    assert len(t.tasks) == 2
    # the unfinished episodes could not be saved: they end as errors (score 0) when their group is trained
    assert {e["status"] for g in pr.state_at(1) for e in g["eps"]} == {"error"}


def test_workspace_dump_and_load(tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text("x = 1\n")
    (src / "run.sh").write_bytes(b"#!/bin/sh\n\xff\n")
    os.chmod(src / "run.sh", 0o755)
    os.symlink("pkg/m.py", src / "link")
    tree = dump_tree(str(src), 1 << 20)
    dst.mkdir()
    (dst / "stale.txt").write_text("gone after load")
    load_tree(str(dst), tree, None)
    assert dump_tree(str(dst), 1 << 20) == tree
    assert sorted(os.listdir(dst)) == ["link", "pkg", "run.sh"] and os.readlink(dst / "link") == "pkg/m.py"
    assert os.stat(dst / "run.sh").st_mode & 0o777 == 0o755
    with pytest.raises(ValueError, match="pass 4 bytes"):
        dump_tree(str(src), 4)
    os.mkfifo(src / "pipe")
    with pytest.raises(ValueError, match="'pipe' is a fifo"):
        dump_tree(str(src), 1 << 20)


@pytest.mark.parametrize("overrides,match", [
    (["experiment=quickstart"], "stage=quickstart has none"),
    (["experiment=agent_repo_tiny", "rl.algo.old_logp=recompute"], "drops their importance weights"),
])
def test_compose_refuses_what_partial_rollouts_cannot_do(overrides, match):
    from rlpt.config import compose
    from rlpt.config.validate import ConfigError

    with pytest.raises(ConfigError, match=match):
        compose(overrides + ["rl.rollout.partial.enabled=true"])
    compose(overrides[:1] + ["rl.rollout.partial.enabled=true"] if "agent" in overrides[0] else overrides)
