"""Verifier specs: a JSON description of how to score a response (exact, numeric, math, regex, json, python,
judge), checked at load by `parse_spec` and applied by `check_spec`. Used by RL prompt files (rlpt.tasks.files).

Every check reads the response's final answer (rlpt.rewards.guard.final_answer: the one <answer>...</answer>
span, else the whole stripped response), except `python`, which reads the response's program (one fenced block
or the whole response, as the code domains do), and `judge`, which sees the whole response.
"""

import ast
import functools
import json
import math
import re
import types
from fractions import Fraction

from rlpt.envs.sandbox import check_python
from rlpt.envs.sandbox.pyparse import parse as parse_python
from rlpt.rewards import mathcheck  # noqa: F401  (registers the 'symbolic' verifier the math spec uses)
from rlpt.rewards.guard import final_answer
from rlpt.rewards.isolated import run_isolated
from rlpt.rewards.judges import get_judge, prompt_text
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import VERIFIERS, parse_number

SPEC_TYPES = ("exact", "numeric", "math", "regex", "json", "python", "judge")
# Keys each type accepts besides "type"; a spec with any other key is refused (a typo must not pass silently).
_KEYS = {
    "exact": {"answer", "normalised"},
    "numeric": {"answer", "rel_tol", "abs_tol"},
    "math": {"answer"},
    "regex": {"pattern", "flags", "timeout_s"},
    "json": {"fields", "schema"},
    "python": {"tests", "entry", "timeout_s"},
    "judge": {"name", "threshold"},
}
REGEX_FLAGS = {"a": re.ASCII, "i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
MAX_TIMEOUT_S = 60.0
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(.*?)\n?```\Z", re.DOTALL)


class SpecError(ValueError):
    """A verifier spec that cannot be used; the message says which key and why."""


def parse_spec(spec, answer: str | None = None) -> dict:
    """The spec with every default filled in (a JSON-able dict), or SpecError naming the problem.

    answer: the row's gold text, used by exact / numeric / math when the spec has no "answer" of its own.
    """
    if not isinstance(spec, dict):
        raise SpecError(f"verifier must be a JSON object, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in SPEC_TYPES:
        raise SpecError(f"verifier type {kind!r} is unknown; expected one of {list(SPEC_TYPES)}")
    extra = sorted(set(spec) - _KEYS[kind] - {"type"})
    if extra:
        raise SpecError(f"verifier type {kind!r} does not take {extra}; it takes {sorted(_KEYS[kind])}")
    return {"type": kind, **_PARSERS[kind](spec, answer)}


def check_spec(spec: dict, response: str, prompt=None) -> Verdict:
    """Score `response` by a spec from `parse_spec`; prompt (text or chat messages) is what a judge reads."""
    return _CHECKS[spec["type"]](spec, response, prompt)


def judge_names(specs) -> list[str]:
    """The judge names a collection of parsed specs needs, in first-seen order."""
    return list(dict.fromkeys(s["name"] for s in specs if s["type"] == "judge"))


# ---- parsing -------------------------------------------------------------------------------------------------

def _gold(spec: dict, answer: str | None) -> str:
    value = spec.get("answer", answer)
    if value is None:
        raise SpecError(f"verifier {spec['type']!r} needs an 'answer' (in the spec, or the row's 'answer')")
    return _text(value, "answer").strip()


def _text(value, key: str) -> str:
    """A string, or a JSON number written as its decimal text."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(f"'{key}' must be a string or a number, got {type(value).__name__}")
    return value if isinstance(value, str) else repr(value)


def _number(spec: dict, key: str, default: float, *, low: float = 0.0, high: float = math.inf,
            open_low: bool = False) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or (open_low and value == low) or value > high:
        span = f"{'(' if open_low else '['}{low}, {high}]"
        raise SpecError(f"'{key}' must be a finite number in {span}, got {value!r}")
    return float(value)


def _flag(spec: dict, key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(f"'{key}' must be true or false, got {value!r}")
    return value


def _parse_exact(spec, answer):
    return {"answer": _gold(spec, answer), "normalised": _flag(spec, "normalised")}


def _parse_numeric(spec, answer):
    gold = _gold(spec, answer)
    if parse_number(gold) is None:
        raise SpecError(f"numeric answer {gold!r} is not an integer, decimal or a/b literal (no exponents)")
    return {"answer": gold, "rel_tol": _number(spec, "rel_tol", 0.0), "abs_tol": _number(spec, "abs_tol", 0.0)}


def _parse_math(spec, answer):
    gold = _gold(spec, answer)
    if not gold or "\n" in gold or len(gold) > 500:
        raise SpecError(f"math answer must be one non-empty line of at most 500 characters, got {gold[:80]!r}")
    return {"answer": gold}


def _parse_regex(spec, answer):
    pattern, flags = spec.get("pattern"), spec.get("flags", "")
    if not isinstance(pattern, str) or not pattern:
        raise SpecError(f"regex needs a non-empty string 'pattern', got {pattern!r}")
    if not isinstance(flags, str) or set(flags) - set(REGEX_FLAGS):
        raise SpecError(f"regex 'flags' must be a string of {sorted(REGEX_FLAGS)}, got {flags!r}")
    try:
        _compiled(pattern, flags)
    except re.error as err:
        raise SpecError(f"regex pattern {pattern!r} does not compile: {err}") from None
    return {"pattern": pattern, "flags": "".join(sorted(set(flags))),
            "timeout_s": _number(spec, "timeout_s", 2.0, high=MAX_TIMEOUT_S, open_low=True)}


def _parse_json(spec, answer):
    if "fields" not in spec and "schema" not in spec:
        raise SpecError("json needs 'fields' (keys the response's object must have, with these values) "
                        "and/or 'schema' (a JSON schema)")
    out = {}
    if "fields" in spec:
        if not isinstance(spec["fields"], dict) or not spec["fields"]:
            raise SpecError(f"json 'fields' must be a non-empty object, got {spec['fields']!r}")
        out["fields"] = spec["fields"]
    if "schema" in spec:
        import jsonschema

        schema = spec["schema"]
        if not isinstance(schema, dict):
            raise SpecError(f"json 'schema' must be an object, got {type(schema).__name__}")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as err:
            raise SpecError(f"json 'schema' is not a valid JSON schema: {err.message}") from None
        out["schema"] = schema
    return out


def python_test_source(tests: str) -> str:
    """The test code the sandbox runs (it calls `check(candidate)`): `tests` as is when it defines check(),
    else its statements as the body of `def check(candidate):` (names like `f` come from the solution)."""
    tree = parse_python(tests)
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        return tests
    if not tree.body:
        raise SyntaxError("no statements")
    check = parse_python("def check(candidate):\n    pass\n").body[0]
    check.body = tree.body
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=[check], type_ignores=[]))) + "\n"


def _parse_python(spec, answer):
    tests, entry = spec.get("tests"), spec.get("entry")
    if not isinstance(tests, str) or not tests.strip():
        raise SpecError(f"python needs a non-empty string 'tests' (asserts), got {tests!r}")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise SpecError(f"python needs 'entry', the name of the function to test, got {entry!r}")
    try:
        program = python_test_source(tests)
        tree = parse_python(program)
        compile(tree, "<tests>", "exec")
    except (SyntaxError, ValueError) as err:
        raise SpecError(f"python 'tests' do not compile: {err}") from None
    if not any(isinstance(n, ast.Assert) for n in ast.walk(tree)):
        raise SpecError("python 'tests' hold no assert: nothing would be checked")
    return {"tests": tests, "entry": entry, "timeout_s": _number(spec, "timeout_s", 5.0, high=MAX_TIMEOUT_S,
                                                                 open_low=True)}


def _parse_judge(spec, answer):
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"judge needs 'name', a judge registered in rlpt.rewards.judges, got {name!r}")
    return {"name": name, "threshold": _number(spec, "threshold", 0.5, high=1.0)}


_PARSERS = {"exact": _parse_exact, "numeric": _parse_numeric, "math": _parse_math, "regex": _parse_regex,
            "json": _parse_json, "python": _parse_python, "judge": _parse_judge}


# ---- checking ------------------------------------------------------------------------------------------------

def _clip(text, n: int = 200):
    return text if text is None or len(text) <= n else text[:n] + "..."


def _with(verdict: Verdict, kind: str) -> Verdict:
    return Verdict(verdict.score, verdict.passed, {"verifier": kind, **verdict.details})


def _binary(ok: bool, kind: str, **details) -> Verdict:
    return Verdict(1.0 if ok else 0.0, bool(ok), {"verifier": kind, **details})


def _check_exact(spec, response, prompt):
    # The registered exact / normalised verifiers, on a stand-in task holding this spec's answer.
    gold = types.SimpleNamespace(meta={"answer": spec["answer"]})
    return _with(VERIFIERS["normalised" if spec["normalised"] else "exact"](gold, response), "exact")


def _check_numeric(spec, response, prompt):
    got = final_answer(response)
    value, want = (None if got is None else parse_number(got)), parse_number(spec["answer"])
    if value is None:
        return _binary(False, "numeric", got=_clip(got), error="not a number literal")
    diff = abs(value - want)
    ok = diff <= max(Fraction(spec["rel_tol"]) * max(abs(value), abs(want)), Fraction(spec["abs_tol"]))
    return _binary(ok, "numeric", got=_clip(got), abs_error=float(diff))


def _check_math(spec, response, prompt):
    # rlpt.rewards.mathcheck's 'symbolic' verifier: math-verify in a worker process, sympy fallback.
    gold = types.SimpleNamespace(meta={"answer": spec["answer"]})
    return _with(VERIFIERS["symbolic"](gold, response), "math")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str, flags: str) -> re.Pattern:
    bits = 0
    for f in flags:
        bits |= REGEX_FLAGS[f]
    return re.compile(pattern, bits)


def regex_fullmatch(pattern: str, flags: str, text: str) -> bool:
    """Runs in a worker process (rlpt.rewards.isolated): a pattern that backtracks badly on policy text times
    out there instead of stalling the rollout."""
    return _compiled(pattern, flags).fullmatch(text) is not None


def _check_regex(spec, response, prompt):
    got = final_answer(response)
    if got is None:
        return _binary(False, "regex", got=None)
    done, result = run_isolated(regex_fullmatch, spec["pattern"], spec["flags"], got, timeout_s=spec["timeout_s"])
    if not done:
        return _binary(False, "regex", got=_clip(got), error=f"match failed: {result}")
    return _binary(result, "regex", got=_clip(got))


def _same(a, b) -> bool:
    """JSON equality that keeps types apart (true is not 1, 1 is not "1"; 1 and 1.0 are the same number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _check_json(spec, response, prompt):
    got = final_answer(response)
    if got is None:
        return _binary(False, "json", got=None)
    fenced = _FENCE.fullmatch(got)
    text = fenced.group(1) if fenced else got
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        return _binary(False, "json", got=_clip(got), error=f"not JSON: {type(err).__name__}")
    if "fields" in spec:
        if not isinstance(value, dict):
            return _binary(False, "json", got=_clip(got), error=f"not an object but {type(value).__name__}")
        wrong = [k for k, v in spec["fields"].items() if k not in value or not _same(value[k], v)]
        if wrong:
            return _binary(False, "json", got=_clip(got), wrong_fields=wrong)
    if "schema" in spec:
        import jsonschema

        error = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(spec["schema"])(spec["schema"]).iter_errors(value))
        if error is not None:
            return _binary(False, "json", got=_clip(got), schema_error=_clip(error.message))
    return _binary(True, "json", got=_clip(got))


def _check_python(spec, response, prompt):
    # As the code domains do it (rlpt.tasks.native.code.python_tests): static checks, then the sandbox.
    from rlpt.tasks.native.code import extract_program, static_reason  # on use (start-up: PIL)

    program = extract_program(response)
    reason = static_reason(program, spec["entry"])
    if reason is not None:
        return _binary(False, "python", static=reason)
    verdict = check_python(program, python_test_source(spec["tests"]), spec["entry"], timeout_s=spec["timeout_s"])
    return _with(verdict, "python")


def _check_judge(spec, response, prompt):

    # Resolved by name now, not at load: judges are built or registered when a run starts. An unregistered
    # name raises KeyError naming the registered ones (Domain.verify scores it 0 and logs the error).
    out = get_judge(spec["name"]).score([prompt_text(prompt if prompt is not None else "")], [response])
    if bool(out.failed[0]):
        return _binary(False, "judge", judge=spec["name"], error="the judge could not score this response")
    score = float(out.scores[0])
    return Verdict(score, score >= spec["threshold"], {"verifier": "judge", "judge": spec["name"],
                                                       "raw": float(out.raw[0])})


_CHECKS = {"exact": _check_exact, "numeric": _check_numeric, "math": _check_math, "regex": _check_regex,
           "json": _check_json, "python": _check_python, "judge": _check_judge}
