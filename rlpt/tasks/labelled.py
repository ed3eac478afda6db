"""Labelled sets for judge calibration, made offline: procedural tasks with their gold answer and corrupted
answers, each labelled by the domain's hard verifier (so a corruption that happens to be right is labelled 1)."""
from __future__ import annotations

import random

import numpy as np

from rlpt.rewards.judges import prompt_text
from rlpt.rewards.recalibration import LabelledSet
from rlpt.tasks.registry import get_domain

_INT = "-0123456789"


def _corrupt_int(text: str, rng: random.Random) -> str:
    n = int(text)
    digits = str(abs(n))
    kind = rng.choice(["near", "tens", "swap", "last", "scale"] if len(digits) > 1 else ["near", "tens", "last"])
    if kind == "near":
        return str(n + rng.choice([-2, -1, 1, 2]))
    if kind == "tens":
        return str(n + rng.choice([-10, 10]))
    if kind == "swap":
        i = rng.randrange(len(digits) - 1)
        d = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:]
        return ("-" if n < 0 else "") + d
    if kind == "last":
        return ("-" if n < 0 else "") + digits[:-1] + rng.choice([c for c in "0123456789" if c != digits[-1]])
    return str(n * 10 + rng.randrange(10))


def _corrupt_tokens(tokens: list[str], rng: random.Random) -> str:
    tokens = list(tokens)
    kind = rng.choice(["swap", "drop", "repeat", "bump"])
    i = rng.randrange(len(tokens))
    if kind == "swap" and len(tokens) > 1:
        i = rng.randrange(len(tokens) - 1)
        tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    elif kind == "drop" and len(tokens) > 1:
        del tokens[i]
    elif kind == "repeat":
        tokens.insert(i, tokens[i])
    else:
        t = tokens[i]
        tokens[i] = str(int(t) + rng.choice([-1, 1])) if t.lstrip("-").isdigit() else t[::-1] + "x"
    return " ".join(tokens)


def _corrupt_chars(text: str, rng: random.Random) -> str:
    kind = rng.choice(["swap", "drop", "repeat", "change", "reverse"])
    i = rng.randrange(len(text))
    if kind == "swap" and len(text) > 1:
        i = rng.randrange(len(text) - 1)
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    if kind == "drop" and len(text) > 1:
        return text[:i] + text[i + 1:]
    if kind == "reverse" and len(text) > 1:
        return text[::-1]
    if kind == "change":
        return text[:i] + rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != text[i]]) + text[i + 1:]
    return text[:i] + text[i] + text[i:]


def corrupt(answer: str, rng: random.Random) -> str:
    """A plausible wrong answer: an off-by-a-little integer, a perturbed token list or a perturbed string."""
    text = answer.strip()
    if not text:
        return "0"
    if text.lstrip("-").isdigit() and set(text) <= set(_INT):
        return _corrupt_int(text, rng)
    if " " in text:
        return _corrupt_tokens(text.split(), rng)
    return _corrupt_chars(text, rng)


def labelled_from_tasks(tasks, corruptions: int, seed: int) -> tuple[LabelledSet, list[str]]:
    """The gold answer and `corruptions` distinct corrupted answers per task (a LabelledSet), and each item's
    domain. Labels are the verifier's `passed`, never how the answer was made."""
    rng = random.Random(seed)
    prompts, responses, labels, domains = [], [], [], []
    for task in tasks:
        gold = task.meta["answer"]
        wrong = []
        for _ in range(20 * corruptions):
            if len(wrong) == corruptions:
                break
            c = corrupt(gold, rng)
            if c != gold and c not in wrong:
                wrong.append(c)
        domain = get_domain(task.domain)
        for response in [gold, *wrong]:
            prompts.append(prompt_text(task.prompt))
            responses.append(response)
            labels.append(int(domain.verify(task, response).passed))
            domains.append(task.domain)
    return LabelledSet(prompts, responses, np.asarray(labels, np.int64)), domains
