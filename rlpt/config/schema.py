"""Typed config schemas for `python -m rlpt.train`, registered in Hydra's ConfigStore.

Library code receives `OmegaConf.to_object(cfg)` sub-configs (these dataclasses), never a DictConfig.
Every default lives here; struct mode makes a typo or a wrong type fail at compose time, naming the key.
Every numeric field declares its range (`num(default, ge=...)`, `choice(default, *allowed)`; rlpt/config/validate.py)
and `validate` checks them all before any work.
"""
import dataclasses
import os
import warnings
from typing import Any

from rlpt.algos.options import check_algo_options
from rlpt.config.source import check_checkpoint_source
from rlpt.config.tasks import CurriculumConfig, DomainsConfig, RewardConfig
from rlpt.config.validate import ConfigError, choice, num, validate
from rlpt.models.config import ModelConfig
from rlpt.parallel.rules import DEFAULT_RULES

CONF_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf"))


@dataclasses.dataclass
class MeshConfig:
    """Mesh axis sizes (-1: the remaining devices) and the logical-axis rules table."""

    data: int = num(-1, ge=-1, ne=0)
    fsdp: int = num(1, ge=-1, ne=0)
    tensor: int = num(1, ge=-1, ne=0)
    seq: int = num(1, ge=-1, ne=0)
    axis_type: str = choice("auto", "auto", "explicit")
    rules: list[Any] = dataclasses.field(default_factory=lambda: [[k, v] for k, v in DEFAULT_RULES])
    distributed: bool = False  # call jax.distributed.initialize (also when JAX_COORDINATOR_ADDRESS is set)
    coordinator_address: str | None = None
    num_processes: int | None = num(None, ge=1)
    process_id: int | None = num(None, ge=0)
    timeout_s: float = num(300.0, gt=0)  # longest wait for another process (start-up, config check)
    heartbeat_s: float = num(100.0, gt=0)  # a process silent this long is dead: the others' collectives fail


@dataclasses.dataclass
class OptimConfig:
    """optax optimizer and schedule; clip_norm <= 0 disables clipping."""

    name: str = choice("adamw", "adamw", "adafactor", "lion", "sgd")
    lr: float = num(1e-3, gt=0)
    b1: float = num(0.9, ge=0, lt=1)
    b2: float = num(0.999, ge=0, lt=1)
    eps: float = num(1e-8, ge=0)
    weight_decay: float = num(0.0, ge=0)
    schedule: str = choice("cosine", "cosine", "linear", "constant")
    warmup_steps: int = num(0, ge=0)
    min_lr_ratio: float = num(0.1, ge=0, le=1)
    clip_norm: float = num(1.0)  # any finite value; <= 0 disables clipping
    grad_accum: int = num(1, ge=1)


@dataclasses.dataclass
class LoraConfig:
    """LoRA adapters on the named projections; rank 0 trains the full model."""

    rank: int = num(0, ge=0)
    alpha: float = num(16.0, gt=0)
    targets: list[str] = dataclasses.field(default_factory=lambda: ["wq", "wk", "wv", "wo"])
    # model.vision: adapters on these vision-tower projections too (wq, wk, wv, wo, fc1, fc2), the tower's weights
    # then frozen; empty: the tower trains fully (or not at all with model.vision.train=false)
    vision_targets: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SourceConfig:
    """One data source: a JSONL file (prompt/completion or messages), procedural tasks, or an RL prompt file
    (rl_jsonl: a registered file/<stem> domain for RL; its answered train rows are SFT demonstrations)."""

    kind: str = choice("tasks", "tasks", "jsonl", "rl_jsonl")
    path: str = ""
    weight: float = num(1.0, ge=0)
    replay: bool = False  # general data mixed in against forgetting


