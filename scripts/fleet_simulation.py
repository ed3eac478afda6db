"""Discrete-event simulation of a pod's verification fleet (issue #33): FIFO vs the per-domain scheduler
(rlpt.fleet.scheduler.Scheduler, both policies run as is) on trainer idle fraction and p99 step time.

Model. N trainer hosts each generate a batch of B trajectories per step (gen_s, lognormal jitter), submit one
verification per trajectory, wait for the batch to be verified, then train (train_s). Each trajectory's domain is
drawn from the measured domains (uniform, or --weight), its cost resampled from that domain's measured times
(scripts/measure_verifier_costs.py) with lognormal jitter; --heavy domains are scaled by --heavy-factor (bigger
sandboxes). M verifier hosts with W slots each pull chunks from the Scheduler; a chunk holds its slot for
overhead_s (the RPC round trip of one actor call) plus its items' costs, and its results return when it ends.
The cost model learns from every finished item. An item's deadline is its step's nominal submission time (step
start + gen_s; a constant budget on top would not change the order), so an earlier step's items go first.
Modes: sync (generate, wait, train) and async (one step of overlap: batch k is verified while batch k+1 is
generated). Coupling: pod (one SPMD program: every host trains step k together, once all hosts' batches are
verified) or host (each host waits only for its own batch). Verifier hosts differ only in their slot count here.
Step time = time between a host's consecutive train-step ends; the first step (prefill, cold cost model) is not
counted. Both policies see the same workload (per-batch random streams from --seed).
Usage: python scripts/fleet_simulation.py [--verifier-hosts 1,2,4] [--heavy-factor 1,100] [--mode sync,async]
The last stdout line is one JSON object; the headline (ours/peer) is the first value of each list.
"""
import argparse
import dataclasses
import heapq
import itertools
import json
import math
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rlpt.fleet.scheduler import POLICIES, CostModel, Item, Scheduler, match_table  # noqa: E402

DEFAULT_COSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "verifier_costs.json")
SANDBOXED = "code/synth,code/repair,shell/*"
GEN_DONE, CHUNK_DONE, TRAIN_DONE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class SimConfig:
    trainer_hosts: int = 8
    verifier_hosts: int = 2
    slots: int = 16  # worker slots per verifier host
    batch: int = 256  # trajectories per trainer host per step
    steps: int = 100
    gen_s: float = 20.0
    train_s: float = 5.0
    overhead_s: float = 0.002
    mode: str = "sync"  # sync | async
    coupling: str = "pod"  # pod | host
    cost_jitter: float = 0.25  # lognormal sigma on each resampled cost
    gen_jitter: float = 0.05  # lognormal sigma on each step's generation time (per host under coupling=host)
    chunk_s: float = 0.05
    max_chunk: int = 64
    seed: int = 0


def lognormal(rng: random.Random, sigma: float) -> float:
    """A mean-1 lognormal factor (1.0 when sigma is 0)."""
    return math.exp(sigma * rng.gauss(0.0, 1.0) - sigma * sigma / 2) if sigma > 0 else 1.0


def scale_costs(costs: dict, patterns: list[str], factor: float) -> dict:
    """The cost table with every domain matching one of the glob patterns scaled by factor."""
    table = dict.fromkeys(patterns, factor)
    return {d: [c * match_table(table, d, 1.0) for c in v] for d, v in costs.items()}


