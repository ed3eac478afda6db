"""A registry of tools a policy may call, each with a JSON schema for its arguments, and built-in tools."""

import ast
import dataclasses
import math
import operator
from collections.abc import Callable

import jsonschema
from rlpt.envs.sandbox.pyparse import parse as parse_python


@dataclasses.dataclass(frozen=True)
class Tool:
    """fn(**arguments) -> str; schema: JSON schema (type object) of the arguments."""

    name: str
    description: str
    schema: dict
    fn: Callable[..., str]

    def spec(self) -> dict:
        """The OpenAI/Qwen-style function description shown to the policy."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.schema},
        }


class ToolRegistry:
    """Tools by name; call() validates arguments against the schema before running the tool."""

    def __init__(self, tools: list[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        jsonschema.Draft202012Validator.check_schema(tool.schema)
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return sorted(self._tools)

    def subset(self, names: list[str]) -> "ToolRegistry":
        missing = [n for n in names if n not in self._tools]
        if missing:
            raise KeyError(f"unknown tools {missing}; registered: {self.names()}")
        return ToolRegistry([self._tools[n] for n in names])

    def specs(self) -> list[dict]:
        return [self._tools[n].spec() for n in self.names()]

    def validate(self, name: str, arguments: dict) -> str | None:
        """None if the call is valid, else a message naming what is wrong."""
        if name not in self._tools:
            return f"unknown tool {name!r}; available: {', '.join(self.names())}"
        errors = sorted(
            jsonschema.Draft202012Validator(self._tools[name].schema).iter_errors(arguments),
            key=lambda e: list(e.path),
        )
        if errors:
            e = errors[0]
            where = "/".join(str(p) for p in e.path) or "arguments"
            return f"invalid arguments for {name!r} at {where}: {e.message}"
        return None

    def call(self, name: str, arguments: dict) -> tuple[bool, str]:
        """(ok, text): validation errors and exceptions raised by the tool come back as text."""
        err = self.validate(name, arguments)
        if err:
            return False, err
        try:
            return True, str(self._tools[name].fn(**arguments))
        except Exception as e:  # a failing tool is an observation for the policy, not a crash
            return False, f"{name} failed: {type(e).__name__}: {e}"


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "floor": math.floor,
    "ceil": math.ceil,
}


def calculate(expression: str) -> str:
    """Evaluate arithmetic safely (numbers, + - * / // % **, a few math functions); no names, no calls."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 1000:
                raise ValueError("exponent too large")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
            and not node.keywords
        ):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")

    if len(expression) > 1000:
        raise ValueError("expression longer than 1000 characters")
    return repr(ev(parse_python(expression, mode="eval")))


_UNITS = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "cm": ("length", 0.01),
    "mm": ("length", 0.001),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
    "day": ("time", 86400.0),
}


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert between units of length, mass or time."""
    (k1, f1), (k2, f2) = _UNITS[from_unit], _UNITS[to_unit]
    if k1 != k2:
        raise ValueError(f"cannot convert {k1} ({from_unit}) to {k2} ({to_unit})")
    return repr(value * f1 / f2)


def builtin_registry() -> ToolRegistry:
    """calculator and convert_units (lookup tables are per task, see ToolUseEnv)."""
    return ToolRegistry(
        [
            Tool(
                "calculator",
                "Evaluate an arithmetic expression.",
                {
                    "type": "object",
                    "properties": {"expression": {"type": "string", "maxLength": 1000}},
                    "required": ["expression"],
                    "additionalProperties": False,
                },
                calculate,
            ),
            Tool(
                "convert_units",
                "Convert a value between units of length, mass or time.",
                {
                    "type": "object",
                    "properties": {
                        "value": {"type": "number"},
                        "from_unit": {"enum": sorted(_UNITS)},
                        "to_unit": {"enum": sorted(_UNITS)},
                    },
                    "required": ["value", "from_unit", "to_unit"],
                    "additionalProperties": False,
                },
                convert_units,
            ),
        ]
    )
