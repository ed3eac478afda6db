"""Several JAX processes as one program: initialisation, the cross-process config check, and host <-> global data.

rlpt is a multi-controller program (JAX's distributed runtime): every process runs the same command, owns its
local devices, and the mesh spans every process's devices. Three kinds of data appear in a stage and are named
by what they hold:

- *global* arrays: `jax.Array`s over the whole mesh (parameters, optimizer state, batches on devices); a process
  can read only its addressable shards of them;
- *host-global* values: the same numpy value on every process (the task list of a step, a full batch built from
  the seed; `to_host` turns a global array into one);
- *host-local* values: this process's share only (`host_rows` of a batch, the rollouts it verifies);
  `gather_rows` concatenates every process's share in process order, into a host-global value.

Every wait on another process has a timeout (`mesh.timeout_s`; the runtime's heartbeat, `mesh.heartbeat_s`,
ends a collective whose peer died), and processes whose configs differ stop before the first step, naming the key.
"""
import dataclasses
import hashlib
import json
import logging
import os
import pickle
import sys
from typing import NewType

import jax
import numpy as np

log = logging.getLogger(__name__)
# The two kinds of host data, named in signatures (global arrays are jax.Array): a batch every process holds whole,
# and a process's own rows of one (process order along the batch axis).
HostGlobal = NewType("HostGlobal", dict)
HostLocal = NewType("HostLocal", dict)
PER_PROCESS_KEYS = ("mesh.process_id",)  # config keys that legitimately differ between processes
_timeout_s = [300.0]  # mesh.timeout_s of this process's initialisation: the default wait for another process


class DistributedError(RuntimeError):
    """Processes of one run disagree (config) or one of them did not answer in time."""


def peer_failure(error: BaseException) -> str | None:
    """A one-line explanation when `error` is a cross-process collective that failed because another process of
    the run died or stopped (gloo's connection errors, the coordination service's heartbeat timeout); else None."""
    if jax.process_count() == 1 or not isinstance(error, jax.errors.JaxRuntimeError):
        return None
    text = str(error)
    if not any(s in text for s in ("Gloo", "gloo", "heartbeat", "Connection reset", "UNAVAILABLE", "DEADLINE")):
        return None
    return (f"process {jax.process_index()} of {jax.process_count()}: a cross-process collective failed, so another "
            f"process of this run died or stopped (see its output): {text.splitlines()[0][:300]}")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def maybe_initialize_distributed(mcfg) -> bool:
    """`jax.distributed.initialize` once per process when `mesh.distributed` or JAX_COORDINATOR_ADDRESS asks.

    The coordinator, process count and id come from the config, else from JAX_COORDINATOR_ADDRESS /
    JAX_NUM_PROCESSES / JAX_PROCESS_ID, else from JAX's own cluster detection (SLURM, Cloud TPU, GKE, Open MPI).
    Must run before anything touches a JAX backend (rlpt.train.stages.run_stage calls it first). On CPU the
    cross-process collectives are gloo's."""
    env = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not (mcfg.distributed or env):
        return False
    if jax.distributed.is_initialized():  # a second stage in the same process (cold start, then RL)
        return True
    _timeout_s[0] = float(mcfg.timeout_s)
    kwargs = dict(initialization_timeout=int(mcfg.timeout_s), heartbeat_timeout_seconds=int(mcfg.heartbeat_s))
    if mcfg.coordinator_address or env:
        kwargs["coordinator_address"] = mcfg.coordinator_address or env
    count = mcfg.num_processes if mcfg.num_processes is not None else _env_int("JAX_NUM_PROCESSES")
    pid = mcfg.process_id if mcfg.process_id is not None else _env_int("JAX_PROCESS_ID")
    if count is not None:
        kwargs["num_processes"] = count
    if pid is not None:
        kwargs["process_id"] = pid
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process collectives on CPU
    jax.distributed.initialize(**kwargs)
    log.info("jax.distributed initialised: process %d of %d", jax.process_index(), jax.process_count())
    return True


_console: list = []  # this process's original stderr, once its output goes to its log file


