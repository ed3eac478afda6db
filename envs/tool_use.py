"""ToolUse: function calls against a registry of tools with JSON-schema arguments, then a final answer.

Task meta: tools (names from the registry), optional table {key: value} (adds a `lookup` tool), and
either answer (number: relative tolerance rel_tol; otherwise exact text) or a domain that verifies.
"""

import math

from rlpt.envs.base import ToolEnv, verdict_info
from rlpt.envs.builtin_tasks import tool_task
from rlpt.envs.single_turn import resolve_domain
from rlpt.envs.tools import Tool, ToolRegistry, builtin_registry

from rlpt.tasks.base import render_prompt

_FINAL = {
    "type": "object",
    "properties": {"answer": {"type": ["string", "number"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


class ToolUseEnv(ToolEnv):
    """registry: the tools available (default: built-in ones); domains: as for SingleTurnEnv."""

    def __init__(self, *, registry: ToolRegistry | None = None, domains: dict | None = None, **kw):
        super().__init__(**kw)
        self.base_registry = registry or builtin_registry()
        self.domains = dict(domains or {})
        self.registry = None

    def default_task(self, seed: int):
        return tool_task(seed)

    def _start(self, task, options: dict):
        names = task.meta.get("tools", self.base_registry.names())
        reg = self.base_registry.subset(list(names))
        table = task.meta.get("table")
        if table is not None:
            reg.register(
                Tool(
                    "lookup",
                    "Look up a key in the task's table.",
                    {
                        "type": "object",
                        "properties": {"key": {"type": "string"}},
                        "required": ["key"],
                        "additionalProperties": False,
                    },
                    lambda key: table[key] if key in table else f"no entry for {key!r}",
                )
            )
        reg.register(Tool("final_answer", "Give the final answer and end.", _FINAL, lambda answer: str(answer)))
        self.registry = reg
        return f"{render_prompt(task.prompt)}\n\nTools: {', '.join(reg.names())}.", {"tools": reg.specs()}

    def _dispatch(self, call):
        if call.name != "final_answer":
            ok, text = self.registry.call(call.name, call.arguments)
            return (text if ok else f"error: {text}"), False, 0.0, {} if ok else {"error": "tool_error"}
        err = self.registry.validate(call.name, call.arguments)
        if err:
            return f"error: {err}", False, 0.0, {"error": "invalid_call"}
        score, info = self._verify(call.arguments["answer"])
        return f"answer recorded: {call.arguments['answer']}", True, score, info

    def _verify(self, answer) -> tuple[float, dict]:
        meta = self.task.meta
        if "answer" not in meta:
            v = resolve_domain(self.task.domain, self.domains).verify(self.task, str(answer))
            return float(v.score), {"verdict": verdict_info(v)}
        want = meta["answer"]
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            try:
                got = float(answer)
            except (TypeError, ValueError):
                return 0.0, {"passed": False, "error": "answer is not a number"}
            ok = math.isclose(got, float(want), rel_tol=float(meta.get("rel_tol", 1e-6)), abs_tol=1e-12)
        else:
            ok = str(answer).strip() == str(want).strip()
        return float(ok), {"passed": bool(ok)}
