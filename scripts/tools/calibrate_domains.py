"""Calibrate tiers: per (domain, tier), the pass rate of a prior-only baseline solver on the eval split,
plus how guessable and how long the gold answers are. Writes the table into docs/domains.md.

Baseline: answer every eval task of (domain, tier) with the most frequent gold answer among `--n-train`
training tasks of the same (domain, tier). It knows the answer distribution but not the question, so its
pass rate is the share of the eval set that a question-blind policy solves; it falls as tiers widen the
answer space.

    python scripts/tools/calibrate_domains.py [--n-train 40] [--n-eval 20] [--workers 2] [--only 'arith/*']
"""

import argparse
import collections
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import re
import time

START, END = "<!-- calibration:start -->", "<!-- calibration:end -->"


def calibrate(name: str, n_train: int, n_eval: int) -> dict:
    from rlpt.rewards.guard import normalise
    from rlpt.tasks import get_domain
    from rlpt.tasks.splits import eval_set, train_set

    domain = get_domain(name)
    t0 = time.perf_counter()
    rows = []
    for tier in domain.tiers:
        train = train_set(name, tier, n_train, seed=tier)
        golds = [t.meta["answer"] for t in train]
        majority = collections.Counter(golds).most_common(1)[0][0]
        evals = eval_set(name, tier, n_eval)
        passed = sum(domain.verify(t, majority).passed for t in evals)
        rows.append(
            {
                "tier": tier,
                "baseline": passed / len(evals),
                "distinct": len({normalise(g) for g in golds}) / len(golds),
                "answer_chars": sum(map(len, golds)) / len(golds),
                "prompt_chars": sum(len(t.prompt) for t in train) / len(train),
            }
        )
    return {
        "name": name,
        "source": domain.source,
        "verifier": domain.verifier,
        "description": domain.description,
        "tiers": rows,
        "seconds": time.perf_counter() - t0,
    }


def _fmt(values, spec):
    return " / ".join(format(v, spec) for v in values)


def table(results: list[dict]) -> str:
    lines = [
        "| domain | source | verifier | baseline pass rate by tier | distinct answers by tier | "
        "mean prompt chars by tier |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: r["name"]):
        t = r["tiers"]
        lines.append(
            f"| `{r['name']}` | {r['source']} | {r['verifier']} | "
            f"{_fmt([x['baseline'] for x in t], '.2f')} | "
            f"{_fmt([x['distinct'] for x in t], '.2f')} | {_fmt([x['prompt_chars'] for x in t], '.0f')} |"
        )
    return "\n".join(lines)


def summary(results: list[dict]) -> str:
    first = [r["tiers"][0]["baseline"] for r in results if len(r["tiers"]) > 1]
    last = [r["tiers"][-1]["baseline"] for r in results if len(r["tiers"]) > 1]
    d_first = [r["tiers"][0]["distinct"] for r in results if len(r["tiers"]) > 1]
    d_last = [r["tiers"][-1]["distinct"] for r in results if len(r["tiers"]) > 1]
    n_multi = len(first)
    mono = sum(r["tiers"][-1]["baseline"] <= r["tiers"][0]["baseline"] for r in results if len(r["tiers"]) > 1)
    return (
        f"{len(results)} domains; over the {n_multi} with several tiers the baseline's mean pass rate falls "
        f"from {sum(first) / n_multi:.3f} at the first tier to {sum(last) / n_multi:.3f} at the last "
        f"(last <= first in {mono} of {n_multi}), and the share of distinct gold answers rises from "
        f"{sum(d_first) / n_multi:.2f} to {sum(d_last) / n_multi:.2f}."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-train", type=int, default=40)
    parser.add_argument("--n-eval", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="*")
    parser.add_argument("--json", default="", help="results file, rewritten after each domain; reruns resume")
    parser.add_argument("--doc", default="docs/domains.md")
    args = parser.parse_args()

    from rlpt.tasks import resolve

    names = resolve([args.only])
    done = []
    if args.json and os.path.exists(args.json):  # resume: keep finished domains that are still registered
        done = json.load(open(args.json))  # results outside --only are kept and rewritten too
        names = [n for n in names if n not in {r["name"] for r in done}]
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["rlpt.tasks.registry", "rlpt.tasks.native", "rlpt.tasks.rgym", "reasoning_gym"])
    with cf.ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = {pool.submit(calibrate, n, args.n_train, args.n_eval): n for n in names}
        results = list(done)
        failed = {}
        for fut in cf.as_completed(futures):
            if fut.exception() is not None:  # reported in the table's block and by the exit status
                failed[futures[fut]] = f"{type(fut.exception()).__name__}: {fut.exception()}"
                print(f"{futures[fut]}: FAILED {failed[futures[fut]]}", flush=True)
                continue
            results.append(fut.result())
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(results, fh)
            print(
                f"{futures[fut]}: {[round(t['baseline'], 2) for t in results[-1]['tiers']]} "
                f"({results[-1]['seconds']:.1f} s)",
                flush=True,
            )
    failures = "".join(f"\n\nNot calibrated: `{name}`: {why}" for name, why in sorted(failed.items()))
    block = f"{START}\n{summary(results)}{failures}\n\n{table(results)}\n{END}"
    text = open(args.doc).read() if os.path.exists(args.doc) else f"{START}\n{END}\n"
    text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.DOTALL)
    with open(args.doc, "w") as fh:
        fh.write(text)
    print(summary(results))
    if failed:
        raise SystemExit(f"{len(failed)} domains failed: {sorted(failed)}")


if __name__ == "__main__":
    main()
