"""Every config key does what it says (#38): knobs that are read, defaults in one place, bad combinations refused."""
import json

import numpy as np
import pytest

from rlpt.config import compose
from rlpt.config.validate import ConfigError
from rlpt.models import builtin_tokenizer
from rlpt.train.data import SFTData


def test_completion_only_false_puts_the_prompt_in_the_loss(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"what is {i}+{i}?", "completion": str(2 * i)}) + "\n"
                            for i in range(40)))
    base = ["data=jsonl", f"data.sources.main.path={path}", "data.seq_len=32", "data.batch_size=4",
            "data.packing=false"]
    only = SFTData(compose(base).data, builtin_tokenizer(), 0).next_batch()[0]
    every = SFTData(compose(base + ["data.completion_only=false"]).data, builtin_tokenizer(), 0).next_batch()[0]
    np.testing.assert_array_equal(only["targets"], every["targets"])  # the same rows, only the mask differs
    real = every["segment_ids"] > 0
    np.testing.assert_array_equal(every["loss_mask"] > 0, real)  # every real target position
    assert (only["loss_mask"] <= every["loss_mask"]).all() and only["loss_mask"].sum() < every["loss_mask"].sum()


def _schema_keys(cls, prefix="", seen=()):
    """(dotted key, field name) of every field of the config tree; dict/list values of dataclasses as `*`."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        yield key, f.name
        for c in (hints[f.name], *typing.get_args(hints[f.name])):
            inner = [(c, key + ".")] + [(a, key + ".*.") for a in typing.get_args(c)]
            for sub, sub_prefix in inner:
                if dataclasses.is_dataclass(sub) and sub not in seen:
                    yield from _schema_keys(sub, sub_prefix, (*seen, sub))


def test_every_config_key_is_read_somewhere():
    """A key whose name no code outside the schema reads (as an attribute, a keyword or a dict key) does nothing."""
    import ast
    import os

    from rlpt.config.schema import Config

    repo = os.path.join(os.path.dirname(__file__), "..", "..")
    schema_files = {os.path.join("rlpt", "config", "schema.py"), os.path.join("rlpt", "config", "tasks.py"),
                    os.path.join("rlpt", "models", "config.py")}
    used = set()
    for root in ("rlpt", "envs", "kernels"):
        for folder, _, files in os.walk(os.path.join(repo, root)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                in_schema = os.path.relpath(path, repo) in schema_files
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, ast.Attribute):
                        used.add(node.attr)
                    elif not in_schema and isinstance(node, ast.Constant) and isinstance(node.value, str):
                        used.add(node.value)
                    elif not in_schema and isinstance(node, ast.keyword) and node.arg:
                        used.add(node.arg)
    dead = [key for key, name in _schema_keys(Config, seen=(Config,)) if name not in used]
    assert not dead, f"config keys no code reads: {dead}"


@pytest.mark.parametrize("overrides,match", [
    (["rl.algo.policy_loss=cispo", "+rl.algo.policy_loss_kwargs.clip_high=0.3"],
     r"rl.algo.policy_loss_kwargs.clip_high: policy loss 'cispo' takes no option 'clip_high'; its options: "
     r"ratio_max=5.0, ratio_min=None"),
    (["rl.algo.policy_loss=ppo2"], r"rl.algo.policy_loss='ppo2': unknown policy loss"),
    (["rl.algo.aggregation=seq-mean-token-sum-norm"],
     r"rl.algo.aggregation_kwargs.norm_constant is required by loss aggregation 'seq-mean-token-sum-norm'"),
    (["+rl.algo.advantage_kwargs.num_groups=3"], r"advantage estimator 'grpo' takes no option 'num_groups'"),
    (["+rl.algo.policy_loss_kwargs.clip_high=wide"],
     r"rl.algo.policy_loss_kwargs.clip_high='wide': policy loss 'ppo' takes a number there"),
    (["+rl.algo.policy_loss_kwargs.clip_low=true"], r"clip_low=True: policy loss 'ppo' takes a number there"),
    (["rl.algo.advantage=gae", "+rl.algo.advantage_kwargs.whiten=0.5"],
     r"rl.algo.advantage_kwargs.whiten=0.5: advantage estimator 'gae' takes a bool there"),
    (["rl.algo.kl_estimator=k9"], r"rl.algo.kl_estimator='k9': unknown"),
    (["rl.algo.correction_level=token"], r"set rl.algo.old_logp=recompute"),
    (["rl.exec.logits_window=false"], r"rl.exec.share_prefix=true .* needs rl.exec.logits_window=true"),
    (["experiment=vision_tiny", "rl.exec.share_prefix=true"],
     r"rl.exec.share_prefix=true does not combine with model.vision yet \(stage=quickstart\)"),
    (["rl.algo.share_prefix=true", "rl.exec.share_prefix=false"],
     r"rl.algo.share_prefix=true \(deprecated\) contradicts rl.exec.share_prefix=false"),
    (["experiment=vision_tiny", "mesh=seq", "mesh.seq=2", "mesh.data=4"], r"mesh.seq=2 with model.vision"),
])
def test_unsupported_options_are_refused_at_compose_time_naming_the_keys(overrides, match):
    with pytest.raises(ConfigError, match=match):
        compose(overrides)


def test_each_policy_loss_gets_its_own_defaults():
    """No schema-wide clip values: gspo runs with the GSPO paper's clips and cispo composes without a TypeError."""
    import inspect

    from rlpt.algos import get_policy_loss

    for name in ("ppo", "gspo", "cispo"):
        cfg = compose([f"rl.algo.policy_loss={name}"])
        assert cfg.rl.algo.policy_loss_kwargs == {}  # the function's defaults apply
    gspo = inspect.signature(get_policy_loss("gspo")).parameters
    assert (gspo["clip_low"].default, gspo["clip_high"].default) == (3e-4, 4e-4)
    ppo = inspect.signature(get_policy_loss("ppo")).parameters
    assert (ppo["clip_low"].default, ppo["clip_high"].default) == (0.2, 0.28)  # what the RL stage ran before


