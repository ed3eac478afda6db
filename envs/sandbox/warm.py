"""Warm sandbox slots: one long-lived bwrap sandbox per slot whose pid 1 forks a child per verification.

Namespaces, uid, cgroups and seccomp are set up once per slot instead of once per run (~2 ms instead of
~25 ms per verification); between runs pid 1 kills every other process and empties /workspace, /tmp and
/dev/shm. Everything a slot says is checked (one status per job, echoing its sequence number, exact fields and
types); a slot that says anything else, or reports it could not empty itself, is closed and replaced.
"""

import itertools
import json
import os
import queue
import resource
import select
import socket
import subprocess
import threading
import time

from rlpt.envs.sandbox import executor
from rlpt.envs.sandbox import layers as L
from rlpt.envs.sandbox.limits import ExecResult, Limits, SandboxError

_HERE = os.path.dirname(os.path.abspath(__file__))
BINDS = tuple((os.path.join(_HERE, f), f"/rlpt/{f}") for f in ("agent.py", "wire.py", "zygote.py"))
_KILLED_FOR = (None, "deadline")  # what the zygote itself may report; the rest is derived here from the exit
_MAX_STATUS = 4096


def parse_status(data: bytes, seq: int) -> dict:
    """The zygote's status for job seq, or SandboxError: anything malformed means the slot is not trusted."""
    try:
        st = json.loads(data) if len(data) <= _MAX_STATUS else None
    except ValueError:
        st = None
    keys = {"seq", "clean", "exit_code", "killed_for", "wall_s", "cpu_s"}
    ok = (
        type(st) is dict
        and set(st) == keys
        and type(st["seq"]) is int
        and st["seq"] == seq
        and type(st["clean"]) is bool
        and type(st["exit_code"]) is int
        and -64 <= st["exit_code"] <= 255
        and st["killed_for"] in _KILLED_FOR
        and all(type(st[k]) in (int, float) and 0 <= st[k] < 1e9 for k in ("wall_s", "cpu_s"))
    )
    if not ok:
        raise SandboxError(f"warm sandbox sent a malformed status for job {seq}: {data[:200]!r}")
    return st


