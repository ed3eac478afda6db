"""Bfcl: a BFCL item's functions offered as schema-checked tools; calls are recorded, never run, and graded by
BFCL's AST rules (rlpt/tasks/bfcl_check.py) when the policy calls `final_answer` or the turn limit ends it.

Task meta (from `bfcl_tasks`): functions (BFCL's function docs), ground_truth ({name: {param: [possible
values]}} per expected call), category (BFCL's, decides ordered vs any-order matching).
"""

import dataclasses
import functools
import json

from rlpt.envs.base import ToolEnv
from rlpt.envs.toolcall import format_tool_call
from rlpt.envs.tools import Tool, ToolRegistry

from rlpt.tasks import bfcl
from rlpt.tasks.base import render_prompt
from rlpt.tasks.bfcl_check import check_calls

ENV_ID = "rlpt/Bfcl-v0"
END_TOOL = "final_answer"
# BFCL's parameter types -> JSON-schema types; "any" gets no type constraint.
_TYPES = {"string": "string", "integer": "integer", "float": "number", "boolean": "boolean", "array": "array",
          "tuple": "array", "dict": "object", "any": None}
_KEEP = ("description", "default", "minimum", "maximum")  # BFCL's "optional" and "format" are dropped
# Items whose gold calls break their own declared types (a string for an array, strings in an integer list, True or
# 2 for a string, None for a string): BFCL passes only the off-type value, which the schema rejects, so no call can
# score; `schema_violation` finds them and the test pins the list.
EXCLUDED = ("parallel_multiple_21", "parallel_multiple_94", "live_multiple_552-153-1", "live_multiple_595-158-1",
            "live_multiple_596-158-2", "live_multiple_731-167-2", "live_multiple_733-167-4",
            "live_multiple_735-167-6", "live_multiple_1038-265-0")
_END = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "additionalProperties": False,
}
INSTRUCTIONS = (
    "You are given a question and a set of functions (tools). Make the function call(s) that achieve the purpose, "
    'each as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>, then call {end} (no arguments) to '
    "finish. Use only the declared parameters, with values of the declared types.\nTools (JSON schema):\n{tools}\n"
)


def json_schema(spec: dict, where: str) -> dict:
    """One BFCL parameter spec (recursively) as JSON schema; raises naming `where` on an unknown type."""
    out = {k: spec[k] for k in _KEEP if k in spec}
    if "enum" in spec:  # shown, not enforced: BFCL's checker ignores enums and its gold leaves them (case, types)
        out["description"] = f"{spec.get('description', '')} Allowed values: {json.dumps(spec['enum'])}.".strip()
    kind = spec.get("type")
    if kind is not None:
        if kind not in _TYPES:
            raise ValueError(f"{where}: BFCL type {kind!r} has no JSON-schema equivalent (known: {sorted(_TYPES)})")
        if _TYPES[kind] is not None:
            out["type"] = _TYPES[kind]
    if "properties" in spec:
        out["properties"] = {p: json_schema(s, f"{where}.{p}") for p, s in spec["properties"].items()}
    if "required" in spec:
        out["required"] = list(spec["required"])
    if "items" in spec:
        out["items"] = json_schema(spec["items"], f"{where}[]")
    return out


def function_tool(func: dict) -> Tool:
    """A BFCL function doc as a registry Tool whose handler only acknowledges (calls are recorded by the env)."""
    schema = json_schema(func["parameters"], func["name"])
    schema.update(type="object", additionalProperties=False)  # BFCL rejects undeclared top-level parameters
    schema.setdefault("properties", {})
    return Tool(func["name"], func.get("description", ""), schema, lambda **_: "call recorded")


