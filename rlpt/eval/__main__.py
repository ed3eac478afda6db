"""`python -m rlpt.eval key=value ...`: evaluate a checkpoint (or the oracle / empty policy) on a suite, compare
results, measure effective context (suite=needle|multihop) or report contamination. A Hydra app over
experiments/conf/eval.yaml (options: rlpt/eval/config.py); outputs go to the Hydra run folder unless out= is given.
From Python: run(EvalConfig(...)) without Hydra, or main(['key=value', ...])."""
import json
import os
import sys

import hydra
from omegaconf import OmegaConf

from rlpt.config.cli import CONF_DIR, fail, preflight, register_cli_configs, slug
from rlpt.config.schema import RuntimeConfig
from rlpt.eval import compare as comparison
from rlpt.eval import contamination
from rlpt.eval.checkpoint import load_policy
from rlpt.eval.config import EvalConfig, legacy_overrides, parse_args, validate
from rlpt.eval.report import final_line, load_results, markdown, write_results
from rlpt.eval.run import evaluate_suite
from rlpt.runtime import setup

register_cli_configs()


def _out(cfg: EvalConfig, name: str) -> str:
    return cfg.out or os.path.join("runs", "eval", slug(f"{name}-{cfg.policy}"))


def _policy(cfg: EvalConfig):
    if cfg.policy != "model":
        return None

    model, tok, desc = load_policy(cfg.checkpoint)
    print(f"[eval] policy {desc}", flush=True)
    return model, tok


def run_eval(cfg: EvalConfig, policy=None) -> dict:
    """Evaluate on cfg.suite; `policy` = (model, tokenizer) in memory instead of loading cfg.checkpoint."""
    from rlpt.eval.suites import LoadArgs, get_suite  # on use (start-up: gymnasium)

    suite = get_suite(cfg.suite)
    tasks = suite.load(LoadArgs(cfg.limit, cfg.per_domain, cfg.seed))
    print(f"[eval] suite {suite.name}: {len(tasks)} tasks ({suite.source})", flush=True)
    res = evaluate_suite(cfg, suite, tasks, policy if policy is not None else _policy(cfg))
    paths = write_results(res, _out(cfg, suite.name))
    print(markdown(res).split("## First")[0], flush=True)
    line = final_line(res, paths)
    if cfg.baseline:
        line["compare"] = _compare(cfg, cfg.baseline, paths[0])
    return line


def _compare(cfg: EvalConfig, a_path: str, b_path: str) -> dict:
    a, b = load_results(a_path), load_results(b_path)
    metrics = ["pass1"] + [f"pass@{k}" for k in cfg.k if all(r.get("n", 0) >= k for r in a["records"] + b["records"])]
    result = {}
    for metric in metrics:
        cmp = comparison.compare(a, b, metric=metric, level=cfg.level, resamples=cfg.resamples, seed=cfg.seed,
                                 min_drop=cfg.min_drop)
        out = cfg.out or os.path.dirname(os.path.abspath(b_path if b_path.endswith(".json") else b_path + "/x"))
        comparison.write_comparison(cmp, os.path.join(out, f"compare_{metric.replace('@', '_at_')}"))
        print(comparison.markdown(cmp), flush=True)
        row = cmp["rows"]["all"]
        result[metric] = {"delta": round(row["delta"], 6), "low": round(row["low"], 6), "high": round(row["high"], 6),
                          "regressions": cmp["regressions"]}
    return result


def run_compare(cfg: EvalConfig) -> dict:
    parts = [p for p in cfg.compare.split(",") if p]
    if len(parts) != 2:
        raise ValueError(f"compare={cfg.compare!r}: expected two results paths A,B (B - A is reported)")
    return {"compare": parts, **_compare(cfg, parts[0], parts[1])}


def run_contamination(cfg: EvalConfig) -> dict:
    from rlpt.eval.suites import LoadArgs, get_suite  # on use (start-up: gymnasium)

    suite = get_suite(cfg.suite)
    tasks = suite.load(LoadArgs(cfg.limit, cfg.per_domain, cfg.seed))
    rows = contamination.report(tasks, contamination.training_texts(cfg.contamination, cfg.train_tasks),
                                n=cfg.ngram)
    text = contamination.markdown(suite.name, rows, cfg.ngram)
    out = _out(cfg, f"{suite.name}-contamination")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "contamination.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out, "contamination.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    alls = [r for r in rows if r["domain"] == "all"]
    return {"suite": suite.name, "contamination": cfg.contamination, "n_eval": len(tasks),
            "contaminated": {r["source"]: r["contaminated"] for r in alls},
            "rate": {r["source"]: round(r["rate"], 6) for r in alls}, "report": os.path.join(out, "contamination.md")}


def run(cfg: EvalConfig) -> dict:
    """The mode cfg asks for (compare, contamination, effective context, or a suite evaluation); its JSON line."""

    validate(cfg)
    setup(RuntimeConfig())  # the persistent compilation cache, as for training ($RLPT_COMPILATION_CACHE or ~/.cache)
    if cfg.compare:
        return run_compare(cfg)
    if cfg.contamination:
        return run_contamination(cfg)
    if cfg.suite in ("needle", "multihop"):
        from rlpt.eval.context import run_context  # on use (start-up: gymnasium)

        return run_context(cfg, _policy(cfg), _out(cfg, cfg.suite))
    return run_eval(cfg)


def main(argv: list[str]) -> dict:
    """In-process `python -m rlpt.eval <argv>` (no Hydra run folder: out= or runs/eval/<suite>-<policy>)."""
    return run(parse_args(argv))


@hydra.main(config_path=CONF_DIR, config_name="eval", version_base="1.3")
def _app(dcfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    cfg = OmegaConf.to_object(dcfg)
    cfg.out = cfg.out or HydraConfig.get().runtime.output_dir
    try:
        line = run(cfg)
    except (ValueError, KeyError, FileNotFoundError, ImportError) as err:
        fail("rlpt.eval", err)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    from rlpt.runtime import tune_malloc

    tune_malloc()  # re-exec once with glibc malloc settings XLA:CPU runs faster under (rlpt/runtime.py)
    sys.argv[1:] = legacy_overrides(sys.argv[1:])
    preflight("rlpt.eval", "eval", sys.argv[1:], validate)  # a refused value leaves no run folder behind
    _app()
