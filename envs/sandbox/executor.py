"""Run one untrusted command in bubblewrap namespaces, a per-slot uid, cgroups, rlimits and seccomp."""

import json
import os
import resource
import select
import selectors
import signal
import subprocess
import time

from rlpt.envs.sandbox import layers as L
from rlpt.envs.sandbox.limits import ExecResult, Limits, SandboxError
from rlpt.envs.sandbox.seccomp_filter import bpf_program

_RLIMIT_FLAGS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_MEMLOCK: "--memlock",
    resource.RLIMIT_MSGQUEUE: "--msgqueue",
}
_ETC = ("ld.so.cache", "alternatives", "localtime", "passwd", "group", "nsswitch.conf")
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


def bwrap_argv(
    limits: Limits,
    workspace: str | None,
    ro_binds: tuple[tuple[str, str], ...],
    *,
    seccomp_fd: int | None,
    info_fd: int,
    block_fd: int,
    die_with_parent: bool = True,
) -> list[str]:
    """bwrap options: every namespace, read-only system folders and /dev, private capped /tmp, /dev/shm, /workspace.

    die_with_parent ties the sandbox to the *thread* that started it (PR_SET_PDEATHSIG); long-lived sandboxes
    started from short-lived threads turn it off and end when their control socket closes instead.
    """
    a = [
        "bwrap",
        "--unshare-all",
        "--as-pid-1",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "lib", "lib64", "sbin"):
        src = os.path.join("/", name)
        if os.path.islink(src):
            a += ["--symlink", os.readlink(src), src]
        elif os.path.isdir(src):
            a += ["--ro-bind", src, src]
    for name in _ETC:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    if die_with_parent:
        a.append("--die-with-parent")
    # /dev: bwrap's minimal set (null, zero, full, random, urandom, tty, pts), read-only below; its only
    # writable part is a private, size-capped /dev/shm that the warm zygote empties with /tmp between runs
    a += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.shm_mb << 20), "--tmpfs", "/dev/shm"]
    a += ["--size", str(limits.workspace_mb << 20), "--tmpfs", "/tmp"]
    if workspace is None:
        a += ["--size", str(limits.workspace_mb << 20), "--tmpfs", "/workspace"]
    else:
        a += ["--bind", workspace, "/workspace"]
    for src, dst in ro_binds:
        a += ["--ro-bind", src, dst]
    for k, v in ENV.items():
        a += ["--setenv", k, v]
    # the root tmpfs that bwrap builds stays read-only, and so does /dev: only /workspace, /tmp and /dev/shm
    # take writes. Every bind and tmpfs is nosuid and nodev (bwrap adds both to all but --dev-bind).
    a += [
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/workspace",
        "--info-fd",
        str(info_fd),
        "--block-fd",
        str(block_fd),
    ]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    return a


def prlimit_argv(limits: Limits) -> list[str]:
    """util-linux prlimit lowers the limits on itself, then execs the command (root here lacks
    CAP_SYS_RESOURCE, so the parent cannot set them on another uid's process)."""
    return ["/usr/bin/prlimit"] + [f"{_RLIMIT_FLAGS[r]}={s}:{h}" for r, (s, h) in limits.rlimits().items()] + ["--"]


def _read_info(fd: int, deadline: float) -> dict:
    buf = b""
    while not buf.rstrip().endswith(b"}"):
        if time.monotonic() > deadline:
            raise SandboxError("bwrap did not report its child pid in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    try:
        return json.loads(buf)
    except ValueError as e:
        raise SandboxError(f"bwrap failed before starting the command: {buf!r}") from e


def spawn(
    argv: list[str],
    *,
    limits: Limits,
    slot: "L.UidSlot | None",
    workspace: str | None = None,
    ro_binds: tuple[tuple[str, str], ...] = (),
    pass_fds: tuple[int, ...] = (),
    use_seccomp: bool = True,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    die_with_parent: bool = True,
) -> subprocess.Popen:
    """Start argv in a fresh bwrap sandbox: the command is held until it sits in the slot's cgroups.

    The returned Popen carries `sandbox_pidfd` (the namespace's pid 1); release it with close_pidfd().
    """
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    fds = [info_w, block_r]
    if use_seccomp:
        sec_r, sec_w = os.pipe()
        os.write(sec_w, bpf_program())
        os.close(sec_w)
        fds.append(sec_r)
    cmd = bwrap_argv(
        limits,
        workspace,
        ro_binds,
        seccomp_fd=fds[2] if use_seccomp else None,
        info_fd=info_w,
        block_fd=block_r,
        die_with_parent=die_with_parent,
    )
    cmd += prlimit_argv(limits) + list(argv)
    kw = {"user": slot.uid, "group": slot.uid, "extra_groups": []} if slot is not None else {}
    if slot is not None:
        _prepare_cgroups(slot, limits)
    try:
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                pass_fds=tuple(fds) + tuple(pass_fds),
                process_group=0,
                **kw,
            )
        finally:
            for fd in fds:
                os.close(fd)
        try:
            info = _read_info(info_r, time.monotonic() + 30.0)
        except SandboxError:
            _kill(proc, slot)
            err = proc.stderr.read(4096).decode(errors="replace") if proc.stderr else ""
            proc.wait()
            raise SandboxError(f"sandbox setup failed: {err.strip()}") from None
        proc.sandbox_pidfd = os.pidfd_open(info["child-pid"])  # reuse-safe handle on the namespace's pid 1
        if slot is not None:
            for path in slot.cgroups.values():
                with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                    fh.write(str(info["child-pid"]))
        os.write(block_w, b"1")
        return proc
    finally:
        os.close(info_r)
        os.close(block_w)


