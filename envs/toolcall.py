"""Tool calls in the Hermes/Qwen format: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.

A malformed call is returned as a ToolCallError in the list, so the environment can answer it with an
error observation instead of crashing.
"""

import dataclasses
import json
import re

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict


@dataclasses.dataclass(frozen=True)
class ToolCallError:
    message: str
    raw: str


def parse_tool_calls(text: str) -> list[ToolCall | ToolCallError]:
    """Every <tool_call> block in text, in order; an unclosed block is an error too."""
    out: list[ToolCall | ToolCallError] = []
    for m in _CALL.finditer(text):
        out.append(_parse_one(m.group(1).strip()))
    tail = _CALL.sub("", text)
    if "<tool_call>" in tail:
        out.append(
            ToolCallError("unclosed <tool_call> (missing </tool_call>)", tail[tail.index("<tool_call>") :][:200])
        )
    return out


def _parse_one(body: str) -> ToolCall | ToolCallError:
    try:
        obj = json.loads(body)
    except ValueError as e:
        return ToolCallError(f"tool call is not valid JSON: {e}", body[:200])
    if not isinstance(obj, dict):
        return ToolCallError("tool call must be a JSON object with 'name' and 'arguments'", body[:200])
    name, args = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        return ToolCallError("tool call needs a string 'name'", body[:200])
    if isinstance(args, str):  # some models emit the arguments as a JSON-encoded string
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as e:
            return ToolCallError(f"'arguments' string is not valid JSON: {e}", body[:200])
    if not isinstance(args, dict):
        return ToolCallError("'arguments' must be a JSON object", body[:200])
    return ToolCall(name, args)


def format_tool_call(name: str, arguments: dict) -> str:
    """The text a policy emits to call a tool (used by tests and scripted policies)."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def format_tool_response(name: str, content: str) -> str:
    """How a tool result is shown to the policy."""
    return f'<tool_response name="{name}">\n{content}\n</tool_response>'
