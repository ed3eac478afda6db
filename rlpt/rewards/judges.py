"""Judges (soft verifiers): score (prompt, response) pairs where no hard verifier exists; a registry by name.

Two protocols:
  Scorer: `scorer(prompts: list[str], responses: list[str]) -> np.ndarray` of shape (B,), one finite float per
          pair, higher = better. A trained reward model's scalar head (Bradley-Terry logits) is one.
  Judge:  `judge.score(prompts, responses) -> JudgeScores` plus `judge.counts` (calls, items, failed).
A judge never raises on a bad item: an item it cannot score (an unparsable verdict, a non-finite reward) is a
counted failure with score 0. Wrong shapes and types are caller bugs and raise.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

JUDGE_PREFIX = "judge_"  # a reward component named "judge_<name>" scores with the judge registered as <name>


class Scorer(Protocol):
    def __call__(self, prompts: list[str], responses: list[str]) -> np.ndarray: ...  # (B,) float


@dataclasses.dataclass(frozen=True)
class JudgeScores:
    """B judged pairs. raw: (B,) the judge's own scale (reward logits, parsed grade in [0, 1]), NaN where it
    failed; scores: (B,) in [0, 1] (0 where it failed); failed: (B,) bool; texts: the generative judge's outputs."""

    raw: np.ndarray
    scores: np.ndarray
    failed: np.ndarray
    texts: list[str] | None = None

    def __post_init__(self):
        B = self.raw.shape[0]
        if self.raw.shape != (B,) or self.scores.shape != (B,) or self.failed.shape != (B,):
            raise ValueError(f"JudgeScores shapes differ: raw {self.raw.shape}, scores {self.scores.shape}, "
                             f"failed {self.failed.shape}")


@runtime_checkable
class Judge(Protocol):
    counts: dict[str, int]

    def score(self, prompts: list[str], responses: list[str]) -> JudgeScores: ...


def check_pairs(prompts, responses) -> tuple[list[str], list[str]]:
    """Validated lists of equal length; a non-string prompt or response is a caller bug and raises."""
    prompts, responses = list(prompts), list(responses)
    if len(prompts) != len(responses):
        raise ValueError(f"judge got {len(prompts)} prompts but {len(responses)} responses")
    for what, items in (("prompts", prompts), ("responses", responses)):
        bad = next((i for i, x in enumerate(items) if not isinstance(x, str)), None)
        if bad is not None:
            raise TypeError(f"judge {what}[{bad}] is {type(items[bad]).__name__}, not str")
    return prompts, responses


def new_counts() -> dict[str, int]:
    return {"calls": 0, "items": 0, "failed": 0}


def finish(counts: dict[str, int], raw: np.ndarray, scores: np.ndarray, texts=None) -> JudgeScores:
    """Mark NaN raw values as failures scoring 0, update counters, build the result."""
    failed = ~np.isfinite(raw)
    raw = np.where(failed, np.nan, raw)
    scores = np.where(failed, 0.0, np.clip(scores, 0.0, 1.0))
    counts["calls"] += 1
    counts["items"] += int(raw.shape[0])
    counts["failed"] += int(failed.sum())
    return JudgeScores(raw=raw, scores=scores, failed=failed, texts=texts)


SQUASHES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    # Bradley-Terry logits -> P(better than a reference at 0); a BT model is only defined up to a shift,
    # which is why this reading needs calibration (rlpt.rewards.calibration).
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0))),
    "clip": lambda x: np.clip(x, 0.0, 1.0),  # scorers that already output a probability
}


class RewardModelJudge:
    """A judge over any `Scorer`; raw = the scorer's output, scores = SQUASHES[squash](raw)."""

    def __init__(self, scorer: Scorer, squash: str = "sigmoid", batch_size: int = 256):
        if squash not in SQUASHES:
            raise KeyError(f"RewardModelJudge squash={squash!r}; known: {sorted(SQUASHES)}")
        if batch_size < 1:
            raise ValueError(f"RewardModelJudge batch_size={batch_size}; expected >= 1")
        self.scorer, self.squash, self.batch_size = scorer, squash, batch_size
        self.counts = new_counts()

    def score(self, prompts, responses) -> JudgeScores:
        prompts, responses = check_pairs(prompts, responses)
        parts = []
        for i in range(0, len(prompts), self.batch_size):
            p, r = prompts[i:i + self.batch_size], responses[i:i + self.batch_size]
            out = np.asarray(self.scorer(p, r), np.float64)
            if out.shape != (len(p),):
                raise ValueError(f"scorer returned shape {out.shape} for {len(p)} pairs; expected ({len(p)},)")
            parts.append(out)
        raw = np.concatenate(parts) if parts else np.zeros((0,), np.float64)
        with np.errstate(invalid="ignore"):
            return finish(self.counts, raw, SQUASHES[self.squash](np.nan_to_num(raw)))


JUDGES: dict[str, Judge] = {}


def register_judge(name: str, judge: Judge, *, replace: bool = False) -> Judge:
    """Make `judge` available to reward mixtures as the component `judge_<name>`."""
    if not isinstance(judge, Judge):
        raise TypeError(f"judge {name!r} has no .score(prompts, responses) and .counts")
    if name in JUDGES and not replace:
        raise ValueError(f"judge {name!r} is already registered (pass replace=True to swap it)")
    JUDGES[name] = judge
    return judge


def get_judge(name: str) -> Judge:
    if name not in JUDGES:
        raise KeyError(f"unknown judge {name!r}; registered: {sorted(JUDGES)} (rlpt.rewards.judges.register_judge)")
    return JUDGES[name]


def prompt_text(prompt) -> str:
    """A task prompt as judge input: text as is, chat messages as 'role: content' lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def judge_component(judge_name: str) -> Callable:
    """The reward component `fn(task, response, verdict, cfg) -> float` for one registered judge."""

    def component(task, response, verdict, cfg) -> float:
        text = response if isinstance(response, str) else ""
        return float(get_judge(judge_name).score([prompt_text(task.prompt)], [text]).scores[0])

    component.judge_name = judge_name
    return component
