"""Hugging Face checkpoint interop: config.json + safetensors (sharded or not) to rlpt parameters and back."""
import dataclasses
import json
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from rlpt.models.config import ModelConfig, RopeScaling
from rlpt.models.transformer import param_axes, param_shapes
from rlpt.parallel.distributed import to_host
from rlpt.parallel.rules import named_sharding

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}
# HF buffers that are recomputed, not loaded.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded; the message names the file and tensor."""


def read_config(folder: str) -> tuple[dict, str]:
    """(config.json as a dict, its path)."""
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: missing config.json")
    try:
        with open(path) as f:
            return json.load(f), path
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from e


def config_from_hf(folder: str, **overrides) -> ModelConfig:
    hf, path = read_config(folder)
    return config_from_dict(hf, path, **overrides)


def config_from_dict(hf: dict, path: str, **overrides) -> ModelConfig:
    """The ModelConfig of an HF text-model config dict (`path` names it in errors: a file, or a file's key)."""
    mt = hf.get("model_type")
    if mt not in ARCHITECTURES:
        raise CheckpointError(f"{path}: unsupported model_type {mt!r}; supported: {sorted(ARCHITECTURES)}")
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = rope.pop("rope_theta", hf.get("rope_theta", 10000.0))
    rtype = rope.pop("rope_type", rope.pop("type", "default"))
    known = {f.name for f in dataclasses.fields(RopeScaling)}
    unknown = set(rope) - known
    if unknown:
        raise CheckpointError(f"{path}: unsupported rope parameters {sorted(unknown)} for rope_type {rtype!r}")
    attention_bias = bool(hf.get("attention_bias", False))
    cfg = dict(
        family=mt,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        max_position_embeddings=hf.get("max_position_embeddings", 2048),
        rope_theta=float(theta),
        rope_scaling=RopeScaling(rope_type=rtype, **rope),
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        qkv_bias=True if mt == "qwen2" else attention_bias,
        o_bias=attention_bias if mt != "qwen2" else False,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        qk_norm=mt == "qwen3",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        sliding_window=hf.get("sliding_window") if hf.get("use_sliding_window") else None,
        initializer_range=hf.get("initializer_range", 0.02),
    )
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{path}: hidden_act {hf.get('hidden_act')!r} is not supported (silu only)")
    cfg.update(overrides)
    return ModelConfig(**cfg)


def config_to_hf(cfg: ModelConfig) -> dict:
    rope = {k: v for k, v in dataclasses.asdict(cfg.rope_scaling).items() if v is not None}
    if cfg.rope_scaling.rope_type == "default":
        rope = {"rope_type": "default"}
    rope["rope_theta"] = cfg.rope_theta
    out = {
        "architectures": [ARCHITECTURES[cfg.family]], "model_type": cfg.family,
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim, "hidden_act": "silu", "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_parameters": rope, "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.initializer_range, "dtype": cfg.param_dtype, "use_cache": True,
    }
    if cfg.family == "qwen2":
        if cfg.qkv_bias is False or cfg.o_bias or cfg.qk_norm:
            raise ValueError("qwen2 export needs qkv_bias=True, o_bias=False, qk_norm=False")
    elif cfg.family == "qwen3":
        if not cfg.qk_norm or cfg.qkv_bias != cfg.o_bias:
            raise ValueError("qwen3 export needs qk_norm=True and qkv_bias == o_bias (attention_bias)")
        out["attention_bias"] = cfg.qkv_bias
    else:
        if cfg.qk_norm or cfg.qkv_bias != cfg.o_bias:
            raise ValueError("llama export needs qk_norm=False and qkv_bias == o_bias (attention_bias)")
        out["attention_bias"] = cfg.qkv_bias
        out["mlp_bias"] = cfg.mlp_bias
    if cfg.family in ("qwen2", "qwen3"):
        out["use_sliding_window"] = cfg.sliding_window is not None
        out["sliding_window"] = cfg.sliding_window
    return out


