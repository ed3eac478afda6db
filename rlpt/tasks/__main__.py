"""`python -m rlpt.tasks cmd=list [pattern='arith/*']` and `python -m rlpt.tasks cmd=sample domain=D [tier=N n=K
seed=S split=train|eval]`: a Hydra app over experiments/conf/tasks.yaml (options: rlpt.config.cli.TasksCliConfig).
The older forms `list [PATTERN]` and `sample DOMAIN --tier N --n K --seed S --split X` still read."""

import sys

import hydra
from omegaconf import OmegaConf

from rlpt.config.cli import CONF_DIR, TasksCliConfig, compose, fail, register_cli_configs, translate_argv
from rlpt.tasks.base import EVAL_SEED_START
from rlpt.tasks.registry import get_domain, list_domains, resolve

register_cli_configs()
_FLAGS = {"--tier": "tier", "--n": "n", "--seed": "seed", "--split": "split"}


def _list(pattern: str) -> None:
    names = resolve([pattern]) if pattern else list_domains()
    width = max(len(n) for n in names)
    print(f"{'domain':<{width}}  tiers      verifier            source")
    for name in names:
        d = get_domain(name)
        tiers = ",".join(map(str, d.tiers))
        print(f"{name:<{width}}  {tiers:<9}  {d.verifier:<18}  {d.source}")
    print(f"{len(names)} domains")


def _sample(name: str, tier: int, n: int, seed: int, split: str) -> None:
    domain = get_domain(name)
    base = seed + (EVAL_SEED_START if split == "eval" else 0)
    for s in range(base, base + n):
        task = domain.generate(s, tier)
        print(f"=== {task.id}  (env {task.env_id}, split {task.meta['split']})")
        print(task.prompt if len(task.prompt) <= 4000 else task.prompt[:2000] + "\n[...]\n" + task.prompt[-1500:])
        print(f"--- gold answer:\n{task.meta['answer']}")


def validate(cfg: TasksCliConfig) -> None:
    """Raises ValueError naming the option whose value the CLI refuses."""
    if cfg.cmd not in ("list", "sample"):
        raise ValueError(f"cmd={cfg.cmd!r}: expected list or sample")
    if cfg.cmd == "sample" and not cfg.domain:
        raise ValueError("cmd=sample needs domain=<name> (see cmd=list)")
    if cfg.split not in ("train", "eval"):
        raise ValueError(f"split={cfg.split!r}: expected train or eval")


def run(cfg: TasksCliConfig) -> int:
    """Prints what cfg.cmd asks for; raises ValueError naming a bad option (KeyError for an unknown domain)."""
    validate(cfg)
    if cfg.cmd == "list":
        _list(cfg.pattern)
    else:
        _sample(cfg.domain, cfg.tier, cfg.n, cfg.seed, cfg.split)
    return 0


def overrides(argv: list[str]) -> list[str]:
    """Hydra overrides from argv, reading the older `list PATTERN` / `sample DOMAIN --tier N ...` forms too."""
    second = next(({"list": "pattern", "sample": "domain"}[a] for a in argv if a in ("list", "sample")), None)
    return translate_argv(argv, ["cmd", second] if second else [], _FLAGS)


def main(argv: list[str] | None = None) -> int:
    """In-process `python -m rlpt.tasks <argv>`."""
    return run(compose("tasks", overrides(sys.argv[1:] if argv is None else argv)))


@hydra.main(config_path=CONF_DIR, config_name="tasks", version_base="1.3")
def _app(dcfg) -> None:
    try:
        run(OmegaConf.to_object(dcfg))
    except (ValueError, KeyError) as err:
        fail("rlpt.tasks", err)


if __name__ == "__main__":
    sys.argv[1:] = overrides(sys.argv[1:])
    _app()
