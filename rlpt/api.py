"""The Python API for notebooks and scripts: compose a config, run a stage in this interpreter, evaluate a policy.

    import rlpt
    cfg = rlpt.compose(["experiment=sft_tiny", "train.steps=50"])
    result = rlpt.run(cfg)                     # the same run as `python -m rlpt.train experiment=sft_tiny ...`
    result.summary["final_loss"], result.metrics()["metrics.jsonl"][-1]
    rlpt.evaluate(result, suite="quickstart")  # or a checkpoint folder, or a Model with tokenizer=

`run` does what the CLI does around a stage (range checks, the run-folder check, config.yaml, the persistent
compilation cache) without Hydra and without re-executing the interpreter; progress is printed as the run goes.
"""
import dataclasses
import json
import os
from typing import Any

from rlpt.config.schema import Config
from rlpt.config.schema import compose as _compose
from rlpt.eval.config import EvalConfig, validate
from rlpt.sweep.results import find_logs, read_logs
from rlpt.train.stages import run_stage


def compose(overrides: list[str] | tuple[str, ...] = (), *, config_name: str = "config") -> Config:
    """The typed Config of `python -m rlpt.train <overrides>` (a typo or an out-of-range value raises, naming the
    key)."""
    return _compose(list(overrides), config_name=config_name)


@dataclasses.dataclass
class RunResult:
    """What a run leaves: its summary (summary.json), run folder and config, the final policy and tokenizer for
    further calls (sampling, evaluation), and what else the stage returned (history, reward_model, ...)."""

    summary: dict
    out_dir: str
    config: Config
    model: Any = None  # rlpt.models.Model (params + architecture); None for stages without a policy (stage=rm)
    tokenizer: Any = None
    objects: dict = dataclasses.field(default_factory=dict)

    @property
    def paths(self) -> dict[str, str]:
        """The run's files that exist: summary, config, report, HF export, checkpoints, metrics logs."""

        named = {"summary": "summary.json", "config": "config.yaml", "report": "report.md", "hf": "hf",
                 "checkpoints": "checkpoints", "trajectories": "rl/trajectories", "failures": "rl/failures"}
        found = {k: os.path.join(self.out_dir, v) for k, v in named.items()
                 if os.path.exists(os.path.join(self.out_dir, v))}
        return found | {log: os.path.join(self.out_dir, log) for log in find_logs(self.out_dir)}

    def metrics(self, log: str | None = None) -> dict[str, list[dict]]:
        """{metrics log (relative path, e.g. "metrics.jsonl", "rl/metrics.jsonl"): rows, one per step}; `log`
        picks one."""

        found = read_logs(self.out_dir, log)
        if log is not None and not found:
            raise KeyError(f"{log!r}: no such metrics log in {self.out_dir} (have {find_logs(self.out_dir)})")
        return found

    def metrics_frame(self, log: str | None = None):
        """The metrics as a pandas DataFrame (one row per step and log; a `log` column); needs pandas."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("RunResult.metrics_frame needs pandas (pip install pandas); "
                              "RunResult.metrics() gives the same rows as dicts") from e
        return pd.DataFrame([{"log": name, **row} for name, rows in self.metrics(log).items() for row in rows])


def run(cfg: Config | list[str] | tuple[str, ...]) -> RunResult:
    """Run `cfg.stage` in this interpreter, as `python -m rlpt.train` would (a list of overrides is composed
    first). Raises what the CLI refuses: ConfigError / RunFolderError / IncompatibleCheckpoint name the key."""
    from omegaconf import OmegaConf

    from rlpt.train.preflight import check_run_folder  # on use (start-up: orbax)
    from rlpt.train.sft import get_tokenizer  # the run's tokenizer: train.init_from's, data.tokenizer's or builtin

    if not isinstance(cfg, Config):
        cfg = compose(cfg)
    check_run_folder(cfg)
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    with open(os.path.join(cfg.train.out_dir, "config.yaml"), "w") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    returned = run_stage(cfg)
    summary_path = os.path.join(cfg.train.out_dir, "summary.json")
    with open(summary_path) as f:
        summary = json.load(f)
    objects = {k: v for k, v in returned.items() if k not in summary and k != "model"}
    return RunResult(summary=summary, out_dir=os.path.abspath(cfg.train.out_dir), config=cfg,
                     model=returned.get("model"), tokenizer=get_tokenizer(cfg), objects=objects)


def evaluate(policy, suite: str = "quickstart", *, tokenizer=None, **options) -> dict:
    """Evaluate a policy on an eval suite (`python -m rlpt.eval`'s options as keywords: samples=, limit=, out=,
    baseline=, ...); returns its result line (pass@1, pass@k, paths of results.json and the report).

    policy: a RunResult, a checkpoint folder (HF export or run folder), a Model with tokenizer=, or "oracle" /
    "empty" (the suite's gold answers / empty answers: its verifier's bounds)."""
    from rlpt.eval.__main__ import run as eval_run  # on use (start-up: hydra)
    from rlpt.eval.__main__ import run_eval  # on use (start-up: hydra)

    if isinstance(policy, str) and policy in ("oracle", "empty"):
        return eval_run(EvalConfig(suite=suite, policy=policy, **options))
    if isinstance(policy, str | os.PathLike):
        return eval_run(EvalConfig(suite=suite, checkpoint=os.fspath(policy), **options))
    if isinstance(policy, RunResult):
        policy, tokenizer = policy.model, tokenizer or policy.tokenizer
    if policy is None or tokenizer is None:
        raise ValueError("rlpt.evaluate: pass a RunResult with a model, a checkpoint folder, or a Model with "
                         "tokenizer=")
    cfg = EvalConfig(suite=suite, checkpoint="<in memory>", **options)
    validate(cfg)
    return run_eval(cfg, policy=(policy, tokenizer))
