"""Bulk task generation: mixture samples of (domain, tier, seed) specs, generated in rlpt's worker processes with cell
affinity; slow cells can be served from pre-generated pools (`rlpt.tasks.pool`)."""

import collections
import concurrent.futures as cf

import numpy as np

from rlpt.rewards.isolated import Pool, run_isolated
from rlpt.tasks.base import EVAL_SEED_START, Task
from rlpt.tasks.pool import PoolStore, is_pooled, pool_seeds, pooled_cells
from rlpt.tasks.registry import get_domain

Spec = tuple[str, int, int]  # (domain, tier, seed)
# One chunk of up to `chunk` tasks; the slowest generators here take ~0.3 s a task.
CHUNK_TIMEOUT_S = 600.0


def mixture_specs(names: list[str], n: int, seed: int, pool_size: int = 0) -> list[Spec]:
    """n (domain, tier, train seed) triples: domains uniform, tiers uniform within each domain.

    With pool_size > 0 the seed of a pooled (slow) cell is one of its first pool_size pool seeds; the
    domains and tiers drawn do not depend on pool_size.
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.integers(0, len(names), size=n):
        tiers = get_domain(names[i]).tiers
        tier = int(tiers[rng.integers(0, len(tiers))])
        task_seed = int(rng.integers(0, EVAL_SEED_START))
        if pool_size and is_pooled(names[i], tier):
            task_seed = pool_seeds(names[i], tier, pool_size)[task_seed % pool_size]
        out.append((names[i], tier, task_seed))
    return out


def _generate_chunk(specs: list[Spec]) -> list[Task]:
    return [get_domain(name).generate(seed, tier) for name, tier, seed in specs]


def _run(jobs: list[list[Spec]], workers: int) -> list[Task]:
    if workers == 0:
        return [task for job in jobs for task in _generate_chunk(job)]
    # rlpt's own worker processes (python -m rlpt.rewards.worker), not a multiprocessing pool: a spawn or
    # forkserver pool re-runs the caller's __main__, which breaks a script without a main guard.
    pool = Pool(workers)

    def one(job: list[Spec]) -> list[Task]:
        ok, value = run_isolated(_generate_chunk, job, timeout_s=CHUNK_TIMEOUT_S, pool=pool)
        if not ok:
            name, tier, seed = job[0]
            raise RuntimeError(f"task generation failed for {len(job)} tasks from {name} tier {tier} seed {seed}: "
                               f"{value}")
        return value

    try:
        with cf.ThreadPoolExecutor(workers) as threads:
            return [task for part in threads.map(one, jobs) for task in part]
    finally:
        pool.close()


def generate_many(specs: list[Spec], workers: int = 2, chunk: int = 32, store: PoolStore | None = None) -> list[Task]:
    """Tasks for the specs, in order; each is `get_domain(d).generate(seed, tier)`. workers=0 generates here.

    Specs are grouped by (domain, tier) before they are cut into chunks, so each worker builds a cell's
    generator objects (reasoning-gym datasets load word lists and fonts) about once, and slow cells go first
    so that no worker is left with a long tail. With a store, tasks of pooled cells are read from it and
    those generated here are added to it.
    """
    out: list[Task | None] = [None] * len(specs)
    todo = list(range(len(specs)))
    if store is not None:
        pools = {cell: store.load(*cell) for cell in {spec[:2] for spec in specs} if is_pooled(*cell)}
        todo = []
        for i, (name, tier, seed) in enumerate(specs):
            out[i] = pools.get((name, tier), {}).get(seed)
            if out[i] is None:
                todo.append(i)
    todo.sort(key=lambda i: (not is_pooled(*specs[i][:2]), specs[i][:2]))
    jobs = [[specs[i] for i in todo[k : k + chunk]] for k in range(0, len(todo), chunk)]
    for i, task in zip(todo, _run(jobs, workers), strict=True):
        out[i] = task
    if store is not None:
        fresh: dict[tuple[str, int], dict[int, Task]] = collections.defaultdict(dict)
        for i in todo:
            name, tier, seed = specs[i]
            if is_pooled(name, tier):
                fresh[name, tier][seed] = out[i]
        for (name, tier), tasks in fresh.items():
            store.save(name, tier, tasks)
    return out  # type: ignore[return-value]  (every slot is filled above)


def pregenerate(store: PoolStore, pool_size: int, workers: int = 2, cells=None) -> int:
    """Generate the first pool_size pool seeds of every pooled cell (or of `cells`) missing from the store;
    returns how many tasks were generated."""
    specs = []
    for name, tier in cells if cells is not None else pooled_cells():
        have = store.load(name, tier)
        specs += [(name, tier, s) for s in pool_seeds(name, tier, pool_size) if s not in have]
    generate_many(specs, workers=workers, chunk=4, store=store)
    return len(specs)
