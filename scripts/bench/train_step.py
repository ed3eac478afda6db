"""Train-step throughput: rlpt's jitted SFT step vs a PyTorch eager step on the same `transformers` model.

Model: experiments/conf/model/qwen_10m.yaml (Qwen2-style, vocab 8192, width 256, 8 layers, 8 query / 2 KV
heads, MLP 704, QKV bias, tied embeddings: ~7.7M parameters; layers unrolled, `scan_layers: false`).
Batch 16 x 256 random tokens, every token in the loss, one AdamW step (lr 1e-4, constant, global-norm clip
1.0) per call, on both sides.

rlpt: `build_train_step(sft_loss(cfg), make_optimizer(...), donate=True)`, timed after --warmup untimed steps
(default 3, interleaved like the timed ones, both sides): the first compiles ours; in the next ones glibc's heap
can still grow by ~1 GB in a step (~250k page faults, a 2-3x slower step) before it reaches its working set.
Both sides read the same initial weights from one folder written by `Model.save_pretrained`: rlpt through
`rlpt.models.load_pretrained`, the peer through `transformers.AutoModelForCausalLM.from_pretrained` (SDPA
attention), eager forward, cross-entropy over the same targets, backward, `clip_grad_norm_`, `torch.optim.AdamW`.
Parameters and optimizer state are float32 on both sides in every variant; variants differ in compute precision
only:
  rlpt f32, rlpt bf16 (compute_dtype=bfloat16: bf16 matmuls accumulating in f32, f32 softmax and loss),
  torch f32, torch bf16 (torch.autocast("cpu", bfloat16)), torch f32_1t (f32 with torch.set_num_threads(1):
  on an oversubscribed machine torch's OpenMP threads spin-wait and one thread can be faster).
Each variant runs in its own worker process (this script with --worker), all started by one run and driven
step by step in turn (A B C D A B C D ...: one step at a time, the others wait idle), so load noise hits all of
them alike; each reports the median over the timed steps. Separate processes keep each side's allocator and
thread pools to itself: in one process torch's allocations fragmented the shared glibc heap, which then grew by
~1 GB in some of rlpt's steps (2-3x slower steps), and each side's steps ran 10-25% slower next to the other's.
ratio = best rlpt variant / best torch variant (the peer at its fastest).
MFU = achieved FLOP/s (ModelConfig.flops_per_token, attention included) / measured matmul peak of the matching
precision (a jitted 2048^3 matmul in JAX, f32 and bf16 inputs with preferred_element_type=f32).
ratio_at_matmul_peak = the ratio a step running all its FLOPs at the faster measured peak would read against the
best peer: the ceiling on this machine (1 / the peer's MFU when both use the same precision).

No process-wide XLA flags are set; rlpt's step compiles with its own per-jit options
(`rlpt.runtime.compiler_options("train", dtype)`: the YNNPACK dot library for f32 compute on CPU, XLA's
defaults for bf16), and the script re-execs itself once
with rlpt's glibc malloc settings (`rlpt.runtime.tune_malloc`), which both sides then run under
(`RLPT_MALLOC_TUNING=0` measures with glibc's defaults). Thread counts are the libraries' defaults, except the
torch *_1t variant.
Usage: python scripts/bench/train_step.py [--repeats 5] [--variants rlpt_f32,rlpt_bf16,torch_f32,torch_bf16,...]
The last stdout line is one JSON object.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from rlpt.runtime import tune_malloc  # noqa: E402

# Re-exec once with glibc malloc settings (rlpt/runtime.py): both sides of the comparison run under them.
# RLPT_MALLOC_TUNING=0 measures with glibc defaults.
tune_malloc()

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
from rlpt.config.schema import OptimConfig  # noqa: E402
from rlpt.models import ModelConfig, init_model, load_pretrained  # noqa: E402
from rlpt.train.losses import sft_loss  # noqa: E402
from rlpt.train.optim import make_optimizer  # noqa: E402
from rlpt.train.state import create_state  # noqa: E402
from rlpt.train.step import build_train_step  # noqa: E402

OPTIM = OptimConfig(name="adamw", lr=1e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, schedule="constant",
                    clip_norm=1.0)
ALL_VARIANTS = ("rlpt_f32", "rlpt_bf16", "torch_f32", "torch_bf16", "torch_f32_1t")


def model_config(**overrides) -> ModelConfig:
    with open(os.path.join(ROOT, "experiments", "conf", "model", "qwen_10m.yaml")) as f:
        return ModelConfig(**(yaml.safe_load(f) | overrides))


def matmul_peak(dtype, n=2048, repeats=5) -> float:
    """Median FLOP/s of a jitted n^3 matmul with f32 accumulation; the better of XLA's default dot and the
    train step's compiler options."""
    from rlpt.runtime import compiler_options

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
    best = 0.0
    for opts in (None, compiler_options("train")):
        f = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32), compiler_options=opts)
        jax.block_until_ready(f(a, a))
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(f(a, a))
            times.append(time.perf_counter() - t)
        best = max(best, 2 * n ** 3 / float(np.median(times)))
    return best


