"""suite=needle | multihop: the effective-context grid through the same evaluation path as every suite."""
import json
import os

from rlpt.eval import needle
from rlpt.eval.report import write_results
from rlpt.eval.run import evaluate_suite
from rlpt.eval.suites.base import Suite
from rlpt.models import builtin_tokenizer, load_tokenizer


def _tokenizer(cfg, policy_model):
    if policy_model is not None:
        return policy_model[1]

    return load_tokenizer(cfg.tokenizer) if cfg.tokenizer else builtin_tokenizer()


def run_context(cfg, policy_model, out: str) -> dict:
    """Evaluate the lengths x depths grid; write results.json, needle.json, needle.md and needle.png."""

    hops = 1 if cfg.suite == "needle" else 2
    tok = _tokenizer(cfg, policy_model)
    lengths, depths = sorted(cfg.lengths), list(cfg.depths)
    if not lengths or not depths or any(not 0 <= d <= 1 for d in depths):
        raise ValueError(f"lengths={cfg.lengths} and depths={cfg.depths} must be non-empty, depths in [0, 1]")
    tasks = needle.grid_tasks(tok, lengths, depths, cfg.trials, hops, cfg.seed)
    suite = Suite(cfg.suite, f"{'needle' if hops == 1 else 'two-hop'} retrieval, lengths {lengths}",
                  lambda args: tasks, needle.check, max_new_tokens=16, source="generated (rlpt.eval.needle)")
    res = evaluate_suite(cfg, suite, tasks, policy_model)
    grid = needle.accuracy_grid(res["records"], tasks, lengths, depths)
    effective = needle.effective_context(grid, lengths, cfg.threshold)
    nominal = int(policy_model[0].config.max_position_embeddings) if policy_model is not None else 0
    paths = write_results(res, out)
    title = (f"{cfg.suite}: {cfg.checkpoint or cfg.policy}\nnominal {nominal or '-'}, effective {effective} "
             f"(accuracy >= {cfg.threshold})")
    png = needle.heatmap(grid, lengths, depths, os.path.join(out, "needle.png"), title)
    summary = {"suite": cfg.suite, "policy": cfg.policy, "pass1": round(res["overall"]["pass1"], 6),
               "nominal_context": nominal, "effective_context": effective, "threshold": cfg.threshold,
               "lengths": lengths, "depths": depths, "accuracy": grid.round(4).tolist(),
               "prompt_tokens": {str(L): max(t.meta["prompt_tokens"] for t in tasks if t.meta["length"] == L)
                                 for L in lengths}, "plot": png, "results": paths[0]}
    with open(os.path.join(out, "needle.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lines = [f"# Effective context: {cfg.suite}", "", f"nominal {nominal or '-'}, effective {effective} "
             f"(depth-mean accuracy >= {cfg.threshold})", "", "| depth | " + " | ".join(map(str, lengths)) + " |",
             "|---" * (len(lengths) + 1) + "|"]
    lines += [f"| {d:g} | " + " | ".join(f"{v:.2f}" for v in row) + " |" for d, row in zip(depths, grid)]
    with open(os.path.join(out, "needle.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return summary
