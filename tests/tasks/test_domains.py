"""Every registered domain and tier: deterministic generation, gold scores 1, wrong/empty/shotgun/
pathological answers score 0 without raising."""

import pytest

from rlpt.rewards.guard import normalise
from rlpt.tasks import EVAL_SEED_START, get_domain, list_domains

SELECTION = ("list/", "rg/", "code/")
SHOTGUNS = ["0123456789", "0 1 2 3 4 5 6 7 8 9", "yes no true false True False A B C D"]
# Native domains at every tier and reasoning-gym domains at their first tier run by default; the other
# reasoning-gym tiers (some generators take tens of ms per item) are marked slow.
CASES = [
    pytest.param(
        name,
        tier,
        id=f"{name}-t{tier}",
        marks=[pytest.mark.slow] if name.startswith("rg/") and tier != get_domain(name).tiers[0] else [],
    )
    for name in list_domains()
    for tier in get_domain(name).tiers
]


def _wrong_answer(domain, task):
    """The gold answer of another task of the same domain that differs from this one."""
    for tier in (task.difficulty, *domain.tiers):
        for seed in range(1, 40):
            other = domain.generate(seed, tier).meta["answer"]
            # Puzzles with several solutions list them; another item's solution may also solve this one.
            valid = task.meta.get("rg_entry", {}).get("metadata", {}).get("valid_answers", ())
            if normalise(other) != normalise(task.meta["answer"]) and other not in valid:
                return other
    raise AssertionError(f"{domain.name}: every nearby task has the same gold answer")


def test_at_least_150_domains():
    names = list_domains()
    assert len(names) >= 150, len(names)
    assert sum(not n.startswith("rg/") for n in names) >= 15


@pytest.mark.parametrize("name,tier", CASES)
def test_domain_tier(name, tier):
    domain = get_domain(name)
    task = domain.generate(0, tier)
    again = domain.generate(0, tier)
    assert (task.id, task.prompt, task.meta["answer"]) == (again.id, again.prompt, again.meta["answer"])
    assert task.domain == name and task.difficulty == tier and task.meta["split"] == "train"
    assert domain.generate(EVAL_SEED_START - 1, tier).meta["split"] == "train"  # the largest training seed
    assert domain.generate(EVAL_SEED_START, tier).meta["split"] == "eval"  # every tier has eval tasks
    gold = task.meta["answer"]
    assert gold.strip(), "empty gold answer"
    # Selection tasks (min, median, search, filters) necessarily show their answer among the inputs; a long
    # computed answer showing up verbatim is a leak.
    if len(gold) >= 12 and not name.startswith(SELECTION):
        assert gold.strip() not in task.prompt, "prompt reveals the gold answer"

    verdict = domain.verify(task, gold)
    assert verdict.score == 1.0 and verdict.passed, verdict.details
    assert domain.verify(task, "").score == 0.0
    assert domain.verify(task, _wrong_answer(domain, task)).score == 0.0
    for shot in SHOTGUNS:
        if normalise(shot) != normalise(gold):
            assert domain.verify(task, shot).score == 0.0, shot
    for patho in (
        "x" * 100_000,
        gold + "\ud800",
        "\udcff" + gold,
        gold + "\x00",
        "\x1b[2J" + gold,
        gold * 10_000,
    ):
        verdict = domain.verify(task, patho)
        if patho == gold * 10_000 and len(patho) <= domain.max_response_chars:
            continue
        assert verdict.score == 0.0 and not verdict.passed, (patho[:40], verdict.details)


@pytest.mark.parametrize("name", ["arith/add", "list/sort", "str/reverse", "count/char"])
def test_quickstart_domains_are_short_at_tier_1(name):
    domain = get_domain(name)
    for seed in range(20):
        task = domain.generate(seed, 1)
        assert len(task.prompt) <= 20 and len(task.meta["answer"]) <= 6 and task.prompt.isascii()
