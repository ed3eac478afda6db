"""A grader worker process (stdlib only): grades one verification at a time, many in a row.

It only ever runs the trusted hidden tests and decodes plain values from the solution's process, so it
is reused across verifications (forking a fresh grader cost ~8 ms of CPU per check). It drops to an
unprivileged uid once at start; each job gets fresh test globals and an alarm at its deadline.
"""

import gc
import json
import os
import resource
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_PRELOAD = (
    "math",
    "random",
    "string",
    "copy",
    "itertools",
    "collections",
    "re",
    "typing",
    "hashlib",
    "functools",
    "heapq",
    "bisect",
    "fractions",
    "decimal",
    "statistics",
)
MAX_JOB = 2 << 20


def serve(fd: int, uid: int) -> None:
    """Worker loop: receive (job, fds), grade, write the result. Ends when the parent hangs up."""
    import importlib

    for name in _PRELOAD:
        importlib.import_module(name)
    import grader

    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    gc.freeze()
    signal.signal(signal.SIGALRM, _deadline)
    sock = socket.socket(fileno=fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_JOB, 3)
        except OSError:
            return
        if not msg:
            return
        if len(fds) != 3:  # the parent always sends three; anything else is not a job
            for f in fds:
                os.close(f)
            continue
        req, resp, result = fds
        t0 = resource.getrusage(resource.RUSAGE_SELF)
        out = _grade(grader, msg, req, resp)
        t1 = resource.getrusage(resource.RUSAGE_SELF)
        out["cpu_s"] = round(t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime, 4)
        try:
            view = memoryview(json.dumps(out).encode())
        except (TypeError, ValueError, RecursionError):  # cannot happen with grade()'s fields; never die for it
            view = memoryview(json.dumps(grader.blank_result("grader result not serialisable")).encode())
        try:
            while view:
                view = view[os.write(result, view) :]
        except OSError:
            pass  # the parent gave up on this job
        for f in fds:
            os.close(f)


def _grade(grader, msg: bytes, req: int, resp: int) -> dict:
    """One job, never raising: the worker outlives whatever the solution sends (its deadline included)."""
    try:
        job = json.loads(msg)
        timeout_s = float(job["timeout_s"])
        prompt = job.get("prompt")
        signal.signal(signal.SIGALRM, _deadline)
        signal.alarm(max(1, int(timeout_s + 1)))  # at the deadline the tests end with grader.Deadline
        try:
            return grader.grade(job["test"], job["entry_point"], req, resp, prompt)
        finally:
            signal.alarm(0)
    except BaseException as e:  # a malformed job, or a Deadline outside the tests
        return grader.blank_result(f"grader: {type(e).__name__}: {str(e)[:200]}")


def _deadline(signum, frame):
    import grader

    # a second alarm with the default action ends the worker if the tests are stuck in C code; the parent
    # replaces a worker that died
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(2)
    raise grader.Deadline()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
