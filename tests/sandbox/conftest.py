"""Fixtures for the sandbox tests: one checker for the module, and a host-unaffected check after each test."""

import os
import shutil
import time
import types

import pytest
from rlpt.envs.sandbox import layers, workspace


def require_full_isolation():
    """Skip (with the reason) on hosts without bubblewrap: these tests are about the isolation layers."""
    if shutil.which("bwrap") is None or not layers.probe()["namespaces"]:
        pytest.skip("bubblewrap namespaces unavailable (install bubblewrap; .ci/run does)")


def sandbox_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, cmdline) of processes running as a uid this process claimed, except warm slots' own
    bwrap and zygote (other processes on the host may run sandboxes of their own at the same time)."""
    from rlpt.envs.sandbox import default_checker

    ours = {s.uid for s in default_checker().sandbox._claimed}
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as fh:
                uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, StopIteration):
            continue
        if uid in ours and "/rlpt/zygote.py" not in cmd:
            out.append((int(d), uid, cmd[:120]))
    return out


def mounts() -> list[str]:
    """Mount points under workspace folders this process created."""
    bases = set(workspace.RECENT_BASES)
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1] for line in fh]
    return sorted(p for p in points if p in bases or os.path.dirname(p) in bases)


def rlpt_tmp_dirs() -> list[str]:
    """Workspace folders this process created that still exist."""
    return sorted(b for b in workspace.RECENT_BASES if os.path.exists(b))


ADD_TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-4, 4) == 0\n"
ADD_OK = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="session")
def host():
    """Host-state probes for assertions in the tests."""
    return types.SimpleNamespace(
        sandbox_processes=sandbox_processes,
        mounts=mounts,
        rlpt_tmp_dirs=rlpt_tmp_dirs,
        add_test=ADD_TEST,
        add_ok=ADD_OK,
    )


@pytest.fixture(scope="session")
def checker():
    require_full_isolation()
    from rlpt.envs.sandbox import default_checker

    c = default_checker()
    assert c.check(ADD_OK, ADD_TEST, "add").passed  # warm the slots and the grader workers
    return c


@pytest.fixture
def host_unaffected(checker):
    """After the test: no stray sandbox processes, mounts or rlpt temp folders; the pool still serves."""
    before_mounts, before_tmp = mounts(), rlpt_tmp_dirs()
    yield
    deadline = time.monotonic() + 5.0
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
    assert mounts() == before_mounts
    assert rlpt_tmp_dirs() == before_tmp
    assert checker.check(ADD_OK, ADD_TEST, "add").passed