def execute(
    argv: list[str],
    *,
    limits: Limits,
    slot: "L.UidSlot | None",
    workspace: str | None = None,
    stdin: bytes = b"",
    ro_binds: tuple[tuple[str, str], ...] = (),
    use_seccomp: bool = True,
) -> ExecResult:
    """Run argv inside a fresh sandbox and wait for it, its deadline, or its output cap."""
    t0 = time.monotonic()
    mem_before = (0, memory_events(slot)[1])  # spawn() resets failcnt; oom_kill only ever grows
    proc = spawn(
        argv,
        limits=limits,
        slot=slot,
        workspace=workspace,
        ro_binds=ro_binds,
        use_seccomp=use_seccomp,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
    )
    try:
        return _wait(proc, slot, limits, stdin, t0, mem_before)
    finally:
        _kill(proc, slot)
        close_pidfd(proc)
        for fh in (proc.stdin, proc.stdout, proc.stderr):
            if fh is not None:
                fh.close()


def _prepare_cgroups(slot: "L.UidSlot", limits: Limits) -> None:
    _kill_cgroup(slot)
    if "pids" in slot.cgroups:
        _write(os.path.join(slot.cgroups["pids"], "pids.max"), str(limits.nproc))
    if "memory" in slot.cgroups:
        path = slot.cgroups["memory"]
        L.set_memory_limit(path, limits.memory_mb)
        _write(os.path.join(path, "memory.failcnt"), "0")


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _wait(proc, slot, limits: Limits, stdin: bytes, t0: float, mem_before: tuple[int, int]) -> ExecResult:
    deadline = t0 + limits.wall_s
    sel = selectors.DefaultSelector()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    for fh in bufs:
        os.set_blocking(fh.fileno(), False)
        sel.register(fh, selectors.EVENT_READ)
    if stdin:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    killed_for, truncated = None, False
    while bufs and sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            killed_for = "deadline"
            break
        for key, _ in sel.select(timeout=min(left, 1.0)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = bufs[key.fileobj]
            buf += chunk
            if len(buf) > limits.output_bytes:
                del buf[limits.output_bytes :]
                truncated, killed_for = True, "output"
        if killed_for:
            break
    sel.close()
    if killed_for:
        _kill(proc, slot)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    rc = proc.returncode
    if killed_for is None and rc is not None and rc > 128:
        sig = rc - 128
        mem_hit = memory_hit(slot, mem_before)
        killed_for = {signal.SIGXCPU: "cpu"}.get(sig, "memory" if mem_hit and sig == 9 else f"signal:{sig}")
    return ExecResult(
        stdout=bytes(bufs[proc.stdout]).decode("utf-8", errors="replace"),
        stderr=bytes(bufs[proc.stderr]).decode("utf-8", errors="replace"),
        exit_code=rc,
        timed_out=killed_for == "deadline",
        killed_for=killed_for,
        wall_s=time.monotonic() - t0,
        cpu_s=ru.ru_utime + ru.ru_stime,
        truncated=truncated,
    )


def _failcnt(path: str) -> int:
    with open(os.path.join(path, "memory.failcnt")) as fh:
        return int(fh.read())


def memory_events(slot) -> tuple[int, int]:
    """(limit hits, OOM kills) in the slot's memory cgroup so far, (0, 0) without one; a run hit its memory
    limit when either grew (some kernels kill in the cgroup without raising failcnt)."""
    if slot is None or "memory" not in slot.cgroups:
        return 0, 0
    path = slot.cgroups["memory"]
    kills = 0
    try:
        with open(os.path.join(path, "memory.oom_control")) as fh:
            kills = next((int(ln.split()[1]) for ln in fh if ln.startswith("oom_kill ")), 0)
    except OSError:
        pass
    return _failcnt(path), kills


def memory_hit(slot, before: tuple[int, int]) -> bool:
    """Whether memory_events(slot) grew past before."""
    return any(now > then for now, then in zip(memory_events(slot), before))


def _kill(proc, slot) -> None:
    """Kill the namespace's pid 1 first (every process in the namespace dies with it), let bwrap reap it and
    exit, and only then SIGKILL bwrap's group: killing bwrap first would leave pid 1 to the host's init."""
    inner = getattr(proc, "sandbox_pidfd", None)
    if inner is not None:
        try:
            signal.pidfd_send_signal(inner, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if slot is not None:
        _kill_cgroup(slot)
    if proc.returncode is None:
        try:
            outer = os.pidfd_open(proc.pid)
        except ProcessLookupError:
            return
        try:
            if not select.select([outer], [], [], 2.0)[0]:
                os.killpg(proc.pid, signal.SIGKILL)
        finally:
            os.close(outer)


def close_pidfd(proc) -> None:
    """Release the pidfd that spawn() attached to proc."""
    fd = getattr(proc, "sandbox_pidfd", None)
    if fd is not None:
        proc.sandbox_pidfd = None
        os.close(fd)


def _kill_cgroup(slot) -> None:
    for path in slot.cgroups.values():
        for _ in range(1000):
            pids = L.cgroup_pids(path)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)
        else:
            raise SandboxError(f"processes survive in cgroup {path}")
