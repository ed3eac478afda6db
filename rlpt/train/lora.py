"""LoRA adapters on the stacked projection weights: only the adapters train; the forward pass applies them
(`rlpt.models.transformer.LoraWeight`), and they are merged into the weights only for the sampler and export."""
import math

import jax
import jax.numpy as jnp

from rlpt.config.schema import LoraConfig
from rlpt.models.transformer import LoraWeight, merged_params

# Each target: (input dims, output dims) split of its (layers, ...) weight shape.
_SPLIT = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "w_gate": 1, "w_up": 1, "w_down": 1}
# The logical axes of A's input and B's output: those of the target's first input and first output axis
# (`param_axes`), so the adapters shard like the weight they adapt (A over fsdp, B over tensor by default).
_AXES = {"wq": ("embed", "heads"), "wk": ("embed", "kv_heads"), "wv": ("embed", "kv_heads"),
         "wo": ("heads", "embed"), "w_gate": ("embed", "mlp"), "w_up": ("embed", "mlp"), "w_down": ("mlp", "embed")}


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


def vlm_parts(params: dict, cfg: LoraConfig, train_tower: bool, rng) -> tuple[dict, dict]:
    """(trainable, frozen) parts of a vision-language model's {"text", "vision", "projector"} parameters: the
    text model's LoRA adapters (lora.rank > 0; its weights frozen) or its weights, the projector, and the tower
    unless model.vision.train is false (then it is frozen: no gradient, no optimizer state, no weight decay)."""
    trainable, frozen = {"projector": params["projector"]}, {}
    if cfg.rank > 0:
        trainable["text"], frozen["text"] = init_lora(params["text"], cfg, rng), params["text"]
    else:
        trainable["text"] = params["text"]
    (trainable if train_tower else frozen)["vision"] = params["vision"]
    return trainable, frozen


def vlm_join(trainable: dict, frozen: dict, cfg: LoraConfig) -> dict:
    """The VLM's parameters from `vlm_parts`: LoRA targets as `LoraWeight`s (applied in the forward pass)."""
    text = lora_params(frozen["text"], trainable["text"], cfg) if "text" in frozen else trainable["text"]
    vision = trainable["vision"] if "vision" in trainable else frozen["vision"]
    return {"text": text, "vision": vision, "projector": trainable["projector"]}
