"""Declared value ranges for config fields and one validator that walks a whole composed config.

A schema declares a field's range next to the field: `lr: float = num(1e-3, gt=0)`, `resume: str =
choice("auto", "auto", "never")`. `validate(cfg)` checks every declared field of every nested dataclass (and
each element of a list/dict of numbers) before any work, so `optim.lr=nan` or `data.batch_size=0` fails at
compose time with the full key, the value and the allowed range. Floats must also be finite. Schemas defined
outside rlpt/config/schema.py (the model and the task groups) declare theirs in `_external()` below.
"""
import dataclasses
import math
import typing
from typing import Any

from rlpt.config.tasks import CurriculumConfig, DomainsConfig, RewardComponentConfig, RewardConfig
from rlpt.models.config import ModelConfig, RopeScaling, VisionConfig

RANGE_KEY = "rlpt_range"


class ConfigError(ValueError):
    """A config value outside its declared range; the message names the full key."""


@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of a number (None: unbounded; floats must be finite), or the allowed values of a string."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    ne: float | None = None  # one excluded value (e.g. mesh sizes: -1 or >= 1, never 0)
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        lo = f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}" if self.gt is not None else "(-inf"
        hi = f"{self.le:g}]" if self.le is not None else f"{self.lt:g})" if self.lt is not None else "inf)"
        out = f"{lo}, {hi}"
        return out + (f" except {self.ne:g}" if self.ne is not None else "") + " (finite)"

    def admits(self, value) -> bool:
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value):
            return False
        return not ((self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
                    or (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt)
                    or (self.ne is not None and value == self.ne))


def num(default=dataclasses.MISSING, *, default_factory=dataclasses.MISSING, ge=None, gt=None, le=None, lt=None,
        ne=None) -> Any:
    """A dataclass field whose value (or each element, for a list/dict of numbers) must lie in the range."""
    meta = {RANGE_KEY: Range(ge=ge, gt=gt, le=le, lt=lt, ne=ne)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def choice(default: str, *choices: str) -> Any:
    """A string field that must be one of `choices`."""
    if default not in choices:
        raise ValueError(f"default {default!r} is not one of {choices}")
    return dataclasses.field(default=default, metadata={RANGE_KEY: Range(choices=tuple(choices))})


def _external() -> dict[type, dict[str, Range]]:
    pos, nonneg, unit, finite = Range(ge=1), Range(ge=0), Range(ge=0, le=1), Range()
    return {
        ModelConfig: {"vocab_size": pos, "hidden_size": pos, "intermediate_size": pos, "num_layers": pos,
                      "num_heads": pos, "num_kv_heads": pos, "head_dim": pos, "max_position_embeddings": pos,
                      "rope_theta": Range(gt=0), "rms_norm_eps": Range(gt=0), "sliding_window": pos,
                      "initializer_range": nonneg, "logits_chunk": Range(ge=-1)},
        RopeScaling: {"factor": Range(gt=0), "original_max_position_embeddings": pos, "low_freq_factor": Range(gt=0),
                      "high_freq_factor": Range(gt=0), "beta_fast": Range(gt=0), "beta_slow": Range(gt=0),
                      "mscale": Range(gt=0), "mscale_all_dim": nonneg, "attention_factor": Range(gt=0)},
        VisionConfig: {"image_size": pos, "patch_size": pos, "num_channels": pos, "hidden_size": pos,
                       "intermediate_size": pos, "num_layers": pos, "num_heads": pos, "layer_norm_eps": Range(gt=0),
                       "feature_layer": finite, "image_token_id": nonneg, "max_tiles": pos},
        DomainsConfig: {"weights": nonneg, "tiers": nonneg, "eval_size": pos, "eval_offset": nonneg},
        CurriculumConfig: {"tier_weights": nonneg, "stage_steps": nonneg, "window": pos, "band_low": unit,
                           "band_high": unit, "ema": Range(gt=0, le=1), "min_samples": pos, "explore": unit,
                           "start_tier_index": nonneg, "replay_fraction": unit, "replay_capacity": nonneg,
                           "replay_weight": nonneg, "replay_tag_weights": nonneg},
        RewardComponentConfig: {"weight": finite, "target_chars": nonneg, "max_chars": nonneg},
        RewardConfig: {"clip_low": finite, "clip_high": finite},
    }


_EXTERNAL: dict[type, dict[str, Range]] | None = None


def declared_range(cls: type, f: dataclasses.Field) -> Range | None:
    """The range declared for field `f` of dataclass `cls` (its metadata, else `_external()`)."""
    global _EXTERNAL
    if RANGE_KEY in f.metadata:
        return f.metadata[RANGE_KEY]
    if _EXTERNAL is None:
        _EXTERNAL = _external()
    return _EXTERNAL.get(cls, {}).get(f.name)


def _is_number_type(tp) -> bool:
    return tp in (int, float)


def needs_range(tp) -> bool:
    """Whether a field annotation holds numbers (int, float, Optional of them, or a list/dict of them)."""
    if _is_number_type(tp):
        return True
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return bool(args) and _is_number_type(args[0])
    if origin is dict:
        return len(args) == 2 and _is_number_type(args[1])
    if args and type(None) in args:  # Optional[...] / X | None
        return any(needs_range(a) for a in args if a is not type(None))
    return False


def _check(key: str, value, rng: Range) -> None:
    if value is None:
        return  # an optional field left unset
    if isinstance(value, dict):
        for k, v in value.items():
            _check(f"{key}.{k}", v, rng)
        return
    if isinstance(value, list | tuple) and rng.choices is None:
        for i, v in enumerate(value):
            _check(f"{key}[{i}]", v, rng)
        return
    if not rng.admits(value):
        what = "is not allowed" if rng.choices is not None else "is out of range"
        raise ConfigError(f"{key}={value!r} {what}: expected {rng.describe()}")


def validate(cfg, prefix: str = "") -> None:
    """Check every declared range in the dataclass tree `cfg`, then (a whole Config) its combinations of options
    (`Config.check_combinations`); raise ConfigError naming the first bad key."""
    _check_ranges(cfg, prefix)
    check = getattr(cfg, "check_combinations", None)
    if not prefix and check is not None:
        check()


def _check_ranges(cfg, prefix: str = "") -> None:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        rng = declared_range(type(cfg), f)
        if rng is not None:
            _check(key, value, rng)
        if dataclasses.is_dataclass(value):
            _check_ranges(value, key + ".")
        elif isinstance(value, dict):
            for k, v in value.items():
                if dataclasses.is_dataclass(v):
                    _check_ranges(v, f"{key}.{k}.")
                elif isinstance(v, dict):  # e.g. reward.per_domain: pattern -> component -> config
                    for k2, v2 in v.items():
                        if dataclasses.is_dataclass(v2):
                            _check_ranges(v2, f"{key}.{k}.{k2}.")
