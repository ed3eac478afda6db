"""Inside a warm sandbox slot (pid 1 of its namespaces): fork one fresh child per verification (stdlib only).

argv: <control socket fd>. A job arrives as JSON with fds (stdin, stdout, stderr, request, response). The
child keeps exactly those fds (as 0-4), limits itself and runs agent.serve; afterwards every other process in
the namespace is killed and every writable mount (/workspace, /tmp, /dev/shm) is emptied, so nothing of one
episode survives into the next. pid 1 is not dumpable: its children (same uid) cannot reach its memory or its
fds through /proc/1/mem, /proc/1/fd or pidfd_getfd.
"""

import ctypes
import fcntl
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
_PR_SET_DUMPABLE = 4
_WRITABLE = ("/workspace", "/tmp", "/dev/shm")
_REQ_FD, _RESP_FD = 3, 4  # where the child finds its request and response pipes
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
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Python's SIGINT handler would let a child kill pid 1
    ctl = socket.socket(fileno=int(sys.argv[1]))
    ctl.sendall(b'{"ready": true}')
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 4 << 20, 5)
        except OSError:
            return
        if not msg:
            return
        status = _run(json.loads(msg), fds)
        ctl.sendall(json.dumps(status).encode())
        if not status["clean"]:
            return  # something survived the emptying: the host replaces this slot


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
    clean = True
    for d in _WRITABLE:
        clean = _empty(d) and clean
    _remove_sysv_ipc()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seq": job["seq"],
        "clean": clean,
        "exit_code": os.waitstatus_to_exitcode(status),
        "killed_for": killed_for,
        "wall_s": time.monotonic() - t0,
        "cpu_s": ru.ru_utime + ru.ru_stime - before.ru_utime - before.ru_stime,
    }


def _child(job: dict, fds: list[int]) -> None:
    try:
        # fds [0, 5) become the job's five; the control socket and anything else inherited is closed, so the
        # untrusted code cannot speak for the zygote or receive the next job's pipes
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5) for fd in fds]  # no dup2 below clobbers a source
        for src, dst in zip(high, range(5)):
            os.dup2(src, dst, inheritable=False)
        os.closerange(5, resource.getrlimit(resource.RLIMIT_NOFILE)[1])  # close_range(2): one syscall
        for fd in (0, 1, 2):
            os.set_inheritable(fd, True)
        _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # the child's own /proc/self behaves as usual
        try:
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")  # under memory pressure in the slot's cgroup the child dies first, not pid 1
        except OSError:
            pass
        for name, value in job["rlimits"].items():
            resource.setrlimit(_RLIMITS[name], (value[0], value[1]))
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir("/workspace")
        source = _read_all(0)
        agent.serve(source.decode("utf-8", errors="replace"), _REQ_FD, _RESP_FD)
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


def _empty(path: str) -> bool:
    """Delete everything under path and reset the folder itself (mode, times, xattrs: all would carry data to
    the next episode); True when that worked (else the host replaces the slot)."""
    try:
        os.chmod(path, 0o755)
        for name in os.listxattr(path):
            os.removexattr(path, name)
        for root, dirs, _ in os.walk(path):  # first make every folder enterable: chmod 0 must not keep files
            for d in dirs:
                p = os.path.join(root, d)
                if not os.path.islink(p):
                    try:
                        os.chmod(p, 0o700)
                    except OSError:
                        pass
        for name in os.listdir(path):
            p = os.path.join(path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        os.utime(path, ns=(0, 0))
        return not os.listdir(path) and not os.listxattr(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
