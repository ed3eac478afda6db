"""Red-team findings of issue #37, each reproduced as an attack that must fail.

1. slot hijack: the untrusted child holds exactly its job's fds; whatever it writes cannot reach the zygote's
   control channel, and a malformed status from a slot costs one retried job and a fresh slot;
2. state across episodes: nothing written anywhere in one episode is visible in the next on the same slot;
   /dev is read-only and /dev/shm size-capped;
4. host-side copies (Workspace.keep) never produce setuid files, devices, FIFOs or links out;
5. FIFOs where the host reads or writes never block it: read_inside, write_inside, keep() and env.step.
"""

import json
import os
import stat
import threading
import time
import uuid

import pytest
from rlpt.envs.sandbox import CodeChecker, Limits, SandboxConfig, SandboxError
from rlpt.envs.sandbox import warm as W
from rlpt.envs.sandbox.workspace import Workspace, copy_tree, read_inside, write_inside

IDENTITY = "def check(candidate):\n    assert candidate(1) == 1\n"


@pytest.fixture(scope="module")
def one_slot(checker):
    """A checker with a single warm slot: consecutive verifications share it (the setting of the attacks)."""
    c = CodeChecker(SandboxConfig(slots=1, limits=Limits(memory_mb=512, nproc=32)))
    assert c.check("def f(x):\n    return x\n", IDENTITY, "f").passed
    yield c
    c.close()


def _slot(checker) -> W.WarmSlot:
    (item,) = checker.warm._all
    return item[0]


def _report(verdict) -> dict:
    """The JSON line the probe program printed last (stdout is kept in the verdict's details)."""
    lines = [ln for ln in verdict.details["stdout"].splitlines() if ln.startswith("{")]
    assert lines, verdict.details
    return json.loads(lines[-1])


def _probe(body: str) -> str:
    """A solution whose f(x) runs body (which fills the dict `out`), prints it as JSON and returns x."""
    indented = "".join("    " + line + "\n" for line in body.strip().splitlines())
    tail = "    print(json.dumps(out), flush=True)\n    return x\n"
    return f"import os, json\ndef f(x):\n    out = {{}}\n{indented}{tail}"


# 1. slot hijack ---------------------------------------------------------------------------------------

FD_LIST = """
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        out[n] = os.readlink(f"/proc/self/fd/{n}")
    except OSError:
        pass
out = {n: t for n, t in out.items() if not t.endswith("/fd")}  # the listing's own fd
"""


def test_solution_holds_only_its_job_fds(checker, host_unaffected):
    fds = _report(checker.check(_probe(FD_LIST), IDENTITY, "f"))
    assert sorted(fds) == ["0", "1", "2", "3", "4"], fds  # stdin, stdout, stderr, request, response
    assert all(t.startswith("pipe:") for t in fds.values()), fds
    r = checker.sandbox.run(["/bin/sh", "-c", "ls /proc/self/fd"])
    assert sorted(r.stdout.split()) == ["0", "1", "2", "3"], r  # 3: ls's own listing


HIJACK = """
import ctypes, resource, signal, socket, stat
signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # the grader hangs up on the garbage: carry on to the report
fake = json.dumps({"seq": 2, "clean": True, "exit_code": 0, "killed_for": None, "wall_s": 0.1, "cpu_s": 0.1})
for fd in range(3, 1024):
    for data in (b"garbage\\0\\xff" * 100, fake.encode()):
        try:
            os.write(fd, data)
            out.setdefault("wrote", []).append(fd)
        except OSError:
            pass
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            continue
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    try:
        socket.recv_fds(s, 1 << 16, 5, socket.MSG_DONTWAIT)
        out.setdefault("received_on", []).append(fd)
    except OSError:
        pass
    s.close()
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)
out["stolen"] = [n for n in range(64) if libc.syscall(438, pidfd, n, 0) >= 0]  # pidfd_getfd from pid 1
for path in ("/proc/1/mem", "/proc/1/fd"):
    try:
        os.listdir(path) if path.endswith("fd") else open(path, "r+b")
        out[path] = "open"
    except OSError as e:
        out[path] = e.strerror
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))
    out["prlimit"] = "ok"
except OSError as e:
    out["prlimit"] = e.strerror
for name, call in (
    ("nice", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19)),
    ("sched", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))),
):
    try:
        call()
        out[name] = "ok"
    except OSError as e:
        out[name] = e.strerror
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGSTOP):
    try:
        os.kill(1, sig)
    except OSError:
        pass
"""