def gold_calls(answers: list[dict], funcs: list[dict]) -> list[tuple[str, dict]]:
    """The expected calls as (name, arguments), chosen as bfcl.render_calls chooses them (first possible value;
    optional parameters omitted unless declared required)."""
    required = {f["name"]: set(f["parameters"].get("required", [])) for f in funcs}
    out = []
    for answer in answers:
        ((name, params),) = answer.items()
        args = {p: bfcl.gold_value(bfcl.first_answer(values)) for p, values in params.items()
                if values and ("" not in values or p in required.get(name, ()))}
        out.append((name, args))
    return out


def schema_violation(task) -> str | None:
    """The first gold call the task's tool schemas reject, as the registry's message, or None."""
    reg = ToolRegistry([function_tool(f) for f in task.meta["functions"]])
    for name, args in gold_calls(task.meta["ground_truth"], task.meta["functions"]):
        err = reg.validate(name, args)
        if err:
            return err
    return None


def oracle_reply(task) -> str:
    """The gold reply: one <tool_call> per expected call, then the end action."""
    calls = gold_calls(task.meta["ground_truth"], task.meta["functions"])
    return "\n".join([format_tool_call(n, a) for n, a in calls] + [format_tool_call(END_TOOL, {})])


@functools.lru_cache(maxsize=1)
def bfcl_tasks() -> tuple:
    """The `bfcl` suite's items (less EXCLUDED) with tool-call prompts: instructions, tool schemas, user turn(s)."""
    out = []
    for t in bfcl.load_tasks():
        if t.id in EXCLUDED:
            continue
        specs = [function_tool(f).spec() for f in t.meta["functions"]]
        head = bfcl.SYSTEM.format(functions=json.dumps(t.meta["functions"])) + "\n"
        if not t.prompt.startswith(head):
            raise ValueError(f"bfcl task {t.id!r}: prompt does not start with bfcl.SYSTEM; cannot cut the user turns")
        user = t.prompt[len(head):]  # the item's "role: content" turns
        prompt = INSTRUCTIONS.format(end=END_TOOL, tools=json.dumps(specs, ensure_ascii=False)) + "\n" + user
        out.append(dataclasses.replace(t, prompt=prompt, env_id=ENV_ID, meta={**t.meta, "answer": oracle_reply(t)}))
    return tuple(out)


class BfclEnv(ToolEnv):
    """Offers the task's functions plus `final_answer`; reward 1.0 when the recorded calls pass BFCL's check."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.registry, self.calls = None, []

    def default_task(self, seed: int):
        tasks = bfcl_tasks()
        return tasks[seed % len(tasks)]

    def _start(self, task, options: dict):
        for key in ("functions", "ground_truth", "category"):
            if key not in task.meta:
                raise KeyError(f"Bfcl task {task.id!r} lacks meta[{key!r}]")
        reg = ToolRegistry([function_tool(f) for f in task.meta["functions"]])
        if END_TOOL in reg.names():
            raise ValueError(f"Bfcl task {task.id!r} declares a function named {END_TOOL!r}, the end action")
        reg.register(Tool(END_TOOL, "End the episode: all calls are made.", _END, lambda **_: "done"))
        self.registry, self.calls = reg, []
        return render_prompt(task.prompt), {"tools": reg.specs()}

    def episode_state(self) -> dict:
        return {**super().episode_state(), "calls": self.calls}

    def restore_episode(self, state: dict) -> None:
        super().restore_episode(state)
        self.calls = [dict(c) for c in state["calls"]]

    def _dispatch(self, call):
        err = self.registry.validate(call.name, call.arguments)
        if err:
            return f"error: {err}", False, 0.0, {"error": "invalid_call", "message": err}
        if call.name == END_TOOL:
            reward, final = self._final_reward()
            return f"{len(self.calls)} call(s) recorded; episode over", True, reward, final
        self.calls.append({call.name: dict(call.arguments)})
        return f"call recorded: {call.name}", False, 0.0, {}

    def _final_reward(self) -> tuple[float, dict]:
        m = self.task.meta
        why = check_calls(m["functions"], self.calls, m["ground_truth"], m["category"])
        return float(why is None), {"passed": why is None, "error": why, "recorded": len(self.calls)}
