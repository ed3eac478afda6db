"""Sampler throughput: rlpt.sampling.generate vs HF transformers `generate` (PyTorch CPU) on the same weights.

Model: Qwen2-style, vocab 8192, hidden 256, 8 layers, 8 query / 2 KV heads (head_dim 32), MLP 1024, QKV bias,
tied embeddings: 9.7M parameters (2.1M of them the embedding). Prompt 32 random tokens, 128 new tokens,
plain sampling (temperature 1, no truncation, no stop ids, every row runs to 128), batch 8 / 32 / 128.
Both sides measured in this process on the same weights (rlpt -> save_pretrained -> AutoModelForCausalLM).
HF runs in float32 and in bfloat16 (weights, compute and KV cache); the faster of the two is the peer. rlpt runs
the same f32 weights at compute_dtype float32 and bfloat16 (bf16 matmuls accumulating in f32, f32 softmax and
sampling, a bf16 KV cache); ratio = the faster rlpt variant / the faster HF variant, and the same-precision
ratios are printed beside it.
PyTorch's thread count is probed first (1 vs its default, short run at batch 8): on a loaded machine its
spinning threads can make it 4x slower, and the peer gets its faster setting.
The matmul floor: the step's weight products alone (every layer's q/k/v, output, gate/up and down, and the
head, in the decode layout and the compute dtype of rlpt's faster variant, at the batch's column count; no
attention, norms or sampling), timed; B / floor is the most tokens/s any decode step doing those products at this
machine's rate for these shapes could reach, and `ratio_at_matmul_floor` is that against the peer: a goal above
it cannot be met on this machine.
Compile time (first call minus a warm call) is reported separately and not counted in tokens/s. A
cache-less JAX loop (full forward over the padded buffer each step) shows what the cache buys (batch 8, and
only --cacheless-new tokens, default 32: shorter sequences flatter the cache-less loop, so this is conservative).
Usage: python scripts/bench/sampler.py [--batches 8,32,128] [--new 128] [--prompt 32] [--repeats 1]
The last stdout line is the JSON summary; ratio = best rlpt / best HF new tokens/s at batch 32 (>1: rlpt faster).
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from rlpt.runtime import tune_malloc  # noqa: E402

# Re-exec once with glibc malloc settings (rlpt/runtime.py): both sides of the comparison run under them.
# RLPT_MALLOC_TUNING=0 measures with glibc defaults.
tune_malloc()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from rlpt.models import Model, ModelConfig, init_model  # noqa: E402
from rlpt.models.ops.xla_cpu_decode import decode_params, project  # noqa: E402
from rlpt.models.transformer import forward  # noqa: E402
from rlpt.plan.programs import body_params  # noqa: E402
from rlpt.sampling import engine, generate  # noqa: E402

CONFIG = ModelConfig(family="qwen2", vocab_size=8192, hidden_size=256, intermediate_size=1024, num_layers=8,
                     num_heads=8, num_kv_heads=2, qkv_bias=True, tie_embeddings=True,
                     max_position_embeddings=1024)


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_rlpt(model, prompts, new, repeats):
    t = time.perf_counter()
    out = generate(model, prompts, new, temperature=1.0, seed=0, keep_state=False)
    first = time.perf_counter() - t
    assert (out.lengths == new).all()
    warm = best_of(lambda: generate(model, prompts, new, temperature=1.0, seed=1, keep_state=False), repeats)
    return len(prompts) * new / warm, max(first - warm, 0.0)


@jax.jit
def decode_products(dparams, x):
    """A decode step's weight products alone, in `decode_logits`' layout: per layer (out, in) @ (in, B) for q/k/v,
    the output, gate/up and down, then the head; chained through a residual so none can be skipped. No attention
    over the cache, no norms, no sampling. Each is decoding's own `project` (f32 accumulation, rounded to the
    compute dtype)."""
    dt = x.dtype
    for lp in dparams["layers"]:
        qkv = project(lp["wqkv"], x, dt)
        x = x + project(lp["wo"], qkv[:lp["wo"].shape[1]], dt)
        gate, up = jnp.split(project(lp["w_gate_up"], x, dt), 2)
        x = x + project(lp["w_down"], gate * up, dt)
    return jnp.sum(project(dparams["head"], x, dt), axis=0)


def decode_weight_count(cfg) -> int:
    """The weights one decode step multiplies by: the layers' matrices and the head (V x D)."""
    return body_params(cfg) + cfg.vocab_size * cfg.hidden_size


