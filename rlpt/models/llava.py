"""LLaVA checkpoint interop: transformers' LlavaForConditionalGeneration with a SigLIP vision tower and a Llama /
Qwen2 / Qwen3 text model, to rlpt's VisionLanguageModel and back.

Tensor names: transformers writes the legacy layout (`language_model.model.*`, `language_model.lm_head.weight`,
`vision_tower.*`, `multi_modal_projector.*`) and reads it and its in-memory layout (`model.language_model.*`,
`lm_head.weight`, `model.vision_tower.*`, `model.multi_modal_projector.*`); the tower's tensors may carry SigLIP's
`vision_model.` prefix (SiglipVisionModel) or not. All of these load; saving writes the legacy layout. The SigLIP
attention-pooling head (`head.*`, unused by LLaVA's features) is not loaded.
"""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.models import hf
from rlpt.models.hf import CheckpointError
from rlpt.models.vision import VisionConfig, VLMConfig, vlm_param_shapes

_VISION = re.compile(r"^(model\.)?vision_tower\.(vision_model\.)?")
_PROJECTOR = re.compile(r"^(model\.)?multi_modal_projector\.")


def config_from_llava(folder: str, **text_overrides) -> VLMConfig:
    """The VLMConfig of a LLaVA folder's config.json; unsupported settings raise naming the key."""
    cfg, path = hf.read_config(folder)
    if cfg.get("model_type") != "llava":
        raise CheckpointError(f"{path}: model_type {cfg.get('model_type')!r}; expected 'llava'")
    vc = cfg.get("vision_config") or {}
    if vc.get("model_type") != "siglip_vision_model":
        raise CheckpointError(f"{path}: vision_config.model_type {vc.get('model_type')!r}; rlpt reads SigLIP vision "
                              "towers ('siglip_vision_model')")
    if vc.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise CheckpointError(f"{path}: vision_config.hidden_act {vc['hidden_act']!r}; expected gelu_pytorch_tanh")
    if cfg.get("projector_hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"{path}: projector_hidden_act {cfg['projector_hidden_act']!r}; expected gelu")
    layer = cfg.get("vision_feature_layer", -2)
    if not isinstance(layer, int):
        raise CheckpointError(f"{path}: vision_feature_layer {layer!r}; rlpt takes one layer (an int)")
    text = dict(cfg["text_config"])
    if "tie_word_embeddings" in cfg:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    text_cfg = hf.config_from_dict(text, f"{path}: text_config", **text_overrides)
    try:
        vision = VisionConfig(
            image_size=vc.get("image_size", 224), patch_size=vc.get("patch_size", 16),
            num_channels=vc.get("num_channels", 3), hidden_size=vc.get("hidden_size", 768),
            intermediate_size=vc.get("intermediate_size", 3072), num_layers=vc.get("num_hidden_layers", 12),
            num_heads=vc.get("num_attention_heads", 12), layer_norm_eps=vc.get("layer_norm_eps", 1e-6),
            feature_layer=layer, select_strategy=cfg.get("vision_feature_select_strategy", "default"),
            image_token_id=cfg.get("image_token_index", cfg.get("image_token_id", 32000)),
            projector_bias=bool(cfg.get("multimodal_projector_bias", True)))
        return VLMConfig(text_cfg, vision)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from e


def _vision_map(vc: VisionConfig):
    """rlpt vision leaf -> (HF name after the tower prefix, to_rlpt, to_hf)."""
    Dv, H, dh = vc.hidden_size, vc.num_heads, vc.head_dim

    def ident():
        return lambda a: a, lambda a: a

    def t():
        return lambda a: a.T, lambda a: a.T

    def heads_in():  # (H*dh, Dv) <-> (Dv, H, dh)
        return lambda a: a.T.reshape(Dv, H, dh), lambda a: a.reshape(Dv, H * dh).T

    def heads_bias():
        return lambda a: a.reshape(H, dh), lambda a: a.reshape(H * dh)

    p = "encoder.layers.{i}."
    return {
        "patch": ("embeddings.patch_embedding.weight", lambda a: a.reshape(a.shape[0], -1).T,
                  lambda a: a.T.reshape(Dv, vc.num_channels, vc.patch_size, vc.patch_size)),
        "patch_b": ("embeddings.patch_embedding.bias", *ident()),
        "pos": ("embeddings.position_embedding.weight", *ident()),
        "post_ln_w": ("post_layernorm.weight", *ident()),
        "post_ln_b": ("post_layernorm.bias", *ident()),
        "layers/ln1_w": (p + "layer_norm1.weight", *ident()), "layers/ln1_b": (p + "layer_norm1.bias", *ident()),
        "layers/ln2_w": (p + "layer_norm2.weight", *ident()), "layers/ln2_b": (p + "layer_norm2.bias", *ident()),
        "layers/wq": (p + "self_attn.q_proj.weight", *heads_in()),
        "layers/bq": (p + "self_attn.q_proj.bias", *heads_bias()),
        "layers/wk": (p + "self_attn.k_proj.weight", *heads_in()),
        "layers/bk": (p + "self_attn.k_proj.bias", *heads_bias()),
        "layers/wv": (p + "self_attn.v_proj.weight", *heads_in()),
        "layers/bv": (p + "self_attn.v_proj.bias", *heads_bias()),
        "layers/wo": (p + "self_attn.out_proj.weight", lambda a: a.T.reshape(H, dh, Dv),
                      lambda a: a.reshape(H * dh, Dv).T),
        "layers/bo": (p + "self_attn.out_proj.bias", *ident()),
        "layers/fc1": (p + "mlp.fc1.weight", *t()), "layers/b1": (p + "mlp.fc1.bias", *ident()),
        "layers/fc2": (p + "mlp.fc2.weight", *t()), "layers/b2": (p + "mlp.fc2.bias", *ident()),
    }


_PROJECTOR_MAP = {"w1": ("linear_1.weight", True), "b1": ("linear_1.bias", False),
                  "w2": ("linear_2.weight", True), "b2": ("linear_2.bias", False)}


def _text_names(names: list[str]) -> dict[str, str]:
    """{HF text-model name: the name in the files} for the text model's tensors among `names`."""
    out = {}
    for n in names:
        for stored, canon in (("language_model.model.", "model."), ("model.language_model.", "model."),
                              ("language_model.lm_head.", "lm_head."), ("lm_head.", "lm_head.")):
            if n.startswith(stored):
                out[canon + n[len(stored):]] = n
                break
    return out


def load_llava(folder: str, *, mesh=None, **text_overrides):
    """A VisionLanguageModel from a LLaVA checkpoint folder (config.json + safetensors)."""
    from rlpt.models.vision import VisionLanguageModel  # on use: cycle with rlpt.models.vision

    cfg = config_from_llava(folder, **text_overrides)
    files = hf._weight_files(folder)
    names = sorted(files)
    params = {"text": hf.load_params(folder, cfg.text, mesh, stored=_text_names(names))}
    vision_names = {_VISION.sub("", n): n for n in names if _VISION.match(n)}
    projector_names = {_PROJECTOR.sub("", n): n for n in names if _PROJECTOR.match(n)}
    other = [n for n in names if not (_VISION.match(n) or _PROJECTOR.match(n)) and n not in _text_names(names).values()
             and not n.endswith(hf.IGNORED_SUFFIXES)]
    if other:
        raise CheckpointError(f"{files[other[0]]}: unexpected tensor {other[0]!r} for a LLaVA checkpoint")
    shapes, vc = vlm_param_shapes(cfg), cfg.vision
    dtype = np.dtype(jnp.dtype(cfg.text.pdtype))

    def read(table: dict[str, str], name: str, shape, where: str):
        if name not in table:
            raise CheckpointError(f"{folder}: missing tensor {where}{name!r}")
        return hf._read(files, table[name], shape, dtype)

    used = set()
    flat, vision_shapes = {}, hf._flat_keys(shapes["vision"])
    for key, (tmpl, to_rlpt, to_hf) in _vision_map(vc).items():
        shape = vision_shapes[key]
        per = shape[1:] if key.startswith("layers/") else shape
        hf_shape = to_hf(np.empty(per, np.int8)).shape
        if key.startswith("layers/"):
            arrs = []
            for i in range(vc.num_layers):
                used.add(tmpl.format(i=i))
                arrs.append(to_rlpt(read(vision_names, tmpl.format(i=i), hf_shape, "vision_tower.")))
            flat[key] = np.stack(arrs)
        else:
            used.add(tmpl)
            flat[key] = to_rlpt(read(vision_names, tmpl, hf_shape, "vision_tower."))
    extra = sorted(n for n in vision_names if n not in used and not n.startswith("head."))
    if extra:
        raise CheckpointError(f"{folder}: unexpected vision tower tensor {vision_names[extra[0]]!r} (the config has "
                              f"{vc.num_layers} layers)")
    proj = {}
    for key, shape in shapes["projector"].items():
        name, transpose = _PROJECTOR_MAP[key]
        hf_shape = shape[::-1] if transpose else shape
        arr = read(projector_names, name, hf_shape, "multi_modal_projector.")
        proj[key] = arr.T if transpose else arr
    params["vision"] = jax.tree.map(jnp.asarray, hf.nest(flat))
    params["projector"] = jax.tree.map(jnp.asarray, proj)
    hf._HANDLES.clear()
    model = VisionLanguageModel(cfg, params)
    return model.placed(mesh) if mesh is not None else model


def config_to_llava(cfg: VLMConfig) -> dict:
    vc = cfg.vision
    text = hf.config_to_hf(cfg.text)
    return {
        "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
        "image_token_index": vc.image_token_id, "image_seq_length": vc.tokens_per_image,
        "projector_hidden_act": "gelu", "vision_feature_select_strategy": vc.select_strategy,
        "vision_feature_layer": vc.feature_layer, "multimodal_projector_bias": vc.projector_bias,
        "tie_word_embeddings": cfg.text.tie_embeddings, "dtype": cfg.text.param_dtype,
        "text_config": text,
        "vision_config": {"model_type": "siglip_vision_model", "hidden_act": "gelu_pytorch_tanh",
                          "image_size": vc.image_size, "patch_size": vc.patch_size, "num_channels": vc.num_channels,
                          "hidden_size": vc.hidden_size, "intermediate_size": vc.intermediate_size,
                          "num_hidden_layers": vc.num_layers, "num_attention_heads": vc.num_heads,
                          "layer_norm_eps": vc.layer_norm_eps, "vision_use_head": False},
    }


def save_llava(model, folder: str, *, dtype: str | None = None, max_shard_bytes: int = 2 << 30) -> None:
    """Write a LLaVA folder (legacy tensor layout) that transformers' LlavaForConditionalGeneration loads."""
    cfg = model.config
    np_dtype = np.dtype(jnp.dtype(dtype or cfg.text.param_dtype))
    text = hf.hf_tensors(model.params["text"], cfg.text, dtype)
    tensors = {"language_model." + n: a for n, a in text.items()}  # model.* and lm_head.weight, legacy prefix
    vision = hf._flat_keys(jax.tree.map(np.asarray, model.params["vision"]))
    for key, (tmpl, _, to_hf) in _vision_map(cfg.vision).items():
        arr = vision[key].astype(np_dtype)
        if key.startswith("layers/"):
            for i in range(cfg.vision.num_layers):
                tensors["vision_tower." + tmpl.format(i=i)] = np.ascontiguousarray(to_hf(arr[i]))
        else:
            tensors["vision_tower." + tmpl] = np.ascontiguousarray(to_hf(arr))
    for key, arr in model.params["projector"].items():
        name, transpose = _PROJECTOR_MAP[key]
        arr = np.asarray(arr).astype(np_dtype)
        tensors["multi_modal_projector." + name] = np.ascontiguousarray(arr.T if transpose else arr)
    if jax.process_index() != 0:
        return
    hf.write_tensors(tensors, folder, max_shard_bytes)
    out = config_to_llava(cfg)
    out["dtype"] = jnp.dtype(dtype or cfg.text.param_dtype).name
    with open(os.path.join(folder, "config.json.tmp"), "w") as f:
        json.dump(out, f, indent=2)
    os.replace(os.path.join(folder, "config.json.tmp"), os.path.join(folder, "config.json"))

