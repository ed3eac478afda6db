"""LoRA adapters on the stacked projection weights: only the adapters train; the forward pass applies them
(`rlpt.models.transformer.LoraWeight`), and they are merged into the weights only for the sampler and export."""
import dataclasses
import math

import jax
import jax.numpy as jnp

from rlpt.config.schema import LoraConfig
from rlpt.models.transformer import LoraWeight, merged_params

# Each target: (input dims, output dims) split of its (layers, ...) weight shape.
_SPLIT = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "w_gate": 1, "w_up": 1, "w_down": 1, "fc1": 1, "fc2": 1}
# The logical axes of A's input and B's output: those of the target's first input and first output axis
# (`param_axes`), so the adapters shard like the weight they adapt (A over fsdp, B over tensor by default).
_AXES = {"wq": ("embed", "heads"), "wk": ("embed", "kv_heads"), "wv": ("embed", "kv_heads"),
         "wo": ("heads", "embed"), "w_gate": ("embed", "mlp"), "w_up": ("embed", "mlp"), "w_down": ("mlp", "embed"),
         "fc1": ("embed", "mlp"), "fc2": ("mlp", "embed")}  # fc1, fc2: the vision tower's MLP
VISION_TARGETS = ("wq", "wk", "wv", "wo", "fc1", "fc2")


def init_lora(base: dict, cfg: LoraConfig, rng) -> dict:
    """Adapters {"layers": {name: {"a": (L, in, r), "b": (L, r, out)}}}; b starts at zero (no change)."""
    out = {}
    keys = jax.random.split(rng, len(cfg.targets))
    for key, name in zip(keys, cfg.targets):
        if name not in _SPLIT:
            raise ValueError(f"lora.targets: unknown module {name!r}; known: {sorted(_SPLIT)}")
        w = base["layers"][name]
        n_in = _SPLIT[name]
        fan_in, fan_out = math.prod(w.shape[1:1 + n_in]), math.prod(w.shape[1 + n_in:])
        a = jax.random.normal(key, (w.shape[0], fan_in, cfg.rank), jnp.float32) / jnp.sqrt(fan_in)
        out[name] = {"a": a.astype(w.dtype), "b": jnp.zeros((w.shape[0], cfg.rank, fan_out), w.dtype)}
    return {"layers": out}


def lora_axes(cfg: LoraConfig) -> dict:
    """Logical axis names of `init_lora`'s adapters (the same tree structure)."""
    return {"layers": {n: {"a": ("layers", _AXES[n][0], "lora_rank"), "b": ("layers", "lora_rank", _AXES[n][1])}
                       for n in cfg.targets}}


def lora_params(base: dict, adapters: dict, cfg: LoraConfig) -> dict:
    """The model's parameters with each target a `LoraWeight` of its frozen base and adapters: `forward` then
    computes x @ W + (alpha / rank) * (x @ A) @ B; nothing of W's size is built. Differentiable in adapters."""
    layers = dict(base["layers"])
    for name, ab in adapters["layers"].items():
        w = layers[name]
        n_in = _SPLIT[name]
        a = ab["a"].reshape(*w.shape[:1 + n_in], ab["a"].shape[-1])  # (L, in..., r)
        b = ab["b"].reshape(w.shape[0], ab["b"].shape[1], *w.shape[1 + n_in:])  # (L, r, out...)
        layers[name] = LoraWeight(w, a, b, cfg.alpha / cfg.rank)
    return dict(base, layers=layers)


def merge_lora(base: dict, adapters: dict, cfg: LoraConfig) -> dict:
    """base + (alpha / rank) * A @ B reshaped onto each target (added in f32, in the base's dtype): the plain
    parameters of the adapted model, for export and the sampler. A pure function, differentiable in adapters."""
    return merged_params(lora_params(base, adapters, cfg))


def tower_lora(cfg: LoraConfig) -> LoraConfig:
    """The LoRA config of the vision tower's adapters: lora.vision_targets as the targets."""
    bad = [t for t in cfg.vision_targets if t not in VISION_TARGETS]
    if bad:
        raise ValueError(f"lora.vision_targets: unknown tower module {bad[0]!r}; known: {list(VISION_TARGETS)}")
    return dataclasses.replace(cfg, targets=list(cfg.vision_targets))


def vlm_frozen(params: dict, cfg: LoraConfig, train_tower: bool) -> dict:
    """`vlm_parts`' frozen part alone (no adapters initialised): the weights under adapters, a frozen tower."""
    if cfg.vision_targets and (cfg.rank == 0 or not train_tower):
        raise ValueError(f"lora.vision_targets={list(cfg.vision_targets)} needs lora.rank > 0 (it is {cfg.rank}) "
                         f"and model.vision.train=true (it is {train_tower})")
    keys = (["text"] if cfg.rank > 0 else []) + (["vision"] if cfg.vision_targets or not train_tower else [])
    return {k: params[k] for k in keys}


def vlm_parts(params: dict, cfg: LoraConfig, train_tower: bool, rng) -> tuple[dict, dict]:
    """(trainable, frozen) parts of a vision-language model's {"text", "vision", "projector"} parameters:
    - the decoder's LoRA adapters (lora.rank > 0; its weights frozen), else its weights;
    - the tower's adapters on lora.vision_targets (its weights frozen), else its weights, or nothing with
      model.vision.train=false (frozen: no gradient, no optimizer state, no weight decay);
    - the projector, always trained."""
    frozen = vlm_frozen(params, cfg, train_tower)
    text_rng, tower_rng = jax.random.split(rng)
    trainable = {"projector": params["projector"]}
    trainable["text"] = init_lora(params["text"], cfg, text_rng) if cfg.rank > 0 else params["text"]
    if cfg.vision_targets:
        trainable["vision"] = init_lora(params["vision"], tower_lora(cfg), tower_rng)
    elif train_tower:
        trainable["vision"] = params["vision"]
    return trainable, frozen


def vlm_parts_axes(cfg: LoraConfig, axes: dict, trainable_keys) -> dict:
    """Logical axis names of `vlm_parts`' trainable tree, from the VLM's parameter axes (`vlm_param_axes`)."""
    out = dict(axes)
    if cfg.rank > 0:
        out["text"] = lora_axes(cfg)
    if cfg.vision_targets:
        out["vision"] = lora_axes(tower_lora(cfg))
    return {k: out[k] for k in trainable_keys}


def vlm_join(trainable: dict, frozen: dict, cfg: LoraConfig) -> dict:
    """The VLM's parameters from `vlm_parts`: LoRA targets as `LoraWeight`s (applied in the forward pass)."""
    text = lora_params(frozen["text"], trainable["text"], cfg) if "text" in frozen else trainable["text"]
    if "vision" in trainable and "vision" in frozen:
        vision = lora_params(frozen["vision"], trainable["vision"], tower_lora(cfg))
    else:
        vision = trainable["vision"] if "vision" in trainable else frozen["vision"]
    return {"text": text, "vision": vision, "projector": trainable["projector"]}
