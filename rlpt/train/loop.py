"""Shared run machinery for every stage: mesh, sharded state, the jitted step, resume, logging, summary."""
import dataclasses
import json
import logging
import os
import time

import jax
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rlpt.config.schema import Config
from rlpt.kernels.layouts import apply_layout_batch
from rlpt.models import Model, ModelConfig
from rlpt.models.model import model_from
from rlpt.models.transformer import merged_params, param_axes
from rlpt.models.vision import VLMConfig, vlm_param_axes
from rlpt.observe.tensorboard import TBWriter
from rlpt.parallel import (
    HostGlobal,
    HostLocal,
    axis_rules,
    gather_rows,
    logical_spec,
    make_mesh,
    maybe_initialize_distributed,
    named_sharding,
)
from rlpt.runtime import compile_stats
from rlpt.train.checkpoint import Checkpointer
from rlpt.train.lora import init_lora, lora_axes, lora_params, vlm_frozen, vlm_join, vlm_parts, vlm_parts_axes
from rlpt.train.optim import make_optimizer, make_schedule
from rlpt.train.preflight import run_fingerprint
from rlpt.train.source import base_model, export_checkpoint
from rlpt.train.state import TrainState, create_state
from rlpt.train.step import build_train_step

log = logging.getLogger(__name__)


def setup_mesh(cfg: Config, devices=None):
    maybe_initialize_distributed(cfg.mesh)
    return make_mesh(cfg.mesh, devices)


def build_model(cfg: Config, mesh) -> Model:
    """train.init_from's checkpoint (its architecture, cfg.model's runtime settings) or a fresh cfg.model."""
    return base_model(cfg, mesh)


def shard_batch(batch: dict, mesh, host_local: bool = False) -> dict:
    """Place a batch (A, b, T) with batch over (data, fsdp) and sequence over seq.

    host_local=False: every process holds the whole (host-global) batch and each device takes its part.
    host_local=True: each process holds only its rows (process order along b: `rlpt.train.data.HostData`) and
    they become one global array without copying others' rows (`jax.make_array_from_process_local_data`) where
    the mesh gives each process that contiguous block of b; on a mesh that does not (b replicated across
    processes), the rows are first gathered to every process."""
    out = {}
    count = jax.process_count()
    for k, v in batch.items():
        v = np.asarray(v)
        # (A, b, T) token arrays shard their columns over seq; images (A, b, K, C, H, W) only their rows
        names = (None, "batch", "act_seq")[: v.ndim] if v.ndim <= 3 else (None, "batch") + (None,) * (v.ndim - 2)
        if host_local and count > 1:
            shape = (v.shape[0], v.shape[1] * count, *v.shape[2:])
            sharding = NamedSharding(mesh, logical_spec(names, shape, mesh))
            if _owns_row_block(sharding, shape, v.shape[1]):
                out[k] = jax.make_array_from_process_local_data(sharding, v, shape)
                continue
            v = np.concatenate(np.split(gather_rows(v), count), axis=1)  # process-major rows -> host-global (A, B)
        sharding = NamedSharding(mesh, logical_spec(names, v.shape, mesh))
        out[k] = jax.make_array_from_callback(v.shape, sharding, lambda idx, v=v: v[idx])
    return out


def _owns_row_block(sharding, shape, rows: int) -> bool:
    """Whether this process's devices hold exactly rows me*rows .. (me+1)*rows - 1 of axis 1 (and every row of
    that block only here)."""
    me = jax.process_index()
    spans = {idx[1].indices(shape[1])[:2] for idx in sharding.addressable_devices_indices_map(shape).values()}
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    return (lo, hi) == (me * rows, (me + 1) * rows)


