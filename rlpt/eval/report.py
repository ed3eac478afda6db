"""Results files of an evaluation: results.json (everything, per-task records included) and results.md."""
import json
import os

FAILURES_SHOWN = 10


def metric_names(agg: dict) -> list[str]:
    return ["pass1"] + sorted((k for k in agg if k.startswith("pass@")), key=lambda k: int(k[5:]))


def table(rows: dict, key_name: str, metrics: list[str]) -> list[str]:
    """Markdown table: one row per key of `rows` ({key: {"n", metric...}})."""
    lines = [f"| {key_name} | n | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 2) + "|"]
    for key, agg in rows.items():
        cells = [f"{agg[m]:.3f}" if m in agg else "-" for m in metrics]
        lines.append(f"| {key} | {agg['n']} | " + " | ".join(cells) + " |")
    return lines


def markdown(res: dict) -> str:
    metrics = metric_names(res["overall"])
    head = [f"# rlpt eval: {res['suite']} ({res['policy']})", "",
            f"- checkpoint: `{res['checkpoint'] or '-'}`", f"- source: {res['source']}",
            f"- tasks: {res['overall']['n']}, max_new_tokens {res['max_new_tokens']}, samples {res['samples']}"
            + (f" at temperature {res['temperature']}" if res["samples"] else ""),
            "- " + ", ".join(f"{m} = {res['overall'][m]:.4f}" for m in metrics), f"- wall: {res['wall_s']} s", ""]
    body = ["## Per domain", "", *table(res["per_domain"], "domain", metrics), "",
            "## Per tier", "", *table(res["per_tier"], "tier", metrics), ""]
    if res.get("per_family"):  # code domains split train/eval on the solution: families differ in exposure
        body += ["## Per problem family", "", *table(res["per_family"], "family", metrics), ""]
    fails = [r for r in res["records"] if not r["passed"]][:FAILURES_SHOWN]
    if fails:
        body += [f"## First {len(fails)} failures (greedy)", "", "| task | response | details |", "|---|---|---|"]
        for r in fails:
            text = r["response"][:80].replace("|", "\\|").replace("\n", "\\n")
            details = json.dumps(r.get("details", {}))[:120].replace("|", "\\|")
            body.append(f"| {r['id']} | `{text}` | {details} |")
    return "\n".join(head + body) + "\n"


def write_results(res: dict, out_dir: str) -> tuple[str, str]:
    """Write results.json and results.md under out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    js, md = os.path.join(out_dir, "results.json"), os.path.join(out_dir, "results.md")
    with open(js, "w") as f:
        json.dump(res, f, indent=1)
    with open(md, "w") as f:
        f.write(markdown(res))
    return js, md


def load_results(path: str) -> dict:
    """A results.json (or the folder holding one)."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    with open(path) as f:
        res = json.load(f)
    if "records" not in res:
        raise ValueError(f"{path}: not an rlpt.eval results.json (no per-task records)")
    return res


def final_line(res: dict, paths: tuple[str, str]) -> dict:
    """The last stdout line: suite, policy, pass1 (and pass@k when sampled)."""
    line = {"suite": res["suite"], "policy": res["policy"], "n": res["overall"]["n"]}
    line.update({m: round(res["overall"][m], 6) for m in metric_names(res["overall"])})
    line.update({"checkpoint": res["checkpoint"], "results": paths[0], "wall_s": res["wall_s"]})
    return line