def test_garbage_and_fake_status_on_every_fd_cannot_affect_later_jobs(one_slot):
    slot = _slot(one_slot)
    v = one_slot.check(_probe(HIJACK), IDENTITY, "f")
    assert not v.passed
    out = _report(v)
    assert set(out.get("wrote", [])) <= {3, 4} and "received_on" not in out, out  # only its own pipes
    assert out["stolen"] == [] and out["/proc/1/mem"] != "open" and out["/proc/1/fd"] != "open", out
    assert out["prlimit"] != "ok" and out["nice"] != "ok" and out["sched"] != "ok", out
    # the next jobs on the same, still trusted slot get their own results
    exit_3 = "import os\nos._exit(3)\ndef f(x):\n    return x\n"
    for program, passed, code in (("def f(x):\n    return x\n", True, 0), (exit_3, False, 3)):
        v = one_slot.check(program, IDENTITY, "f")
        assert v.passed is passed and v.details["exit_code"] == code, v.details
    assert _slot(one_slot) is slot and slot.alive()


@pytest.mark.parametrize(
    "status",
    [
        b"garbage",
        b'{"exit_code": 0, "killed_for": null, "wall_s": 0.1, "cpu_s": 0.1}',  # the pre-#37 shape, no seq
        b'{"seq": 999, "clean": true, "exit_code": 0, "killed_for": null, "wall_s": 0.1, "cpu_s": 0.1}',
        b'{"seq": 1, "clean": true, "exit_code": "0", "killed_for": null, "wall_s": 0.1, "cpu_s": 0.1}',
        b'{"seq": 1, "clean": true, "exit_code": 0, "killed_for": "x", "wall_s": 0.1, "cpu_s": 0.1}',
        b'{"seq": 1, "clean": true, "exit_code": 0, "killed_for": null, "wall_s": 0.1, "cpu_s": 0.1, "x": 1}',
    ],
)
def test_malformed_status_is_rejected(status):
    with pytest.raises(SandboxError, match="malformed status"):
        W.parse_status(status, 1)
    ok = b'{"seq": 1, "clean": true, "exit_code": 0, "killed_for": null, "wall_s": 0.1, "cpu_s": 0.1}'
    assert W.parse_status(ok, 1)["exit_code"] == 0


def test_slot_with_malformed_status_is_replaced_and_the_job_retried(one_slot, monkeypatch):
    slot = _slot(one_slot)
    real = W.WarmSlot._recv
    sent = []

    def lying_recv(self, deadline):
        data = real(self, deadline)
        if not sent and data is not None:
            sent.append(data)
            return b'{"seq": 0, "clean": true, "exit_code": 0, "killed_for": null, "wall_s": 0, "cpu_s": 0}'
        return data

    monkeypatch.setattr(W.WarmSlot, "_recv", lying_recv)
    v = one_slot.check("def f(x):\n    return x\n", IDENTITY, "f")
    assert v.passed and sent  # the lie cost one retry on a fresh slot
    assert _slot(one_slot) is not slot and not slot.alive()


