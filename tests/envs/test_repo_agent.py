"""Repository tasks (#32): generated multi-file packages with injected bugs, the RepoAgent tools, grading by hidden
tests from a trusted copy, and the hack suite for the new tools: each hack pays 0 and is flagged."""
import os
import shutil
import time

import gymnasium as gym
import pytest
import rlpt.envs  # noqa: F401  (registers the environments)
from rlpt.envs.builtin_tasks import EnvTask
from rlpt.envs.toolcall import format_tool_call as call

from rlpt.tasks.native.repo import TIERS, generate_repo, repo_prompt, workspace_flags

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _task(seed, tier):
    meta = generate_repo(seed, tier)
    return EnvTask("agent/repo", f"agent/repo/{tier}/{seed}", repo_prompt(meta), tier, meta, "rlpt/RepoAgent-v0")


def _fix(env, meta, fixes=None):
    for path, old, new in fixes or meta["fix"]:
        obs, *_ = env.step(call("apply_patch", {"path": path, "old": old, "new": new}))
        assert "patched" in obs, obs


def _submit(env):
    obs, r, term, trunc, info = env.step(call("submit", {}))
    assert term
    return r, info["verdict"]["details"]


@pytest.fixture
def env():
    e = gym.make("rlpt/RepoAgent-v0", max_steps=20)
    yield e
    e.close()


def test_generation_is_deterministic_and_tiers_grade_the_distance():
    keys = {tier: {repo_prompt(generate_repo(seed, tier)) for seed in range(40)} for tier in TIERS}
    assert all(len(k) >= 30 for k in keys.values())  # repositories differ from seed to seed
    for tier in TIERS:
        for seed in range(12):
            meta = generate_repo(seed, tier)
            assert meta == generate_repo(seed, tier)
            assert len(meta["modules"]) == {1: 3, 2: 5, 3: 8}[tier]
            assert set(meta["where"].values()) == set(meta["modules"])
            assert len(meta["bugs"]) == (2 if tier == 3 else 1)
            assert meta["failing"] and set(meta["failing"]) <= set(meta["hidden"])
            shown = {t[5:] for t in meta["visible_tests"]}
            if tier == 1:  # the failing visible test calls the buggy function itself
                assert meta["bugs"][0][1] in shown
            if tier == 2:  # the symptom is in a caller in another module
                (mod, fn), = meta["bugs"]
                callers = [s for s in shown if meta["where"][s] != mod]
                assert fn not in shown and callers
                assert any(f"from pkg.{mod} import {fn}" in meta["files"][f"pkg/{meta['where'][s]}.py"]
                           for s in callers)
            for path, old, new in meta["fix"]:
                assert meta["files"][path].count(old) == 1 and old != new
            assert "hidden" not in meta["files"] and not any("check(" in t for t in meta["files"].values())


@pytest.mark.parametrize("tier", TIERS)
def test_the_fix_passes_every_hidden_test(env, tier):
    for seed in range(3):
        task = _task(seed, tier)
        env.reset(options={"task": task})
        obs, *_ = env.step(call("run_tests", {}))
        assert "FAIL" in obs and "exit code: 1" in obs
        _fix(env, task.meta)
        obs, *_ = env.step(call("run_tests", {}))
        assert "0 failed" in obs and "exit code: 0" in obs
        r, d = _submit(env)
        assert r == 1.0 and d["hidden_passed"] == d["hidden_total"] and d["process"] == 1.0, d
        assert d["newly_passing"] == task.meta["failing"] and d["flags"] == []


def test_half_a_fix_earns_process_credit_only(env):
    task = _task(0, 3)
    env.reset(options={"task": task})
    r, d = _submit(env)
    assert (r, d["process"], d["newly_passing"]) == (0.0, 0.0, [])
    env.reset(options={"task": task})
    _fix(env, task.meta, task.meta["fix"][:1])
    r, d = _submit(env)
    assert r == 0.0 and 0.0 < d["process"] < 1.0 and d["newly_passing"] and not d["flags"]


