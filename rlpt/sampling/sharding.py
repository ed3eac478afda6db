"""Placement for sampling: the KV cache's logical axes, and resharding weights from a trainer mesh."""
import jax

from rlpt.models.transformer import param_axes
from rlpt.parallel.rules import constrain, named_sharding

CACHE_AXES = {
    "k": ("batch", "act_kv_heads", "cache_seq", "act_head_dim"),  # each layer's buffer
    "v": ("batch", "act_kv_heads", "cache_seq", "act_head_dim"),
    "positions": ("batch", "cache_seq"),
    "segment_ids": ("batch", "cache_seq"),
    "index": ("batch",),
}


def constrain_cache(cache: dict) -> dict:
    """Rows over the data axes, KV heads over tensor (where they divide) under the active mesh; else a no-op."""
    return {name: jax.tree.map(lambda x, n=name: constrain(x, CACHE_AXES[n]), xs) for name, xs in cache.items()}


def shard_params(params, cfg, mesh):
    """Copy a parameter pytree onto `mesh` with the model's logical-axis shardings.

    Works from any placement (one device, or a trainer mesh with other axes or devices): this is the weight
    sync from trainer to sampler. On the same mesh with the same rules it moves nothing.
    """
    axes = param_axes(cfg)
    shardings = jax.tree.map(lambda names, x: named_sharding(mesh, names, x.shape), axes, params,
                             is_leaf=lambda x: isinstance(x, tuple))
    return jax.device_put(params, shardings)
