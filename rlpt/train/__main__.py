"""`python -m rlpt.train`: compose the Hydra config and run the chosen stage.

Before Hydra writes anything into the run folder, the same config is composed and checked (value ranges, the
run folder: rlpt/train/preflight.py); a refusal is one line on stderr and exit status 2, with the folder untouched.
"""
import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from rlpt.config.schema import register_configs

CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "conf")
register_configs()
_SNAPSHOT = None  # the run folder as it was before Hydra wrote into it (set by the preflight)


def fail(message: str, status: int):
    print(f"rlpt.train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(dcfg) -> None:
    from rlpt.config.validate import validate
    from rlpt.train.checkpoint import CheckpointWriteError
    from rlpt.train.data import DataError
    from rlpt.train.preflight import HYDRA_ENTRIES, REFUSALS, check_run_folder
    from rlpt.train.source import check_checkpoint_source
    from rlpt.train.stages import run_stage

    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        cfg = OmegaConf.to_object(dcfg)
        validate(cfg)
        check_checkpoint_source(cfg, list(HydraConfig.get().overrides.task))
        if _SNAPSHOT is None:  # no preflight ran (multirun, or main() called directly): check here
            check_run_folder(cfg, ignore=HYDRA_ENTRIES)
        os.makedirs(cfg.train.out_dir, exist_ok=True)
        with open(os.path.join(cfg.train.out_dir, "config.yaml"), "w") as f:
            f.write(OmegaConf.to_yaml(dcfg, resolve=True))
        run_stage(cfg)
    except REFUSALS as e:
        if _SNAPSHOT is not None:
            _SNAPSHOT.restore()
        fail(str(e), 2)
    except (CheckpointWriteError, DataError) as e:
        fail(str(e), 1)


if __name__ == "__main__":
    from rlpt.runtime import tune_malloc

    tune_malloc()  # re-exec once with glibc malloc settings XLA:CPU runs faster under (rlpt/runtime.py)
    from rlpt.train.preflight import REFUSALS, FolderSnapshot, preflight

    try:
        checked = preflight(sys.argv[1:])
    except (*REFUSALS, ValueError) as e:
        fail(str(e), 2)
    if checked is not None:
        _SNAPSHOT = FolderSnapshot(checked.train.out_dir)
    main()
