"""Parent side of the grader workers: a bounded pool, one job per worker at a time, broken ones replaced."""

import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading

MAX_JOB = 2 << 20
RECYCLE_AFTER = 2000  # jobs per worker before a fresh one replaces it (bounds slow state growth)
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader_server.py")


class GraderWorker:
    """One worker process and its control socket."""

    def __init__(self, uid: int):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", _WORKER, str(theirs.fileno()), str(uid)],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock, self.jobs, self.broken = ours, 0, False

    def submit(self, job: dict, fds: tuple[int, int, int]) -> None:
        """Hand over a job with (request write fd, response read fd, result write fd)."""
        data = json.dumps(job).encode()
        if len(data) > MAX_JOB:
            raise ValueError(f"test source too large for the grader: {len(data)} bytes > {MAX_JOB}")
        self.jobs += 1
        socket.send_fds(self.sock, [data], list(fds))

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class GraderPool:
    """At most `size` workers; worker() lends one for a single verification."""

    def __init__(self, size: int, uid: int):
        self.uid = uid
        self._idle: queue.LifoQueue = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)
        self._lock = threading.Lock()
        self._live: set[GraderWorker] = set()

    @contextlib.contextmanager
    def worker(self):
        """Yield a ready worker; set .broken if its job did not finish cleanly so it is replaced."""
        w = self._idle.get()
        try:
            if w is None or w.proc.poll() is not None:
                if w is not None:
                    self._drop(w)
                w = GraderWorker(self.uid)
                with self._lock:
                    self._live.add(w)
            yield w
        except BaseException:
            if w is not None:
                w.broken = True
            raise
        finally:
            if w is not None and (w.broken or w.jobs >= RECYCLE_AFTER):
                self._drop(w)
                w = None
            self._idle.put(w)

    def _drop(self, w: GraderWorker) -> None:
        with self._lock:
            self._live.discard(w)
        if w.proc.poll() is None and w.broken:
            w.proc.kill()
        w.close()

    def close(self) -> None:
        with self._lock:
            live, self._live = list(self._live), set()
        for w in live:
            w.close()
