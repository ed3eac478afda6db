"""Agent environments that work in a sandboxed workspace: one uid and one workspace per episode."""

import contextlib
import logging
import os

from rlpt.envs.base import ToolEnv
from rlpt.envs.sandbox import Limits, default_checker
from rlpt.envs.sandbox.layers import sandbox_python
from rlpt.envs.sandbox.workspace import CopyReport, Workspace, dump_tree, load_tree, read_inside, write_inside

_log = logging.getLogger(__name__)


class WorkspaceEnv(ToolEnv):
    """checker: an envs.sandbox.CodeChecker (default: the process-wide one); limits: per command."""

    def __init__(self, *, checker=None, limits: Limits | None = None, keep_failed_dir: str | None = None, **kw):
        super().__init__(**kw)
        self._checker = checker
        self.limits = limits or Limits(wall_s=10.0, memory_mb=512, nproc=64)
        self.keep_failed_dir = keep_failed_dir
        self._stack: contextlib.ExitStack | None = None
        self.ws: Workspace | None = None
        self.uid = None
        self.last_kept: CopyReport | None = None

    @property
    def checker(self):
        if self._checker is None:
            self._checker = default_checker()
        return self._checker

    def _open_workspace(self, files: dict[str, str]) -> None:
        self._stack = contextlib.ExitStack()
        self.uid = self._stack.enter_context(self.checker.sandbox.uid())
        owner = self.uid.uid if self.uid is not None else None
        self.ws = self._stack.enter_context(Workspace(None, owner_uid=owner, size_mb=self.limits.workspace_mb))
        for rel, content in files.items():
            write_inside(self.ws.path, rel, content, owner)
        self.ws.snapshot()  # layer 1: the task's starting files; rollback(1) returns here

    def write(self, rel: str, content: str) -> None:
        write_inside(self.ws.path, rel, content, self.uid.uid if self.uid is not None else None)

    def read(self, rel: str) -> str | None:
        """A workspace file's text, None if absent; ValueError if it is not a regular file (never blocks)."""
        return read_inside(self.ws.path, rel)

    def run_command(self, argv: list[str], stdin: bytes = b"") -> str:
        """Run argv in the episode's workspace; the policy sees exit code, stdout and stderr."""
        r = self.checker.sandbox.run(argv, limits=self.limits, workspace=self.ws.path, stdin=stdin, slot=self.uid)
        note = f" (killed: {r.killed_for})" if r.killed_for else ""
        return f"exit code: {r.exit_code}{note}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"

    def python_argv(self) -> list[str]:
        return [sandbox_python(), "-"]  # not -I: the policy's code may import its own workspace modules

    def episode_state(self) -> dict:
        """The base state plus the workspace's files (`dump_tree`: regular files, folders and links; a FIFO,
        socket or device in it is a ValueError)."""
        return {**super().episode_state(), "workspace": dump_tree(self.ws.path, self.limits.workspace_mb << 20)}

    def restore_episode(self, state: dict) -> None:
        super().restore_episode(state)
        load_tree(self.ws.path, state["workspace"], self.uid.uid if self.uid is not None else None)

    def keep_if_failed(self, passed: bool) -> None:
        """Copy a failed episode's workspace aside for the data flywheel (when keep_failed_dir is set).

        Only folders, regular files (setuid/setgid bits dropped) and symlinks leading further down are kept;
        what was skipped (FIFOs, sockets, links out, over the size budget) is logged and kept in last_kept.
        """
        if self.keep_failed_dir and self.ws is not None and not passed:
            dest = os.path.join(self.keep_failed_dir, str(self.task.id).replace("/", "_") + f"-{id(self):x}")
            if not os.path.exists(dest):
                self.last_kept = self.ws.keep(dest)
                if self.last_kept.skipped:
                    _log.warning("kept %s without %s", dest, self.last_kept.skipped[:20])

    def _end_episode(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            self.ws, self.uid = None, None
            stack.close()
