"""Layers, refusal, commands, workspaces, retries and thread safety of the sandbox."""

import concurrent.futures as cf
import os
import signal

import pytest
from rlpt.envs.sandbox import IsolationError, Limits, Sandbox, SandboxConfig, SandboxError, check_python
from rlpt.envs.sandbox import layers as L
from rlpt.envs.sandbox.layers import sandbox_python
from rlpt.envs.sandbox.workspace import Workspace, read_inside, resolve_inside, write_inside


def test_layers_probed_and_reported(checker):
    probed = L.probe()
    assert set(probed) == set(L.ALL_LAYERS)
    v = checker.check("def f():\n    return 1\n", "def check(c):\n    assert c() == 1\n", "f")
    assert v.passed and set(v.details["layers"]) == {k for k, ok in probed.items() if ok}
    for layer in L.DEFAULT_MINIMUM:
        assert layer in v.details["layers"]


def test_refuses_when_minimum_not_met(monkeypatch):
    probed = dict(L.probe(), seccomp=False)
    monkeypatch.setattr(L, "probe", lambda: probed)
    with pytest.raises(IsolationError, match="seccomp"):
        Sandbox(SandboxConfig(min_layers=("namespaces", "seccomp")))
    with pytest.raises(ValueError, match="unknown isolation layer"):
        Sandbox(SandboxConfig(min_layers=("teleport",)))


def test_command_runs_as_slot_uid_without_network(checker):
    r = checker.sandbox.run(
        [
            "/bin/sh",
            "-c",
            "id -u; cat /proc/self/status | grep -i seccomp; "
            "ls /sys/class/net; echo hi > /workspace/x && cat /workspace/x",
        ]
    )
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.split()
    if os.geteuid() == 0:
        assert L.UidSlot and 61000 <= int(lines[0]) < 61512
    assert "Seccomp:" in r.stdout and "2" in r.stdout.split("Seccomp:")[1].split()[0]
    assert "eth0" not in r.stdout and "hi" in r.stdout


def test_rlimits_in_force(checker):
    code = (
        "import resource as r\nprint(r.getrlimit(r.RLIMIT_AS)[0] >> 20, r.getrlimit(r.RLIMIT_NOFILE)[0],"
        " r.getrlimit(r.RLIMIT_CORE)[0], r.getrlimit(r.RLIMIT_NPROC)[0])"
    )
    r = checker.sandbox.run([sandbox_python(), "-I", "-c", code], limits=Limits(memory_mb=300, nofile=50, nproc=20))
    assert r.stdout.split() == ["300", "50", "0", "20"]


def test_retries_only_infrastructure_errors(checker, monkeypatch):
    from rlpt.envs.sandbox import executor

    calls = {"n": 0}
    real = executor.execute

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise SandboxError("simulated setup failure")
        return real(*a, **k)

    monkeypatch.setattr(executor, "execute", flaky)
    r = checker.sandbox.run(["/bin/sh", "-c", "exit 3"])
    assert r.exit_code == 3 and calls["n"] == 2  # retried once after the infra error, not after exit 3


def test_broken_warm_slot_is_replaced(checker, host):
    for item in list(checker.warm._all):
        os.killpg(item[0].proc.pid, signal.SIGKILL)
    assert checker.check(host.add_ok, host.add_test, "add").passed


def test_check_python_thread_safe(checker, host):
    bad = "def add(a, b):\n    return a - b\n"
    jobs = [(host.add_ok if i % 2 == 0 else bad) for i in range(24)]
    with cf.ThreadPoolExecutor(8) as ex:
        verdicts = list(ex.map(lambda p: check_python(p, host.add_test, "add"), jobs))
    assert [v.passed for v in verdicts] == [i % 2 == 0 for i in range(24)]


def test_check_python_rejects_bad_inputs():
    with pytest.raises(ValueError, match="entry_point"):
        check_python("x = 1", "def check(c): pass", "not an identifier")
    with pytest.raises(TypeError, match="program"):
        check_python(b"x", "def check(c): pass", "f")


@pytest.mark.parametrize("mode", ["overlay", "copy"])
def test_workspace_snapshot_rollback(tmp_path, mode):
    if mode == "overlay" and os.geteuid() != 0:
        pytest.skip("overlay workspaces need root")
    tpl = tmp_path / "tpl"
    (tpl / "d").mkdir(parents=True)
    (tpl / "a.txt").write_text("orig")
    with Workspace(str(tpl), owner_uid=61500 if os.geteuid() == 0 else None, mode=mode) as ws:
        write_inside(ws.path, "a.txt", "one", None)
        write_inside(ws.path, "d/new.txt", "n", None)
        snap = ws.snapshot()
        write_inside(ws.path, "a.txt", "two", None)
        os.remove(os.path.join(ws.path, "d/new.txt"))
        ws.rollback(snap)
        assert read_inside(ws.path, "a.txt") == "one" and read_inside(ws.path, "d/new.txt") == "n"
        ws.rollback()
        assert read_inside(ws.path, "a.txt") == "orig" and read_inside(ws.path, "d/new.txt") is None
        base = ws.base
    assert not os.path.exists(base) and (tpl / "a.txt").read_text() == "orig"


def test_workspace_paths_cannot_escape(tmp_path):
    with Workspace(None, mode="copy") as ws:
        os.symlink("/etc", os.path.join(ws.path, "link"))
        for bad in ("../x", "/etc/passwd", "link/passwd", "a/../../x"):
            with pytest.raises(ValueError):
                resolve_inside(ws.path, bad)


def test_sandbox_sees_workspace_and_rollback_undoes_its_writes(checker):
    with checker.sandbox.uid() as uid, Workspace(None, owner_uid=uid.uid if uid else None) as ws:
        write_inside(ws.path, "in.txt", "hello", uid.uid if uid else None)
        base = ws.snapshot()
        r = checker.sandbox.run(
            ["/bin/sh", "-c", "cat in.txt; echo bye > out.txt; rm in.txt"], workspace=ws.path, slot=uid
        )
        assert r.stdout == "hello" and read_inside(ws.path, "out.txt") == "bye\n"
        ws.rollback(base)
        assert read_inside(ws.path, "in.txt") == "hello" and read_inside(ws.path, "out.txt") is None


def test_wire_roundtrip_is_exact_and_strict():
    from rlpt.envs.sandbox import wire

    values = [
        None,
        True,
        0,
        -(2**70),
        1.5,
        float("inf"),
        "é中",
        b"\x00\xff",
        [1, (2, 3)],
        {1: {"a"}},
        frozenset({1}),
        1 + 2j,
        (),
    ]
    for v in values:
        back = wire.decode(wire.encode(v))
        assert back == v and type(back) is type(v)
    assert wire.decode(wire.encode(float("nan"))) != wire.decode(wire.encode(float("nan")))

    class Sneaky(int):
        def __eq__(self, other):
            return True

    for bad in (Sneaky(1), [object()], {"k": Sneaky(0)}, type("L", (list,), {})()):
        with pytest.raises(wire.WireError):
            wire.encode(bad)
    with pytest.raises(wire.WireError):
        wire.decode({"x": 1})


def test_dead_grader_workers_are_replaced(checker, host):
    for w in list(checker.graders._live):
        w.proc.kill()
        w.proc.wait()
    verdicts = [checker.check(host.add_ok, host.add_test, "add") for _ in range(3)]
    assert all(v.passed for v in verdicts)
