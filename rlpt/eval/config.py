"""`python -m rlpt.eval` options: the typed schema Hydra composes (experiments/conf/eval.yaml), its checks, and the
older comma forms of its overrides."""
import typing

from rlpt.config.cli import (
    EvalConfig,  # noqa: F401  (the schema lives with the other CLI schemas)
    compose,
    quote,
)


def legacy_overrides(argv: list[str]) -> list[str]:
    """Overrides with this CLI's older comma forms kept: `k=1,4,16` (a list option) -> `k=[1,4,16]`;
    `compare=A,B`, `contamination=a.jsonl,tasks:code/*` and `suite=domains:a,b` stay one string. Elsewhere a comma
    is Hydra's sweep (`-m suite=humaneval,arc`)."""

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
