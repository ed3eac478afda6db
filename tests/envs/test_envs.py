"""Gymnasium environments: registration, env checker, scripted episodes, tool calls, budgets, episode pool."""

import asyncio
import dataclasses
import importlib.util
import shutil
import time
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from rlpt.envs.builtin_tasks import EnvTask, code_task, shell_task, tool_task
from rlpt.envs.episode_pool import run_episodes
from rlpt.envs.spaces import UnicodeText
from rlpt.envs.toolcall import ToolCall, ToolCallError, format_tool_call, parse_tool_calls
from rlpt.envs.truncate import truncate

from rlpt import envs
from rlpt.rewards import Verdict

needs_sandbox = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


class EchoDomain:
    """A fake task domain: the answer is the reversed prompt word."""

    name = "test.echo"

    def generate(self, seed, tier=0):
        word = f"w{seed}x{tier}"
        return EnvTask(self.name, f"{self.name}/{seed}", f"Reverse: {word}", tier, {"answer": word[::-1]})

    def verify(self, task, response):
        ok = response.strip() == task.meta["answer"]
        return Verdict(1.0 if ok else 0.0, ok, {"got": response.strip()})


@pytest.mark.parametrize("env_id", sorted(envs.ENV_IDS))
def test_env_checker_passes(env_id):
    if env_id in ("rlpt/CodeAgent-v0", "rlpt/ShellAgent-v0", "rlpt/RepoAgent-v0", "rlpt/TerminalAgent-v0") and \
            shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    if env_id == "rlpt/Bfcl-v0" and importlib.util.find_spec("bfcl_eval") is None:
        pytest.skip("bfcl_eval missing: pip install --no-deps bfcl-eval==2026.3.23")
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env.unwrapped)
    env.close()


def test_unicode_spaces():
    space = UnicodeText(max_length=50)
    assert "é中🙂" in space and 5 not in space and "x" * 51 not in space
    space.seed(3)
    a = [space.sample() for _ in range(3)]
    space.seed(3)
    assert a == [space.sample() for _ in range(3)] and all(s in space for s in a)


def test_single_turn_with_a_fake_domain():
    dom = EchoDomain()
    env = gym.make("rlpt/SingleTurn-v0", domains={dom.name: dom})
    task = dom.generate(7)
    obs, info = env.reset(options={"task": task})
    assert obs == "Reverse: w7x0" and info["task_id"] == "test.echo/7"
    obs, r, term, trunc, info = env.step("0x7w")
    assert (r, term, trunc) == (1.0, True, False) and info["verdict"]["passed"]
    env.reset(options={"task": dom.generate(8), "domain": dom})
    assert env.step("wrong")[1] == 0.0
    with pytest.raises(RuntimeError):
        env.step("again")


def test_tool_call_parsing():
    text = (
        "a " + format_tool_call("f", {"x": "é"}) + ' <tool_call>{"name": "g", "arguments": "{\\"y\\": 2}"}'
        '</tool_call> <tool_call>[1]</tool_call> <tool_call>{nope</tool_call> <tool_call>{"name": 1}'
    )
    calls = parse_tool_calls(text)
    assert calls[0] == ToolCall("f", {"x": "é"}) and calls[1] == ToolCall("g", {"y": 2})
    assert all(isinstance(c, ToolCallError) for c in calls[2:]) and len(calls) == 5
    assert "unclosed" in calls[4].message
    assert parse_tool_calls("no calls here") == []


def test_truncation_budget_and_marker():
    text = "".join(f"line {i}\n" for i in range(2000))
    out = truncate(text, 500)
    assert len(out) <= 500 and "characters cut" in out
    assert out.startswith("line 0\n") and out.rstrip().endswith("line 1999")
    words = lambda s: len(s.split())  # a stand-in tokenizer: whitespace tokens
    out = truncate(text, 120, words)
    assert words(out) <= 120 and "cut to fit" in out
    assert truncate("short", 100) == "short"


