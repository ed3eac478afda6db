"""Orbax checkpoints: async, atomic, keep the last K; state + data/curriculum position + config fingerprint."""
import hashlib
import json
import logging
import os

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class IncompatibleCheckpoint(ValueError):
    """The run folder holds checkpoints from a different model/optimizer config."""


def fingerprint(*configs) -> str:
    """A stable hash of the configs that fix the shapes of the saved state."""
    text = json.dumps([json.loads(json.dumps(c, default=lambda o: getattr(o, "__dict__", str(o)))) for c in configs],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Checkpointer:
    """Wraps ocp.CheckpointManager: save(step, state, meta) every `every` steps, restore the latest."""

    def __init__(self, directory: str, *, every: int, keep: int, fingerprint: str, async_save: bool = True,
                 seed: int | None = None):
        self.directory = os.path.abspath(directory)
        self.fingerprint, self.seed = fingerprint, seed
        opts = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=max(every, 1),
                                            enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=opts)
        self._check_compatible()

    def _check_compatible(self):
        step = self.manager.latest_step()
        if step is None:
            return
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
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
        return self.manager.latest_step()

    def save(self, step: int, state, meta: dict, *, force: bool = False) -> bool:
        meta = dict(meta, fingerprint=self.fingerprint, step=int(step))
        if self.seed is not None:
            meta["seed"] = int(self.seed)
        return self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                               meta=ocp.args.JsonSave(meta)), force=force)

    def restore(self, abstract_state, step: int | None = None):
        """(state, meta) at `step` (default latest), placed on the shardings of `abstract_state`."""
        step = self.manager.latest_step() if step is None else step
        target = jax.tree.map(lambda x: ocp.utils.to_shape_dtype_struct(x) if hasattr(x, "shape") else x,
                              abstract_state)
        out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                  meta=ocp.args.JsonRestore()))
        return out["state"], out["meta"]

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()
