"""Bulk task generation: a mixture sample of (domain, tier, seed) specs, generated in a process pool."""

import concurrent.futures as cf
import multiprocessing as mp

import numpy as np

from rlpt.tasks.base import EVAL_SEED_START, Task
from rlpt.tasks.registry import get_domain, list_domains


def mixture_specs(names: list[str], n: int, seed: int) -> list[tuple[str, int, int]]:
    """n (domain, tier, train seed) triples: domains uniform, tiers uniform within each domain."""
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.integers(0, len(names), size=n):
        tiers = get_domain(names[i]).tiers
        out.append((names[i], int(tiers[rng.integers(0, len(tiers))]), int(rng.integers(0, EVAL_SEED_START))))
    return out


def _generate_chunk(specs: list[tuple[str, int, int]]) -> list[Task]:
    return [get_domain(name).generate(seed, tier) for name, tier, seed in specs]


def _warm() -> None:
    list_domains()


def generate_many(specs: list[tuple[str, int, int]], workers: int = 2, chunk: int = 64) -> list[Task]:
    """Tasks for the specs, in order. workers=0 generates in this process. The pool forks from a server
    that has imported the generators once, so workers start without re-importing reasoning-gym."""
    if workers == 0:
        return _generate_chunk(specs)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["rlpt.tasks.registry", "rlpt.tasks.native", "rlpt.tasks.rgym", "reasoning_gym"])
    chunks = [specs[i : i + chunk] for i in range(0, len(specs), chunk)]
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_warm) as pool:
        return [task for part in pool.map(_generate_chunk, chunks) for task in part]
