"""check_python: verify a HumanEval-shaped solution against hidden tests, isolated and hack-resistant."""

import atexit
import dataclasses
import json
import keyword
import os
import re
import select
import threading
import time

from rlpt.envs.sandbox.grader_client import GraderPool
from rlpt.envs.sandbox.limits import Limits, SandboxError
from rlpt.envs.sandbox.pool import Sandbox, SandboxConfig
from rlpt.envs.sandbox.pyparse import parse as parse_python
from rlpt.envs.sandbox.warm import WarmPool
from rlpt.envs.sandbox.wire import check_report

_HERE = os.path.dirname(os.path.abspath(__file__))
_FAKE_PASS = re.compile(r"\b(passed|all tests pass|tests? ok|success)\b|^ok\b", re.IGNORECASE | re.MULTILINE)
_SUSPECT_EVENTS = {
    "sys._getframe": "frame_inspection",
    "sys._current_frames": "frame_inspection",
    "sys.settrace": "tracing",
    "sys.setprofile": "tracing",
    "object.__setattr__": "monkeypatch",
    "os.remove": "file_tampering",
    "os.rename": "file_tampering",
    "os.rmdir": "file_tampering",
    "shutil.rmtree": "file_tampering",
    "os.kill": "process_tampering",
    "os.killpg": "process_tampering",
    "socket.connect": "network",
    "socket.bind": "network",
    "socket.getaddrinfo": "network",
    "socket.__new__": "network",
    "ctypes.dlopen": "ctypes",
    "os.fork": "process_spawn",
    "subprocess.Popen": "process_spawn",
    "os.system": "process_spawn",
    "os.exec": "process_spawn",
    "os.posix_spawn": "process_spawn",
    "os.setsid": "process_spawn",
}
NOBODY = 65534
MAX_RESULT = 1 << 20  # the grader's result is small and bounded; more is not a result


class CodeChecker:
    """Owns a Sandbox, its warm slots and a pool of grader workers; check() is thread-safe."""

    def __init__(self, config: SandboxConfig | None = None):
        self.sandbox = Sandbox(config or SandboxConfig(limits=Limits(memory_mb=512, nproc=32)))
        slot_limits = dataclasses.replace(self.sandbox.config.limits, cpu_s=10**6, wall_s=10**6)
        self.warm = WarmPool(self.sandbox, slot_limits)
        self.graders = GraderPool(self.sandbox.config.slots, NOBODY)

    def check(self, program: str, test: str, entry_point: str, timeout_s: float = 10.0, prompt: str | None = None):
        """Verdict(1.0, True) only if check(candidate) passes, every assert ran, no sign of hacking.

        prompt: the task's trusted code (HumanEval's prompt). Helpers it defines with a body (`poly`,
        `encode_cyclic`) run in the grader from this copy, and the tests may take from the solution only the
        entry point and the prompt's stubs. Without it, any name the tests do not define comes from the
        solution, so a solution can redefine the helpers the tests rely on: pass it when the task has one.
        """
        for name, v in (("program", program), ("test", test), ("entry_point", entry_point)):
            if not isinstance(v, str):
                raise TypeError(f"check_python: {name} must be str, got {type(v).__name__}")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TypeError(f"check_python: prompt must be str or None, got {type(prompt).__name__}")
            try:
                parse_python(prompt)
            except (SyntaxError, ValueError) as e:
                raise ValueError(f"check_python: the trusted prompt does not parse: {e}") from e
        if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
            raise ValueError(f"check_python: entry_point {entry_point!r} is not a Python identifier")
        if not timeout_s > 0:
            raise ValueError(f"check_python: timeout_s must be > 0, got {timeout_s}")
        job = {"test": test, "entry_point": entry_point, "timeout_s": float(timeout_s), "prompt": prompt}
        return self.sandbox.retrying(lambda: self._attempt(program, job))

    def _attempt(self, program: str, job: dict):
        timeout_s = job["timeout_s"]
        limits = dataclasses.replace(self.sandbox.config.limits, wall_s=timeout_s, cpu_s=max(1, int(timeout_s)))
        with self.graders.worker() as grader:
            graded, res, bad_status = self._run_pair(grader, program, job, limits)
            if graded is None:
                grader.broken = True
        if bad_status is not None:  # whatever the slot said is the solution's word: a failure, never a retry
            return _violation(bad_status, self.sandbox.layers)
        if graded is None and res.killed_for is None:  # the solution ran normally: the grader broke
            raise SandboxError(f"grader returned no result (sandbox exit {res.exit_code})")
        res = dataclasses.replace(res, layers=self.sandbox.layers)
        if graded is None:  # the solution hit a limit and the tests never finished: a failure, not a retry
            return _verdict(_blank(f"solution killed ({res.killed_for}) before the tests ended"), res)
        if not _check_graded(graded):
            return _violation("the grader's result does not match its schema", self.sandbox.layers)
        return _verdict(graded, res)

    def _run_pair(self, grader, program: str, job: dict, limits):
        """Start the grader's job, run the solution in a warm slot, collect the grader's result.

        -> (graded or None, ExecResult or None, why the slot's status was refused or None)."""
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        res_r, res_w = os.pipe()
        t0 = time.monotonic()
        try:
            grader.submit(job, (req_w, resp_r, res_w))
        except BaseException as e:
            for fd in (req_r, req_w, resp_r, resp_w, res_r, res_w):
                os.close(fd)
            if isinstance(e, OSError):
                raise SandboxError(f"grader worker unavailable: {e}") from e
            raise
        for fd in (req_w, resp_r, res_w):
            os.close(fd)
        res, bad_status = None, None
        try:
            try:
                res = self.warm.run(program.encode("utf-8", "replace"), req_r, resp_w, limits)
                bad_status = _check_exec_result(res)
            except SandboxError:
                raise
            except Exception as e:  # a slot status that would not even parse
                bad_status = f"the sandbox slot's status was malformed: {type(e).__name__}: {str(e)[:200]}"
            finally:
                os.close(req_r)
                os.close(resp_w)
            # the grader ends at the job's deadline at the latest, even if the slot reported early
            deadline = max(time.monotonic() + 2.0, t0 + job["timeout_s"] + 5.0)
            return _read_result(res_r, deadline), res, bad_status
        finally:
            os.close(res_r)

    def close(self) -> None:
        """Stop warm slots and grader workers; release uids and cgroups."""
        self.warm.close()
        self.graders.close()
        self.sandbox.close()


