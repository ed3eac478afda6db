"""Abuse cases: each is contained, scores 0, the pool keeps serving and the host is unaffected.

Every attack is a function attack() -> bool that returns True only if it got what it wanted. In a
verification (warm slot) the solution returns 1 + attack(), and the test asks for 2; in a plain command
(cold sandbox) the exit status is 0 only if attack() returned True.
"""

import os
import socket
import threading
import time
import uuid

import pytest
from rlpt.envs.sandbox import Limits
from rlpt.envs.sandbox.layers import sandbox_python

TEST = "def check(candidate):\n    assert candidate(1) == 2\n"
TIMEOUT = 3.0

ATTACKS = {
    "fork_bomb": """
def attack():
    import os, time
    while True:
        try:
            if os.fork() == 0:
                time.sleep(100)
                os._exit(0)
        except OSError:
            pass
""",
    "memory_bomb": """
def attack():
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
""",
    "cpu_spin": """
def attack():
    while True:
        pass
""",
    "disk_fill": """
def attack():
    total = 0
    with open("big.bin", "wb") as fh:
        while total < (2 << 30):
            fh.write(b"\\0" * (1 << 20))
            total += 1 << 20
    return True
""",
    "dev_fill": """
def attack():
    total = 0
    for path in ("/dev/.kb", "/dev/shm/.kb"):  # /dev is read-only; /dev/shm is a capped private tmpfs
        try:
            with open(path, "wb") as fh:
                while total < (1 << 30):
                    fh.write(b"\\0" * (1 << 20))
                    total += 1 << 20
        except OSError:
            pass
    return total > (64 << 20)
""",
    "huge_output": """
def attack():
    import sys
    for _ in range(200000):
        sys.stdout.write("x" * 100000 + "\\n")
    return True
""",
    "ignore_sigterm": """
def attack():
    import signal, time
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    while True:
        time.sleep(1)
""",
    "sleep_past_deadline": """
def attack():
    import time
    time.sleep(120)
    return True
""",
}


def _warm(checker, source: str, timeout: float = TIMEOUT):
    program = source + "\ndef f(x):\n    return x + (1 if attack() else 0)\n"
    return checker.check(program, TEST, "f", timeout_s=timeout)


def _cold(checker, source: str, wall_s: float = TIMEOUT):
    code = source + "\nimport sys\nsys.exit(0 if attack() else 1)\n"
    lim = Limits(wall_s=wall_s, cpu_s=int(wall_s), memory_mb=512, nproc=32, workspace_mb=64)
    return checker.sandbox.run([sandbox_python(), "-I", "-c", code], limits=lim)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_resource_abuse_contained_in_verification(checker, host_unaffected, name):
    t0 = time.monotonic()
    v = _warm(checker, ATTACKS[name])
    assert v.score == 0.0 and not v.passed
    assert time.monotonic() - t0 < TIMEOUT + 4.0
    if name in ("cpu_spin", "sleep_past_deadline", "ignore_sigterm", "fork_bomb"):
        assert v.details["killed_for"] in ("deadline", "cpu")
    if name == "huge_output":
        assert len(v.details["stdout"]) <= 2000 and v.details["killed_for"] == "output"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_resource_abuse_contained_in_command(checker, host_unaffected, name):
    t0 = time.monotonic()
    r = _cold(checker, ATTACKS[name])
    assert r.exit_code != 0
    assert time.monotonic() - t0 < TIMEOUT + 4.0
    if name in ("cpu_spin", "sleep_past_deadline", "ignore_sigterm", "fork_bomb"):
        assert r.killed_for in ("deadline", "cpu") and r.timed_out == (r.killed_for == "deadline")
    if name == "huge_output":
        assert r.truncated and len(r.stdout) <= (1 << 20)


@pytest.fixture
def loopback_server():
    """A TCP server on the host's loopback; records every connection it accepts."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    hits, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            hits.append(conn.recv(100))
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join()
    srv.close()


NETWORK = """
def attack():
    import socket
    for fam, addr in ((socket.AF_INET, ("127.0.0.1", PORT)), (socket.AF_INET6, ("::1", PORT))):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(addr)
            s.sendall(b"leak")
            return True
        except OSError:
            pass
    try:
        socket.getaddrinfo("example.com", 80)
        return True
    except OSError:
        pass
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        return True
    except (OSError, AttributeError):
        return False
"""


@pytest.mark.parametrize("mode", ["verification", "command"])
def test_network_egress_blocked(checker, host_unaffected, loopback_server, mode):
    port, hits = loopback_server
    src = NETWORK.replace("PORT", str(port))
    if mode == "verification":
        v = _warm(checker, src)
        assert v.score == 0.0 and "network" in v.details["flags"]
    else:
        assert _cold(checker, src).exit_code == 1
    time.sleep(0.3)
    assert hits == []


def test_reading_outside_workspace(checker, host_unaffected):
    """The hidden tests (with a unique mark) and a root-only file under a bound folder stay unreadable."""
    mark = uuid.uuid4().hex
    secret_dir = "/usr/local/share"
    os.makedirs(secret_dir, exist_ok=True)
    secret = os.path.join(secret_dir, f"rlpt-secret-{uuid.uuid4().hex}")
    with open(secret, "w") as fh:
        fh.write(mark)
    os.chmod(secret, 0o600)
    try:
        src = f"""
