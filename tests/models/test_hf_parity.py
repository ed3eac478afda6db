"""Logits equal transformers' on the same weights: padding, packing, RoPE scalings, save/load round trips."""
import numpy as np
import pytest
import transformers

import rlpt.models as rm
from tests.models.hf_fixtures import CONFIGS, build_hf_model, hf_logits

TOL = 1e-4


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request, tmp_path_factory):
    hf_model = build_hf_model(request.param)
    folder = tmp_path_factory.mktemp(request.param)
    hf_model.save_pretrained(folder, safe_serialization=True)
    return request.param, hf_model, rm.load_pretrained(str(folder)), folder


def _tokens(rng, b, t, vocab=97):
    return rng.integers(0, vocab, size=(b, t))


def test_config_flags(pair):
    name, _, model, _ = pair
    cfg = model.config
    if name == "qwen2":
        assert cfg.qkv_bias and cfg.tie_embeddings and not cfg.qk_norm
    if name == "qwen3":
        assert cfg.qk_norm and not cfg.tie_embeddings and cfg.head_dim == 16
    if name == "llama3":
        assert cfg.rope_scaling.rope_type == "llama3"


def test_logits_plain(pair):
    _, hf_model, model, _ = pair
    tokens = _tokens(np.random.default_rng(0), 2, 24)
    ref = hf_logits(hf_model, tokens)
    ours = np.asarray(model(tokens))
    assert ref.std() > 0.5, "logits too small for the comparison to mean anything"
    np.testing.assert_allclose(ours, ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("side", ["left", "right"])
def test_logits_padding(pair, side):
    _, hf_model, model, _ = pair
    rng = np.random.default_rng(1)
    lengths, T = [20, 13, 7], 20
    tokens = np.zeros((3, T), np.int64)
    mask = np.zeros((3, T), np.int64)
    positions = np.zeros((3, T), np.int64)
    for i, n in enumerate(lengths):
        sl = slice(T - n, T) if side == "left" else slice(0, n)
        tokens[i, sl] = _tokens(rng, 1, n)[0]
        mask[i, sl] = 1
        positions[i, sl] = np.arange(n)
    ref = hf_logits(hf_model, tokens, attention_mask=mask, position_ids=positions)
    ours = np.asarray(model(tokens, positions=positions, segment_ids=mask))
    real = mask.astype(bool)
    np.testing.assert_allclose(ours[real], ref[real], atol=TOL, rtol=0)
    if pair[0] == "llama_dynamic":
        return  # dynamic NTK frequencies depend on the batch's longest row (as in HF): no per-row invariance
    # Each row alone, unpadded, gives the same logits as inside the padded batch.
    for i in range(len(lengths)):
        alone = np.asarray(model(tokens[i:i + 1][real[i:i + 1]][None]))[0]
        np.testing.assert_allclose(ours[i][real[i]], alone, atol=TOL, rtol=0)


def test_packed_rows(pair):
    name, hf_model, model, _ = pair
    if name == "llama_dynamic":
        return  # dynamic NTK frequencies depend on the batch's longest sequence, so packing changes them
    rng = np.random.default_rng(2)
    a, b = _tokens(rng, 1, 9)[0], _tokens(rng, 1, 14)[0]
    row = np.concatenate([a, b, np.zeros(3, np.int64)])[None]
    seg = np.array([[1] * 9 + [2] * 14 + [0] * 3])
    pos = np.array([list(range(9)) + list(range(14)) + [0] * 3])
    packed = np.asarray(model(row, positions=pos, segment_ids=seg))[0]
    np.testing.assert_allclose(packed[:9], hf_logits(hf_model, a[None])[0], atol=TOL, rtol=0)
    np.testing.assert_allclose(packed[9:23], hf_logits(hf_model, b[None])[0], atol=TOL, rtol=0)


MAIN = ("llama3", "qwen2", "qwen3")


def test_roundtrip_rlpt_save_hf_load(pair, tmp_path):
    name, _, model, _ = pair
    if name not in MAIN:
        return  # the RoPE variants share the export path with the main three
    model.save_pretrained(str(tmp_path))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager")
    tokens = _tokens(np.random.default_rng(3), 2, 16)
    np.testing.assert_allclose(hf_logits(reloaded.float(), tokens), np.asarray(model(tokens)), atol=TOL, rtol=0)


def test_roundtrip_sharded_save(pair, tmp_path):
    name, _, model, _ = pair
    if name != "qwen3":
        return  # one family suffices for the sharded-index path
    model.save_pretrained(str(tmp_path), max_shard_bytes=20_000)
    assert (tmp_path / "model.safetensors.index.json").exists()
    again = rm.load_pretrained(str(tmp_path))
    tokens = _tokens(np.random.default_rng(4), 1, 12)
    np.testing.assert_array_equal(np.asarray(again(tokens)), np.asarray(model(tokens)))
