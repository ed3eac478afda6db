"""`python -m rlpt.eval` options: the typed schema Hydra composes (experiments/conf/eval.yaml), its checks, and the
older comma forms of its overrides."""
import dataclasses
import typing


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


def legacy_overrides(argv: list[str]) -> list[str]:
    """Overrides with this CLI's older comma forms kept: `k=1,4,16` (a list option) -> `k=[1,4,16]`;
    `compare=A,B`, `contamination=a.jsonl,tasks:code/*` and `suite=domains:a,b` stay one string. Elsewhere a comma
    is Hydra's sweep (`-m suite=humaneval,arc`)."""
    from rlpt.config.cli import quote

    hints = typing.get_type_hints(EvalConfig)
    out = []
    for arg in argv:
        key, sep, text = arg.partition("=")
        plain = sep and "," in text and text[:1] not in "[('\"" and key in hints
        if plain and typing.get_origin(hints[key]) is list:
            arg = f"{key}=[{text}]"
        elif plain and (key in ("compare", "contamination") or (key == "suite" and text.startswith("domains:"))):
            arg = f"{key}={quote(text)}"
        out.append(arg)
    return out


def parse_args(argv: list[str]) -> EvalConfig:
    """EvalConfig from the CLI's overrides (['key=value', ...]), composed by Hydra over experiments/conf/eval.yaml
    and validated. Raises ValueError naming the key of an unknown option, a wrong type or a bad value."""
    from rlpt.config.cli import compose

    cfg = compose("eval", legacy_overrides(argv))
    validate(cfg)
    return cfg


def validate(cfg: EvalConfig) -> None:
    """Raises ValueError naming the option whose value the CLI refuses."""
    if cfg.policy not in ("model", "oracle", "empty"):
        raise ValueError(f"policy={cfg.policy!r}: expected model, oracle or empty")
    if cfg.policy == "model" and not cfg.checkpoint and not cfg.compare and not cfg.contamination:
        raise ValueError("policy=model needs checkpoint=<HF folder or run folder> (or policy=oracle|empty)")
    if cfg.samples < 0 or any(k < 1 for k in cfg.k):
        raise ValueError(f"samples={cfg.samples} must be >= 0 and every k >= 1 (k={cfg.k})")
    if not 0 < cfg.level < 1:
        raise ValueError(f"level={cfg.level} must be in (0, 1)")
    if cfg.temperature < 0:
        raise ValueError(f"temperature={cfg.temperature} must be >= 0")
