"""Context-parallel attention over a mesh axis: ring attention (K/V rotate by ppermute) and all-gather."""
import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from rlpt.kernels.blockwise import (
    BlockConfig,
    attend_blocks,
    backward_blocks,
    block_sizes,
    blockwise_vjp,
    finalize_state,
    group_heads,
    init_state,
    match_vma,
    output_delta,
    pad_queries,
    pad_to,
    prepare_backward,
)


@dataclasses.dataclass(frozen=True)
class RingSpec:
    """Static description of one context-parallel attention: mesh, axes and block options."""
    mesh: object  # jax.sharding.Mesh or AbstractMesh
    axis: str
    batch_axes: tuple | None
    head_axis: str | None
    cfg: BlockConfig

    @property
    def size(self):
        return self.mesh.shape[self.axis]

    def specs(self):
        """PartitionSpecs for (B, T, H, D) tensors, (B, T) ids and (B, H, T) lse."""
        b = self.batch_axes
        return P(b, self.axis, self.head_axis, None), P(b, self.axis), P(b, self.head_axis, self.axis)


def _shift(x, spec):
    """Send to the next device on the ring (device i -> i + 1)."""
    n = spec.size
    return lax.ppermute(x, spec.axis, [(i, (i + 1) % n) for i in range(n)])


def _local_inputs(q, k, v, qpos, kpos, qseg, kseg, cfg):
    """Pad this device's chunk to whole blocks (padding is segment 0, so masked); group the query heads."""
    bq, bk = block_sizes(q.shape[1], k.shape[1], cfg)
    q, qpos, qseg = pad_queries(q, qpos, qseg, bq)
    k, kpos, kseg = pad_queries(k, kpos, kseg, bk)
    return group_heads(q, k.shape[2]), qpos, qseg, (k, pad_to(v, k.shape[1]), kpos, kseg)


def _ring_forward_local(q, k, v, qpos, kpos, qseg, kseg, *, spec):
    """Per-device ring forward: q (B, Tl, H, D) stays; K/V and their ids visit every device once, folded into
    one float32 online-softmax state."""
    cfg, Tl = spec.cfg, q.shape[1]
    scale = q.shape[3] ** -0.5 if cfg.scale is None else cfg.scale
    qg, qpos, qseg, kv = _local_inputs(q, k, v, qpos, kpos, qseg, kseg, cfg)
    attend = lambda state, kv: attend_blocks(state, qg, kv[0], kv[1], qpos, kv[2], qseg, kv[3], cfg, scale)

    def step(carry, _):
        state, kv = carry
        nxt = _shift(kv, spec)  # issued first so the transfer overlaps this step's compute
        return (attend(state, kv), nxt), None

    (state, kv), _ = lax.scan(step, (init_state(qg, *kv), kv), length=spec.size - 1)
    out, lse = finalize_state(attend(state, kv))
    return out[:, :Tl].astype(q.dtype), lse[:, :, :Tl]


def _ring_backward_local(q, k, v, qpos, kpos, qseg, kseg, out, lse, dout, dlse, *, spec):
    """Per-device ring backward: K/V rotate as in the forward and their dK/dV accumulators travel with them.

    At step t device i holds K/V block i - t; the accumulator for that block arrives from device i - 1, which
    sent it right after its step t - 1, so that transfer overlaps this step's compute too. After the last
    step one more shift delivers each completed dK/dV to its owner.
    """
    cfg = spec.cfg
    B, Tl, H, D = q.shape
    KV = k.shape[2]
    scale = D ** -0.5 if cfg.scale is None else cfg.scale
    bq, _ = block_sizes(Tl, k.shape[1], cfg)
    delta = output_delta(out, dout, lse, dlse)
    qg, dog, lse_g, delta_g, qpos_p, qseg_p = prepare_backward(q, dout, lse, delta, qpos, qseg, KV, bq)
    _, _, _, kv = _local_inputs(q, k, v, qpos, kpos, qseg, kseg, cfg)

    def grads(acc, kv):
        return backward_blocks(acc, qg, kv[0], kv[1], qpos_p, kv[2], qseg_p, kv[3], lse_g, dog, delta_g, cfg,
                               scale)

    def step(carry, _):
        dq, kv, dk, dv = carry
        nxt = _shift(kv, spec)  # issued first so the transfer overlaps this step's compute
        dq, dk, dv = grads((dq, dk, dv), kv)
        dk, dv = _shift((dk, dv), spec)
        return (dq, nxt, dk, dv), None

    like = (qg, dog, *kv)
    dq0 = match_vma(jnp.zeros(qg.shape, jnp.float32), *like)
    dk0 = match_vma(jnp.zeros(kv[0].shape, jnp.float32), *like)
    (dq, kv, dk, dv), _ = lax.scan(step, (dq0, kv, dk0, dk0), length=spec.size - 1)
    dq, dk, dv = grads((dq, dk, dv), kv)
    dk, dv = _shift((dk, dv), spec)
    dq = dq.reshape(B, -1, H, D)[:, :Tl]
    return dq.astype(q.dtype), dk[:, :k.shape[1]].astype(k.dtype), dv[:, :k.shape[1]].astype(v.dtype)


def _shard_map(fn, spec, in_specs, out_specs):
    return jax.shard_map(partial(fn, spec=spec), mesh=spec.mesh, in_specs=in_specs, out_specs=out_specs)


def _place(spec, arrays):
    """With Explicit mesh axes shard_map requires inputs already laid out as declared: reshard them."""
    explicit = any(t == jax.sharding.AxisType.Explicit for t in spec.mesh.axis_types)
    if not explicit:
        return arrays
    by_rank = dict(zip((4, 2, 3), spec.specs()))
    return [jax.sharding.reshard(a, by_rank[a.ndim]) for a in arrays]


