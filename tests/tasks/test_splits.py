"""Splits and contamination: shipped train/eval sets do not overlap; a planted duplicate is caught."""

import pytest

from rlpt.tasks import EVAL_SEED_START, get_domain, list_domains, split_of_prompt
from rlpt.tasks.contamination import check_contamination
from rlpt.tasks.splits import eval_set, split_report, train_set

NATIVE = [n for n in list_domains() if not n.startswith("rg/")]
SAMPLED_RG = [
    "rg/basic_arithmetic",
    "rg/letter_counting",
    "rg/spell_backward",
    "rg/number_sorting",
    "rg/coin_flip",
    "rg/family_relationships",
    "rg/word_sorting",
    "rg/caesar_cipher",
]


@pytest.mark.parametrize("name", NATIVE + SAMPLED_RG)
def test_shipped_split_has_no_overlap(name):
    tier = get_domain(name).tiers[0]  # the smallest task space is where collisions would show
    n_train, n_eval = (20, 5) if name.startswith(("docqa/", "shell/", "logic/")) else (150, 20)
    report = split_report(name, tier, n_train=n_train, n_eval=n_eval)
    if name == "agent/repo":
        # A repository's prompt names its modules and functions (a function of the repository: the split by
        # prompt keeps every repository on one side). Repositories drawn from one library of 20 functions
        # share most of those names, so the n-gram check sees templates; held-out means no identical one.
        assert report.exact == (), report
        return
    assert report.exact == () and report.ngram == (), report


def test_eval_tasks_belong_to_eval_split():
    for task in eval_set("arith/add", 1, 10):
        assert task.meta["split"] == "eval" and split_of_prompt(task.prompt) == "eval"
        assert int(task.id.rsplit(":s", 1)[1]) >= EVAL_SEED_START


def test_planted_duplicates_are_caught():
    evals = eval_set("docqa/needle", 2, 8)
    train = [t.prompt for t in train_set("docqa/needle", 2, 30)]
    clean = check_contamination(train, [t.prompt for t in evals])
    assert clean.contaminated == 0
    exact = check_contamination(train + [evals[3].prompt], [t.prompt for t in evals])
    assert exact.exact == (3,)
    doctored = "Preface added by a scraper.\n" + evals[5].prompt.replace("Question:", "Q:")
    near = check_contamination(train + [doctored], [t.prompt for t in evals])
    assert near.exact == () and near.ngram == (5,) and near.max_overlap > 0.9


def test_short_prompts_use_exact_match():
    report = check_contamination(["12+7=", "3+4="], ["3+4=", "5+5="])
    assert report.exact == (0,) and report.ngram == ()


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in list_domains() if n.startswith("rg/")])
def test_reasoning_gym_splits_have_no_overlap(name):
    domain = get_domain(name)
    for tier in domain.tiers:
        report = split_report(name, tier, n_train=100, n_eval=10)
        assert report.exact == () and report.ngram == (), (tier, report)


def test_reasoning_gym_item_indices_are_disjoint_and_below_2_32():
    from rlpt.tasks.base import MAX_ATTEMPTS, SEED_END
    from rlpt.tasks.rgym import DATASET_SEED, item_index

    train_hi = max(item_index(s, MAX_ATTEMPTS - 1) for s in (0, 15_999_999, EVAL_SEED_START - 1))
    eval_lo = min(item_index(s, 0) for s in (EVAL_SEED_START, SEED_END - 1))
    assert train_hi < eval_lo
    assert DATASET_SEED + max(item_index(SEED_END - 1, MAX_ATTEMPTS - 1), train_hi) < 2**32
    domain = get_domain("rg/spell_backward")
    assert domain.generate(EVAL_SEED_START - 1, 1).meta["split"] == "train"
    assert domain.generate(SEED_END - 1, 1).meta["split"] == "eval"
