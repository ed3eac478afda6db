"""ShellSession: one /bin/sh in its own sandbox for a whole episode, so the working directory, variables,
functions and background jobs carry from one command to the next (a terminal, not a fresh shell per command).

- Each command is sent on the shell's stdin as one quoted word run by `command eval`: a syntax error in it is
  the command's failure, not the shell's end (a function named `command` is unset first). Its stdin is
  /dev/null. Then `/usr/bin/printf` prints a random end marker and the exit status (a shell function cannot
  stand in for a path); the output up to the marker is the command's. What background jobs print between
  commands comes with the next command's output.
- A command that passes its deadline, floods its output or ends the shell (`exit`, `exec`, a crash, a resource
  limit) kills the session; the next command starts a fresh one in the same workspace (files stay, shell state
  is lost) and the reply says so.
- The session's limits are the sandbox's: rlimits per process (`cpu_s` is each process's CPU time, not a
  total), and where the host gives the slot cgroups, memory and the process count for the whole session,
  background jobs included; all of it dies with the session (its PID namespace) at close() or a restart.
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
        self._carry = b""  # output after the last marker (background jobs): the start of the next reply

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
        quoted = "'" + command.replace("'", "'\\''") + "'"
        # unset is a special builtin (no function can stand in for it): `command` is the shell's own again
        script = (f"unset -f command 2>/dev/null; command eval {quoted} < /dev/null\n"
                  f"/usr/bin/printf '\\n{marker} %s\\n' \"$?\"\n")
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
        buf, self._carry = bytearray(self._carry), b""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                at = buf.find(b"\n" + marker + b" ")
                if at >= 0:
                    end = buf.find(b"\n", at + 1 + len(marker) + 1)
                    if end >= 0:
                        status = bytes(buf[at + 1 + len(marker) + 1:end])
                        self._carry = bytes(buf[end + 1:])
                        code = int(status) if status.isdigit() else -1
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
        self._carry = b""
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh is not None:
                fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
