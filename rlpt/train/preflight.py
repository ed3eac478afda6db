"""Checks that run before `python -m rlpt.train` writes anything: config ranges and the run folder.

Hydra writes `<out_dir>/hydra/` (and its job log) before the task function runs, so a run refused inside it
would already have overwritten the folder's record of the run it refuses. `preflight(argv)` composes the same
config first and refuses a bad value or an unusable folder with one line; `FolderSnapshot` puts Hydra's files
and `config.yaml` back for the refusals that can only be detected later (a stage's own checkpoint fingerprint).
"""
import dataclasses
import json
import os
import shutil
import traceback

from rlpt.config.schema import compose, compose_dict
from rlpt.config.validate import ConfigError, validate
from rlpt.parallel.distributed import maybe_initialize_distributed
from rlpt.train.checkpoint import Checkpointer, IncompatibleCheckpoint, RunFolderError, fingerprint
from rlpt.train.source import model_config

# What Hydra and the CLI write into the run folder before a stage starts.
HYDRA_ENTRIES = ("hydra", "config.yaml", "__main__.log")
REFUSALS = (ConfigError, RunFolderError, IncompatibleCheckpoint)
# Hydra flags after which argv is not one plain run (multirun, --cfg, --help, ...): those skip the preflight.
_VALUE_FLAGS = {"-cn": "name", "--config-name": "name"}


def run_fingerprint(model_cfg, cfg) -> str:
    """The fingerprint make_trainer gives the checkpoints of a run (shapes of the saved state)."""
    lora = dataclasses.asdict(cfg.lora)
    if not lora.get("vision_targets", 1):  # the fingerprint LoRA checkpoints had before lora.vision_targets
        del lora["vision_targets"]
    return fingerprint(model_fields(model_cfg), dataclasses.asdict(cfg.optim), lora)


def model_fields(model_cfg) -> dict:
    """A model config as the dict checkpoint fingerprints hash: a VLMConfig as its `model` section (model.vision
    set); a text model without the vision key, so its checkpoints keep the fingerprint they had before it."""
    if hasattr(model_cfg, "model_config"):
        model_cfg = model_cfg.model_config()
    out = dataclasses.asdict(model_cfg)
    if out.get("vision", 0) is None:
        del out["vision"]
    return out


def _sft_model_config(cfg):
    return model_config(cfg)


def check_run_folder(cfg, ignore: tuple[str, ...] = ()) -> None:
    """Refuse (RunFolderError / IncompatibleCheckpoint) a run folder this run must not write into.

    resume=never: the folder must be empty (entries in `ignore` aside). resume=auto: the stage-sft checkpoints
    must carry this run's fingerprint and seed (other stages check theirs when they build their trainer).
    """
    out = cfg.train.out_dir
    if not os.path.isdir(out):
        return
    entries = sorted(e for e in os.listdir(out) if e not in ignore)
    if cfg.train.resume == "never":
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise RunFolderError(f"train.out_dir={out} is not empty ({shown}) and train.resume=never: use a new "
                                 f"train.out_dir, or train.resume=auto to continue that run. Nothing was written.")
        return
    ckpt_dir = os.path.join(out, "checkpoints")
    if cfg.stage == "sft" and cfg.train.ckpt_every > 0 and os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):
        maybe_initialize_distributed(cfg.mesh)  # Orbax starts JAX's backend; several processes must connect first
        Checkpointer(ckpt_dir, every=cfg.train.ckpt_every, keep=cfg.train.keep, async_save=False,
                     fingerprint=run_fingerprint(_sft_model_config(cfg), cfg), seed=cfg.train.seed).manager.close()


def plain_run_args(argv: list[str]) -> tuple[list[str], str] | None:
    """(overrides, config name) when argv is one plain run; None for anything else Hydra is asked to do."""
    overrides, name, i = [], "config", 0
    while i < len(argv):
        a = argv[i]
        flag, _, value = a.partition("=")
        if flag in _VALUE_FLAGS:
            if not value:
                i += 1
                value = argv[i] if i < len(argv) else ""
            name = value
        elif a.startswith("-"):
            return None
        elif not a.lstrip("+~").startswith(("hydra.", "hydra/")):
            overrides.append(a)
        i += 1
    return overrides, name


