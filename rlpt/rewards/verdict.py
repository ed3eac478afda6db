"""The result every verifier returns."""
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Verdict:
    """score in [0, 1]; passed is the strict pass/fail; details explains (and flags hacking attempts)."""

    score: float
    passed: bool
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"Verdict.score must be in [0, 1], got {self.score}")