def test_slot_that_could_not_empty_itself_is_replaced_after_the_job(one_slot, monkeypatch):
    slot = _slot(one_slot)
    real = W.WarmSlot._recv

    def dirty_recv(self, deadline):
        data = real(self, deadline)
        return data.replace(b'"clean": true', b'"clean": false') if self is slot and data else data

    monkeypatch.setattr(W.WarmSlot, "_recv", dirty_recv)
    assert one_slot.check("def f(x):\n    return x\n", IDENTITY, "f").passed  # the job itself stands
    assert one_slot.warm._all == [] and not slot.alive()  # closed, not returned to the pool
    assert one_slot.check("def f(x):\n    return x\n", IDENTITY, "f").passed
    assert _slot(one_slot) is not slot


# 2. state across episodes -----------------------------------------------------------------------------

PLACES = ("/dev", "/dev/shm", "/tmp", "/workspace", os.path.expanduser("~"), "/var/tmp", "/run", "/", "/usr")

WRITE = """
mark = MARK
for d in PLACES + [os.environ.get("HOME", "/workspace")]:
    try:
        with open(os.path.join(d, ".kb-" + mark), "w") as fh:
            fh.write(mark)
        out.setdefault("wrote", []).append(d)
    except OSError as e:
        out.setdefault("refused", {})[d] = e.strerror
for d in ("/dev/shm", "/tmp", "/workspace"):  # the folders themselves: xattrs, times and mode carry data too
    try:
        os.setxattr(d, "user.kb", mark.encode())
        os.utime(d, (12345, 67890))
        os.chmod(d, 0o701)
        out.setdefault("marked", []).append(d)
    except OSError as e:
        out.setdefault("unmarked", {})[d] = e.strerror
try:
    os.makedirs("/tmp/deep/er", exist_ok=True)
    open("/tmp/deep/er/.kb-" + mark, "w").write(mark)
    os.chmod("/tmp/deep/er", 0)
    os.chmod("/tmp/deep", 0o500)
except OSError:
    pass
"""

FIND = """
mark = MARK
found = []
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/usr")):
        dirs[:] = []
        continue
    found += [os.path.join(root, f) for f in files if mark in f]
out["found"] = found
out["left"] = {d: os.listdir(d) + os.listxattr(d) for d in ("/dev/shm", "/tmp", "/workspace")}
out["meta"] = sorted({(os.stat(d).st_mtime, oct(os.stat(d).st_mode)) for d in ("/dev/shm", "/tmp", "/workspace")})
"""


def test_nothing_written_survives_into_the_next_episode(one_slot):
    mark = uuid.uuid4().hex
    env = f"MARK = {mark!r}\nPLACES = {list(PLACES)!r}\n"
    wrote = _report(one_slot.check(_probe(env + WRITE), IDENTITY, "f"))
    assert {"/dev/shm", "/tmp", "/workspace"} <= set(wrote["wrote"]), wrote
    assert "/dev" in wrote["refused"] and "/" in wrote["refused"], wrote  # read-only
    seen = _report(one_slot.check(_probe(env + FIND), IDENTITY, "f"))
    assert seen["found"] == [] and seen["left"] == {"/dev/shm": [], "/tmp": [], "/workspace": []}, seen
    assert wrote["marked"] == ["/dev/shm", "/tmp", "/workspace"] and seen["meta"] == [[0, "0o40755"]], seen


FILL = """
for path in ("/dev/.kb", "/dev/shm/.kb", "/tmp/.kb"):
    total = 0
    try:
        with open(path, "wb") as fh:
            while total < (1 << 30):
                fh.write(b"x" * (1 << 20))
                total += 1 << 20
            fh.flush()
        out[path] = "no limit"
    except OSError as e:
        out[path] = [e.strerror, total >> 20]
"""


def test_filling_dev_fails_cleanly_and_the_slot_serves_on(one_slot):
    slot = _slot(one_slot)
    out = _report(one_slot.check(_probe(FILL), IDENTITY, "f", timeout_s=20))
    assert out["/dev/.kb"][0] == "Read-only file system", out
    assert out["/dev/shm/.kb"][1] <= Limits().shm_mb and out["/tmp/.kb"][1] <= Limits().workspace_mb, out
    assert one_slot.check("def f(x):\n    return x\n", IDENTITY, "f").passed
    assert _slot(one_slot) is slot and slot.alive()