def preflight(argv: list[str]):
    """Compose and validate the config of `argv` and check its run folder. Returns the Config (None when argv is
    not a plain run, or its composition fails: Hydra then reports that itself); raises a REFUSALS error or a
    ValueError from a schema's own checks."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException


    parsed = plain_run_args(argv)
    if parsed is None:
        return None
    try:
        cfg = compose(*parsed)
    except (HydraException, OmegaConfBaseException):
        return None
    validate(cfg)
    check_run_folder(cfg)
    return cfg


class FolderSnapshot:
    """The run folder's Hydra files and config.yaml as they were before this run, to put back on a refusal."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.existed = os.path.isdir(out_dir)
        self.before = set(os.listdir(out_dir)) if self.existed else set()
        self.files: dict[str, bytes] = {}
        for rel in ("config.yaml", "__main__.log", *(os.path.join("hydra", f) for f in self._hydra_files())):
            path = os.path.join(out_dir, rel)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    self.files[rel] = f.read()

    def _hydra_files(self) -> list[str]:
        d = os.path.join(self.out_dir, "hydra")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def restore(self) -> None:
        """Put back the recorded files, remove what Hydra and the refused run added (new files under hydra/, a
        new config.yaml or job log, new empty folders), and the folder itself if it did not exist and is empty."""
        if not os.path.isdir(self.out_dir):
            return
        for rel in ("config.yaml", "__main__.log", *(os.path.join("hydra", f) for f in self._hydra_files())):
            path = os.path.join(self.out_dir, rel)
            if rel in self.files:
                with open(path, "wb") as f:
                    f.write(self.files[rel])
            elif os.path.isfile(path):
                os.remove(path)
        for name in set(os.listdir(self.out_dir)) - self.before:
            path = os.path.join(self.out_dir, name)
            if name == "hydra" or (os.path.isdir(path) and not os.listdir(path)):
                shutil.rmtree(path)
        if not self.existed and not os.listdir(self.out_dir):
            os.rmdir(self.out_dir)


def explicit_out_dir(overrides: list[str]) -> bool:
    """True when the command line sets train.out_dir itself."""
    return any(o.lstrip("+~").split("=", 1)[0] == "train.out_dir" for o in overrides)


def sweep_jobs(argv: list[str]) -> tuple[list[list[str]], str] | None:
    """The override lists of every job of a `-m` command line (Hydra's basic sweeper expansion: a,b,c choices,
    range(), glob()), and the config name; None when argv is not a sweep of plain overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not any(a in ("-m", "--multirun") for a in argv):
        return None
    parsed = plain_run_args([a for a in argv if a not in ("-m", "--multirun")])
    if parsed is None:
        return None
    overrides, name = parsed
    parser = OverridesParser.create()
    plain = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
    grid = [f"{k}={v}" for k, v in _sweeper_params(plain, name).items()]  # a sweep= config's grid comes first
    batches = BasicSweeper.split_arguments(parser.parse_overrides(grid + overrides), None)
    return [list(job) for batch in batches for job in batch], name


def _sweeper_params(overrides: list[str], name: str) -> dict[str, str]:
    """hydra.sweeper.params of the composed config (what a `sweep=<grid>` config sets), as key -> value string."""
    from omegaconf import OmegaConf


    params = compose_dict(overrides, name, return_hydra_config=True).hydra.sweeper.params  # None without a grid
    params = OmegaConf.to_container(params) if params is not None else {}
    return {str(k): str(v) for k, v in params.items()}


def check_sweep(argv: list[str]) -> int:
    """Compose and validate every job of a `-m` sweep before any starts (a typo'd key or group option, an
    out-of-range value, jobs sharing one train.out_dir: ConfigError naming the job and the key). Returns the
    number of jobs checked (0: argv is not a sweep)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException


    jobs = sweep_jobs(argv)
    if jobs is None:
        return 0
    out_dirs: dict[str, int] = {}
    for i, job in enumerate(jobs[0]):
        try:
            cfg = compose(job, jobs[1])
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            detail = " ".join(str(err).split())
            raise ConfigError(f"sweep job {i} ({' '.join(job)}): {detail}") from err
        if explicit_out_dir(job):
            if cfg.train.out_dir in out_dirs:
                raise ConfigError(f"sweep jobs {out_dirs[cfg.train.out_dir]} and {i} share train.out_dir="
                                  f"{cfg.train.out_dir}: drop train.out_dir (each job then trains in its own "
                                  f"Hydra folder) or make it differ per job")
            out_dirs[cfg.train.out_dir] = i
    return len(jobs[0])


def record_failure(job_dir: str, err: BaseException) -> str:
    """Write `<job_dir>/failed.json` (error line, type, traceback) for a failed sweep job; returns its path."""
    os.makedirs(job_dir, exist_ok=True)
    path = os.path.join(job_dir, "failed.json")
    line = " ".join(str(err).split()) or type(err).__name__
    with open(path, "w") as f:
        json.dump({"error": line, "type": type(err).__name__,
                   "traceback": "".join(traceback.format_exception(err))}, f, indent=1)
    return path
