"""Benchmark: 10,000 tasks from a uniform mixture over every registered domain (rlpt, 2 worker processes)
against reasoning-gym's own API generating 10,000 items over its generators (single process, as shipped).

    python scripts/bench/task_generation.py [--n 10000] [--workers 2]
"""

import argparse
import json
import time

import numpy as np


def _peer(n: int, seed: int) -> float:
    """Seconds for reasoning-gym to produce n items uniformly over the generators we adapt."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    from rlpt.tasks.rgym import EXCLUDED

    # The library's default configurations; knight_swap's default config does not validate in 0.1.25.
    names = [x for x in sorted(DATASETS) if x not in EXCLUDED and x != "knight_swap"]
    datasets = {}
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for i in rng.integers(0, len(names), size=n):
        name = names[i]
        if name not in datasets:
            datasets[name] = reasoning_gym.create_dataset(name, seed=seed, size=1 << 40)
        datasets[name][int(rng.integers(0, 1 << 31))]  # numpy-seeded generators need seed + i < 2**32
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from rlpt.tasks import list_domains
    from rlpt.tasks.generate import generate_many, mixture_specs

    names = list_domains()
    specs = mixture_specs(names, args.n, args.seed)
    t0 = time.perf_counter()
    tasks = generate_many(specs, workers=args.workers)
    ours = time.perf_counter() - t0
    assert len(tasks) == args.n and {t.domain for t in tasks} <= set(names)
    peer = _peer(args.n, args.seed)
    print(
        f"rlpt: {args.n} tasks over {len(names)} domains in {ours:.1f} s with {args.workers} workers "
        f"({args.n / ours:.0f} tasks/s)"
    )
    print(
        f"reasoning-gym: {args.n} items over its generators in {peer:.1f} s, one process ({args.n / peer:.0f} items/s)"
    )
    print(
        json.dumps(
            {
                "benchmark": "task_generation",
                "ours": round(args.n / ours, 1),
                "peer": round(args.n / peer, 1),
                "unit": "tasks/s",
                "ratio": round(peer / ours, 3),
                "ours_seconds": round(ours, 2),
                "peer_seconds": round(peer, 2),
                "domains": len(names),
                "goal": f"{args.n} tasks over all domains in < 60 s on 2 cores",
            }
        )
    )


if __name__ == "__main__":
    main()