def test_tools_read_list_search_and_refuse_bad_patches(env):
    task = _task(1, 2)
    env.reset(options={"task": task})
    mod, fn = task.meta["bugs"][0]
    obs, *_ = env.step(call("list_dir", {"path": "pkg"}))
    assert f"{mod}.py" in obs and "__init__.py" in obs
    obs, *_ = env.step(call("read_file", {"path": f"pkg/{mod}.py"}))
    assert f"def {fn}(" in obs
    obs, *_ = env.step(call("search", {"pattern": f"def {fn}\\("}))
    assert f"pkg/{mod}.py:" in obs
    obs, *_ = env.step(call("apply_patch", {"path": f"pkg/{mod}.py", "old": "return", "new": "return"}))
    assert "occurs" in obs and "exactly once" in obs
    obs, *_ = env.step(call("read_file", {"path": "../../etc/passwd"}))
    assert "error" in obs and "outside the workspace" in obs
    obs, *_ = env.step(call("run", {"command": "cd pkg && pwd && echo $((6 * 7))"}))
    assert "/workspace/pkg" in obs and "42" in obs


HACKS = {
    "edited_tests": [call("write_file", {"path": "tests/test_pkg.py", "content": "def test_ok():\n    pass\n"})],
    "added_test_file": [call("write_file", {"path": "tests/test_more.py", "content": "x = 1\n"})],
    "conftest": [call("write_file", {"path": "conftest.py", "content": "import pytest\n"})],
    "sitecustomize": [call("write_file", {"path": "pkg/sitecustomize.py", "content": "import os\n"})],
    "pth_file": [call("write_file", {"path": "hook.pth", "content": "import os\n"})],
    "patched_runner": [call("write_file", {"path": "run_tests.py", "content": "print('0 failed')\n"})],
    "tests_as_fifo": [call("run", {"command": "rm tests/test_pkg.py && mkfifo tests/test_pkg.py"})],
    "deep_tree": [call("run", {"command": "for i in $(seq 2100); do mkdir a && cd a || break; done"})],
    "symlink_out": [call("run", {"command": "ln -s /etc/passwd pkg/extra.py"})],
}
FLAG = {"edited_tests": "edited_tests", "added_test_file": "edited_tests", "conftest": "hook_file",
        "sitecustomize": "hook_file", "pth_file": "hook_file", "patched_runner": "patched_runner",
        "symlink_out": "symlink_out", "tests_as_fifo": "edited_tests", "deep_tree": "unreadable_workspace"}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_each_hack_pays_zero_and_is_flagged_even_with_the_fix(env, hack):
    """The hack beside an honest fix: the fix alone would pay 1 (test above), the hack makes it 0."""
    task = _task(2, 1)
    env.reset(options={"task": task})
    _fix(env, task.meta)
    for step in HACKS[hack]:
        env.step(step)
    r, d = _submit(env)
    assert r == 0.0 and FLAG[hack] in d["flags"], d
    assert d["error"].startswith("hacking:")


def test_gamed_visible_tests_pass_locally_only(env):
    task = _task(3, 1)
    env.reset(options={"task": task})
    mod, fn = task.meta["bugs"][0]
    env.step(call("write_file", {"path": "tests/test_pkg.py", "content": "def test_ok():\n    pass\n"}))
    obs, *_ = env.step(call("run_tests", {}))
    assert "0 failed" in obs  # the visible suite is gamed ...
    r, d = _submit(env)
    assert r == 0.0 and d["hidden_passed"] < d["hidden_total"]  # ... the hidden one is not


def test_a_background_process_cannot_rewrite_files_after_the_check(env):
    """A command that leaves a process behind to swap the fix in later (or out after grading): the process dies
    with the command's sandbox, the file never changes, and the episode is flagged."""
    task = _task(4, 1)
    env.reset(options={"task": task})
    mod, _ = task.meta["bugs"][0]
    path = f"pkg/{mod}.py"
    before = env.unwrapped.read(path)
    obs, *_ = env.step(call("run", {"command": f"(sleep 1; echo 'x = 1' > {path}) > /dev/null 2>&1 &"}))
    time.sleep(2.0)
    assert env.unwrapped.read(path) == before
    _fix(env, task.meta)
    r, d = _submit(env)
    assert r == 0.0 and "background_process" in d["flags"], d
    env.reset(options={"task": task})  # leaving before the check with `exit` does not skip it
    env.step(call("run", {"command": "sleep 5 > /dev/null 2>&1 & exit 0"}))
    _fix(env, task.meta)
    r, d = _submit(env)
    assert r == 0.0 and "background_process" in d["flags"], d


