"""Eval suites: a named list of Tasks with one verifier, loaded offline; the registry of suites by name."""
import dataclasses
from collections.abc import Callable

from rlpt.rewards.guard import reject_reason
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task


@dataclasses.dataclass(frozen=True)
class LoadArgs:
    """What a loader may read: `limit` tasks at most (0: all), `per_domain` for procedural suites (0: the
    group's eval_size), `seed` for suites that generate items."""

    limit: int = 0
    per_domain: int = 0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Suite:
    """`load(args) -> list[Task]` (each with meta['answer'], the gold response) and `check(task, text)`."""

    name: str
    description: str
    load: Callable[[LoadArgs], list[Task]]
    check: Callable[[Task, str], Verdict]
    max_new_tokens: int
    source: str

    def verify(self, task: Task, response: str) -> Verdict:
        """Score a response; pathological text (control characters, huge) scores 0 before the checker."""
        reason = reject_reason(response)
        if reason is not None:
            return Verdict(0.0, False, {"rejected": reason})
        return self.check(task, response)


SUITES: dict[str, Callable[[], Suite]] = {}


def register_suite(name: str):
    """Decorator registering a zero-argument factory `() -> Suite` under `name`."""

    def wrap(fn):
        if name in SUITES:
            raise ValueError(f"suite {name!r} is already registered")
        SUITES[name] = fn
        return fn

    return wrap


def take(items: list, limit: int) -> list:
    """The first `limit` items (all when limit <= 0): suites keep their shipped order, so a limit is a prefix."""
    return items if limit <= 0 else items[:limit]
