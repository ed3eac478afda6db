"""RepoAgent: fix a generated multi-file Python package with the usual tools; graded by hidden tests run from a
trusted copy.

Task meta: as `rlpt.tasks.native.repo.generate_repo` (files, hidden, failing, package). Tools: list_dir,
read_file, search, write_file, apply_patch (replace one exact occurrence), run_tests (the visible tests, from
the workspace), run (a /bin/sh command), submit. Every command runs in the sandbox, in the episode's workspace.

Grading (`rlpt.tasks.native.repo.verify_repo`) never runs anything from the workspace: it reads the package's
modules (regular files only), embeds them in a loader and runs each hidden test in the split grader
(`envs.sandbox.CodeChecker`: the tests in a trusted process, the package in the sandbox, only plain values
crossing). Edited tests, a changed
runner, a conftest / sitecustomize / usercustomize / .pth file and symlinks are flagged and pay 0; a process a
command leaves behind is killed with the command's sandbox and flagged.
"""
import os

from rlpt.envs.base import verdict_info
from rlpt.envs.builtin_tasks import EnvTask
from rlpt.envs.sandbox.workspace import resolve_inside
from rlpt.envs.sandboxed import WorkspaceEnv
from rlpt.envs.tools import Tool, ToolRegistry

from rlpt.rewards import Verdict
from rlpt.tasks.native.repo import generate_repo, repo_prompt, verify_repo

MAX_SHOWN = 4000  # characters of a file or command output the policy sees
_LINGER = "__rlpt_lingering__"
_STR = {"type": "string"}
_SCHEMAS = {
    "list_dir": {"type": "object", "properties": {"path": _STR}, "additionalProperties": False},
    "read_file": {"type": "object", "properties": {"path": _STR}, "required": ["path"], "additionalProperties": False},
    "search": {"type": "object", "properties": {"pattern": {"type": "string", "minLength": 1}},
               "required": ["pattern"], "additionalProperties": False},
    "write_file": {"type": "object", "properties": {"path": {"type": "string", "minLength": 1}, "content": _STR},
                   "required": ["path", "content"], "additionalProperties": False},
    "apply_patch": {"type": "object", "properties": {"path": {"type": "string", "minLength": 1},
                                                     "old": {"type": "string", "minLength": 1}, "new": _STR},
                    "required": ["path", "old", "new"], "additionalProperties": False},
    "run_tests": {"type": "object", "properties": {}, "additionalProperties": False},
    "run": {"type": "object", "properties": {"command": {"type": "string", "minLength": 1}},
            "required": ["command"], "additionalProperties": False},
    "submit": {"type": "object", "properties": {}, "additionalProperties": False},
}
_DOCS = {
    "list_dir": "List a folder of the repository (default: its root).",
    "read_file": "Read a text file.",
    "search": "Search the repository's files for a regular expression; file:line: text per hit.",
    "write_file": "Write a text file.",
    "apply_patch": "Replace the one exact occurrence of `old` in a file with `new`.",
    "run_tests": "Run the visible tests (python run_tests.py).",
    "run": "Run a /bin/sh command in the repository.",
    "submit": "Submit the repository and end.",
}


