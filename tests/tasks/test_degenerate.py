"""Every registered domain and tier: degenerate answers (empty, whitespace, empty JSON, the prompt echoed,
the requested answer format with no content) score 0, hostile text returns a Verdict without raising, and the
gold answer of the same task still scores 1.

One test walks all domains and tiers and reports every failure at once: ~800 tasks x ~25 responses took
~10 s on 2 cores, most of them rejected before any parsing.
"""

import json
import random
import re
from fractions import Fraction

from rlpt.rewards.verdict import Verdict
from rlpt.tasks import get_domain, list_domains

SEED = 0
EMPTY = ["", " ", "\n\t \n", "[]", "{}", '""', "null", "[[]]", "[{}]", "None", "''"]
# The answer formats prompts ask for, without content.
FORMATS = [
    "<answer></answer>",
    "<answer> </answer>",
    "<answer>\n</answer>",
    "<answer>...</answer>",
    "```\n```",
    "```python\n```",
    "```json\n```",
    "```bash\n```",
    "<call></call>",
    "<call>{}</call>\n<answer></answer>",
    '<call>{"tool": NAME, "args": {...}}</call>',
]
_TAG = re.compile(r"<([A-Za-z_][\w-]{0,30})>")
_RAW = bytes(random.Random(SEED).randrange(256) for _ in range(400))
# Text that must come back as a Verdict (any score): bytes decoded leniently, huge text, lone surrogates.
HOSTILE = [
    _RAW.decode("utf-8", "replace"),
    _RAW.decode("utf-8", "surrogateescape"),
    _RAW.decode("latin-1"),
    "x" * 100_000,
    "7" * 100_000,
    "\ud800",
    "<answer>\ud800</answer>",
]


def _blanked(value):
    """The gold's JSON structure with every value emptied: strings '', numbers 0, booleans false."""
    if isinstance(value, dict):
        return {k: _blanked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blanked(v) for v in value]
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return 0
    if isinstance(value, str):
        return ""
    return value


def degenerate_responses(task) -> list[str]:
    """Answers that carry no content for `task`: each must score 0."""
    out = [*EMPTY, *FORMATS, task.prompt, task.prompt.strip()]
    out += [f"<{tag}></{tag}>" for tag in dict.fromkeys(_TAG.findall(task.prompt))]
    gold = task.meta["answer"]
    try:
        structure = json.loads(gold)
    except (json.JSONDecodeError, RecursionError):
        structure = None
    if isinstance(structure, dict | list) and structure:
        out.append(json.dumps(_blanked(structure)))
    return [r for r in dict.fromkeys(out) if r.strip() != gold.strip()]


def test_degenerate_answers_score_zero_in_every_domain_and_tier():
    failures, checked = [], 0
    for name in list_domains():
        domain = get_domain(name)
        for tier in domain.tiers:
            task = domain.generate(SEED, tier)
            where = f"{name} t{tier}"
            for response in degenerate_responses(task):
                verdict = domain.verify(task, response)
                checked += 1
                if verdict.score != 0.0 or verdict.passed:
                    failures.append(f"{where}: {response[:40]!r} scored {verdict.score} {verdict.details}")
                elif "check raised" in str(verdict.details.get("error", "")):  # Domain.verify's safety net
                    failures.append(f"{where}: {response[:40]!r} made the check raise: {verdict.details['error']}")
            for response in HOSTILE:
                try:
                    verdict = domain.verify(task, response)
                except Exception as err:  # noqa: BLE001  (collect every domain's failure, then report)
                    failures.append(f"{where}: {response[:20]!r} raised {type(err).__name__}: {err}")
                    continue
                if not isinstance(verdict, Verdict) or verdict.score != 0.0:
                    failures.append(f"{where}: hostile {response[:20]!r} gave {verdict!r:.200}")
            gold = domain.verify(task, task.meta["answer"])
            if gold.score != 1.0 or not gold.passed:
                failures.append(f"{where}: the gold answer scored {gold.score} {gold.details}")
    assert not failures, f"{len(failures)} of {checked} checks failed:\n" + "\n".join(failures[:50])
    assert checked > 10_000


def test_extract_json_list_tasks_need_every_record():
    """`[]` passed every list task of extract/json: zip(want, []) is empty, so all fields 'matched'."""
    domain = get_domain("extract/json")
    for tier in domain.tiers:
        task = domain.generate(SEED, tier)
        gold = json.loads(task.meta["answer"])
        assert domain.verify(task, task.meta["answer"]).score == 1.0
        if not isinstance(gold, list):
            continue
        for partial in ([], gold[:1], gold[:-1], gold + gold[:1]):
            verdict = domain.verify(task, json.dumps(partial))
            assert verdict.score == 0.0 and not verdict.passed, (tier, partial, verdict.details)
            if partial:
                assert 0.0 < verdict.details["process"] < 1.0, verdict.details


def test_quantum_lock_needs_a_button_sequence():
    """Its scorer pressed every A, B or C anywhere in the text: '<call></call>' pressed C A C A."""
    domain = get_domain("rg/quantum_lock")
    for tier in domain.tiers:
        task = domain.generate(SEED, tier)
        gold = task.meta["answer"]
        for form in (gold, gold.replace(" → ", " -> "), gold.replace(" → ", ", "), gold.replace(" → ", " ")):
            assert domain.verify(task, form).score == 1.0, form
        for prose in ("<call></call>", f"I pressed {gold} and then sat back", "ABACAB?"):
            assert domain.verify(task, prose).score == 0.0, prose


def test_coin_flip_pays_no_prefix_credit():
    """Its scorer paid 1.0 for any prefix of the oracle's digits: '0' passed every item."""
    domain = get_domain("rg/coin_flip")
    for tier in domain.tiers:
        for seed in range(5):
            task = domain.generate(seed, tier)
            gold = Fraction(task.meta["answer"])
            for form in (task.meta["answer"], f"{gold.numerator}/{gold.denominator}"):
                assert domain.verify(task, form).score == 1.0, form
            assert 0 < gold < 1
            # Not numbers at all, or an exponent too big to evaluate: never equal to the gold.
            for wrong in ("0", "0.", "1", "1e99999999", "(1/2)**3", "0.5 or 0.375"):
                assert domain.verify(task, wrong).score == 0.0, (wrong, task.meta["answer"])