class PodSim:
    """One run of the pod with one scheduler policy; `run()` returns the metrics (see `simulate`)."""

    def __init__(self, costs: dict, cfg: SimConfig, policy: str, weights: dict | None, keep_items: bool):
        if cfg.mode not in ("sync", "async") or cfg.coupling not in ("pod", "host"):
            raise ValueError(f"mode must be sync|async and coupling pod|host, got {cfg.mode!r}, {cfg.coupling!r}")
        self.lag = 1 if cfg.mode == "async" else 0
        if cfg.steps <= self.lag + 1 or min(cfg.trainer_hosts, cfg.verifier_hosts, cfg.slots, cfg.batch) < 1:
            raise ValueError(f"simulation needs steps > {self.lag + 1} and positive host/slot/batch counts: {cfg}")
        if not costs or any(not v or min(v) < 0 for v in costs.values()):
            raise ValueError("cost table must map each domain to a non-empty list of seconds >= 0")
        self.cfg, self.costs, self.keep = cfg, costs, keep_items
        self.names = sorted(costs)
        self.cum = list(itertools.accumulate(match_table(weights or {}, d, 1.0) for d in self.names))
        self.sched = Scheduler(policy, chunk_s=cfg.chunk_s, max_chunk=cfg.max_chunk, cost=CostModel())
        self.events: list = []
        self.tick = itertools.count()
        self.free, self.queued = cfg.verifier_hosts * cfg.slots, 0
        self.busy_s = self.work_s = 0.0
        self.dispatches = 0
        self.batches, self.step_t0, self.remaining, self.submit_t, self.verified_t = {}, {}, {}, {}, {}
        n = cfg.trainer_hosts
        self.pending, self.ready_t, self.idle = [None] * n, [0.0] * n, [0.0] * n
        self.train_end: list[list[float]] = [[] for _ in range(n)]
        self.done_items: list = []

    def at(self, t: float, kind: int, *data) -> None:
        heapq.heappush(self.events, (t, next(self.tick), kind, data))

    def workload(self, host: int, step: int):
        """Generation time, domains and costs of one batch: a stream of its own, the same for every policy."""
        # A pod generates as one SPMD program: one generation time per step for all hosts.
        who = "pod" if self.cfg.coupling == "pod" else host
        gen = self.cfg.gen_s * lognormal(random.Random(f"{self.cfg.seed}|gen|{who}|{step}"), self.cfg.gen_jitter)
        rng = random.Random(f"{self.cfg.seed}|{host}|{step}")
        domains = rng.choices(self.names, cum_weights=self.cum, k=self.cfg.batch)
        costs = [rng.choice(self.costs[d]) * lognormal(rng, self.cfg.cost_jitter) for d in domains]
        return gen, domains, costs

    def start_gen(self, host: int, step: int, now: float) -> None:
        gen, domains, costs = self.workload(host, step)
        self.batches[host, step] = (domains, costs)
        self.step_t0.setdefault(step if self.cfg.coupling == "pod" else (host, step), now)
        self.at(now + gen, GEN_DONE, host, step)

    def gen_done(self, host: int, step: int, now: float) -> None:
        domains, costs = self.batches.pop((host, step))
        deadline = self.step_t0[step if self.cfg.coupling == "pod" else (host, step)] + self.cfg.gen_s
        for i, (domain, cost) in enumerate(zip(domains, costs)):
            self.sched.push(Item(f"{host}/{step}/{i}", domain, (host, step, cost), deadline=deadline), now)
        self.queued += len(domains)
        self.remaining[host, step], self.submit_t[host, step] = len(domains), now
        if step < self.lag:  # async prefill: generate the next batch before the first train step
            self.start_gen(host, step + 1, now)
        else:
            self.wait_train(host, step - self.lag, now)

    def wait_train(self, host: int, step: int, now: float) -> None:
        self.pending[host], self.ready_t[host] = step, now
        self.try_train(host, now)

    def try_train(self, host: int, now: float) -> None:
        step = self.pending[host]
        hosts = range(self.cfg.trainer_hosts) if self.cfg.coupling == "pod" else [host]
        if step is None or any(self.pending[h] != step or (h, step) not in self.verified_t for h in hosts):
            return
        for h in hosts:
            self.idle[h] += now - self.ready_t[h]
            self.pending[h] = None
            self.at(now + self.cfg.train_s, TRAIN_DONE, h, step)

    def train_done(self, host: int, step: int, now: float) -> None:
        self.train_end[host].append(now)
        if step + 1 + self.lag < self.cfg.steps:
            self.start_gen(host, step + 1 + self.lag, now)
        elif step + 1 < self.cfg.steps:
            self.wait_train(host, step + 1, now)

    def chunk_done(self, chunk: list, now: float) -> None:
        self.free += 1
        for item in chunk:
            host, step, cost = item.payload
            self.sched.cost.observe(item.domain, cost)
            if self.keep:
                self.done_items.append((item.id, host, step, cost, now))
            self.remaining[host, step] -= 1
            if self.remaining[host, step] == 0:
                self.verified_t[host, step] = now
                self.try_train(host, now)

    def dispatch(self, now: float) -> None:
        while self.free and self.queued:
            chunk = self.sched.pop_chunk(spread=self.free)  # as the fleet: free slots split a queue
            work = sum(item.payload[2] for item in chunk)
            self.free, self.queued, self.dispatches = self.free - 1, self.queued - len(chunk), self.dispatches + 1
            self.busy_s += self.cfg.overhead_s + work
            self.work_s += work
            self.at(now + self.cfg.overhead_s + work, CHUNK_DONE, chunk)

    def run(self) -> dict:
        for host in range(self.cfg.trainer_hosts):
            self.start_gen(host, 0, 0.0)
        handlers = {GEN_DONE: self.gen_done, CHUNK_DONE: self.chunk_done, TRAIN_DONE: self.train_done}
        now = 0.0
        while self.events:
            now, _, kind, data = heapq.heappop(self.events)
            handlers[kind](*data, now)
            self.dispatch(now)
        if len(self.sched) or any(len(e) != self.cfg.steps for e in self.train_end):
            raise RuntimeError(f"simulation ended with {len(self.sched)} items queued or steps unfinished")
        cfg, span = self.cfg, now
        steps = [np.diff([0.0] + ends)[1:] for ends in self.train_end]  # the first step is not counted
        flat = np.concatenate(steps)
        wait = {key: self.verified_t[key] - self.submit_t[key] for key in self.submit_t}
        warm = [w for (_, step), w in wait.items() if step > 0]
        out = {
            "policy": self.sched.policy,
            "idle_fraction": sum(self.idle) / (cfg.trainer_hosts * span),
            "step_mean_s": float(flat.mean()),
            "step_p99_s": float(np.percentile(flat, 99)),
            "verify_p99_s": float(np.percentile(warm, 99)),
            "cold_verify_s": max(w for (_, step), w in wait.items() if step == 0),
            "verifier_util": self.busy_s / (cfg.verifier_hosts * cfg.slots * span),
            "overhead_share": 1 - self.work_s / self.busy_s if self.busy_s else 0.0,
            "dispatches": self.dispatches,
            "items_per_dispatch": len(self.submit_t) * cfg.batch / self.dispatches,
            "makespan_s": span,
            "step_times": [s.tolist() for s in steps],
        }
        if self.keep:
            out["items"] = self.done_items
        return out


