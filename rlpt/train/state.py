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
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params),
                      rng=jax.random.key_data(jax.random.key(seed)), frozen=frozen or {})