def microbatch(batch: dict, num_micro: int) -> dict:
    """(B, ...) -> (A, B/A, ...)."""
    B = next(iter(batch.values())).shape[0]
    if B % num_micro:
        raise ValueError(f"data.batch_size={B} is not divisible by optim.grad_accum={num_micro}")
    return {k: v.reshape(num_micro, B // num_micro, *v.shape[1:]) for k, v in batch.items()}


@dataclasses.dataclass
class Trainer:
    """Everything a stage loop needs; built by `make_trainer`."""

    cfg: Config
    mesh: object
    model_cfg: ModelConfig
    state: object
    step_fn: object
    params_fn: object
    checkpointer: Checkpointer | None
    schedule: object

    def model(self) -> Model:
        """The current policy as a Model: plain parameters, LoRA adapters merged into the base weights (one merge
        per call; the train step itself applies them in the forward pass, `lora_params`)."""
        if self.params_fn is None:
            return model_from(self.model_cfg, self.state.params)
        return model_from(self.model_cfg, merged_params(self.params_fn(self.state.params, self.state.frozen)))

    def device_batch(self, host_batch: dict, host_local: bool = False) -> dict:
        """A host batch (B, ...) as the step takes it: columns in data.cp_layout on a sequence-sharded mesh,
        micro-batches (A, B/A, ...) over optim.grad_accum, placed on the mesh.

        RL rows with a logit window and rl.exec.share_prefix stay in token order: the loss cuts them into the
        shared-prefix and window streams and lays out each itself (`rlpt.train.losses.rl_loss`'s layout)."""
        n_seq = self.mesh.shape["seq"]
        streams_in_loss = self.cfg.rl.exec.share_prefix and "window" in host_batch
        if n_seq > 1 and "pixel_values" in host_batch:
            raise ValueError(f"mesh.seq={n_seq}: rows with images (model.vision) are not sequence-sharded; set "
                             "mesh.seq=1")
        if n_seq > 1 and self.cfg.data.cp_layout != "contiguous" and not streams_in_loss:
            host_batch = apply_layout_batch(host_batch, self.cfg.data.cp_layout, n_seq, index_keys=("window",))
        return shard_batch(microbatch(host_batch, self.cfg.optim.grad_accum), self.mesh, host_local)

    def step(self, host_batch: HostGlobal | HostLocal, host_local: bool = False):
        """One optimizer step on a host batch: host-global (every process holds all rows), or host_local (this
        process's rows only, `rlpt.train.data.HostData`; `shard_batch`)."""
        batch = self.device_batch(host_batch, host_local)
        with jax.set_mesh(self.mesh), axis_rules(self.cfg.mesh.rules):
            self.state, metrics = self.step_fn(self.state, batch)
        return metrics


def state_shardings(optimizer, params, frozen, mesh):
    """TrainState shardings: optimizer moments follow their parameters, the rest is replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())
    is_sharding = lambda x: isinstance(x, NamedSharding)  # noqa: E731
    param_sh = jax.tree.map(lambda x: x.sharding, params)
    abstract = jax.eval_shape(lambda p, f: create_state(p, optimizer, 0, f), params, frozen)
    opt_sh = optax.tree_map_params(optimizer, lambda _, sh: sh, abstract.opt_state, param_sh,
                                   transform_non_params=lambda _: replicated, is_leaf=is_sharding)
    return TrainState(step=replicated, params=param_sh, opt_state=opt_sh, rng=replicated,
                      frozen=jax.tree.map(lambda x: x.sharding, frozen))


def make_trainer(cfg: Config, loss_fn_factory, *, extra_frozen: dict | None = None, devices=None,
                 init: Model | None = None, donate: bool = True, subdir: str = "checkpoints") -> Trainer:
    """Build mesh, model, optimizer, sharded TrainState and the jitted step for `loss_fn_factory(model_cfg)`.

    init: start from this model (e.g. the SFT policy) instead of cfg.train.init_from / random init.
    extra_frozen(model) -> dict of frozen pytrees (e.g. {"ref": model.params}) kept beside the params.
    """
    mesh = setup_mesh(cfg, devices)
    with jax.set_mesh(mesh), axis_rules(cfg.mesh.rules):
        if init is None:
            model = build_model(cfg, mesh)
        else:  # e.g. the SFT policy: place it on this mesh with the rules' shardings
            model = init.placed(mesh)  # also across meshes and processes
        optimizer = make_optimizer(cfg.optim, cfg.train.steps)
        params_fn, frozen = None, dict(extra_frozen(model) if extra_frozen else {})
        vlm = isinstance(model.config, VLMConfig)
        if vlm and (cfg.lora.rank > 0 or cfg.lora.vision_targets or not model.config.vision.train):
            # LoRA on the decoder and/or a frozen tower: only the trainable parts carry optimizer state
            key = jax.random.key(cfg.train.seed + 1)
            train_tower = model.config.vision.train
            shapes = jax.eval_shape(lambda p: vlm_parts(p, cfg.lora, train_tower, key)[0], model.params)
            axes = vlm_parts_axes(cfg.lora, vlm_param_axes(model.config), shapes)
            placed = jax.tree.map(lambda names, s: named_sharding(mesh, names, s.shape), axes, shapes,
                                  is_leaf=lambda x: isinstance(x, tuple))
            trainable = jax.jit(lambda p, k: vlm_parts(p, cfg.lora, train_tower, k)[0], out_shardings=placed)(
                model.params, key)
            frozen["vlm"] = vlm_frozen(model.params, cfg.lora, train_tower)

            def params_fn(parts, fr):
                return vlm_join(parts, fr["vlm"], cfg.lora)
        elif cfg.lora.rank > 0:
            shapes = jax.eval_shape(lambda p: init_lora(p, cfg.lora, jax.random.key(0)), model.params)
            placed = jax.tree.map(lambda names, s: named_sharding(mesh, names, s.shape), lora_axes(cfg.lora), shapes,
                                  is_leaf=lambda x: isinstance(x, tuple))
            trainable = jax.jit(lambda p, k: init_lora(p, cfg.lora, k), out_shardings=placed)(
                model.params, jax.random.key(cfg.train.seed + 1))
            frozen["base"] = model.params

            def params_fn(adapters, fr):  # the targets wrapped as LoraWeights: applied in the forward, not merged
                return lora_params(fr["base"], adapters, cfg.lora)
        else:
            trainable = model.params
        shardings = state_shardings(optimizer, trainable, frozen, mesh)
        state = jax.jit(lambda p, f: create_state(p, optimizer, cfg.train.seed, f),
                        out_shardings=shardings)(trainable, frozen)
    step_fn = build_train_step(loss_fn_factory(model.config), optimizer, state_shardings=shardings,
                               params_fn=params_fn, donate=donate, compute_dtype=model.config.compute_dtype)
    ckpt = None
    if cfg.train.ckpt_every > 0:
        fp = run_fingerprint(model.config, cfg)
        ckpt = Checkpointer(os.path.join(cfg.train.out_dir, subdir), every=cfg.train.ckpt_every,
                            keep=cfg.train.keep, fingerprint=fp, seed=cfg.train.seed, resume=cfg.train.resume)
    return Trainer(cfg, mesh, model.config, state, step_fn, params_fn, ckpt,
                   make_schedule(cfg.optim, cfg.train.steps))


def maybe_resume(trainer: Trainer) -> dict | None:
    """Restore the newest readable checkpoint when train.resume=auto (unreadable newer steps are logged and set
    aside by the Checkpointer); returns its meta (data/curriculum state)."""
    ck = trainer.checkpointer
    if ck is None or trainer.cfg.train.resume != "auto" or ck.latest_step() is None:
        return None
    state, meta = ck.restore(trainer.state)
    trainer.state = state
    log.info("resumed from %s at step %d", ck.directory, int(state.step))
    return meta


def export_hf(trainer: Trainer, folder: str, tok=None):
    """The current policy (LoRA merged) as an HF folder; with `tok`, also its tokenizer and generation_config.json
    (stop ids; the init_from checkpoint's sampling defaults kept)."""
    if tok is None:
        trainer.model().save_pretrained(folder)
    else:
        export_checkpoint(trainer.model(), tok, folder, source=trainer.cfg.train.init_from)


def param_shardings_match_rules(model_cfg, params, mesh, rules) -> list[str]:
    """Parameters whose sharding differs from what the rules table gives, as messages (empty: all match)."""
    names = jax.tree.leaves(param_axes(model_cfg), is_leaf=lambda x: isinstance(x, tuple))
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    bad = []
    with axis_rules(rules):
        for (path, leaf), axes in zip(flat, names):
            want = NamedSharding(mesh, logical_spec(axes, leaf.shape, mesh))
            if not leaf.sharding.is_equivalent_to(want, leaf.ndim):
                bad.append(f"{jax.tree_util.keystr(path)}: {leaf.sharding.spec} != {want.spec}")
    return bad


class Progress:
    """Periodic progress lines with ETA (and a tqdm bar when enabled and on a TTY)."""

    def __init__(self, total: int, start: int, every: int, enabled: bool):
        self.total, self.start, self.every = total, start, max(every, 1)
        self.t0 = time.time()
        self.bar = None
        if enabled and os.isatty(2) and jax.process_index() == 0:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=start, dynamic_ncols=True)

    def update(self, step: int, metrics: dict):
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items() if k in ("loss", "grad_norm")})
        if step % self.every == 0 or step == self.total:
            done = step - self.start
            rate = done / max(time.time() - self.t0, 1e-9)
            eta = (self.total - step) / max(rate, 1e-9)
            shown = " ".join(f"{k}={float(v):.4g}" for k, v in metrics.items() if np.ndim(v) == 0)
            msg = f"step {step}/{self.total} {shown} eta={eta:.0f}s"
            if self.bar is not None:
                self.bar.write(msg)
            elif jax.process_index() == 0:
                print(msg, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def print_summary(summary: dict):
    """A short table, then the JSON line (always the last stdout line) for scripts and sweeps."""
    if jax.process_index() != 0:
        return
    print("\n== summary ==")
    for k, v in summary.items():
        if not isinstance(v, dict):
            print(f"  {k:<22} {v}")
    print(json.dumps(summary, default=float), flush=True)


def finish_run(summary: dict, out_dir: str, **objects) -> dict:
    """The end of a stage: `<out_dir>/summary.json` (written atomically; what sweeps and `rlpt.run` read), the
    table and JSON line on stdout (process 0), and the summary returned with `objects` (the final model, its
    tokenizer, history, ...) added for Python callers."""

    summary = summary | compile_stats() | {"process_count": jax.process_count()}
    if jax.process_index() == 0:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "summary.json")
        with open(path + ".tmp", "w") as f:
            json.dump(summary, f, default=float, indent=1)
        os.replace(path + ".tmp", path)
        print_summary(summary)
    return summary | objects


