"""CodeAgent: write files, run Python and the tests in a sandbox, submit; graded by hidden tests.

Task meta: files {path: text}, tests (defines check(candidate)), entry_point, solution_file.
The hidden tests never enter the workspace; they run in a separate process against the solution.
"""

from rlpt.envs.base import verdict_info
from rlpt.envs.builtin_tasks import code_task
from rlpt.envs.sandboxed import WorkspaceEnv
from rlpt.envs.tools import Tool, ToolRegistry

from rlpt.rewards import Verdict
from rlpt.tasks.base import render_prompt

_SCHEMAS = {
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string", "minLength": 1}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    "run_python": {
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
        "additionalProperties": False,
    },
    "run_tests": {"type": "object", "properties": {}, "additionalProperties": False},
    "submit": {"type": "object", "properties": {}, "additionalProperties": False},
}
_DOCS = {
    "write_file": "Write a text file in the workspace.",
    "run_python": "Run Python code in the workspace.",
    "run_tests": "Run the tests on the solution file.",
    "submit": "Submit the solution and end.",
}


class CodeAgentEnv(WorkspaceEnv):
    """Ends when the tests pass, on submit, or at the step or time limit (then graded as it stands)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.registry = ToolRegistry([Tool(n, _DOCS[n], s, lambda **a: "") for n, s in _SCHEMAS.items()])

    def default_task(self, seed: int):
        return code_task(seed)

    def _start(self, task, options: dict):
        for key in ("tests", "entry_point"):
            if key not in task.meta:
                raise KeyError(f"CodeAgent task {task.id} has no meta[{key!r}]")
        self._open_workspace(task.meta.get("files", {}))
        tools = ", ".join(self.registry.names())
        return f"{render_prompt(task.prompt)}\n\nTools: {tools}.", {"tools": self.registry.specs()}

    def _grade(self):
        meta = self.task.meta
        try:
            source = self.read(meta.get("solution_file", "solution.py")) or ""
        except ValueError as e:  # a FIFO, folder or symlink out where the solution should be: a failure
            v = Verdict(0.0, False, {"error": f"solution_unreadable: {e}", "flags": []})
        else:
            v = self.checker.check(source, meta["tests"], meta["entry_point"], timeout_s=self.limits.wall_s)
        self.keep_if_failed(v.passed)
        return v

    def _dispatch(self, call):
        err = self.registry.validate(call.name, call.arguments)
        if err:
            return f"error: {err}", False, 0.0, {"error": "invalid_call"}
        a = call.arguments
        if call.name == "write_file":
            try:
                self.write(a["path"], a["content"])
            except (ValueError, OSError) as e:
                return f"error: {e}", False, 0.0, {"error": "write_failed"}
            return f"wrote {len(a['content'])} characters to {a['path']}", False, 0.0, {}
        if call.name == "run_python":
            return self.run_command(self.python_argv(), a["code"].encode()), False, 0.0, {}
        v = self._grade()
        info = {"verdict": verdict_info(v)}
        if call.name == "run_tests":
            if v.passed:
                return "all tests passed", True, float(v.score), info
            # only the kind of failure: assertion messages could reveal expected outputs
            kind = str(v.details.get("error") or "failed").split(":")[0]
            return f"tests failed ({kind})", False, 0.0, info
        return ("submitted: " + ("passed" if v.passed else "failed")), True, float(v.score), info

    def _final_reward(self):
        v = self._grade()
        return float(v.score), {"verdict": verdict_info(v)}
