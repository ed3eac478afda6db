"""Task and Domain contracts, stable ids, seeded generation and the content-hash train/eval split."""

import dataclasses
import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any

from rlpt.rewards.guard import MAX_RESPONSE_CHARS, normalise, reject_reason
from rlpt.rewards.verdict import Verdict

# Seeds below EVAL_SEED_START are training seeds; [EVAL_SEED_START, SEED_END) are evaluation seeds.
EVAL_SEED_START = 1 << 30
SEED_END = (1 << 30) + (1 << 24)
# A task belongs to the eval split iff the hash bucket of its normalised prompt is < EVAL_BUCKETS (of 100).
# Generation rejects tasks from the other split, so train and eval prompts can never coincide, even in
# domains with only a few hundred distinct prompts.
EVAL_BUCKETS = 10
MAX_ATTEMPTS = 200
SINGLE_TURN_ENV = "rlpt/SingleTurn-v0"
_LOG = logging.getLogger(__name__)


def render_prompt(prompt: Any) -> str:
    """Task prompt as text: a string as is, chat messages as 'role: content' blocks."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        return "\n\n".join(f"{m['role']}: {m['content']}" for m in prompt)
    raise TypeError(f"task prompt must be str or a list of chat messages, got {type(prompt).__name__}")


@dataclasses.dataclass(frozen=True)
class Task:
    """One problem. `prompt` is all the policy sees; `meta` holds the gold `answer` and hidden checks."""

    domain: str
    id: str
    prompt: str
    difficulty: int
    meta: dict[str, Any]
    env_id: str = SINGLE_TURN_ENV


def split_of_seed(seed: int) -> str:
    """'train' or 'eval' for a generation seed; raises on a seed outside [0, SEED_END)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_END:
        raise ValueError(f"seed must be an int in [0, {SEED_END}), got {seed!r}")
    return "train" if seed < EVAL_SEED_START else "eval"


def split_of_prompt(prompt: str) -> str:
    """The split a prompt belongs to, from a stable hash of its normalised text."""
    digest = hashlib.blake2b(normalise(prompt).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return "eval" if int.from_bytes(digest, "little") % 100 < EVAL_BUCKETS else "train"


def task_id(domain: str, tier: int, seed: int) -> str:
    return f"{domain}:t{tier}:s{seed}"


Maker = Callable[[random.Random, int], tuple[str, dict[str, Any]]]
Checker = Callable[[Task, str], Verdict]


@dataclasses.dataclass(frozen=True)
class Domain:
    """A task family: `make(rng, tier) -> (prompt, meta)` and `check(task, response) -> Verdict`.

    `meta` must contain 'answer', the exact text a perfect policy outputs (scores 1.0); a maker may
    return (None, {}) to reject a draw. `rng(seed, tier, attempt)` is the maker's randomness for one
    attempt; adapters whose items are indexed (reasoning-gym) override it to return an item index.
    """

    name: str
    tiers: tuple[int, ...]
    make: Maker
    check: Checker
    source: str
    verifier: str
    env_id: str = SINGLE_TURN_ENV
    max_response_chars: int = MAX_RESPONSE_CHARS
    description: str = ""
    # What the split hash reads: the prompt, or a meta key (tasks sharing a solution share a split).
    split_on: str = "prompt"

    def rng(self, seed: int, tier: int, attempt: int) -> random.Random:
        # str seeds hash with sha512 inside `random`, so streams are stable across processes and runs.
        return random.Random(f"{self.name}|{tier}|{seed}|{attempt}")

    def generate(self, seed: int, tier: int) -> Task:
        """The task for (seed, tier): deterministic, and in the split that `seed` belongs to."""
        if tier not in self.tiers:
            raise ValueError(f"domain {self.name!r} has tiers {self.tiers}, got tier {tier!r}")
        split = split_of_seed(seed)
        rejected = 0
        for attempt in range(MAX_ATTEMPTS):
            prompt, meta = self.make(self.rng(seed, tier, attempt), tier)
            if prompt is None:  # the maker rejected this draw (e.g. a third-party item whose gold fails)
                rejected += 1
                continue
            if "answer" not in meta:
                raise KeyError(f"domain {self.name!r} made a task without meta['answer']")
            if split_of_prompt(prompt if self.split_on == "prompt" else meta[self.split_on]) == split:
                meta = {**meta, "split": split, "tier": tier}
                return Task(self.name, task_id(self.name, tier, seed), prompt, tier, meta, self.env_id)
        raise RuntimeError(
            f"domain {self.name!r} tier {tier}: no {split} task in {MAX_ATTEMPTS} attempts from seed {seed} "
            f"({rejected} draws rejected by the maker, the rest fell in the other split)"
        )

    def verify(self, task: Task, response: str) -> Verdict:
        """Score a response; pathological text scores 0 without reaching the checker. Never raises for
        what the response holds: a check that crashes, times out or raises scores 0 with the reason in
        details."""
        if task.domain != self.name:
            raise ValueError(f"task {task.id!r} belongs to {task.domain!r}, not {self.name!r}")
        reason = reject_reason(response, self.max_response_chars)
        if reason is not None:
            return Verdict(0.0, False, {"rejected": reason, "process": 0.0})
        try:
            verdict = self.check(task, response)
        except Exception as err:
            # Policy text must never take a rollout down: a checker that raises is a failed answer, with
            # the error in details (and logged) so the checker gets fixed rather than the failure hidden.
            error = f"check raised {type(err).__name__}: {err}"[:500]
            _LOG.warning("%s on task %s: %s", self.name, task.id, error)
            return Verdict(0.0, False, {"error": error, "process": 0.0})
        if "process" in verdict.details:
            return verdict
        # Single-step domains have no intermediate steps to grade: process quality is the outcome.
        return Verdict(verdict.score, verdict.passed, {**verdict.details, "process": verdict.score})
