"""Run report: report.md with PNG plots (reward, pass rate per domain, KL, length, time split) and a cost line."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _plot(path, series: dict, title: str, xlabel="step"):
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for label, (x, y) in series.items():
        ax.plot(x, y, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(out_dir: str, *, title: str, summary: dict, history: list[dict], evals: dict[str, float],
                 per_domain: dict[str, dict[str, float]] | None = None) -> str:
    """Writes report.md + plots into out_dir; returns the report path."""
    os.makedirs(out_dir, exist_ok=True)
    plots = []
    if history:
        steps = [h["step"] for h in history]
        _plot(os.path.join(out_dir, "reward.png"),
              {"reward": (steps, [h["reward_mean"] for h in history]),
               "pass rate": (steps, [h["pass_rate"] for h in history])}, "RL reward and pass rate")
        doms = sorted({k for h in history for k in h if k.startswith("reward/") and k != "reward/hist"})
        if doms:
            _plot(os.path.join(out_dir, "reward_per_domain.png"),
                  {d[7:]: (steps, [h.get(d, float("nan")) for h in history]) for d in doms}, "reward per domain")
            plots.append("reward_per_domain.png")
        _plot(os.path.join(out_dir, "length_entropy.png"),
              {"response length": (steps, [h["response_len"] for h in history]),
               "entropy": (steps, [h["entropy"] for h in history])}, "response length and entropy")
        kl_key = "pg/approx_kl" if "pg/approx_kl" in history[0] else None
        series = {"|logp gap| rollout vs trainer": (steps, [h["logp_gap"] for h in history])}
        if kl_key:
            series["approx KL (old->new)"] = (steps, [h[kl_key] for h in history])
        _plot(os.path.join(out_dir, "kl.png"), series, "KL and log-prob gap")
        _plot(os.path.join(out_dir, "time_split.png"),
              {k: (steps, [h[f"{k}_s"] for h in history]) for k in ("gen", "verify", "train", "idle")},
              "seconds per step")
        plots = ["reward.png", *plots, "length_entropy.png", "kl.png", "time_split.png"]
    if evals:
        names = list(evals)
        fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
        ax.bar(names, [evals[n] for n in names], color="tab:blue")
        ax.set_ylim(0, 1)
        ax.set_title("held-out pass@1")
        for i, n in enumerate(names):
            ax.text(i, evals[n] + 0.02, f"{evals[n]:.2f}", ha="center")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "eval.png"))
        plt.close(fig)
        plots.insert(0, "eval.png")
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary.items() if not isinstance(v, dict)]
    if per_domain:
        stages = list(per_domain)
        doms = sorted({d for v in per_domain.values() for d in v})
        lines += ["", "## Held-out pass@1 per domain", "", "| domain | " + " | ".join(stages) + " |",
                  "|---|" + "---|" * len(stages)]
        for d in doms:
            lines.append(f"| {d} | " + " | ".join(f"{per_domain[s].get(d, float('nan')):.3f}" for s in stages) + " |")
    lines += [""] + [f"![{p[:-4]}]({p})" for p in plots]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
