"""`python -m rlpt.launch local`: real JAX processes on this machine (the coordinator on loopback, gloo collectives
on CPU) run one program; a process that dies stops the others."""
import json
import os
import subprocess
import sys
import time

import pytest

import rlpt

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SFT = ["experiment=sft_tiny", "train.steps=2", "train.eval_every=0", "train.ckpt_every=2", "runtime.compilation_cache="]


def _launch(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "rlpt.launch", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _losses(folder) -> list[float]:
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def test_two_processes_of_four_devices_train_as_one_of_eight(tmp_path):
    two = tmp_path / "two"
    proc = _launch("local", "--nproc", "2", "--devices-per-process", "4", "--", sys.executable, "-m", "rlpt.train",
                   *SFT, f"train.out_dir={two}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("[p1] ") for ln in lines)
    summary = json.loads([ln for ln in lines if ln.startswith("[p0] {")][-1][len("[p0] "):])
    assert summary["process_count"] == 2 and not any(ln.startswith("[p1] {") for ln in lines)  # process 0 reports
    assert (two / "checkpoints" / "2").is_dir()
    # the same run in this process: 8 fake devices (tests/conftest.py), the same global mesh and data
    one = rlpt.run(SFT + [f"train.out_dir={tmp_path / 'one'}"])
    assert one.summary["process_count"] == 1
    assert _losses(two) == pytest.approx(_losses(one.out_dir), rel=1e-5)
    # the 2-process checkpoint resumes in 1 process (8 devices) and continues as the 1-process run does
    more = [o.replace("train.steps=2", "train.steps=3") for o in SFT]
    resumed = rlpt.run(more + [f"train.out_dir={two}"])
    straight = rlpt.run(more + [f"train.out_dir={one.out_dir}"])
    assert resumed.summary["process_count"] == 1 and len(_losses(two)) == 3
    assert _losses(two) == pytest.approx(_losses(straight.out_dir), rel=1e-5)


def test_a_dead_process_stops_the_others_and_is_named():
    code = ("import os, time, sys\n"
            "if os.environ['JAX_PROCESS_ID'] == '1': sys.exit(3)\n"
            "time.sleep(120)\n")
    t0 = time.time()
    proc = _launch("local", "--nproc", "3", "--", sys.executable, "-c", code, timeout=60)
    assert proc.returncode == 3
    assert "[launch] process 1 exited with status 3; stopping the other 2" in proc.stdout
    assert time.time() - t0 < 30


def test_launch_needs_a_command():
    proc = _launch("local", "--nproc", "2")
    assert proc.returncode == 2 and "put the command after --" in proc.stderr
