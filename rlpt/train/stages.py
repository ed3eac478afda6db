"""Stage registry: `stage=<name>` in the config picks the run function.

Stages are named by module path and imported on use, so `python -m rlpt.train` loads only the chosen stage;
`register_stage(name)` adds a callable (e.g. from a notebook or a plugin) under a new name.
"""
import importlib
from collections.abc import Callable

from rlpt.runtime import setup

STAGES: dict[str, str | Callable] = {
    "sft": "rlpt.train.sft",
    "quickstart": "rlpt.pipeline.quickstart",
    "rl": "rlpt.pipeline.rl_stage",
    "dpo": "rlpt.preference.dpo",
    "rm": "rlpt.preference.reward_model",
    "ppo_rlhf": "rlpt.pipeline.ppo_rlhf",
    "agent": "rlpt.pipeline.agent",
    "distill": "rlpt.pipeline.distill",
}


def register_stage(name: str):
    def wrap(fn):
        STAGES[name] = fn
        return fn
    return wrap


def run_stage(cfg):
    from rlpt.config.validate import validate  # on use (start-up: jax)
    from rlpt.train.source import check_checkpoint_source  # on use (start-up: jax)

    validate(cfg)  # configs built or edited in code get the same range checks as composed ones
    check_checkpoint_source(cfg)  # a train.init_from checkpoint defines the architecture and tokenizer
    if cfg.stage not in STAGES:
        raise ValueError(f"stage={cfg.stage!r}; known stages: {sorted(STAGES)}")
    from rlpt.parallel import check_same_config, log_to_file, maybe_initialize_distributed  # on use (start-up: jax)

    maybe_initialize_distributed(cfg.mesh)  # before anything touches a JAX backend
    check_same_config(cfg)  # several processes: the same config everywhere, or all stop naming the key
    log_to_file(cfg.train.out_dir)  # processes other than 0 write <out_dir>/logs/process_<id>.log
    setup(cfg.runtime)  # persistent compilation cache, compile-time counter
    target = STAGES[cfg.stage]
    run = importlib.import_module(target).run if isinstance(target, str) else target
    return run(cfg)
