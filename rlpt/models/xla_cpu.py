"""Two tools for steering XLA:CPU's fusion and layout choices where a measured profile shows them costly."""
import jax
import jax.numpy as jnp


def on_cpu() -> bool:
    """The layout work-arounds answer XLA:CPU's choices; other backends compile the plain forms."""
    return jax.default_backend() == "cpu"


def materialized(fn, again):
    """fn() (an array or a pytree of them) computed into its own buffers: the body of a while loop of 1 trip (2
    when the runtime bool `again` holds; the same values), which XLA cannot fold into its neighbours. An
    optimization barrier does not do it on CPU (it is expanded before fusion) and a small conditional becomes a
    select. Reach for it only where a measured fusion or layout choice of XLA:CPU is the problem."""
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn))
    trips = 1 + again.astype(jnp.int32)
    return jax.lax.while_loop(lambda c: c[0] < trips, lambda c: (c[0] + 1, fn()), (jnp.zeros((), jnp.int32), zeros))[1]
