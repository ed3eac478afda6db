"""The sandbox: bounded concurrency over per-slot uids, layer checks, retries on infrastructure errors."""

import contextlib
import dataclasses
import os
import queue
import threading

from rlpt.envs.sandbox import executor
from rlpt.envs.sandbox import layers as L
from rlpt.envs.sandbox.limits import ExecResult, IsolationError, Limits, SandboxError


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """slots: concurrent runs (each with its own uid when root); uids from [uid_base, uid_base + uid_count).
    min_layers: refuse to run when one of these is missing (None: layers.DEFAULT_MINIMUM)."""

    slots: int = 8
    uid_base: int = 61000
    uid_count: int = 512
    min_layers: tuple[str, ...] | None = None
    retries: int = 2
    acquire_timeout_s: float = 120.0
    limits: Limits = Limits()

    def __post_init__(self):
        if self.slots < 1 or self.uid_count < self.slots:
            raise ValueError(f"SandboxConfig needs 1 <= slots <= uid_count, got {self.slots}, {self.uid_count}")


class Sandbox:
    """Runs untrusted commands; thread-safe. `layers` lists the isolation layers in force."""

    def __init__(self, config: SandboxConfig = SandboxConfig()):
        self.config = config
        probed = L.probe()
        self.required = L.required_layers(config.min_layers)
        missing = [x for x in self.required if not probed[x]]
        if missing:
            raise IsolationError(
                f"isolation layers {missing} are required but unavailable here "
                f"(probed: {probed}); install bubblewrap and pyseccomp or lower min_layers"
            )
        self.layers = tuple(k for k, v in probed.items() if v)
        self._root = os.geteuid() == 0
        self._sem = threading.BoundedSemaphore(config.slots)
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._lock = threading.Lock()
        self._claimed: list[L.UidSlot] = []
        self._closed = False

    @contextlib.contextmanager
    def uid(self):
        """Lease a uid (with cgroups) for an episode; None when not root. Not a concurrency slot."""
        if self._closed:
            raise SandboxError("sandbox is closed")
        if not self._root:
            yield None
            return
        try:
            s = self._idle.get_nowait()
        except queue.Empty:
            lim = self.config.limits
            s = L.claim_uid(self.config.uid_base, self.config.uid_count, lim.memory_mb, lim.nproc)
            with self._lock:
                self._claimed.append(s)
        try:
            yield s
        finally:
            if not self._closed:  # after close() the uid is released and its cgroups are gone
                executor._kill_cgroup(s)
                self._idle.put(s)

    @contextlib.contextmanager
    def slot(self, uid=None):
        """One of config.slots concurrent runs, with a fresh uid lease unless an episode's uid is given."""
        if not self._sem.acquire(timeout=self.config.acquire_timeout_s):
            raise SandboxError(f"no sandbox slot free within {self.config.acquire_timeout_s} s")
        try:
            if uid is not None:
                yield uid
            else:
                with self.uid() as u:
                    yield u
        finally:
            self._sem.release()

    def run(
        self,
        argv: list[str],
        *,
        limits: Limits | None = None,
        workspace: str | None = None,
        stdin: bytes = b"",
        slot=None,
        ro_binds=(),
    ) -> ExecResult:
        """Run argv in /workspace (a fresh tmpfs, or the given host folder). Retries infrastructure errors."""
        return self.retrying(
            lambda: self.run_once(argv, limits=limits, workspace=workspace, stdin=stdin, slot=slot, ro_binds=ro_binds)
        )

    def retrying(self, attempt):
        """Call attempt() until it does not raise SandboxError, at most 1 + config.retries times."""
        last = None
        for _ in range(self.config.retries + 1):
            try:
                return attempt()
            except SandboxError as e:
                last = e
        raise SandboxError(f"sandbox failed {self.config.retries + 1} times: {last}")

    def run_once(
        self,
        argv: list[str],
        *,
        limits: Limits | None = None,
        workspace: str | None = None,
        stdin: bytes = b"",
        slot=None,
        ro_binds=(),
    ) -> ExecResult:
        """One attempt of run()."""
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(self.slot(slot))
            res = executor.execute(
                argv,
                limits=limits or self.config.limits,
                slot=s,
                workspace=workspace,
                stdin=stdin,
                ro_binds=tuple(ro_binds),
                use_seccomp="seccomp" in self.layers,
            )
            return dataclasses.replace(res, layers=self.layers)

    def close(self) -> None:
        """Release every uid and cgroup this sandbox claimed."""
        self._closed = True
        with self._lock:
            for s in self._claimed:
                executor._kill_cgroup(s)
                s.release()
            self._claimed.clear()
