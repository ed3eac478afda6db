"""One CLI convention (#26): `python -m rlpt.eval`, `rlpt.tasks` and `rlpt.flywheel` are Hydra apps over
experiments/conf like `rlpt.train`: key=value overrides onto typed schemas in struct mode, `hydra.run.dir=`,
`--help` listing the options, `--cfg job`, multirun, outputs in the run folder unless out= is given."""
import dataclasses
import json
import subprocess
import sys

import pytest

from rlpt.config.cli import FlywheelCliConfig, TasksCliConfig, compose
from rlpt.eval.config import EvalConfig

SCHEMAS = {"eval": EvalConfig, "tasks": TasksCliConfig, "flywheel": FlywheelCliConfig}


def _cli(name, *args, cwd):
    return subprocess.run([sys.executable, "-m", f"rlpt.{name}", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _failures(folder):
    """One failure record, as rlpt.observe.records.FailureObserver writes it."""
    folder.mkdir()
    rec = {"step": 1, "task_id": "arith/add:t1:s3", "domain": "arith/add", "tier": 1, "seed": 3, "tag": "wrong_answer",
           "responses": [{"text": "-1", "tag": "wrong_answer", "reward": 0.0}]}
    (folder / "failures-from-step-0000001.jsonl").write_text(json.dumps(rec) + "\n")
    return folder


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_help_lists_every_option_and_typos_fail_naming_the_key(name, tmp_path):
    proc = _cli(name, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for field in dataclasses.fields(SCHEMAS[name]):
        assert f"\n  {field.name}=" in proc.stdout, field.name
    assert "hydra.run.dir" in proc.stdout or name == "tasks"
    proc = _cli(name, "no_such_key=1", cwd=tmp_path)
    assert proc.returncode == 1 and "Could not override 'no_such_key'" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # rejected at compose time: no run folder was made
    first_int = next(f.name for f in dataclasses.fields(SCHEMAS[name]) if f.type is int)
    proc = _cli(name, f"{first_int}=many", cwd=tmp_path)
    assert proc.returncode == 1 and f"full_key: {first_int}" in proc.stderr


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_cfg_job_prints_the_composed_options(name, tmp_path):
    key = {"eval": "suite", "tasks": "domain", "flywheel": "failures"}[name]
    proc = _cli(name, "--cfg", "job", f"{key}=abc", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{key}: abc" in proc.stdout and list(tmp_path.iterdir()) == []


def test_eval_writes_in_the_hydra_run_folder(tmp_path):
    proc = _cli("eval", "policy=oracle", "level=2", cwd=tmp_path)  # refused before Hydra makes a run folder
    assert proc.returncode == 2 and "rlpt.eval: error: level=2.0" in proc.stderr and list(tmp_path.iterdir()) == []
    run = tmp_path / "run"
    proc = _cli("eval", "suite=group:quickstart", "policy=oracle", "per_domain=1", f"hydra.run.dir={run}",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["results"] == str(run / "results.json") and last["pass1"] == 1.0
    assert (run / "results.md").exists() and (run / "hydra" / "config.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    # out= wins over the run folder and becomes it
    proc = _cli("eval", "suite=group:quickstart", "policy=empty", "per_domain=1", "out=o", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / "results.json").exists() and (tmp_path / "o" / "hydra" / "overrides.yaml").exists()


def test_eval_multirun_one_folder_per_job(tmp_path):
    proc = _cli("eval", "-m", "policy=oracle,empty", "suite=group:quickstart", "per_domain=1",
                f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pass1 = [json.loads((tmp_path / "sweep" / str(i) / "results.json").read_text())["overall"]["pass1"]
             for i in (0, 1)]
    assert pass1 == [1.0, 0.0]


def test_tasks_accepts_hydra_run_dir(tmp_path):
    proc = _cli("tasks", "cmd=sample", "domain=arith/add", "tier=2", "n=1", f"hydra.run.dir={tmp_path / 'r'}",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "=== arith/add:t2:s0" in proc.stdout and "--- gold answer:" in proc.stdout
    proc = _cli("tasks", "cmd=sample", "split=test", "domain=arith/add", cwd=tmp_path)  # a bad value names its key
    assert proc.returncode == 2 and "split='test'" in proc.stderr


def test_flywheel_writes_in_the_hydra_run_folder(tmp_path):
    failures = _failures(tmp_path / "failures")
    run = tmp_path / "run"
    proc = _cli("flywheel", f"failures={failures}", "neighbours=0", "tags=[wrong_answer]", f"hydra.run.dir={run}",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["out"] == str(run) and last["failure_tasks"] == 1 and last["regression_cases"] == 1
    assert (run / "tasks.jsonl").exists() and (run / "hydra" / "config.yaml").exists()
    proc = _cli("flywheel", f"check={run / 'regression.jsonl'}", f"hydra.run.dir={tmp_path / 'c'}", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout.strip().splitlines()[-1])["broken"] == 0
    proc = _cli("flywheel", f"failures={failures}", "tags=[wrong_anser]", cwd=tmp_path)
    assert proc.returncode == 2 and "tags: unknown ['wrong_anser']" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "failures", "run"]  # no run folder for it


def test_older_forms_compose_to_the_same_options():
    from rlpt.flywheel.__main__ import overrides as flywheel_overrides
    from rlpt.tasks.__main__ import overrides as tasks_overrides

    assert compose("tasks", tasks_overrides(["sample", "arith/add", "--tier", "2", "--n=1"])) == \
        TasksCliConfig(cmd="sample", domain="arith/add", tier=2, n=1)
    assert compose("tasks", tasks_overrides(["list", "rg/*"])) == TasksCliConfig(cmd="list", pattern="rg/*")
    assert tasks_overrides(["--cfg", "job", "sample", "arith/add"]) == ["--cfg", "job", "cmd='sample'",
                                                                         "domain='arith/add'"]
    assert compose("flywheel", flywheel_overrides(["f dir", "--out", "o", "--tags", "empty,truncated"])) == \
        FlywheelCliConfig(failures="f dir", out="o", tags=["empty", "truncated"])
    assert compose("flywheel", flywheel_overrides(["--check=r.jsonl"])).check == "r.jsonl"
    from rlpt.eval.config import parse_args

    assert parse_args(["policy=oracle", "k=1,4", "lengths=[8,16]"]) == EvalConfig(policy="oracle", k=[1, 4],
                                                                                     lengths=[8, 16])


def test_every_schema_composes_with_struct_mode_and_training_is_untouched():
    for name, schema in SCHEMAS.items():
        assert compose(name, []) == schema()
    from rlpt.config import compose as train_compose

    assert train_compose([]).train.out_dir  # the training root config still composes beside them