def make_batch(cfg, batch, seq, seed=0):
    toks = np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, seq + 1)).astype(np.int32)
    return toks[:, :-1], toks[:, 1:]


class RlptStep:
    """The rlpt step at one compute dtype, f32 params and AdamW state."""

    def __init__(self, params, compute_dtype, inputs, targets):
        cfg = model_config(compute_dtype=compute_dtype, param_dtype="float32")
        opt = make_optimizer(OPTIM, 1000)
        # our own copy: the step donates its state
        self.state = create_state(jax.tree.map(jnp.array, params), opt, seed=0)
        self.step = build_train_step(sft_loss(cfg), opt, donate=True, compute_dtype=compute_dtype)
        B, T = inputs.shape
        self.batch = {"inputs": jnp.asarray(inputs)[None], "targets": jnp.asarray(targets)[None],
                      "positions": jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (1, B, T)),
                      "segment_ids": jnp.ones((1, B, T), jnp.int32),
                      "loss_mask": jnp.ones((1, B, T), jnp.float32)}

    def __call__(self) -> float:
        self.state, metrics = self.step(self.state, self.batch)
        return float(jax.block_until_ready(metrics["loss"]))


class TorchStep:
    """HF transformers model from the saved folder; eager step, AdamW, f32 params, optional bf16 autocast."""

    def __init__(self, folder, autocast_bf16, inputs, targets, threads):
        import torch
        import transformers
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="sdpa").train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=OPTIM.lr, betas=(OPTIM.b1, OPTIM.b2),
                                     eps=OPTIM.eps, weight_decay=OPTIM.weight_decay)
        self.autocast, self.threads = autocast_bf16, threads
        self.inputs = torch.from_numpy(inputs.astype(np.int64))
        self.targets = torch.from_numpy(targets.astype(np.int64))

    def __call__(self) -> float:
        torch = self.torch
        torch.set_num_threads(self.threads)
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.model(input_ids=self.inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), self.targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), OPTIM.clip_norm)
        self.opt.step()
        return float(loss.detach())


def torch_threads(variant, default):
    return 1 if variant.endswith("_1t") else default


def make_step(variant, folder, batch, seq, threads):
    inputs, targets = make_batch(model_config(), batch, seq)
    if variant.startswith("rlpt"):
        params = load_pretrained(folder, param_dtype="float32").params
        return RlptStep(params, "float32" if variant.endswith("f32") else "bfloat16", inputs, targets)
    return TorchStep(folder, variant.endswith("bf16"), inputs, targets, torch_threads(variant, threads))


def worker(args):
    """One variant's step in this process: answers each "step" line on stdin with "RESULT seconds loss"."""
    fn = make_step(args.worker, args.folder, args.batch, args.seq, args.threads)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        t = time.perf_counter()
        loss = fn()
        print(f"RESULT {time.perf_counter() - t} {loss}", flush=True)