@dataclasses.dataclass
class DataConfig:
    """SFT batches: sources mixed by weight, tokenised, packed first-fit-decreasing into seq_len rows."""

    sources: dict[str, SourceConfig] = dataclasses.field(default_factory=dict)
    replay_share: float = num(0.0, ge=0, le=1)  # fraction of examples drawn from sources marked replay
    seq_len: int = num(128, ge=2)  # rows are shifted by one token: 2 is the least that trains anything
    batch_size: int = num(32, ge=1)  # rows per optimizer step (split into optim.grad_accum micro-batches)
    # the global batch is `shards` streams of batch_size/shards rows; each process builds its own (0: one per process)
    shards: int = num(0, ge=0)
    packing: bool = True
    overlong: str = choice("truncate", "truncate", "drop")
    easy_to_hard: bool = False
    pool_size: int = num(4096, ge=1)  # examples generated per procedural pass / shuffled per epoch
    completion_only: bool = True  # loss on completion tokens only; false: on every token (prompt included)
    # Token layout for context parallelism over mesh.seq > 1: contiguous | zigzag | striped (load-balanced
    # causal work for ring attention); applied once to each batch, exact because masks use positions.
    cp_layout: str = choice("zigzag", "contiguous", "zigzag", "striped")
    # Progressive length curriculum: [[from_step, seq_len], ...] (ascending); empty: seq_len throughout.
    length_stages: list[Any] = dataclasses.field(default_factory=list)
    noise: float = num(0.0, ge=0, le=1)  # share of task demonstrations given another task's answer (a noisy teacher)
    # builtin (characters) | bpe (stage=agent: a BPE of model.vocab_size ids trained on its demonstrations) | a folder
    tokenizer: str = "builtin"
    path: str = ""  # data=rl_jsonl: the RL prompt file (docs/rl_data.md), read by its source's ${data.path}
    with_domains: bool = True  # the task mixture holds the `domains` group's domains besides rl_jsonl files
    # model.vision: image slots per row (packing puts at most this many images in one row; a sample with more is
    # dropped and counted)
    images_per_row: int = num(1, ge=1)


@dataclasses.dataclass
class TrainConfig:
    """The loop: steps, logging, checkpoints, evaluation."""

    steps: int = num(200, ge=1)
    seed: int = num(0, ge=0)
    log_every: int = num(10, ge=1)
    eval_every: int = num(0, ge=0)  # 0: no evaluation during training
    eval_samples: int = num(200, ge=1)
    eval_max_new_tokens: int = num(16, ge=1)
    ckpt_every: int = num(100, ge=0)  # 0: no checkpoints
    keep: int = num(2, ge=1)  # checkpoints kept (the newest)
    # auto: continue from the newest readable checkpoint in out_dir | never: start fresh, refuse a non-empty out_dir
    resume: str = choice("auto", "auto", "never")
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
    # Overrides of the chosen function's keyword options (their defaults are the function's: ppo clip_low 0.2,
    # clip_high 0.28 (DAPO's clip-higher); gspo 3e-4 / 4e-4; cispo ratio_max 5); checked at compose time.
    policy_loss_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    aggregation: str = "token-mean"
    aggregation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # step: normalise over the whole optimizer step | micro: per micro-batch, then mean
    scope: str = choice("step", "step", "micro")
    kl_coef: float = num(0.0, ge=0)
    kl_estimator: str = "k3"
    kl_in: str = choice("loss", "loss", "reward")
    entropy_coef: float = num(0.0)
    # Ratio denominator: the sampler's log-probs ("rollout") or a trainer forward before the update
    # ("recompute"; then `correction` reweights the rollout/trainer mismatch).
    old_logp: str = choice("rollout", "rollout", "recompute")
    # Deprecated: moved to rl.exec (how the update runs, not what it optimises). Set here, they are copied to
    # rl.exec with a FutureWarning (`RLConfig.__post_init__`); None: not set.
    logits_window: bool | None = None
    share_prefix: bool | None = None
    correction_level: str = choice("none", "none", "token", "sequence", "geometric")
    correction_mode: str = choice("truncate", "truncate", "mask")
    correction_cap: float = num(2.0, gt=0)
    dynamic_sampling: bool = False  # DAPO: drop groups with zero reward variance
    overlong_filter: bool = False  # mask truncated samples out of the loss
    overlong_buffer: int = num(0, ge=0)  # DAPO soft overlong penalty over the last N tokens (0: off)
    overlong_penalty: float = num(1.0, ge=0)


