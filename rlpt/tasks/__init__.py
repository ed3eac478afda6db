"""Task system: Task/Domain contracts, the domain registry, curricula, splits and contamination checks."""

from rlpt.tasks.base import EVAL_SEED_START, SEED_END, Domain, Task, split_of_prompt, split_of_seed, task_id
from rlpt.tasks.registry import get_domain, list_domains, register, resolve

__all__ = [
    "EVAL_SEED_START",
    "SEED_END",
    "Domain",
    "Task",
    "get_domain",
    "list_domains",
    "register",
    "resolve",
    "split_of_prompt",
    "split_of_seed",
    "task_id",
]