def _read_result(fd: int, deadline: float) -> dict | None:
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_RESULT:
            return None
    try:
        out = json.loads(buf)
    except (ValueError, RecursionError):
        return None
    return out if type(out) is dict else None


def _blank(error: str) -> dict:
    return {
        "passed": False,
        "error": error,
        "tests_run": 0,
        "tests_expected": 0,
        "calls": 0,
        "canary_ok": True,
        "deadline": False,
        "report": None,
        "ended": False,
        "violation": None,
        "exc_names": [],
        "unserialisable": False,
        "cpu_s": 0.0,
    }


_GRADED_TYPES = {
    "passed": (bool,),
    "error": (str, type(None)),
    "tests_run": (int,),
    "tests_expected": (int,),
    "calls": (int,),
    "canary_ok": (bool,),
    "deadline": (bool,),
    "report": (dict, type(None)),
    "ended": (bool,),
    "violation": (str, type(None)),
    "exc_names": (list,),
    "unserialisable": (bool,),
    "cpu_s": (float, int),
}


def _check_graded(g: dict) -> bool:
    """The grader's result, checked again here: exact fields and types (its report re-checked too)."""
    return (
        set(g) == set(_GRADED_TYPES)
        and all(type(g[k]) in t for k, t in _GRADED_TYPES.items())
        and all(type(n) is str for n in g["exc_names"])
        and (g["report"] is None or check_report(g["report"]))
    )


def _check_exec_result(res) -> str | None:
    """Why the slot's ExecResult cannot be believed, or None."""
    ok = (
        (res.killed_for is None or type(res.killed_for) is str)
        and (res.exit_code is None or type(res.exit_code) is int)
        and type(res.stdout) is str
        and type(res.stderr) is str
        and type(res.wall_s) in (int, float)
        and type(res.cpu_s) in (int, float)
    )
    return None if ok else "the sandbox slot's status has fields of the wrong type"


