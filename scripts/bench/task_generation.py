"""Benchmark: 10,000 tasks from a uniform mixture over every registered domain (rlpt, 2 worker processes, slow
cells drawn from pre-generated pools) against reasoning-gym's own API generating 10,000 items over its
generators (single process, as shipped).

    python scripts/bench/task_generation.py [--n 10000] [--workers 2] [--pool-size 64] [--pools DIR] [--cold]
    python scripts/bench/task_generation.py --profile 12 [--only 'rg/*']   # ms per task per (domain, tier)

Phases: (1) pre-generate the pools of the slow cells (`rlpt.tasks.pool.POOLED`) that the pool directory
lacks, timed on its own (0 s once cached); (2) generate the mixture, timed: this is `ours`. `--cold` also
times the mixture without pools (every task generated, slow cells included).
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


def profile(pattern: str, k: int, seed: int) -> list[dict]:
    """Per (domain, tier): ms for the first task (builds the generator's objects), then mean, median and max
    ms over k more tasks with random training seeds; one process."""
    from rlpt.tasks import get_domain, resolve
    from rlpt.tasks.base import EVAL_SEED_START
    from rlpt.tasks.pool import is_pooled

    rng = np.random.default_rng(seed)
    rows = []
    for name in resolve([pattern]):
        domain = get_domain(name)
        for tier in domain.tiers:
            times = []
            for _ in range(k + 1):
                t0 = time.perf_counter()
                domain.generate(int(rng.integers(0, EVAL_SEED_START)), tier)
                times.append((time.perf_counter() - t0) * 1000)
            ms = np.array(times[1:])
            rows.append(
                {
                    "domain": name,
                    "tier": tier,
                    "first_ms": round(times[0], 1),
                    "mean_ms": round(float(ms.mean()), 2),
                    "median_ms": round(float(np.median(ms)), 2),
                    "max_ms": round(float(ms.max()), 1),
                    "pooled": is_pooled(name, tier),
                }
            )
    return rows


def _print_profile(rows: list[dict], top: int) -> None:
    by_domain: dict[str, list[float]] = {}
    for r in rows:
        by_domain.setdefault(r["domain"], []).append(r["mean_ms"])
    # A uniform mixture draws a domain, then a tier: a domain costs the mean of its tiers' means.
    cost = {d: sum(v) / len(v) for d, v in by_domain.items()}
    total = sum(cost.values()) / len(cost)
    print(f"mean cost of a mixture task in one process: {total:.2f} ms ({1000 / total:.0f} tasks/s per core)")
    print(f"{'domain':<34} {'share':>6}  tier: first/mean/median/max ms ('*' = pooled)")
    for d in sorted(cost, key=cost.get, reverse=True)[:top]:
        cells = " ".join(
            f"t{r['tier']}{'*' if r['pooled'] else ''}:{r['first_ms']:.0f}/{r['mean_ms']:.1f}/{r['median_ms']:.1f}/"
            f"{r['max_ms']:.0f}"
            for r in rows
            if r["domain"] == d
        )
        print(f"{d:<34} {cost[d] / len(cost) / total:6.1%}  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=64, help="pool seeds per slow cell; 0 disables pools")
    parser.add_argument("--pools", default=None, help="pool directory (default $RLPT_TASK_POOLS or ~/.cache)")
    parser.add_argument("--cold", action="store_true", help="also time the mixture without pools")
    parser.add_argument("--peer-n", type=int, default=None, help="items for the reasoning-gym run (default --n)")
    parser.add_argument("--profile", type=int, default=0, metavar="K", help="profile K tasks per (domain, tier)")
    parser.add_argument("--only", default="*", help="domain glob for --profile")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", default="", help="--profile: write the rows here")
    args = parser.parse_args()

    if args.profile:
        rows = profile(args.only, args.profile, args.seed)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh)
        _print_profile(rows, args.top)
        return

    from rlpt.tasks import list_domains
    from rlpt.tasks.generate import generate_many, mixture_specs, pregenerate
    from rlpt.tasks.pool import PoolStore, is_pooled

    names = list_domains()
    store = PoolStore(args.pools) if args.pool_size else None
    pregen_s, pregen_n = 0.0, 0
    if store is not None:
        t0 = time.perf_counter()
        pregen_n = pregenerate(store, args.pool_size, workers=args.workers)
        pregen_s = time.perf_counter() - t0
        print(f"pools: {pregen_n} tasks pre-generated in {pregen_s:.1f} s ({args.pool_size} per slow cell)")
    specs = mixture_specs(names, args.n, args.seed, pool_size=args.pool_size)
    n_pooled = sum(is_pooled(d, t) for d, t, _ in specs) if store is not None else 0
    t0 = time.perf_counter()
    tasks = generate_many(specs, workers=args.workers, store=store)
    ours = time.perf_counter() - t0
    assert len(tasks) == args.n and {t.domain for t in tasks} <= set(names)
    print(
        f"rlpt: {args.n} tasks over {len(names)} domains in {ours:.1f} s with {args.workers} workers "
        f"({args.n / ours:.0f} tasks/s; {n_pooled} from pools)"
    )
    cold = None
    if args.cold:
        cold_specs = mixture_specs(names, args.n, args.seed + 1)
        t0 = time.perf_counter()
        generate_many(cold_specs, workers=args.workers)
        cold = time.perf_counter() - t0
        print(f"rlpt without pools: {args.n} tasks in {cold:.1f} s ({args.n / cold:.0f} tasks/s)")
    peer_n = args.peer_n or args.n
    peer = _peer(peer_n, args.seed)
    print(
        f"reasoning-gym: {peer_n} items over its generators in {peer:.1f} s, one process ({peer_n / peer:.0f} items/s)"
    )
    result = {
        "benchmark": "task_generation",
        "ours": round(args.n / ours, 1),
        "peer": round(peer_n / peer, 1),
        "unit": "tasks/s",
        "ratio": round((args.n / ours) / (peer_n / peer), 3),
        "ours_seconds": round(ours, 2),
        "peer_seconds": round(peer, 2),
        "pregenerate_seconds": round(pregen_s, 2),
        "pregenerated": pregen_n,
        "from_pools": n_pooled,
        "domains": len(names),
        "goal": f"{args.n} tasks over all domains in < 60 s on 2 cores",
    }
    if cold is not None:
        result["cold_tasks_per_s"] = round(args.n / cold, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