def to_float(metrics: dict) -> dict:
    return {k: float(v) for k, v in jax.device_get(metrics).items()}


def restore_history(path: str, start: int) -> list[dict]:
    """Rows of metrics.jsonl up to step `start`; the file is rewritten without the rows of steps after it
    (a killed run may have logged steps past its last checkpoint: the resumed run logs them again)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept = [r for r in rows if r["step"] <= start]
    if len(kept) != len(rows):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(tmp, path)
    return kept


class RunLog:
    """A stage's metrics: `<out_dir>/metrics.jsonl` (one JSON row per step) and TensorBoard events under
    `<out_dir>/tb`, written by process 0 only. resume_at: the step a resumed run continues from; rows logged past
    it by the killed run are dropped (`restore_history`) and the kept ones are `history`."""

    def __init__(self, out_dir: str, resume_at: int | None = None, tensorboard: bool = True):
        self.is_main = jax.process_index() == 0
        if self.is_main:
            os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "metrics.jsonl")
        self.history = restore_history(path, resume_at) if self.is_main and resume_at is not None else []
        self.tb = TBWriter(os.path.join(out_dir, "tb")) if self.is_main and tensorboard else None
        self._file = open(path, "a") if self.is_main else None

    def write(self, row: dict):
        """One step's row (it holds "step", where TensorBoard puts its scalars)."""
        if self.tb:
            self.tb.scalars({k: v for k, v in row.items() if k != "step"}, row["step"])
        if self._file:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()

    def scalar(self, tag: str, value: float, step: int):
        """A value outside the step rows (an evaluation) to TensorBoard."""
        if self.tb:
            self.tb.scalar(tag, value, step)

    def close(self):
        if self.tb:
            self.tb.close()
        if self._file:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclasses.dataclass
