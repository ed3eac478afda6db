"""LoRA adapters on the stacked projection weights: only the adapters train; merge for export."""
import jax
import jax.numpy as jnp

from rlpt.config.schema import LoraConfig

# Each target: (input dims, output dims) split of its (layers, ...) weight shape.
_SPLIT = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "w_gate": 1, "w_up": 1, "w_down": 1}


def init_lora(base: dict, cfg: LoraConfig, rng) -> dict:
    """Adapters {"layers": {name: {"a": (L, in, r), "b": (L, r, out)}}}; b starts at zero (no change)."""
    out = {}
    keys = jax.random.split(rng, len(cfg.targets))
    for key, name in zip(keys, cfg.targets):
        if name not in _SPLIT:
            raise ValueError(f"lora.targets: unknown module {name!r}; known: {sorted(_SPLIT)}")
        w = base["layers"][name]
        n_in = _SPLIT[name]
        fan_in = int(jnp.prod(jnp.array(w.shape[1:1 + n_in])))
        fan_out = int(jnp.prod(jnp.array(w.shape[1 + n_in:])))
        a = jax.random.normal(key, (w.shape[0], fan_in, cfg.rank), jnp.float32) / jnp.sqrt(fan_in)
        out[name] = {"a": a.astype(w.dtype), "b": jnp.zeros((w.shape[0], cfg.rank, fan_out), w.dtype)}
    return {"layers": out}


def lora_axes(cfg: LoraConfig) -> dict:
    return {"layers": {n: {"a": ("layers", None, "lora_rank"), "b": ("layers", "lora_rank", None)}
                       for n in cfg.targets}}


def merge_lora(base: dict, adapters: dict, cfg: LoraConfig) -> dict:
    """base + (alpha / rank) * A @ B reshaped onto each target; a pure function, differentiable in adapters."""
    scale = cfg.alpha / cfg.rank
    layers = dict(base["layers"])
    for name, ab in adapters["layers"].items():
        w = layers[name]
        delta = jnp.einsum("lir,lro->lio", ab["a"].astype(jnp.float32), ab["b"].astype(jnp.float32))
        layers[name] = (w.astype(jnp.float32) + scale * delta.reshape(w.shape)).astype(w.dtype)
    return dict(base, layers=layers)
