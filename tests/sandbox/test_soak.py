"""Soak: 5,000 episodes leak no processes, file descriptors, mounts or temp folders; memory stays flat."""

import asyncio
import concurrent.futures as cf
import os
import time

import gymnasium as gym
import pytest
from rlpt.envs.builtin_tasks import ArithmeticDomain, code_task, shell_task
from rlpt.envs.episode_pool import run_episodes
from rlpt.envs.toolcall import format_tool_call

from rlpt import envs  # noqa: F401  (registers the environments)

TEST = "def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n"
PROGRAMS = [
    ("def sq(x):\n    return x * x\n", True),
    ("def sq(x):\n    return x + x\n", False),
    ("def sq(x):\n    raise ValueError('no')\n", False),
    ("import os\ndef sq(x):\n    open('f.txt', 'w').write('x' * 1000)\n    return x ** 2\n", True),
    ("import sys\nprint('noise ' * 100)\ndef sq(x):\n    return x * x\n", True),
    ("import os\ndef sq(x):\n    os._exit(0)\n", False),
    ("class E:\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return E()\n", False),
]


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
def test_soak_5000_episodes(checker, host):
    mounts0, tmp0 = host.mounts(), host.rlpt_tmp_dirs()

    def verify(i):
        prog, want = PROGRAMS[i % len(PROGRAMS)]
        v = checker.check(prog, TEST, "sq", timeout_s=5)
        return v.passed == want

    def batch(lo, hi):
        with cf.ThreadPoolExecutor(8) as ex:
            return all(ex.map(verify, range(lo, hi)))

    dom = ArithmeticDomain()

    async def answer(obs, ep):
        a, b = obs.split("What is ")[1].split("?")[0].split(" + ")
        return str(int(a) + int(b))

    async def agent(obs, ep):
        if "sorted.txt" in obs:
            return format_tool_call("shell", {"command": "sort data.txt > sorted.txt"})
        code = "def add(a, b):\n    return a + b\n"
        return format_tool_call("write_file", {"path": "solution.py", "content": code}) + format_tool_call("submit", {})

    def agent_round(tasks, env_id):
        eps = asyncio.run(run_episodes(lambda: gym.make(env_id), tasks, agent, max_concurrency=8, episode_timeout_s=60))
        assert all(e.status == "done" and e.reward == 1.0 for e in eps), [e.error for e in eps][:3]

    # warm-up (300 + 16 episodes): warm slots, the grader workers and 8 episode uids (kept for reuse) start
    assert batch(0, 300)
    agent_round([shell_task(3 * i) for i in range(16)], "rlpt/ShellAgent-v0")
    fds0, rss0 = _fds(), _rss_mb()
    t0 = time.monotonic()
    assert batch(300, 4300)
    eps = asyncio.run(
        run_episodes(
            lambda: gym.make("rlpt/SingleTurn-v0"),
            [dom.generate(i) for i in range(500)],
            answer,
            max_concurrency=8,
            episode_timeout_s=30,
        )
    )
    assert all(e.reward == 1.0 for e in eps)
    agent_round([shell_task(3 * i) for i in range(16, 108)], "rlpt/ShellAgent-v0")  # sort tasks
    agent_round([code_task(3 * i) for i in range(92)], "rlpt/CodeAgent-v0")  # add tasks
    elapsed = time.monotonic() - t0

    deadline = time.monotonic() + 5
    while host.sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert host.sandbox_processes() == []
    assert host.mounts() == mounts0 and host.rlpt_tmp_dirs() == tmp0
    assert _fds() <= fds0 + 2
    assert _rss_mb() < rss0 + 40, (rss0, _rss_mb())
    print(f"soak: 5000 episodes in {elapsed:.0f} s, rss {rss0:.0f} -> {_rss_mb():.0f} MB, fds {fds0} -> {_fds()}")
