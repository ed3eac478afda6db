"""Persistent terminals (#32): one sandboxed shell per episode; state carries across commands; a command that
hangs, floods or exits restarts the terminal (files kept); background jobs live within the session's limits."""
import os
import shutil
import time

import gymnasium as gym
import pytest
import rlpt.envs  # noqa: F401  (registers the environments)
from rlpt.envs.builtin_tasks import terminal_task
from rlpt.envs.sandbox import default_checker
from rlpt.envs.sandbox.limits import Limits
from rlpt.envs.sandbox.session import ShellSession
from rlpt.envs.sandbox.workspace import Workspace
from rlpt.envs.toolcall import format_tool_call as call

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def session():
    checker = default_checker()
    with checker.sandbox.uid() as uid:
        with Workspace(None, owner_uid=uid.uid if uid else None, size_mb=32) as ws:
            s = ShellSession(ws.path, limits=Limits(wall_s=600, cpu_s=60, nproc=32, output_bytes=4096), slot=uid,
                             use_seccomp="seccomp" in checker.sandbox.layers)
            yield s
            s.close()


def test_state_carries_across_commands(session):
    run = session.run
    assert run("mkdir -p a/b && cd a/b && pwd").output == "/workspace/a/b\n"
    assert run("pwd; X=41; export Y=7; f() { echo fn$1; }").output == "/workspace/a/b\n"
    r = run("echo $((X + 1)) $Y; f 2")
    assert (r.output, r.exit_code, r.killed_for, r.restarted) == ("42 7\nfn2\n", 0, None, False)
    assert run("false").exit_code == 1
    assert run("cat").output == ""  # a command's stdin is /dev/null: it cannot eat the next commands
    assert run("(sleep 0.3; echo bg > bg.txt) > /dev/null 2>&1 & echo started").output == "started\n"
    assert run("sleep 0.6; cat bg.txt").output == "bg\n"  # the background job outlived its command
    assert session.starts == 1


def test_broken_commands_and_impostor_builtins_keep_the_protocol(session):
    """Syntax errors, an unterminated quote or heredoc, and a shell function named printf or command: the
    terminal answers each with its own output and status, and its state survives."""
    run = session.run
    run("cd /tmp; KEEP=1")
    for command in ("ls |", "echo 'unterminated", "if true; then echo x", "( echo a"):
        r = run(command, timeout_s=3.0)
        assert r.killed_for is None and r.exit_code == 2, (command, r)
    r = run("cat <<EOF\nno end", timeout_s=3.0)  # a heredoc without its terminator ends with the command
    assert (r.output, r.exit_code) == ("no end", 0)
    run("printf() { echo fake; }; command() { echo fake; }")
    r = run("pwd; echo $KEEP; false")
    assert (r.output, r.exit_code, r.restarted) == ("/tmp\n1\n", 1, False)
    r = run("(sleep 0.3; echo late) & echo now")
    assert r.output == "now\n"
    time.sleep(0.6)
    assert run("echo next").output == "late\nnext\n"  # a background job's output comes with the next reply
    assert session.starts == 1


@pytest.mark.parametrize("command,why", [("exit 3", "shell_exited"), ("sleep 30", "deadline"),
                                         ("yes | head -c 100000", "output"), ("exec true", "shell_exited")])
def test_a_lost_terminal_restarts_with_the_files_kept(session, command, why):
    session.run("echo kept > f.txt; cd /tmp; V=1")
    t0 = time.monotonic()
    r = session.run(command, timeout_s=1.5)
    assert r.killed_for == why and r.exit_code is None and time.monotonic() - t0 < 10
    r = session.run("pwd; cat /workspace/f.txt; echo V=$V")
    assert r.restarted and r.output == "/workspace\nkept\nV=\n"  # a fresh shell in the same workspace
    assert session.starts == 2


def test_close_kills_background_jobs(session):
    session.run("(sleep 1; echo late > late.txt) > /dev/null 2>&1 &")
    ws = session.workspace
    session.close()
    time.sleep(1.5)
    assert not os.path.exists(os.path.join(ws, "late.txt"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_terminal_tasks_are_solved_over_several_calls(seed):
    env = gym.make("rlpt/TerminalAgent-v0", max_steps=8)
    task = terminal_task(seed)
    obs, info = env.reset(options={"task": task})
    assert "persist" in obs
    folder = next(iter(task.meta["target"])).split("/")[0]
    if seed % 3 == 0:
        steps = [". ./env.sh", f"mkdir {folder} && cd {folder}", "echo \"$TOKEN\" > token.txt"]
    elif seed % 3 == 1:
        steps = ["sh worker.sh > /dev/null 2>&1 &", "while [ ! -f result.txt ]; do sleep 0.1; done",
                 "cp result.txt final.txt"]
    else:
        suffix = task.meta["target"][f"{folder}/a.txt"].strip().split("-", 1)[1]
        steps = ["tag() { echo \"$1-" + suffix + "\"; }", f"mkdir {folder}", f"tag a > {folder}/a.txt",
                 f"tag b > {folder}/b.txt"]
    for i, command in enumerate(steps):
        obs, r, term, trunc, info = env.step(call("shell", {"command": command}))
        assert "exit code: 0" in obs, obs
        assert term == (i == len(steps) - 1) and r == float(term)
    assert all(info["target"].values())
    env.close()


def test_each_call_in_a_fresh_shell_loses_the_state():
    """The same steps in ShellAgent (a fresh shell per call) do not reach the target: the terminal is needed."""
    env = gym.make("rlpt/ShellAgent-v0", max_steps=8)
    task = terminal_task(0)
    env.reset(options={"task": task})
    folder = next(iter(task.meta["target"])).split("/")[0]
    for command in (". ./env.sh", f"mkdir {folder} && cd {folder}", "echo \"$TOKEN\" > token.txt"):
        obs, r, term, *_ = env.step(call("shell", {"command": command}))
    obs, r, term, trunc, info = env.step(call("submit", {}))
    assert r == 0.0 and not any(info["target"].values())
    env.close()