@dataclasses.dataclass
class ExecConfig:
    """How the RL update is computed, not what it optimises: every switch here leaves the loss and its gradients
    unchanged (tests/pipeline/test_rl_loss.py checks each against the plain computation)."""

    # The LM head and log-softmax run only on a window of columns covering each row's response (prompt
    # positions carry no loss; TRL's logits_to_keep). The loss is the same; false computes every column.
    logits_window: bool = True
    # The G rows of a group share their prompt: it runs through the policy once per group (its K/V broadcast to
    # the G responses, gradients summed back) instead of G times. Same loss and gradients; needs logits_window.
    share_prefix: bool = True


@dataclasses.dataclass
class CriticConfig:
    """PPO's value head, used when rl.algo.advantage=gae (the one estimator that needs values): a linear head on
    the policy's hidden states, detached (its loss moves only the head), fitted to the GAE returns with the
    clipped value loss (`rlpt.algos.value_loss`), added to the policy loss per token with weight vf_coef."""

    vf_coef: float = num(0.5, ge=0)
    value_clip: float = num(0.2, ge=0)  # 0: the plain squared error
    # The head's own optimizer (own learning rate and global-norm clip, as OpenRLHF / verl's critic); 0: the
    # policy's optimizer and clip
    lr: float = num(0.0, ge=0)


@dataclasses.dataclass
class PartialConfig:
    """Partial rollouts for multi-turn agents (`rlpt.rollout.partial`, APRIL-style): each step runs more groups
    than it trains on and ends once prompts_per_step groups have finished; the unfinished episodes are paused
    (workspace, tokens, log-probs, counters) into the run's checkpoint and continued by later policies, their
    tokens corrected by the PPO ratio against the log-probs they were sampled with."""

    enabled: bool = False
    # groups in flight beyond prompts_per_step (drawn once, on the run's first step): the slack that lets a step
    # end without its slowest groups; 0: every step waits for all its groups (no episode is paused)
    extra_groups: int = num(0, ge=0)
    # a group started max_lag steps ago is run to the end in the current step, so no trained token is older than
    # max_lag + ceil(extra_groups / prompts_per_step) policy versions
    max_lag: int = num(2, ge=1)


@dataclasses.dataclass
class RolloutConfig:
    """Generation for RL: groups of `group_size` samples per task share one prefill."""

    prompts_per_step: int = num(32, ge=1)
    group_size: int = num(8, ge=1)
    max_new_tokens: int = num(16, ge=1)
    temperature: float = num(1.0, ge=0)
    top_p: float | None = num(None, gt=0, le=1)
    top_k: int | None = num(None, ge=1)
    max_prompt_len: int = num(64, ge=1)
    episode_timeout_s: float = num(60.0, gt=0)
    max_turns: int = num(3, ge=1)  # multi-turn agents: policy turns per episode (each may call a tool)
    # The sampler's compute dtype (e.g. "bfloat16" rollouts from float32 master weights, as verl samples with a
    # bf16 engine); None: the trainer's model.compute_dtype. The PPO ratio's denominator is then the bf16
    # policy's log-prob (rl.algo.old_logp=rollout), or use old_logp=recompute with rl.algo.correction_level.
    compute_dtype: str | None = None
    # Quantized sampling (rlpt.models.quant): the sampler's layer weights as int8 (one scale per output channel) or
    # int4 (one per quant_group input features), quantized once per weight version; embedding and head stay. The
    # rollout log-probs are the quantized policy's: the mismatch shows in logp_gap, and old_logp=recompute with
    # rl.algo.correction_level reweights it, as for compute_dtype.
    quant: str = choice("none", "none", "int8", "int4")
    quant_group: int = num(128, ge=1)  # int4: must divide hidden_size, num_heads * head_dim and intermediate_size
    # The sampler's KV cache: null = the compute dtype; int8 = int8 K/V with one f32 scale per (row, KV head, slot)
    kv_cache_dtype: str | None = choice(None, None, "int8")
    # Single-turn slot refill (rlpt.sampling.refill): decode in a static batch of refill_slots rows (0: half the
    # rows), prefilling queued samples into rows as they finish, so a few long samples do not hold the whole
    # batch; each sample draws from the same per-row stream as in one plain batch.
    refill: bool = False
    refill_slots: int = num(0, ge=0)
    # Prefix reuse (rlpt.sampling.PrefixCache): a common prompt prefix of at least this many tokens (a system
    # prompt, a few-shot preamble) is run once per policy version and copied into every row's cache; 0: off.
    # Metrics: prefix_reused_fraction (prompt tokens not recomputed), prefix_hits.
    prefix_cache_min_tokens: int = num(0, ge=0)
    partial: PartialConfig = dataclasses.field(default_factory=PartialConfig)