def log_to_file(out_dir: str) -> str | None:
    """In a run of several processes, send a non-zero process's output (Python's and the runtime's: file
    descriptors 1 and 2) to `<out_dir>/logs/process_<id>.log`, so the console shows process 0 alone. Returns the
    log's path (None for process 0 or a single process; a second call keeps the first file)."""
    me = jax.process_index()
    if jax.process_count() == 1 or me == 0:
        return None
    path = os.path.join(os.path.abspath(out_dir), "logs", f"process_{me}.log")
    if _console:
        return _console[0][1]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    _console.append((os.fdopen(os.dup(2), "w", buffering=1), path))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return path


def console_note(message: str) -> None:
    """One line on this process's original stderr even when its output goes to its log file (a failure)."""
    if _console:
        stream, path = _console[0]
        stream.write(f"[process {jax.process_index()}] {message} (its log: {path})\n")
        stream.flush()


def _client():
    from jax._src.distributed import global_state  # JAX's coordination-service client (key-value store, barriers)

    if global_state.client is None:
        raise DistributedError("jax.distributed is not initialised")
    return global_state.client


def flat_config(cfg) -> dict:
    """The config as {dotted key: JSON value}, without the keys that differ by process."""
    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = json.dumps(value, sort_keys=True, default=str)

    walk("", dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg)
    return {k: v for k, v in out.items() if k not in PER_PROCESS_KEYS}


def check_same_config(cfg, timeout_s: float | None = None) -> None:
    """Stop every process, naming the first differing key, when the processes' configs differ.

    The processes exchange their config's hash (`gather_objects`, waiting at most `timeout_s`, default
    mesh.timeout_s); on a mismatch they exchange the configs themselves and each raises the same DistributedError
    naming the first key where process 0 and the first differing process disagree. One process: no-op.
    """
    if jax.process_count() == 1:
        return
    timeout_s = cfg.mesh.timeout_s if timeout_s is None else timeout_s
    flat = flat_config(cfg)
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()
    hashes = gather_objects(digest, "config/hash", timeout_s)
    odd = [p for p, h in enumerate(hashes) if h != hashes[0]]
    if not odd:
        return
    configs = gather_objects(flat, "config/text", timeout_s)
    ours, theirs = configs[0], configs[odd[0]]
    keys = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
    first = keys[0]
    raise DistributedError(
        f"config differs between processes: {first} is {ours.get(first, '<missing>')} in process 0 and "
        f"{theirs.get(first, '<missing>')} in process {odd[0]}"
        + (f" ({len(keys) - 1} more keys differ: {', '.join(keys[1:6])})" if len(keys) > 1 else "")
        + (f"; processes {odd} differ from process 0" if len(odd) > 1 else "")
        + ". Every process must run the same command.")


def _wait(client, key: str, timeout_ms: int, who: int, what: str) -> bytes:
    try:
        return client.blocking_key_value_get_bytes(key, timeout_ms)
    except Exception as e:  # the runtime raises its own error type on a timeout or a dead peer
        raise DistributedError(f"process {who} did not send {what} within {timeout_ms / 1000:.0f} s "
                               f"(mesh.timeout_s); it died or is stuck ({str(e).splitlines()[0][:200]})") from None


_uses: dict[str, int] = {}


