"""Typed config schemas for `python -m rlpt.train`, registered in Hydra's ConfigStore.

Library code receives `OmegaConf.to_object(cfg)` sub-configs (these dataclasses), never a DictConfig.
Every default lives here; struct mode makes a typo or a wrong type fail at compose time, naming the key.
"""
import dataclasses
from typing import Any

from rlpt.config.tasks import CurriculumConfig, DomainsConfig, RewardConfig
from rlpt.models.config import ModelConfig
from rlpt.parallel.rules import DEFAULT_RULES


@dataclasses.dataclass
class MeshConfig:
    """Mesh axis sizes (-1: the remaining devices) and the logical-axis rules table."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1
    seq: int = 1
    axis_type: str = "auto"  # auto | explicit
    rules: list[Any] = dataclasses.field(default_factory=lambda: [[k, v] for k, v in DEFAULT_RULES])
    distributed: bool = False  # call jax.distributed.initialize (also when JAX_COORDINATOR_ADDRESS is set)
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


@dataclasses.dataclass
class OptimConfig:
    """optax optimizer and schedule; clip_norm <= 0 disables clipping."""

    name: str = "adamw"  # adamw | adafactor | lion | sgd
    lr: float = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: str = "cosine"  # cosine | linear | constant
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    clip_norm: float = 1.0
    grad_accum: int = 1


@dataclasses.dataclass
class LoraConfig:
    """LoRA adapters on the named projections; rank 0 trains the full model."""

    rank: int = 0
    alpha: float = 16.0
    targets: list[str] = dataclasses.field(default_factory=lambda: ["wq", "wk", "wv", "wo"])


@dataclasses.dataclass
class SourceConfig:
    """One SFT data source: a JSONL file (prompt/completion or messages) or procedural tasks."""

    kind: str = "tasks"  # tasks | jsonl
    path: str = ""
    weight: float = 1.0
    replay: bool = False  # general data mixed in against forgetting


@dataclasses.dataclass
class DataConfig:
    """SFT batches: sources mixed by weight, tokenised, packed first-fit-decreasing into seq_len rows."""

    sources: dict[str, SourceConfig] = dataclasses.field(default_factory=dict)
    replay_share: float = 0.0  # fraction of examples drawn from sources marked replay
    seq_len: int = 128
    batch_size: int = 32  # rows per optimizer step (split into optim.grad_accum micro-batches)
    packing: bool = True
    overlong: str = "truncate"  # truncate | drop
    easy_to_hard: bool = False
    pool_size: int = 4096  # examples generated per procedural pass / shuffled per epoch
    completion_only: bool = True
    # Token layout for context parallelism over mesh.seq > 1: contiguous | zigzag | striped (load-balanced
    # causal work for ring attention); applied once to each batch, exact because masks use positions.
    cp_layout: str = "zigzag"
    # Progressive length curriculum: [[from_step, seq_len], ...] (ascending); empty: seq_len throughout.
    length_stages: list[Any] = dataclasses.field(default_factory=list)
    noise: float = 0.0  # share of task demonstrations given another task's answer (a noisy teacher)
    tokenizer: str = "builtin"  # builtin | a tokenizer folder


@dataclasses.dataclass
class TrainConfig:
    """The loop: steps, logging, checkpoints, evaluation."""

    steps: int = 200
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0
    eval_samples: int = 200
    eval_max_new_tokens: int = 16
    ckpt_every: int = 100
    keep: int = 2
    resume: str = "auto"  # auto | never
    out_dir: str = "runs/${experiment_name}"
    init_from: str = ""  # an HF folder to start from (empty: random init)
    export_hf: bool = False
    progress: bool = True


@dataclasses.dataclass
class AlgoConfig:
    """RL objective, chosen by registry names (see docs/algorithms.md for each name's formula)."""

    advantage: str = "grpo"
    advantage_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    policy_loss: str = "ppo"
    policy_loss_kwargs: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"clip_low": 0.2, "clip_high": 0.28})
    aggregation: str = "token-mean"
    aggregation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    scope: str = "step"  # step: normalise over the whole optimizer step | micro: per micro-batch, then mean
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in: str = "loss"  # loss | reward
    entropy_coef: float = 0.0
    # Ratio denominator: the sampler's log-probs ("rollout") or a trainer forward before the update
    # ("recompute"; then `correction` reweights the rollout/trainer mismatch).
    old_logp: str = "rollout"
    correction_level: str = "none"  # none | token | sequence | geometric
    correction_mode: str = "truncate"  # truncate | mask
    correction_cap: float = 2.0
    dynamic_sampling: bool = False  # DAPO: drop groups with zero reward variance
    overlong_filter: bool = False  # mask truncated samples out of the loss
    overlong_buffer: int = 0  # DAPO soft overlong penalty over the last N tokens (0: off)
    overlong_penalty: float = 1.0


@dataclasses.dataclass
class RolloutConfig:
    """Generation for RL: groups of `group_size` samples per task share one prefill."""

    prompts_per_step: int = 32
    group_size: int = 8
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None
    max_prompt_len: int = 64
    episode_timeout_s: float = 60.0


@dataclasses.dataclass
class RLConfig:
    """The RL loop: sync or async (bounded staleness), evaluation and the SFT cold start (quickstart)."""

    algo: AlgoConfig = dataclasses.field(default_factory=AlgoConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    mode: str = "sync"  # sync | async
    max_staleness: int = 1
    steps: int = 200
    lr: float = 1e-4
    eval_every: int = 0
    eval_per_domain: int = 100
    sft_steps: int = 0  # quickstart: SFT cold start before RL
    sft_noise: float = 0.0  # quickstart: share of SFT demonstrations with a wrong answer (a noisy teacher)
    sft_tiers: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Config:
    experiment_name: str = "quickstart"
    stage: str = "sft"
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    domains: DomainsConfig = dataclasses.field(default_factory=DomainsConfig)
    curriculum: CurriculumConfig = dataclasses.field(default_factory=CurriculumConfig)
    reward: RewardConfig = dataclasses.field(default_factory=RewardConfig)
    rl: RLConfig = dataclasses.field(default_factory=RLConfig)


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="rlpt_schema", node=Config)


def compose(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config") -> Config:
    """The typed Config for `python -m rlpt.train <overrides>`, for notebooks and tests."""
    import os

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    register_configs()
    conf_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf")
    with initialize_config_dir(config_dir=os.path.abspath(conf_dir), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose(config_name=config_name, overrides=list(overrides)))
