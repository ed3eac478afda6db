"""Bad checkpoints give errors that name the file and the tensor."""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import rlpt.models as rm
from tests.models.hf_fixtures import build_hf_model


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    build_hf_model("qwen2").save_pretrained(folder, safe_serialization=True)
    return folder


def _copy(good, tmp_path):
    for f in good.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    return tmp_path


def test_good_loads(good):
    assert rm.load_pretrained(str(good)).config.family == "qwen2"


def test_corrupt_safetensors(good, tmp_path):
    folder = _copy(good, tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(rm.CheckpointError, match="model.safetensors"):
        rm.load_pretrained(str(folder))


def test_missing_tensor(good, tmp_path):
    folder = _copy(good, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(rm.CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        rm.load_pretrained(str(folder))


def test_unexpected_tensor(good, tmp_path):
    folder = _copy(good, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.extra.weight"] = np.zeros(3, np.float32)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(rm.CheckpointError, match=r"model\.safetensors: unexpected tensor 'model\.layers\.0\.extra"):
        rm.load_pretrained(str(folder))


def test_wrong_shape(good, tmp_path):
    folder = _copy(good, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((5, 32), np.float32)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(rm.CheckpointError, match=r"model\.safetensors: tensor 'model\.layers\.0\.self_attn\.k_proj"
                                                  r"\.weight' has shape \(5, 32\)"):
        rm.load_pretrained(str(folder))


def test_wrong_dtype(good, tmp_path):
    folder = _copy(good, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.int32)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(rm.CheckpointError, match=r"'model\.norm\.weight' has dtype I32"):
        rm.load_pretrained(str(folder))


def test_unsupported_model_type(good, tmp_path):
    folder = _copy(good, tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(rm.CheckpointError, match=r"config\.json: unsupported model_type 'gpt2'"):
        rm.load_pretrained(str(folder))


def test_missing_shard_file(good, tmp_path):
    folder = _copy(good, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    save_file(tensors, folder / "model-00001-of-00001.safetensors")
    index = {"weight_map": {k: "model-00002-of-00002.safetensors" for k in tensors}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(rm.CheckpointError, match="model-00002-of-00002.safetensors: file listed in the index"):
        rm.load_pretrained(str(folder))


def test_missing_config(tmp_path):
    with pytest.raises(rm.CheckpointError, match="missing config.json"):
        rm.load_pretrained(str(tmp_path))
