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
class EvalConfig:
    """Every option of `python -m rlpt.eval`, with its default."""

    checkpoint: str = ""  # HF folder (Model.save_pretrained) or a run folder (its hf/ export or Orbax params)
    suite: str = "quickstart"  # see rlpt.eval.suites.get_suite; `needle` / `multihop` run the context grid
    policy: str = "model"  # model (needs checkpoint) | oracle (gold answers: must score 1.0) | empty (must 0.0)
    samples: int = 0  # n samples per task for pass@k (0: greedy pass@1 only)
    k: list[int] = dataclasses.field(default_factory=lambda: [1, 5, 10])  # pass@k reported for k <= samples
    temperature: float = 1.0  # for the samples (pass@1 is always greedy)
    top_p: float = 1.0  # nucleus sampling for the samples (1.0: off)
    top_k: int = 0  # 0: off
    max_new_tokens: int = 0  # 0: the suite's default
    limit: int = 0  # first N tasks of the suite (0: all; gsm_symbolic: its size)
    per_domain: int = 0  # procedural suites: tasks per domain (0: the suite's default)
    seed: int = 0  # sampling seed, and the item seed of generated suites
    batch_size: int = 32  # prompts per generate call
    workers: int = 4  # verifier threads (sandboxed code checks run in parallel)
    out: str = ""  # output folder (default: the Hydra run folder, runs/eval/<suite>-<policy>)
    # comparison: against a baseline results.json, or compare=a.json,b.json without evaluating
    baseline: str = ""  # a results.json (or its folder) to compare this evaluation against
    compare: str = ""  # A,B: compare two results (B - A) without evaluating
    level: float = 0.95  # bootstrap confidence level
    resamples: int = 2000  # bootstrap resamples
    min_drop: float = 0.0  # a regression is flagged when the interval is below 0 and delta <= -min_drop
    # contamination report instead of an evaluation: comma list of JSONL files and/or tasks:<domain globs>
    contamination: str = ""  # sources (JSONL files, folders, tasks:<globs>): report instead of evaluating
    train_tasks: int = 1000  # train-split tasks generated per domain for tasks:<globs>
    ngram: int = 13  # contamination: n-gram length
    # effective context (suite=needle | multihop)
    lengths: list[int] = dataclasses.field(  # needle/multihop: document lengths in prompt tokens
        default_factory=lambda: [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072])
    depths: list[float] = dataclasses.field(  # needle/multihop: needle positions, fractions of the document
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    trials: int = 2  # documents per (length, depth) cell
    threshold: float = 0.8  # effective context: largest length whose accuracy over depths is >= threshold
    tokenizer: str = ""  # needle with policy=oracle|empty: an HF tokenizer folder to measure length (default builtin)


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


_SCHEMAS = {"eval": lambda: EvalConfig, "tasks": lambda: TasksCliConfig, "flywheel": lambda: FlywheelCliConfig}


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
