"""Inference efficiency: quantized and speculative sampling against full precision and transformers' generate.

Two policies, each with a draft for speculative decoding:
- quickstart: the quickstart's RL policy (2 layers, the char tokenizer), trained by `experiment=distill_tiny` as
  its teacher, with the 1-layer student that run distilled from it as the draft. The run is made once into
  runs/bench_inference (about 5 minutes; --run-dir reuses another distill_tiny run with train.export_hf=true).
  Held-out pass@1 (greedy, the RL domains' eval split) is measured per setting.
- bench10m: the sampler benchmark's ~10M Qwen2-style model (scripts/bench/sampler.py CONFIG, random weights); its
  draft is its own first 2 layers with its final norm and head (a LayerSkip-style self-draft, no training:
  `speculative_generate(model, 2, ...)`, which decodes the draft from the target's own weights).
Settings: full precision, int8 weights, int8 weights + int8 KV cache, int4 weights (grouped), speculative decoding
(k drafts per round). Each runs at compute dtype float32 and bfloat16 and the faster one counts (full precision
too: the baseline is its own faster dtype). Per batch (1/8/32; a 32-token random prompt, 128 new tokens,
temperature 1, no stop ids): new tokens/s, the ratio to full precision and to transformers' generate (its faster of
f32 / bf16, PyTorch CPU, the same weights). KL: the next-token KL(setting || full) estimated on the setting's own
samples (batch 32): the mean over its sampled tokens of its log-prob minus the full-precision model's teacher-forced
log-prob of the same token (Monte Carlo, with its standard error); speculative decoding records the target's
log-probs, so its estimate is the float noise of the verification forward.
Usage: python scripts/bench/inference.py [--batches 1,8,32] [--new 128] [--k 4] [--run-dir runs/bench_inference]
The last stdout line is JSON: ratio = int8 / full precision tokens/s at batch 32 on bench10m, speculative_ratio =
speculative / full precision at batch 1 on bench10m, pass1_drop_int8_points on the quickstart policy.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from rlpt.runtime import tune_malloc  # noqa: E402

tune_malloc()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from sampler import CONFIG, bench_hf, best_of, decode_weight_count, matmul_floor  # noqa: E402

from rlpt.models import Model, init_model, load_pretrained  # noqa: E402
from rlpt.models.ops.xla_cpu_decode import DecodeLayout  # noqa: E402
from rlpt.models.transformer import forward  # noqa: E402
from rlpt.sampling import engine, generate  # noqa: E402
from rlpt.sampling.speculative import self_draft, speculative_generate  # noqa: E402

QUANT = {"full": {}, "int8": {"quant": "int8"}, "int8+kv8": {"quant": "int8", "kv_cache_dtype": "int8"},
         "int4": {"quant": "int4"}}
DTYPES = ("float32", "bfloat16")


def with_dtype(model, dtype):
    """model in compute dtype `dtype`; an int draft (a self-draft's layer count) stays as it is."""
    if isinstance(model, int):
        return model
    return Model(dataclasses.replace(model.config, compute_dtype=dtype), model.params)


def quant_kwargs(name, cfg):
    """QUANT[name] for a model: int4 takes the largest group (<= 128) that divides each weight's input dimension."""
    kw = dict(QUANT[name])
    if kw.get("quant") == "int4":
        dims = (cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.intermediate_size)
        kw["quant_group"] = next(g for g in (128, 64, 32, 16, 8) if all(d % g == 0 for d in dims))
    return kw


def sampler_for(name, model, draft, k):
    """A function (prompts, new, **kw) -> Generation for setting `name`."""
    if name == "speculative":
        return lambda prompts, new, **kw: speculative_generate(model, draft, prompts, new, k=k, **kw)
    quant = quant_kwargs(name, model.config)
    return lambda prompts, new, **kw: generate(model, prompts, new, keep_state=False, **quant, **kw)


def tokens_per_s(run, prompts, new, repeats):
    out = run(prompts, new, temperature=1.0, seed=0)  # compile
    assert (out.lengths == new).all()
    return len(prompts) * new / best_of(lambda: run(prompts, new, temperature=1.0, seed=1), repeats), out


@functools.partial(jax.jit, static_argnums=1)
def _teacher_forced(params, cfg, seq):
    return jax.nn.log_softmax(forward(params, cfg, seq).astype(jnp.float32), axis=-1)


def kl_estimate(full, prompts, gen):
    """(mean, standard error) over the sampled tokens of log q(token) - log p_full(token): KL(q || p_full)."""
    P = len(prompts[0])
    seq = np.concatenate([np.asarray(prompts, np.int32), gen.tokens.astype(np.int32)], axis=1)
    lp = np.asarray(_teacher_forced(full.params, full.config, jnp.asarray(seq)))
    n = gen.tokens.shape[1]
    full_lp = np.take_along_axis(lp[:, P - 1:P - 1 + n], gen.tokens[..., None].astype(np.int64), -1)[..., 0]
    d = (gen.logprobs - full_lp).reshape(-1)
    return float(d.mean()), float(d.std() / np.sqrt(d.size))


def ensure_quickstart(run_dir):
    teacher, student = os.path.join(run_dir, "teacher", "hf"), os.path.join(run_dir, "hf")
    if not (os.path.isdir(teacher) and os.path.isdir(student)):
        print(f"training the quickstart policy and its distilled draft into {run_dir} (experiment=distill_tiny)",
              flush=True)
        subprocess.run([sys.executable, "-m", "rlpt.train", "experiment=distill_tiny", f"train.out_dir={run_dir}",
                        "train.export_hf=true"], check=True)
    return teacher, student


def pass1(model, tok, tasks, name, draft, k, max_new_tokens):
    from rlpt.eval.heldout import evaluate
    if name == "speculative":
        return evaluate(None, tok, tasks, max_new_tokens=max_new_tokens,
                        sampler=functools.partial(speculative_generate, model, draft, k=k))["pass1"]
    return evaluate(model, tok, tasks, max_new_tokens=max_new_tokens, **quant_kwargs(name, model.config))["pass1"]


def expected_tokens(alpha, k):
    """Tokens one speculative round emits when each of k drafts is kept with probability alpha until the first
    rejection: the kept drafts plus the target's own token."""
    return sum(alpha ** i for i in range(k + 1))


def per_draft_acceptance(rate, k):
    """The per-draft alpha whose expected kept share of k drafts, (alpha + ... + alpha^k) / k, is `rate`."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (expected_tokens(mid, k) - 1) / k < rate else (lo, mid)
    return (lo + hi) / 2


def read_seconds(nbytes, repeats=9):
    """Seconds this machine takes to read nbytes once, warm (a float32 sum over an array of that size, as a step
    re-reads the same weights): what any matmul kernel needs at least to read weights of that size."""
    x = jnp.ones((max(nbytes // 4, 1),), jnp.float32)
    total = jax.jit(jnp.sum)
    jax.block_until_ready(total(x))
    return best_of(lambda: jax.block_until_ready(total(x)), repeats)


def ceilings(label, model, draft, rows, args, rng):
    """The most each speed goal's setting could reach on this machine, from measured parts (None where the
    weights are not XLA:CPU's decode layout):
    - int8 weight-only at the largest batch: the rest of a decode step (attention over the cache, norms, sampling)
      does not depend on how the weights are stored, so int8 can save at most what its weight products save
      against full precision's in the same dtype: ceiling = best full step / min over dtypes of (full step in that
      dtype - max(0, full products - int8 products));
    - speculative at batch 1: a round costs at least k draft steps plus one target step (a (k + 1)-token
      verification reads every weight too), and emits expected_tokens(alpha, k) tokens at the measured per-draft
      acceptance; ceiling = best over dtypes and k = 1..16 of that rate against full precision's best.
    - any weight-only int8 kernel at the largest batch (kernel-independent): storing a weight in 8 bits saves at
      most the time to read the bytes it no longer stores; the multiply-adds stay (weight-only int8 dequantizes
      to the compute dtype), so ceiling = best full step / min over dtypes of (full step - (time to read the
      weights in that dtype - time to read them in int8)), each read timed warm (`read_seconds`)."""
    if not isinstance(engine.decode_weights(model), DecodeLayout):
        return None
    B, B1 = max(args.batches), min(args.batches)
    full, spec = rows["full"], rows["speculative"][B1]
    lower, parts = [], {}
    n_weights = decode_weight_count(model.config)
    read_int8, bw_lower = read_seconds(n_weights), []
    for dt in DTYPES:
        mm_full, mm_int8 = (matmul_floor(model, B, dt, quant=q)[0] for q in ("none", "int8"))
        lower.append(B / full[B][dt] - max(0.0, mm_full - mm_int8))
        read_full = read_seconds(n_weights * jnp.dtype(dt).itemsize)
        bw_lower.append(B / full[B][dt] - max(0.0, read_full - read_int8))
        parts[dt] = dict(step_ms=1e3 * B / full[B][dt], products_ms=1e3 * mm_full, int8_products_ms=1e3 * mm_int8,
                         weight_read_ms=1e3 * read_full, int8_weight_read_ms=1e3 * read_int8)
    int8 = (B / full[B]["tok_s"]) / min(lower)
    int8_bandwidth = (B / full[B]["tok_s"]) / min(bw_lower)
    prompts = rng.integers(1, model.config.vocab_size, (B1, args.prompt)).tolist()
    best = (0.0, None, None, None)
    for dt in DTYPES:
        d = self_draft(with_dtype(model, dt), draft)[0] if isinstance(draft, int) else with_dtype(draft, dt)
        draft_tok_s, _ = tokens_per_s(sampler_for("full", d, d, None), prompts, args.new, args.repeats)
        t_target, t_draft = B1 / full[B1][dt], B1 / draft_tok_s
        alpha = per_draft_acceptance(spec[dt + "_acceptance"], spec[dt + "_k"])
        parts[dt] |= dict(draft_vs_target_step=t_draft / t_target, per_draft_acceptance=alpha)
        for k in range(1, 17):
            rate = expected_tokens(alpha, k) / (k * t_draft + t_target) * B1
            best = max(best, (rate / full[B1]["tok_s"], k, dt, alpha))
    jax.clear_caches()
    out = dict(int8=int8, int8_bandwidth=int8_bandwidth, speculative=best[0], speculative_k=best[1],
               speculative_dtype=best[2], parts=parts)
    print(f"{label} ceiling on this machine: int8 weights at batch {B} <= x{int8:.2f} (weight products "
          + ", ".join(f"{dt} {p['products_ms']:.2f} ms full / {p['int8_products_ms']:.2f} ms int8 of a "
                      f"{p['step_ms']:.2f} ms step" for dt, p in parts.items())
          + f"); any weight-only int8 kernel at batch {B} <= x{int8_bandwidth:.2f} (reading the weights once, warm: "
          + ", ".join(f"{dt} {p['weight_read_ms']:.2f} ms" for dt, p in parts.items())
          + f", int8 {parts[DTYPES[0]]['int8_weight_read_ms']:.2f} ms)"
          + f"; speculative at batch {B1} <= x{best[0]:.2f} (k={best[1]}, {best[2]}: per-draft acceptance "
          + f"{best[3]:.2f}, draft step x{parts[best[2]]['draft_vs_target_step']:.2f} of the target's, the "
          + "verification counted as one target step)", flush=True)
    return out


def bench_model(label, model, draft, args, rng, tok=None, tasks=None):
    settings = list(QUANT) + ["speculative"]
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        for B in args.batches:
            prompts = rng.integers(1, model.config.vocab_size, (B, args.prompt)).tolist()
            hf = {dt: bench_hf(folder, prompts, args.new, args.repeats, dt) for dt in DTYPES}
            peer_dtype = max(hf, key=hf.get)
            for name in settings:
                speed = {}
                for dt in DTYPES:
                    m, d = with_dtype(model, dt), with_dtype(draft, dt)
                    for k in args.ks if name == "speculative" else [None]:
                        tok_s, out = tokens_per_s(sampler_for(name, m, d, k), prompts, args.new, args.repeats)
                        if k is not None:
                            speed[f"{dt}_k{k}"], speed[f"{dt}_k{k}_acceptance"] = tok_s, out.acceptance_rate
                        if tok_s > speed.get(dt, 0.0):
                            speed[dt] = tok_s
                            if k is not None:
                                speed[dt + "_acceptance"], speed[dt + "_k"] = out.acceptance_rate, k
                best = max(DTYPES, key=lambda dt: speed[dt])
                rows.setdefault(name, {})[B] = dict(tok_s=speed[best], dtype=best, hf=hf[peer_dtype],
                                                    hf_dtype=peer_dtype, **{k: v for k, v in speed.items()})
                # drop the setting's compiled programs: dozens of XLA:CPU executables in one process exhaust the
                # kernel's memory-map limit (vm.max_map_count; LLVM then fails with "Cannot allocate memory")
                jax.clear_caches()
                gc.collect()
            full = rows["full"][B]["tok_s"]
            for name in settings:
                r = rows[name][B]
                r.update(vs_full=r["tok_s"] / full, vs_hf=r["tok_s"] / r["hf"])
                acc = (f" k={r[r['dtype'] + '_k']} acceptance {r[r['dtype'] + '_acceptance']:.2f}"
                       if name == "speculative" else "")
                print(f"{label} batch {B:3d} {name:12s} {r['tok_s']:8.0f} tok/s ({r['dtype']}) x{r['vs_full']:.2f} "
                      f"full, x{r['vs_hf']:.2f} HF ({r['hf']:.0f} tok/s {peer_dtype}){acc}", flush=True)
    rows["ceiling"] = ceilings(label, model, draft, rows, args, np.random.default_rng(1))
    # next-token KL and pass@1 per setting, in the full-precision run's faster dtype at batch 32
    B = max(args.batches)
    prompts = rng.integers(1, model.config.vocab_size, (B, args.prompt)).tolist()
    full_model = with_dtype(model, "float32")
    for name in settings:
        dt = rows[name][B]["dtype"]
        k = rows[name][B].get(dt + "_k")
        gen = sampler_for(name, with_dtype(model, dt), with_dtype(draft, dt), k)(prompts, args.new,
                                                                                temperature=1.0, seed=2)
        kl, se = kl_estimate(full_model, prompts, gen)
        info = dict(kl=kl, kl_se=se)
        if tasks is not None:
            info["pass1"] = pass1(with_dtype(model, dt), tok, tasks, name, with_dtype(draft, dt), k,
                                  args.eval_new)
        rows[name]["quality"] = info
        print(f"{label} {name:12s} KL(setting||full) {kl:.2e} +- {se:.1e}"
              + (f" | held-out pass@1 {info['pass1']:.3f}" if "pass1" in info else ""), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--k", default="2,3,4", help="drafts per round; a list: the speculative row takes the fastest")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--run-dir", default="runs/bench_inference")
    ap.add_argument("--models", default="quickstart,bench10m")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.ks = [int(k) for k in args.k.split(",")]
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; prompt {args.prompt}, "
          f"{args.new} new tokens, k in {args.ks}", flush=True)
    import torch
    torch.set_num_threads(1)  # sampler.py's probe: a spinning default pool is slower on a 2-core machine
    results = {}
    if "bench10m" in args.models:
        model = init_model(CONFIG, seed=0)
        results["bench10m"] = bench_model("bench10m", model, 2, args, rng)  # self-draft: its first 2 layers
    if "quickstart" in args.models:
        from rlpt.config import compose
        from rlpt.eval.heldout import heldout_tasks
        from rlpt.models.tokenizer import load_tokenizer
        from rlpt.train.sft import domain_mixture
        teacher, student = ensure_quickstart(args.run_dir)
        cfg = compose(["experiment=distill_tiny"])  # the run's held-out tasks: the RL domains' eval split
        names, _, tiers = domain_mixture(cfg)
        tasks = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)
        args.eval_new = cfg.rl.rollout.max_new_tokens
        results["quickstart"] = bench_model("quickstart", load_pretrained(teacher), load_pretrained(student), args,
                                            rng, load_tokenizer(teacher), tasks)
    ten = results.get("bench10m") or results["quickstart"]
    qs = results.get("quickstart", {})
    summary = {
        "benchmark": "inference_quant_speculative", "unit": "new tokens/s (ratio to full precision)",
        "ours": round(ten["int8"][max(args.batches)]["tok_s"]), "ours_name": "int8 weights, batch 32",
        "peer": round(ten["full"][max(args.batches)]["tok_s"]), "peer_name": "full precision, batch 32",
        "ratio": round(ten["int8"][max(args.batches)]["vs_full"], 3),
        "speculative_ratio": round(ten["speculative"][min(args.batches)]["vs_full"], 3),
        "pass1_drop_int8_points": (round(100 * (qs["full"]["quality"]["pass1"] - qs["int8"]["quality"]["pass1"]), 2)
                                   if qs else None),
        "goal": {"ratio": 1.3, "speculative_ratio": 1.5, "pass1_drop_int8_points": 1.0},
        # the most this machine allows each goal's setting (see `ceilings`); None off XLA:CPU
        "int8_ceiling": ten["ceiling"] and round(ten["ceiling"]["int8"], 3),
        # whatever the kernel: int8 saves at most the time to read the weights' bytes it does not store
        "int8_bandwidth_ceiling": ten["ceiling"] and round(ten["ceiling"]["int8_bandwidth"], 3),
        "speculative_ceiling": ten["ceiling"] and round(ten["ceiling"]["speculative"], 3),
        "results": {m: {s: {str(b): {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                            for b, r in per.items()} for s, per in rows.items() if s != "ceiling"}
                    | {"ceiling": rows["ceiling"]} for m, rows in results.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
