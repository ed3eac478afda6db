"""GPU attention speed: Pallas flash vs plain-XLA reference at 8k and 32k tokens, TFLOP/s vs measured peak.

Needs a GPU; without one it says so and exits with status 2 (its last line is still the JSON summary).
Usage: python scripts/bench/gpu_attention.py [--seqs 8192 32768] [--heads 16] [--head-dim 128]
FLOPs count the causal half only: forward 2 * 2 * B * H * T^2 * D / 2, backward 2.5x the forward.
"""
import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from rlpt.kernels.flash import flash_attention  # noqa: E402
from rlpt.kernels.reference import reference_attention  # noqa: E402


def timed(fn, *args, reps=5):
    """Median seconds of a jitted call after one warm-up (compile) call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def matmul_peak(n=8192, dtype=jnp.bfloat16):
    """Measured dense matmul TFLOP/s on this device: the ceiling the attention numbers are compared to."""
    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32).astype(dtype))
    return 2 * n ** 3 / timed(f, a, b, reps=10) / 1e12


def attention_fns(impl, T, H, D):
    """Jitted forward and forward+backward of one implementation on (1, T, H, D) bf16, causal."""
    pos = jnp.arange(T, dtype=jnp.int32)[None]
    seg = jnp.ones((1, T), jnp.int32)
    attn = lambda q, k, v: impl(q, k, v, pos, pos, seg, seg, causal=True)[0]
    fwd = jax.jit(attn)
    loss = lambda q, k, v: jnp.sum(attn(q, k, v).astype(jnp.float32))
    fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    return fwd, fwd_bwd


def measure(impl, T, H, D):
    """(fwd seconds, fwd+bwd seconds), or None where the device ran out of memory."""
    keys = jax.random.split(jax.random.key(T), 3)
    q, k, v = (jax.random.normal(kk, (1, T, H, D), jnp.bfloat16) for kk in keys)
    fwd, fwd_bwd = attention_fns(impl, T, H, D)
    out = []
    for fn in (fwd, fwd_bwd):
        try:
            out.append(timed(fn, q, k, v))
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e) and "out of memory" not in str(e).lower():
                raise
            out.append(None)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()
    if jax.default_backend() != "gpu":
        print(f"gpu_attention: no GPU (JAX backend is {jax.default_backend()!r}); nothing was timed. "
              "Run on a machine with a CUDA GPU and jax[cuda].", file=sys.stderr)
        print(json.dumps({"benchmark": "gpu_attention", "ours": None, "peer": None, "unit": "TFLOP/s fwd+bwd",
                          "ratio": None, "goal": "flash faster than reference at 8k and 32k",
                          "skipped": "no GPU"}))
        sys.exit(2)
    H, D = args.heads, args.head_dim
    peak = matmul_peak()
    print(f"device {jax.devices()[0].device_kind}: measured bf16 matmul peak {peak:.1f} TFLOP/s")
    rows = {}
    for T in args.seqs:
        fwd_flops = 2 * 2 * H * T * T * D / 2
        row = {}
        for name, impl in (("flash", flash_attention), ("reference", reference_attention)):
            f, fb = measure(impl, T, H, D)
            tf = lambda s, flops: None if s is None else flops / s / 1e12
            row[name] = {"fwd_ms": f and f * 1e3, "fwd_bwd_ms": fb and fb * 1e3,
                         "fwd_tflops": tf(f, fwd_flops), "fwd_bwd_tflops": tf(fb, 3.5 * fwd_flops)}
            r = row[name]
            fmt = lambda x: "OOM" if x is None else f"{x:.1f}"
            print(f"T={T} {name:9s} fwd {fmt(r['fwd_ms'])} ms ({fmt(r['fwd_tflops'])} TFLOP/s), fwd+bwd "
                  f"{fmt(r['fwd_bwd_ms'])} ms ({fmt(r['fwd_bwd_tflops'])} TFLOP/s, "
                  f"{fmt(r['fwd_bwd_tflops'] and 100 * r['fwd_bwd_tflops'] / peak)}% of peak)")
        rows[T] = row
    T = max(args.seqs)
    ours, peer = rows[T]["flash"]["fwd_bwd_tflops"], rows[T]["reference"]["fwd_bwd_tflops"]
    print(json.dumps({"benchmark": "gpu_attention", "ours": ours, "peer": peer,
                      "unit": f"TFLOP/s causal fwd+bwd at T={T} (ours: flash, peer: XLA reference)",
                      "ratio": None if not (ours and peer) else ours / peer,
                      "goal": "flash faster than reference at 8k and 32k", "matmul_peak_tflops": peak,
                      "rows": rows}))


if __name__ == "__main__":
    main()
