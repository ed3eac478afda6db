"""Code domains: synthesis against hidden tests, repair of a planted bug (both run in envs.sandbox), and
tracing (predict a return value)."""

import ast
import re

from rlpt.envs.sandbox.pyparse import parse as parse_python
from rlpt.rewards.guard import final_answer
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier
from rlpt.tasks.native.code_problems import FAMILIES, run_reference
from rlpt.tasks.native.common import domain

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
SANDBOX_TIMEOUT_S = 10.0


def _problem(rng, t):
    """(problem, reference outputs, family name): the family goes into meta["family"] for per-family reports."""
    family = rng.choice(FAMILIES[t])
    problem = family(rng)
    return problem, run_reference(problem.source, problem.entry, problem.inputs), family.__name__


def _test_source(entry, inputs, outputs) -> str:
    lines = ["def check(candidate):"]
    lines += [f"    assert candidate({', '.join(map(repr, args))}) == {out!r}" for args, out in zip(inputs, outputs)]
    return "\n".join(lines) + "\n"


def _call(entry, args):
    return f"{entry}({', '.join(map(repr, args))})"


def _synth(rng, t):
    problem, outputs, family = _problem(rng, t)
    prompt = (
        f"Write a Python function {problem.spec}\nExample: {_call(problem.entry, problem.inputs[0])} "
        f"== {outputs[0]!r}\nReply with the function definition only."
    )
    meta = {
        "answer": problem.source,
        "entry_point": problem.entry,
        "test": _test_source(problem.entry, problem.inputs, outputs),
        "family": family,
    }
    return prompt, meta


def _buggy(problem, outputs, rng):
    """A planted-bug variant of the source and its first failing call, or (None, None)."""
    for old, new in rng.sample(problem.bugs, len(problem.bugs)):
        source = problem.source.replace(old, new, 1)
        for args, want in zip(problem.inputs, outputs):
            try:
                got = run_reference(source, problem.entry, [args])[0]
            except Exception as err:  # the planted bug may crash: that is the failure we show
                return source, f"{_call(problem.entry, args)} raises {type(err).__name__}, expected {want!r}"
            if got != want:
                return source, f"{_call(problem.entry, args)} returns {got!r}, expected {want!r}"
    return None, None


def _repair(rng, t):
    problem, outputs, family = _problem(rng, t)
    source, failure = _buggy(problem, outputs, rng)
    if source is None:  # no planted bug changes an output on these inputs: draw again
        return None, {}
    prompt = (
        f"This Python function should implement {problem.spec}\nIt is buggy: {failure}.\n"
        f"```python\n{source}```\nReply with the corrected function definition only."
    )
    meta = {
        "answer": problem.source,
        "entry_point": problem.entry,
        "test": _test_source(problem.entry, problem.inputs, outputs),
        "family": family,
    }
    return prompt, meta


def _trace(rng, t):
    problem, outputs, family = _problem(rng, t)
    i = rng.randrange(len(problem.inputs))
    prompt = (
        f"```python\n{problem.source}```\nWhat does {_call(problem.entry, problem.inputs[i])} return? "
        "Answer with a Python literal."
    )
    return prompt, {"answer": repr(outputs[i]), "source": problem.source, "family": family}


def extract_program(response: str) -> str | None:
    """The code of the single fenced block, or the whole response when it has no fence."""
    blocks = _FENCE.findall(response)
    if len(blocks) > 1:
        return None
    if blocks:
        return blocks[0]
    return None if "```" in response else response


def static_reason(program: str | None, entry: str) -> str | None:
    """Why a program cannot pass before running it: no code, a syntax error, or no top-level `entry`."""
    if program is None:
        return "no single program in the response"
    try:
        tree = parse_python(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        return f"does not parse: {type(err).__name__}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        return f"defines no top-level function {entry!r}"
    return None


@register_verifier("python_tests")
def python_tests(task, response: str) -> Verdict:
    """Layered: static check (parse, entry point), then the hidden tests in the sandbox."""
    program = extract_program(response)
    entry = task.meta["entry_point"]
    reason = static_reason(program, entry)
    if reason is not None:
        return Verdict(0.0, False, {"static": reason, "process": 0.0})
    from rlpt.envs.sandbox import check_python  # the sandbox pulls in OS-level machinery: import on use

    verdict = check_python(program, task.meta["test"], entry, timeout_s=SANDBOX_TIMEOUT_S)
    expected = verdict.details.get("tests_expected") or 0
    process = verdict.details.get("tests_run", 0) / expected if expected and not verdict.passed else verdict.score
    return Verdict(verdict.score, verdict.passed, {**verdict.details, "static": "ok", "process": float(process)})


@register_verifier("python_literal")
def python_literal(task, response: str) -> Verdict:
    """The answer is a Python literal equal to meta['answer'] with the same types ('True' is not '1')."""
    got = final_answer(response)
    if got is None or len(got) > 2000:
        return Verdict(0.0, False, {"got": None})
    try:
        value = ast.literal_eval(got)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return Verdict(0.0, False, {"got": got[:200], "error": "not a literal"})
    ok = repr(value) == repr(ast.literal_eval(task.meta["answer"]))
    return Verdict(float(ok), ok, {"got": got[:200]})


def domains():
    return [
        domain(
            "code/synth",
            _synth,
            "python_tests",
            "write a function from a spec; hidden unit tests",
            env_id="rlpt/CodeAgent-v0",
            split_on="answer",
        ),
        domain(
            "code/repair",
            _repair,
            "python_tests",
            "fix a planted bug shown by a failing call",
            env_id="rlpt/CodeAgent-v0",
            split_on="answer",
        ),
        domain("code/trace", _trace, "python_literal", "predict the return value of shown code", split_on="source"),
    ]
