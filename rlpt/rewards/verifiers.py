"""Registry of answer verifiers: `fn(task, response) -> Verdict`, chosen by name."""

import re
from collections.abc import Callable
from fractions import Fraction

from rlpt.rewards.guard import final_answer, normalise
from rlpt.rewards.verdict import Verdict

VERIFIERS: dict[str, Callable] = {}
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")
_LIST_SPLIT = re.compile(r"[\s,;\[\]]+")


def register_verifier(name: str):
    """Decorator adding `fn(task, response) -> Verdict` to the registry under `name`."""

    def wrap(fn):
        if name in VERIFIERS:
            raise ValueError(f"verifier {name!r} is already registered")
        VERIFIERS[name] = fn
        return fn

    return wrap


def get_verifier(name: str) -> Callable:
    if name not in VERIFIERS:
        raise KeyError(f"unknown verifier {name!r}; known: {sorted(VERIFIERS)}")
    return VERIFIERS[name]


def binary(ok: bool, **details) -> Verdict:
    return Verdict(score=1.0 if ok else 0.0, passed=bool(ok), details=details)


def parse_number(text: str) -> Fraction | None:
    """Exact value of an integer, decimal or a/b literal; None for anything else (e.g. '3 4', '1e5')."""
    text = text.strip()
    # Python refuses int(str) beyond 4300 digits; no gold answer here is anywhere near 1000.
    if len(text) > 1000 or not _NUMBER.fullmatch(text):
        return None
    if "/" in text:
        num, den = text.split("/")
        return None if int(den) == 0 else Fraction(Fraction(num), int(den))
    return Fraction(text)


@register_verifier("exact")
def exact(task, response: str) -> Verdict:
    """The final answer equals meta['answer'] after stripping outer whitespace."""
    got = final_answer(response)
    return binary(got is not None and got == task.meta["answer"], got=_clip(got))


@register_verifier("normalised")
def normalised(task, response: str) -> Verdict:
    """Case- and whitespace-insensitive equality with meta['answer']."""
    got = final_answer(response)
    return binary(got is not None and normalise(got) == normalise(task.meta["answer"]), got=_clip(got))


@register_verifier("numeric")
def numeric(task, response: str) -> Verdict:
    """Exact rational equality of one number literal with meta['answer'] ('3.50' == '3.5' == '7/2')."""
    got = final_answer(response)
    value = None if got is None else parse_number(got)
    return binary(value is not None and value == parse_number(task.meta["answer"]), got=_clip(got))


@register_verifier("token_list")
def token_list(task, response: str) -> Verdict:
    """Same token sequence as meta['answer'], tokens split on whitespace, commas, semicolons, brackets."""
    got = final_answer(response)
    if got is None:
        return binary(False, got=None)
    want = [t for t in _LIST_SPLIT.split(task.meta["answer"]) if t]
    have = [t for t in _LIST_SPLIT.split(got) if t]
    return binary(have == want, got=_clip(got))


def _clip(text: str | None, n: int = 200) -> str | None:
    return text if text is None or len(text) <= n else text[:n] + "..."