class Worker:
    """A worker process for one variant; step() runs one step there and returns (seconds, loss)."""

    def __init__(self, variant, folder, args, threads):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, "--folder", folder,
               "--batch", str(args.batch), "--seq", str(args.seq), "--threads", str(threads)]
        self.variant = variant
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def step(self):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                seconds, loss = line.split()[1:]
                return float(seconds), float(loss)
        raise SystemExit(f"worker {self.variant} exited (code {self.proc.wait()}); its stderr is above")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per variant (median reported)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--variants", default=",".join(ALL_VARIANTS))
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps per variant first (compile; the allocators reach their working set)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    variants = args.variants.split(",")
    for v in variants:
        if v not in ALL_VARIANTS:
            raise SystemExit(f"--variants: unknown variant {v!r}; known: {ALL_VARIANTS}")
    import torch
    import transformers

    default_threads = torch.get_num_threads()
    cfg = model_config()
    tokens = args.batch * args.seq
    flops_step = cfg.flops_per_token(args.seq) * tokens
    peak = {"float32": matmul_peak(jnp.float32), "bfloat16": matmul_peak(jnp.bfloat16)}
    print(f"matmul peak (JAX, 2048^3, f32 accumulation): f32 {peak['float32'] / 1e9:.1f} GFLOP/s, "
          f"bf16 {peak['bfloat16'] / 1e9:.1f} GFLOP/s", flush=True)
    print(f"model: {cfg.num_params() / 1e6:.2f}M params, {flops_step / 1e9:.1f} GFLOP per step "
          f"({args.batch} x {args.seq} tokens); jax {jax.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, torch threads {torch.get_num_threads()}", flush=True)

    folder = tempfile.mkdtemp(prefix="rlpt_train_step_")
    init_model(cfg, seed=0).save_pretrained(folder)
    steps = {v: Worker(v, folder, args, default_threads) for v in variants}
    first_loss, compile_s = {}, {}
    for v, w in steps.items():  # warm-up: compiles ours, lets torch allocate; not timed
        compile_s[v], first_loss[v] = w.step()
        print(f"warm-up {v}: {compile_s[v]:.1f} s, initial loss {first_loss[v]:.4f}", flush=True)
    for _ in range(args.warmup - 1):  # interleaved like the timed rounds
        for w in steps.values():
            w.step()
    times = {v: [] for v in steps}
    for r in range(args.repeats):
        for v, w in steps.items():
            times[v].append(w.step()[0])
        print(f"round {r + 1}: " + ", ".join(f"{v} {times[v][-1]:.2f} s" for v in steps), flush=True)

    results = {}
    for v in steps:
        med = float(np.median(times[v]))
        prec = "bfloat16" if v.endswith("bf16") else "float32"
        results[v] = {"tokens_per_s": tokens / med, "step_s": med, "mfu": flops_step / med / peak[prec],
                      "compute": prec, "params": "float32", "optimizer_state": "float32",
                      "initial_loss": first_loss[v],
                      "threads": torch_threads(v, default_threads) if v.startswith("torch") else "xla default"}
        print(f"{v:12s} {tokens / med:9.1f} tok/s  step {med:.3f} s  MFU {results[v]['mfu'] * 100:.1f}% "
              f"(of {prec} peak)  params/AdamW state f32", flush=True)
    for w in steps.values():
        w.close()
    shutil.rmtree(folder, ignore_errors=True)
    ours = [v for v in results if v.startswith("rlpt")]
    peers = [v for v in results if v.startswith("torch")]
    best_ours = max(ours, key=lambda v: results[v]["tokens_per_s"]) if ours else None
    best_peer = max(peers, key=lambda v: results[v]["tokens_per_s"]) if peers else None
    same = {}  # rlpt at one compute precision / the fastest torch variant at that precision
    for prec in ("float32", "bfloat16"):
        ours_p = [v for v in ours if results[v]["compute"] == prec]
        peers_p = [v for v in peers if results[v]["compute"] == prec]
        if ours_p and peers_p:
            peer_p = max(peers_p, key=lambda v: results[v]["tokens_per_s"])
            same[prec] = results[ours_p[0]]["tokens_per_s"] / results[peer_p]["tokens_per_s"]
            print(f"same precision ({prec}): {ours_p[0]} / {peer_p} = {same[prec]:.2f}x")
    ratio = (results[best_ours]["tokens_per_s"] / results[best_peer]["tokens_per_s"]
             if best_ours and best_peer else None)
    if ratio is not None:
        print(f"best rlpt ({best_ours}) / best torch ({best_peer}) = {ratio:.2f}x")
    # The ratio a step doing flops_step at 100% of the faster measured matmul peak would read: the ceiling on
    # this machine (matmul peak measured once, at the start; the machine's speed can drift during the rounds).
    ceiling = max(peak.values()) / flops_step * tokens / results[best_peer]["tokens_per_s"] if best_peer else None
    if ceiling is not None:
        print(f"ceiling: a step at 100% of the measured matmul peak ({max(peak.values()) / 1e9:.0f} GFLOP/s) "
              f"would read {ceiling:.2f}x {best_peer}")
    print(json.dumps({
        "benchmark": "train_step_qwen_10m_16x256_adamw", "unit": "tokens/s",
        "ours": results[best_ours]["tokens_per_s"] if best_ours else None, "ours_variant": best_ours,
        "peer": results[best_peer]["tokens_per_s"] if best_peer else None, "peer_variant": best_peer,
        "ratio": ratio, "ratio_same_precision": same, "goal": ">= 1.5x PyTorch", "ratio_at_matmul_peak": ceiling,
        "peak_flops": peak, "flops_per_step": flops_step, "repeats": args.repeats, "warmup": args.warmup,
        "variants": results, "compile_or_warmup_s": compile_s}))


if __name__ == "__main__":
    main()
