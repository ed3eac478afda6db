"""A Hydra multirun folder as data: its jobs (overrides, status, summary, metrics logs), grouped into
configurations over seeds, with a bootstrap table and a paired-by-seed comparison against a baseline."""
import dataclasses
import json
import math
import os
import re

import numpy as np
import yaml

from rlpt.eval.stats import bootstrap_mean, paired_bootstrap

SEED_KEYS = ("train.seed",)
STATS = ("mean", "std", "low", "high", "n")
_LOWER = re.compile(r"loss|(?<!_per)_s$|(^|[_/.])len")


def lower_is_better(metric: str) -> bool:
    """Direction rule: losses, times (`wall_s`, any `*_s` but rates `*_per_s`) and lengths (`len`, `response_len`,
    `length`) are better lower; every other metric (pass rates, rewards, gains) is better higher."""
    return bool(_LOWER.search(metric))


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Hydra override strings -> {key: value string}: `+k=v` and `++k=v` give k, `~k` (deletion) gives k: '~'."""
    out = {}
    for item in items:
        if item.startswith("~"):
            out[item[1:].split("=", 1)[0]] = "~"
            continue
        key, sep, value = item.lstrip("+").partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key=value")
        out[key] = value
    return out


def _read_json(path: str) -> dict:
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e


def read_log(path: str) -> list[dict]:
    """Rows of a metrics.jsonl, one per step (a resumed run may log a step again: the last row wins), by step.
    A malformed last line is a write cut short by a kill and is dropped; a malformed earlier line is an error."""
    with open(path) as f:
        lines = [(i + 1, line) for i, line in enumerate(f) if line.strip()]
    rows = {}
    for k, (lineno, line) in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if k == len(lines) - 1:
                break
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e
        if "step" not in row:
            raise ValueError(f"{path}:{lineno}: a metrics row without 'step'")
        rows[row["step"]] = row
    return [rows[s] for s in sorted(rows)]


def find_logs(folder: str) -> list[str]:
    """Relative paths of a run folder's metrics logs: metrics.jsonl and */metrics.jsonl (e.g. rl/, sft/)."""
    found = ["metrics.jsonl"] if os.path.isfile(os.path.join(folder, "metrics.jsonl")) else []
    for sub in sorted(os.listdir(folder)):
        if os.path.isfile(os.path.join(folder, sub, "metrics.jsonl")):
            found.append(f"{sub}/metrics.jsonl")
    return found


def read_logs(folder: str, log: str | None = None) -> dict[str, list[dict]]:
    """{log path: rows (one per step)} of a run folder's metrics logs (find_logs); `log` picks one (empty if absent)."""
    return {n: read_log(os.path.join(folder, n)) for n in find_logs(folder) if log is None or n == log}


