"""Fixtures of the multi-turn rollout tests: the built-in tokenizer and a tiny random policy whose end-of-turn token
is frequent, so episodes have several short turns within a small budget."""
import pytest

from rlpt.models import builtin_tokenizer, init_model
from rlpt.models.config import ModelConfig


@pytest.fixture(scope="module")
def tok():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(family="qwen2", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                      num_heads=4, num_kv_heads=2, max_position_embeddings=1024, qkv_bias=True, tie_embeddings=True)
    m = init_model(cfg, seed=3)
    emb = m.params["embed"]
    m.params["embed"] = emb.at[2].set(emb[2] * 40.0)
    return m
