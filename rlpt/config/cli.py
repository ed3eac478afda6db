"""Hydra plumbing shared by `python -m rlpt.eval`, `rlpt.tasks` and `rlpt.flywheel`: their schemas registered in
the ConfigStore next to the training one, the resolvers their run folders use, `--help` text drawn from the
schemas, compose() for Python callers, and the translation of the older `--flag value` forms into overrides."""
import dataclasses
import inspect
import os
import re

from rlpt.config.schema import CONF_DIR
from rlpt.observe.tags import FAILURE_TAGS

# Hydra's own options that take a value: passed through untouched by translate_argv
HYDRA_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}


@dataclasses.dataclass
class TasksCliConfig:
    """Every option of `python -m rlpt.tasks`, with its default."""

    cmd: str = "list"  # list (domains with tiers, verifier and source) | sample (tasks with their gold answers)
    pattern: str = ""  # list: a domain glob such as 'arith/*' (empty: every domain)
    domain: str = ""  # sample: the domain to draw from
    tier: int = 1  # sample: difficulty tier
    n: int = 3  # sample: how many tasks
    seed: int = 0  # sample: first item seed
    split: str = "train"  # sample: train | eval (eval seeds start at rlpt.tasks.base.EVAL_SEED_START)


@dataclasses.dataclass
class FlywheelCliConfig:
    """Every option of `python -m rlpt.flywheel`, with its default."""

    failures: str = ""  # folder of failure records (<run>/failures)
    out: str = ""  # folder for tasks.jsonl, regression.jsonl, now_passing.jsonl (default: the Hydra run folder)
    neighbours: int = 2  # also add train seeds seed+-1..neighbours of each failed task
    tags: list[str] = dataclasses.field(default_factory=lambda: list(FAILURE_TAGS))  # failure tags that become tasks
    check: str = ""  # re-verify this regression.jsonl instead of building (exit 1 if any case broke)


def slug(text: str) -> str:
    """A folder name for free text such as 'domains:arith/*,list/sort'."""
    return re.sub(r"[^\w.-]+", "_", text)


def _eval_dir(out: str, suite: str, policy: str, compare: str, contamination: str) -> str:
    """Default run folder of `python -m rlpt.eval` (the folders it wrote before it became a Hydra app)."""
    if out:
        return out
    if compare:  # next to B's results, as compare_<metric>/ always was
        b_path = [p for p in compare.split(",") if p][-1]
        return os.path.dirname(os.path.abspath(b_path if b_path.endswith(".json") else os.path.join(b_path, "x")))
    name = f"{suite}-contamination-{policy}" if contamination else f"{suite}-{policy}"
    return os.path.join("runs", "eval", slug(name))


def register_cli_configs() -> None:
    """Schemas rlpt_eval_schema, rlpt_tasks_schema, rlpt_flywheel_schema and the rlpt.* resolvers (idempotent)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from rlpt.eval.config import EvalConfig

    cs = ConfigStore.instance()
    cs.store(name="rlpt_eval_schema", node=EvalConfig)
    cs.store(name="rlpt_tasks_schema", node=TasksCliConfig)
    cs.store(name="rlpt_flywheel_schema", node=FlywheelCliConfig)
    resolvers = {
        "rlpt.eval_dir": _eval_dir,
        # compare= runs in B's results folder: keep B's own Hydra record (hydra/) intact
        "rlpt.eval_record": lambda compare: "hydra_compare" if compare else "hydra",
        "rlpt.first": lambda *options: next((o for o in options if o), ""),
        "rlpt.help": lambda name: options_help(_SCHEMAS[name]()),
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def _eval_schema():
    from rlpt.eval.config import EvalConfig

    return EvalConfig


_SCHEMAS = {"eval": _eval_schema, "tasks": lambda: TasksCliConfig, "flywheel": lambda: FlywheelCliConfig}


def options_help(schema) -> str:
    """One line per option: key=default and the comment that documents it in the schema's source."""
    comments = {}
    for line in inspect.getsource(schema).splitlines():
        m = re.match(r"\s+(\w+): [^=]+=.*?#\s*(.+)$", line)
        if m:
            comments[m.group(1)] = m.group(2)
    rows = []
    for f in dataclasses.fields(schema):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = "[" + ",".join(map(str, default)) + "]" if isinstance(default, list) else str(default)
        rows.append(f"  {f.name}={shown}" + (f"  # {comments[f.name]}" if f.name in comments else ""))
    return "\n".join(rows)


def compose(config_name: str, overrides: list[str]):
    """The typed schema object for `python -m rlpt.<config_name> <overrides>` without running Hydra's app (no run
    folder, so out= defaults stay as the CLI's own). Raises ValueError naming an unknown key or a wrong type."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    register_cli_configs()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            return OmegaConf.to_object(hydra_compose(config_name=config_name, overrides=list(overrides)))
    except HydraException as err:  # its causes hold the detail: the key's schema, the value's expected type
        causes, cause = [], err
        while cause is not None:
            causes.append(str(cause))
            cause = cause.__cause__
        raise ValueError("\n".join(causes)) from err


def fail(prog: str, err: Exception) -> None:
    """A refused value: one line on stderr naming the key, exit status 2 (as `python -m rlpt.train`)."""
    import sys

    print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


def preflight(prog: str, config_name: str, argv: list[str], check) -> None:
    """Before Hydra writes a run folder: compose argv's options and exit 2 (fail) if `check(cfg)` raises ValueError.
    Only for one plain run; typos, --help, --cfg and multirun (-m) are left to Hydra, which reports them itself."""
    if any(a.startswith("-") for a in argv):
        return
    try:
        cfg = compose(config_name, [a for a in argv if not a.lstrip("+~").startswith(("hydra.", "hydra/"))])
    except ValueError:
        return
    try:
        check(cfg)
    except ValueError as err:
        fail(prog, err)


def quote(text: str) -> str:
    """A Hydra override value that stays the literal string `text` (commas, spaces, '~', '#', ...)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def translate_argv(argv: list[str], positional: list[str], flags: dict[str, str],
                   lists: tuple[str, ...] = ()) -> list[str]:
    """The older argparse forms as Hydra overrides: bare words fill `positional` keys in order, `--flag v` and
    `--flag=v` become `flags[--flag]=v` (a comma list for keys in `lists`); Hydra's own options and key=value
    overrides pass through unchanged."""
    out, pos, i = [], list(positional), 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in flags:
            if not eq:
                if i + 1 >= len(argv):
                    raise ValueError(f"{name} needs a value")
                i, value = i + 1, argv[i + 1]
            key = flags[name]
            items = ",".join(quote(v) for v in value.split(",") if v)
            out.append(f"{key}=[{items}]" if key in lists else f"{key}={quote(value)}")
        elif arg in HYDRA_VALUE_FLAGS and i + 1 < len(argv):
            out += [arg, argv[i + 1]]
            i += 1
        elif pos and not arg.startswith("-") and "=" not in arg:
            out.append(f"{pos.pop(0)}={quote(arg)}")
        else:
            out.append(arg)
        i += 1
    return out