def scalars(d: dict) -> dict[str, float]:
    """The finite numeric (not bool) values of a flat dict."""
    return {k: float(v) for k, v in d.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


@dataclasses.dataclass
class Job:
    """One job folder `<sweep>/<num>/`. status: ok (summary.json), failed (failed.json), missing (neither yet)."""

    num: int
    folder: str
    overrides: dict[str, str]
    status: str
    summary: dict
    error: str = ""

    def logs(self) -> list[str]:
        """Relative paths of the job's metrics logs: metrics.jsonl and */metrics.jsonl (e.g. rl/, sft/)."""
        return find_logs(self.folder)

    def metrics(self, log: str | None = None) -> dict[str, list[dict]]:
        """{log path: rows (one per step)}; `log` picks one (an empty dict if absent)."""
        return read_logs(self.folder, log)


def load_job(folder: str, num: int) -> Job:
    record = next((os.path.join(folder, d, "overrides.yaml") for d in ("hydra", ".hydra")
                   if os.path.isfile(os.path.join(folder, d, "overrides.yaml"))), None)
    overrides = {}
    if record:
        with open(record) as f:
            overrides = parse_overrides(yaml.safe_load(f) or [])
    ok, bad = os.path.join(folder, "summary.json"), os.path.join(folder, "failed.json")
    if os.path.isfile(bad) and not (os.path.isfile(ok) and os.path.getmtime(ok) >= os.path.getmtime(bad)):
        info = _read_json(bad)  # a failure newer than any summary: a rerun that failed
        kind, error = info.get("type", ""), str(info.get("error", "")).strip().splitlines() or [""]
        msg = error[0] if not kind or error[0].startswith(kind) else f"{kind}: {error[0]}"
        return Job(num, folder, overrides, "failed", {}, msg)
    if os.path.isfile(ok):
        return Job(num, folder, overrides, "ok", _read_json(ok))
    return Job(num, folder, overrides, "missing", {}, "no summary.json and no failed.json (running or killed)")


@dataclasses.dataclass
class Configuration:
    """Jobs that differ only in their seeds; `label` names the overrides that vary across the sweep."""

    label: str
    overrides: dict[str, str]
    jobs: list[Job]

    def status(self, status: str) -> list[Job]:
        return [j for j in self.jobs if j.status == status]


@dataclasses.dataclass
class Sweep:
    folder: str
    jobs: list[Job]
    seed_keys: tuple[str, ...] = SEED_KEYS

    def count(self, status: str) -> int:
        return sum(j.status == status for j in self.jobs)

    def varying_keys(self, seed_keys: tuple[str, ...] | None = None) -> list[str]:
        """Override keys, seeds excluded, whose value is not the same in every job (in order of first use)."""
        seeds = self.seed_keys if seed_keys is None else seed_keys
        keys = list(dict.fromkeys(k for j in self.jobs for k in j.overrides if k not in seeds))
        return [k for k in keys if len({j.overrides.get(k) for j in self.jobs}) > 1]

    def configs(self, seed_keys: tuple[str, ...] | None = None) -> list[Configuration]:
        """Jobs grouped by their overrides minus the seed keys, in job order. A configuration is labelled by the
        keys that vary (`reward=layered curriculum=fixed`); with one configuration, by all its non-seed overrides."""
        seeds = self.seed_keys if seed_keys is None else seed_keys
        keys = self.varying_keys(seeds)
        if not keys:
            keys = list(dict.fromkeys(k for j in self.jobs for k in j.overrides if k not in seeds))
        groups: dict[tuple, Configuration] = {}
        for job in self.jobs:
            values = {k: job.overrides.get(k, "-") for k in keys}
            ident = tuple(values.values())
            if ident not in groups:
                label = " ".join(f"{k}={v}" for k, v in values.items()) or "default"
                groups[ident] = Configuration(label, values, [])
            groups[ident].jobs.append(job)
        return list(groups.values())

    def metric_names(self) -> list[str]:
        """Numeric scalar summary keys every ok job has, in the first ok job's order; with two or more ok jobs,
        keys with one value in all of them (step counts, vocabulary sizes) are left out."""
        ok = [scalars(j.summary) for j in self.jobs if j.status == "ok"]
        keys = [k for k in ok[0] if all(k in s for s in ok[1:])] if ok else []
        return [k for k in keys if len(ok) < 2 or len({s[k] for s in ok}) > 1]

    def resolve_metrics(self, metrics: list[str] | None) -> list[str]:
        """`metrics`, checked against the ok jobs' summaries, or metric_names() when None."""
        if metrics is None:
            return self.metric_names()
        have = {k for j in self.jobs if j.status == "ok" for k in scalars(j.summary)}
        unknown = [m for m in metrics if m not in have]
        if have and unknown:
            raise ValueError(f"metrics {unknown} are in no ok job's summary.json under {self.folder}; "
                             f"numeric keys there: {sorted(have)}")
        return list(metrics)

    def table(self, metrics: list[str] | None = None, *, level: float = 0.95, resamples: int = 2000,
              seed: int = 0) -> list[dict]:
        """One row per configuration: config (label), the varying override values, ok/failed/missing job counts,
        and per metric `<m>.mean`, `.std` (ddof=1; 0 for one seed), `.low`/`.high` (bootstrap interval of the mean
        over seeds) and `.n` (the ok seeds it rests on; None values when no ok job has it)."""
        rows = []
        for c in self.configs():
            row = {"config": c.label, **c.overrides, **{s: len(c.status(s)) for s in ("ok", "failed", "missing")}}
            for m in self.resolve_metrics(metrics):
                vals = [scalars(j.summary)[m] for j in c.status("ok") if m in scalars(j.summary)]
                if not vals:
                    row |= {f"{m}.{s}": None for s in STATS[:-1]} | {f"{m}.n": 0}
                    continue
                iv = bootstrap_mean(vals, level=level, resamples=resamples, seed=seed)
                std = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
                row |= {f"{m}.mean": iv.mean, f"{m}.std": std, f"{m}.low": iv.low, f"{m}.high": iv.high,
                        f"{m}.n": iv.n}
            rows.append(row)
        return rows

    def baseline(self, baseline: str | dict | None = None) -> Configuration:
        """The configuration named by a label, by `k=v ...` / a dict of overrides it matches, or the first one."""
        configs = self.configs()
        if baseline is None:
            return configs[0]
        if isinstance(baseline, str):
            if baseline in [c.label for c in configs]:
                return next(c for c in configs if c.label == baseline)
            baseline = parse_overrides(baseline.split())
        hits = [c for c in configs if all(c.jobs[0].overrides.get(k) == str(v) for k, v in baseline.items())]
        if len(hits) != 1:
            raise ValueError(f"baseline {baseline} matches {len(hits)} configurations of {self.folder}; "
                             f"labels: {[c.label for c in configs]}")
        return hits[0]

    def compare(self, baseline: str | dict | None = None, metrics: list[str] | None = None, *, level: float = 0.95,
                resamples: int = 2000, seed: int = 0) -> list[dict]:
        """Each other configuration minus the baseline, per metric, over the seeds both ran ok (paired by the
        seed-key values; several jobs of one seed are averaged). `significant`: the paired bootstrap interval
        excludes 0 (as in rlpt.eval.compare) and rests on at least 2 seeds; `better`: significant in the metric's
        good direction (lower_is_better)."""
        base = self.baseline(baseline)
        rows = []
        for c in self.configs():
            if c.label == base.label:
                continue
            for m in self.resolve_metrics(metrics):
                a, b = self._by_seed(base, m), self._by_seed(c, m)
                common = [s for s in a if s in b]
                row = {"config": c.label, "baseline": base.label, "metric": m, "n": len(common)}
                if not common:
                    rows.append(row | dict.fromkeys(("base", "mean", "delta", "low", "high"))
                                | {"significant": False, "better": False})
                    continue
                iv = paired_bootstrap([a[s] for s in common], [b[s] for s in common], level=level,
                                      resamples=resamples, seed=seed)
                sig = iv.significant and iv.n >= 2  # one pair has no spread: its interval is a point
                good = iv.delta < 0 if lower_is_better(m) else iv.delta > 0
                rows.append(row | {"base": float(np.mean([a[s] for s in common])),
                                   "mean": float(np.mean([b[s] for s in common])), "delta": iv.delta,
                                   "low": iv.low, "high": iv.high, "significant": sig, "better": sig and good})
        return rows

    def _by_seed(self, config: Configuration, metric: str) -> dict[tuple, float]:
        vals: dict[tuple, list[float]] = {}
        for j in config.status("ok"):
            s = scalars(j.summary)
            if metric in s:
                vals.setdefault(tuple(j.overrides.get(k, "") for k in self.seed_keys), []).append(s[metric])
        return {k: float(np.mean(v)) for k, v in vals.items()}

    def to_pandas(self, metrics: list[str] | None = None):
        """table() as a pandas DataFrame (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Sweep.to_pandas needs pandas (pip install pandas); Sweep.table() gives the same "
                              "rows as dicts") from e
        return pd.DataFrame(self.table(metrics))


def load(folder: str, *, seed_keys: tuple[str, ...] = SEED_KEYS) -> Sweep:
    """The sweep in `folder`: one Job per numbered subfolder (Hydra's job number), in job order."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"sweep folder {folder} does not exist")
    nums = sorted(int(d) for d in os.listdir(folder) if d.isdigit() and os.path.isdir(os.path.join(folder, d)))
    if not nums:
        raise ValueError(f"no job folders (0/, 1/, ...) in sweep folder {folder}")
    return Sweep(folder, [load_job(os.path.join(folder, str(n)), n) for n in nums], tuple(seed_keys))
