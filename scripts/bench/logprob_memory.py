"""Peak memory of the RL update's loss + gradient with the LM head chunked (model.logits_chunk=-1, auto) vs
unchunked (model.logits_chunk=0), from XLA's compiled memory analysis; nothing is run.

Model: the ~100M-parameter Qwen2-shaped model CI post-trains (model=qwen2_100m, rlpt.pipeline.synthetic: vocab
151936, width 512, MLP 1536, 8 layers, 8 query / 2 KV heads of 64, QKV bias, tied embeddings), f32 parameters and
compute. Program: value_and_grad of
`rlpt.train.losses.rl_loss` (defaults: PPO-clip, token mean) over one micro-batch of --rows x --cols tokens,
logit window off (every column gets log-probs and entropy), as `rlpt.train.step.make_train_step` differentiates
it. Both sides run blockwise attention and full remat, the memory-safe settings model.attention_impl /
model.remat = "auto" pick from rlpt.models.config.MEMORY_SAFE_PARAMS (250M) up; this model is below it, so they
are set here (--attention / --remat change them; "auto" gives dense / none): without them the dense attention
scores and stored activations, not the logits, dominate the peak (31.8 GiB either way).
Peak = temp + argument + output bytes of the compiled program (argument: parameters + batch; output: loss,
metrics and parameter gradients). ratio = unchunked / chunked (> 1: chunking saves memory); goal >= 4.
With --check-rows R, the chunked and unchunked loss and gradients are also evaluated on R x --check-cols
tokens and compared (max relative error). --model <preset> measures another preset of experiments/conf/model
(f32 parameters and compute), e.g. qwen2_5_0_5b, or qwen_10m.
Usage: python scripts/bench/logprob_memory.py [--rows 8] [--cols 2048] [--check-rows 2 --check-cols 256]
       [--model qwen2_100m]
The last stdout line is one JSON object.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
from rlpt.config.schema import AlgoConfig  # noqa: E402
from rlpt.models import ModelConfig, init_model  # noqa: E402
from rlpt.models.config import resolved_attention_impl, resolved_remat  # noqa: E402
from rlpt.models.transformer import init_params  # noqa: E402
from rlpt.train.losses import rl_loss  # noqa: E402


def preset(name: str) -> ModelConfig:
    import yaml

    with open(os.path.join(ROOT, "experiments", "conf", "model", f"{name}.yaml")) as f:
        return ModelConfig(**(yaml.safe_load(f) | {"param_dtype": "float32", "compute_dtype": "float32"}))


def rl_value_and_grad(model_cfg):
    """(params, batch) -> ((loss_sum, weight), grads): the RL loss's value_and_grad as the train step takes it."""
    loss_fn = rl_loss(AlgoConfig())(model_cfg)

    def loss(params, batch):
        num, den, metrics = loss_fn(params, {}, batch, None)
        return num, (den, metrics)

    return jax.value_and_grad(loss, has_aux=True)


def rl_batch_shapes(rows: int, cols: int) -> dict:
    i32, f32 = jax.ShapeDtypeStruct((rows, cols), jnp.int32), jax.ShapeDtypeStruct((rows, cols), jnp.float32)
    return {"inputs": i32, "targets": i32, "positions": i32, "segment_ids": i32, "loss_mask": f32,
            "advantages": f32, "old_logp": f32, "rollout_logp": f32}


def peak_bytes(model_cfg, rows: int, cols: int) -> dict:
    """Compiled memory analysis of the RL value_and_grad for one (rows, cols) micro-batch."""
    params = jax.eval_shape(lambda: init_params(model_cfg, jax.random.key(0)))
    compiled = jax.jit(rl_value_and_grad(model_cfg)).lower(params, rl_batch_shapes(rows, cols)).compile()
    m = compiled.memory_analysis()
    out = {"temp": m.temp_size_in_bytes, "argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes}
    return out | {"peak": out["temp"] + out["argument"] + out["output"]}


def random_rl_batch(model_cfg, rows: int, cols: int, seed: int = 0) -> dict:
    """A random RL micro-batch: ragged loss masks, per-row advantages, old log-probs near the policy's."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, model_cfg.vocab_size, (rows, cols + 1)).astype(np.int32)
    mask = (np.arange(cols)[None] < rng.integers(cols // 2, cols + 1, (rows, 1))).astype(np.float32)
    old = (-rng.random((rows, cols)) * 12 * mask).astype(np.float32)
    return {k: jnp.asarray(v) for k, v in {
        "inputs": inputs[:, :-1], "targets": inputs[:, 1:], "positions": np.tile(np.arange(cols), (rows, 1)),
        "segment_ids": np.ones((rows, cols), np.int32), "loss_mask": mask,
        "advantages": (rng.normal(size=(rows, 1)) * mask).astype(np.float32), "old_logp": old,
        "rollout_logp": old}.items()}


def max_rel_error(chunked, unchunked, params, batch) -> dict:
    """Max relative error of the chunked loss and of each gradient leaf (by the leaf's max magnitude)."""
    (l1, _), g1 = jax.jit(rl_value_and_grad(chunked))(params, batch)
    (l0, _), g0 = jax.jit(rl_value_and_grad(unchunked))(params, batch)
    grad = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
               for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)))
    return {"loss": abs(float(l1) - float(l0)) / abs(float(l0)), "grad": grad}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--attention", default="blockwise", help="model.attention_impl on both sides")
    ap.add_argument("--remat", default="full", help="model.remat on both sides")
    ap.add_argument("--check-rows", type=int, default=2, help="rows of the value check (0: skip it)")
    ap.add_argument("--check-cols", type=int, default=256)
    ap.add_argument("--model", default="qwen2_100m", help="a preset name in experiments/conf/model")
    args = ap.parse_args()
    base = preset(args.model)
    base = dataclasses.replace(base, attention_impl=args.attention, remat=args.remat)
    chunked, unchunked = (dataclasses.replace(base, logits_chunk=c) for c in (-1, 0))
    t0 = time.time()
    ours, peer = peak_bytes(chunked, args.rows, args.cols), peak_bytes(unchunked, args.rows, args.cols)
    print(f"model: {args.model}, {base.num_params() / 1e6:.1f}M params, attention {resolved_attention_impl(base)}, "
          f"remat {resolved_remat(base)}; batch {args.rows} x {args.cols} tokens; compiled in {time.time() - t0:.0f} s")
    for name, m in (("chunked", ours), ("unchunked", peer)):
        print(f"{name:>10}: " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in m.items()))
    result = {"benchmark": "logprob_memory", "ours": ours["peak"], "peer": peer["peak"], "unit": "bytes",
              "ratio": round(peer["peak"] / ours["peak"], 2), "goal": ">= 4",
              "peak": "temp + argument + output", "model": args.model, "rows": args.rows, "cols": args.cols,
              "attention_impl": resolved_attention_impl(base), "remat": resolved_remat(base)}
    if args.check_rows:
        # the check batch is too small for auto to chunk: force chunks of ~1/8 of it
        small = dataclasses.replace(base, logits_chunk=max(1, args.check_rows * args.check_cols // 8))
        params = init_model(base, 0).params
        err = max_rel_error(small, unchunked, params, random_rl_batch(base, args.check_rows, args.check_cols))
        print(f"check on {args.check_rows} x {args.check_cols}: max relative error loss {err['loss']:.2e}, "
              f"gradients {err['grad']:.2e}")
        result["check_max_rel_error"] = err
    print(json.dumps(result))


if __name__ == "__main__":
    main()