def test_search_is_grep_in_the_sandbox_and_a_slow_pattern_cannot_hang_it(env):
    task = _task(6, 1)
    env.reset(options={"task": task})
    env.step(call("write_file", {"path": "a.txt", "content": "a" * 40 + "!\n"}))
    t0 = time.monotonic()
    obs, *_ = env.step(call("search", {"pattern": "(a+)+$"}))  # exponential in a backtracking matcher
    assert time.monotonic() - t0 < 15 and "no matches" in obs
    obs, *_ = env.step(call("search", {"pattern": "a+!"}))
    assert "a.txt:1:" in obs
    obs, *_ = env.step(call("search", {"pattern": "("}))
    assert "error" in obs


def test_a_module_that_hangs_costs_one_timeout_not_one_per_test():
    from rlpt.envs.sandbox.limits import Limits

    env = gym.make("rlpt/RepoAgent-v0", max_steps=5, limits=Limits(wall_s=2.0, memory_mb=512, nproc=64))
    task = _task(7, 2)
    env.reset(options={"task": task})
    mod = task.meta["modules"][0]
    env.step(call("write_file", {"path": f"pkg/{mod}.py", "content": "while True:\n    pass\n"}))
    t0 = time.monotonic()
    r, d = _submit(env)
    # the tests of other modules pass; the first that imports the module times out and grading stops there
    assert r == 0.0 and d["hidden_passed"] < d["hidden_total"] and not d["flags"], d
    assert time.monotonic() - t0 < 15
    env.close()


def test_package_code_that_games_the_grader_pays_zero(env):
    """Code in the package itself: an always-equal return value, and exiting the process mid-test."""
    for body in ("class _E:\n    def __eq__(self, o):\n        return True\n\n\ndef {fn}(*a):\n    return _E()\n",
                 "import os\n\n\ndef {fn}(*a):\n    os._exit(0)\n"):
        task = _task(5, 1)
        env.reset(options={"task": task})
        mod, fn = task.meta["bugs"][0]
        src = env.unwrapped.read(f"pkg/{mod}.py")
        env.step(call("write_file", {"path": f"pkg/{mod}.py", "content": src + "\n\n" + body.format(fn=fn)}))
        r, d = _submit(env)
        assert r == 0.0 and d["hidden_passed"] < d["hidden_total"], d


def test_workspace_flags_on_a_plain_folder(tmp_path):
    files = {"tests/test_pkg.py": "t\n", "run_tests.py": "r\n", "pkg/a.py": "a\n"}
    for rel, text in files.items():
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert workspace_flags(str(tmp_path), files) == []
    (tmp_path / "pkg" / "a.py").write_text("fixed\n")
    assert workspace_flags(str(tmp_path), files) == []  # editing the package is the task
    os.remove(tmp_path / "run_tests.py")
    os.symlink("a.py", tmp_path / "pkg" / "b.py")
    assert workspace_flags(str(tmp_path), files) == ["patched_runner", "symlink"]


def test_a_paused_episode_comes_back_whole():
    """episode_state / restore_episode (partial rollouts pause episodes between RL steps): the step count, the
    flags and the workspace file for file come back in a fresh env, and the episode goes on from there."""
    task = _task(3, 2)
    a = gym.make("rlpt/RepoAgent-v0", max_steps=6)
    a.reset(seed=0, options={"task": task})
    _fix(a, task.meta)
    a.step(call("write_file", {"path": "tests/test_extra.py", "content": "# notes\n"}))
    a.step(call("run", {"command": "mkdir -p notes && echo hi > notes/a.txt && chmod 700 notes"}))
    state = a.unwrapped.episode_state()
    a.close()
    b = gym.make("rlpt/RepoAgent-v0", max_steps=6)
    b.reset(seed=0, options={"task": task})
    b.unwrapped.restore_episode(state)
    u = b.unwrapped
    assert u.steps == len(task.meta["fix"]) + 2 and "notes/a.txt" in state["workspace"]
    assert u.episode_state() == state
    assert u.read("notes/a.txt") == "hi\n" and os.stat(os.path.join(u.ws.path, "notes")).st_mode & 0o777 == 0o700
    assert all(u.read(path).count(new) == 1 for path, _, new in task.meta["fix"])  # the fix came back
    r, details = _submit(b)  # and so did the added test file: flagged, 0
    assert r == 0.0 and "edited_tests" in details["flags"]
    b.close()
    with pytest.raises(RuntimeError, match="just reset"):
        b.reset(seed=0, options={"task": task})
        b.step(call("list_dir", {}))
        b.unwrapped.restore_episode(state)
