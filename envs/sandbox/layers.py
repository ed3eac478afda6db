"""Probe the isolation layers this host offers; claim per-slot uids and their cgroups."""

import dataclasses
import functools
import os
import shutil
import socket
import subprocess

CGROUP_ROOT = "/sys/fs/cgroup"
ALL_LAYERS = (
    "process_group",
    "rlimits",
    "fresh_workspace",
    "namespaces",
    "no_network",
    "seccomp",
    "uid",
    "cgroup_pids",
    "cgroup_memory",
)
# Root ignores RLIMIT_NPROC and reads every file, so as root a distinct uid is part of the minimum.
DEFAULT_MINIMUM = ("process_group", "rlimits", "fresh_workspace", "namespaces", "no_network", "seccomp")


def sandbox_python() -> str:
    """An interpreter an unprivileged uid can execute (pyenv builds under /root are not readable)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError("no system python3 for sandboxed code in /usr/bin or /usr/local/bin")


def _cgroup_ok(controller: str) -> bool:
    base = os.path.join(CGROUP_ROOT, controller)
    if os.geteuid() != 0 or not os.path.isfile(os.path.join(base, "cgroup.procs")):
        return False
    try:
        os.makedirs(os.path.join(base, "rlpt"), exist_ok=True)
        return True
    except OSError:
        return False


def _seccomp_ok() -> bool:
    try:
        from rlpt.envs.sandbox.seccomp_filter import bpf_program  # optional: pyseccomp may be missing

        return len(bpf_program()) > 0
    except (ImportError, OSError):
        return False


@functools.lru_cache(maxsize=1)
def probe() -> dict[str, bool]:
    """Which layers work here. namespaces needs bubblewrap to run a process in fresh namespaces."""
    bwrap = shutil.which("bwrap")
    ns_ok = False
    if bwrap:
        argv = [
            bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--",
            "/bin/true",
        ]
        kw = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
        try:
            ns_ok = subprocess.run(argv, capture_output=True, timeout=20, **kw).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ns_ok = False
    return {
        "process_group": True,
        "rlimits": True,
        "fresh_workspace": True,
        "namespaces": ns_ok,
        "no_network": ns_ok,
        "seccomp": ns_ok and _seccomp_ok(),
        "uid": os.geteuid() == 0,
        "cgroup_pids": _cgroup_ok("pids"),
        "cgroup_memory": _cgroup_ok("memory"),
    }


def required_layers(minimum: tuple[str, ...] | None) -> tuple[str, ...]:
    """The configured minimum, plus 'uid' when running as root."""
    req = tuple(DEFAULT_MINIMUM if minimum is None else minimum)
    bad = [x for x in req if x not in ALL_LAYERS]
    if bad:
        raise ValueError(f"unknown isolation layer(s) {bad}; known: {ALL_LAYERS}")
    if os.geteuid() == 0 and "uid" not in req:
        req = req + ("uid",)
    return req


@dataclasses.dataclass
class UidSlot:
    """An exclusively claimed uid (abstract unix socket as a lock) with its cgroup folders."""

    uid: int
    lock: socket.socket
    cgroups: dict[str, str]

    def release(self) -> None:
        for path in self.cgroups.values():
            try:
                os.rmdir(path)
            except OSError:
                pass  # still busy: left for the next claim of this uid, which reuses it
        self.lock.close()


def claim_uid(uid_base: int, uid_count: int, memory_mb: int, nproc: int) -> UidSlot:
    """Claim a free uid in [uid_base, uid_base + uid_count) system-wide, with pids/memory cgroups."""
    for uid in range(uid_base, uid_base + uid_count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(f"\0rlpt-sandbox-uid-{uid}")
        except OSError:
            s.close()
            continue
        return UidSlot(uid, s, _make_cgroups(uid, memory_mb, nproc))
    raise RuntimeError(f"all sandbox uids in [{uid_base}, {uid_base + uid_count}) are in use")


def _make_cgroups(uid: int, memory_mb: int, nproc: int) -> dict[str, str]:
    layers = probe()
    out = {}
    if layers["cgroup_pids"]:
        path = os.path.join(CGROUP_ROOT, "pids", "rlpt", str(uid))
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "pids.max"), str(nproc))
        out["pids"] = path
    if layers["cgroup_memory"]:
        path = os.path.join(CGROUP_ROOT, "memory", "rlpt", str(uid))
        os.makedirs(path, exist_ok=True)
        set_memory_limit(path, memory_mb)
        out["memory"] = path
    return out


def set_memory_limit(path: str, memory_mb: int) -> None:
    """Set memory (and memory+swap, when accounted) limits; their order matters since memsw >= mem."""
    files = [os.path.join(path, "memory.limit_in_bytes"), os.path.join(path, "memory.memsw.limit_in_bytes")]
    files = [f for f in files if os.path.exists(f)]
    try:
        for f in files:
            _write(f, str(memory_mb << 20))
    except OSError:
        for f in reversed(files):
            _write(f, str(memory_mb << 20))


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def cgroup_pids(path: str) -> list[int]:
    """Host pids currently in a cgroup folder."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except FileNotFoundError:
        return []
