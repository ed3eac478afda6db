"""`LoraWeight`: a frozen weight plus a low-rank adapter, applied in the forward pass by every ops backend."""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp


@functools.partial(jax.tree_util.register_dataclass, data_fields=("base", "a", "b"), meta_fields=("scale",))
@dataclasses.dataclass(frozen=True)
class LoraWeight:
    """A frozen weight plus a low-rank adapter, applied by `dense` as x @ base + scale * (x @ a) @ b.

    base (in..., out...), a (in..., r), b (r, out...) for one layer, or each with the same leading (layers,)
    axis (stacked: `lax.scan` and `layer_list` slice all three). Gradients reach a and b only; nothing of
    base's size is computed in the forward or backward pass."""

    base: jax.Array
    a: jax.Array
    b: jax.Array
    scale: float

    @property
    def dtype(self):
        return self.base.dtype

    def merged(self):
        """base + scale * a @ b, added in f32 and rounded to base's dtype: the weight this stands for."""
        lead = self.a.ndim + self.b.ndim - 2 - self.base.ndim  # 1 when stacked over layers, else 0
        n_in = self.a.ndim - 1 - lead
        shape = self.base.shape
        a = self.a.reshape(*shape[:lead], math.prod(shape[lead:lead + n_in]), -1).astype(jnp.float32)
        b = self.b.reshape(*shape[:lead], self.b.shape[lead], -1).astype(jnp.float32)
        delta = jnp.einsum("...ir,...ro->...io", a, b).reshape(shape)
        return (self.base.astype(jnp.float32) + self.scale * delta).astype(self.base.dtype)


def merged_params(params):
    """params with every `LoraWeight` replaced by its merged weight (export, the sampler's policy)."""
    return jax.tree.map(lambda w: w.merged() if isinstance(w, LoraWeight) else w, params,
                        is_leaf=lambda w: isinstance(w, LoraWeight))


def lora_dense(matmul, frozen_matmul, eq, x, w: LoraWeight, dtype, out_dtype):
    """`dense` of a LoraWeight with a backend's `matmul` and `frozen_matmul`: the frozen product and the rank-r
    path (x @ a rounded to the compute dtype, as any activation), summed in f32 and rounded once. eq's weight
    subscripts list base's input axes first."""
    (xs, ws), out = eq.split("->")[0].split(","), eq.split("->")[1]
    n_in = w.a.ndim - 1
    w_in, w_out = ws[:n_in], ws[n_in:]
    if not set(w_in) <= set(xs) or set(w_out) & set(xs):
        raise ValueError(f"dense({eq!r}): a LoraWeight's {n_in} input axes must lead the weight's subscripts")
    r = next(c for c in "rzyxwvu" if c not in eq)
    rows = "".join(c for c in xs if c not in w_in)
    base = frozen_matmul(eq, x, w.base, dtype, jnp.dtype(jnp.float32))
    xa = matmul(f"{xs},{w_in}{r}->{rows}{r}", x, w.a, dtype, dtype)
    delta = matmul(f"{rows}{r},{r}{w_out}->{out}", xa, w.b, dtype, jnp.dtype(jnp.float32))
    return (base + w.scale * delta).astype(out_dtype)
