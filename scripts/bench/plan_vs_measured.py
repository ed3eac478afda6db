"""The planner's prediction against a measured step on this machine's devices (issue #29's device check).

Builds the stage's train step exactly as `python -m rlpt.plan` does (`rlpt.plan.programs.train_program`, the same
mesh, rules and ops backend), rehearses it for a local target (`gpu:h200-1`, `gpu:h100-8` on a GPU machine;
`cpu:N` anywhere), then runs that same compiled program on the devices with initialised weights and a random
batch and compares:
- time: the measured step (median of --steps calls after one warm-up) against the planner's `step_s_at_peak`
  (the compiled matmul FLOPs at the chip's dense bf16 peak) and `step_s_at_hbm_bandwidth`; predicted / measured
  is the MFU the planner says a measured step means;
- memory: the device's `peak_bytes_in_use` (GPU, TPU; XLA:CPU reports none) against `hbm_per_device_bytes`.
CPU targets use a nominal chip (`rlpt.plan.chips.CPU_CHIP`), so there the ratio only checks the path end to end.

    python scripts/bench/plan_vs_measured.py target=gpu:h200-1 model=qwen2_5_0_5b stage=sft data.seq_len=2048 \
        data.batch_size=8 model.remat=full
    python scripts/bench/plan_vs_measured.py target=cpu:1 model=tiny stage=sft data.seq_len=128 data.batch_size=4

Options before the overrides: --steps N (default 5). The last stdout line is JSON: `ours` the predicted step s at
peak, `peer` the measured step s, `ratio` predicted / measured (the MFU; goal: a prediction within 2x of a
measured step, 0.5 <= ratio <= 1), `memory_ratio` predicted / measured peak bytes (None on CPU), `fits`.
"""
import sys

from rlpt.plan.chips import request_cpu_devices

request_cpu_devices(sys.argv[1:])  # before JAX starts, as `python -m rlpt.plan`

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from rlpt.config.plan_schema import compose_plan  # noqa: E402
from rlpt.models.ops import compiling_for  # noqa: E402
from rlpt.parallel import axis_rules  # noqa: E402
from rlpt.plan.programs import train_program  # noqa: E402
from rlpt.plan.rehearse import compile_program, rehearsal_context  # noqa: E402
from rlpt.train.loop import build_model  # noqa: E402
from rlpt.train.optim import make_optimizer  # noqa: E402
from rlpt.train.state import create_state  # noqa: E402


def random_batch(abstract: dict, vocab: int, seed: int) -> dict:
    """Concrete arrays for the program's abstract batch (micro-batch axis first): random tokens, positions
    0..T-1 in one segment, full masks, the response window at the row's end, random advantages, reference and
    rollout log-probs of -2, placed with the program's shardings."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, s in abstract.items():
        shape, T = s.shape, s.shape[-1]
        if k.endswith(("inputs", "targets")):
            x = rng.integers(0, vocab, shape)
        elif k.endswith("positions"):
            x = np.broadcast_to(np.arange(T), shape)
        elif k.endswith("segment_ids") or "mask" in k:
            x = np.ones(shape)
        elif k == "window":
            x = np.broadcast_to(np.arange(T) + abstract["inputs"].shape[-1] - T, shape)
        elif k == "advantages":
            x = rng.standard_normal(shape)
        elif k.endswith("logp") or k.startswith("ref_"):
            x = np.full(shape, -2.0)
        else:
            raise KeyError(f"plan_vs_measured: no fill rule for batch key {k!r}")
        out[k] = jax.device_put(np.asarray(x, s.dtype), s.sharding)
    return out


def materialize_state(cfg, abstract_state, mesh):
    """The train state the program takes: the run's starting model (`build_model`: train.init_from or a fresh
    init) and the optimizer's state, placed with the program's shardings, as `make_trainer` builds it (no LoRA)."""
    if cfg.lora.rank > 0:
        raise ValueError("plan_vs_measured: lora.rank > 0 is not supported (its state has the adapters)")
    optimizer = make_optimizer(cfg.optim, cfg.train.steps)
    shardings = jax.tree.map(lambda s: s.sharding, abstract_state)
    with jax.set_mesh(mesh):
        params = build_model(cfg, mesh).params
        frozen = {"ref": params} if abstract_state.frozen else {}
        return jax.jit(lambda p, f: create_state(p, optimizer, cfg.train.seed, f),
                       out_shardings=shardings)(params, frozen)


def measure(overrides: list[str], steps: int = 5) -> dict:
    cfg = compose_plan(overrides)
    if cfg.target.startswith("tpu"):
        raise ValueError(f"target={cfg.target}: plan_vs_measured runs the step, so the target must be this "
                         "machine's devices (gpu:<h100|h200>-<n> or cpu:<n>)")
    target, devices, mesh, ctx = rehearsal_context(cfg)
    with compiling_for(target.kind), axis_rules(cfg.mesh.rules):
        ctx["built"] = []
        prog = train_program(cfg, cfg.model, mesh)
        with jax.set_mesh(mesh):
            planned, compiled = compile_program(prog, ctx)
        state = materialize_state(cfg, prog.args[0], mesh)
        batch = random_batch(prog.args[1], cfg.model.vocab_size, cfg.train.seed)
        times = []
        with jax.set_mesh(mesh):
            for i in range(steps + 1):
                t = time.perf_counter()
                state, metrics = compiled(state, batch)
                jax.block_until_ready((state, metrics))
                if i:  # the first call warms up (allocation, autotuning)
                    times.append(time.perf_counter() - t)
    loss = float(np.asarray(jax.device_get(metrics["loss"])))
    if not np.isfinite(loss):
        raise FloatingPointError(f"plan_vs_measured: the measured step's loss is {loss}")
    stats = devices[0].memory_stats() or {}
    peak_bytes = stats.get("peak_bytes_in_use")
    measured = statistics.median(times)
    return {
        "benchmark": "plan_vs_measured", "target": target.spec, "device": str(devices[0].device_kind),
        "program": planned["program"], "stage": cfg.stage, "overrides": overrides,
        "ours": planned["step_s_at_peak"], "ours_name": "predicted step s at the chip's peak",
        "peer": measured, "peer_name": f"measured step s (median of {steps})", "unit": "s per step",
        "ratio": planned["step_s_at_peak"] / measured,
        "step_s_at_hbm_bandwidth": planned["step_s_at_hbm_bandwidth"],
        "flops_per_device": planned["flops_per_device"], "flops_vs_analytic": planned["flops_vs_analytic"],
        "measured_tflops_per_device": planned["flops_per_device"] / measured / 1e12,
        "hbm_per_device_bytes": planned["hbm_per_device_bytes"], "measured_peak_bytes": peak_bytes,
        "memory_ratio": planned["hbm_per_device_bytes"] / peak_bytes if peak_bytes else None,
        "fits": planned["fits"], "loss": loss, "steps": steps,
        "goal": "0.5 <= ratio <= 1 on a GPU/TPU (a measured step within 2x of the planner's step at peak)",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    args, overrides = ap.parse_known_args()
    result = measure(overrides, args.steps)
    peak = result["measured_peak_bytes"]
    print(f"{result['program']} on {result['target']} ({result['device']}): predicted {result['ours']:.4g} s at "
          f"peak ({result['step_s_at_hbm_bandwidth']:.4g} s at HBM bandwidth), measured {result['peer']:.4g} s: "
          f"MFU {result['ratio']:.3f}; memory predicted {result['hbm_per_device_bytes'] / 2**30:.2f} GiB, "
          f"measured peak {'n/a' if not peak else f'{peak / 2**30:.2f} GiB'}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
