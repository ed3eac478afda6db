"""Pre-generated task pools for slow (domain, tier) cells: a fixed seed set per cell whose tasks are generated
once, in a process pool, and kept on disk, so throughput-bound callers draw them at the cost of a lookup.

Pooling never changes what a seed means: a pooled task is exactly `get_domain(d).generate(seed, tier)`. What
changes is which seeds a sampler draws: `mixture_specs(..., pool_size=N)` draws the seeds of a pooled cell
from its first N `pool_seeds`, so a slow cell offers N distinct training tasks instead of 2**30.
"""

import functools
import hashlib
import inspect
import os
import pickle
import random
import sys
from pathlib import Path

from rlpt.tasks import base, rgym_fixes
from rlpt.tasks.base import EVAL_SEED_START, Task, task_id
from rlpt.tasks.registry import get_domain

# Cells whose generation averaged over ~10 ms per task or had tails of seconds, or whose dataset took over
# ~0.1 s to build (word lists, fonts, ARC grids: 0.5-1.6 s per tier, paid by each worker that touches the
# cell), on the 2-core reference machine (`python scripts/bench/task_generation.py --profile 12`).
POOLED: dict[str, tuple[int, ...]] = {
    "rg/ab": (4,),
    "rg/advanced_geometry": (1,),
    "rg/arc_agi": (1, 2, 3, 4),
    "rg/binary_matrix": (4,),
    "rg/circuit_logic": (3, 4, 5),
    "rg/count_primes": (4,),
    "rg/countdown": (1,),
    "rg/figlet_font": (1, 2, 3, 4, 5),
    "rg/futoshiki": (1,),
    "rg/game_of_life": (1,),
    "rg/group_anagrams": (1, 2, 3, 4),
    "rg/intermediate_integration": (1,),
    "rg/kakurasu": (2, 3, 4),
    "rg/manipulate_matrix": (4,),
    "rg/modulo_grid": (3, 4, 5),
    "rg/n_queens": (4,),
    "rg/number_sorting": (2, 3, 4, 5),
    "rg/polynomial_multiplication": (1,),
    "rg/pool_matrix": (3,),
    "rg/quantum_lock": (4, 5),
    "rg/rearc": (1, 2, 3, 4, 5),
    "rg/rotate_matrix": (4, 5),
    "rg/rotten_oranges": (4,),
    "rg/shortest_path": (4,),
    "rg/simple_equations": (4,),
    "rg/simple_integration": (1, 2, 3, 4),
    "rg/sokoban": (1, 2, 3, 4),
    "rg/spell_backward": (1, 2, 3, 4, 5),
    "rg/spiral_matrix": (4,),
    "rg/string_splitting": (3, 4),
    "rg/string_synthesis": (3, 4),
    "rg/sudoku": (1, 2, 3, 4, 5),
    "rg/zebra_puzzles": (1, 2),
}
ENV_DIR = "RLPT_TASK_POOLS"


def is_pooled(domain: str, tier: int) -> bool:
    return tier in POOLED.get(domain, ())


def pooled_cells() -> list[tuple[str, int]]:
    return [(name, tier) for name, tiers in sorted(POOLED.items()) for tier in tiers]


@functools.cache
def pool_seeds(domain: str, tier: int, n: int) -> tuple[int, ...]:
    """The first n pool seeds of a cell: distinct training seeds from a stream fixed by the cell's name, so a
    longer pool extends a shorter one."""
    rng = random.Random(f"pool|{domain}|{tier}")
    seeds: dict[int, None] = {}
    while len(seeds) < n:
        seeds[rng.randrange(EVAL_SEED_START)] = None
    return tuple(seeds)


def default_dir() -> Path:
    """$RLPT_TASK_POOLS, else ~/.cache/rlpt/task_pools."""
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "rlpt" / "task_pools")


@functools.cache
def fingerprint(domain: str) -> str:
    """Hash of what a domain's tasks depend on: Python, the generator's source, the library version. A pool
    file written under another fingerprint is never read, so an edited generator cannot serve stale tasks."""

    d = get_domain(domain)
    parts = [sys.version.split()[0], domain, repr(d.tiers), d.description, d.source]
    modules = {inspect.getmodule(d.make), base}
    if domain.startswith("rg/"):
        import reasoning_gym


        parts.append(reasoning_gym.__version__)
        modules.add(rgym_fixes)
    parts += [inspect.getsource(m) for m in sorted(modules, key=lambda m: m.__name__)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


class PoolStore:
    """Pooled tasks on disk: one pickle per (domain, tier, fingerprint) holding {seed: Task}.

    Files are written atomically (temp file, then rename) and merged with what is there, so concurrent
    writers lose no more than each other's latest additions; saving a cell deletes its files of other
    fingerprints. Pickles are loaded: keep the directory private.
    """

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_dir()

    def path(self, domain: str, tier: int) -> Path:
        return self.root / domain.replace("/", "__") / f"t{tier}-{fingerprint(domain)}.pkl"

    def load(self, domain: str, tier: int) -> dict[int, Task]:
        path = self.path(domain, tier)
        if not path.exists():
            return {}
        with open(path, "rb") as fh:
            tasks = pickle.load(fh)
        for seed, task in tasks.items():
            if task.domain != domain or task.difficulty != tier or task.id != task_id(domain, tier, seed):
                raise ValueError(f"task pool {path} holds {task.id!r} under seed {seed}: delete the file")
        return tasks

    def save(self, domain: str, tier: int, tasks: dict[int, Task]) -> None:
        path = self.path(domain, tier)
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**self.load(domain, tier), **tasks}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(merged, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        for stale in path.parent.glob(f"t{tier}-*.pkl"):  # written by an earlier version of the generator
            if stale != path:
                stale.unlink(missing_ok=True)
