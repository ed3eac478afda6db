"""Scalar heads on the transformer (reward, value) and a trainer whose params are {"lm": ..., "head": ...}.

`make_head_trainer` mirrors rlpt.train.loop.make_trainer for a backbone plus head: the backbone is placed by
the logical-axis rules, the head is replicated, and `trainer.model()` returns the backbone as a Model.
"""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rlpt.config.schema import Config
from rlpt.models import Model
from rlpt.models.transformer import hidden_states
from rlpt.parallel import axis_rules
from rlpt.train.checkpoint import Checkpointer, fingerprint
from rlpt.train.loop import Trainer, setup_mesh, state_shardings
from rlpt.train.optim import make_optimizer, make_schedule
from rlpt.train.preflight import model_fields
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step


def init_head(hidden_size: int, seed: int) -> dict:
    """A linear head D -> 1: w (D,) ~ N(0, 1/D), b () = 0, float32."""
    w = jax.random.normal(jax.random.key(seed), (hidden_size,), jnp.float32) / np.sqrt(hidden_size)
    return {"w": w, "b": jnp.zeros((), jnp.float32)}


def head_values(head: dict, hidden: jax.Array) -> jax.Array:
    """hidden (..., D) -> scalar per position (...) in float32."""
    return hidden.astype(jnp.float32) @ head["w"] + head["b"]


def last_token_scores(params: dict, model_cfg, tokens, positions, segment_ids, last) -> jax.Array:
    """The head read at index `last` (B,) of each row of tokens (B, T) -> (B,) float32."""
    hidden, _ = hidden_states(params["lm"], model_cfg, tokens, positions, segment_ids)
    picked = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]  # (B, D)
    return head_values(params["head"], picked)


def head_optimizer(cfg: Config, head_lr: float | None) -> optax.GradientTransformation:
    """cfg.optim for {"lm", "head"}; with head_lr the head is trained as a PPO critic with its own optimizer
    (OpenRLHF / verl): its own global-norm clip (a large early value loss cannot shrink the backbone's
    clipped policy gradient) and learning rate head_lr. One optimizer state shaped like the params."""
    if head_lr is None:
        return make_optimizer(cfg.optim, cfg.train.steps)
    if head_lr <= 0:
        raise ValueError(f"head_lr={head_lr}: the value head's learning rate must be > 0 (rl.critic.lr)")
    base = make_optimizer(dataclasses.replace(cfg.optim, clip_norm=0.0), cfg.train.steps)
    ratio = head_lr / cfg.optim.lr

    def clip_groups(updates, state, params=None):
        del params
        if cfg.optim.clip_norm > 0:
            updates = {k: _clip(v, cfg.optim.clip_norm) for k, v in updates.items()}
        return updates, state

    def scale_head(updates, state, params=None):
        del params
        return updates | {"head": jax.tree.map(lambda u: u * ratio, updates["head"])}, state

    init = lambda params: optax.EmptyState()  # noqa: E731
    return optax.chain(optax.GradientTransformation(init, clip_groups), base,
                       optax.GradientTransformation(init, scale_head))


def _clip(tree, max_norm: float):
    norm = optax.tree.norm(tree)
    return jax.tree.map(lambda g: g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-12)).astype(g.dtype), tree)


def make_head_trainer(cfg: Config, loss_fn_factory, model: Model, head: dict, *, ref: bool = False,
                      subdir: str = "checkpoints", head_lr: float | None = None, donate: bool = True,
                      devices=None) -> Trainer:
    """Trainer over params {"lm": model.params, "head": head}; ref=True keeps a frozen copy of the backbone
    as frozen["ref"]; head_lr gives the head its own optimizer (see head_optimizer); donate and devices as
    `make_trainer`'s. LoRA is not supported here: the head stages (reward model, RL with a value head) train
    the whole backbone."""
    if cfg.lora.rank > 0:
        raise ValueError(f"lora.rank={cfg.lora.rank}: the reward-model stage and RL with a value head "
                         "(rl.algo.advantage=gae) train the full model; set lora.rank=0")
    mesh = setup_mesh(cfg, devices)
    with jax.set_mesh(mesh), axis_rules(cfg.mesh.rules):
        lm = model.placed(mesh).params
        params = {"lm": lm, "head": jax.device_put(head, NamedSharding(mesh, PartitionSpec()))}
        frozen = {"ref": lm} if ref else {}
        optimizer = head_optimizer(cfg, head_lr)
        shardings = state_shardings(optimizer, params, frozen, mesh)
        state = jax.jit(lambda p, f: create_state(p, optimizer, cfg.train.seed, f),
                        out_shardings=shardings)(params, frozen)
    step_fn = build_train_step(loss_fn_factory(model.config), optimizer, state_shardings=shardings, donate=donate,
                               compute_dtype=model.config.compute_dtype)
    ckpt = None
    if cfg.train.ckpt_every > 0:
        fp = fingerprint(model_fields(model.config), dataclasses.asdict(cfg.optim),
                         {"head": "scalar"} | ({"head_lr": head_lr} if head_lr else {}))
        ckpt = Checkpointer(os.path.join(cfg.train.out_dir, subdir), every=cfg.train.ckpt_every,
                            keep=cfg.train.keep, fingerprint=fp, seed=cfg.train.seed,
                            resume=cfg.train.resume)
    return Trainer(cfg, mesh, model.config, state, step_fn, lambda p, f: p["lm"], ckpt,
                   make_schedule(cfg.optim, cfg.train.steps))