# rlpt leaf -> (HF name template, to_rlpt(hf_array, cfg) , to_hf(rlpt_array, cfg))
def _tensor_map(cfg: ModelConfig) -> dict[str, tuple[str, Callable, Callable]]:
    D, H, KV, Dh = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    ident = (lambda a: a, lambda a: a)
    t = (lambda a: a.T, lambda a: a.T)

    def proj(n):  # (n*Dh, D) <-> (D, n, Dh)
        return (lambda a: a.T.reshape(D, n, Dh), lambda a: a.reshape(D, n * Dh).T)

    def bias(n):
        return (lambda a: a.reshape(n, Dh), lambda a: a.reshape(n * Dh))

    p = "model.layers.{i}."
    m = {
        "embed": ("model.embed_tokens.weight", *ident),
        "final_norm": ("model.norm.weight", *ident),
        "layers/attn_norm": (p + "input_layernorm.weight", *ident),
        "layers/mlp_norm": (p + "post_attention_layernorm.weight", *ident),
        "layers/wq": (p + "self_attn.q_proj.weight", *proj(H)),
        "layers/wk": (p + "self_attn.k_proj.weight", *proj(KV)),
        "layers/wv": (p + "self_attn.v_proj.weight", *proj(KV)),
        "layers/wo": (p + "self_attn.o_proj.weight", lambda a: a.T.reshape(H, Dh, D),
                      lambda a: a.reshape(H * Dh, D).T),
        "layers/w_gate": (p + "mlp.gate_proj.weight", *t),
        "layers/w_up": (p + "mlp.up_proj.weight", *t),
        "layers/w_down": (p + "mlp.down_proj.weight", *t),
        "layers/bq": (p + "self_attn.q_proj.bias", *bias(H)),
        "layers/bk": (p + "self_attn.k_proj.bias", *bias(KV)),
        "layers/bv": (p + "self_attn.v_proj.bias", *bias(KV)),
        "layers/bo": (p + "self_attn.o_proj.bias", *ident),
        "layers/b_gate": (p + "mlp.gate_proj.bias", *ident),
        "layers/b_up": (p + "mlp.up_proj.bias", *ident),
        "layers/b_down": (p + "mlp.down_proj.bias", *ident),
        "layers/q_norm": (p + "self_attn.q_norm.weight", *ident),
        "layers/k_norm": (p + "self_attn.k_norm.weight", *ident),
        "lm_head": ("lm_head.weight", *t),
    }
    return m


def _flat_keys(tree) -> dict[str, object]:
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, tuple))[0]
    return {"/".join(k.key for k in path): leaf for path, leaf in flat}


def _hf_names(cfg: ModelConfig) -> dict[str, list[str]]:
    tmap = _tensor_map(cfg)
    names = {}
    for key in _flat_keys(param_shapes(cfg)):
        tmpl = tmap[key][0]
        names[key] = [tmpl.format(i=i) for i in range(cfg.num_layers)] if key.startswith("layers/") else [tmpl]
    return names


