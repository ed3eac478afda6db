"""The VLM against transformers' LlavaForConditionalGeneration (SigLIP tower + Llama / Qwen2 text) on the same tiny
random weights: logits within 1e-4 in f32 with several images per row and text-only rows; both tensor layouts load;
rlpt's save loads in transformers; a mismatched image-token count and bad checkpoints raise named errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlpt.models.hf import CheckpointError  # noqa: E402
from rlpt.models.llava import config_from_llava, load_llava  # noqa: E402

IMAGE_TOKEN = 100


def _hf_model(text: str, strategy: str, layer: int, seed: int = 0):
    torch.manual_seed(seed)
    vc = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, image_size=16, patch_size=4, vision_use_head=False)
    common = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
    tc = transformers.LlamaConfig(**common) if text == "llama" else transformers.Qwen2Config(**common)
    cfg = transformers.LlavaConfig(vision_config=vc, text_config=tc, image_token_index=IMAGE_TOKEN,
                                   vision_feature_layer=layer, vision_feature_select_strategy=strategy,
                                   projector_hidden_act="gelu", image_seq_length=16 - (strategy == "default"))
    model = transformers.LlavaForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # LayerNorms and biases away from their 1 / 0 init, so the test sees them
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(per_image: int, rng):
    """Two rows: one with two images and text between, one text only (no images)."""
    a = [5, 6] + [IMAGE_TOKEN] * per_image + [7, 8, 9] + [IMAGE_TOKEN] * per_image + [10, 11]
    b = list(rng.integers(0, 99, size=len(a)))
    return np.array([a, b], np.int64), rng.standard_normal((2, 3, 16, 16)).astype(np.float32)


@pytest.mark.parametrize("text,strategy,layer", [("llama", "full", -1), ("qwen2", "default", -2)])
def test_logits_match_transformers(tmp_path, text, strategy, layer):
    hf_model = _hf_model(text, strategy, layer)
    hf_model.save_pretrained(str(tmp_path))
    model = load_llava(str(tmp_path))
    assert model.config.vision.tokens_per_image == 16 - (strategy == "default")
    tokens, pixels = _batch(model.config.vision.tokens_per_image, np.random.default_rng(0))
    with torch.no_grad():
        want = hf_model(input_ids=torch.tensor(tokens), pixel_values=torch.tensor(pixels)).logits.numpy()
    got = np.asarray(model(tokens.astype(np.int32), pixels))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    # a text-only batch runs the decoder alone
    with torch.no_grad():
        want_text = hf_model(input_ids=torch.tensor(tokens[1:])).logits.numpy()
    np.testing.assert_allclose(np.asarray(model(tokens[1:].astype(np.int32))), want_text, atol=1e-4, rtol=1e-4)


def test_rlpt_save_loads_in_transformers_and_in_memory_layout_loads(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_model = _hf_model("llama", "full", -1, seed=1)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    model = load_llava(str(tmp_path / "hf"))
    model.save_pretrained(str(tmp_path / "ours"))
    back = transformers.LlavaForConditionalGeneration.from_pretrained(str(tmp_path / "ours")).eval()
    tokens, pixels = _batch(16, np.random.default_rng(1))
    with torch.no_grad():
        a = hf_model(input_ids=torch.tensor(tokens), pixel_values=torch.tensor(pixels)).logits.numpy()
        b = back(input_ids=torch.tensor(tokens), pixel_values=torch.tensor(pixels)).logits.numpy()
    np.testing.assert_allclose(b, a, atol=1e-5)
    # the in-memory layout (model.language_model.*, lm_head.weight, model.vision_tower.vision_model.*) loads too
    moved = {}
    for name, arr in load_file(str(tmp_path / "ours" / "model.safetensors")).items():
        name = name.replace("language_model.model.", "model.language_model.").replace("language_model.lm_head.",
                                                                                      "lm_head.")
        name = name.replace("vision_tower.", "model.vision_tower.vision_model.").replace(
            "multi_modal_projector.", "model.multi_modal_projector.")
        moved[name] = arr
    (tmp_path / "moved").mkdir()
    save_file(moved, str(tmp_path / "moved" / "model.safetensors"))
    (tmp_path / "moved" / "config.json").write_text((tmp_path / "ours" / "config.json").read_text())
    again = load_llava(str(tmp_path / "moved"))
    np.testing.assert_allclose(np.asarray(again(tokens.astype(np.int32), pixels)), a, atol=1e-4, rtol=1e-4)


def test_named_errors(tmp_path):
    import json

    hf_model = _hf_model("llama", "full", -1)
    hf_model.save_pretrained(str(tmp_path))
    model = load_llava(str(tmp_path))
    tokens, pixels = _batch(16, np.random.default_rng(0))
    with pytest.raises(ValueError, match="image tokens for 1 images"):
        model(tokens.astype(np.int32), pixels[:1])
    with pytest.raises(ValueError, match="pixel_values of shape"):
        model(tokens.astype(np.int32), np.zeros((2, 3, 8, 8), np.float32))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["vision_feature_layer"] = [-1, -2]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="vision_feature_layer"):
        config_from_llava(str(tmp_path))
    cfg["vision_feature_layer"] = -1
    cfg["vision_config"]["model_type"] = "clip_vision_model"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="SigLIP"):
        config_from_llava(str(tmp_path))
