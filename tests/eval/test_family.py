"""Per-problem-family reports: code tasks name their family; held-out and training metrics split by it."""
import types

import numpy as np

from rlpt.eval.heldout import family_means
from rlpt.pipeline.rl import step_row
from rlpt.tasks import get_domain
from rlpt.tasks.base import Task
from rlpt.tasks.native.code_problems import FAMILIES


def test_code_tasks_name_their_family():
    for name in ("code/synth", "code/repair", "code/trace"):
        dom = get_domain(name)
        seen = set()
        for seed in range(40):
            task = dom.generate(seed, 3)
            assert task.meta["family"] in {f.__name__ for f in FAMILIES[3]}, (name, task.meta)
            seen.add(task.meta["family"])
        assert len(seen) >= 2, (name, seen)


def _task(domain, family=None):
    meta = {"answer": "x"} | ({"family": family} if family else {})
    return Task(domain=domain, id="t", prompt="p", difficulty=1, meta=meta)


def test_family_means_groups_by_domain_and_family():
    tasks = [_task("code/synth", "rle"), _task("code/synth", "caesar"), _task("code/synth", "rle"),
             _task("arith/add"), _task("code/trace", "rle")]
    out = family_means(tasks, [1.0, 0.0, 0.0, 1.0, 1.0])
    assert out == {"code/synth/caesar": {"mean": 0.0, "n": 1}, "code/synth/rle": {"mean": 0.5, "n": 2},
                   "code/trace/rle": {"mean": 1.0, "n": 1}}
    assert family_means([_task("arith/add")], [1.0]) == {}


def test_step_row_reports_reward_per_family():
    tasks = [_task("code/synth", "rle"), _task("code/synth", "caesar"), _task("arith/add")]
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])  # group size 2, prompt-major
    traj = types.SimpleNamespace(tasks=tasks, rewards=rewards, passed=rewards > 0, lengths=np.full(6, 4),
                                 version=0, policy_mask=None, components=None, verdicts=None, row_versions=None)
    metrics = {"loss": 0.1, "grad_norm": 1.0, "policy_tokens": 24.0, "entropy_sum": 2.4, "logp_gap_sum": 0.0}
    row = step_row(1, traj, metrics, {}, 2)
    assert row["reward_family/code/synth/rle"] == 0.5 and row["reward_family/code/synth/caesar"] == 0.0
    assert row["reward/code/synth"] == 0.25 and row["reward/arith/add"] == 1.0
    assert not any(k.startswith("reward_family/arith") for k in row)


def test_eval_results_have_a_per_family_table(tmp_path):
    import json

    from tests.eval.test_cli import _cli

    proc = _cli("suite=domains:code/trace,arith/add", "policy=oracle", "per_domain=12", f"out={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    fams = res["per_family"]
    assert fams and all(k.startswith("code/trace/") for k in fams), fams  # arith tasks name no family
    assert sum(v["n"] for v in fams.values()) == res["per_domain"]["code/trace"]["n"] == 12
    assert all(v["pass1"] == 1.0 for v in fams.values())
    assert "## Per problem family" in (tmp_path / "results.md").read_text()
