"""`python -m rlpt.launch local --nproc N -- CMD ...`: N processes of CMD on this machine, as one JAX program.

Each process gets the environment `jax.distributed` reads (JAX_COORDINATOR_ADDRESS on loopback, JAX_NUM_PROCESSES,
JAX_PROCESS_ID) and its own fake CPU devices (`--devices-per-process`, XLA's host platform device count); rlpt
initialises the distributed runtime from them (rlpt.parallel.maybe_initialize_distributed: gloo collectives on
CPU). Every output line is prefixed with its process id. When one process exits non-zero or dies, the others are
killed and the launcher exits with that status, naming the process; all exiting 0 is success.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

XLA_DEVICES = "--xla_force_host_platform_device_count"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(base: dict, rank: int, nproc: int, port: int, devices: int | None) -> dict:
    """The environment of process `rank`: the coordinator on loopback, its id, and its fake device count."""
    env = dict(base, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(nproc),
               JAX_PROCESS_ID=str(rank), PYTHONUNBUFFERED="1")
    if devices is not None:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(XLA_DEVICES)]
        env["XLA_FLAGS"] = " ".join(flags + [f"{XLA_DEVICES}={devices}"])
        env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _pump(rank: int, stream, out) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"[p{rank}] {line}")
        out.flush()


def launch_local(cmd: list[str], nproc: int, *, devices_per_process: int | None = None, port: int | None = None,
                 grace_s: float = 10.0, out=None) -> int:
    """Run `cmd` as `nproc` processes; returns 0 when all exit 0, else the first failure's status (the others are
    killed: SIGTERM, then SIGKILL after `grace_s`)."""
    if nproc < 1:
        raise ValueError(f"--nproc={nproc}: need at least 1 process")
    if not cmd:
        raise ValueError("no command to launch: python -m rlpt.launch local --nproc N -- python -m rlpt.train ...")
    out = out or sys.stdout
    port = port or free_port()
    procs, pumps = [], []
    for rank in range(nproc):
        p = subprocess.Popen(cmd, env=process_env(os.environ, rank, nproc, port, devices_per_process),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        pumps.append(threading.Thread(target=_pump, args=(rank, p.stdout, out), daemon=True))
        pumps[-1].start()
        procs.append(p)
    status, failed = 0, None
    while True:
        codes = [p.poll() for p in procs]  # poll every process: a dead one is seen while the others still run
        failed = next((r for r, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None or all(c is not None for c in codes):
            break
        time.sleep(0.2)
    if failed is None:
        failed = next((r for r, p in enumerate(procs) if p.returncode != 0), None)
    if failed is not None:
        status = procs[failed].returncode
        why = f"killed by signal {-status}" if status < 0 else f"exited with status {status}"
        out.write(f"[launch] process {failed} {why}; stopping the other {nproc - 1}\n")
        out.flush()
        _stop([p for p in procs if p.poll() is None], grace_s)
        status = status if status > 0 else 128 - status
    for p in procs:
        p.wait()
    for t in pumps:  # the last lines; a grandchild still holding the pipe does not hold the launcher
        t.join(timeout=grace_s)
    return status


def _stop(procs, grace_s: float) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
