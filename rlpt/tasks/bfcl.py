"""BFCL tool-calling items (the `bfcl-eval` package's data files, Python AST categories) as Tasks, checked by BFCL's
AST rules on the decoded calls. Only the data files are read: bfcl_eval's modules are never imported. The `bfcl`
evaluation suite (rlpt.eval.suites.bfcl) and the multi-turn BFCL environment (rlpt.envs.bfcl_env) both use them."""
import importlib.util
import json
import os

from rlpt.rewards.verdict import Verdict
from rlpt.tasks.base import Task
from rlpt.tasks.bfcl_check import DecodeError, check_calls, decode_calls

# Single-turn categories with ground-truth calls, in the Python call format. Irrelevance categories (gold: no
# call) are left out: there an empty response is correct, which would break the empty-policy self-test.
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
VERSION = "BFCL_v4"
# Items no response can pass under BFCL's own checker (`unanswerable` finds them; the self-test pins the list).
EXCLUDED = ("live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_862-181-3", "live_multiple_964-207-0")
SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]\n"
    "You SHOULD NOT include any other text in the response.\n"
    "Here is a list of functions in JSON format that you can invoke.\n{functions}\n"
)


def data_dir() -> str:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("suite 'bfcl' reads the data files of the bfcl-eval package: "
                                  "pip install --no-deps bfcl-eval (its pins would downgrade numpy)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _read(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def render_calls(answers: list[dict], funcs: list[dict]) -> str:
    """The gold response: each expected call with the first possible value of each parameter (recursively
    inside dict values); parameters whose possible values include "" (optional) are omitted unless the
    function declares them required."""
    required = {f["name"]: set(f["parameters"].get("required", [])) for f in funcs}
    calls = []
    for answer in answers:
        (name, params), = answer.items()
        args = [f"{p}={gold_value(first_answer(values))!r}" for p, values in params.items()
                if values and ("" not in values or p in required.get(name, ()))]
        calls.append(f"{name}({', '.join(args)})")
    return "[" + ", ".join(calls) + "]"


def first_answer(values: list):
    """The first non-empty possible answer of a BFCL parameter (its gold value; environments use it too)."""
    return next((v for v in values if v != ""), "")  # a required parameter whose only answer is "" gets ""


def gold_value(value):
    """A possible-answer value as a concrete value. As in BFCL's dict checker, dicts (alone or in a list) hold
    {key: [possible values]} one level deep."""
    if isinstance(value, dict):
        return {k: first_answer(vs) for k, vs in value.items() if vs and "" not in vs}
    if isinstance(value, list):
        return [gold_value(v) if isinstance(v, dict) else v for v in value]
    return value


def unanswerable(answers: list[dict], funcs: list[dict]) -> str | None:
    """Why no response can pass BFCL's checker on this item (a data error), or None."""
    by_name = {f["name"]: f for f in funcs}
    for answer in answers:
        (name, params), = answer.items()
        if name not in by_name:
            return f"expected function {name!r} is not offered"
        spec = by_name[name]["parameters"]
        for p in spec.get("required", []):
            if not params.get(p):
                return f"{name}: required parameter {p!r} has no possible answer"
        for p, values in params.items():
            if p not in spec["properties"] and "" not in values:
                return f"{name}: expected parameter {p!r} is not declared"
    return None


def _prompt(item: dict) -> str:  # the system prompt, then the item's single turn
    turns = item["question"][0]  # single-turn categories: one turn of messages
    text = SYSTEM.format(functions=json.dumps(item["function"]))
    return text + "\n" + "\n".join(f"{m['role']}: {m['content']}" for m in turns)


def load_tasks(limit: int = 0) -> list[Task]:
    """Every answerable item of CATEGORIES as a Task (tier = the category's place), in the data's order; the first
    `limit` (0: all)."""
    root = data_dir()
    tasks = []
    for tier, cat in enumerate(CATEGORIES, 1):
        items = _read(os.path.join(root, f"{VERSION}_{cat}.json"))
        answers = {a["id"]: a["ground_truth"] for a in _read(os.path.join(root, "possible_answer",
                                                                           f"{VERSION}_{cat}.json"))}
        for item in items:
            if item["id"] not in answers:
                raise KeyError(f"bfcl {cat}: item {item['id']!r} has no possible answer")
            gold = answers[item["id"]]
            if unanswerable(gold, item["function"]) is not None:
                continue  # see EXCLUDED
            meta = {"answer": render_calls(gold, item["function"]), "ground_truth": gold, "functions": item["function"],
                    "category": cat}
            tasks.append(Task(f"bfcl/{cat}", item["id"], _prompt(item), tier, meta))  # single-turn: one reply
    return tasks if limit <= 0 else tasks[:limit]


def check(task: Task, response: str) -> Verdict:
    """BFCL's verdict on a response: its decoded calls against the item's possible answers."""
    try:
        calls = decode_calls(response)
    except DecodeError as err:
        return Verdict(0.0, False, {"error": f"decode: {err}"})
    why = check_calls(task.meta["functions"], calls, task.meta["ground_truth"], task.meta["category"])
    return Verdict(float(why is None), why is None, {"error": why, "calls": len(calls)})
