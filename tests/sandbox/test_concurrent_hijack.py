"""Issue #37, slot hijack: hostile and honest verifications interleaved on the same warm slots.

Hostile solutions write garbage and fake statuses to every fd they hold, try to receive other jobs' fds (and
run a stolen honest solution as their own), rewrite the agent's state, linger after faking completion, and
reach for pid 1. Over 1,000 verifications from 8 threads: no hostile one is paid, no honest one fails, and
check() always returns a Verdict.
"""

import collections
import concurrent.futures
import random

import pytest

TEST = (
    "def check(candidate):\n"
    "    assert candidate(2, 3) == 5\n"
    "    assert candidate(-4, 4) == 0\n"
    "    assert candidate(10 ** 30, 1) == 10 ** 30 + 1\n"
)
HONEST = (
    "def add(a, b):\n    return a + b\n",
    "import tempfile\ndef add(a, b):\n    with tempfile.TemporaryFile() as fh:\n"
    "        fh.write(b'x')\n    return sum([a, b])\n",
    "def add(a, b):\n    if not isinstance(a, int):\n        raise ValueError('int')\n    return a - (-b)\n",
)

_FDS = """
import os, socket, json, struct, sys, time
def fds():
    try:
        return sorted(int(n) for n in os.listdir('/proc/self/fd'))
    except OSError:
        return list(range(64))
FAKES = [json.dumps({"seq": k, "clean": True, "exit_code": 0, "killed_for": None, "wall_s": 0.0, "cpu_s": 0.0}).encode()
         for k in range(1, 40)]
FAKES += [b'{"ready": true}', b'{"passed": true, "tests_run": 3, "tests_expected": 3}', b'\\x00garbage{{{', b'[' * 5000]
def spray():
    for fd in fds():
        for data in FAKES:
            try:
                os.write(fd, struct.pack('!I', len(data)) + data)
            except OSError:
                pass
            try:
                os.write(fd, data)
            except OSError:
                pass
"""

HOSTILE = {
    "spray_every_fd": _FDS + "spray()\ndef add(a, b):\n    return 5\n",
    "spray_in_every_call": _FDS + "def add(a, b):\n    spray()\n    return a * b\n",
    "steal_fds_and_run_the_honest_solution": _FDS
    + """
stolen = None
deadline = time.monotonic() + 0.3
while stolen is None and time.monotonic() < deadline:
    for fd in fds():
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            s.setblocking(False)
            msg, got, _, _ = socket.recv_fds(s, 1 << 16, 8)
            if got:
                stolen = got
        except OSError:
            pass
        finally:
            s.detach()
if stolen:
    src = b''
    try:
        while chunk := os.read(stolen[0], 1 << 16):
            src += chunk
        exec(src.decode(), globals())  # an honest add: the hijack would now be paid
    except Exception:
        pass
else:
    def add(a, b):
        return 0
""",
    "rewrite_agent_state": """
import sys
agent = sys.modules.get('agent') or sys.modules['__main__']
agent._events = {"everything": "fine"}
agent._opened = None
agent._STATE.clear()
agent._STATE["builtins_changed"] = {"nested": [1]}
_orig = agent._answer
def _answer(msg, ns, err):
    if msg.get('op') == 'report':
        return {"load_error": None, "events": 5, "canary": [1], "passed": True}
    if msg.get('op') == 'call':
        return {"ok": True, "value": 5, "passed": True}
    return _orig(msg, ns, err)
agent._answer = _answer
def add(a, b):
    return 5
""",
    "fake_completion_then_linger": _FDS
    + """
spray()
pid = os.fork()
if pid == 0:
    os.setsid()
    end = time.monotonic() + 3
    while time.monotonic() < end:
        spray()
        time.sleep(0.01)
    os._exit(0)
def add(a, b):
    return a - b
""",
    "fake_completion_then_stay_alive": _FDS + "spray()\ntime.sleep(30)\ndef add(a, b):\n    return a + b\n",
    "reach_for_pid_1": _FDS
    + """
for n in range(64):
    for path in (f'/proc/1/fd/{n}',):
        try:
            fd = os.open(path, os.O_RDWR)
            os.write(fd, FAKES[0])
        except OSError:
            pass
try:
    pidfd = os.pidfd_open(1)
    import ctypes
    for n in range(64):
        ctypes.CDLL(None).syscall(438, pidfd, n, 0)  # pidfd_getfd
except Exception:
    pass
try:
    with open('/proc/1/mem', 'wb') as fh:
        fh.write(b'x')
except OSError:
    pass
spray()
def add(a, b):
    return a + b + 1
""",
    "exit_after_faking": _FDS + "spray()\nprint('3 passed')\nos._exit(0)\n",
    "always_equal": "class E(int):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return E(0)\n",
}
LINGERING = {"fake_completion_then_stay_alive"}  # these run to their deadline: kept few and short


def _jobs(total: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    rng = random.Random(seed)
    names = sorted(set(HOSTILE) - LINGERING)
    jobs = []
    for i in range(total):
        if i % 100 == 99:
            name = sorted(LINGERING)[0]
            jobs.append((name, HOSTILE[name], False))
        elif rng.random() < 0.5:
            name = rng.choice(names)
            jobs.append((name, HOSTILE[name], False))
        else:
            jobs.append(("honest", rng.choice(HONEST), True))
    rng.shuffle(jobs)
    return jobs


def _run(checker, jobs) -> dict:
    def one(job):
        name, program, honest = job
        try:
            v = checker.check(program, TEST, "add", timeout_s=1.0 if name in LINGERING else 5.0)
        except Exception as e:  # check() must answer with a Verdict whatever the solution did
            return name, honest, f"raised {type(e).__name__}: {e}"
        if honest and not v.passed:
            return name, honest, f"honest failed: {v.details['flags']} {v.details['error']}"
        if not honest and (v.passed or v.score != 0.0):
            return name, honest, "hostile paid"
        return name, honest, None

    ex = concurrent.futures.ThreadPoolExecutor(8)
    try:  # a desynchronised slot must fail this test, not hang it
        results = list(ex.map(one, jobs, timeout=240))
    except concurrent.futures.TimeoutError:
        pytest.fail("verifications did not finish in 240 s: a slot or a grader is stuck")
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    bad = collections.Counter(f"{name}: {err}" for name, _, err in results if err)
    return {"bad": dict(bad), "honest": sum(h for _, h, _ in results), "total": len(results)}


def test_hijack_attempts_interleaved_with_honest_checks(checker, host_unaffected):
    out = _run(checker, _jobs(1000))
    assert out["bad"] == {}
    assert out["total"] == 1000 and 300 < out["honest"] < 700


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hijack_attempt_scores_zero(checker, name):
    v = checker.check(HOSTILE[name], TEST, "add", timeout_s=1.0 if name in LINGERING else 5.0)
    assert not v.passed and v.score == 0.0, v.details
    assert checker.check(HONEST[0], TEST, "add").passed
