"""BFCL through the tool-use environment: schema conversion, recorded calls, BFCL grading, the bfcl_env suite."""
import importlib.util
import json

import gymnasium as gym
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None,
                                reason="bfcl_eval missing: pip install --no-deps bfcl-eval==2026.3.23")

PER_CATEGORY = 3


@pytest.fixture(scope="module")
def tasks():
    from rlpt.eval.suites import LoadArgs, get_suite

    return get_suite("bfcl_env").load(LoadArgs())


def _first(tasks, task_id):
    return next(t for t in tasks if t.id == task_id)


def test_oracle_passes_and_empty_fails_in_every_category(tasks):
    from rlpt.eval.suites import get_suite
    from rlpt.eval.suites.bfcl import CATEGORIES

    suite = get_suite("bfcl_env")
    sample = [t for c in CATEGORIES for t in [t for t in tasks if t.meta["category"] == c][:PER_CATEGORY]]
    assert {t.meta["category"] for t in sample} == set(CATEGORIES)
    for t in sample:
        gold = suite.verify(t, t.meta["answer"])
        assert (gold.score, gold.passed) == (1.0, True), (t.id, gold.details)
        assert gold.details["recorded"] == len(t.meta["ground_truth"]) and not gold.details["step_errors"]
        empty = suite.verify(t, "")
        assert (empty.score, empty.passed) == (0.0, False), t.id
        assert empty.details["step_errors"] == ["no_tool_call"] and empty.details["recorded"] == 0


def test_excluded_items_are_exactly_schema_violations():
    from rlpt.envs.bfcl_env import EXCLUDED, schema_violation

    from rlpt.eval.suites import LoadArgs
    from rlpt.eval.suites.bfcl import bfcl

    raw = {t.id: t for t in bfcl().load(LoadArgs())}
    for task_id in EXCLUDED:
        assert schema_violation(raw[task_id]) is not None, task_id
    assert schema_violation(raw["simple_python_0"]) is None


def test_schema_conversion():
    from rlpt.envs.bfcl_env import function_tool, json_schema

    spec = {"type": "dict", "required": ["a"], "properties": {
        "a": {"type": "float"}, "b": {"type": "tuple", "items": {"type": "integer"}}, "c": {"type": "any"},
        "d": {"type": "dict", "properties": {"e": {"type": "boolean"}}},
        "f": {"type": "string", "enum": ["x", "y"], "description": "pick"}}}
    tool = function_tool({"name": "m.f", "description": "doc", "parameters": spec})
    props = tool.schema["properties"]
    assert tool.schema["type"] == "object" and tool.schema["additionalProperties"] is False
    assert props["a"] == {"type": "number"} and props["b"] == {"type": "array", "items": {"type": "integer"}}
    assert props["c"] == {} and props["d"] == {"type": "object", "properties": {"e": {"type": "boolean"}}}
    assert props["f"] == {"type": "string", "description": 'pick Allowed values: ["x", "y"].'}  # shown, not enforced
    with pytest.raises(ValueError, match="m.f.z"):
        json_schema({"type": "dict", "properties": {"z": {"type": "complex"}}}, "m.f")


def _episode(task, actions, max_steps=8):
    env = gym.make("rlpt/Bfcl-v0", max_steps=max_steps)
    obs, info = env.reset(options={"task": task})
    assert task.meta["functions"][0]["name"] in obs and {s["function"]["name"] for s in info["tools"]} >= {
        "final_answer"}
    out = [env.step(a) for a in actions]
    env.close()
    return out


def test_episode_records_calls_and_grades_on_end_or_turn_limit(tasks):
    from rlpt.envs.bfcl_env import END_TOOL, gold_calls
    from rlpt.envs.toolcall import format_tool_call

    task = _first(tasks, "simple_python_0")  # calculate_triangle_area(base=10, height=5)
    (name, args), = gold_calls(task.meta["ground_truth"], task.meta["functions"])
    steps = _episode(task, [format_tool_call(name, args), format_tool_call(END_TOOL, {})])
    (obs, r, term, trunc, _), (obs2, r2, term2, _, info2) = steps
    assert "call recorded" in obs and (r, term, trunc) == (0.0, False, False)
    assert (r2, term2) == (1.0, True) and info2["passed"] and info2["recorded"] == 1
    # no end action: the turn limit ends the episode and the recorded calls are graded
    (_, r, term, trunc, info), = _episode(task, [format_tool_call(name, args)], max_steps=1)
    assert (r, term, trunc) == (1.0, False, True) and info["final"]["passed"]


def test_invalid_calls_are_error_observations_and_score_zero(tasks):
    from rlpt.eval.suites.bfcl_env import run_episode

    task = _first(tasks, "simple_python_0")
    call = '<tool_call>{"name": "calculate_triangle_area", "arguments": %s}</tool_call>'
    for args, why in [({"base": "10", "height": 5}, "is not of type 'integer'"),
                      ({"base": 10}, "'height' is a required property"),
                      ({"base": 10, "height": 5, "color": "red"}, "Additional properties"),
                      ]:
        (obs, r, term, _, info), = _episode(task, [call % json.dumps(args)])
        assert "error: invalid arguments" in obs and why in obs and (r, term) == (0.0, False)
        assert info["calls"][0]["error"] == "invalid_call"
        reward, details = run_episode(task, call % json.dumps(args))
        assert reward == 0.0 and details["recorded"] == 0 and why in details["step_errors"][0]
    reward, details = run_episode(task, '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    assert reward == 0.0 and "unknown tool 'nope'" in details["step_errors"][0]
    reward, details = run_episode(task, "<tool_call>{not json</tool_call>")
    assert reward == 0.0 and "not valid JSON" in details["step_errors"][0]


def test_wrong_values_and_call_counts_score_zero(tasks):
    from rlpt.eval.suites.bfcl_env import run_episode

    task = _first(tasks, "simple_python_0")
    call = '<tool_call>{"name": "calculate_triangle_area", "arguments": %s}</tool_call>'
    reward, details = run_episode(task, call % '{"base": 11, "height": 5}')
    assert reward == 0.0 and details["recorded"] == 1 and "base" in details["error"] and not details["step_errors"]
    reward, details = run_episode(task, call % '{"base": 10, "height": 5}' * 2)
    assert reward == 0.0 and details["error"] == "2 calls, expected 1"
    assert run_episode(task, call % '{"base": 10, "height": 5}')[0] == 1.0  # no end action needed in the suite


def test_parallel_calls_match_in_any_order(tasks):
    from rlpt.envs.bfcl_env import gold_calls
    from rlpt.envs.toolcall import format_tool_call

    from rlpt.eval.suites.bfcl_env import run_episode

    task = next(t for t in tasks if t.meta["category"] == "parallel" and len(t.meta["ground_truth"]) > 1)
    calls = gold_calls(task.meta["ground_truth"], task.meta["functions"])
    reply = "".join(format_tool_call(n, a) for n, a in reversed(calls))
    assert run_episode(task, reply)[0] == 1.0
    assert run_episode(task, format_tool_call(*calls[0]))[0] == 0.0  # one call short
