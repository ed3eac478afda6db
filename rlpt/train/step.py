"""The one pure train step: micro-batch gradient accumulation, clipping, update; jitted in one place."""
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from rlpt import runtime
from rlpt.models.ops import target_platform
from rlpt.train.state import TrainState

# loss_fn(params, frozen, micro_batch, rng) -> (loss_sum, weight, metrics): a sum over tokens (or
# sequences) and its count, so accumulation over micro-batches equals the large-batch step exactly.
LossFn = Callable[..., tuple[jax.Array, jax.Array, dict]]


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation,
                    params_fn: Callable | None = None):
    """Build train_step(state, batch) -> (state, metrics).

    batch leaves are (A, b, ...): A micro-batches of b rows, scanned in order. The loss is
    sum(loss_sum) / sum(weight) over all A micro-batches. params_fn(trainable, frozen) gives the model
    parameters (e.g. LoRA merge); by default the trainable params are the model.
    """
    def micro(params, frozen, mb, rng):
        full = params if params_fn is None else params_fn(params, frozen)
        return loss_fn(full, frozen, mb, rng)

    grad_fn = jax.value_and_grad(micro, has_aux=True)

    def train_step(state: TrainState, batch) -> tuple[TrainState, dict]:
        rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        num_micro = jax.tree.leaves(batch)[0].shape[0]
        zeros = jax.tree.map(jnp.zeros_like, state.params)

        def body(carry, xs):
            gsum, lsum, wsum = carry
            mb, i = xs
            (loss_sum, (weight, metrics)), grads = grad_fn(state.params, state.frozen, mb,
                                                          jax.random.fold_in(rng, i))
            gsum = jax.tree.map(jnp.add, gsum, grads)
            return (gsum, lsum + loss_sum, wsum + weight), metrics

        (gsum, lsum, wsum), metrics = jax.lax.scan(
            body, (zeros, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)),
            (batch, jnp.arange(num_micro)))
        denom = jnp.maximum(wsum, 1.0)
        grads = jax.tree.map(lambda g: g / denom, gsum)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        out = {k: jnp.sum(v) for k, v in metrics.items()}
        out |= {"loss": lsum / denom, "grad_norm": optax.tree.norm(grads), "tokens": wsum}
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), out

    return train_step


def _wrap_loss(loss_fn):
    def wrapped(params, frozen, mb, rng):
        loss_sum, weight, metrics = loss_fn(params, frozen, mb, rng)
        return loss_sum, (weight, metrics)
    return wrapped


def build_train_step(loss_fn: LossFn, optimizer, *, state_shardings=None, batch_shardings=None,
                     params_fn=None, donate: bool = True, compiler_options="auto", compute_dtype: str = "float32"):
    """jax.jit(train_step) with in/out shardings and state donation: the single jit boundary.

    compiler_options: XLA options for this jit; "auto" takes `rlpt.runtime.compiler_options("train",
    compute_dtype, platform=target_platform())` (the YNNPACK dot library for float32 compute when compiling for
    CPU; nothing under `compiling_for("tpu")`), None compiles with XLA's defaults.
    compute_dtype: the model's compute dtype (`ModelConfig.compute_dtype`), for "auto".
    """
    step = make_train_step(_wrap_loss(loss_fn), optimizer, params_fn)
    if compiler_options == "auto":
        compiler_options = runtime.compiler_options("train", compute_dtype, platform=target_platform())
    kwargs = {"compiler_options": compiler_options} if compiler_options else {}
    if state_shardings is not None:
        kwargs["in_shardings"] = (state_shardings, batch_shardings)
        kwargs["out_shardings"] = (state_shardings, None)
    return jax.jit(step, donate_argnums=(0,) if donate else (), **kwargs)