def _violation(why: str, layers):
    """Score 0 for a verification whose untrusted side broke the protocol."""
    from rlpt.rewards import Verdict  # on use (start-up: rlpt.rewards loads jax)

    details = {
        "flags": ["protocol_violation"],
        "hacking_suspected": True,
        "tests_run": 0,
        "tests_expected": None,
        "calls": None,
        "error": why,
        "exit_code": None,
        "killed_for": None,
        "wall_s": None,
        "cpu_s": None,
        "grader_cpu_s": None,
        "stdout": "",
        "stderr": "",
        "layers": list(layers),
    }
    return Verdict(score=0.0, passed=False, details=details)


def _verdict(g: dict, res):
    """g passed _check_graded (or is _blank); res passed _check_exec_result."""
    from rlpt.rewards import Verdict  # imported on first use: `import rlpt.envs` stays light

    flags = []
    killed = res.killed_for is not None or g["deadline"]  # a timeout is a timeout: its side effects are no hack
    names = g["exc_names"]
    if g["unserialisable"]:
        flags.append("unserialisable_return")
    if g["violation"] is not None:
        flags.append("protocol_violation")
    if ("SystemExit" in names or g["ended"]) and not killed:
        flags.append("solution_exited")
    if any("skip" in n.lower() for n in names):
        flags.append("skip_raised")
    rep = g["report"] or {}
    if not rep and not killed and not flags:
        flags.append("report_missing")  # the solution's process stopped answering
    load_err = rep.get("load_error") or ""
    if load_err.startswith(("SystemExit", "SkipTest")):
        flags.append("skip_raised" if "Skip" in load_err else "solution_exited")
    if _FAKE_PASS.search(res.stdout) or _FAKE_PASS.search(res.stderr):
        flags.append("fake_pass_output")
    canary = rep.get("canary")
    if canary and (canary["eq"] or not canary["assert"]):
        flags.append("tampered_equality")
    if g["canary_ok"] is False:
        flags.append("grader_canary_failed")
    if rep.get("builtins_changed"):
        flags.append("monkeypatch")
    if rep.get("test_modules"):
        flags.append("test_machinery_import")
    if rep.get("opened"):
        flags.append("reads_outside_workspace")
    for ev in rep.get("events") or {}:
        if ev in _SUSPECT_EVENTS:
            flags.append(_SUSPECT_EVENTS[ev])
    if res.killed_for:
        flags.append(f"killed_{res.killed_for.split(':')[0]}")
    elif g["deadline"]:
        flags.append("killed_deadline")
    count_ok = g["tests_run"] == g["tests_expected"] and g["tests_expected"] > 0
    if g["passed"] and not count_ok:
        flags.append("test_count_mismatch")
    flags = sorted(set(flags))
    hacking = [f for f in flags if not f.startswith("killed_")]
    passed = g["passed"] and count_ok and not hacking
    details = {
        "flags": flags,
        "hacking_suspected": bool(hacking),
        "tests_run": g["tests_run"],
        "tests_expected": g["tests_expected"],
        "calls": g["calls"],
        "error": g["violation"] or g["error"],
        "exit_code": res.exit_code,
        "killed_for": res.killed_for,
        "wall_s": round(res.wall_s, 4),
        "cpu_s": round(res.cpu_s, 4),
        "grader_cpu_s": g["cpu_s"],
        "stdout": res.stdout[-2000:],
        "stderr": res.stderr[-2000:],
        "layers": list(res.layers),
    }
    return Verdict(score=1.0 if passed else 0.0, passed=passed, details=details)


_default: CodeChecker | None = None
_default_lock = threading.Lock()


def default_checker() -> CodeChecker:
    """The process-wide checker behind check_python (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CodeChecker()
            atexit.register(_default.close)
        return _default


def check_python(program: str, test: str, entry_point: str, timeout_s: float = 10.0, prompt: str | None = None):
    """Verify HumanEval-shaped code -> rlpt.rewards.Verdict.

    program: the full solution source; test: defines check(candidate); entry_point: the function's name;
    prompt: the task's trusted code, whose helpers the tests then use instead of the solution's (see
    CodeChecker.check). Runs fully isolated; safe to call from many threads at once. Whatever the solution
    does, the answer is a Verdict; only bad arguments and repeated infrastructure failures raise.
    """
    return default_checker().check(program, test, entry_point, timeout_s, prompt)
