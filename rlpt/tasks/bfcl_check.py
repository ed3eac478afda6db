"""BFCL's AST checker for Python calls, ported from bfcl-eval 2026.3.23 (eval_checker/ast_eval/ast_checker.py),
and a safe decoder of `[f(a=1), g(b='x')]` responses.

Ported rather than imported: importing bfcl_eval's checker loads every model handler (openai, qwen-agent,
soundfile, ...). The rules are BFCL's: exact function names; required parameters present; each given parameter
declared and in the possible answers (strings compared after removing spaces and ,./-_*^ and case); a possible
answer list holding "" marks a parameter optional; int accepted for float; parallel calls matched in any order.
Unlike BFCL's decoder, arithmetic and lambdas in arguments are rejected instead of eval()'d.
"""
import ast
import re

from rlpt.envs.sandbox.pyparse import parse as parse_python

PY_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
            "dict": dict, "any": str}
_STRIP = re.compile(r"[ ,./\-_*^]")


class DecodeError(ValueError):
    """The response is not a list of Python calls with literal keyword arguments."""


def decode_calls(text: str) -> list[dict]:
    """`[f(a=1), m.g(b=[1, 2])]` (brackets optional) -> [{"f": {"a": 1}}, {"m.g": {"b": [1, 2]}}]."""
    text = text.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    try:
        body = parse_python(text.strip("'"), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise DecodeError(f"not Python: {type(err).__name__}") from err
    elts = [body] if isinstance(body, ast.Call) else getattr(body, "elts", None)
    if elts is None or not all(isinstance(e, ast.Call) for e in elts):
        raise DecodeError("not a list of calls")
    return [_call(e) for e in elts]


def _call(node: ast.Call) -> dict:
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        raise DecodeError("call target is not a dotted name")
    parts.append(f.id)
    if node.args:
        raise DecodeError("positional arguments (BFCL wants keyword arguments)")
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords}}


def _value(node):
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("dict unpacking in an argument")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):  # a variable: BFCL compares its name as a string
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    raise DecodeError(f"unsupported argument expression {type(node).__name__}")


def _std(s: str) -> str:
    return _STRIP.sub("", s).lower().replace("'", '"')


def _std_all(values):
    return [_std(v) if isinstance(v, str) else v for v in values]


def _answer_type(possible: list):
    return next((type(a) for a in possible if a != ""), None)


def _type_ok(value, possible: list, want: type, nested: type | None) -> tuple[bool, bool]:
    """(valid, is_variable): BFCL's one-level type check; a value of the answer's type counts as a variable."""
    answer_type = _answer_type(possible)
    is_var = answer_type is not None and answer_type != want
    if type(value) is want:
        if nested is None:
            return True, is_var
        for item in possible:
            # BFCL quirk kept: a non-list possible answer (the optional marker "") passes the nested check
            if not isinstance(item, list) or all(_type_ok(v, item, nested, None)[0] for v in value):
                return True, is_var
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _dict_ok(value: dict, possibles: list) -> bool:
    for possible in possibles:
        if possible == "":
            continue
        if all(k in possible and (_std(v) if isinstance(v, str) else v) in _std_all(possible[k])
               for k, v in value.items()) and all(k in value or "" in vs for k, vs in possible.items()):
            return True
    return False


def _list_dict_ok(value: list, possibles: list) -> bool:
    return any(len(value) == len(p) and all(_dict_ok(v, [d]) for v, d in zip(value, p)) for p in possibles)


def check_call(func: dict, output: dict, answer: dict) -> str | None:
    """None when one decoded call `output` matches `answer` ({name: {param: [possible values]}}), else why not."""
    name = func["name"]
    possible = next(iter(answer.values()))
    if name not in output:
        return f"function {name!r} not called"
    params, props = output[name], func["parameters"]["properties"]
    for p in func["parameters"].get("required", []):
        if p not in params:
            return f"missing required parameter {p!r}"
    for p, value in params.items():
        if p not in props or p not in possible:
            return f"unexpected parameter {p!r}"
        kind = props[p]["type"]
        want = PY_TYPES.get(kind)
        if want is None:
            return f"parameter {p!r}: BFCL type {kind!r} is not a Python type"
        nested = PY_TYPES.get(props[p].get("items", {}).get("type")) if kind in ("array", "tuple") else None
        if kind == "tuple" and type(value) is tuple:
            value = list(value)
        if kind == "float" and type(value) is int:
            value = float(value)
        ok, is_var = _type_ok(value, possible[p], want, nested)
        if not ok:
            return f"parameter {p!r}: wrong type {type(value).__name__} for {kind}"
        if not is_var:
            if want is dict:
                good = _dict_ok(value, possible[p])
            elif want is list and nested is dict:
                good = _list_dict_ok(value, possible[p])
            elif want is str:
                good = _std(value) in [_std(a) for a in possible[p] if isinstance(a, str)]
            elif want is list:
                good = _std_all(value) in [_std_all(a) for a in possible[p] if isinstance(a, list)]
            else:
                good = value in possible[p]
        else:
            good = value in possible[p]
        if not good:
            return f"parameter {p!r}: value {value!r} not among {possible[p]!r}"
    for p, values in possible.items():
        if p not in params and "" not in values:
            return f"parameter {p!r} omitted but not optional"
    return None


def check_calls(funcs: list[dict], outputs: list[dict], answers: list[dict], category: str) -> str | None:
    """None when the decoded calls match the ground truth under BFCL's rules for `category`, else why not."""
    if len(outputs) != len(answers):
        return f"{len(outputs)} calls, expected {len(answers)}"
    by_name = {f["name"]: f for f in funcs}
    if "parallel" not in category:  # simple and multiple: the one call against the one answer
        return check_call(by_name.get(next(iter(answers[0])), funcs[0]), outputs[0], answers[0])
    used: set[int] = set()
    for answer in answers:  # BFCL's greedy no-order matching
        func = by_name[next(iter(answer))]
        hit = next((i for i, out in enumerate(outputs) if i not in used and check_call(func, out, answer) is None),
                   None)
        if hit is None:
            return f"no call matches expected {next(iter(answer))!r}"
        used.add(hit)
    return None