class RepoAgentEnv(WorkspaceEnv):
    """Ends on submit or at the step / time limit (then graded as the workspace stands)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.registry = ToolRegistry([Tool(n, _DOCS[n], s, lambda **a: "") for n, s in _SCHEMAS.items()])
        self.flags: set[str] = set()

    def default_task(self, seed: int):
        meta = generate_repo(seed, 1)
        return EnvTask("agent/repo", f"agent/repo/1/{seed}", repo_prompt(meta), 1, meta, "rlpt/RepoAgent-v0")

    def _start(self, task, options: dict):
        for key in ("files", "hidden", "failing", "package"):
            if key not in task.meta:
                raise KeyError(f"RepoAgent task {task.id} has no meta[{key!r}]")
        self.flags = set()
        self._open_workspace(task.meta["files"])
        prompt = task.prompt if isinstance(task.prompt, str) else repo_prompt(task.meta)
        return f"{prompt}\n\nTools: {', '.join(self.registry.names())}.", {"tools": self.registry.specs()}

    def episode_state(self) -> dict:
        return {**super().episode_state(), "flags": sorted(self.flags)}

    def restore_episode(self, state: dict) -> None:
        super().restore_episode(state)
        self.flags = set(state["flags"])

    def grade(self) -> Verdict:
        v = verify_repo(self.checker, self.ws.path, self.task.meta, timeout_s=self.limits.wall_s,
                        extra_flags=self.flags)
        self.keep_if_failed(v.passed)
        return v

    def _run_shell(self, command: str) -> str:
        # The command runs in a subshell (an `exit` in it cannot skip what follows); then the script lists what
        # still runs in its sandbox (the PID namespace dies with it, killing them): a process left behind is
        # flagged. The report can only add a flag, so forging it gains nothing.
        script = f"( eval {shell_quote(command)} ) < /dev/null\n__rc=$?\nfor p in /proc/[0-9]*; do " \
                 f"[ \"${{p#/proc/}}\" = \"$$\" ] || {{ [ -r $p/stat ] && echo {_LINGER}; }}; done\nexit $__rc"
        text = self.run_command(["/bin/sh", "-c", script])
        if _LINGER in text:
            self.flags.add("background_process")
            text = text.replace(_LINGER + "\n", "")
        return text

    def _dispatch(self, call):
        err = self.registry.validate(call.name, call.arguments)
        if err:
            return f"error: {err}", False, 0.0, {"error": "invalid_call"}
        a, name = call.arguments, call.name
        try:
            if name == "list_dir":
                return self._list(a.get("path") or "."), False, 0.0, {}
            if name == "read_file":
                text = self.read(a["path"])
                return (f"error: no file {a['path']}" if text is None else _clip(text)), False, 0.0, {}
            if name == "search":
                return self._search(a["pattern"]), False, 0.0, {}
            if name == "write_file":
                self.write(a["path"], a["content"])
                return f"wrote {len(a['content'])} characters to {a['path']}", False, 0.0, {}
            if name == "apply_patch":
                return self._patch(a["path"], a["old"], a["new"]), False, 0.0, {}
        except (ValueError, OSError) as e:
            return f"error: {e}", False, 0.0, {"error": f"{name}_failed"}
        if name == "run_tests":
            return _clip(self._run_shell(f"{self._python()} run_tests.py")), False, 0.0, {}
        if name == "run":
            return _clip(self._run_shell(a["command"])), False, 0.0, {}
        v = self.grade()
        info = {"verdict": verdict_info(v)}
        return ("submitted: " + ("passed" if v.passed else "failed")), True, float(v.score), info

    def _python(self) -> str:
        return self.python_argv()[0]

    def _list(self, rel: str) -> str:
        path = resolve_inside(self.ws.path, rel)
        if not os.path.isdir(path) or os.path.islink(path):
            return f"error: no folder {rel}"
        names = sorted(n + ("/" if os.path.isdir(os.path.join(path, n)) else "") for n in os.listdir(path))
        return "\n".join(names) or "(empty)"

    def _search(self, pattern: str) -> str:
        """grep -E over the repository's text files, in the sandbox (its time limit bounds any pattern)."""
        r = self.checker.sandbox.run(["grep", "-rnIE", "-m", "50", "-e", pattern, "--", "."], limits=self.limits,
                                     workspace=self.ws.path, slot=self.uid)
        if r.killed_for:
            return f"error: search stopped ({r.killed_for})"
        if r.exit_code == 2:
            return f"error: {r.stderr.strip()[:300]}"
        hits = [line[2:] if line.startswith("./") else line for line in r.stdout.splitlines()]
        if not hits:
            return "no matches"
        return "\n".join(hits[:50]) + (f"\n... {len(hits) - 50} more" if len(hits) > 50 else "")

    def _patch(self, rel: str, old: str, new: str) -> str:
        text = self.read(rel)
        if text is None:
            return f"error: no file {rel}"
        n = text.count(old)
        if n != 1:
            return f"error: `old` occurs {n} times in {rel}; it must occur exactly once"
        self.write(rel, text.replace(old, new, 1))
        return f"patched {rel}"

    def _final_reward(self):
        v = self.grade()
        return float(v.score), {"verdict": verdict_info(v)}


def shell_quote(text: str) -> str:
    """`text` as one single-quoted /bin/sh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + f"\n... ({len(text) - MAX_SHOWN} more characters)"
