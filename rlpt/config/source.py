"""The run's base model: with train.init_from, the checkpoint folder is the source of truth.

Its config.json gives the architecture, its tokenizer files the vocabulary, chat template, special tokens and
stop ids (generation_config.json's eos_token_id included). `cfg.model` then only says how the model runs
(RUNTIME_FIELDS: dtypes, attention kernel, remat, ...); the `model=tiny` preset's shapes are never mixed in, and
a setting that contradicts the checkpoint is a CheckpointConflict naming the key. Without init_from, cfg.model
and data.tokenizer describe a fresh model.
"""
import dataclasses
import functools
import os

from rlpt.config.validate import ConfigError
from rlpt.models import builtin_tokenizer, load_tokenizer
from rlpt.models.config import ModelConfig
from rlpt.models.hf import config_from_hf

# ModelConfig fields that say how a model runs, not what it is: a run sets them on a checkpoint.
RUNTIME_FIELDS = ("param_dtype", "compute_dtype", "logits_dtype", "attention_impl", "ops", "remat", "scan_layers",
                  "logits_chunk")
# Fields a checkpoint's config.json does not hold (rlpt's own knobs and init scale): never a conflict.
_NOT_IN_CHECKPOINT = ("initializer_range",)
TINY_PRESET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf", "model",
                           "tiny.yaml")


class CheckpointConflict(ConfigError):
    """An explicit setting contradicts the checkpoint named by train.init_from."""


def architecture_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ModelConfig)
                 if f.name not in RUNTIME_FIELDS and f.name not in _NOT_IN_CHECKPOINT)


def runtime_overrides(model_cfg: ModelConfig) -> dict:
    """cfg.model's runtime settings, to apply on top of a checkpoint's architecture."""
    return {k: getattr(model_cfg, k) for k in RUNTIME_FIELDS if hasattr(model_cfg, k)}


def model_config(cfg) -> ModelConfig:
    """The architecture this run trains: the checkpoint's (with cfg.model's runtime settings) or cfg.model."""
    if not cfg.train.init_from:
        return cfg.model

    return config_from_hf(cfg.train.init_from, **runtime_overrides(cfg.model))


@functools.lru_cache(maxsize=8)
def _tokenizer_file(folder: str) -> bytes | None:
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return f.read()


def run_tokenizer(cfg):
    """The tokenizer of this run: the checkpoint's with train.init_from (data.tokenizer may only name a folder
    holding the same tokenizer.json), else data.tokenizer ("builtin": the character tokenizer)."""

    folder, chosen = cfg.train.init_from, cfg.data.tokenizer
    if chosen == "bpe":  # the agent stage trains it and points data.tokenizer at its folder before anything loads it
        raise ConfigError("data.tokenizer=bpe is trained by the agent stage (rlpt.pipeline.agent.run); elsewhere set "
                          "data.tokenizer to builtin or to the folder that run wrote (<train.out_dir>/tokenizer)")
    if not folder:
        tok = builtin_tokenizer() if chosen == "builtin" else load_tokenizer(chosen)
        check_vocab(tok, cfg.model.vocab_size, "model.vocab_size")
        return tok
    own = _tokenizer_file(os.path.abspath(folder))
    if own is None:
        if chosen == "builtin":
            raise CheckpointConflict(
                f"train.init_from={folder} has no tokenizer.json: set data.tokenizer=<the folder holding this "
                "checkpoint's tokenizer.json> (a model trained on other token ids would be trained on noise)")
        tok = load_tokenizer(chosen)
    else:
        _check_same_tokenizer(folder, chosen, own)
        tok = load_tokenizer(folder)
    check_vocab(tok, model_config(cfg).vocab_size, f"the vocab_size of train.init_from={folder}")
    return tok


def _check_same_tokenizer(folder: str, chosen: str, own: bytes) -> None:
    if chosen == "builtin" or os.path.abspath(chosen) == os.path.abspath(folder):
        return
    other = _tokenizer_file(os.path.abspath(chosen))
    if other != own:
        raise CheckpointConflict(
            f"data.tokenizer={chosen} is not the tokenizer of train.init_from={folder} (their tokenizer.json "
            "differ): drop data.tokenizer; the checkpoint's tokenizer is used")


def check_vocab(tok, vocab_size: int, what: str) -> None:
    if vocab_size < tok.vocab_size:
        raise ConfigError(f"{what}={vocab_size} < {tok.vocab_size} ids in the tokenizer {tok.source}: the "
                          "model cannot embed every token")


def explicit_model_fields(cfg, overrides: list[str] | None) -> set[str]:
    """Architecture fields of cfg.model the user set. With the override list (CLI, compose): the `model.<f>=`
    keys, or every field for a `model=<preset>` group choice. Without it (a Config built in code): the fields
    whose value differs from both the `model=tiny` preset and ModelConfig's defaults."""
    arch = architecture_fields()
    if overrides is not None:
        keys = {o.lstrip("+~").split("=", 1)[0].strip() for o in overrides}
        if "model" in keys:
            return set(arch)
        return {f for f in arch if any(k == f"model.{f}" or k.startswith(f"model.{f}.") for k in keys)}
    from omegaconf import OmegaConf

    tiny = OmegaConf.to_container(OmegaConf.load(TINY_PRESET))
    default = ModelConfig()
    return {f for f in arch if getattr(cfg.model, f) not in (getattr(default, f), tiny.get(f, getattr(default, f)))}


def check_checkpoint_source(cfg, overrides: list[str] | None = None) -> None:
    """Raise CheckpointConflict when an explicit model or tokenizer setting contradicts train.init_from."""
    folder = cfg.train.init_from
    if not folder:
        return
    ckpt = model_config(cfg)
    for f in sorted(explicit_model_fields(cfg, overrides)):
        mine, theirs = getattr(cfg.model, f), getattr(ckpt, f)
        if mine != theirs:
            raise CheckpointConflict(
                f"model.{f}={mine!r} contradicts train.init_from={folder}, whose config.json gives {f}={theirs!r}: "
                "the checkpoint defines the architecture; drop the override (model.* may set only "
                f"{', '.join(RUNTIME_FIELDS)})")
    own = _tokenizer_file(os.path.abspath(folder))
    if own is None:
        return
    if overrides is not None and any(o.lstrip("+~").replace(" ", "") == "data.tokenizer=builtin" for o in overrides):
        raise CheckpointConflict(f"data.tokenizer=builtin contradicts train.init_from={folder}, which has its own "
                                 "tokenizer.json: drop data.tokenizer")
    _check_same_tokenizer(folder, cfg.data.tokenizer, own)
