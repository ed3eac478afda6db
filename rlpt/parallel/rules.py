"""Logical-axis rules: one table mapping the model's logical axis names onto mesh axes."""
import contextlib
import contextvars
import logging
import sys

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
    # the vision tower (rlpt.models.vision): its flattened patch, its patch positions, the projector's input
    ("patch", None),
    ("patches", None),
    ("vision_embed", "fsdp"),
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
    dimension; other dimensions stay replicated (e.g. 2 KV heads on a tensor axis of 4). Inside
    `recording_unsplit` every such fallback that leaves the array whole on a mesh axis is recorded.
    """
    spec, unsplit = _resolve(names, shape, mesh, rules)
    if unsplit:
        _record(names, shape, spec, unsplit)
    return spec


def _resolve(names, shape, mesh, rules) -> tuple[P, list[dict]]:
    """(the spec, the dimensions whose rule named a mesh axis that their size does not divide and that no other
    dimension took: the array is whole on that axis)."""
    table = dict(active_rules() if rules is None else rules)
    used: set[str] = set()
    spec, dropped = [], []
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
                    dropped.append({"dim": i, "logical": name, "dim_size": int(shape[i]), "axis": ax,
                                    "axis_size": int(mesh.shape[ax]), "split": int(size)})
                    continue
            keep.append(ax)
        used.update(keep)
        spec.append(None if not keep else (keep[0] if len(keep) == 1 else tuple(keep)))
    # A later dimension may take an axis an earlier one could not (the head_dim fallback): then it is split.
    return P(*spec), [d for d in dropped if d["axis"] not in used]


_UNSPLIT = contextvars.ContextVar("rlpt_unsplit", default=None)


@contextlib.contextmanager
def recording_unsplit():
    """Collect, inside the block, every `logical_spec` / `constrain` whose array stays whole on a mesh axis
    because its dimension's size does not divide over it (a vocabulary, a row count, KV heads). Yields the list:
    {"names", "shape", "spec", "unsplit": [{"dim", "logical", "dim_size", "axis", "axis_size", "split"}], "dtype"
    and "where" (for `constrain`: the value's dtype and the function that constrained it; else None)}.

    The rehearsal (rlpt.plan) reads it; traces that jit's cache answers are not re-run, so clear JAX's caches
    before lowering under it."""
    records: list[dict] = []
    token = _UNSPLIT.set(records)
    try:
        yield records
    finally:
        _UNSPLIT.reset(token)


def _record(names, shape, spec, unsplit, dtype=None, where=None) -> None:
    records = _UNSPLIT.get()
    if records is not None:
        records.append({"names": tuple(names), "shape": tuple(int(d) for d in shape), "spec": spec,
                        "unsplit": unsplit, "dtype": None if dtype is None else str(dtype), "where": where})


def _caller() -> str:
    """module.function of the first frame outside this module and JAX (what called `constrain`)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("jax", __name__)):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname.split('.<locals>')[0]}"


def axis_split(name: str, mesh) -> int:
    """How many ways the active rules split logical axis `name` on `mesh` when its size divides (the product of
    the sizes of its mesh axes that the mesh has; 1 with no mesh)."""
    if mesh is None:
        return 1
    axes = dict(active_rules()).get(name)
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    size = 1
    for ax in axes:
        size *= mesh.shape.get(ax, 1)
    return size


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
    spec, unsplit = _resolve(names, x.shape, mesh, None)
    if unsplit and _UNSPLIT.get() is not None:
        _record(names, x.shape, spec, unsplit, x.dtype, _caller())
    return jax.lax.with_sharding_constraint(x, spec)
