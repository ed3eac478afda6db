"""ShellAgent: shell commands in a sandboxed workspace, verified on the files' target state.

Task meta: files {path: text} to start from; target {path: text, or None for 'must not exist'}.
"""

from rlpt.envs.builtin_tasks import shell_task
from rlpt.envs.sandboxed import WorkspaceEnv
from rlpt.envs.tools import Tool, ToolRegistry

from rlpt.tasks.base import render_prompt

_SCHEMAS = {
    "shell": {
        "type": "object",
        "properties": {"command": {"type": "string", "minLength": 1}},
        "required": ["command"],
        "additionalProperties": False,
    },
    "submit": {"type": "object", "properties": {}, "additionalProperties": False},
}


class ShellAgentEnv(WorkspaceEnv):
    """Ends with reward 1 as soon as the target state holds, on submit, or at the step/time limit."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.registry = ToolRegistry(
            [
                Tool("shell", "Run a /bin/sh command in the workspace.", _SCHEMAS["shell"], lambda **a: ""),
                Tool("submit", "Declare the task done.", _SCHEMAS["submit"], lambda **a: ""),
            ]
        )

    def default_task(self, seed: int):
        return shell_task(seed)

    def _start(self, task, options: dict):
        if not isinstance(task.meta.get("target"), dict) or not task.meta["target"]:
            raise KeyError(f"ShellAgent task {task.id} needs a non-empty meta['target']")
        self._open_workspace(task.meta.get("files", {}))
        return f"{render_prompt(task.prompt)}\n\nTools: shell, submit.", {"tools": self.registry.specs()}

    def target_state(self) -> dict:
        """{path: bool} whether each target file matches."""
        out = {}
        for rel, want in self.task.meta["target"].items():
            try:
                got = self.read(rel)
            except (ValueError, OSError, IsADirectoryError):
                got = object()
            out[rel] = got is None if want is None else got == want
        return out

    def run_shell(self, command: str) -> str:
        """One `shell` call: a fresh /bin/sh in the sandbox (TerminalAgent keeps one alive instead)."""
        return self.run_command(["/bin/sh", "-c", command])

    def _dispatch(self, call):
        err = self.registry.validate(call.name, call.arguments)
        if err:
            return f"error: {err}", False, 0.0, {"error": "invalid_call"}
        if call.name == "shell":
            text = self.run_shell(call.arguments["command"])
            state = self.target_state()
            if all(state.values()):
                return text, True, 1.0, {"target": state}
            return text, False, 0.0, {}
        state = self.target_state()
        ok = all(state.values())
        self.keep_if_failed(ok)
        return (
            f"submitted: {'target reached' if ok else 'target not reached'}",
            True,
            float(ok),
            {"target": state},
        )

    def _final_reward(self):
        state = self.target_state()
        self.keep_if_failed(all(state.values()))
        return float(all(state.values())), {"target": state}
