"""`python -m rlpt.train`: compose the Hydra config and run the chosen stage."""
import logging
import os

import hydra
from omegaconf import OmegaConf

from rlpt.config.schema import register_configs

CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf")
register_configs()


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(dcfg) -> None:
    from rlpt.train.stages import run_stage

    logging.getLogger("absl").setLevel(logging.WARNING)
    cfg = OmegaConf.to_object(dcfg)
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    with open(os.path.join(cfg.train.out_dir, "config.yaml"), "w") as f:
        f.write(OmegaConf.to_yaml(dcfg, resolve=True))
    run_stage(cfg)


if __name__ == "__main__":
    from rlpt.runtime import tune_malloc

    tune_malloc()  # re-exec once with glibc malloc settings XLA:CPU runs faster under (rlpt/runtime.py)
    main()
