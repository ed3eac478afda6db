"""Logical-axis rules: one table mapping the model's logical axis names onto mesh axes."""
import contextlib
import contextvars
import logging

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

log = logging.getLogger(__name__)

# Parameters use the plain names; activations use act_* names so that, e.g., the embedding dimension of a
# weight is FSDP-sharded while the embedding dimension of an activation stays whole.
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", ("data", "fsdp")),
    ("act_seq", "seq"),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("act_head_dim", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    # a fallback: a weight's head_dim takes `tensor` only when its heads / kv_heads dimension (before it) could not
    # (14 heads on tensor 4), instead of leaving the weight and its optimizer moments whole on every tensor device
    ("head_dim", "tensor"),
    ("qk_norm_dim", None),
    ("layers", None),
    ("norm", None),
    ("lora_rank", None),
    ("cache_seq", None),
    ("scalar", None),
)

_RULES = contextvars.ContextVar("rlpt_axis_rules", default=None)


@contextlib.contextmanager
def axis_rules(rules):
    """Make `rules` the active table for `logical_spec` and `constrain` inside the block."""
    token = _RULES.set(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in rules))
    try:
        yield
    finally:
        _RULES.reset(token)


def active_rules():
    rules = _RULES.get()
    return DEFAULT_RULES if rules is None else rules


def logical_spec(names, shape=None, mesh=None, rules=None) -> P:
    """PartitionSpec for a tuple of logical names under the rules table.

    A mesh axis is used at most once per array, and (given `shape` and `mesh`) only where it divides the
    dimension; other dimensions stay replicated (e.g. 2 KV heads on a tensor axis of 4).
    """
    table = dict(active_rules() if rules is None else rules)
    used: set[str] = set()
    spec = []
    for i, name in enumerate(names):
        if name is not None and name not in table:
            raise KeyError(f"logical axis {name!r} has no rule; known: {sorted(table)}")
        axes = table.get(name) if name is not None else None
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        keep = []
        for ax in axes:
            if ax in used:
                continue
            if mesh is not None:
                if ax not in mesh.shape or mesh.shape[ax] == 1:
                    continue
                size = mesh.shape[ax]
                for k in keep:
                    size *= mesh.shape[k]
                if shape is not None and shape[i] % size:
                    continue
            keep.append(ax)
        used.update(keep)
        spec.append(None if not keep else (keep[0] if len(keep) == 1 else tuple(keep)))
    return P(*spec)


def named_sharding(mesh, names, shape) -> NamedSharding:
    return NamedSharding(mesh, logical_spec(names, shape, mesh))


def current_mesh():
    """The mesh set with `jax.set_mesh`, or None when there is none (plain single-device call)."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh is None or mesh.empty else mesh


def constrain(x, names):
    """Constrain an activation to the sharding its logical names give under the active mesh.

    Applied on every backend (CPU included) whenever a mesh is active, so sharding bugs surface in tests.
    """
    mesh = current_mesh()
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, logical_spec(names, x.shape, mesh))