def gather_objects(obj, key: str, timeout_s: float | None = None) -> list:
    """Every process's `obj` (picklable), in process order, on every process, through the coordination service's
    key-value store (no device collective, so a background thread may call it while the main thread trains).

    `key` names this exchange, the same on every process (e.g. "rl/step/12"); calls with the same key are numbered
    in call order, so a key may repeat (a second stage in the same process). Each wait lasts at most `timeout_s`
    (default: mesh.timeout_s of the initialisation); a process that never sends raises DistributedError naming it.
    The keys are deleted once every process has read them."""
    n = jax.process_count()
    if n == 1:
        return [obj]
    timeout_s = _timeout_s[0] if timeout_s is None else timeout_s
    client, me, timeout_ms = _client(), jax.process_index(), int(1000 * timeout_s)
    _uses[key] = _uses.get(key, 0) + 1
    key = f"{key}#{_uses[key]}"
    client.key_value_set_bytes(f"rlpt/gather/{key}/{me}", pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    out = [pickle.loads(_wait(client, f"rlpt/gather/{key}/{p}", timeout_ms, p, key)) if p != me else obj
           for p in range(n)]
    try:
        client.wait_at_barrier(f"rlpt/gather/{key}/read", timeout_ms)
    except Exception as e:
        raise DistributedError(f"a process did not finish exchange {key!r} within {timeout_s:.0f} s "
                               f"(mesh.timeout_s): {str(e).splitlines()[0][:200]}") from None
    client.key_value_delete(f"rlpt/gather/{key}/{me}")
    return out


def local_replica(tree, devices=None):
    """Global arrays (any sharding, any processes) -> full copies on this process's `devices` (default: all its
    local devices), replicated. Arrays spanning several processes are first all-gathered in one jitted program
    (every process must call it, in the same order: the main thread); arrays already on this process are copied
    only when they are not on `devices` yet. What a local sampler reads (multi-process runs, rl.placement=split)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = list(devices) if devices is not None else jax.local_devices()
    local = NamedSharding(Mesh(np.asarray(devices), ("local",)), PartitionSpec())
    leaves, treedef = jax.tree.flatten(tree)
    spread = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable]
    if spread:
        replicated = NamedSharding(leaves[spread[0]].sharding.mesh, PartitionSpec())
        whole = jax.jit(lambda xs: xs, out_shardings=[replicated] * len(spread))([leaves[i] for i in spread])
        for i, x in zip(spread, whole):
            by_device = {s.device: s.data for s in x.addressable_shards}
            if all(d in by_device for d in devices):
                leaves[i] = jax.make_array_from_single_device_arrays(x.shape, local, [by_device[d] for d in devices])
            else:
                leaves[i] = jax.device_put(by_device[next(iter(by_device))], local)
    if devices != jax.local_devices():
        leaves = [jax.device_put(x, local) if isinstance(x, jax.Array) and set(x.devices()) != set(devices) else x
                  for x in leaves]
    return jax.tree.unflatten(treedef, leaves)


def place(tree, shardings):
    """`jax.device_put(tree, shardings)`, also across meshes in a run of several processes: an array that must
    move between device sets there is gathered to every process (`to_host`) and each device takes its part."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(x, sharding):
        if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
            return x
        host = to_host(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    return jax.tree.map(one, tree, shardings)


def split_devices(count: int) -> tuple[list, list]:
    """(trainer devices, sampler devices) of rl.placement=split: every process gives its last `count` local devices
    (0: half of them) to the sampler; the trainer's mesh takes the rest of every process's devices."""
    local = jax.local_device_count()
    count = count or local // 2
    if not 0 < count < local:
        raise ValueError(f"rl.placement=split: rl.sampler_devices={count} must leave the trainer at least one of the "
                         f"{local} devices of each process (and take at least one)")
    trainer, sampler = [], []
    for p in range(jax.process_count()):
        mine = sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
        trainer += mine[:-count]
        if p == jax.process_index():
            sampler = mine[-count:]
    return trainer, sampler


def host_rows(n: int, what: str = "rows") -> slice:
    """This process's contiguous share of `n` rows (process order); n must divide by the process count."""
    count, me = jax.process_count(), jax.process_index()
    if n % count:
        raise ValueError(f"{what}: {n} do not divide over {count} processes; use a multiple of {count}")
    per = n // count
    return slice(me * per, (me + 1) * per)


def gather_rows(x):
    """Every process's host-local rows (same shape on each), concatenated in process order, on every process."""
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, x)
    from jax.experimental import multihost_utils

    return jax.tree.map(lambda a: np.asarray(multihost_utils.process_allgather(np.asarray(a), tiled=True)), x)


def to_host(x):
    """The full value of global arrays on every process (numpy); a gather when they span several processes."""
    def one(a):
        if not isinstance(a, jax.Array) or a.is_fully_addressable or a.is_fully_replicated:
            return np.asarray(a)
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(a, tiled=True))

    return jax.tree.map(one, x)
