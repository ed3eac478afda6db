"""`python -m rlpt.flywheel failures=<run>/failures [out=<dir>]` builds tasks.jsonl + regression.jsonl (in the Hydra
run folder unless out= is given); `python -m rlpt.flywheel check=<regression.jsonl>` re-verifies a regression file
(exit 1 if any case broke). A Hydra app over experiments/conf/flywheel.yaml (options:
rlpt.config.cli.FlywheelCliConfig); the older `<failures> --out D --neighbours K --tags a,b` / `--check F` forms
still read. The last stdout line is one JSON object."""
import json
import sys

import hydra
from omegaconf import OmegaConf

from rlpt.config.cli import CONF_DIR, FlywheelCliConfig, compose, fail, preflight, register_cli_configs, translate_argv
from rlpt.flywheel.build import build, check_regressions
from rlpt.observe.tags import FAILURE_TAGS

register_cli_configs()
_FLAGS = {"--out": "out", "--neighbours": "neighbours", "--tags": "tags", "--check": "check"}


def validate(cfg: FlywheelCliConfig) -> None:
    """Raises ValueError naming the option whose value the CLI refuses."""
    if not cfg.failures and not cfg.check:
        raise ValueError("give failures=<run>/failures (or check=<regression.jsonl>)")
    unknown = set(cfg.tags) - set(FAILURE_TAGS)
    if unknown:
        raise ValueError(f"tags: unknown {sorted(unknown)}; known: {list(FAILURE_TAGS)}")


def run(cfg: FlywheelCliConfig) -> int:
    """Builds (or with cfg.check re-verifies), prints the JSON line; 1 if a regression case broke, else 0.
    Raises ValueError naming a bad option, FileNotFoundError for a folder without failure records."""

    validate(cfg)
    if cfg.check:
        result = check_regressions(cfg.check)
        for case in result["broken_cases"]:
            print(f"[regression] {case['task_id']}: {case['why']}: {case['response'][:80]!r}", file=sys.stderr)
        print(json.dumps({"check": cfg.check, "cases": result["cases"], "broken": result["broken"]}))
        return 1 if result["broken"] else 0
    if not cfg.out:
        raise ValueError("out=<folder> is needed (the CLI defaults it to its Hydra run folder)")
    print(json.dumps(build(cfg.failures, cfg.out, neighbours=cfg.neighbours, tags=tuple(cfg.tags))))
    return 0


def overrides(argv: list[str]) -> list[str]:
    """Hydra overrides from argv, reading the older `<failures> --out D ...` / `--check F` forms too."""
    return translate_argv(argv, ["failures"], _FLAGS, lists=("tags",))


def main(argv: list[str] | None = None) -> int:
    """In-process `python -m rlpt.flywheel <argv>` (no Hydra run folder: give out=)."""
    return run(compose("flywheel", overrides(sys.argv[1:] if argv is None else argv)))


@hydra.main(config_path=CONF_DIR, config_name="flywheel", version_base="1.3")
def _app(dcfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    cfg = OmegaConf.to_object(dcfg)
    cfg.out = cfg.out or HydraConfig.get().runtime.output_dir
    try:
        code = run(cfg)
    except (ValueError, KeyError, FileNotFoundError) as err:
        fail("rlpt.flywheel", err)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    sys.argv[1:] = overrides(sys.argv[1:])
    preflight("rlpt.flywheel", "flywheel", sys.argv[1:], validate)  # a refused value leaves no run folder behind
    _app()
