"""Compare two evaluations of one suite: per-domain deltas with paired bootstrap intervals, flagged regressions."""
import json
import os

from rlpt.eval.passk import pass_at_k
from rlpt.eval.stats import paired_bootstrap


def _task_scores(res: dict, metric: str) -> dict[str, tuple[str, float]]:
    out = {}
    for r in res["records"]:
        if metric == "pass1":
            out[r["id"]] = (r["domain"], float(r["passed"]))
        else:
            k = int(metric[5:])
            if r.get("n", 0) < k:
                raise ValueError(f"{metric}: task {r['id']} has {r.get('n', 0)} samples < {k}")
            out[r["id"]] = (r["domain"], pass_at_k(r["n"], r["c"], k))
    return out


def compare(a: dict, b: dict, *, metric: str = "pass1", level: float = 0.95, resamples: int = 2000, seed: int = 0,
            min_drop: float = 0.0) -> dict:
    """B minus A on the tasks both evaluated, overall and per domain.

    A row is a regression when its interval lies below 0 and delta <= -min_drop."""
    if a["suite"] != b["suite"]:
        raise ValueError(f"cannot compare suite {a['suite']!r} with suite {b['suite']!r}")
    sa, sb = _task_scores(a, metric), _task_scores(b, metric)
    common = [i for i in sa if i in sb]
    if not common:
        raise ValueError(f"the two results of suite {a['suite']!r} share no task ids")
    groups = {"all": common}
    for i in common:
        groups.setdefault(sa[i][0], []).append(i)
    rows = {}
    for name, ids in groups.items():
        iv = paired_bootstrap([sa[i][1] for i in ids], [sb[i][1] for i in ids], level=level, resamples=resamples,
                              seed=seed)
        rows[name] = {"n": iv.n, "a": sum(sa[i][1] for i in ids) / iv.n, "b": sum(sb[i][1] for i in ids) / iv.n,
                      "delta": iv.delta, "low": iv.low, "high": iv.high,
                      "regression": iv.high < 0 and iv.delta <= -min_drop, "improvement": iv.low > 0}
    return {"suite": a["suite"], "metric": metric, "level": level, "a": a.get("checkpoint") or a["policy"],
            "b": b.get("checkpoint") or b["policy"], "only_a": len(sa) - len(common), "only_b": len(sb) - len(common),
            "rows": rows, "regressions": [n for n, r in rows.items() if r["regression"]]}


def markdown(cmp: dict) -> str:
    pct = round(100 * cmp["level"])
    lines = [f"# rlpt eval comparison: {cmp['suite']} ({cmp['metric']})", "", f"- A: `{cmp['a']}`",
             f"- B: `{cmp['b']}`", f"- paired bootstrap {pct}% intervals of B - A over shared tasks"
             f" (only in A: {cmp['only_a']}, only in B: {cmp['only_b']})", "",
             f"| domain | n | A | B | delta | {pct}% CI | flag |", "|---|---|---|---|---|---|---|"]
    for name, r in cmp["rows"].items():
        flag = "REGRESSION" if r["regression"] else "improved" if r["improvement"] else ""
        lines.append(f"| {name} | {r['n']} | {r['a']:.3f} | {r['b']:.3f} | {r['delta']:+.3f} | "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] | {flag} |")
    return "\n".join(lines) + "\n"


def write_comparison(cmp: dict, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump(cmp, f, indent=1)
    path = os.path.join(out_dir, "compare.md")
    with open(path, "w") as f:
        f.write(markdown(cmp))
    return path
