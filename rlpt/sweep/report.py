"""summarize(): a sweep folder's summary.md, summary.csv, bar charts of the headline metrics and learning curves."""
import csv
import os

import numpy as np

from rlpt.observe.report import new_figure, smooth
from rlpt.sweep.results import Sweep, load, lower_is_better, scalars

# Curves drawn from a metrics log by default: the RL ones where the log has them, else the loss.
RL_CURVES = ("reward_mean", "pass_rate")
LOSS_CURVES = ("loss",)


def _fmt(x) -> str:
    return "" if x is None else f"{0.0 if abs(x) < 1e-12 else x:.4g}"  # float residue such as 1e-17 reads as 0


def _cell(row: dict, m: str) -> str:
    if not row[f"{m}.n"]:
        return "-"
    return (f"{_fmt(row[f'{m}.mean'])} ± {_fmt(row[f'{m}.std'])} [{_fmt(row[f'{m}.low'])}, {_fmt(row[f'{m}.high'])}]"
            f" n={row[f'{m}.n']}")


def best(table: list[dict], metrics: list[str]) -> dict[str, dict]:
    """Per metric, the row with the best mean in the metric's direction (lower_is_better), among rows with it."""
    out = {}
    for m in metrics:
        rows = [r for r in table if r[f"{m}.n"]]
        if rows:
            pick = min if lower_is_better(m) else max
            out[m] = pick(rows, key=lambda r: r[f"{m}.mean"])
    return out


