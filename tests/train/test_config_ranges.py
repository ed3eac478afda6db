"""Every numeric config field declares its range; out-of-range values fail at compose time naming key and range."""
import dataclasses
import typing

import pytest

from rlpt.config import Config, compose
from rlpt.config.validate import ConfigError, declared_range, needs_range, validate


def _schemas(cls, seen=None):
    """Every dataclass reachable from `cls` through its fields (nested, in lists, dict values, Optional)."""
    seen = set() if seen is None else seen
    if cls in seen:
        return seen
    seen.add(cls)
    for tp in typing.get_type_hints(cls).values():
        stack = [tp]
        while stack:
            t = stack.pop()
            if dataclasses.is_dataclass(t):
                _schemas(t, seen)
            stack.extend(typing.get_args(t))
    return seen


def test_every_numeric_field_declares_a_range():
    """A new int/float field (or list/dict of numbers) without `num(...)` (or an entry in validate._external) fails."""
    missing = []
    for cls in sorted(_schemas(Config), key=lambda c: c.__name__):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if needs_range(hints[f.name]) and declared_range(cls, f) is None:
                missing.append(f"{cls.__name__}.{f.name}")
    assert not missing, f"numeric fields without a declared range: {missing}"


def test_every_declared_default_is_in_range():
    for cls in _schemas(Config):
        for f in dataclasses.fields(cls):
            rng = declared_range(cls, f)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            if rng is None or default is None or isinstance(default, list | dict):
                continue
            assert rng.admits(default), f"{cls.__name__}.{f.name} default {default!r} outside {rng.describe()}"


@pytest.mark.parametrize("override,expected", [
    ("optim.lr=-1", r"optim.lr=-1.0 is out of range: expected \(0, inf\)"),
    ("optim.lr=nan", r"optim.lr=nan is out of range"),
    ("optim.lr=inf", r"optim.lr=inf is out of range"),
    ("train.steps=0", r"train.steps=0 is out of range: expected \[1, inf\)"),
    ("train.keep=0", r"train.keep=0 is out of range"),
    ("train.resume=sometimes", r"train.resume='sometimes' is not allowed: expected one of 'auto', 'never'"),
    ("data.batch_size=0", r"data.batch_size=0 is out of range"),
    ("data.seq_len=1", r"data.seq_len=1 is out of range: expected \[2, inf\)"),
    ("optim.grad_accum=0", r"optim.grad_accum=0 is out of range"),
    ("rl.rollout.group_size=0", r"rl.rollout.group_size=0 is out of range"),
    ("rl.rollout.top_p=1.5", r"rl.rollout.top_p=1.5 is out of range: expected \(0, 1\]"),
    ("optim.b2=1.0", r"optim.b2=1.0 is out of range: expected \[0, 1\)"),
    ("mesh.data=0", r"mesh.data=0 is out of range: expected \[-1, inf\) except 0"),
    ("model.num_layers=0", r"model.num_layers=0 is out of range"),
    ("curriculum.tier_weights=[1,-2]", r"curriculum.tier_weights\[1\]=-2.0 is out of range"),
    ("reward.components.correctness.weight=nan", r"reward.components.correctness.weight=nan is out of range"),
    ("optim.schedule=cosin", r"optim.schedule='cosin' is not allowed"),
])
def test_out_of_range_fails_at_compose_naming_key_value_and_range(override, expected):
    with pytest.raises(ConfigError, match=expected):
        compose([override])


def test_validate_checks_configs_built_in_code():
    cfg = compose([])
    cfg.data.sources["tasks"].weight = -1.0
    with pytest.raises(ConfigError, match=r"data.sources.tasks.weight=-1.0"):
        validate(cfg)


def test_optional_fields_accept_none_and_check_values():
    assert compose(["rl.rollout.top_k=null"]).rl.rollout.top_k is None
    with pytest.raises(ConfigError, match="rl.rollout.top_k=0"):
        compose(["rl.rollout.top_k=0"])
