"""`python -m rlpt.eval` arguments: a typed dataclass filled from key=value pairs; unknown keys fail by name."""
import dataclasses
import types
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
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    max_new_tokens: int = 0  # 0: the suite's default
    limit: int = 0  # first N tasks of the suite (0: all; gsm_symbolic: its size)
    per_domain: int = 0  # procedural suites: tasks per domain (0: the suite's default)
    seed: int = 0  # sampling seed, and the item seed of generated suites
    batch_size: int = 32  # prompts per generate call
    workers: int = 4  # verifier threads (sandboxed code checks run in parallel)
    out: str = ""  # output folder (default runs/eval/<suite>-<policy>)
    # comparison: against a baseline results.json, or compare=a.json,b.json without evaluating
    baseline: str = ""
    compare: str = ""
    level: float = 0.95  # bootstrap confidence level
    resamples: int = 2000
    min_drop: float = 0.0  # a regression is flagged when the interval is below 0 and delta <= -min_drop
    # contamination report instead of an evaluation: comma list of JSONL files and/or tasks:<domain globs>
    contamination: str = ""
    train_tasks: int = 1000  # train-split tasks generated per domain for tasks:<globs>
    ngram: int = 13
    # effective context (suite=needle | multihop)
    lengths: list[int] = dataclasses.field(default_factory=lambda: [1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                                                    131072])
    depths: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    trials: int = 2  # documents per (length, depth) cell
    threshold: float = 0.8  # effective context: largest length whose accuracy over depths is >= threshold
    tokenizer: str = ""  # needle with policy=oracle|empty: an HF tokenizer folder to measure length (default builtin)


def _convert(key: str, text: str, kind):
    origin = typing.get_origin(kind)
    if origin is list:
        (inner,) = typing.get_args(kind)
        body = text.strip()
        if body.startswith("[") and body.endswith("]"):
            body = body[1:-1]
        return [_convert(key, part.strip(), inner) for part in body.split(",") if part.strip()]
    if kind is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"{key}={text!r}: expected true or false")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{key}={text!r}: expected {kind.__name__}") from None
    if kind is str or isinstance(kind, types.UnionType):
        return text
    raise TypeError(f"{key}: unsupported option type {kind}")


def parse_args(argv: list[str]) -> EvalConfig:
    """EvalConfig from ['key=value', ...]; raises ValueError naming a malformed pair or an unknown key."""
    hints = typing.get_type_hints(EvalConfig)
    values = {}
    for arg in argv:
        key, sep, text = arg.partition("=")
        key = key.lstrip("+").strip()
        if not sep:
            raise ValueError(f"argument {arg!r} is not key=value")
        if key not in hints:
            raise ValueError(f"unknown option {key!r}; known: {', '.join(sorted(hints))}")
        values[key] = _convert(key, text, hints[key])
    cfg = EvalConfig(**values)
    validate(cfg)
    return cfg


def validate(cfg: EvalConfig) -> None:
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
