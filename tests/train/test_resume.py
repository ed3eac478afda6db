"""Kill -9 after a checkpoint; resume=auto continues exactly as an uninterrupted run (bit for bit on CPU); an
unreadable newest step falls back to the previous one; a full disk during a save is one error line."""
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

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


def _tiny_checkpoints(directory, steps=(1, 2, 3)):
    """A Checkpointer holding `steps` of a small pytree whose values mark the step (no model to compile)."""
    import jax.numpy as jnp

    from rlpt.train.checkpoint import Checkpointer

    ck = Checkpointer(str(directory), every=1, keep=5, fingerprint="fp", seed=0)
    for s in steps:
        ck.save(s, {"w": jnp.full((64,), float(s)), "b": jnp.ones(3)}, {"data": {"step": s}}, force=True)
    ck.close()
    return {"w": jnp.zeros((64,)), "b": jnp.zeros(3)}


def _break(step_dir, how):
    """Empty the step directory, or cut every file of its saved state to half its size (a copy cut short)."""
    import shutil

    for p in sorted(step_dir.rglob("*"), reverse=True):
        if how == "empty":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        elif p.is_file() and "state" in p.parts:
            os.truncate(p, p.stat().st_size // 2)


@pytest.mark.parametrize("how", ["empty", "truncate"])
def test_resume_falls_back_to_newest_readable_step(tmp_path, caplog, how):
    from rlpt.train.checkpoint import Checkpointer

    abstract = _tiny_checkpoints(tmp_path)
    _break(tmp_path / "3", how)
    ck = Checkpointer(str(tmp_path), every=1, keep=5, fingerprint="fp", seed=0)
    with caplog.at_level(logging.WARNING, logger="rlpt.train.checkpoint"):
        state, meta = ck.restore(abstract)
    assert meta["step"] == 2 and float(state["w"][0]) == 2.0
    warned = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(warned) == 1 and "checkpoint step 3" in warned[0] and "resuming from step 2" in warned[0], warned
    assert (tmp_path / "3.unreadable").is_dir()  # kept for inspection, out of orbax's way
    ck.save(3, abstract, {"data": {"step": 3}}, force=True)  # the resumed run can write step 3 again
    ck.close()


def test_disk_full_during_save_is_one_error_and_leaves_no_tmp(tmp_path, caplog, monkeypatch):
    """ENOSPC raised where orbax writes the step's metadata file in its background thread (a realistic point:
    the array data is written first, then small files)."""
    import jax.numpy as jnp
    from orbax.checkpoint._src.handlers import json_checkpoint_handler

    from rlpt.train.checkpoint import TMP_MARK, Checkpointer, CheckpointWriteError

    abstract = _tiny_checkpoints(tmp_path, steps=(1,))
    ck = Checkpointer(str(tmp_path), every=1, keep=5, fingerprint="fp", seed=0)

    async def disk_full(self, x, directory):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", disk_full)
    with caplog.at_level(logging.ERROR), pytest.raises(CheckpointWriteError) as e:
        ck.save(2, {"w": jnp.full((64,), 2.0), "b": jnp.ones(3)}, {"data": {}}, force=True)
        ck.close()
    msg = str(e.value)
    assert "\n" not in msg and "no space left on device while writing checkpoint step 2" in msg
    assert "newest complete checkpoint: 1" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no chained traceback
    assert not [r for r in caplog.records if r.exc_info], "orbax's tracebacks were not silenced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"], [p.name for p in tmp_path.iterdir()]
    assert not any(TMP_MARK in p.name for p in tmp_path.rglob("*"))
    monkeypatch.undo()
    ck = Checkpointer(str(tmp_path), every=1, keep=5, fingerprint="fp", seed=0)
    assert ck.restore(abstract)[1]["step"] == 1
    ck.close()