def attack():
    import os
    mark = "{mark[::-1]}"[::-1]  # never spelled out in the source (it is in /proc/self/cmdline)
    for path in ("{secret}", "/etc/shadow", "/root/.bash_history"):
        try:
            if mark in open(path).read():
                return True
        except OSError:
            pass
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/usr/lib", "/usr/share", "/usr/include", "/dev")):
            dirs[:] = []
            continue
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    if mark.encode() in fh.read(1 << 20):
                        return True
            except OSError:
                pass
    for pid in os.listdir("/proc"):
        for part in ("cmdline", "environ"):
            try:
                if mark.encode() in open(f"/proc/{{pid}}/{{part}}", "rb").read():
                    return True
            except OSError:
                pass
    return False
"""
        test = f"def check(candidate):\n    # {mark}\n    assert candidate(1) == 2\n"
        v = checker.check(src + "\ndef f(x):\n    return x + (1 if attack() else 0)\n", test, "f", timeout_s=10)
        assert v.score == 0.0 and v.details["error"].startswith("AssertionError")
        assert "reads_outside_workspace" in v.details["flags"]
        r = _cold(checker, src, wall_s=10)
        assert r.exit_code == 1, r.stderr
    finally:
        os.remove(secret)


def test_writing_outside_workspace(checker, host_unaffected):
    mark = uuid.uuid4().hex
    targets = [
        f"/usr/local/share/rlpt-w-{mark}",
        f"/etc/rlpt-w-{mark}",
        f"/var/tmp/rlpt-w-{mark}",
        f"/root/rlpt-w-{mark}",
        f"/tmp/rlpt-w-{mark}",
    ]
    src = f"""
def attack():
    ok = False
    for path in {targets!r}:
        try:
            with open(path, "w") as fh:
                fh.write("x")
            ok = ok or not path.startswith("/tmp/")  # the sandbox's own /tmp is private
        except OSError:
            pass
    return ok
"""
    assert _warm(checker, src).score == 0.0
    assert _cold(checker, src).exit_code == 1
    for p in targets:
        assert not os.path.exists(p), p


def _victim_program(secret: str) -> str:
    return f"SECRET = '{secret}'\ndef f(x):\n    import time\n    time.sleep(1.5)\n    return x + 1\n"


def test_killing_parent_and_other_sandboxes(checker, host_unaffected):
    """A concurrent victim verification still passes; the host process and the pool survive."""
    victim = {}
    t = threading.Thread(target=lambda: victim.setdefault("v", checker.check(_victim_program("v"), TEST, "f")))
    t.start()
    time.sleep(0.3)
    src = f"""
def attack():
    import os, signal
    hit = False
    for pid in [os.getppid(), 1, {os.getpid()}] + list(range(2, 5000)):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            hit = hit or pid in (1, {os.getpid()})
        except OSError:
            pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    return hit
"""
    v = _warm(checker, src)
    assert v.score == 0.0 and "process_tampering" in v.details["flags"]
    assert _cold(checker, src).exit_code != 0
    t.join()
    assert victim["v"].passed


def test_escaping_the_process_group(checker, host_unaffected):
    """setsid + double-fork daemon: gone after the run (host_unaffected checks), flagged in verification."""
    src = """
def attack():
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.chdir("/")
            for fd in range(3):
                os.close(fd)
            while True:
                time.sleep(0.1)
        os._exit(0)
    time.sleep(0.3)
    return True
"""
    v = _warm(checker, src)
    assert v.score == 0.0 and "process_spawn" in v.details["flags"]
    r = _cold(checker, src)
    assert r.exit_code == 0  # the escape itself "worked" inside; what matters is that nothing survives


def test_reading_other_episodes_through_proc(checker, host_unaffected):
    secret = uuid.uuid4().hex
    victim = {}
    t = threading.Thread(target=lambda: victim.setdefault("v", checker.check(_victim_program(secret), TEST, "f")))
    t.start()
    time.sleep(0.3)
    src = f"""
def attack():
    import os, re
    want = "{secret[::-1]}"[::-1].encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if want in open(f"/proc/{{pid}}/{{part}}", "rb").read():
                    return True
            except OSError:
                pass
        try:
            maps = open(f"/proc/{{pid}}/maps").read().splitlines()
            with open(f"/proc/{{pid}}/mem", "rb") as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "rw" in line.split()[1] and hi - lo < (64 << 20):
                        mem.seek(lo)
                        if want in mem.read(hi - lo):
                            return True
        except (OSError, ValueError, OverflowError):
            pass
    return False
"""
    v = _warm(checker, src)
    assert v.score == 0.0
    t.join()
    assert victim["v"].passed