@dataclasses.dataclass
class RLConfig:
    """The RL loop: sync or async (bounded staleness), evaluation and the SFT cold start (quickstart)."""

    algo: AlgoConfig = dataclasses.field(default_factory=AlgoConfig)
    exec: ExecConfig = dataclasses.field(default_factory=ExecConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    critic: CriticConfig = dataclasses.field(default_factory=CriticConfig)
    mode: str = choice("sync", "sync", "async")
    max_staleness: int = num(1, ge=0)
    # colocated: the sampler reads the trainer's weights on the same devices. split: each process gives its last
    # `sampler_devices` local devices (0: half) to the sampler, the rest to the trainer's mesh; weights are copied
    # trainer -> sampler after each update (weight_sync_s in metrics.jsonl)
    placement: str = choice("colocated", "colocated", "split")
    sampler_devices: int = num(0, ge=0)
    steps: int = num(200, ge=0)
    lr: float = num(1e-4, gt=0)
    # optimizer steps on each step's rollout batch (verl's ppo_epochs): the ratio's denominator and the value
    # targets stay those of the policy that sampled it; checkpoints are named by optimizer step
    ppo_epochs: int = num(1, ge=1)
    eval_every: int = num(0, ge=0)
    eval_per_domain: int = num(100, ge=1)
    sft_steps: int = num(0, ge=0)  # quickstart: SFT cold start before RL
    # quickstart: share of SFT demonstrations with a wrong answer (a noisy teacher)
    sft_noise: float = num(0.0, ge=0, le=1)
    # agent stage, RepoAgent: what a wrong demonstration does. wrong_module: opens a module without the bug and
    # submits; give_up: opens the right module and submits without the patch
    sft_noise_kind: str = choice("wrong_module", "wrong_module", "give_up")
    sft_tiers: list[int] = num(default_factory=list, ge=0)
    # quickstart: stop the cold start once greedy pass@1 on a dev split of train-seed tasks (sft_dev_per_domain
    # per domain, checked every sft_check_every steps) reaches sft_target_pass; 0: run all sft_steps.
    sft_target_pass: float = num(0.0, ge=0, le=1)
    sft_check_every: int = num(25, ge=1)
    sft_dev_per_domain: int = num(100, ge=1)
    # agent stage: SFT steps of the no-tool baseline, a same-size policy trained from scratch on the train tasks'
    # single-turn answers and graded on the held-out tasks by the domain's verifier (no_tool_pass1); 0: not run
    no_tool_steps: int = num(0, ge=0)

    def __post_init__(self):
        """The deprecation path of rl.algo.logits_window / rl.algo.share_prefix: a value set there moves to rl.exec
        (a FutureWarning says so); one that contradicts a value set in rl.exec is refused, naming both keys."""
        for key in ("logits_window", "share_prefix"):
            old = getattr(self.algo, key)
            if old is None:
                continue
            new = getattr(self.exec, key)
            if new != getattr(ExecConfig, key) and new != old:
                raise ConfigError(f"rl.algo.{key}={str(old).lower()} (deprecated) contradicts "
                                  f"rl.exec.{key}={str(new).lower()}; set rl.exec.{key} only")
            warnings.warn(f"rl.algo.{key} is deprecated: it moved to rl.exec.{key} (execution switches, not the "
                          f"objective); using rl.exec.{key}={str(old).lower()}", FutureWarning, stacklevel=2)
            setattr(self.exec, key, old)
            setattr(self.algo, key, None)


@dataclasses.dataclass
class ObserveConfig:
    """Run observability (rlpt.observe): TensorBoard, reward-drift alerts, trajectory and failure logs.

    Drift: per domain, the rewards of the last `drift_window` steps are compared with the `drift_baseline`
    steps before them (two-sample KS statistic and population stability index over `drift_bins` bins); an
    alert fires when KS > drift_ks_threshold and PSI > drift_psi_threshold (a threshold <= 0 switches that
    test off) and both samples hold >= drift_min_samples rewards; after an alert the domain's baseline
    restarts (a new full baseline is collected before the next test). `alert_hooks` names callables
    registered in rlpt.observe.alerts.ALERT_HOOKS. samples_every / samples_per_step: sample trajectories
    written to TensorBoard as text.
    Trajectory log: gzip JSONL under <out_dir>/trajectories, a new file past `traj_log_max_bytes`
    (compressed), the oldest deleted beyond `traj_log_max_files`. Failures: failed tasks with failure tags
    to <out_dir>/failures/*.jsonl (at most `failures_max_responses` failing responses per task)."""

    tensorboard: bool = True
    samples_every: int = num(10, ge=0)
    samples_per_step: int = num(2, ge=0)
    drift: bool = True
    drift_window: int = num(8, ge=1)
    drift_baseline: int = num(32, ge=1)
    drift_min_samples: int = num(32, ge=1)
    drift_bins: int = num(10, ge=2)
    drift_ks_threshold: float = num(0.25)  # <= 0: test off
    drift_psi_threshold: float = num(0.25)  # <= 0: test off
    # the reward-hacking audit (a shaping or judge component rising against a fixed anchor while the verifier's
    # outcome does not; rlpt.observe.components) has its own KS / PSI thresholds (<= 0: test off); its window,
    # anchor size, bins and minimum samples are the drift_* ones
    audit_ks_threshold: float = num(0.25)
    audit_psi_threshold: float = num(0.25)
    alert_hooks: list[str] = dataclasses.field(default_factory=list)
    trajectory_log: bool = True
    traj_log_max_bytes: int = num(16 << 20, ge=1)
    traj_log_max_files: int = num(8, ge=1)
    failures: bool = True
    failures_max_responses: int = num(2, ge=0)


@dataclasses.dataclass
class PrefConfig:
    """Preference stages (dpo | rm | ppo_rlhf; rlpt.preference): pairs, loss by registry name, reward model, PPO.

    Pairs come from `source`: verifier (a verified and a failed sample of one task, drawn from the policy),
    synthetic (gold answer against a corrupted one) or jsonl (`path`: prompt/chosen/rejected text or chat
    messages). Identical, empty and over-long (> max_len tokens, by `overlong`) pairs are dropped or cut and
    counted. Each stage can first train its own SFT policy (sft_steps > 0, on a teacher with sft_noise).
    """

    sft_steps: int = num(0, ge=0)  # SFT warm start inside the stage (0: train.init_from or random init)
    sft_noise: float = num(0.5, ge=0, le=1)
    source: str = choice("verifier", "verifier", "synthetic", "jsonl")
    path: str = ""  # jsonl: training pairs
    heldout_path: str = ""  # jsonl: held-out pairs (empty: none for jsonl; tasks' eval split otherwise)
    train_tasks: int = num(256, ge=1)  # tasks (train seeds) for verifier / synthetic pairs
    heldout_tasks: int = num(128, ge=1)  # tasks (eval seeds) for held-out pairs
    samples_per_task: int = num(8, ge=1)  # verifier pairs: samples per task to find a passed and a failed one
    sample_temperature: float = num(1.0, ge=0)
    gold_fallback: bool = False  # verifier pairs: the gold answer is chosen when no sample of a task passes
    # synthetic rejected answer: swap (another task's answer) | perturb | mixed
    corruption: str = choice("mixed", "swap", "perturb", "mixed")
    max_len: int = num(48, ge=2)  # prompt + response tokens per sequence
    overlong: str = choice("drop", "drop", "truncate")  # truncate: cut the response's tail
    rounds: int = num(1, ge=1)  # dpo: regenerate verifier pairs from the current policy each round (iterative DPO)
    loss: str = "sigmoid"  # rlpt.algos.PREFERENCE_LOSSES name: sigmoid ipo robust hinge simpo orpo kto
    loss_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    beta: float = num(0.1, gt=0)
    # dpo: + rpo_alpha * token-mean NLL of the chosen responses (RPO; TRL's rpo_alpha)
    rpo_alpha: float = num(0.0, ge=0)
    # precompute (reference log-probs once per round) | online (frozen ref params)
    ref: str = choice("precompute", "precompute", "online")
    steps: int = num(100, ge=1)  # dpo optimizer steps per round
    lr: float = num(1.0e-4, gt=0)
    batch_size: int = num(16, ge=1)  # pairs per optimizer step
    eval_per_domain: int = num(200, ge=1)
    rm_steps: int = num(200, ge=0)
    rm_lr: float = num(3.0e-4, gt=0)
    rm_batch_size: int = num(32, ge=1)
    rm_margin: float = num(0.0)  # Bradley-Terry margin: -log sigmoid(s_c - s_r - margin)
    rm_center_coef: float = num(0.0, ge=0)
    rm_path: str = ""  # ppo_rlhf: a saved RewardModel folder (empty: train one in the stage first)
    # ppo_rlhf's reward = rm_weight * RM score + verifier_weight * the reward mixture's reward (cfg.reward; the
    # default reward=correctness is the verifier's score); its RL settings (steps, lr, PPO clip, KL-in-reward,
    # GAE, value head) are rl.* (stage=ppo_rlhf sets them: experiments/conf/stage/ppo_rlhf.yaml)
    rm_weight: float = num(1.0)
    verifier_weight: float = num(0.0)
    # ppo_rlhf RM score before mixing: batch (standardised per rollout batch) | none
    reward_norm: str = choice("batch", "batch", "none")


@dataclasses.dataclass
class DistillConfig:
    """Distillation (stage=distill, rlpt.pipeline.distill): the student (the `model` group, or train.init_from) learns
    the teacher's next-token distributions for train.steps steps at optim.lr.

    teacher: an HF checkpoint folder with the student's tokenizer (an rlpt export, e.g. `train.export_hf=true`);
    empty: the stage first trains one with the quickstart recipe (cold start + GRPO; the rl.* keys) on the
    `teacher_model` preset (experiments/conf/model/<name>.yaml) into <out_dir>/teacher (kept: a rerun reuses it).
    The student first gets the quickstart's SFT cold start when rl.sft_steps > 0 (its "before" point).
    mode: logit (the teacher's distributions on fixed sequences, `sequences`: sft = the run's SFT data, teacher =
    completions the teacher samples for task prompts) | on_policy (the student samples completions of task prompts,
    rl.rollout's shapes and temperature, and the teacher scores every student token: GKD with lambda = 1).
    divergence per response token over the full vocabulary at `temperature` (rlpt.train.losses.token_divergence):
    forward_kl | reverse_kl | jsd (generalized JSD with `beta`), token-mean."""

    teacher: str = ""
    teacher_model: str = "tiny"
    mode: str = choice("on_policy", "logit", "on_policy")
    sequences: str = choice("sft", "sft", "teacher")
    divergence: str = choice("reverse_kl", "forward_kl", "reverse_kl", "jsd")
    beta: float = num(0.5, gt=0, lt=1)
    temperature: float = num(1.0, gt=0)


@dataclasses.dataclass
class FleetPoolConfig:
    """One group of identical verifier workers (Ray actors): each reserves `cpus` CPUs, `memory_mb` MiB (0: no
    reservation) and, per tag in `tags`, that amount of the custom Ray resource of that name (so only nodes started
    with it, e.g. `ray start --resources='{"bubblewrap": 100}'`, host the pool), and runs `threads` checks at once."""

    workers: int = num(2, ge=1)
    cpus: float = num(1.0, ge=0)
    memory_mb: int = num(0, ge=0)
    threads: int = num(4, ge=1)
    tags: dict[str, float] = num(default_factory=dict, gt=0)


@dataclasses.dataclass
class FleetConfig:
    """Where verifications (and multi-turn environments) run: kind none (this process, in order: rlpt's classic
    path) or ray (rlpt.fleet.ray_fleet: Ray actors on this host or a cluster). docs/fleet.md.

    address: local (start a private Ray instance on this host with `local_cpus` CPUs, 0: all) | auto (join the
    cluster `ray start` runs here) | ray://host:port (Ray Client). pools: name -> FleetPoolConfig; domain_tags:
    domain glob -> tags a worker's pool must carry to verify it. Scheduling (rlpt.fleet.scheduler): policy domain |
    fifo, priorities (domain glob -> int, higher first), chunk_s (target seconds of work per dispatch by the cost
    model, cost_prior_s for a domain not yet measured), max_chunk items, inflight_per_worker chunks sent ahead,
    deadline_s (items of a batch are ordered before later batches' items; 0: submission order), backup_after (an
    idle worker re-runs a chunk that has run this many times its expected time; 0: off). max_pending: submit blocks
    while this many items are unverified (back-pressure on the producer). Faults: a worker that dies is replaced and
    its unfinished items retried `retries` times on another worker; a domain whose verifier fails quarantine_after
    times in a row is quarantined (0: never). envs: multi-turn environments run on the fleet (env_hosts actors).
    start_timeout_s: the longest wait for the workers to start (a cluster without their resources fails then)."""

    kind: str = choice("none", "none", "ray")
    address: str = "local"
    local_cpus: int = num(0, ge=0)
    pools: dict[str, FleetPoolConfig] = dataclasses.field(default_factory=lambda: {"default": FleetPoolConfig()})
    domain_tags: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    policy: str = choice("domain", "domain", "fifo")
    priorities: dict[str, int] = num(default_factory=dict)  # any int: higher first
    chunk_s: float = num(0.05, gt=0)
    cost_prior_s: float = num(0.01, gt=0)
    max_chunk: int = num(64, ge=1)
    inflight_per_worker: int = num(2, ge=1)
    deadline_s: float = num(0.0, ge=0)
    backup_after: float = num(4.0, ge=0)
    max_pending: int = num(4096, ge=1)
    retries: int = num(1, ge=0)
    quarantine_after: int = num(20, ge=0)
    envs: bool = True
    env_hosts: int = num(2, ge=1)
    start_timeout_s: float = num(120.0, gt=0)


@dataclasses.dataclass
class RuntimeConfig:
    """Process settings every stage applies before compiling (rlpt.runtime.setup)."""

    # JAX's persistent compilation cache: compiled programs kept in this folder between runs, so a second run (or
    # the next sweep job) of the same shapes skips XLA compilation; "" turns it off; auto: $RLPT_COMPILATION_CACHE
    # when set (the tests set it to ""), else ~/.cache/rlpt/jax
    compilation_cache: str = "auto"
    cache_min_compile_s: float = num(0.0, ge=0)  # programs that compile faster than this are not stored


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
    pref: PrefConfig = dataclasses.field(default_factory=PrefConfig)
    distill: DistillConfig = dataclasses.field(default_factory=DistillConfig)
    observe: ObserveConfig = dataclasses.field(default_factory=ObserveConfig)
    runtime: RuntimeConfig = dataclasses.field(default_factory=RuntimeConfig)
    fleet: FleetConfig = dataclasses.field(default_factory=FleetConfig)

    def check_combinations(self) -> None:
        """Refuse, at compose time, options of the chosen pieces that do not exist and combinations the code does
        not support, naming the keys (`validate` runs this after the ranges)."""

        try:
            check_algo_options(self.rl.algo)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.rl.exec.share_prefix and not self.rl.exec.logits_window:
            raise ConfigError("rl.exec.share_prefix=true runs each group's prompt once and the responses in the logit "
                              "window, so it needs rl.exec.logits_window=true (or set rl.exec.share_prefix=false)")
        if self.model.vision is not None:
            if self.mesh.seq > 1:
                raise ConfigError(f"mesh.seq={self.mesh.seq} with model.vision: rows with images are not "
                                  "sequence-sharded; set mesh.seq=1")
            if self.stage in RL_STAGES:
                for key, on in (("rl.exec.share_prefix", self.rl.exec.share_prefix),
                                ("rl.rollout.refill", self.rl.rollout.refill)):
                    if on:
                        raise ConfigError(f"{key}=true does not combine with model.vision yet (stage={self.stage}); "
                                          f"set {key}=false")
        if self.stage in RL_STAGES and self.rl.algo.advantage == "gae":  # the value head's trainer
            if self.lora.rank > 0:
                raise ConfigError(f"rl.algo.advantage=gae trains a value head with the full model; lora.rank="
                                  f"{self.lora.rank} is not supported with it: set lora.rank=0 or another "
                                  "rl.algo.advantage")
            if self.model.vision is not None:
                raise ConfigError("rl.algo.advantage=gae (a value head) does not combine with model.vision yet; "
                                  "choose another rl.algo.advantage")
        if self.rl.rollout.partial.enabled:
            self._check_partial()
        if self.data.tokenizer == "bpe" and (self.stage != "agent" or self.train.init_from):
            raise ConfigError(f"data.tokenizer=bpe is trained by the agent stage on its teacher demonstrations, for a "
                              f"model from scratch; stage={self.stage}"
                              + (f" with train.init_from={self.train.init_from}" if self.train.init_from else "")
                              + " needs data.tokenizer=builtin or a tokenizer folder")

    def _check_partial(self) -> None:
        if self.stage != "agent":
            raise ConfigError(f"rl.rollout.partial.enabled=true pauses multi-turn agent episodes (stage=agent); "
                              f"stage={self.stage} has none: set it false")
        if self.model.vision is not None:
            raise ConfigError("rl.rollout.partial.enabled=true does not combine with model.vision yet; set it false")
        if self.rl.algo.old_logp == "recompute" and self.rl.algo.correction_level == "none":
            raise ConfigError("rl.rollout.partial.enabled=true trains on tokens sampled by older policies, and "
                              "rl.algo.old_logp=recompute with rl.algo.correction_level=none drops their importance "
                              "weights: use old_logp=rollout or a correction_level")


# the stages that run rlpt.pipeline.rl.run_rl (read rl.algo, rl.rollout)
RL_STAGES = ("rl", "quickstart", "agent", "ppo_rlhf")


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="rlpt_schema", node=Config)


