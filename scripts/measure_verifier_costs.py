"""Measures how long each registered domain's verifier takes, for the fleet simulation (scripts/fleet_simulation.py).

For every domain: `--tasks` tasks over its tiers (training seeds 0..n-1), one untimed warm-up verify (long-lived
fleet workers have their imports and sandbox warm), then verify() timed with time.perf_counter on the oracle answer
(task.meta["answer"]) and on a wrong one (the next task's answer, or "0" when that is the same text).
Domains whose task generation raises are skipped and listed. Writes {"meta": {...}, "skipped": {...},
"costs": {domain: [seconds, ...]}}.
Usage: python scripts/measure_verifier_costs.py [--tasks 6] [--out scripts/data/verifier_costs.json]
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rlpt.tasks import get_domain, list_domains  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "verifier_costs.json")


def timed_verify(domain, task, response: str) -> float:
    t0 = time.perf_counter()
    domain.verify(task, response)
    return time.perf_counter() - t0


def measure_domain(domain, n_tasks: int) -> list[float]:
    """Seconds per verify() for n_tasks tasks, each checked with its oracle answer and with a wrong answer."""
    tasks = [domain.generate(seed, domain.tiers[seed % len(domain.tiers)]) for seed in range(n_tasks)]
    domain.verify(tasks[0], str(tasks[0].meta["answer"]))  # warm-up, not recorded
    out = []
    for k, task in enumerate(tasks):
        answer = str(task.meta["answer"])
        other = str(tasks[(k + 1) % len(tasks)].meta["answer"])
        out.append(timed_verify(domain, task, answer))
        out.append(timed_verify(domain, task, other if other != answer else "0"))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=6, help="tasks per domain (each timed twice)")
    p.add_argument("--out", default=DEFAULT_OUT)
    a = p.parse_args()
    costs, skipped = {}, {}
    t_start = time.perf_counter()
    for name in list_domains():
        domain = get_domain(name)
        try:
            costs[name] = measure_domain(domain, a.tasks)
        except Exception as err:  # a domain that cannot make tasks here (missing data, optional dependency)
            skipped[name] = f"{type(err).__name__}: {err}"[:300]
            print(f"skip {name}: {skipped[name]}", file=sys.stderr, flush=True)
            continue
        ms = sorted(costs[name])
        print(f"{name:40s} median {1e3 * ms[len(ms) // 2]:9.3f} ms  max {1e3 * ms[-1]:9.3f} ms", flush=True)
    meta = {
        "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": os.getloadavg()[0],
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "tasks_per_domain": a.tasks,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "unit": "s",
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "skipped": skipped, "costs": costs}, f, indent=1)
        f.write("\n")
    print(json.dumps({"benchmark": "verifier_costs", "domains": len(costs), "skipped": sorted(skipped),
                      "wall_s": meta["wall_s"], "out": os.path.relpath(a.out)}))


if __name__ == "__main__":
    main()
