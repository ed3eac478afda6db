"""Run report: report.md with PNG plots (reward, pass rate per domain, KL, length, time split) and a cost line."""
import json
import os

import numpy as np

from rlpt.observe.cost import cost, cost_line


def new_figure(figsize, dpi: int = 100):
    """(figure, axes) drawn without pyplot: no process-wide backend switch and no figure left open, so a
    notebook's inline plots keep working after a run writes its report."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.subplots()

TIME_KEYS = (("gen_s", "generate"), ("verify_s", "verify"), ("train_s", "train"), ("idle_s", "trainer idle"),
             ("step_s", "step wall"))


def smooth(y: np.ndarray, k: int) -> np.ndarray:
    """Trailing moving average over k points (k <= 1: unchanged); NaNs stay out of the mean."""
    if k <= 1 or len(y) < 2 * k:
        return y
    out = np.empty_like(y)
    for i in range(len(y)):
        w = y[max(0, i - k + 1):i + 1]
        out[i] = np.nanmean(w) if np.isfinite(w).any() else np.nan
    return out


def _plot(path, series: dict, title: str, ylabel: str, xlabel="RL step", marks=(), ylim=None):
    """Line plot of {label: (x, y)}; long noisy series get a moving average over the raw curve."""
    fig, ax = new_figure((7, 3.6), dpi=110)
    for i, (label, (x, y)) in enumerate(series.items()):
        y = np.asarray(y, float)
        k = max(len(y) // 25, 1)
        color = f"C{i}"
        if k > 1:
            ax.plot(x, y, color=color, alpha=0.25, lw=0.8)
            ax.plot(x, smooth(y, k), color=color, label=f"{label} ({k}-step mean)")
        else:
            ax.plot(x, y, color=color, label=label, marker="." if len(y) < 30 else None)
    for j, m in enumerate(marks):
        ax.axvline(m, color="red", ls="--", lw=0.8, label="drift alert" if j == 0 else None)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)


def _bars(path, groups: dict[str, dict[str, float]], title: str):
    """Grouped bars: x = keys of each group's dict (domains), one bar per group (stage); values in [0, 1]."""
    cats = sorted({c for g in groups.values() for c in g})
    fig, ax = new_figure((max(5, 1.2 * len(cats) * max(len(groups), 1) / 2 + 2), 3.6), dpi=110)
    width = 0.8 / max(len(groups), 1)
    for i, (name, vals) in enumerate(groups.items()):
        xs = np.arange(len(cats)) + (i - (len(groups) - 1) / 2) * width
        ys = [vals.get(c, np.nan) for c in cats]
        ax.bar(xs, ys, width, label=name, color=f"C{i}")
        for x, y in zip(xs, ys, strict=True):
            if np.isfinite(y):
                ax.text(x, y + 0.02, f"{y:.2f}", ha="center", fontsize=7)
    ax.set_xticks(np.arange(len(cats)), cats, rotation=20 if len(cats) > 4 else 0, fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("held-out pass@1")
    ax.set_title(title)
    if len(groups) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def _history_plots(out_dir: str, history: list[dict], marks) -> list[str]:
    steps = [h["step"] for h in history]
    col = lambda k: [h.get(k, np.nan) for h in history]  # noqa: E731
    plots = []

    def add(name, series, title, ylabel, **kw):
        series = {k: v for k, v in series.items() if np.isfinite(np.asarray(v[1], float)).any()}
        if series:
            _plot(os.path.join(out_dir, name), series, title, ylabel, **kw)
            plots.append(name)

    add("reward.png", {"reward": (steps, col("reward_mean")), "pass rate": (steps, col("pass_rate"))},
        "RL training reward and pass rate", "mean over the batch", marks=marks)
    doms = sorted({k.split("/", 1)[1] for h in history for k in h if k.startswith("reward/") and k != "reward/hist"})
    series = {f"reward {d}": (steps, col(f"reward/{d}")) for d in doms}
    series |= {f"pass {d}": (steps, col(f"pass/{d}")) for d in doms if any(f"pass/{d}" in h for h in history)}
    add("reward_per_domain.png", series, "training reward and pass rate per domain", "mean", marks=marks)
    add("length_entropy.png", {"response length (tokens)": (steps, col("response_len")),
                               "entropy (nats/token)": (steps, col("entropy"))}, "response length and entropy", "")
    add("kl.png", {"|logp gap| rollout vs trainer": (steps, col("logp_gap")),
                   "approx KL old->new": (steps, col("pg/approx_kl")), "KL to reference": (steps, col("pg/kl"))},
        "KL and log-prob gap", "nats/token")
    add("time_split.png", {label: (steps, col(k)) for k, label in TIME_KEYS}, "time per RL step", "seconds")
    return plots


def _alerts(summary: dict) -> list[str]:
    path = summary.get("alerts_file")
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["message"] for line in f if line.strip()]


def write_report(out_dir: str, *, title: str, summary: dict, history: list[dict], evals: dict[str, float],
                 per_domain: dict[str, dict[str, float]] | None = None, cost_baseline: str = "sft_pass1",
                 cost_target: str = "rl_pass1") -> str:
    """Writes report.md + PNG plots into out_dir; returns the report path. Adds the cost figures to
    `summary` (cost_flops, cost_flops_per_point, cost_gain_points) so the run's final JSON carries them."""
    os.makedirs(out_dir, exist_ok=True)
    marks = list(summary.get("drift_alert_steps") or [])
    plots = _history_plots(out_dir, history, marks) if history else []
    if per_domain:
        _bars(os.path.join(out_dir, "pass_per_domain.png"), per_domain, "held-out pass@1 per domain")
        plots.insert(0, "pass_per_domain.png")
    if evals:
        _bars(os.path.join(out_dir, "eval.png"), {"pass@1": dict(evals)}, "held-out pass@1 by stage")
        plots.insert(0, "eval.png")
    c = cost(summary, cost_baseline, cost_target)
    summary |= {f"cost_{k}": c[k] for k in ("flops", "flops_per_point", "gain_points") if k in c}
    lines = [f"# {title}", "", cost_line(c, cost_baseline, cost_target), "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |"
              for k, v in summary.items() if not isinstance(v, dict)]
    lines += [f"| {k} | {json.dumps(v)} |" for k, v in summary.items() if isinstance(v, dict)]
    if per_domain:
        stages = list(per_domain)
        doms = sorted({d for v in per_domain.values() for d in v})
        lines += ["", "## Held-out pass@1 per domain", "", "| domain | " + " | ".join(stages) + " |",
                  "|---|" + "---|" * len(stages)]
        for d in doms:
            lines.append(f"| {d} | " + " | ".join(f"{per_domain[s].get(d, float('nan')):.3f}" for s in stages) + " |")
    alerts = _alerts(summary)
    lines += ["", f"## Alerts ({len(alerts)})", ""] + ([f"- {a}" for a in alerts] or ["none"])
    lines += [""] + [f"![{p[:-4]}]({p})" for p in plots]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
