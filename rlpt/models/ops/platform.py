"""Which platform is being compiled for: the process's backend, or the target of a compile-only rehearsal."""
import contextlib
import contextvars

import jax

# The platform being traced for when it is not this process's backend (a compile-only rehearsal for TPU on a CPU).
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlpt_compile_target", default=None)


def target_platform() -> str:
    """"cpu", "gpu" or "tpu": `compiling_for`'s platform inside it, else the default backend."""
    return _TARGET.get() or jax.default_backend()


def on_cpu() -> bool:
    return target_platform() == "cpu"


@contextlib.contextmanager
def compiling_for(platform: str):
    """Trace for `platform` ("cpu", "tpu", "gpu") instead of the default backend: `model.ops=auto` and the sampler's
    decode layout choose for it."""
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)
