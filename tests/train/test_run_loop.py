"""The one stage loop (#38): step order, evaluation cadence, stop rule, checkpoints, the metrics log and its resume."""
import json
from types import SimpleNamespace

from rlpt.train.loop import LoopHooks, RunLog, run_loop


class _Checkpointer:
    def __init__(self):
        self.saves, self.closed = [], False

    def save(self, step, state, meta, force):
        self.saves.append((step, meta))

    def close(self):
        self.closed = True


class _Trainer:
    """What run_loop reads of a Trainer: state.step, checkpointer, cfg.train.ckpt_every and step(batch)."""

    def __init__(self, ckpt_every=2, step=0):
        self.state = SimpleNamespace(step=step)
        self.checkpointer = _Checkpointer()
        self.cfg = SimpleNamespace(train=SimpleNamespace(ckpt_every=ckpt_every))

    def step(self, batch):
        self.state.step += 1
        return {"loss": float(batch), "grad_norm": 1.0}


def test_rows_evaluation_stop_and_checkpoints(tmp_path):
    trainer, order = _Trainer(), []
    hooks = LoopHooks(evaluate=lambda s: order.append(("eval", s)) or {"pass1": s / 10},
                      stop=lambda s, row: row["loss"] >= 5, meta=lambda: {"at": trainer.state.step},
                      after=lambda s, row: order.append(("after", s)))
    log = RunLog(str(tmp_path))
    res = run_loop(trainer, lambda s: (s * 1.0, {"data/x": 2.0, "skipped": [1, 2]}), hooks, steps=10, log=log,
                   eval_every=2, progress=False, step_offset=100)
    log.close()
    assert res.stopped and res.steps == 5 and trainer.checkpointer.closed
    assert [r["step"] for r in res.history] == [101, 102, 103, 104, 105]
    assert res.history[1] == {"step": 102, "loss": 2.0, "grad_norm": 1.0, "data/x": 2.0, "pass1": 0.2}
    assert "pass1" not in res.history[2] and res.last["loss"] == 5.0
    assert order[:3] == [("after", 1), ("eval", 2), ("after", 2)]  # evaluation is part of the step's row
    # every ckpt_every steps, and the step the stop rule ended on, with the stage's meta
    assert trainer.checkpointer.saves == [(2, {"at": 2}), (4, {"at": 4}), (5, {"at": 5})]
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert rows == res.history


def test_the_last_step_is_evaluated_only_when_asked_and_a_resume_drops_rows_past_its_checkpoint(tmp_path):
    def run(trainer, eval_last, steps):
        log = RunLog(str(tmp_path), resume_at=int(trainer.state.step))
        res = run_loop(trainer, lambda s: (1.0, None), LoopHooks(evaluate=lambda s: {"ev": 1.0}), steps=steps,
                       log=log, eval_every=3, eval_last=eval_last, progress=False)
        log.close()
        return res
    assert "ev" not in run(_Trainer(), False, 3).last
    (tmp_path / "metrics.jsonl").unlink()
    assert run(_Trainer(), True, 3).last["ev"] == 1.0
    # a run killed after logging step 3 resumes from its checkpoint at step 2: step 3 is logged once, anew
    resumed = run(_Trainer(step=2), False, 4)
    assert [r["step"] for r in resumed.history] == [1, 2, 3, 4]
    assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
