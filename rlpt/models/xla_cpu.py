"""Two tools for steering XLA:CPU's fusion and layout choices where a measured profile shows them costly."""
import contextlib
import contextvars

import jax
import jax.numpy as jnp

# The platform being traced for when it is not this process's backend (a compile-only rehearsal for TPU on a CPU).
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlpt_compile_target", default=None)


def on_cpu() -> bool:
    """The layout work-arounds answer XLA:CPU's choices; other backends compile the plain forms."""
    return (_TARGET.get() or jax.default_backend()) == "cpu"


@contextlib.contextmanager
def compiling_for(platform: str):
    """Trace for `platform` ("cpu", "tpu", "gpu") instead of the default backend: on_cpu() answers for it."""
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)


def materialized(fn, again):
    """fn() (an array or a pytree of them) computed into its own buffers: the body of a while loop of 1 trip (2
    when the runtime bool `again` holds; the same values), which XLA cannot fold into its neighbours. An
    optimization barrier does not do it on CPU (it is expanded before fusion) and a small conditional becomes a
    select. Reach for it only where a measured fusion or layout choice of XLA:CPU is the problem."""
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn))
    trips = 1 + again.astype(jnp.int32)
    return jax.lax.while_loop(lambda c: c[0] < trips, lambda c: (c[0] + 1, fn()), (jnp.zeros((), jnp.int32), zeros))[1]