def matmul_floor(model, batch, dtype, repeats=9, quant="none"):
    """(seconds, FLOP/s) of `decode_products` at `batch` columns in compute dtype `dtype`: the time one decode
    step spends on its matmuls at the rate this machine multiplies matrices of these shapes, whatever else the
    step does. quant "int8" / "int4": with the sampler's quantized decode layout (`engine.decode_weights`; CPU)."""
    cfg = dataclasses.replace(model.config, compute_dtype=dtype)
    dparams = (decode_params(model.params, cfg) if quant == "none"
               else engine.decode_weights(Model(cfg, model.params), quant=quant).weights)
    x = jnp.ones((cfg.hidden_size, batch), dparams["head"].dtype)
    jax.block_until_ready(decode_products(dparams, x))
    seconds = best_of(lambda: jax.block_until_ready(decode_products(dparams, x)), repeats)
    flops = 2 * batch * decode_weight_count(cfg)
    return seconds, flops / seconds


def bench_hf(folder, prompts, new, repeats, dtype):
    import torch
    import transformers
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    ids = torch.tensor(prompts, dtype=torch.long)
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new, min_new_tokens=new,
                  use_cache=True, pad_token_id=0, eos_token_id=None, attention_mask=torch.ones_like(ids))

    def run():
        with torch.inference_mode():
            out = hf.generate(ids, **kwargs)
        assert out.shape == (len(prompts), ids.shape[1] + new), out.shape

    with torch.inference_mode():  # warm-up (allocator, oneDNN primitives)
        hf.generate(ids, **dict(kwargs, max_new_tokens=4, min_new_tokens=4))
    return len(prompts) * new / best_of(run, repeats)


@functools.partial(jax.jit, static_argnames=("cfg", "prompt_len", "new"))
def cacheless_loop(params, buf, key, *, cfg, prompt_len, new):
    """Sample `new` tokens, recomputing the full forward over the (B, prompt_len + new) buffer every step."""
    def step(t, carry):
        buf, key = carry
        logits = forward(params, cfg, buf)  # (B, T, V): causal, so tokens after t do not matter
        last = jax.lax.dynamic_index_in_dim(logits, prompt_len + t - 1, axis=1, keepdims=False)
        token = jax.random.categorical(jax.random.fold_in(key, t), last.astype(jnp.float32))
        return jax.lax.dynamic_update_index_in_dim(buf, token.astype(buf.dtype), prompt_len + t, axis=1), key
    return jax.lax.fori_loop(0, new, step, (buf, key))[0]


