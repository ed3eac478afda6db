"""Train and eval splits: disjoint seed ranges per domain plus content-hash partitioning (see base.py)."""
import sys

import numpy as np

from rlpt.tasks.base import EVAL_SEED_START, SEED_END, Task, render_prompt
from rlpt.tasks.contamination import ContaminationReport, check_contamination
from rlpt.tasks.registry import get_domain


def eval_seeds(n: int, offset: int = 0) -> range:
    """The first n evaluation seeds (after offset): a fixed, shared eval set."""
    if EVAL_SEED_START + offset + n > SEED_END:
        raise ValueError(f"eval set of {n} from offset {offset} exceeds the eval seed range")
    return range(EVAL_SEED_START + offset, EVAL_SEED_START + offset + n)


def train_seeds(n: int, rng: np.random.Generator) -> list[int]:
    """n training seeds drawn from the training range."""
    return [int(s) for s in rng.integers(0, EVAL_SEED_START, size=n)]


def eval_set(domain: str, tier: int, n: int, offset: int = 0) -> list[Task]:
    d = get_domain(domain)
    return [d.generate(seed, tier) for seed in eval_seeds(n, offset)]


def train_set(domain: str, tier: int, n: int, seed: int = 0) -> list[Task]:
    d = get_domain(domain)
    return [d.generate(s, tier) for s in train_seeds(n, np.random.default_rng(seed))]


def split_report(domain: str, tier: int, n_train: int = 200, n_eval: int = 50, n: int = 13) -> ContaminationReport:
    """Contamination of the shipped eval set of (domain, tier) by n_train training tasks."""
    train = train_set(domain, tier, n_train)
    evals = eval_set(domain, tier, n_eval)
    if evals and "images" in evals[0].meta:
        # image tasks share one prompt template across pictures: what an eval item shows is its split key (the
        # image's content as canonical text), compared by exact match only (n-grams of grid specs overlap by chance)
        key = get_domain(domain).split_on
        return check_contamination([t.meta[key] for t in train], [t.meta[key] for t in evals], n=n,
                                   min_evidence=sys.maxsize)
    return check_contamination([render_prompt(t.prompt) for t in train], [render_prompt(t.prompt) for t in evals], n=n)