class WarmSlot:
    """One sandbox with a zygote as pid 1; run() is used by one thread at a time."""

    def __init__(self, slot: L.UidSlot | None, limits: Limits, use_seccomp: bool):
        self.slot, self.limits = slot, limits
        self._seq = itertools.count(1)
        self.reusable = True  # False once the slot said it could not empty itself: close it after this job
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        argv = [L.sandbox_python(), "-I", "-S", "/rlpt/zygote.py", str(theirs.fileno())]
        try:
            self.proc = executor.spawn(
                argv,
                limits=limits,
                slot=slot,
                ro_binds=BINDS,
                pass_fds=(theirs.fileno(),),
                use_seccomp=use_seccomp,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                die_with_parent=False,  # warm slots end when the control socket closes
            )
        finally:
            theirs.close()
        self.ctl = ours
        if self._recv(time.monotonic() + 30.0) != b'{"ready": true}':
            self.close()
            raise SandboxError("warm sandbox did not start")

    def _recv(self, deadline: float) -> bytes | None:
        """One message from the zygote (SOCK_SEQPACKET keeps message boundaries); None: closed or too late."""
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.ctl], [], [], left)[0]:
            return None
        data = self.ctl.recv(_MAX_STATUS + 1)
        return data or None

    def run(self, source: bytes, req: int, resp: int, limits: Limits) -> ExecResult:
        """Run agent.serve(source) on the (req, resp) channel in a fresh child; wait for it."""
        t0 = time.monotonic()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        rl = {
            "cpu": list(limits.rlimits()[resource.RLIMIT_CPU]),
            "as": [limits.memory_mb << 20] * 2,
            "fsize": [limits.file_mb << 20] * 2,
            "nofile": [limits.nofile] * 2,
            "nproc": [limits.nproc] * 2,
            "core": [0, 0],
        }
        mem_before = executor.memory_events(self.slot)
        seq = next(self._seq)
        job = json.dumps({"seq": seq, "timeout_s": limits.wall_s, "rlimits": rl}).encode()
        try:
            socket.send_fds(self.ctl, [job], [in_r, out_w, err_w, req, resp])
        except OSError as e:
            raise SandboxError(f"warm sandbox control channel broke: {e}") from e
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        writer = None
        if len(source) < 60000:  # fits in the pipe buffer: no thread needed
            _write_all(in_w, source)
        else:
            writer = threading.Thread(target=_write_all, args=(in_w, source), daemon=True)
            writer.start()
        bufs = {out_r: bytearray(), err_r: bytearray()}
        truncated, status = False, None
        deadline = t0 + limits.wall_s + 5.0
        open_fds = [out_r, err_r, self.ctl]
        closed: set[int] = set()
        try:
            while status is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxError("warm sandbox did not report back in time")
                for fd in select.select(open_fds, [], [], left)[0]:
                    if fd is self.ctl:
                        data = self._recv(deadline)
                        if data is None:
                            raise SandboxError("warm sandbox died")
                        status = parse_status(data, seq)
                        continue
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        open_fds.remove(fd)
                        continue
                    room = limits.output_bytes - len(bufs[fd])
                    bufs[fd] += chunk[: max(room, 0)]
                    if len(chunk) > room:  # stop reading: the writer gets EPIPE instead of filling memory
                        truncated = True
                        open_fds.remove(fd)
                        os.close(fd)
                        closed.add(fd)
            for fd in open_fds:  # the child and its descendants are gone: drain what is left
                if fd is not self.ctl:
                    while len(bufs[fd]) < limits.output_bytes and (chunk := os.read(fd, 1 << 16)):
                        bufs[fd] += chunk
        finally:
            if writer is not None:
                writer.join(timeout=1.0)
            for fd in (out_r, err_r):
                if fd not in closed:
                    os.close(fd)
        self.reusable = status["clean"]
        killed_for = status["killed_for"]
        code = status["exit_code"]
        if killed_for is None and code < 0:
            mem = executor.memory_hit(self.slot, mem_before)
            killed_for = "memory" if mem and code == -9 else ("cpu" if code == -24 else f"signal:{-code}")
        if truncated and killed_for in (None, "signal:13"):  # SIGPIPE: we stopped reading at the cap
            killed_for = "output"
        return ExecResult(
            stdout=bufs[out_r].decode("utf-8", "replace"),
            stderr=bufs[err_r].decode("utf-8", "replace"),
            exit_code=code,
            timed_out=killed_for == "deadline",
            killed_for=killed_for,
            wall_s=time.monotonic() - t0,
            cpu_s=status["cpu_s"],
            truncated=truncated,
        )

    def alive(self) -> bool:
        return self.reusable and self.proc.poll() is None

    def close(self) -> None:
        self.ctl.close()
        executor._kill(self.proc, self.slot)
        self.proc.wait()
        executor.close_pidfd(self.proc)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


class WarmPool:
    """A bounded set of warm slots over a Sandbox's uids; a broken slot is replaced, never reused."""

    def __init__(self, sandbox, limits: Limits):
        self.sandbox, self.limits = sandbox, limits
        self._free: queue.LifoQueue = queue.LifoQueue()
        for _ in range(sandbox.config.slots):
            self._free.put(None)
        self._lock = threading.Lock()
        self._all: list[tuple[WarmSlot, object]] = []

    def run(self, source: bytes, req: int, resp: int, limits: Limits) -> ExecResult:
        try:
            item = self._free.get(timeout=self.sandbox.config.acquire_timeout_s)
        except queue.Empty:
            raise SandboxError("no warm sandbox slot free in time") from None
        try:
            if item is None or not item[0].alive():
                if item is not None:
                    self._discard(item)
                ctx = self.sandbox.uid()
                uid_slot = ctx.__enter__()
                try:
                    item = (WarmSlot(uid_slot, self.limits, "seccomp" in self.sandbox.layers), ctx)
                except BaseException:
                    ctx.__exit__(None, None, None)
                    item = None
                    raise
                with self._lock:
                    self._all.append(item)
            try:
                res = item[0].run(source, req, resp, limits)
            except BaseException:  # a failed or interrupted job leaves the slot out of step: never reuse it
                self._discard(item)
                item = None
                raise
            if not item[0].reusable:
                self._discard(item)
                item = None
            return res
        finally:
            self._free.put(item)

    def _discard(self, item) -> None:
        with self._lock:
            if item in self._all:
                self._all.remove(item)
        item[0].close()
        item[1].__exit__(None, None, None)

    def close(self) -> None:
        with self._lock:
            items = list(self._all)
        for item in items:
            self._discard(item)