def simulate(costs: dict, cfg: SimConfig, policy: str, weights: dict | None = None, keep_items: bool = False):
    """Run the pod once. costs: domain -> measured seconds; weights: domain glob -> mix weight (default 1).

    Returns idle_fraction (trainer time spent waiting for verification), step_mean_s, step_p99_s, verify_p99_s
    (batch submitted -> last item verified, from step 1), cold_verify_s (the same, the slowest batch of step 0,
    while the cost model knows nothing), verifier_util (busy slot time incl. overhead), overhead_share,
    dispatches, items_per_dispatch, makespan_s, step_times (per host, from step 1) and, with keep_items,
    items: (id, host, step, cost_s, done_s) per verified item.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}; expected one of {POLICIES}")
    return PodSim(costs, cfg, policy, weights, keep_items).run()


def load_costs(path: str) -> dict:
    with open(path) as f:
        return json.load(f)["costs"]


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer-hosts", "-N", type=int, default=SimConfig.trainer_hosts)
    p.add_argument("--verifier-hosts", "-M", default="1,2,4", help="comma list")
    p.add_argument("--slots", "-W", type=int, default=SimConfig.slots, help="worker slots per verifier host")
    p.add_argument("--batch", "-B", type=int, default=SimConfig.batch, help="trajectories per trainer host")
    p.add_argument("--steps", type=int, default=SimConfig.steps)
    p.add_argument("--gen-s", type=float, default=SimConfig.gen_s)
    p.add_argument("--train-s", type=float, default=SimConfig.train_s)
    p.add_argument("--overhead-s", type=float, default=SimConfig.overhead_s)
    p.add_argument("--chunk-s", type=float, default=SimConfig.chunk_s)
    p.add_argument("--cost-jitter", type=float, default=SimConfig.cost_jitter)
    p.add_argument("--mode", default="sync,async", help="comma list of sync|async")
    p.add_argument("--coupling", default=SimConfig.coupling, choices=("pod", "host"))
    p.add_argument("--heavy", default=SANDBOXED, help="comma list of domain globs scaled by --heavy-factor")
    p.add_argument("--heavy-factor", default="1,100", help="comma list")
    p.add_argument("--weight", action="append", default=[], help="GLOB=W mix weight (default 1), repeatable")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--costs", default=DEFAULT_COSTS)
    a = p.parse_args()
    measured = load_costs(a.costs)
    weights = {g: float(w) for g, w in (x.rsplit("=", 1) for x in a.weight)}
    heavy = [g for g in a.heavy.split(",") if g]
    base = SimConfig(trainer_hosts=a.trainer_hosts, slots=a.slots, batch=a.batch, steps=a.steps, gen_s=a.gen_s,
                     train_s=a.train_s, overhead_s=a.overhead_s, chunk_s=a.chunk_s, cost_jitter=a.cost_jitter,
                     coupling=a.coupling, seed=a.seed)
    print(f"{len(measured)} domains; N={a.trainer_hosts} trainer hosts x B={a.batch}, W={a.slots} slots per "
          f"verifier host, gen {a.gen_s}s, train {a.train_s}s, overhead {1e3 * a.overhead_s:g}ms/dispatch, "
          f"{a.steps} steps, coupling {a.coupling}, heavy = {','.join(heavy)}, seed {a.seed}\n")
    print("| costs | mode | M | policy | idle % | step mean s | step p99 s | verify p99 s | step-0 verify s "
          "| verifier util % | overhead % | dispatches | p99 ratio fifo/domain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for factor, mode, m in itertools.product(floats(a.heavy_factor), a.mode.split(","), floats(a.verifier_hosts)):
        costs = scale_costs(measured, heavy, factor)
        cfg = dataclasses.replace(base, mode=mode, verifier_hosts=int(m))
        res = {pol: simulate(costs, cfg, pol, weights) for pol in ("fifo", "domain")}
        ratio = res["fifo"]["step_p99_s"] / res["domain"]["step_p99_s"]
        label = "measured" if factor == 1 else f"heavy x{factor:g}"
        for pol, r in res.items():
            cell = f"{ratio:.3f}" if pol == "domain" else ""
            print(f"| {label} | {mode} | {int(m)} | {pol} | {100 * r['idle_fraction']:.2f} | {r['step_mean_s']:.3f} "
                  f"| {r['step_p99_s']:.3f} | {r['verify_p99_s']:.3f} | {r['cold_verify_s']:.3f} "
                  f"| {100 * r['verifier_util']:.1f} | {100 * r['overhead_share']:.0f} | {r['dispatches']} | {cell} |",
                  flush=True)
            rows.append({"costs": label, "heavy_factor": factor, "mode": mode, "verifier_hosts": int(m),
                         **{k: v for k, v in r.items() if k != "step_times"}})
    head_fifo, head_dom = rows[0], rows[1]
    print(json.dumps({
        "benchmark": "fleet_simulation", "ours": round(head_dom["step_p99_s"], 4),
        "peer": round(head_fifo["step_p99_s"], 4), "unit": "s",
        "ratio": round(head_fifo["step_p99_s"] / head_dom["step_p99_s"], 4),
        "goal": "ratio >= 1: per-domain scheduling lowers p99 step time",
        "headline": {k: head_dom[k] for k in ("costs", "mode", "verifier_hosts")},
        "config": {**{k: v for k, v in dataclasses.asdict(base).items() if k not in ("mode", "verifier_hosts")},
                   "grid": {"heavy_factor": floats(a.heavy_factor), "mode": a.mode.split(","),
                            "verifier_hosts": [int(m) for m in floats(a.verifier_hosts)]},
                   "heavy": heavy, "weights": weights, "domains": len(measured),
                   "costs_file": os.path.relpath(a.costs)},
        "results": rows,
    }))


if __name__ == "__main__":
    main()
