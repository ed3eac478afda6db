"""TerminalAgent: a shell task in a persistent terminal. One sandboxed /bin/sh lives for the whole episode
(`envs.sandbox.session.ShellSession`): the working directory, variables, functions and background jobs carry
from one `shell` call to the next. Graded, like ShellAgent, by the workspace's final state.

Task meta: files {path: text} to start from; target {path: text, or None for 'must not exist'}. The episode
ends with reward 1 as soon as the target state holds, on submit, or at the step / time limit.
"""
from rlpt.envs.builtin_tasks import terminal_task
from rlpt.envs.sandbox.limits import Limits
from rlpt.envs.sandbox.session import ShellSession
from rlpt.envs.shell_agent import ShellAgentEnv

from rlpt.tasks.base import render_prompt


class TerminalAgentEnv(ShellAgentEnv):
    """session_limits bound the session as a whole (CPU budget, processes, memory, background jobs included);
    each command gets limits.wall_s."""

    def __init__(self, *, session_limits: Limits | None = None, **kw):
        super().__init__(**kw)
        self.session_limits = session_limits or Limits(wall_s=3600.0, cpu_s=120, memory_mb=512, nproc=64)
        self.session: ShellSession | None = None

    def default_task(self, seed: int):
        return terminal_task(seed)

    def _start(self, task, options: dict):
        obs, info = super()._start(task, options)
        seccomp = "seccomp" in self.checker.sandbox.layers
        self.session = ShellSession(self.ws.path, limits=self.session_limits, slot=self.uid, use_seccomp=seccomp)
        return (f"{render_prompt(task.prompt)}\n\nTools: shell (one terminal for the whole task: cd, variables and "
                "background jobs persist), submit."), info

    def episode_state(self) -> dict:
        raise ValueError("a TerminalAgent episode cannot be paused: its live shell (working directory, variables, "
                         "background jobs) is not part of a checkpoint; set rl.rollout.partial.enabled=false")

    def run_shell(self, command: str) -> str:
        r = self.session.run(command, timeout_s=self.limits.wall_s)
        note = {"deadline": " (killed: deadline)", "output": " (killed: output)",
                "shell_exited": " (the shell exited)"}.get(r.killed_for, "")
        head = "(the terminal was restarted: shell state was lost, files were kept)\n" if r.restarted else ""
        return f"{head}exit code: {r.exit_code}{note}\noutput:\n{r.output}"

    def _end_episode(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        super()._end_episode()
