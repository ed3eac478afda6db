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
    sock = socket.socket(fileno=fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_JOB, 3)
        except OSError:
            return
        if not msg:
            return
        job = json.loads(msg)
        req, resp, result = fds
        signal.alarm(max(1, int(job["timeout_s"] + 1)))  # a hung test kills the worker; the parent replaces it
        t0 = resource.getrusage(resource.RUSAGE_SELF)
        out = grader.grade(job["test"], job["entry_point"], req, resp)
        t1 = resource.getrusage(resource.RUSAGE_SELF)
        out["cpu_s"] = round(t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime, 4)
        signal.alarm(0)
        view = memoryview(json.dumps(out, default=repr).encode())
        try:
            while view:
                view = view[os.write(result, view) :]
        except OSError:
            pass  # the parent gave up on this job
        for f in fds:
            os.close(f)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
