"""CLI: `python -m rlpt.tasks list` and `python -m rlpt.tasks sample DOMAIN --tier N [--n K] [--seed S]`."""

import argparse
import sys

from rlpt.tasks.registry import get_domain, list_domains


def _list(pattern: str | None) -> None:
    from rlpt.tasks.registry import resolve

    names = resolve([pattern]) if pattern else list_domains()
    width = max(len(n) for n in names)
    print(f"{'domain':<{width}}  tiers      verifier            source")
    for name in names:
        d = get_domain(name)
        tiers = ",".join(map(str, d.tiers))
        print(f"{name:<{width}}  {tiers:<9}  {d.verifier:<18}  {d.source}")
    print(f"{len(names)} domains")


def _sample(name: str, tier: int, n: int, seed: int, split: str) -> None:
    from rlpt.tasks.base import EVAL_SEED_START

    domain = get_domain(name)
    base = seed + (EVAL_SEED_START if split == "eval" else 0)
    for s in range(base, base + n):
        task = domain.generate(s, tier)
        print(f"=== {task.id}  (env {task.env_id}, split {task.meta['split']})")
        print(task.prompt if len(task.prompt) <= 4000 else task.prompt[:2000] + "\n[...]\n" + task.prompt[-1500:])
        print(f"--- gold answer:\n{task.meta['answer']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpt.tasks", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_list = sub.add_parser("list", help="domains with tiers, verifier and source")
    p_list.add_argument("pattern", nargs="?", help="glob such as 'arith/*'")
    p_sample = sub.add_parser("sample", help="tasks with their gold answers")
    p_sample.add_argument("domain")
    p_sample.add_argument("--tier", type=int, default=1)
    p_sample.add_argument("--n", type=int, default=3)
    p_sample.add_argument("--seed", type=int, default=0)
    p_sample.add_argument("--split", choices=["train", "eval"], default="train")
    args = parser.parse_args(argv)
    if args.cmd == "list":
        _list(args.pattern)
    else:
        _sample(args.domain, args.tier, args.n, args.seed, args.split)
    return 0


if __name__ == "__main__":
    sys.exit(main())
