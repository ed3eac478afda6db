"""The data flywheel: failures enter the replay pool and are drawn again; the CLI turns a failures folder into
tasks (replayable through curriculum.replay_file) and verifier regression cases; a real tiny RL run closes it."""
import glob
import json
import subprocess
import sys

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.config.tasks import CurriculumConfig, DomainsConfig
from rlpt.flywheel.__main__ import main
from rlpt.observe.records import FailureObserver
from rlpt.observe.tags import task_outcomes
from rlpt.tasks.curriculum import build_curriculum
from tests.observe.helpers import traj_from_texts

DOMAINS = DomainsConfig(include=["arith/add", "list/sort"], tiers=[1, 2])
G = 4


def _learning_policy_run(out_dir, steps=12, seed=0):
    """A fake policy that fails a task on its first attempt (and on every 3rd seed also truncates) and solves
    it from its second attempt: every failure must come back through the replay pool and then leave it."""
    cur = build_curriculum(CurriculumConfig(name="fixed", replay_fraction=0.5, replay_capacity=64), DOMAINS)
    state, attempts, drawn_ids = cur.init_state(), {}, []
    failures = FailureObserver(str(out_dir / "failures"), max_responses=2)
    for step in range(1, steps + 1):
        tasks = cur.tasks(state, step, np.random.default_rng([seed, step]), 6)
        texts, truncated = [], []
        for t in tasks:
            first = attempts.get(t.id, 0) == 0
            attempts[t.id] = attempts.get(t.id, 0) + 1
            texts.append(["wrong 999"] * G if first else [t.meta["answer"]] * G)
            truncated += [first and int(t.id.rsplit(":s", 1)[1]) % 3 == 0] * G
        traj = traj_from_texts(tasks, texts, truncated)
        failures.on_step(step, traj, {})
        drawn_ids.append([t.id for t in tasks])
        state = cur.update(state, task_outcomes(traj, G))
    failures.close()
    return cur, state, attempts, drawn_ids


def test_failures_enter_the_pool_and_are_drawn_again(tmp_path):
    cur, state, attempts, drawn = _learning_policy_run(tmp_path)
    recs = [json.loads(line) for p in glob.glob(str(tmp_path / "failures" / "*.jsonl")) for line in open(p)]
    failed = {r["task_id"] for r in recs}
    assert len(failed) >= 30 and {r["tag"] for r in recs} == {"wrong_answer", "truncated"}
    redrawn = {t for t in failed if attempts[t] > 1}
    assert len(redrawn) >= 10 and state["replay_redrawn"] >= len(redrawn)
    # a re-drawn failure was solved, so it left the pool; what remains are failures not yet re-drawn
    pooled = {f"{e['domain']}:t{e['tier']}:s{e['seed']}" for e in cur.replay_pool(state)}
    assert pooled == failed - redrawn and state["replay_solved"] == len(redrawn)
    first_seen = {}
    for step, ids in enumerate(drawn):
        for t in ids:
            first_seen.setdefault(t, step)
    assert all(any(t in ids for ids in drawn[first_seen[t] + 1:]) for t in redrawn)


def test_cli_builds_tasks_and_regressions(tmp_path):
    _learning_policy_run(tmp_path, steps=4)
    out = tmp_path / "fly"
    assert main([str(tmp_path / "failures"), "--out", str(out), "--neighbours", "1"]) == 0
    tasks = [json.loads(line) for line in open(out / "tasks.jsonl")]
    failed = {json.loads(line)["task_id"] for p in glob.glob(str(tmp_path / "failures" / "*.jsonl"))
              for line in open(p)}
    assert {t["task_id"] for t in tasks if t["source"] == "failure"} == failed
    neighbours = [t for t in tasks if t["source"] == "neighbour"]
    assert neighbours and all(abs(t["seed"] - int(t["from"].rsplit(":s", 1)[1])) == 1 for t in neighbours)
    assert all(t["task_id"] == f"{t['domain']}:t{t['tier']}:s{t['seed']}" for t in tasks)
    cases = [json.loads(line) for line in open(out / "regression.jsonl")]
    assert {c["task_id"] for c in cases} == failed and all(c["score"] == 0.0 and not c["passed"] for c in cases)
    # the regression file re-verifies cleanly; a case whose response now passes is caught (exit 1)
    assert main(["--check", str(out / "regression.jsonl")]) == 0
    from rlpt.tasks import get_domain

    bad = dict(cases[0], response=get_domain(cases[0]["domain"]).generate(cases[0]["seed"], cases[0]["tier"])
               .meta["answer"])
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    assert main(["--check", str(tmp_path / "bad.jsonl")]) == 1
    # the new tasks feed the next run's replay pool
    cur = build_curriculum(CurriculumConfig(replay_fraction=1.0, replay_capacity=256,
                                            replay_file=str(out / "tasks.jsonl")), DOMAINS)
    state = cur.init_state()
    assert len(cur.replay_pool(state)) == len(tasks)
    draws = {f"{d}:t{t}:s{s}" for d, t, s in cur.draw(state, 0, np.random.default_rng(0), 200)}
    assert draws <= {t["task_id"] for t in tasks} and len(draws & failed) > 0


def test_cli_entry_point_prints_json(tmp_path):
    _learning_policy_run(tmp_path, steps=2)
    """The older `<failures> --out D` form; a Hydra app, so it runs in tmp_path (a relative out= is its run folder)."""
    res = subprocess.run([sys.executable, "-m", "rlpt.flywheel", str(tmp_path / "failures"), "--out",
                          str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last["failure_tasks"] > 0 and last["regression_cases"] > 0
    bad = subprocess.run([sys.executable, "-m", "rlpt.flywheel", str(tmp_path / "nothing"), "--out", "x"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0 and "no failure files" in bad.stderr


@pytest.mark.slow  # ~2 min of compile + 4 RL steps on the shared 2-core machine
def test_real_rl_run_replays_its_failures(tmp_path):
    """A tiny from-scratch model fails nearly everything: its failures are logged, pooled and drawn again."""
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.observe.observers import default_observers
    from rlpt.observe.trajectory_log import read_trajectories
    from rlpt.pipeline.rl import run_rl

    cfg = compose(["rl.steps=4", "rl.rollout.prompts_per_step=4", "rl.rollout.group_size=2",
                   "rl.rollout.max_new_tokens=4", "model.hidden_size=32", "model.intermediate_size=64",
                   "train.ckpt_every=0", "train.progress=false", "domains.include=[arith/add]", "domains.tiers=[1]",
                   "curriculum.replay_fraction=0.5", f"train.out_dir={tmp_path}"])
    out = run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(tmp_path),
                 observers=default_observers(cfg, str(tmp_path)))
    recs = [json.loads(line) for p in glob.glob(str(tmp_path / "failures" / "*.jsonl")) for line in open(p)]
    assert out["summary"]["failed_tasks_logged"] == len(recs) > 0
    cur = build_curriculum(cfg.curriculum, cfg.domains)
    pooled = {f"{e['domain']}:t{e['tier']}:s{e['seed']}" for e in cur.replay_pool(out["curriculum_state"])}
    early = {r["task_id"] for r in recs if r["step"] == 1}
    assert early & pooled or out["curriculum_state"]["replay_solved"] > 0
    seen_later = {r["task_id"] for r in read_trajectories(str(tmp_path / "trajectories")) if r["step"] > 1}
    assert early & seen_later  # step-1 failures were sampled again in later steps
    assert out["curriculum_state"]["replay_redrawn"] > 0