def _weight_files(folder: str) -> dict[str, str]:
    """HF tensor name -> safetensors file path, from the index or the single file."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{index}: invalid index file ({e})") from e
        return {k: os.path.join(folder, v) for k, v in weight_map.items()}
    single = os.path.join(folder, "model.safetensors")
    if not os.path.exists(single):
        raise CheckpointError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    return {k: single for k in _open(single).keys()}


_HANDLES: dict[str, object] = {}


def _open(path: str):
    if path not in _HANDLES:
        if not os.path.exists(path):
            raise CheckpointError(f"{path}: file listed in the index does not exist")
        try:
            _HANDLES[path] = safe_open(path, framework="numpy")
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{path}: not a valid safetensors file ({e})") from e
    return _HANDLES[path]


def _read(files: dict[str, str], name: str, shape: tuple, dtype, stored: dict[str, str] | None = None) -> np.ndarray:
    """Tensor `name` as a numpy array of `shape` and `dtype`; stored: name -> the name in the file (default: same)."""
    path = files[name]
    handle = _open(path)
    name = stored.get(name, name) if stored else name
    try:
        sl = handle.get_slice(name)
        file_dtype, file_shape = sl.get_dtype(), tuple(sl.get_shape())
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot read tensor {name!r} ({e})") from e
    if file_dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {file_dtype}; expected a float type")
    if file_shape != tuple(shape):
        raise CheckpointError(f"{path}: tensor {name!r} has shape {file_shape}; the config expects {tuple(shape)}")
    try:
        arr = handle.get_tensor(name)
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot read tensor {name!r} ({e})") from e
    return arr.astype(dtype)


def load_params(folder: str, cfg: ModelConfig, mesh=None, *, stored: dict[str, str] | None = None) -> dict:
    """Stream tensors from the folder's safetensors into rlpt parameters.

    Each parameter is built with `jax.make_array_from_callback`, so every device reads only the HF tensors
    (one layer at a time) that its shard needs; nothing is staged as a second full copy of the model.
    stored: the text model of a multimodal checkpoint, as {HF text-model name: the name in the files}; only those
    tensors are read (the others are the vision tower's).
    """
    _HANDLES.clear()
    files = _weight_files(folder)
    if stored is not None:
        files = {name: files[s] for name, s in stored.items() if s in files}
    names = _hf_names(cfg)
    expected = {n for ns in names.values() for n in ns}
    present = {n for n in files if not n.endswith(IGNORED_SUFFIXES)}
    if cfg.tie_embeddings:
        present.discard("lm_head.weight")
    for n in sorted(expected - present):
        raise CheckpointError(f"{folder}: missing tensor {n!r} (expected by the {cfg.family} config)")
    for n in sorted(present - expected):
        raise CheckpointError(f"{files[n]}: unexpected tensor {n!r} for the {cfg.family} config")
    tmap, shapes, axes = _tensor_map(cfg), _flat_keys(param_shapes(cfg)), _flat_keys(param_axes(cfg))
    np_dtype = np.dtype(jnp.dtype(cfg.pdtype))
    out = {}
    for key, shape in shapes.items():
        _, to_rlpt, to_hf = tmap[key]
        layered = key.startswith("layers/")
        per_shape = shape[1:] if layered else shape
        hf_shape = to_hf(np.empty(per_shape, np.int8)).shape

        def load_one(i, key=key, to_rlpt=to_rlpt, hf_shape=hf_shape, layered=layered):
            return to_rlpt(_read(files, names[key][i if layered else 0], hf_shape, np_dtype, stored))

        def callback(index, load_one=load_one, layered=layered):
            if not layered:
                return load_one(0)[index]
            layer_range = range(*index[0].indices(cfg.num_layers))
            return np.stack([load_one(i)[index[1:]] for i in layer_range])

        if mesh is None:
            sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        else:
            sharding = named_sharding(mesh, axes[key], shape)
        out[key] = jax.make_array_from_callback(shape, sharding, callback)
    _HANDLES.clear()
    return nest(out)


def nest(flat: dict) -> dict:
    """A nested dict from {"a/b/c": leaf} keys (the inverse of `_flat_keys`)."""
    tree: dict = {}
    for key, leaf in flat.items():
        node = tree
        *parents, name = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[name] = leaf
    return tree


def hf_tensors(params: dict, cfg: ModelConfig, dtype: str | None = None) -> dict[str, np.ndarray]:
    """The decoder's parameters as HF-named host arrays (every process takes part in the gather)."""
    tmap, names = _tensor_map(cfg), _hf_names(cfg)
    np_dtype = np.dtype(jnp.dtype(dtype or cfg.param_dtype))
    tensors: dict[str, np.ndarray] = {}
    for key, arr in _flat_keys(params).items():
        host = to_host(arr).astype(np_dtype)
        to_hf = tmap[key][2]
        if key.startswith("layers/"):
            for i, n in enumerate(names[key]):
                tensors[n] = np.ascontiguousarray(to_hf(host[i]))
        else:
            tensors[names[key][0]] = np.ascontiguousarray(to_hf(host))
    return tensors


def save_params(params: dict, cfg: ModelConfig, folder: str, *, max_shard_bytes: int = 2 << 30,
                dtype: str | None = None) -> None:
    """Write config.json and safetensors (sharded with an index past max_shard_bytes) that HF loads."""
    os.makedirs(folder, exist_ok=True)
    tensors = hf_tensors(params, cfg, dtype)
    if jax.process_index() != 0:
        return
    write_tensors(tensors, folder, max_shard_bytes)
    hf_cfg = config_to_hf(cfg)
    hf_cfg["dtype"] = jnp.dtype(dtype or cfg.param_dtype).name
    _atomic_json(hf_cfg, os.path.join(folder, "config.json"))


def write_tensors(tensors: dict[str, np.ndarray], folder: str, max_shard_bytes: int = 2 << 30) -> None:
    """model.safetensors, or shards of at most max_shard_bytes with model.safetensors.index.json (atomic files)."""
    os.makedirs(folder, exist_ok=True)
    shards, cur, size = [], {}, 0
    for n, a in tensors.items():
        if cur and size + a.nbytes > max_shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = a
        size += a.nbytes
    shards.append(cur)
    meta = {"format": "pt"}
    if len(shards) == 1:
        _atomic_save(shards[0], os.path.join(folder, "model.safetensors"), meta)
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            _atomic_save(shard, os.path.join(folder, fname), meta)
            weight_map.update({n: fname for n in shard})
        total = sum(a.nbytes for a in tensors.values())
        _atomic_json({"metadata": {"total_size": total}, "weight_map": weight_map},
                     os.path.join(folder, "model.safetensors.index.json"))


def _atomic_save(tensors, path, meta):
    save_file(tensors, path + ".tmp", metadata=meta)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path + ".tmp", 0o666 & ~umask)  # safetensors creates the file owner-only; give it open()'s mode
    os.replace(path + ".tmp", path)


def _atomic_json(obj, path):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(path + ".tmp", path)
