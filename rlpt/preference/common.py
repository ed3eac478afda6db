"""Shared by the preference stages: the in-stage SFT warm start, sub-stage configs, sequence log-prob sums."""
import dataclasses
import os

import jax
import jax.numpy as jnp

from rlpt.config.schema import Config
from rlpt.train.losses import token_logprobs
from rlpt.train.source import base_model


def sub_config(cfg: Config, *, steps: int, lr: float, out_dir: str, batch_size: int | None = None) -> Config:
    """The config of one training sub-stage: its steps, learning rate and run folder on the shared schemas."""
    data = cfg.data if batch_size is None else dataclasses.replace(cfg.data, batch_size=batch_size)
    return dataclasses.replace(cfg, data=data, optim=dataclasses.replace(cfg.optim, lr=lr),
                               train=dataclasses.replace(cfg.train, steps=steps, out_dir=out_dir))


def warm_start(cfg: Config):
    """The starting policy: SFT on a teacher with pref.sft_noise for pref.sft_steps (cfg.optim, cfg.data; run
    folder <out_dir>/sft, exported to <out_dir>/sft/hf for reuse as train.init_from), else train.init_from or
    a random init."""

    p = cfg.pref
    if p.sft_steps > 0:
        from rlpt.train.sft import run as run_sft  # on use (start-up: orbax/tensorboard)

        sft_cfg = dataclasses.replace(
            cfg, stage="sft", data=dataclasses.replace(cfg.data, noise=p.sft_noise),
            train=dataclasses.replace(cfg.train, steps=p.sft_steps, eval_every=0, export_hf=True,
                                      out_dir=os.path.join(cfg.train.out_dir, "sft")))
        return run_sft(sft_cfg, print_result=False)["model"]
    return base_model(cfg)


def sequence_logps(params, model_cfg, batch: dict, prefix: str) -> jax.Array:
    """Summed response log-probs (B,) of the rows batch[prefix + inputs/targets/positions/segment_ids/mask]."""
    keys = ("inputs", "targets", "positions", "segment_ids") + tuple(
        k for k in ("pixel_values", "num_images") if prefix + k in batch)  # a vision-language policy's images
    rows = {k: batch[prefix + k] for k in keys}
    return jnp.sum(token_logprobs(params, model_cfg, rows) * batch[prefix + "mask"], axis=-1)


def joint_logps(params, model_cfg, batch: dict, prefixes: tuple[str, ...]) -> list[jax.Array]:
    """sequence_logps for several row groups in one forward pass (rows concatenated along the batch)."""
    keys = ("inputs", "targets", "positions", "segment_ids", "mask") + tuple(
        k for k in ("pixel_values", "num_images") if prefixes[0] + k in batch)
    cat = {k: jnp.concatenate([batch[p + k] for p in prefixes], axis=0) for k in keys}
    sums = sequence_logps(params, model_cfg, cat, "")
    return jnp.split(sums, len(prefixes))
