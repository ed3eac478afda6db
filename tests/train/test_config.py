"""Every option of every config group composes; typos and wrong types fail at compose time naming the key."""
import os

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from rlpt.config import Config, compose

CONF = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "conf")
GROUPS = sorted(d for d in os.listdir(CONF) if os.path.isdir(os.path.join(CONF, d)))
EXTRA = {("data", "jsonl"): ["data.sources.main.path=/tmp/x.jsonl"], ("data", "rl_jsonl"): ["data.path=/tmp/x.jsonl"]}


def _options():
    for g in GROUPS:
        for f in sorted(os.listdir(os.path.join(CONF, g))):
            if f.endswith(".yaml"):
                yield g, f[:-5]


@pytest.mark.parametrize("group,option", list(_options()))
def test_every_option_composes(group, option):
    cfg = compose([f"{group}={option}", *EXTRA.get((group, option), [])])
    assert isinstance(cfg, Config)


def test_groups_present():
    assert {"model", "mesh", "optim", "data", "stage", "experiment", "domains", "curriculum", "reward"} <= set(GROUPS)


def test_unknown_key_fails_naming_it():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as e:
        compose(["train.stepz=3"])
    assert "stepz" in str(e.value) + str(e.value.__cause__)


def test_wrong_type_fails_naming_it():
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        compose(["train.steps=many"])
    assert "steps" in str(e.value) + str(e.value.__cause__)


def test_bad_value_in_schema_post_init():
    with pytest.raises(ValueError, match="model.family"):
        compose(["model.family=gpt2"])


def test_every_stage_resolves_to_a_run_function():
    import importlib

    from rlpt.train.stages import STAGES

    for name, target in STAGES.items():
        assert callable(importlib.import_module(target).run), name
