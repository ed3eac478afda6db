"""Long-context memory: ring attention gradient per device vs single-device blockwise, and max T per budget.

Everything comes from XLA's compiled memory analysis (nothing runs), on fake CPU devices:
  1. temp memory of d(loss)/d(q, k, v) at T = --seq: ring over 8 devices (per device) vs blockwise on one;
  2. the largest T whose per-device footprint (arguments + outputs + temp) fits --budget-mib for 1, 2, 4, 8
     devices, found from an affine fit of footprint(T) and checked by compiling at the answer.
Usage: python scripts/bench/long_context.py [--seq 8192] [--budget-mib 512]
The last line is the JSON summary.
"""
import os

_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from rlpt.kernels.blockwise import blockwise_attention  # noqa: E402
from rlpt.kernels.ring import make_ring_attention  # noqa: E402

MiB = 2 ** 20


def grad_fn(attn):
    """d/d(q, k, v) of a scalar loss of attention (B, T, H, D) -> grads with the inputs' shapes."""
    def loss(q, k, v, pos, seg):
        out, _ = attn(q, k, v, pos, pos, seg, seg)
        return jnp.sum(jnp.square(out.astype(jnp.float32)))
    return jax.grad(loss, argnums=(0, 1, 2))


def memory(n_devices, T, shape, block):
    """Compiled per-device memory (bytes) of the attention gradient: ring over n devices; blockwise if 0."""
    H, KV, D, dtype = shape
    sd = jax.ShapeDtypeStruct
    if n_devices == 0:
        fn = grad_fn(lambda *a: blockwise_attention(*a, block_q=block, block_k=block))
        args = [sd((1, T, H, D), dtype), sd((1, T, KV, D), dtype), sd((1, T, KV, D), dtype),
                sd((1, T), jnp.int32), sd((1, T), jnp.int32)]
        m = jax.jit(fn).lower(*args).compile().memory_analysis()
    else:
        mesh = jax.make_mesh((n_devices,), ("seq",), axis_types=(AxisType.Explicit,),
                             devices=jax.devices()[:n_devices])
        x, ids = NamedSharding(mesh, P(None, "seq", None, None)), NamedSharding(mesh, P(None, "seq"))
        args = [sd((1, T, H, D), dtype, sharding=x), sd((1, T, KV, D), dtype, sharding=x),
                sd((1, T, KV, D), dtype, sharding=x), sd((1, T), jnp.int32, sharding=ids),
                sd((1, T), jnp.int32, sharding=ids)]
        with jax.set_mesh(mesh):
            fn = grad_fn(make_ring_attention(mesh, "seq", block_q=block, block_k=block))
            m = jax.jit(fn).lower(*args).compile().memory_analysis()
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    return {"temp": m.temp_size_in_bytes, "total": total}


def max_seq_len(n, budget, shape, block):
    """Largest T (a multiple of 2 * n * block, so zigzag halves are whole blocks) whose footprint fits."""
    g = 2 * n * block
    t1, t2 = 8 * g, 32 * g
    m1, m2 = memory(n, t1, shape, block)["total"], memory(n, t2, shape, block)["total"]
    slope = (m2 - m1) / (t2 - t1)
    T = max(g, int((budget - (m1 - slope * t1)) / slope) // g * g)
    while T > g and memory(n, T, shape, block)["total"] > budget:
        T -= g
    while memory(n, T + g, shape, block)["total"] <= budget:
        T += g
    return T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--budget-mib", type=float, default=512.0)
    ap.add_argument("--block", type=int, default=128)
    args = ap.parse_args()
    # Llama-style GQA in bf16 (8 query heads over 2 kv heads, head dim 128); f32 MHA reported alongside.
    shape = (8, 2, 128, jnp.bfloat16)
    f32_mha = (8, 8, 128, jnp.float32)
    ring = memory(8, args.seq, shape, args.block)["temp"] / MiB
    single = memory(0, args.seq, shape, args.block)["temp"] / MiB
    ring_f32 = memory(8, args.seq, f32_mha, args.block)["temp"] / MiB
    single_f32 = memory(0, args.seq, f32_mha, args.block)["temp"] / MiB
    print(f"T={args.seq} grad temp per device, bf16 GQA 8/2 heads D=128: ring x8 {ring:.1f} MiB, "
          f"blockwise x1 {single:.1f} MiB, ring/blockwise {ring / single:.3f} (goal <= 0.167)")
    print(f"T={args.seq} grad temp per device, f32 MHA 8 heads D=128: ring x8 {ring_f32:.1f} MiB, "
          f"blockwise x1 {single_f32:.1f} MiB, ring/blockwise {ring_f32 / single_f32:.3f}")
    budget = args.budget_mib * MiB
    t_max = {n: max_seq_len(n, budget, shape, args.block) for n in (1, 2, 4, 8)}
    for n, T in t_max.items():
        print(f"devices={n}: largest T within {args.budget_mib:.0f} MiB/device = {T} "
              f"({T / t_max[1]:.2f}x of 1 device, linear {n}x)")
    growth = min(t_max[n] / (n * t_max[1]) for n in (2, 4, 8))
    print(json.dumps({
        "benchmark": "long_context_ring_memory", "ours": round(ring, 2), "peer": round(single, 2),
        "unit": f"MiB temp per device, attention grad at T={args.seq} (ours: ring x8; peer: blockwise x1)",
        "ratio": round(single / ring, 2), "goal": "ratio >= 6 (ring <= 1/6) and T_max growth >= 0.9x linear",
        "ring_over_blockwise": round(ring / single, 4),
        "f32_mha_ring_over_blockwise": round(ring_f32 / single_f32, 4),
        "t_max": t_max, "budget_mib": args.budget_mib, "t_max_growth_vs_linear": round(growth, 3),
        "met": bool(ring / single <= 1 / 6 and growth >= 0.9)}))


if __name__ == "__main__":
    main()
