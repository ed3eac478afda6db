"""Config schemas for the `domains`, `curriculum` and `reward` groups (registered in Hydra's ConfigStore)."""

import dataclasses


@dataclasses.dataclass
class DomainsConfig:
    """A named mixture of domains. `include` holds names or glob patterns ('arith/*', 'rg/*'), `exclude` patterns
    taken out of them; `weights` maps a pattern to its sampling weight (domains matching no weight pattern get 1.0);
    `tiers` restricts every domain to these tiers (empty: all of each domain's tiers)."""

    name: str = "quickstart"
    include: list[str] = dataclasses.field(
        default_factory=lambda: ["arith/add", "arith/sub", "list/sort", "str/reverse", "count/char"]
    )
    exclude: list[str] = dataclasses.field(default_factory=list)
    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    tiers: list[int] = dataclasses.field(default_factory=list)
    eval_size: int = 50
    eval_offset: int = 0


@dataclasses.dataclass
class CurriculumConfig:
    """name: fixed | staged | adaptive.
    fixed: tiers drawn from `tier_weights` (empty: uniform over each domain's tiers).
    staged: the top unlocked tier rises by one at each step in `stage_steps`; tiers are drawn uniformly
    from the last `window` unlocked ones.
    adaptive: each domain holds a current tier; the success EMA (rate `ema`) of (domain, tier) above
    `band_high` after `min_samples` outcomes promotes, below `band_low` demotes; `explore` is the chance
    of drawing a neighbouring tier.
    Replay pool (data flywheel): tasks scoring < 1 enter a pool of replay_capacity slots with their failure tag;
    replay_fraction of each batch re-draws from it, slot i with weight replay_tag_weights[tag] (default 1.0;
    0 keeps that tag out of the pool: infrastructure failures are not the policy's) times
    replay_weight ** (times the task was re-drawn) (< 1 favours fresh failures); a re-drawn task that passes
    leaves the pool. replay_file: a tasks.jsonl from `python -m rlpt.flywheel` preloaded into the pool."""

    name: str = "fixed"
    tier_weights: list[float] = dataclasses.field(default_factory=list)
    stage_steps: list[int] = dataclasses.field(default_factory=lambda: [200, 400, 600, 800])
    window: int = 2
    band_low: float = 0.3
    band_high: float = 0.8
    ema: float = 0.1
    min_samples: int = 32
    explore: float = 0.1
    start_tier_index: int = 0
    replay_fraction: float = 0.0
    replay_capacity: int = 1024
    replay_weight: float = 1.0
    replay_tag_weights: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"verifier_error": 0.0, "sandbox_error": 0.0}
    )
    replay_file: str = ""


@dataclasses.dataclass
class RewardComponentConfig:
    """One named reward component (see rlpt.rewards.components) with its weight and arguments."""

    weight: float = 1.0
    target_chars: int = 0
    max_chars: int = 0


@dataclasses.dataclass
class RewardConfig:
    """Reward = sum of weight * component over `components`; `per_domain` maps a domain glob pattern to
    its own component table (the first matching pattern wins)."""

    name: str = "correctness"
    components: dict[str, RewardComponentConfig] = dataclasses.field(
        default_factory=lambda: {"correctness": RewardComponentConfig(weight=1.0)}
    )
    per_domain: dict[str, dict[str, RewardComponentConfig]] = dataclasses.field(default_factory=dict)
    clip_low: float = -1.0
    clip_high: float = 1.0