class LoopHooks:
    """What a stage adds to `run_loop`; every hook is optional.

    train(batch) -> metrics: one update on the batch (default: `to_float(trainer.step(batch))`).
    row(step, metrics, extra) -> dict: the step's logged row (default: the metrics and the batch's scalar extras).
    evaluate(step) -> dict: metrics merged into the row, at every `eval_every`-th step.
    stop(step, row) -> bool: end the loop after this step (it is checkpointed).
    meta() -> dict: what a checkpoint keeps beside the state (data or curriculum position, curves).
    after(step, row): anything else per step (observers, weight publication); runs before the checkpoint.
    """

    train: object = None
    row: object = None
    evaluate: object = None
    stop: object = None
    meta: object = None
    after: object = None


@dataclasses.dataclass
class LoopResult:
    history: list  # every row of this run (those a resumed run kept, then its own)
    last: dict  # the last row ({} when no step ran)
    steps: int  # the trainer's step at the end
    stopped: bool  # a stop hook ended it before `steps`
    wall_s: float  # the loop's time


def run_loop(trainer: Trainer, next_batch, hooks: LoopHooks | None = None, *, steps: int, log: RunLog,
             log_every: int = 10, progress: bool = True, eval_every: int = 0, eval_last: bool = False,
             step_offset: int = 0, show: tuple[str, ...] = ("loss", "grad_norm"),
             start: int | None = None) -> LoopResult:
    """The one stage loop: from the trainer's step (resumed or 0) to `steps`, each step
    next_batch(step) -> (batch, extra) -> hooks.train -> row (+ hooks.evaluate at eval_every, the last step only
    with eval_last) -> hooks.after -> checkpoint (every train.ckpt_every steps, at the last step and
    when hooks.stop ends the loop; with hooks.meta) -> log (rows carry "step" + step_offset) -> progress line.

    start: the loop step to continue after (default the trainer's step; a stage of several optimizer steps per loop
    step, PPO-RLHF's epochs, passes its own). Checkpoints are named by the trainer's step. The checkpointer's
    pending writes finish and the progress bar closes also on an error. Returns a LoopResult.
    """
    hooks = hooks or LoopHooks()
    ck = trainer.checkpointer
    every = trainer.cfg.train.ckpt_every
    start = int(trainer.state.step) if start is None else start
    history, last, stopped, t0 = list(log.history), {}, False, time.time()
    bar = Progress(steps, start, log_every, progress)
    step = start
    try:
        while step < steps and not stopped:
            step += 1
            batch, extra = next_batch(step)
            metrics = hooks.train(batch) if hooks.train else to_float(trainer.step(batch))
            row = {"step": step + step_offset} | (
                hooks.row(step, metrics, extra) if hooks.row else
                metrics | {k: v for k, v in (extra or {}).items() if np.ndim(v) == 0})
            if hooks.evaluate and eval_every > 0 and step % eval_every == 0 and (eval_last or step != steps):
                row |= hooks.evaluate(step) or {}
            stopped = bool(hooks.stop and hooks.stop(step, row))
            if hooks.after:
                hooks.after(step, row)
            if ck is not None and (every and step % every == 0 or step == steps or stopped):
                ck.save(int(trainer.state.step), trainer.state, hooks.meta() if hooks.meta else {}, force=True)
            history.append(row)
            last = row
            log.write(row)
            bar.update(step, {k: row[k] for k in show if k in row})
    finally:
        bar.close()
        if ck is not None:
            ck.close()
    return LoopResult(history, last, int(trainer.state.step), stopped, time.time() - t0)


