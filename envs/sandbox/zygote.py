"""Inside a warm sandbox slot (pid 1 of its namespaces): fork one fresh child per verification (stdlib only).

argv: <control socket fd>. A job arrives as JSON with fds (stdin, stdout, stderr, request, response). The
child limits itself and runs agent.serve; afterwards every other process in the namespace is killed and
/workspace and /tmp are emptied, so nothing of one episode survives into the next.
"""

import ctypes
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402

sys.path.pop(0)
_PRELOAD = (
    "typing",
    "math",
    "collections",
    "itertools",
    "functools",
    "re",
    "string",
    "random",
    "heapq",
    "bisect",
    "hashlib",
    "fractions",
    "decimal",
    "statistics",
    "json",
    "copy",
    "operator",
    "dataclasses",
)
_IPC_RMID = 0
_LIBC = ctypes.CDLL(None, use_errno=True)
_RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def main() -> None:
    for name in _PRELOAD:
        __import__(name)
    gc.freeze()  # keep the warm heap out of the collector: forked children then copy fewer pages
    ctl = socket.socket(fileno=int(sys.argv[1]))
    ctl.sendall(b'{"ready": true}')
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 4 << 20, 5)
        except OSError:
            return
        if not msg:
            return
        ctl.sendall(json.dumps(_run(json.loads(msg), fds)).encode())


def _run(job: dict, fds: list[int]) -> dict:
    t0 = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        _child(job, fds)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    killed_for = None
    if not select.select([pidfd], [], [], job["timeout_s"])[0]:
        killed_for = "deadline"
    os.close(pidfd)
    _kill_all()
    _, status = os.waitpid(pid, 0)
    _reap()
    for d in ("/workspace", "/tmp", "/dev/shm"):
        _empty(d)
    _remove_sysv_ipc()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "killed_for": killed_for,
        "wall_s": time.monotonic() - t0,
        "cpu_s": ru.ru_utime + ru.ru_stime - before.ru_utime - before.ru_stime,
    }


def _child(job: dict, fds: list[int]) -> None:
    try:
        stdin, out, err, req, resp = fds
        for src, dst in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(src, dst)
            os.close(src)
        for name, value in job["rlimits"].items():
            resource.setrlimit(_RLIMITS[name], (value[0], value[1]))
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir("/workspace")
        source = _read_all(0)
        agent.serve(source.decode("utf-8", errors="replace"), req, resp)
    finally:
        os._exit(70)


def _remove_sysv_ipc() -> None:
    """SysV shared memory, semaphores and queues outlive processes: drop them between episodes."""
    for kind, rm in (("shm", _LIBC.shmctl), ("sem", None), ("msg", _LIBC.msgctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                ids = [int(line.split()[1]) for line in fh.readlines()[1:] if line.strip()]
        except OSError:
            continue
        for ipc_id in ids:
            if rm is None:
                _LIBC.semctl(ipc_id, 0, _IPC_RMID)
            else:
                rm(ipc_id, _IPC_RMID, None)


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def _kill_all() -> None:
    """As pid 1 of the namespace, kill(-1) reaches every other process in it (setsid, daemons included)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap() -> None:
    while True:
        _kill_all()
        try:
            if os.waitpid(-1, 0)[0] == 0:
                return
        except ChildProcessError:
            return


def _empty(path: str) -> None:
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        p = os.path.join(path, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, onerror=_chmod_retry)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def _chmod_retry(func, path, _exc):
    os.chmod(os.path.dirname(path), 0o700)
    if os.path.isdir(path):
        os.chmod(path, 0o700)
    func(path)


if __name__ == "__main__":
    main()
