"""Reward components by name: `fn(task, response, verdict, cfg) -> float`, mixed by rlpt.rewards.mixture.

A name `judge_<name>` resolves to the judge registered as <name> (rlpt.rewards.judges.register_judge)."""

from collections.abc import Callable

from rlpt.rewards.guard import final_answer, reject_reason
from rlpt.rewards.judges import JUDGE_PREFIX, JUDGES, judge_component

COMPONENTS: dict[str, Callable] = {}


def register_component(name: str):
    def wrap(fn):
        if name in COMPONENTS:
            raise ValueError(f"reward component {name!r} is already registered")
        COMPONENTS[name] = fn
        return fn

    return wrap


def get_component(name: str) -> Callable:
    """The component registered as `name`, or the judge component for `judge_<name>`."""

    if name in COMPONENTS:
        return COMPONENTS[name]
    if name.startswith(JUDGE_PREFIX):
        judge = name[len(JUDGE_PREFIX):]
        if judge not in JUDGES:
            raise KeyError(f"reward component {name!r}: no judge {judge!r} registered; registered: {sorted(JUDGES)}")
        return judge_component(judge)
    raise KeyError(f"unknown component {name!r}; known: {sorted(COMPONENTS)} or judge_<name> for judges "
                   f"{sorted(JUDGES)}")


@register_component("correctness")
def correctness(task, response, verdict, cfg) -> float:
    """The verifier's score in [0, 1] (hidden tests, exact or symbolic match)."""
    return float(verdict.score)


@register_component("format")
def format_ok(task, response, verdict, cfg) -> float:
    """1 when the response is clean text that commits to exactly one non-empty answer, else 0."""
    if not isinstance(response, str) or reject_reason(response) is not None:
        return 0.0
    got = final_answer(response)
    return 1.0 if got else 0.0


@register_component("length_penalty")
def length_penalty(task, response, verdict, cfg) -> float:
    """0 up to cfg.target_chars, falling linearly to -1 at cfg.max_chars (and below -1 never)."""
    if not 0 <= cfg.target_chars < cfg.max_chars:
        raise ValueError(f"length_penalty needs 0 <= target_chars < max_chars, got {cfg.target_chars}, {cfg.max_chars}")
    n = len(response) if isinstance(response, str) else cfg.max_chars
    return -min(1.0, max(0, n - cfg.target_chars) / (cfg.max_chars - cfg.target_chars))


@register_component("process")
def process(task, response, verdict, cfg) -> float:
    """Process quality from the verifier: share of hidden tests run before failing, of valid tool calls,
    of correct JSON fields; equal to the outcome for single-step domains."""
    if "process" not in verdict.details:
        raise KeyError(
            f"verdict for task {getattr(task, 'id', task)!r} has no 'process' score; verify through Domain.verify"
        )
    return float(verdict.details["process"])