OOM = """
for path in ("/tmp/a", "/workspace/a", "/dev/shm/a"):  # tmpfs pages count in the slot's memory cgroup
    try:
        with open(path, "wb") as fh:
            for _ in range(200):
                fh.write(b"x" * (1 << 20))
    except OSError:
        pass
hog = []
while True:
    hog.append(bytearray(32 << 20))
"""


def test_memory_pressure_kills_the_child_not_the_slot(one_slot):
    slot = _slot(one_slot)
    v = one_slot.check(_probe(OOM), IDENTITY, "f", timeout_s=20)
    assert v.details["killed_for"] == "memory" and not v.passed, v.details
    assert one_slot.check("def f(x):\n    return x\n", IDENTITY, "f").passed
    assert _slot(one_slot) is slot and slot.alive()


def test_cold_commands_see_a_read_only_dev_and_nosuid_mounts(checker):
    cmd = "echo x > /dev/x || echo refused; echo y > /dev/null && nice -n 5 echo ok; cat /proc/self/mountinfo"
    r = checker.sandbox.run(["/bin/sh", "-c", cmd])
    assert r.stdout.split()[:2] == ["refused", "ok"], r
    opts = {f[4]: f[5].split(",") for f in (line.split() for line in r.stdout.splitlines()[2:])}
    assert "ro" in opts["/dev"] and "ro" in opts["/"], opts
    nodes = {f"/dev/{n}" for n in ("full", "null", "random", "tty", "urandom", "zero")}  # bound device nodes
    writable = {p for p, o in opts.items() if "rw" in o} - nodes - {"/proc", "/dev/pts"}
    assert writable == {"/dev/shm", "/tmp", "/workspace"}, opts
    assert all({"nosuid", "nodev"} <= set(opts[p]) for p in writable), opts


# 4 and 5. host-side copies and reads ------------------------------------------------------------------

PLANT = (
    "cp /usr/bin/id suid_id && chmod 4755 suid_id && cp /usr/bin/id sgid_id && chmod 2755 sgid_id"
    " && mkdir -p sub/d && chmod 1777 sub/d && echo hi > sub/f.txt && mkfifo fifo sub/fifo"
    " && ln -s /etc/shadow out_abs && ln -s ../../etc out_rel && ln -s sub/f.txt in_link"
    " && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'"
)


