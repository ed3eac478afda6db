"""reasoning-gym generators mended: exact, bounded re-implementations of item generators whose cost has no
upper bound, generators made independent of the hash seed, filters for degenerate items that would make a
tier easier than the one below it, answer formats for scorers that read an answer out of any text, and strict
scorers in place of ones that pay full marks for a degenerate answer.

The bounded subclass yields the very items of the library's class (same random draws, same dict) but stops work
whose result the library throws away anyway; tests/tasks/test_generation.py compares them item by item. The
seeded ones draw from a set in sorted order where the library draws in hash order (so its item for a seed
changed with PYTHONHASHSEED from one process to the next): the same distribution, now a function of the seed
alone (tests/tasks/test_hash_seed.py).
"""

import re
from fractions import Fraction
from random import Random

import sympy
from reasoning_gym.algebra.polynomial_multiplication import PolynomialMultiplicationDataset
from reasoning_gym.algorithmic.isomorphic_strings import IsomorphicStringsDataset
from reasoning_gym.algorithmic.ransom_note import RansomNoteDataset
from reasoning_gym.cognition.number_sequences import (
    DATASET_NAME,
    NumberSequenceDataset,
    Operation,
    PatternGenerator,
    PatternRule,
)

# PatternGenerator.is_interesting rejects any sequence holding a term above this in magnitude.
_NS_MAX_VALUE = 1000


class BoundedNumberSequenceDataset(NumberSequenceDataset):
    """`number_sequence` without its runaway terms.

    The library computes all terms of a candidate sequence, then rejects it if a term exceeds 1000. A rule
    with a few squarings grows terms doubly exponentially: at level 3 one item took 54 s (a 2**16-digit
    integer squared again and again). Terms are computed without any random draw, so stopping at the first
    term over 1000 rejects the same candidates after the same draws and returns the same item.
    """

    def __getitem__(self, idx: int) -> dict:
        rng = Random(self.seed + idx)
        complexity = rng.randint(1, self.config.max_complexity)
        generator = PatternGenerator(rng, complexity)
        for _ in range(10):  # the library's max_attempts
            rule = generator.generate_rule()
            num_terms = rng.randint(self.config.min_terms, self.config.max_terms)
            sequence = [rng.randint(-10, 10)]
            try:
                for i in range(num_terms):
                    sequence.append(rule.apply(sequence, i))
                    if abs(sequence[-1]) > _NS_MAX_VALUE:
                        break  # not interesting, whatever the remaining terms
                else:
                    if generator.is_interesting(sequence):
                        break
            except (OverflowError, ZeroDivisionError):
                continue
        else:
            rule = PatternRule([Operation.ADD], [2])
            sequence = [i * 2 for i in range(num_terms + 1)]
        return {
            "question": ", ".join(map(str, sequence[:-1])) + ", ?",
            "answer": str(sequence[-1]),
            "metadata": {
                "source_dataset": DATASET_NAME,
                "source_index": idx,
                "rule": rule.to_string(),
                "complexity": complexity,
                "sequence": sequence,
                "difficulty": {
                    "max_complexity": self.config.max_complexity,
                    "terms": (self.config.min_terms, self.config.max_terms),
                },
            },
        }


def settled_sequence(item: dict) -> str | None:
    """Why a number_sequence item is degenerate, or None. Longer sequences (higher levels) more often settle
    on a fixed point such as 0 or -1 (repeated halving), or fall back to the library's 0, 2, 4, ...: then
    the answer is the last term repeated (the calibration's answer-blind baseline passed 5% of tier 1 but
    20-30% of tiers 2-3). Without these items the most frequent answer covers ~3% of items at every level."""
    seq = item["metadata"]["sequence"]
    if len(set(seq[-3:])) == 1:
        return "the sequence has settled: its last three terms are equal"
    if seq == [2 * i for i in range(len(seq))]:
        return "the library's fallback sequence 0, 2, 4, ..."
    return None


class SortedLetters(frozenset):
    """A frozenset of letters that iterates in sorted order, also after `-` (the generators below turn it into
    a list for rng.choice)."""

    def __iter__(self):
        return iter(sorted(frozenset.__iter__(self)))

    def __sub__(self, other):
        return SortedLetters(frozenset.__sub__(self, other))


class SeededIsomorphicStringsDataset(IsomorphicStringsDataset):
    """`isomorphic_strings` drawing letters from a sorted alphabet (the library's is a set)."""

    def __init__(self, config):
        super().__init__(config)
        self.letters = SortedLetters(self.letters)


class SeededRansomNoteDataset(RansomNoteDataset):
    """`ransom_note` drawing letters from a sorted alphabet (the library's is a set)."""

    def __init__(self, config):
        super().__init__(config)
        self.letters = SortedLetters(self.letters)


class SeededPolynomialMultiplicationDataset(PolynomialMultiplicationDataset):
    """`polynomial_multiplication` choosing among monomials in sympy's canonical order (the library lists
    `itermonomials`' set)."""

    def _get_monomials(self, rng: Random):
        return sorted(super()._get_monomials(rng), key=sympy.default_sort_key)


# reasoning-gym dataset name -> the class used in its place.
REPLACEMENTS = {DATASET_NAME: BoundedNumberSequenceDataset, "isomorphic_strings": SeededIsomorphicStringsDataset,
                "ransom_note": SeededRansomNoteDataset,
                "polynomial_multiplication": SeededPolynomialMultiplicationDataset}
# reasoning-gym dataset name -> item -> why the item is rejected (re-drawn), or None to keep it.
ITEM_FILTERS = {DATASET_NAME: settled_sequence}
# reasoning-gym dataset name -> the pattern a whole answer must match before the library's scorer reads it.
# quantum_lock's scorer presses every A, B or C found anywhere in the text: '<call></call>' pressed C A C A,
# which reached the target of a level-9 item in as many presses as the gold and scored 1.0.
ANSWER_FORMATS = {"quantum_lock": re.compile(r"[A-Ca-c](?:\s*(?:→|->|,)?\s*[A-Ca-c])*")}

_PROBABILITY = re.compile(r"\s*-?\d{1,30}(?:\.\d{1,30})?(?:[eE][-+]?\d{1,3})?(?:\s*/\s*\d{1,30})?\s*")


def exact_probability(answer: str, entry: dict) -> float:
    """coin_flip's score without its free passes. The library pays match_len / min(len) for a common digit
    prefix, so '0' scored 1.0 on every item (all its probabilities are below 1), and its absolute tolerance
    of 1e-4 alone also passes '0' for the tiny probabilities of many flips. 1.0 within 1e-4 and within 1% of
    the oracle, else 0. Plain decimals and fractions only: Fraction('1e99999999') would not return."""
    text = answer.replace(",", "")
    if not _PROBABILITY.fullmatch(text):
        return 0.0
    try:
        got, want = Fraction(text.replace(" ", "")), Fraction(entry["answer"].replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return 0.0
    error = abs(got - want)
    return 1.0 if error <= Fraction(1, 10_000) and error <= abs(want) / 100 else 0.0


# reasoning-gym dataset name -> score(answer, entry) used instead of the library's scorer.
STRICT_SCORES = {"coin_flip": exact_probability}
