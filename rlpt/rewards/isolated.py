"""A shared pool of worker processes for checks that must not run in the caller: math-verify times out
with SIGALRM (main thread only) and some third-party scorers parse policy text with eval.

Workers are `python -m rlpt.rewards.worker` processes (started lazily, at most WORKERS), not a
multiprocessing pool: a spawn pool re-imports the caller's `__main__`, so a script without an
`if __name__ == "__main__":` guard broke every check. A check that times out or whose worker dies
returns a failure and its worker is replaced; `run_isolated` never raises for what a check does.
"""

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time

import rlpt

WORKERS = 2


# The wire protocol between rlpt and its own workers: an 8-byte length, then a pickle.
HEADER = struct.Struct("<Q")  # payload length in bytes
MAX_MESSAGE_BYTES = 1 << 30
MAX_ERROR_CHARS = 500


def read_message(fd: int):
    """One pickled message from fd; None at end of stream (the other side closed its end)."""
    payload = read_payload(fd)
    return None if payload is None else pickle.loads(payload)


def read_payload(fd: int) -> bytes | None:
    """The bytes of one message from fd, not yet unpickled; None at end of stream."""
    header = _read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    return _read_exact(fd, size)


def encode(message) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def write_message(fd: int, message) -> None:
    write_bytes(fd, encode(message))


def write_bytes(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:MAX_ERROR_CHARS]


class WorkerLost(Exception):
    """The worker stopped answering (timed out, died, or its pipe broke); it has been killed."""


class WorkerGone(WorkerLost):
    """The worker was dead before it took the check (the check never ran)."""


class Worker:
    """One worker process and its pipes; used by one thread at a time."""

    def __init__(self):
        env = dict(os.environ)
        # The worker imports rlpt before it reads the caller's sys.path: make sure it can.
        root = os.path.dirname(os.path.dirname(os.path.abspath(rlpt.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlpt.rewards.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # Ctrl-C in the caller's terminal interrupts the caller, not a check
        )
        self.requests, self.replies = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: bytes, timeout_s: float):
        """(ok, value) from the worker for an encoded request; raises WorkerLost after timeout_s or if the
        worker dies (WorkerGone if it was dead before the request reached it)."""
        try:
            write_bytes(self.requests, request)
        except OSError as err:  # BrokenPipeError: it died between checks
            raise WorkerGone(self._death(f"pipe broke ({err})")) from None
        # poll, not select: select fails on descriptors above 1023, which a busy caller may hand out.
        poller = select.poll()
        poller.register(self.replies, select.POLLIN)
        if not poller.poll(max(timeout_s, 0.0) * 1000):
            self.kill()
            raise WorkerLost(f"timeout after {timeout_s:g} s")
        # The reply (or EOF) has started arriving; a half-written reply means the worker died mid-write.
        try:
            payload = read_payload(self.replies)
        except (OSError, ValueError) as err:
            raise WorkerLost(self._death(f"bad reply ({describe(err)})")) from None
        if payload is None:
            raise WorkerLost(self._death("closed its pipe"))
        try:
            return pickle.loads(payload)
        except Exception as err:  # e.g. a result whose class this process cannot import; the worker is fine
            return False, f"reply not readable here: {describe(err)}"

    def _death(self, what: str) -> str:
        self.kill()
        code = self.proc.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"worker died: {what}, {how}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # unkillable (D state): leave the zombie, never block a check
            pass


class Pool:
    """At most `size` workers, started on demand; an idle worker serves the next check."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self._idle: list[Worker] = []
        self._live = 0
        self._cond = threading.Condition()

    def acquire(self) -> Worker | None:
        """An idle worker, or None when the caller may start one (a slot is reserved for it)."""
        with self._cond:
            while not self._idle and self._live >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._live += 1
            return None

    def release(self, worker: Worker | None) -> None:
        """Return a healthy worker, or None to free the slot of a dead one."""
        with self._cond:
            if worker is None:
                self._live -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._live -= len(idle)
        for worker in idle:
            worker.kill()


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> Pool:
    global _POOL
    with _POOL_LOCK:
        # A forked child must not share its parent's workers (their pipes are the parent's).
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = Pool(WORKERS)
        return _POOL


def shutdown() -> None:
    """Kill the idle workers (busy ones are killed by their caller's timeout or returned and reused)."""
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()


atexit.register(shutdown)


def run_isolated(fn, *args, timeout_s: float, pool: Pool | None = None):
    """(True, fn(*args)) from a worker process, or (False, reason): reason says the check timed out after
    timeout_s, that its worker died (the worker is then replaced), or which exception fn raised.

    fn must be a module-level function of an importable module (not `__main__`, a lambda or a closure):
    the worker imports it by name, with this process's sys.path. The timeout counts from when a worker
    takes the check, not the wait for a free one; the first check on a new worker includes its start-up.
    pool: a private Pool (e.g. bulk task generation with its own worker count); default the shared one.
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if module in (None, "__main__") or "<" in qualname:
        raise ValueError(f"run_isolated needs a module-level function of an importable module, got {fn!r}")
    path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    request = encode((path, module, qualname, args))  # unpicklable args raise here, before any worker
    pool = pool if pool is not None else _pool()
    for attempt in range(2):  # a worker found dead before it took the check is replaced, and the check retried
        worker = pool.acquire()
        try:
            if worker is None or not worker.alive():
                if worker is not None:
                    worker.kill()
                worker = Worker()
            ok, value = worker.call(request, timeout_s)
        except WorkerGone as err:
            pool.release(None)
            if attempt == 0:
                continue
            return False, str(err)
        except WorkerLost as err:
            pool.release(None)
            return False, str(err)
        except OSError as err:  # the worker could not be started (process limit, out of memory)
            pool.release(None)
            return False, f"worker could not start: {describe(err)}"
        except BaseException:  # e.g. KeyboardInterrupt mid-check: the worker's state is unknown
            if worker is not None:
                worker.kill()
            pool.release(None)
            raise
        pool.release(worker)
        return (True, value) if ok else (False, f"check raised {value}")
    raise AssertionError("unreachable")


def worker_pids() -> list[int]:
    """Process ids of the idle workers (for tests and diagnostics)."""
    pool = _pool()
    with pool._cond:
        return [w.proc.pid for w in pool._idle]


def wait_idle(n: int, timeout_s: float = 10.0) -> bool:
    """True once n workers are idle (tests use it before looking at worker_pids)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(worker_pids()) >= n:
            return True
        time.sleep(0.01)
    return False
