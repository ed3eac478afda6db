"""The run's base model and its export: `base_model(cfg)` loads train.init_from's weights onto the mesh (or a
fresh init), `export_checkpoint` writes an HF folder. What the checkpoint defines (architecture, tokenizer) and the
checks against it are in `rlpt.config.source`, re-exported here.
"""
import os

import jax

from rlpt.config.source import (  # noqa: F401  (re-exported: rlpt.train.source.*)
    RUNTIME_FIELDS,
    CheckpointConflict,
    architecture_fields,
    check_checkpoint_source,
    check_vocab,
    explicit_model_fields,
    model_config,
    run_tokenizer,
    runtime_overrides,
)
from rlpt.models import init_model, load_pretrained


def base_model(cfg, mesh=None):
    """The starting Model: the checkpoint's weights streamed onto the mesh's shardings, or a fresh init."""

    if cfg.train.init_from:
        return load_pretrained(cfg.train.init_from, mesh=mesh, **runtime_overrides(cfg.model))
    return init_model(cfg.model, cfg.train.seed, mesh=mesh)


def export_checkpoint(model, tok, folder: str, *, source: str = "") -> str:
    """Write `model` (LoRA already merged) as an HF folder with its tokenizer and generation_config.json: the
    source checkpoint's generation config when there is one (sampling defaults kept), with eos_token_id = the
    tokenizer's stop ids."""
    import json

    model.save_pretrained(folder, tokenizer=tok)  # every process: the weights are gathered, process 0 writes
    if jax.process_index() != 0:
        return folder
    gen = {}
    src = os.path.join(source, "generation_config.json") if source else ""
    if src and os.path.isfile(src):
        with open(src) as f:
            gen = json.load(f)
    if tok.eos_ids:
        gen["eos_token_id"] = list(tok.eos_ids) if len(tok.eos_ids) > 1 else tok.eos_ids[0]
    for name in ("bos", "pad"):
        token_id = getattr(tok, f"{name}_id")
        if token_id is not None:
            gen.setdefault(f"{name}_token_id", token_id)
    tmp = os.path.join(folder, "generation_config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(gen, f, indent=2)
    os.replace(tmp, os.path.join(folder, "generation_config.json"))
    return folder
