"""Decoder-only transformers (Llama 2/3, Qwen2/2.5/3), HF interop and tokenizers."""
from rlpt.models.config import ModelConfig, RopeScaling
from rlpt.models.hf import CheckpointError, config_from_hf, config_to_hf
from rlpt.models.model import Model, init_model, load_pretrained
from rlpt.models.tokenizer import Tokenizer, builtin_tokenizer, load_tokenizer
from rlpt.models.transformer import (
    forward,
    hidden_states,
    init_cache,
    init_params,
    lm_head,
    logits_from_hidden,
    param_axes,
    param_shapes,
)

__all__ = [
    "CheckpointError", "Model", "ModelConfig", "RopeScaling", "Tokenizer", "builtin_tokenizer", "config_from_hf",
    "config_to_hf", "forward", "load_tokenizer",
    "hidden_states", "init_cache", "init_model", "init_params", "lm_head", "load_pretrained",
    "logits_from_hidden", "param_axes", "param_shapes",
]
