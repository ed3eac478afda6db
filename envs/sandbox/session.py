"""ShellSession: one /bin/sh in its own sandbox for a whole episode, so the working directory, variables,
functions and background jobs carry from one command to the next (a terminal, not a fresh shell per command).

Each command is sent on the shell's stdin with its own stdin from /dev/null, followed by a line that prints a
random end marker and the exit status; the output up to the marker is the command's. A command that passes
its deadline, floods its output or ends the shell (`exit`, a crash, the session's CPU budget) kills the session;
the next command starts a fresh one in the same workspace (files stay, shell state is lost) and the reply says so.
The session's limits bound everything it runs together: `cpu_s` is the episode's CPU budget, `nproc` and
`memory_mb` cap background jobs too, and they all die with the session (its PID namespace) at close().
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import selectors
import subprocess
import time

from rlpt.envs.sandbox import executor
from rlpt.envs.sandbox.limits import Limits


@dataclasses.dataclass(frozen=True)
class ShellReply:
    output: str  # stdout and stderr together, as a terminal shows them
    exit_code: int | None  # None when the command did not finish (see killed_for)
    killed_for: str | None = None  # None, 'deadline', 'output' or 'shell_exited': the session was restarted
    restarted: bool = False


class ShellSession:
    """A persistent sandboxed shell in `workspace` (a host folder, mounted at /workspace). run(command,
    timeout_s) -> ShellReply. Not thread-safe: one episode drives it."""

    def __init__(self, workspace: str, *, limits: Limits, slot=None, use_seccomp: bool = True,
                 shell: str = "/bin/sh"):
        self.workspace, self.limits, self.slot = workspace, limits, slot
        self.use_seccomp, self.shell = use_seccomp, shell
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._lost = False  # the last command killed the session: the next reply says it restarted

    def _start(self) -> None:
        self.proc = executor.spawn([self.shell], limits=self.limits, slot=self.slot, workspace=self.workspace,
                                   use_seccomp=self.use_seccomp, stderr=subprocess.STDOUT)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, command: str, timeout_s: float = 10.0) -> ShellReply:
        restarted, self._lost = self._lost or (self.proc is not None and not self.alive()), False
        if not self.alive():
            self.close()
            self._start()
        marker = "__rlpt_end_" + secrets.token_hex(8)
        script = f"{{\n{command}\n}} < /dev/null\nprintf '\\n{marker} %s\\n' \"$?\"\n"
        try:
            self.proc.stdin.write(script.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            self._lost = True
            return ShellReply("", None, "shell_exited", restarted)
        out, code, killed = self._read_until(marker.encode(), time.monotonic() + timeout_s)
        if killed is not None:
            self.close()  # the next command gets a fresh shell
            self._lost = True
        return ShellReply(out, code, killed, restarted)

    def _read_until(self, marker: bytes, deadline: float) -> tuple[str, int | None, str | None]:
        buf = bytearray()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                at = buf.find(b"\n" + marker + b" ")
                if at >= 0:
                    end = buf.find(b"\n", at + 1 + len(marker) + 1)
                    if end >= 0:
                        code = int(buf[at + 1 + len(marker) + 1:end] or b"-1")
                        return bytes(buf[:at]).decode("utf-8", errors="replace"), code, None
                left = deadline - time.monotonic()
                if left <= 0:
                    return bytes(buf).decode("utf-8", errors="replace"), None, "deadline"
                if not sel.select(timeout=min(left, 0.5)):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:  # the shell ended (exit, killed by its limits)
                    return bytes(buf).decode("utf-8", errors="replace"), None, "shell_exited"
                buf += chunk
                if len(buf) > self.limits.output_bytes:
                    return bytes(buf[:self.limits.output_bytes]).decode("utf-8", errors="replace"), None, "output"
        finally:
            sel.close()

    def close(self) -> None:
        """Kill the session and everything it started."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        executor._kill(proc, self.slot)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        executor.close_pidfd(proc)
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh is not None:
                fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
