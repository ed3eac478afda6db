"""`python -m rlpt.train`: compose the Hydra config and run the chosen stage.

Before Hydra writes anything into the run folder, the same config is composed and checked (value ranges, the
run folder: rlpt/train/preflight.py); a refusal is one line on stderr and exit status 2, with the folder untouched.
A sweep (`-m`) composes and checks every job first; each job then trains in its own Hydra folder, a failed job
is recorded there (failed.json) while the sweep goes on, and the sweep ends with its summary (rlpt.sweep).
"""
import logging
import os
import shutil
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from rlpt.config.schema import CONF_DIR, register_configs
from rlpt.config.validate import validate
from rlpt.parallel.distributed import DistributedError, console_note, peer_failure
from rlpt.train.source import check_checkpoint_source
from rlpt.train.stages import run_stage

register_configs()
_SNAPSHOT = None  # the run folder as it was before Hydra wrote into it (set by the preflight)


def fail(message: str, status: int):
    print(f"rlpt.train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(dcfg) -> None:
    from hydra.types import RunMode

    from rlpt.train.checkpoint import CheckpointWriteError  # on use (start-up: orbax)
    from rlpt.train.data import DataError  # on use (start-up: PIL)
    from rlpt.train.preflight import (  # on use (start-up: orbax)
        HYDRA_ENTRIES,
        REFUSALS,
        check_run_folder,
        explicit_out_dir,
        record_failure,
    )

    for noisy in ("absl", "jax"):  # Hydra sets the root logger to INFO; JAX's cache logs every reset there
        logging.getLogger(noisy).setLevel(logging.WARNING)
    hc = HydraConfig.get()
    job_dir = hc.runtime.output_dir
    sweep = hc.mode == RunMode.MULTIRUN
    if sweep and not explicit_out_dir(list(hc.overrides.task)):
        dcfg.train.out_dir = job_dir  # a sweep job trains in its own Hydra folder (<sweep dir>/<job number>)
    try:
        cfg = OmegaConf.to_object(dcfg)
        validate(cfg)
        check_checkpoint_source(cfg, list(hc.overrides.task))
        if _SNAPSHOT is None:  # no preflight ran (multirun, or main() called directly): check here
            check_run_folder(cfg, ignore=HYDRA_ENTRIES)
        os.makedirs(cfg.train.out_dir, exist_ok=True)
        with open(os.path.join(cfg.train.out_dir, "config.yaml"), "w") as f:
            f.write(OmegaConf.to_yaml(dcfg, resolve=True))
        result = run_stage(cfg)
        if sweep and os.path.abspath(cfg.train.out_dir) != os.path.abspath(job_dir):
            shutil.copy(os.path.join(cfg.train.out_dir, "summary.json"), job_dir)  # what the sweep summary reads
        return {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool, type(None)))}
    except Exception as e:  # a sweep records the failed job (failed.json) and goes on; its end exits non-zero
        console_note(f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        if sweep:
            record_failure(job_dir, e)
            logging.getLogger(__name__).exception("sweep job %s failed (recorded in %s/failed.json)",
                                                  hc.job.num, job_dir)
            return None
        if isinstance(e, REFUSALS):
            if _SNAPSHOT is not None:
                _SNAPSHOT.restore()
            fail(str(e), 2)
        if isinstance(e, (CheckpointWriteError, DataError, DistributedError)):
            fail(str(e), 1)
        peer_lost = peer_failure(e)
        if peer_lost:
            fail(peer_lost, 1)
        raise


if __name__ == "__main__":
    from rlpt.runtime import tune_malloc

    tune_malloc()  # re-exec once with glibc malloc settings XLA:CPU runs faster under (rlpt/runtime.py)
    from rlpt.train.preflight import REFUSALS, FolderSnapshot, check_sweep, preflight

    try:
        checked = preflight(sys.argv[1:])
        check_sweep(sys.argv[1:])  # -m: every job's config composes and validates before the first job starts
    except (*REFUSALS, ValueError) as e:
        fail(str(e), 2)
    if checked is not None:
        _SNAPSHOT = FolderSnapshot(checked.train.out_dir)
    main()
