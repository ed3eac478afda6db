"""Tool-use domains: calculator, hidden lookup tables and search over a local corpus. The policy writes
`<call>{"tool": ..., "args": {...}}</call>` blocks and one `<answer>...</answer>`; `execute_tool` is what
an agent environment runs for each call."""

import ast
import json
import re
from fractions import Fraction

from rlpt.envs.sandbox.pyparse import parse as parse_python
from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import parse_number, register_verifier
from rlpt.tasks.native.arith import _expr
from rlpt.tasks.native.common import distinct, domain

_CALL = re.compile(r"<call>(.*?)</call>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
TOOLS = {"calculator": ("expr",), "lookup": ("table", "key"), "search": ("query",)}
_ITEMS = "apple pear plum fig lime kiwi date melon grape peach".split()
_SYL = "zor kel ma vi tan ru po lex din ora".split()
ENV_ID = "rlpt/ToolUse-v0"
_SAFE_EXPR = re.compile(r"[0-9+\-*/(). ]{1,200}")


def _call(tool, **args):
    return f"<call>{json.dumps({'tool': tool, 'args': args})}</call>"


def _calculator(rng, t):
    text = _expr(rng, t, n_terms=t + 2, digits=min(t + 1, 4), parens=t >= 2)
    value = eval(text)  # our own expression of digits and + - * ( )
    prompt = f"Compute {text} using the calculator tool.{_protocol('calculator')}"
    return prompt, {
        "answer": _call("calculator", expr=text) + f"\n<answer>{value}</answer>",
        "final": str(value),
        "tools": ["calculator"],
    }


def _lookup(rng, t):
    items = rng.sample(_ITEMS, min(3 + t, len(_ITEMS)))
    prices = {item: rng.randint(1, 20 * t) for item in items}
    order = {item: rng.randint(1, 3 + t) for item in rng.sample(items, min(t, len(items)))}
    total = sum(prices[i] * n for i, n in order.items())
    wanted = ", ".join(f"{n} {item}" for item, n in order.items())
    prompt = (
        f"The table 'prices' gives the price of each item ({', '.join(items)}). What do {wanted} cost "
        "in total? Use the lookup tool for prices and the calculator for sums." + _protocol("lookup", "calculator")
    )
    calls = [_call("lookup", table="prices", key=item) for item in order]
    expr = "+".join(f"{prices[i]}*{n}" for i, n in order.items())
    gold = "\n".join(calls + [_call("calculator", expr=expr), f"<answer>{total}</answer>"])
    return prompt, {
        "answer": gold,
        "final": str(total),
        "tables": {"prices": prices},
        "tools": ["lookup", "calculator"],
    }


def _search(rng, t):
    n_countries = 3 + 4 * t
    names = distinct(2 * n_countries, lambda: "".join(rng.sample(_SYL, 2)).capitalize())
    countries, capitals = names[:n_countries], names[n_countries:]
    docs = [f"The capital of {c} is {k}." for c, k in zip(countries, capitals)]
    leaders = {k: f"{rng.choice('ABCDEFGH')}. {rng.choice(_SYL).capitalize()}" for k in capitals}
    docs += [f"The mayor of {k} is {m}." for k, m in leaders.items()]
    rng.shuffle(docs)
    i = rng.randrange(n_countries)
    if t <= 2:
        question, final = f"What is the capital of {countries[i]}?", capitals[i]
        calls = [_call("search", query=f"capital of {countries[i]}")]
    else:
        question, final = f"Who is the mayor of the capital of {countries[i]}?", leaders[capitals[i]]
        calls = [
            _call("search", query=f"capital of {countries[i]}"),
            _call("search", query=f"mayor of {capitals[i]}"),
        ]
    prompt = f"Answer using the search tool over the atlas corpus. {question}{_protocol('search')}"
    gold = "\n".join(calls + [f"<answer>{final}</answer>"])
    return prompt, {"answer": gold, "final": final, "corpus": docs, "tools": ["search"]}


def _protocol(*tools):
    offered = ", ".join(f"{name} {{{', '.join(repr(a) for a in TOOLS[name])}}}" for name in tools)
    return (
        f'\nTools: {offered}. Call one as <call>{{"tool": NAME, "args": {{...}}}}</call>; '
        "finish with <answer>...</answer>."
    )


def execute_tool(task, call: dict) -> str:
    """Run one parsed call against the task's hidden data; raises ValueError naming an invalid call."""
    tool, args = _validate(task, call)
    if tool == "calculator":
        value = _arith(parse_python(args["expr"], mode="eval").body)
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    if tool == "lookup":
        return str(task.meta["tables"][args["table"]][args["key"]])
    words = set(re.findall(r"\w+", args["query"].lower()))
    ranked = sorted(task.meta["corpus"], key=lambda d: -len(words & set(re.findall(r"\w+", d.lower()))))
    return "\n".join(ranked[:2])


def _arith(node) -> Fraction:
    """Exact value of an expression tree of integers and + - * / (raises ValueError on anything else)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise ValueError("calculator: division by zero")
            return a / b
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
    raise ValueError(f"calculator: unsupported expression node {type(node).__name__}")


def _validate(task, call) -> tuple[str, dict]:
    if not isinstance(call, dict) or set(call) != {"tool", "args"} or not isinstance(call["args"], dict):
        raise ValueError(f"call must be {{'tool', 'args'}}, got {str(call)[:100]}")
    tool, args = call["tool"], call["args"]
    if tool not in task.meta["tools"] or set(args) != set(TOOLS[tool]):
        raise ValueError(f"tool {tool!r} with args {sorted(args)} is not offered by task {task.id}")
    if not all(isinstance(v, str) for v in args.values()):
        raise ValueError("tool arguments must be strings")
    if tool == "calculator" and (not _SAFE_EXPR.fullmatch(args["expr"]) or "**" in args["expr"]):
        raise ValueError(f"calculator expression {args['expr'][:50]!r} has characters outside 0-9+-*/(). ")
    if tool == "lookup" and args["key"] not in task.meta["tables"].get(args["table"], {}):
        raise ValueError(f"no key {args['key']!r} in table {args['table']!r}")
    return tool, args


@register_verifier("tool_trace")
def tool_trace(task, response: str) -> Verdict:
    """Passed iff every call is valid and runs, at least one call was made, and the single <answer> equals
    meta['final']; process = fraction of valid calls."""
    raw_calls = _CALL.findall(response)
    valid = 0
    for raw in raw_calls:
        try:
            call = json.loads(raw)
            execute_tool(task, call)
            valid += 1
        except (
            ValueError,
            KeyError,
            SyntaxError,
            RecursionError,
            MemoryError,
        ):  # JSONDecodeError is a ValueError
            continue
    answers = _ANSWER.findall(response)
    final = answers[0].strip() if len(answers) == 1 else None
    want = task.meta["final"]
    number = parse_number(want)
    correct = final is not None and (final == want if number is None else parse_number(final) == number)
    ok = correct and raw_calls and valid == len(raw_calls)
    process = valid / len(raw_calls) if raw_calls else 0.0
    return Verdict(
        float(bool(ok)),
        bool(ok),
        {"calls": len(raw_calls), "valid_calls": valid, "answer_correct": bool(correct), "process": process},
    )


def domains():
    return [
        domain(
            "tool/calculator",
            _calculator,
            "tool_trace",
            "arithmetic through a calculator tool",
            env_id=ENV_ID,
        ),
        domain("tool/lookup", _lookup, "tool_trace", "prices from a hidden table, then a sum", env_id=ENV_ID),
        domain("tool/search", _search, "tool_trace", "search a local corpus; two hops from tier 3", env_id=ENV_ID),
    ]
