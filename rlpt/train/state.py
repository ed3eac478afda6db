"""TrainState: one plain pytree holding everything a step needs."""
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class TrainState:
    """step (), params (trainable pytree), opt_state, rng (uint32 key data), frozen (non-trained pytree:
    the base weights under LoRA, a reference policy; {} when none)."""

    step: jax.Array
    params: dict
    opt_state: object
    rng: jax.Array
    frozen: dict = struct.field(default_factory=dict)


def create_state(params, optimizer, seed: int, frozen=None) -> TrainState:
    """A fresh state for params. Params already placed on devices (loaded from a checkpoint, sharded) get the
    new scalars (step, rng, optimizer counts) committed beside them, replicated: left uncommitted, the first
    step's committed outputs change the jitted step's signature and its second call compiles again."""
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params),
                       rng=jax.random.key_data(jax.random.key(seed)), frozen=frozen or {})
    leaves = jax.tree.leaves(params)
    if any(isinstance(x, jax.core.Tracer) for x in leaves):  # traced (jit, eval_shape): placement is the caller's
        return state
    placed = [x for x in leaves if isinstance(x, jax.Array) and x.committed]
    if not placed:
        return state
    where = placed[0].sharding
    if isinstance(where, jax.sharding.NamedSharding):
        where = jax.sharding.NamedSharding(where.mesh, jax.sharding.PartitionSpec())
    elif len(where.device_set) != 1:
        return state

    def commit(x):
        return jax.device_put(x, where) if isinstance(x, jax.Array) and not x.committed else x

    return jax.tree.map(commit, state)
