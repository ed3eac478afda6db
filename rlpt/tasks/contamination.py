"""Contamination check: exact and n-gram overlap between training texts and an eval set."""

import collections
import dataclasses
import re

from rlpt.rewards.guard import normalise

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(normalise(text))


def ngrams(toks: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


@dataclasses.dataclass(frozen=True)
class ContaminationReport:
    """exact: eval items whose normalised text occurs in training; ngram: eval items whose share of
    distinctive n-grams found in training is >= threshold. Items are listed by eval index."""

    n_eval: int
    n_train: int
    exact: tuple[int, ...]
    ngram: tuple[int, ...]
    max_overlap: float

    @property
    def contaminated(self) -> int:
        return len(set(self.exact) | set(self.ngram))


def check_contamination(
    train_texts,
    eval_texts,
    n: int = 13,
    threshold: float = 0.5,
    boilerplate: float = 0.05,
    train_boilerplate: float = 0.01,
    min_evidence: int = 10,
) -> ContaminationReport:
    """Compare eval texts (prompts) with training texts (prompts or SFT data).

    Template text is not evidence of contamination: n-grams in more than `boilerplate` of the eval items,
    or in more than `train_boilerplate` of the training texts (at least 2), are ignored. An eval item is
    flagged when at least `threshold` of its remaining n-grams, and at least `min_evidence` of them, occur
    in training. Short templated prompts that differ from a training prompt in one parameter (`n % 5` vs
    `n % 7`) share all but a few n-grams; with fewer than `min_evidence` matches they are judged by exact
    match only, which is what catches a copied short prompt.
    """
    train_texts, eval_texts = list(train_texts), list(eval_texts)
    train_norm = {normalise(t) for t in train_texts}
    eval_grams = [ngrams(tokens(t), n) for t in eval_texts]
    df = collections.Counter(g for grams in eval_grams for g in grams)
    limit = max(1, int(boilerplate * len(eval_texts)))
    distinctive = [{g for g in grams if df[g] <= limit} for grams in eval_grams]
    wanted = set().union(*distinctive) if distinctive else set()
    train_df: collections.Counter = collections.Counter()
    for text in train_texts:
        train_df.update(g for g in ngrams(tokens(text), n) if g in wanted)
    train_limit = max(2, int(train_boilerplate * len(train_texts)))
    common = {g for g, c in train_df.items() if c > train_limit}
    exact, flagged, worst = [], [], 0.0
    for i, text in enumerate(eval_texts):
        if normalise(text) in train_norm:
            exact.append(i)
        evidence = distinctive[i] - common
        if evidence:
            matched = sum(g in train_df for g in evidence)
            share = matched / len(evidence)
            worst = max(worst, share)
            if share >= threshold and matched >= min_evidence:
                flagged.append(i)
    return ContaminationReport(len(eval_texts), len(train_texts), tuple(exact), tuple(flagged), worst)
