"""Symbolic answer equivalence: math-verify in a process pool (it times out with SIGALRM), sympy fallback."""

import re

from rlpt.rewards.guard import final_answer
from rlpt.rewards.isolated import run_isolated
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier

# sympy's parser evaluates Python, so the fallback only sees plain maths: no quotes, dunders or brackets.
_SAFE_EXPR = re.compile(r"[0-9a-zA-Z+\-*/^()., =]{1,200}")
_SAFE_NAMES = {"x", "y", "z", "t", "n", "sqrt", "pi", "E", "I", "oo", "exp", "log", "sin", "cos", "tan"}


def _sympy_equal(gold: str, answer: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    if not _SAFE_EXPR.fullmatch(answer) or not set(re.findall(r"[A-Za-z_]+", answer)) <= _SAFE_NAMES:
        return False
    tr = standard_transformations + (implicit_multiplication_application,)
    parts_g, parts_a = gold.split(","), answer.split(",")
    if len(parts_g) != len(parts_a):
        return False
    for g, a in zip(sorted(parts_g), sorted(parts_a)):
        eg = parse_expr(g.replace("^", "**"), transformations=tr, evaluate=True)
        ea = parse_expr(a.replace("^", "**"), transformations=tr, evaluate=True)
        if sympy.simplify(eg - ea) != 0:
            return False
    return True


def _worker_check(gold: str, answer: str, timeout_s: int) -> tuple[bool, str]:
    """Runs in a pool process (main thread, so math-verify's SIGALRM timeouts work)."""
    from math_verify import parse, verify

    g = parse(f"${gold}$", parsing_timeout=timeout_s)
    a = parse(f"${answer}$", parsing_timeout=timeout_s)
    if g and a:
        return bool(verify(g, a, timeout_seconds=timeout_s)), "math_verify"
    try:
        return _sympy_equal(gold, answer), "sympy"
    except (SyntaxError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:
        return False, f"sympy:{type(err).__name__}"


def symbolic_equal(gold: str, answer: str, timeout_s: int = 5) -> tuple[bool, str]:
    """(equal, method) for two maths strings, in a worker process; a check that times out, crashes or
    raises is False, with method 'failed: <reason>'."""
    # The margin covers a cold worker importing sympy and math-verify on a busy machine.
    done, result = run_isolated(_worker_check, gold, answer, timeout_s, timeout_s=timeout_s * 2 + 30)
    return result if done else (False, f"failed: {result}")


@register_verifier("symbolic")
def symbolic(task, response: str) -> Verdict:
    """math-verify equivalence of the final answer with meta['answer'] (0.5 == 1/2, {2, 3} == {3, 2})."""
    got = final_answer(response)
    if not got or len(got) > 500 or "\n" in got:  # math-verify reads the last line: no hidden shotgun
        return Verdict(0.0, False, {"got": None if got is None else got[:200], "method": "precheck"})
    ok, method = symbolic_equal(task.meta["answer"], got)
    return Verdict(1.0 if ok else 0.0, ok, {"got": got[:200], "method": method})
