"""Compute cost of a run: tokens generated and trained, wall time, estimated FLOPs per point of held-out pass@1."""


def estimate_flops(n_params: float, tokens_trained: float, tokens_generated: float) -> float:
    """6 N per trained token (forward + backward) + 2 N per generated token (forward only); attention's
    sequence-length term is left out (small at these lengths), so this is a lower bound."""
    return 6.0 * n_params * tokens_trained + 2.0 * n_params * tokens_generated


def cost(summary: dict, baseline_key: str = "sft_pass1", target_key: str = "rl_pass1") -> dict:
    """Cost figures from a run summary (needs n_params, tokens_trained, tokens_generated; the pass@1 pair
    for the per-point figure). Missing keys are listed under 'missing' instead of raising: a report of a
    run without evaluation still gets written, and says what it could not compute."""
    need = ("n_params", "tokens_trained", "tokens_generated")
    missing = [k for k in need if summary.get(k) is None]
    out: dict = {"missing": missing}
    wall = summary.get("wall_s", summary.get("rl_wall_s"))
    out["wall_s"] = wall
    if missing:
        return out
    flops = estimate_flops(summary["n_params"], summary["tokens_trained"], summary["tokens_generated"])
    out |= {"flops": flops, "tokens_trained": summary["tokens_trained"],
            "tokens_generated": summary["tokens_generated"], "n_params": summary["n_params"]}
    if summary.get(baseline_key) is None or summary.get(target_key) is None:
        out["missing"] = [k for k in (baseline_key, target_key) if summary.get(k) is None]
        return out
    gain = 100.0 * (summary[target_key] - summary[baseline_key])
    out |= {"baseline": summary[baseline_key], "target": summary[target_key], "gain_points": gain,
            "flops_per_point": flops / gain if gain > 0 else None}
    return out


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def cost_line(c: dict, baseline_key: str = "sft_pass1", target_key: str = "rl_pass1") -> str:
    """One markdown line: tokens, wall time, FLOPs, FLOPs per point of held-out pass@1 gained."""
    wall = f"wall {c['wall_s']:.0f} s" if c.get("wall_s") is not None else "wall n/a"
    if "flops" not in c:
        return f"**Cost:** n/a (the summary lacks {', '.join(c['missing'])}); {wall}."
    line = (f"**Cost:** {_si(c['tokens_generated'])} tokens generated, {_si(c['tokens_trained'])} trained; {wall}; "
            f"~{c['flops']:.3g} FLOPs (6·N·trained + 2·N·generated, N = {_si(c['n_params'])} parameters)")
    if "gain_points" not in c:
        return line + f"; FLOPs per point n/a (the summary lacks {', '.join(c['missing'])})."
    line += (f"; held-out pass@1 {c['baseline']:.3f} ({baseline_key}) -> {c['target']:.3f} ({target_key}), "
             f"{c['gain_points']:+.1f} points")
    if c["flops_per_point"] is None:
        return line + ": no gain, so FLOPs per point is undefined."
    return line + f": **{c['flops_per_point']:.3g} FLOPs per point gained**."