def bench_cacheless(model, prompts, new):
    buf = jnp.zeros((len(prompts), len(prompts[0]) + new), jnp.int32).at[:, :len(prompts[0])].set(
        jnp.asarray(prompts))
    run = functools.partial(cacheless_loop, model.params, buf, jax.random.key(0), cfg=model.config,
                            prompt_len=len(prompts[0]), new=new)
    t = time.perf_counter()
    jax.block_until_ready(run())
    first = time.perf_counter() - t
    warm = best_of(lambda: jax.block_until_ready(run()), 1)
    return len(prompts) * new / warm, max(first - warm, 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="8,32,128")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cacheless-new", type=int, default=32)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    model = init_model(CONFIG, seed=0)
    print(f"model: {CONFIG.num_params() / 1e6:.2f}M params; prompt {args.prompt}, {args.new} new tokens; "
          f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs", flush=True)
    rng = np.random.default_rng(0)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        import torch
        probe_prompts = rng.integers(1, CONFIG.vocab_size, (8, args.prompt)).tolist()
        probe = {}
        for threads in sorted({1, torch.get_num_threads()}):
            torch.set_num_threads(threads)
            probe[threads] = bench_hf(folder, probe_prompts, 16, 1, "float32")
        torch.set_num_threads(max(probe, key=probe.get))
        print(f"HF thread probe (batch 8, 16 new, f32): {probe} tok/s -> using {torch.get_num_threads()}",
              flush=True)
        for B in batches:
            prompts = rng.integers(1, CONFIG.vocab_size, (B, args.prompt)).tolist()
            mine = {dt: bench_rlpt(Model(dataclasses.replace(CONFIG, compute_dtype=dt), model.params), prompts,
                                   args.new, args.repeats) for dt in ("float32", "bfloat16")}
            ours_dtype = max(mine, key=lambda dt: mine[dt][0])
            ours, compile_s = mine[ours_dtype]
            hf = {dt: bench_hf(folder, prompts, args.new, args.repeats, dt) for dt in ("float32", "bfloat16")}
            peer_dtype = max(hf, key=hf.get)
            row = dict(rlpt=ours, rlpt_dtype=ours_dtype, rlpt_f32=mine["float32"][0], rlpt_bf16=mine["bfloat16"][0],
                       rlpt_compile_s=compile_s, hf_f32=hf["float32"], hf_bf16=hf["bfloat16"],
                       peer=hf[peer_dtype], peer_dtype=peer_dtype, ratio=ours / hf[peer_dtype],
                       ratio_f32=mine["float32"][0] / hf["float32"], ratio_bf16=mine["bfloat16"][0] / hf["bfloat16"])
            floor_s, floor_rate = matmul_floor(model, B, ours_dtype)  # in the dtype of our faster variant
            # 1 step emits B tokens; a step that only did its matmuls would read this ratio against the peer
            row.update(rlpt_step_ms=1e3 * B / ours, matmul_floor_ms=1e3 * floor_s, matmul_floor_gflops=floor_rate / 1e9,
                       ratio_at_matmul_floor=B / floor_s / hf[peer_dtype])
            if B == min(batches):
                row["cacheless"], row["cacheless_compile_s"] = bench_cacheless(model, prompts, args.cacheless_new)
                row["cache_speedup"] = ours / row["cacheless"]
            results[B] = row
            print(f"batch {B:4d}: rlpt f32 {row['rlpt_f32']:7.0f} bf16 {row['rlpt_bf16']:7.0f} tok/s (compile"
                  f" {compile_s:5.1f} s) | HF f32 {hf['float32']:7.0f} bf16 {hf['bfloat16']:7.0f} tok/s | ratio"
                  f" {row['ratio']:5.2f}x (rlpt {ours_dtype} vs HF {peer_dtype}; same precision f32"
                  f" {row['ratio_f32']:.2f}x, bf16 {row['ratio_bf16']:.2f}x)"
                  + f" | matmul floor {row['matmul_floor_ms']:.2f} ms/step ({row['matmul_floor_gflops']:.0f} GFLOP/s;"
                  f" ours {row['rlpt_step_ms']:.2f}): at most {row['ratio_at_matmul_floor']:.2f}x"
                  + (f" | cache-less JAX {row['cacheless']:7.0f} tok/s (cache {row['cache_speedup']:.1f}x)"
                     if "cacheless" in row else ""), flush=True)
    key = 32 if 32 in results else batches[0]
    peer_name = f"transformers generate ({results[key]['peer_dtype']})"
    print(json.dumps({"benchmark": "sampler_new_tokens_per_s", "batch": key, "ours": round(results[key]["rlpt"]),
                      "ours_name": f"rlpt.sampling.generate ({results[key]['rlpt_dtype']} compute)",
                      "peer": round(results[key]["peer"]), "peer_name": peer_name,
                      "unit": "new tokens/s", "ratio": round(results[key]["ratio"], 2), "goal": 5.0,
                      "per_batch": {str(b): {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                                    for b, r in results.items()}}))


if __name__ == "__main__":
    main()