def model_preset(name: str) -> ModelConfig:
    """The ModelConfig of experiments/conf/model/<name>.yaml, as `model=<name>` composes it: merged onto a default
    ModelConfig instance (Hydra's schema node), so a preset without head_dim keeps the default instance's."""
    from omegaconf import OmegaConf

    folder = os.path.join(CONF_DIR, "model")
    path = os.path.join(folder, f"{name}.yaml")
    if not os.path.exists(path):
        known = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml"))
        raise ValueError(f"{name!r} is not a model preset; known: {known}")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig()), OmegaConf.load(path)))


# Keys that moved: an override of the old name fails naming the new one (Hydra alone says "Could not override").
MOVED_KEYS = {  # PPO-RLHF runs on the RL loop (#38): its PPO settings are the RL stage's
    "pref.ppo_steps": "rl.steps", "pref.ppo_lr": "rl.lr", "pref.ppo_epochs": "rl.ppo_epochs",
    "pref.kl_coef": "rl.algo.kl_coef", "pref.kl_estimator": "rl.algo.kl_estimator",
    "pref.clip": "rl.algo.policy_loss_kwargs.clip_low and .clip_high", "pref.vf_coef": "rl.critic.vf_coef",
    "pref.vf_lr": "rl.critic.lr", "pref.value_clip": "rl.critic.value_clip",
    "pref.gamma": "rl.algo.advantage_kwargs.gamma", "pref.lam": "rl.algo.advantage_kwargs.lam",
}


def check_moved_keys(overrides) -> None:
    """Raise ConfigError for an override of a key in MOVED_KEYS, naming where it went."""
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key in MOVED_KEYS:
            raise ConfigError(f"{key} moved to {MOVED_KEYS[key]}")


def compose_dict(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config", *,
                 return_hydra_config: bool = False):
    """The DictConfig Hydra composes for `python -m rlpt.train <overrides>` (with `hydra.*` when asked)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    check_moved_keys(overrides)
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides),
                             return_hydra_config=return_hydra_config)


def compose(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config") -> Config:
    """The typed Config for `python -m rlpt.train <overrides>`, for notebooks and tests."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(compose_dict(overrides, config_name))
    validate(cfg)
    if isinstance(cfg, Config):
        check_checkpoint_source(cfg, list(overrides))
    return cfg
