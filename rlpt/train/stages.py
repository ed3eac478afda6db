"""Stage registry: `stage=<name>` in the config picks the run function."""
from collections.abc import Callable

STAGES: dict[str, Callable] = {}


def register_stage(name: str):
    def wrap(fn):
        STAGES[name] = fn
        return fn
    return wrap


@register_stage("sft")
def _sft(cfg):
    from rlpt.train.sft import run
    return run(cfg)


@register_stage("quickstart")
def _quickstart(cfg):
    from rlpt.pipeline.quickstart import run
    return run(cfg)


@register_stage("dpo")
def _dpo(cfg):
    from rlpt.preference.dpo import run
    return run(cfg)


@register_stage("rm")
def _rm(cfg):
    from rlpt.preference.reward_model import run
    return run(cfg)


@register_stage("ppo_rlhf")
def _ppo_rlhf(cfg):
    from rlpt.preference.ppo_rlhf import run
    return run(cfg)


@register_stage("agent")
def _agent(cfg):
    from rlpt.pipeline.agent import run
    return run(cfg)


def run_stage(cfg):
    if cfg.stage not in STAGES:
        raise ValueError(f"stage={cfg.stage!r}; known stages: {sorted(STAGES)}")
    return STAGES[cfg.stage](cfg)