def _promptly(fn, seconds: float = 10.0):
    """fn() in a thread; fails the test (instead of hanging it) if it does not return in time."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def planted(checker, host_unaffected, tmp_path):
    """A workspace where sandboxed code planted setuid copies, FIFOs, a socket and symlinks out."""
    with checker.sandbox.uid() as uid, Workspace(None, owner_uid=uid.uid if uid else None) as ws:
        r = checker.sandbox.run(["/bin/sh", "-c", PLANT], workspace=ws.path, slot=uid)
        assert r.exit_code == 0, r
        assert os.stat(os.path.join(ws.path, "suid_id")).st_mode & stat.S_ISUID  # the plant worked
        yield ws, tmp_path


def test_workspace_mounts_are_nosuid_nodev(planted):
    ws, _ = planted
    if ws.mode != "overlay":
        pytest.skip("copy mode mounts nothing")
    with open("/proc/self/mounts") as fh:
        opts = {line.split()[1]: line.split()[3].split(",") for line in fh}
    for point in (ws.base, ws.path):
        assert {"nosuid", "nodev"} <= set(opts[point]), (point, opts[point])


def test_keep_copies_regular_files_only_without_setuid(planted):
    ws, tmp = planted
    dest = str(tmp / "kept")
    rep = _promptly(lambda: ws.keep(dest))
    for name in ("suid_id", "sgid_id", "sub/f.txt"):
        st = os.lstat(os.path.join(dest, name))
        assert stat.S_ISREG(st.st_mode) and not st.st_mode & 0o7000, (name, oct(st.st_mode))
    assert not os.lstat(os.path.join(dest, "sub/d")).st_mode & 0o7000
    assert os.readlink(os.path.join(dest, "in_link")) == "sub/f.txt"
    for name in ("fifo", "sub/fifo", "sock", "out_abs", "out_rel"):
        assert not os.path.lexists(os.path.join(dest, name)), name
    assert sorted(r for r, _ in rep.skipped) == ["fifo", "out_abs", "out_rel", "sock", "sub/fifo"], rep
    assert rep.files == 3 and rep.dest == dest


def test_keep_respects_its_size_budget(planted):
    ws, tmp = planted
    rep = ws.keep(str(tmp / "small"), max_bytes=1000)
    assert rep.bytes <= 1000 and any("budget" in why for _, why in rep.skipped), rep


def test_host_reads_and_writes_never_block_on_fifos(planted):
    ws, tmp = planted
    for rel in ("fifo", "sub/fifo", "sock", "sub"):
        with pytest.raises(ValueError, match="not a regular file|cannot be"):
            _promptly(lambda rel=rel: read_inside(ws.path, rel))
    for rel in ("fifo", "sock"):
        with pytest.raises(ValueError):
            _promptly(lambda rel=rel: write_inside(ws.path, rel, "x", None))
    with pytest.raises(ValueError, match="outside"):
        read_inside(ws.path, "out_abs")
    assert read_inside(ws.path, "in_link") == "hi\n"
    write_inside(ws.path, "sub/f.txt", "new", None)
    assert read_inside(ws.path, "sub/f.txt") == "new"
    copied = _promptly(lambda: copy_tree(ws.path, str(tmp / "all"), max_bytes=1 << 20, links="all"))
    assert os.readlink(str(tmp / "all" / "out_abs")) == "/etc/shadow" and "fifo" in dict(copied.skipped)


def _call(name: str, **arguments) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments)}}}</tool_call>'


def test_code_agent_step_with_a_fifo_solution_returns_promptly(checker, host_unaffected, tmp_path):
    from rlpt.envs.code_agent import CodeAgentEnv

    env = CodeAgentEnv(checker=checker, keep_failed_dir=str(tmp_path), max_steps=4)
    env.reset(seed=0)
    plant = "import os\nos.remove('solution.py')\nos.mkfifo('solution.py')\nos.mkfifo('other')\n"
    obs, *_ = env.step(_call("run_python", code=plant))
    assert "exit code: 0" in obs, obs
    t0 = time.monotonic()
    obs, reward, done, _, info = _promptly(lambda: env.step(_call("run_tests")))
    assert time.monotonic() - t0 < 5 and reward == 0.0 and not done
    assert "tests failed (solution_unreadable)" in obs, obs
    obs, *_ = _promptly(lambda: env.step(_call("write_file", path="other", content="x")))
    assert "error: 'other' cannot be written" in obs, obs
    assert {r for r, _ in env.last_kept.skipped} == {"solution.py", "other"}
    env.close()


def test_shell_agent_step_with_a_fifo_target_returns_promptly(checker, host_unaffected, tmp_path):
    from rlpt.envs.builtin_tasks import shell_task
    from rlpt.envs.shell_agent import ShellAgentEnv

    env = ShellAgentEnv(checker=checker, keep_failed_dir=str(tmp_path))
    task = shell_task(2)  # target: hello.txt
    env.reset(options={"task": task})
    obs, reward, done, _, _ = _promptly(lambda: env.step(_call("shell", command="mkfifo hello.txt")))
    assert reward == 0.0 and not done and "exit code: 0" in obs
    obs, reward, done, _, info = _promptly(lambda: env.step(_call("submit")))
    assert done and reward == 0.0 and info["target"] == {"hello.txt": False}
    assert [r for r, _ in env.last_kept.skipped] == ["hello.txt"]
    env.close()
