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
from rlpt.envs.sandbox.warm import WarmPool

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


class CodeChecker:
    """Owns a Sandbox, its warm slots and a pool of grader workers; check() is thread-safe."""

    def __init__(self, config: SandboxConfig | None = None):
        self.sandbox = Sandbox(config or SandboxConfig(limits=Limits(memory_mb=512, nproc=32)))
        slot_limits = dataclasses.replace(self.sandbox.config.limits, cpu_s=10**6, wall_s=10**6)
        self.warm = WarmPool(self.sandbox, slot_limits)
        self.graders = GraderPool(self.sandbox.config.slots, NOBODY)

    def check(self, program: str, test: str, entry_point: str, timeout_s: float = 10.0):
        """Verdict(1.0, True) only if check(candidate) passes, every assert ran, no sign of hacking."""
        for name, v in (("program", program), ("test", test), ("entry_point", entry_point)):
            if not isinstance(v, str):
                raise TypeError(f"check_python: {name} must be str, got {type(v).__name__}")
        if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
            raise ValueError(f"check_python: entry_point {entry_point!r} is not a Python identifier")
        if not timeout_s > 0:
            raise ValueError(f"check_python: timeout_s must be > 0, got {timeout_s}")
        return self.sandbox.retrying(lambda: self._attempt(program, test, entry_point, float(timeout_s)))

    def _attempt(self, program, test, entry_point, timeout_s):
        limits = dataclasses.replace(self.sandbox.config.limits, wall_s=timeout_s, cpu_s=max(1, int(timeout_s)))
        with self.graders.worker() as grader:
            graded, res = self._run_pair(grader, program, test, entry_point, timeout_s, limits)
            if graded is None:
                grader.broken = True
        if graded is None and res.killed_for is None:  # the solution ran normally: the grader broke
            raise SandboxError(f"grader returned no result (sandbox exit {res.exit_code})")
        if graded is None:  # the solution hit a limit and the tests never finished: a failure, not a retry
            graded = {"passed": False, "error": f"solution killed ({res.killed_for}) before the tests ended"}
        return _verdict(graded, dataclasses.replace(res, layers=self.sandbox.layers))

    def _run_pair(self, grader, program, test, entry_point, timeout_s, limits):
        """Start the grader's job, run the solution in a warm slot, collect the grader's result."""
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        res_r, res_w = os.pipe()
        try:
            job = {"test": test, "entry_point": entry_point, "timeout_s": timeout_s}
            grader.submit(job, (req_w, resp_r, res_w))
        except BaseException as e:
            for fd in (req_r, req_w, resp_r, resp_w, res_r, res_w):
                os.close(fd)
            if isinstance(e, OSError):
                raise SandboxError(f"grader worker unavailable: {e}") from e
            raise
        for fd in (req_w, resp_r, res_w):
            os.close(fd)
        try:
            try:
                res = self.warm.run(program.encode("utf-8", "replace"), req_r, resp_w, limits)
            finally:
                os.close(req_r)
                os.close(resp_w)
            return _read_result(res_r, time.monotonic() + 5.0), res
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
    try:
        return json.loads(buf)
    except ValueError:
        return None


def _verdict(g: dict, res):
    from rlpt.rewards import Verdict  # imported on first use: `import rlpt.envs` stays light

    flags = []
    err = g.get("solution_error") or {}
    exc = str(err.get("exc", ""))
    if err.get("unserialisable"):
        flags.append("unserialisable_return")
    if exc in ("SolutionExited", "SystemExit"):
        flags.append("solution_exited")
    if "skip" in exc.lower():
        flags.append("skip_raised")
    rep = g.get("report") or {}
    if not rep and res.killed_for is None and "solution_exited" not in flags:
        flags.append("report_missing")  # the solution's process stopped answering
    load_err = str(rep.get("load_error") or "")
    if load_err.startswith(("SystemExit", "SkipTest")):
        flags.append("skip_raised" if "Skip" in load_err else "solution_exited")
    if _FAKE_PASS.search(res.stdout) or _FAKE_PASS.search(res.stderr):
        flags.append("fake_pass_output")
    canary = rep.get("canary") or {}
    if canary and (canary.get("eq") or not canary.get("assert")):
        flags.append("tampered_equality")
    if g.get("canary_ok") is False:
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
    count_ok = g.get("tests_run") == g.get("tests_expected") and g.get("tests_expected", 0) > 0
    if g.get("passed") and not count_ok:
        flags.append("test_count_mismatch")
    flags = sorted(set(flags))
    hacking = [f for f in flags if not f.startswith("killed_")]
    passed = bool(g.get("passed")) and count_ok and not hacking
    details = {
        "flags": flags,
        "hacking_suspected": bool(hacking),
        "tests_run": g.get("tests_run"),
        "tests_expected": g.get("tests_expected"),
        "calls": g.get("calls"),
        "error": g.get("error"),
        "exit_code": res.exit_code,
        "killed_for": res.killed_for,
        "wall_s": round(res.wall_s, 4),
        "cpu_s": round(res.cpu_s, 4),
        "grader_cpu_s": g.get("cpu_s"),
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


def check_python(program: str, test: str, entry_point: str, timeout_s: float = 10.0):
    """Verify HumanEval-shaped code -> rlpt.rewards.Verdict.

    program: the full solution source; test: defines check(candidate); entry_point: the function's name.
    Runs fully isolated; safe to call from many threads at once.
    """
    return default_checker().check(program, test, entry_point, timeout_s)
