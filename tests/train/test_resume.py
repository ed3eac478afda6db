"""Kill -9 after a checkpoint; resume=auto continues exactly as an uninterrupted run (bit for bit on CPU)."""
import json
import os
import signal
import subprocess
import sys
import time

ARGS = ["experiment=sft_tiny", "train.steps=40", "train.ckpt_every=5", "train.eval_every=0", "train.log_every=100",
        "train.progress=false", "model.hidden_size=32", "model.intermediate_size=64", "data.batch_size=8",
        "data.seq_len=48"]


def _run(out, wait=True):
    cmd = [sys.executable, "-m", "rlpt.train", *ARGS, f"train.out_dir={out}"]
    if wait:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _losses(out):
    losses = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            losses[rec["step"]] = rec["loss"]  # the resumed run's line overrides the killed run's
    return losses


def test_kill_and_resume_is_exact(tmp_path):
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    ref_proc = _run(ref_dir, wait=False)  # the uninterrupted reference, beside the killed run and its resume
    proc = _run(run_dir, wait=False)
    ckpt = run_dir / "checkpoints" / "5"
    deadline = time.time() + 400
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ckpt.exists(), "no checkpoint appeared"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps_done = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    resumed_from = steps_done[-1]
    assert resumed_from < 40, "the run finished before it was killed"
    last = json.loads(_run(run_dir).stdout.strip().splitlines()[-1])
    assert last["steps"] == 40
    assert ref_proc.wait(timeout=600) == 0
    ref, got = _losses(ref_dir), _losses(run_dir)
    for step in range(resumed_from + 1, resumed_from + 6):
        assert got[step] == ref[step], (step, got[step], ref[step])
