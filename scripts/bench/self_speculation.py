"""Self-speculation with the target's cache shared against the same self-draft with its own cache.

On the sampler benchmark's ~10M model (scripts/bench/sampler.py CONFIG, random weights) at batch 1, one process,
the settings interleaved per prompt: plain decoding (`generate`), and `speculative_generate(model, 2, ...)` (the
target's first 2 layers and head as the draft) two ways:
- ours, shared_cache=True: the draft's steps write the target's cache and the verification runs layers 2..L-1;
- peer, shared_cache=False: the draft keeps its own cache and prefill and the verification runs every layer (the
  design before; the weights are the target's in both).
Each at k = 2, 3, 4 and in float32 and bfloat16; per setting the best of --repeats runs per prompt, summed over
--prompts prompts (32 random tokens, 128 new, temperature 1). The speed-up to plain decoding is against plain
decoding in its faster dtype.
--draft-layers n drafts with the first n layers instead of 2.
Usage: python scripts/bench/self_speculation.py [--prompts 3] [--repeats 4] [--new 128] [--draft-layers 2]
The last stdout line is JSON: ours / peer = the best shared and own-cache tokens/s, ratio = ours / peer,
speculative_ratio = ours / plain decoding (issue 31's goal: 1.5).
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from rlpt.runtime import tune_malloc  # noqa: E402

tune_malloc()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from sampler import CONFIG  # noqa: E402

from rlpt.models import Model, init_model  # noqa: E402
from rlpt.sampling import generate  # noqa: E402
from rlpt.sampling.speculative import speculative_generate  # noqa: E402

DTYPES = ("float32", "bfloat16")
KS = (2, 3, 4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--draft-layers", type=int, default=2)
    args = ap.parse_args()
    base = init_model(CONFIG, seed=0)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, CONFIG.vocab_size, (1, 32)).tolist() for _ in range(args.prompts)]
    print(f"model: {CONFIG.num_params() / 1e6:.2f}M params, {args.draft_layers}-layer self-draft, batch 1, "
          f"{args.prompts} prompts x {args.new} new tokens; jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPUs", flush=True)
    runs = {}
    for dt in DTYPES:
        model = Model(dataclasses.replace(base.config, compute_dtype=dt), base.params)
        runs[(dt, "plain", 0)] = lambda p, m=model: generate(m, p, args.new, keep_state=False, seed=1)
        for k in KS:
            for mode in ("shared", "own"):
                runs[(dt, mode, k)] = lambda p, m=model, k=k, mode=mode: speculative_generate(
                    m, args.draft_layers, p, args.new, k=k, seed=1, shared_cache=mode == "shared")
    for fn in runs.values():
        fn(prompts[0])  # compile
    best = {key: [float("inf")] * len(prompts) for key in runs}
    acceptance = {}
    for _ in range(args.repeats):
        for key, fn in runs.items():
            for i, p in enumerate(prompts):
                start = time.perf_counter()
                out = fn(p)
                jax.block_until_ready(out.tokens)
                best[key][i] = min(best[key][i], time.perf_counter() - start)
                if key[1] != "plain":
                    acceptance.setdefault(key, []).append(out.acceptance_rate)
    tok_s = {key: len(prompts) * args.new / sum(t) for key, t in best.items()}
    plain = max(tok_s[(dt, "plain", 0)] for dt in DTYPES)
    for key, rate in tok_s.items():
        dt, mode, k = key
        extra = f" k={k} acceptance {np.mean(acceptance[key]):.2f}" if mode != "plain" else ""
        print(f"{dt:9s} {mode:6s}{extra:22s} {rate:7.0f} tok/s  x{rate / plain:.3f} of plain", flush=True)
    ours = max((key for key in tok_s if key[1] == "shared"), key=tok_s.get)
    peer = max((key for key in tok_s if key[1] == "own"), key=tok_s.get)
    print(json.dumps({
        "benchmark": "self_speculation_shared_cache", "unit": "new tokens/s at batch 1",
        "draft_layers": args.draft_layers,
        "ours": round(tok_s[ours]), "ours_name": f"shared cache, {ours[0]}, k={ours[2]}",
        "peer": round(tok_s[peer]), "peer_name": f"own draft cache, full verification, {peer[0]}, k={peer[2]}",
        "ratio": round(tok_s[ours] / tok_s[peer], 3), "plain": round(plain),
        "speculative_ratio": round(tok_s[ours] / plain, 3), "peer_speculative_ratio": round(tok_s[peer] / plain, 3),
        "goal": {"ratio": 1.0, "speculative_ratio": 1.5}}))


if __name__ == "__main__":
    main()
