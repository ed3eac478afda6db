"""`python -m rlpt.plan`: compose the plan config (experiments/conf/plan.yaml), rehearse, report; exit 1 when a
program does not fit or leaves a large buffer replicated, 2 on a bad target."""
import hashlib
import logging
import os
import sys

import hydra
from omegaconf import OmegaConf

from rlpt.config.plan_schema import register_plan_configs
from rlpt.plan.chips import TargetError, request_cpu_devices
from rlpt.plan.rehearse import rehearse
from rlpt.plan.report import failures, last_line, markdown, write
from rlpt.train.source import check_checkpoint_source, model_config

CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf")
register_plan_configs()


@hydra.main(config_path=CONF_DIR, config_name="plan", version_base="1.3")
def main(dcfg) -> None:
    from hydra.core.hydra_config import HydraConfig


    logging.getLogger("absl").setLevel(logging.WARNING)
    cfg = OmegaConf.to_object(dcfg)
    if cfg.train.init_from:  # plan a checkpoint's own architecture (config.json; only its shapes are read)
        import dataclasses


        try:
            check_checkpoint_source(cfg, list(HydraConfig.get().overrides.task))
            cfg = dataclasses.replace(cfg, model=model_config(cfg))
        except ValueError as e:  # a conflicting override, or a folder whose config.json cannot be read
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
    try:
        summary = rehearse(cfg)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    command = "python -m rlpt.plan " + " ".join(HydraConfig.get().overrides.task)
    summary["command"] = command
    print(markdown(summary, command))
    if cfg.plan.write:
        model = HydraConfig.get().runtime.choices.get("model", cfg.model.family)
        name = f"{model}_{cfg.stage}_{cfg.target.replace(':', '-')}"
        extra = sorted(o for o in HydraConfig.get().overrides.task
                       if not o.startswith(("model=", "stage=", "target=", "plan.out_dir=")))
        if extra:  # other overrides: their own files, named by a hash of them
            name += "_" + hashlib.sha1(" ".join(extra).encode()).hexdigest()[:8]
        js, md = write(summary, cfg.plan.out_dir, name, command)
        print(f"wrote {js} and {md}")
    ok = summary["fits"] and summary["sharding_ok"]
    for line in failures(summary):
        print(line, file=sys.stderr)
    print(last_line(summary), flush=True)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    request_cpu_devices(sys.argv[1:])
    main()