@needs_sandbox
def test_code_agent_episode():
    env = gym.make("rlpt/CodeAgent-v0", max_steps=6)
    task = code_task(0)
    obs, info = env.reset(options={"task": task})
    assert "add" in obs and {t["function"]["name"] for t in info["tools"]} == {
        "write_file",
        "run_python",
        "run_tests",
        "submit",
    }
    obs, r, term, _, _ = env.step("I will think first")
    assert "no <tool_call>" in obs and not term
    obs, r, term, _, _ = env.step('<tool_call>{"name": "write_file", "arguments": {"path": 3}}</tool_call>')
    assert "invalid arguments" in obs and not term
    obs, r, term, _, _ = env.step(format_tool_call("write_file", {"path": "../../etc/x", "content": "x"}))
    assert "outside the workspace" in obs
    obs, r, term, _, _ = env.step(format_tool_call("run_tests", {}))
    assert "tests failed" in obs and r == 0.0 and not term
    code = "def add(a, b):\n    return a + b\n"
    obs, r, term, _, info = env.step(
        format_tool_call("write_file", {"path": "solution.py", "content": code})
        + format_tool_call("run_python", {"code": "import solution; print(solution.add(2, 2))"})
    )
    assert "exit code: 0" in obs and "4" in obs and not term
    obs, r, term, trunc, info = env.step(format_tool_call("run_tests", {}))
    assert (r, term, trunc) == (1.0, True, False) and info["verdict"]["passed"]
    env.close()


@needs_sandbox
def test_code_agent_hack_and_step_limit():
    env = gym.make("rlpt/CodeAgent-v0", max_steps=2)
    env.reset(options={"task": code_task(0)})
    hack = "class E:\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return E()\n"
    env.step(format_tool_call("write_file", {"path": "solution.py", "content": hack}))
    obs, r, term, trunc, info = env.step(format_tool_call("run_python", {"code": "print(1)"}))
    assert trunc and not term and r == 0.0 and info["limit"] == "steps"
    assert "unserialisable_return" in info["final"]["verdict"]["details"]["flags"]
    env.close()


@needs_sandbox
def test_shell_agent_episode():
    env = gym.make("rlpt/ShellAgent-v0")
    task = shell_task(1)  # rename notes.txt into archive/
    env.reset(options={"task": task})
    obs, r, term, _, _ = env.step(format_tool_call("shell", {"command": "ls; cat notes.txt"}))
    assert "notes.txt" in obs and not term
    obs, r, term, _, info = env.step(format_tool_call("shell", {"command": "mkdir archive && mv notes.txt archive/"}))
    assert term and r == 1.0 and all(info["target"].values())
    env.reset(options={"task": shell_task(2)})
    obs, r, term, _, info = env.step(format_tool_call("submit", {}))
    assert term and r == 0.0 and not any(info["target"].values())
    env.close()


def test_tool_use_episode():
    env = gym.make("rlpt/ToolUse-v0")
    task = dataclasses.replace(tool_task(5), meta={**tool_task(5).meta, "table": {"pi": "3.14159"}})
    obs, info = env.reset(options={"task": task})
    assert "lookup" in obs and "final_answer" in obs
    obs, r, term, _, _ = env.step(format_tool_call("calculator", {"expression": "2 ** 8"}))
    assert "256" in obs and not term
    obs, *_ = env.step(format_tool_call("convert_units", {"value": "x", "from_unit": "km", "to_unit": "mi"}))
    assert "invalid arguments" in obs
    obs, *_ = env.step(format_tool_call("lookup", {"key": "pi"}) + format_tool_call("nope", {}))
    assert "3.14159" in obs and "unknown tool" in obs
    obs, r, term, _, info = env.step(format_tool_call("final_answer", {"answer": task.meta["answer"] * 1.5}))
    assert term and r == 0.0
    env.reset(options={"task": task})
    assert env.step(format_tool_call("final_answer", {"answer": str(task.meta["answer"])}))[1] == 1.0


def test_observation_budget_applies_to_tool_output():
    env = gym.make("rlpt/ToolUse-v0", obs_budget=200)
    env.reset(options={"task": tool_task(0)})
    obs, *_ = env.step(format_tool_call("calculator", {"expression": "1"}) * 40)
    assert len(obs) <= 200 and "cut to fit" in obs


def test_episode_pool_deadlines_do_not_block_others():
    dom = EchoDomain()
    tasks = [dom.generate(i) for i in range(12)]

    async def policy(obs, episode):
        if obs.endswith("w3x0"):
            await asyncio.sleep(10)  # one stuck policy call
        return obs.split(": ")[1][::-1]

    t0 = time.monotonic()
    eps = asyncio.run(
        run_episodes(
            lambda: gym.make("rlpt/SingleTurn-v0", domains={dom.name: dom}),
            tasks,
            policy,
            max_concurrency=4,
            episode_timeout_s=1.0,
        )
    )
    assert time.monotonic() - t0 < 5.0
    assert [e.status for e in eps] == ["timeout" if i == 3 else "done" for i in range(12)]
    assert [e.reward for e in eps] == [0.0 if i == 3 else 1.0 for i in range(12)]
