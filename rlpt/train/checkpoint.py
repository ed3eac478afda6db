"""Orbax checkpoints: async, atomic, keep the last K; state + data/curriculum position + config fingerprint.

Resume takes the newest *readable* step: an empty or truncated step directory (a crash mid-copy, a full disk)
is logged, moved aside to `<step>.unreadable` and the previous step is used. A failed write (e.g. ENOSPC) is
one CheckpointWriteError line and leaves no `*.orbax-checkpoint-tmp*` directory behind.
"""
import errno
import hashlib
import json
import logging
import os
import shutil
import threading

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

TMP_MARK = ".orbax-checkpoint-tmp"


class IncompatibleCheckpoint(ValueError):
    """The run folder holds checkpoints from a different model/optimizer config."""


class RunFolderError(ValueError):
    """The run folder cannot be used as asked (train.resume=never on a folder that holds a run)."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the message is one line."""


def fingerprint(*configs) -> str:
    """A stable hash of the configs that fix the shapes of the saved state."""
    text = json.dumps([json.loads(json.dumps(c, default=lambda o: getattr(o, "__dict__", str(o)))) for c in configs],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _chain(exc: BaseException | None):
    """`exc`, its causes/contexts and the members of exception groups, each once."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]


def is_disk_full(exc: BaseException | None) -> bool:
    """ENOSPC anywhere in the chain (OSError from Python, or a tensorstore error that only says so in text)."""
    return any((isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e)
               for e in _chain(exc))


class _DropDiskFullRecords(logging.Filter):
    """Orbax's background threads log each failed write with its traceback (dozens for one full disk);
    CheckpointWriteError reports it once, so these records are dropped, and after a reported failure so are
    orbax's errors from the abandoned save's remaining threads (e.g. at interpreter shutdown)."""

    failed = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and is_disk_full(record.exc_info[1]):
            return False
        if self.failed and record.levelno >= logging.ERROR and "orbax" in record.pathname:
            return False
        msg = record.getMessage()
        return "No space left on device" not in msg and "Errno 28" not in msg


_DISK_FULL_FILTER = _DropDiskFullRecords()


def step_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


class Checkpointer:
    """Wraps ocp.CheckpointManager: save(step, state, meta) every `every` steps, restore the newest readable.

    resume="never" refuses a directory that already holds steps (before any training: the run would fail at its
    first save and would otherwise mix two runs in one folder).
    """

    def __init__(self, directory: str, *, every: int, keep: int, fingerprint: str, async_save: bool = True,
                 seed: int | None = None, resume: str = "auto"):
        self.directory = os.path.abspath(directory)
        self.fingerprint, self.seed = fingerprint, seed
        self.unreadable: dict[int, str] = {}  # step -> why it could not be read
        self._pending: int | None = None  # the step of a save that may still be running in the background
        opts = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=max(every, 1),
                                            enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=opts)
        absl_logger = logging.getLogger("absl")
        if _DISK_FULL_FILTER not in absl_logger.filters:
            absl_logger.addFilter(_DISK_FULL_FILTER)
        _DISK_FULL_FILTER.failed = False  # a new writer: orbax errors are reported again
        steps = self.manager.all_steps()
        if resume == "never" and steps:
            raise RunFolderError(
                f"{self.directory} already holds checkpoints (steps {sorted(steps)}) and train.resume=never: "
                f"use a new train.out_dir, or train.resume=auto to continue that run. Nothing was written.")
        self._check_compatible()

    def _read_meta(self, step: int) -> dict:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def _check_compatible(self):
        steps = sorted(self.manager.all_steps(), reverse=True)
        for step in steps:
            try:
                meta = self._read_meta(step)
            except Exception as e:  # noqa: BLE001  (any unreadable step: record why, fall back to an older one)
                self.unreadable[step] = step_reason(e)
                continue
            self._check_meta(step, meta)
            return
        if steps:
            raise IncompatibleCheckpoint(
                f"{self.directory}: no readable checkpoint among steps {sorted(steps)} ("
                + "; ".join(f"step {s}: {why}" for s, why in sorted(self.unreadable.items()))
                + "); move the folder away or use a new train.out_dir. Nothing was overwritten.")

    def _check_meta(self, step: int, meta: dict):
        if meta.get("fingerprint") != self.fingerprint:
            raise IncompatibleCheckpoint(
                f"{self.directory}: checkpoint at step {step} was written by a different model/optimizer "
                f"config (fingerprint {meta.get('fingerprint')} != {self.fingerprint}); use another "
                f"train.out_dir or train.resume=never with a new folder. Nothing was overwritten.")
        # Another seed is another run: resuming it would continue (and report) that run's results as this one's.
        if self.seed is not None and meta.get("seed") is not None and int(meta["seed"]) != int(self.seed):
            raise IncompatibleCheckpoint(
                f"{self.directory}: checkpoint at step {step} belongs to a run with train.seed={meta['seed']}, "
                f"not train.seed={self.seed}; give this run its own folder (e.g. train.out_dir=<dir>_seed"
                f"{self.seed}) or train.resume=never with a new folder. Nothing was overwritten.")

    def latest_step(self):
        """The newest step that is not known to be unreadable (None: nothing to resume)."""
        readable = [s for s in self.manager.all_steps() if s not in self.unreadable]
        return max(readable) if readable else None

    def save(self, step: int, state, meta: dict, *, force: bool = False) -> bool:
        meta = dict(meta, fingerprint=self.fingerprint, step=int(step))
        if self.seed is not None:
            meta["seed"] = int(self.seed)
        try:  # an earlier async save's failure surfaces here too
            saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                                    meta=ocp.args.JsonSave(meta)), force=force)
        except Exception as e:  # noqa: BLE001  (re-raised unless it is a full disk)
            self._write_failed(e, self._pending if self._pending is not None else step)
        self._pending = step if saved else self._pending
        return saved

    def restore(self, abstract_state, step: int | None = None):
        """(state, meta) at `step` (default: the newest readable step), placed on the shardings of
        `abstract_state`. Unreadable newer steps are logged and moved aside to `<step>.unreadable`."""
        target = jax.tree.map(lambda x: ocp.utils.to_shape_dtype_struct(x) if hasattr(x, "shape") else x,
                              abstract_state)
        candidates = [step] if step is not None else sorted(
            (s for s in self.manager.all_steps() if s not in self.unreadable), reverse=True)
        for s in candidates:
            try:
                out = self.manager.restore(s, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                       meta=ocp.args.JsonRestore()))
            except Exception as e:  # noqa: BLE001  (logged with its reason; an older step is tried next)
                if step is not None:
                    raise
                self.unreadable[s] = step_reason(e)
                continue
            self._set_aside(newer_than=s)
            return out["state"], out["meta"]
        raise IncompatibleCheckpoint(
            f"{self.directory}: no readable checkpoint ("
            + "; ".join(f"step {k}: {why}" for k, why in sorted(self.unreadable.items()))
            + "); move the folder away or use a new train.out_dir. Nothing was overwritten.")

    def _set_aside(self, newer_than: int):
        """Move unreadable steps newer than the restored one out of orbax's way (kept for inspection), so this
        run can save those step numbers again."""
        moved = False
        for s, why in sorted(self.unreadable.items()):
            src = os.path.join(self.directory, str(s))
            if s <= newer_than or not os.path.isdir(src):
                continue
            dst, n = f"{src}.unreadable", 1
            while os.path.exists(dst):
                dst, n = f"{src}.unreadable{n}", n + 1
            os.rename(src, dst)
            moved = True
            log.warning("checkpoint step %d in %s is unreadable (%s): skipped it (moved to %s); resuming from "
                        "step %d", s, self.directory, why, os.path.basename(dst), newer_than)
        if moved:
            self.manager.reload()

    def _write_failed(self, exc: BaseException, step: int | None):
        """Raise one CheckpointWriteError line for a full disk (after removing the partial checkpoint)."""
        if not is_disk_full(exc):
            raise exc
        _DISK_FULL_FILTER.failed = True
        try:  # let orbax's background threads finish so nothing writes into the directories removed below
            self.manager.close()
        except Exception:  # noqa: BLE001, S110  (the same failure again; it is reported below)
            pass
        for t in threading.enumerate():  # the abandoned save's other writers (e.g. its metadata thread)
            if t is not threading.current_thread() and type(t).__module__.startswith("orbax"):
                t.join(timeout=60)
        removed = []
        for name in sorted(os.listdir(self.directory)):
            if TMP_MARK in name:
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
                removed.append(name)
        free = shutil.disk_usage(self.directory).free / 2**20
        done = [s for s in self.manager.all_steps() if s not in self.unreadable]
        raise CheckpointWriteError(
            f"{self.directory}: no space left on device while writing checkpoint step {step} ({free:.0f} MiB free); "
            f"removed the partial checkpoint ({', '.join(removed) or 'none left'}); newest complete checkpoint: "
            f"{max(done) if done else 'none'}. Free space (or set train.out_dir elsewhere) and rerun to resume."
        ) from None

    def wait(self):
        try:
            self.manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001  (re-raised unless it is a full disk)
            self._write_failed(e, self._pending)
        self._pending = None

    def close(self):
        self.wait()
        self.manager.close()