def test_each_option_has_a_typed_dataclass_with_the_functions_defaults():
    """Registry.options_class: one frozen dataclass per policy loss / advantage / aggregation, its fields the
    function's keyword-only parameters with the function's own defaults (the one source of them)."""
    import dataclasses
    import inspect

    from rlpt.algos.advantages import ADVANTAGES
    from rlpt.algos.aggregation import AGGREGATIONS
    from rlpt.algos.policy_losses import POLICY_LOSSES

    for registry, supplied in ((POLICY_LOSSES, ()), (ADVANTAGES, ("num_groups", "values")), (AGGREGATIONS, ())):
        for name, fn in registry.items():
            cls = registry.options_class(name, supplied)
            params = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in supplied}
            fields = {f.name: f.default for f in dataclasses.fields(cls)}
            assert fields == {k: (dataclasses.MISSING if v is inspect.Parameter.empty else v)
                              for k, v in params.items()}, name
    ppo = POLICY_LOSSES.options("ppo", {"clip_high": 0.3}, "rl.algo.policy_loss")
    assert type(ppo).__name__ == "PpoLossOptions" and (ppo.clip_low, ppo.clip_high) == (0.2, 0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ppo.clip_low = 0.1
    agg = AGGREGATIONS.options("seq-mean-token-sum-norm", {"norm_constant": 512}, "rl.algo.aggregation")
    assert agg.norm_constant == 512


def test_the_moved_execution_switches_still_work_with_a_warning():
    """rl.algo.logits_window / share_prefix moved to rl.exec (how the update runs, not what it optimises): the old
    keys set the new ones and say so; the objective's section no longer holds them."""
    with pytest.warns(FutureWarning, match=r"rl.algo.share_prefix is deprecated: it moved to rl.exec.share_prefix"):
        cfg = compose(["rl.algo.share_prefix=false"])
    assert cfg.rl.exec.share_prefix is False and cfg.rl.algo.share_prefix is None
    cfg = compose(["rl.exec.logits_window=false", "rl.exec.share_prefix=false"])
    assert (cfg.rl.exec.logits_window, cfg.rl.exec.share_prefix) == (False, False)
