"""The check worker pool: scripts without a main guard, many threads, dead and hung workers, errors."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rlpt.rewards import isolated
from rlpt.rewards.isolated import run_isolated
from rlpt.tasks import get_domain


# Module-level functions the worker imports by name (this module's name, with the caller's sys.path).
def add(a, b):
    return a + b


def pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def write_pid_then_sleep(path, seconds):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return "woke up"


def fail(message):
    raise ValueError(message)


def exit_hard(code):
    os._exit(code)


def segfault():
    import ctypes

    ctypes.string_at(0)


def unpicklable():
    return threading.Lock()


def chatty(value):
    print("noise on stdout", value)  # must not corrupt the protocol on the worker's real stdout
    return value


@pytest.fixture(autouse=True)
def _repo_root_on_path(monkeypatch):
    """Workers import this module by its pytest name (tests.rewards.test_isolated) with the caller's sys.path;
    plain `pytest` (importlib mode, xdist workers) does not put the repository root there."""
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _importable():
    """This test module must be importable by name in a worker (pytest's import mode decides its name)."""
    ok, value = run_isolated(add, 2, 3, timeout_s=60)
    if not ok:
        pytest.fail(f"test module {__name__!r} is not importable in a worker: {value}")


def test_result_error_and_unpicklable_result():
    _importable()
    assert run_isolated(chatty, 7, timeout_s=60) == (True, 7)
    ok, reason = run_isolated(fail, "bad answer", timeout_s=60)
    assert not ok and "ValueError: bad answer" in reason
    ok, reason = run_isolated(unpicklable, timeout_s=60)
    assert not ok and "not picklable" in reason
    assert run_isolated(add, 1, 1, timeout_s=60) == (True, 2)


def test_rejects_functions_a_worker_cannot_import():
    with pytest.raises(ValueError, match="module-level"):
        run_isolated(lambda: 1, timeout_s=5)


@pytest.mark.parametrize("crash", [(exit_hard, 3), (segfault,)], ids=["os._exit", "segfault"])
def test_dead_worker_is_a_failure_and_replaced(crash):
    _importable()
    ok, reason = run_isolated(*crash, timeout_s=60)
    assert not ok and "worker died" in reason, reason
    assert run_isolated(add, 1, 2, timeout_s=60) == (True, 3)


def test_worker_killed_mid_check(tmp_path):
    _importable()
    pid_file = tmp_path / "pid"
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(out=run_isolated(write_pid_then_sleep, str(pid_file), 60, timeout_s=120))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    thread.join(30)
    ok, reason = result["out"]
    assert not ok and "worker died" in reason and "signal 9" in reason, reason
    assert run_isolated(add, 2, 2, timeout_s=60) == (True, 4)


def test_timeout_kills_the_worker_and_the_pool_recovers():
    _importable()
    start = time.monotonic()
    ok, reason = run_isolated(pid_after, 30, timeout_s=0.5)
    assert not ok and reason.startswith("timeout"), reason
    assert time.monotonic() - start < 15
    assert run_isolated(add, 3, 3, timeout_s=60) == (True, 6)


def test_eight_threads_at_once():
    _importable()
    domain = get_domain("algebra/linear")
    tasks = [domain.generate(seed, 1) for seed in range(8)]
    out: dict = {}

    def check(i):
        task = tasks[i]
        out[i] = (
            domain.verify(task, task.meta["answer"]).score,
            domain.verify(task, task.meta["answer"] + "1").score,
            run_isolated(add, i, i, timeout_s=120),
        )

    threads = [threading.Thread(target=check, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert out == {i: (1.0, 0.0, (True, 2 * i)) for i in range(8)}
    assert len(isolated.worker_pids()) <= isolated.WORKERS


_SCRIPT = """
from rlpt.tasks import get_domain

for name in ("algebra/linear", "rg/countdown"):
    domain = get_domain(name)
    task = domain.generate(0, domain.tiers[0])
    print(name, domain.verify(task, task.meta["answer"]).score, domain.verify(task, "").score)
"""


def test_script_without_main_guard(tmp_path):
    """A spawn pool re-imported such a script in every worker, which then died (BrokenProcessPool)."""
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    for argv in ([str(script)], ["-c", script.read_text()]):  # a script, and exec'd code as in a notebook
        proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split("\n")[:2] == ["algebra/linear 1.0 0.0", "rg/countdown 1.0 0.0"], proc.stdout


def crash_check(*args):
    os._exit(1)


def hang_check(*args):
    time.sleep(60)


def test_crashed_or_hung_check_scores_zero_with_the_reason(monkeypatch):
    """A check whose worker dies or hangs is a failed answer with the reason in details, never an exception."""
    from rlpt.rewards import mathcheck
    from rlpt.tasks import rgym

    _importable()
    algebra = get_domain("algebra/linear")
    task = algebra.generate(0, 1)
    monkeypatch.setattr(mathcheck, "_worker_check", crash_check)
    verdict = algebra.verify(task, task.meta["answer"])
    assert verdict.score == 0.0 and "worker died" in verdict.details["method"], verdict.details

    countdown = get_domain("rg/countdown")
    task = countdown.generate(0, 1)
    monkeypatch.setattr(rgym, "_score_in_worker", hang_check)
    monkeypatch.setattr(rgym, "SCORE_TIMEOUT_S", 0.5)
    verdict = countdown.verify(task, task.meta["answer"])
    assert verdict.score == 0.0 and "timeout" in verdict.details["why"], verdict.details

    monkeypatch.undo()  # the pool has recovered: both check again
    assert algebra.verify(algebra.generate(0, 1), algebra.generate(0, 1).meta["answer"]).score == 1.0
    assert countdown.verify(task, task.meta["answer"]).score == 1.0


def test_idle_worker_that_died_is_replaced_before_the_check():
    _importable()
    assert isolated.wait_idle(1)
    for pid in isolated.worker_pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    assert run_isolated(add, 5, 5, timeout_s=60) == (True, 10)  # the check never ran on a dead worker