def markdown(sweep: Sweep, table: list[dict], comparison: list[dict], metrics: list[str], plots: list[str],
             level: float) -> str:
    pct = round(100 * level)
    keys = sweep.varying_keys()
    constant = {k: v for k, v in sweep.jobs[0].overrides.items() if k not in keys and k not in sweep.seed_keys}
    lines = [f"# Sweep {sweep.folder}", "",
             f"- jobs: {len(sweep.jobs)} (ok {sweep.count('ok')}, failed {sweep.count('failed')}, missing "
             f"{sweep.count('missing')}); configurations: {len(table)}, labelled by "
             f"{', '.join(f'`{k}`' for k in keys) or 'their overrides'}; seeds: "
             f"{', '.join(f'`{k}`' for k in sweep.seed_keys)}",
             f"- same in every job: {' '.join(f'`{k}={v}`' for k, v in constant.items()) or '-'}",
             f"- cells: mean ± std over the ok seeds [{pct}% percentile bootstrap interval of the mean] n=seeds it "
             "rests on (2 seeds give wide, rough intervals; 1 seed gives a point)", ""]
    head = ["configuration", "ok", "failed", "missing"] + [f"{m} {'↓' if lower_is_better(m) else '↑'}"
                                                           for m in metrics]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        lines.append("| " + " | ".join([r["config"], str(r["ok"]), str(r["failed"]), str(r["missing"])]
                                       + [_cell(r, m) for m in metrics]) + " |")
    if metrics:
        lines += ["", "## Best configuration per metric", "",
                  "Lower is better for losses, times and lengths (names with `loss`, ending in `_s` but not "
                  "`_per_s`, or a `len` word part); higher for everything else.", ""]
        for m, r in best(table, metrics).items():
            lines.append(f"- `{m}` ({'lower' if lower_is_better(m) else 'higher'} is better): `{r['config']}` "
                         f"({_fmt(r[f'{m}.mean'])}, n={r[f'{m}.n']})")
    if comparison:
        lines += ["", f"## Against the baseline `{comparison[0]['baseline']}`", "",
                  f"delta = configuration - baseline over the seeds both ran ok (paired by seed), {pct}% paired "
                  "bootstrap interval; significant when it excludes 0 and rests on n >= 2 seeds.", "",
                  f"| configuration | metric | n seeds | baseline | configuration | delta | {pct}% CI | flag |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in comparison:
            if not c["n"]:
                lines.append(f"| {c['config']} | {c['metric']} | 0 | | | | | no shared ok seed |")
                continue
            flag = ("better" if c["better"] else "worse") if c["significant"] else ""
            lines.append(f"| {c['config']} | {c['metric']} | {c['n']} | {_fmt(c['base'])} | {_fmt(c['mean'])} | "
                         f"{c['delta']:+.4g} | [{c['low']:+.4g}, {c['high']:+.4g}] | {flag} |")
    for status, title in (("failed", "Failed jobs"), ("missing", "Missing jobs")):
        jobs = [j for j in sweep.jobs if j.status == status]
        if jobs:
            lines += ["", f"## {title}", ""] + [f"- job {j.num} (`{j.folder}`): {j.error}" for j in jobs]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{os.path.splitext(p)[0]}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def write_csv(table: list[dict], path: str) -> None:
    fields = list(dict.fromkeys(k for r in table for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(table)


def plot_bars(table: list[dict], metrics: list[str], folder: str) -> list[str]:
    """bar_<metric>.png: each configuration's mean with its bootstrap interval as the error bar."""
    from rlpt.config.cli import slug  # on use (start-up: jax)
    names = []
    for m in metrics:
        rows = [r for r in table if r[f"{m}.n"]]
        if not rows:
            continue
        mean = np.array([r[f"{m}.mean"] for r in rows])
        err = np.array([[mu - r[f"{m}.low"] for mu, r in zip(mean, rows)],
                        [r[f"{m}.high"] - mu for mu, r in zip(mean, rows)]])  # (2, C)
        fig, ax = new_figure((6, 0.5 + 0.45 * len(rows)))
        ax.barh(range(len(rows)), mean, xerr=err, capsize=3, color="tab:blue")
        ax.set_yticks(range(len(rows)), [f"{r['config']} (n={r[f'{m}.n']})" for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{m} ({'lower' if lower_is_better(m) else 'higher'} is better); bars: mean, whiskers: "
                      "bootstrap interval over seeds", fontsize=8)
        fig.tight_layout()
        names.append(f"bar_{slug(m)}.png")
        fig.savefig(os.path.join(folder, names[-1]), dpi=100)
    return names


def _curve_metrics(curve_metrics, log: str, present: set[str]) -> list[str]:
    if curve_metrics is None:
        rl = [m for m in RL_CURVES if m in present]
        return rl or [m for m in LOSS_CURVES if m in present]
    wanted = curve_metrics.get(log, ()) if isinstance(curve_metrics, dict) else curve_metrics
    return [m for m in wanted if m in present]


def smoothing_window(n_steps: int) -> int:
    """Steps a learning curve is averaged over: 1 up to 100 steps, then about n/50 (RL metrics are noisy)."""
    return 1 if n_steps <= 100 else n_steps // 50


def plot_curves(sweep: Sweep, folder: str, curve_metrics=None) -> list[str]:
    """curve_<log>_<metric>.png per metrics log and curve metric: per configuration the mean over its ok seeds
    at each step, with the seeds' min-max band; past 100 steps both are trailing moving means (smoothing_window)."""
    from rlpt.config.cli import slug  # on use (start-up: jax)

    names = []
    configs = [(c, [j.metrics() for j in c.status("ok")]) for c in sweep.configs()]
    logs = list(dict.fromkeys(log for _, runs in configs for r in runs for log in r))
    for log in logs:
        present = {k for _, runs in configs for r in runs for row in r.get(log, []) for k in scalars(row)}
        for m in _curve_metrics(curve_metrics, log, present):
            fig, ax = new_figure((7, 4))
            for c, runs in configs:
                by_step: dict[float, list[float]] = {}
                for r in runs:
                    for row in r.get(log, []):
                        if m in scalars(row):
                            by_step.setdefault(row["step"], []).append(float(row[m]))
                if not by_step:
                    continue
                steps = sorted(by_step)
                vals = [by_step[s] for s in steps]
                seeds = sum(log in r for r in runs)
                k = smoothing_window(len(steps))
                mean, low, high = (smooth(np.array([f(v) for v in vals], float), k) for f in (np.mean, min, max))
                line, = ax.plot(steps, mean, label=f"{c.label} (n={seeds})")
                ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
            ax.set_xlabel("step")
            ax.set_ylabel(m)
            k = smoothing_window(max((len({row["step"] for r in runs for row in r.get(log, [])})
                                      for _, runs in configs), default=1))
            ax.set_title(f"{log}: {m}" + (f" (moving mean over {k} steps)" if k > 1 else ""), fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            names.append(f"curve_{slug(os.path.dirname(log) or 'root')}_{slug(m)}.png")
            fig.savefig(os.path.join(folder, names[-1]), dpi=100)
    return names


def summarize(folder: str, *, metrics: list[str] | None = None, baseline: str | dict | None = None,
              curve_metrics: list[str] | dict[str, list[str]] | None = None, level: float = 0.95,
              resamples: int = 2000, seed: int = 0, plots: bool = True) -> dict:
    """Write summary.md, summary.csv and the PNG plots into the sweep folder `folder`.

    metrics: summary.json keys for the table (default: the numeric ones every ok job has); baseline: a label or
    `k=v ...` overrides (default: the first configuration); curve_metrics: names for every log, or {log: names}
    (default: reward_mean and pass_rate where a log has them, else loss). Returns the paths, the job counts, the
    table rows and the comparison rows."""
    sweep = load(folder)
    names = sweep.resolve_metrics(metrics)
    table = sweep.table(names, level=level, resamples=resamples, seed=seed)
    comparison = sweep.compare(baseline, names, level=level, resamples=resamples, seed=seed)
    images = plot_bars(table, names, folder) + plot_curves(sweep, folder, curve_metrics) if plots else []
    md, csv_path = os.path.join(folder, "summary.md"), os.path.join(folder, "summary.csv")
    with open(md, "w") as f:
        f.write(markdown(sweep, table, comparison, names, images, level))
    write_csv(table, csv_path)
    return {"sweep": folder, "jobs": len(sweep.jobs), "ok": sweep.count("ok"), "failed": sweep.count("failed"),
            "missing": sweep.count("missing"), "summary_md": md, "summary_csv": csv_path,
            "plots": [os.path.join(folder, p) for p in images], "metrics": names, "table": table,
            "comparison": comparison, "failed_jobs": [(j.num, j.folder, j.error) for j in sweep.jobs
                                                      if j.status == "failed"]}
