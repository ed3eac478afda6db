"""Schema of `python -m rlpt.plan` (the compile-only scale rehearsal): the train config plus `target` and `plan`.

Registered in Hydra's ConfigStore as `rlpt_plan_schema`; experiments/conf/plan.yaml composes the same groups
(model, mesh, optim, ...) as the train config onto it, so a rehearsal reads exactly what a run would.
"""
import dataclasses

from rlpt.config.schema import Config


@dataclasses.dataclass
class PlanConfig:
    """What to compile and how to judge it.

    sampler: also compile the sampler's prefill and decode loop (rows: rl.rollout.prompts_per_step x group_size,
    prompt rl.rollout.max_prompt_len, rl.rollout.max_new_tokens new tokens). usable_fraction: the share of HBM a
    program may use (the runtime keeps some for itself). replication_mb: a per-device input or output buffer
    above this many MiB that is replicated over a mesh axis it could be split on fails the rehearsal (<= 0: off);
    replication_ignore: mesh axes where replication is intended (e.g. data for pure data parallelism).
    """

    sampler: bool = True
    prefill: bool = True  # compile the sampler's prefill too (else the decode loop's input state follows the rules)
    usable_fraction: float = 0.95
    replication_mb: float = 64.0
    replication_ignore: list[str] = dataclasses.field(default_factory=list)
    top_buffers: int = 8
    out_dir: str = "runs/plan"
    write: bool = True


@dataclasses.dataclass
class PlanRootConfig(Config):
    target: str = "tpu:v5e-4"
    plan: PlanConfig = dataclasses.field(default_factory=PlanConfig)


def register_plan_configs() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="rlpt_plan_schema", node=PlanRootConfig)


def compose_plan(overrides: list[str] | tuple[str, ...] = ()) -> PlanRootConfig:
    """The typed config for `python -m rlpt.plan <overrides>`, for notebooks and tests."""
    import os

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    register_plan_configs()
    conf_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf")
    with initialize_config_dir(config_dir=os.path.abspath(conf_dir), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose(config_name="plan", overrides=list(overrides)))
