"""A Hydra callback that summarizes a multirun when it ends and makes the sweep fail when one of its jobs did.

    hydra:
      callbacks:
        summarize_sweep:
          _target_: rlpt.sweep.callback.SummarizeSweep

Hydra calls on_multirun_end only when no job raised out of the task function (its sweeper re-raises the first
job exception first), so a job that fails should write failed.json and return for the summary to be written."""
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlpt.sweep.report import summarize


class SummarizeSweep(Callback):
    def __init__(self, baseline: str | None = None, metrics: list[str] | None = None, resamples: int = 2000):
        self.baseline, self.metrics, self.resamples = baseline, metrics, resamples

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Summarize config.hydra.sweep.dir; SystemExit(1) after naming the failed jobs, if any."""
        out = summarize(str(config.hydra.sweep.dir), baseline=self.baseline,
                        metrics=list(self.metrics) if self.metrics else None, resamples=self.resamples)
        print(f"[sweep] {out['jobs']} jobs (ok {out['ok']}, failed {out['failed']}, missing {out['missing']}): "
              f"{out['summary_md']}", flush=True)
        if out["failed_jobs"]:
            for num, folder, error in out["failed_jobs"]:
                print(f"[sweep] job {num} failed ({folder}): {error}", flush=True)
            raise SystemExit(1)