@partial(jax.custom_vjp, nondiff_argnums=(7,))
def _ring(q, k, v, qpos, kpos, qseg, kseg, spec):
    x, ids, lse = spec.specs()
    return _shard_map(_ring_forward_local, spec, (x, x, x, ids, ids, ids, ids), (x, lse))(
        q, k, v, qpos, kpos, qseg, kseg)


def _ring_fwd(q, k, v, qpos, kpos, qseg, kseg, spec):
    out, lse = _ring(q, k, v, qpos, kpos, qseg, kseg, spec)
    return (out, lse), (q, k, v, qpos, kpos, qseg, kseg, out, lse)


def _ring_bwd(spec, res, cts):
    x, ids, lse = spec.specs()
    in_specs = (x, x, x, ids, ids, ids, ids, x, lse, x, lse)
    grads = _shard_map(_ring_backward_local, spec, in_specs, (x, x, x))(*_place(spec, [*res, *cts]))
    return (*grads, None, None, None, None)


_ring.defvjp(_ring_fwd, _ring_bwd)


def _allgather_local(q, k, v, qpos, kpos, qseg, kseg, *, spec):
    """Per-device all-gather attention: gather K/V and their ids, attend locally (autodiff scatters dK/dV)."""
    gather = lambda x: lax.all_gather(x, spec.axis, axis=1, tiled=True)
    return blockwise_vjp(q, gather(k), gather(v), qpos, gather(kpos), qseg, gather(kseg), spec.cfg)


def _allgather(q, k, v, qpos, kpos, qseg, kseg, spec):
    x, ids, lse = spec.specs()
    return _shard_map(_allgather_local, spec, (x, x, x, ids, ids, ids, ids), (x, lse))(
        q, k, v, qpos, kpos, qseg, kseg)


CONTEXT_PARALLEL = {"ring": _ring, "allgather": _allgather}


def _auto_axes(mesh, axis, batch_axes, head_axis, q, k):
    """Resolve "auto" batch / head axes against the mesh and the shapes; raise on an unusable `axis`."""
    if axis not in mesh.axis_names:
        raise ValueError(f"mesh has no axis {axis!r} for context-parallel attention; axes: {mesh.axis_names}")
    B, T, H, _ = q.shape
    if T % mesh.shape[axis]:
        raise ValueError(f"sequence length {T} not divisible by mesh axis {axis!r} "
                         f"of size {mesh.shape[axis]}")
    if batch_axes == "auto":
        names = tuple(a for a in ("data", "fsdp") if a in mesh.axis_names and mesh.shape[a] > 1)
        size = 1
        for a in names:
            size *= mesh.shape[a]
        batch_axes = names if names and B % size == 0 else None
    if head_axis == "auto":
        n = mesh.shape.get("tensor", 1)
        head_axis = "tensor" if n > 1 and H % n == 0 and k.shape[2] % n == 0 else None
    return batch_axes, head_axis


def make_context_parallel_attention(mesh, *, axis="seq", mode="ring", batch_axes="auto", head_axis="auto",
                                    block_q=None, block_k=None):
    """Attention with the reference signature whose sequence dim is sharded over mesh axis `axis`.

    mode: "ring" (K/V rotate by ppermute; O(T / n) memory per device) or "allgather" (K/V gathered; simpler,
    O(T) K/V per device). batch_axes / head_axis: mesh axes for the batch and head dims ("auto": data/fsdp
    and tensor where present and dividing). Blocks default to min(512, T_local / 2) so zigzag halves are whole
    blocks and causal block skipping works. Inputs are (B, T, ...) in the layout the data pipeline chose.
    """
    if mode not in CONTEXT_PARALLEL:
        raise ValueError(f"unknown context-parallel mode {mode!r}; known: {sorted(CONTEXT_PARALLEL)}")

    def attn(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, causal=True,
             sliding_window=None, scale=None, logit_softcap=None):
        b, h = _auto_axes(mesh, axis, batch_axes, head_axis, q, k)
        local = q.shape[1] // mesh.shape[axis]
        default = min(512, max(local // 2, 1))
        cfg = BlockConfig(causal, sliding_window, scale, logit_softcap, block_q or default,
                          block_k or default)
        spec = RingSpec(mesh, axis, b, h, cfg)
        args = _place(spec, [q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids])
        return CONTEXT_PARALLEL[mode](*args, spec)
    return attn


def make_ring_attention(mesh, axis="seq", **kwargs):
    """Ring attention over `axis` of `mesh`; see make_context_parallel_attention."""
    return make_context_parallel_attention(mesh, axis=axis, mode="ring", **kwargs)


def _from_context(mode):
    def attn(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *, axis="seq", **opts):
        mesh = jax.sharding.get_abstract_mesh()
        if mesh.empty:
            raise ValueError(f"attention impl {mode!r} needs a mesh: call it under jax.set_mesh(mesh) with a "
                             f"{axis!r} axis")
        fn = make_context_parallel_attention(mesh, axis=axis, mode=mode,
                                             **{k: opts.pop(k) for k in ("block_q", "block_k") if k in opts})
        return fn(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, **opts)
    attn.__name__ = attn.__qualname__ = f"{mode}_attention"
    attn.__doc__ = (f"{mode} context-parallel attention over the mesh set by jax.set_mesh (axis 'seq' by "
                    "default); same contract as reference_attention.")
    return attn


ring_attention = _from_context("ring")
allgather_attention = _from_context("allgather")
