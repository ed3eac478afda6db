"""Trainer idle fraction, async vs sync RL on the same run (issue 8: async idle <= half of sync's).

The run: the quickstart's RL stage (experiments/conf/experiment/quickstart.yaml: tiny Qwen2-style model, 32 prompts
x 8 samples of two-digit addition, 6 new tokens, GRPO) for --steps steps from the same initial weights, once with
rl.mode=sync and once with rl.mode=async (rl.max_staleness=1), no checkpoints (no sync barriers). Idle = the
loop's wall time outside train steps (sync: generating + verifying + batch prep; async: waiting for the producer
+ batch prep), first step (compilation) left out: `rlpt.pipeline.rl.idle_fraction`. Staleness is asserted
per step inside run_rl and checked again here. On 2 shared CPU cores generation and training compete for the same
cores, so async mostly hides generation rather than saving wall time; s_per_step is printed for both.
Usage: python scripts/bench/async_vs_sync.py [--steps 30] [overrides ...]
The last stdout line is one JSON object (ratio = sync idle / async idle; > 1: async idles less).

Slot refill (`--refill`): the time RL's rollouts spend generating, rl.rollout.refill=true against the plain
sampler, on a long-tailed batch: the quickstart's noisy-teacher SFT policy (--sft-steps of cold start; most
samples answer and stop in a few tokens, a few ramble to rl.rollout.max_new_tokens), the same prompts and
seeds for both, --batches rollout() calls each after one warm-up call (compilation), interleaved. Prints the
response-length distribution (the tail is what refill saves on). ratio = plain / refill generate seconds.
    python scripts/bench/async_vs_sync.py --refill [--sft-steps 150] [--batches 8] [--max-new-tokens 32]
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from rlpt.config import compose  # noqa: E402
from rlpt.models import init_model  # noqa: E402
from rlpt.pipeline.rl import run_rl  # noqa: E402
from rlpt.train.sft import get_tokenizer  # noqa: E402


def measure(overrides: list[str], steps: int, max_staleness: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("sync", "async"):
            cfg = compose([f"rl.steps={steps}", f"rl.mode={mode}", f"rl.max_staleness={max_staleness}",
                           "train.ckpt_every=0", "train.progress=false", f"train.out_dir={tmp}/{mode}"] + overrides)
            res = run_rl(cfg, get_tokenizer(cfg), init_model=init_model(cfg.model, cfg.train.seed),
                         out_dir=f"{tmp}/{mode}")
            s = res["summary"]
            bound = max_staleness if mode == "async" else 0
            assert all(0 <= h["staleness"] <= bound for h in res["history"]), mode
            out[mode] = {"trainer_idle_fraction": s["trainer_idle_fraction"], "s_per_step": s["s_per_step"],
                         "max_staleness_seen": s["max_staleness_seen"], "max_staleness": bound,
                         "time_split_s": s["time_split_s"]}
            print(f"[{mode}] trainer_idle_fraction={s['trainer_idle_fraction']:.3f} "
                  f"s_per_step={s['s_per_step']:.3f} max_staleness_seen={s['max_staleness_seen']} (bound {bound}) "
                  f"time_split_s={s['time_split_s']}", flush=True)
    return out


def measure_refill(overrides: list[str], sft_steps: int, batches: int, max_new_tokens: int) -> dict:
    import dataclasses
    import time

    import numpy as np

    from rlpt.pipeline.cold_start import run as cold_start
    from rlpt.rollout.single_turn import rollout
    from rlpt.tasks.curriculum import build_curriculum
    from rlpt.tasks.mixture import rl_domains
    from rlpt.train.sft import domain_mixture

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(["experiment=quickstart", "train.progress=false", "train.ckpt_every=0", f"train.out_dir={tmp}",
                       f"rl.rollout.max_new_tokens={max_new_tokens}"] + overrides)
        tok = get_tokenizer(cfg)
        sft_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, noise=cfg.rl.sft_noise),
                                      train=dataclasses.replace(cfg.train, steps=sft_steps, eval_every=0),
                                      rl=dataclasses.replace(cfg.rl, sft_target_pass=0.0))
        model = cold_start(sft_cfg, tok, domain_mixture(sft_cfg), max_new_tokens=max_new_tokens)["model"]
    curriculum = build_curriculum(cfg.curriculum, rl_domains(cfg))
    state = curriculum.init_state()
    rcfgs = {"plain": cfg.rl.rollout, "refill": dataclasses.replace(cfg.rl.rollout, refill=True)}
    times = {k: [] for k in rcfgs}
    lengths = []
    for b in range(batches + 1):  # batch 0 compiles both samplers
        tasks = curriculum.tasks(state, 1, np.random.default_rng([cfg.train.seed, b]), cfg.rl.rollout.prompts_per_step)
        for name, rcfg in rcfgs.items():
            t0 = time.time()
            traj = rollout(model, tok, tasks, rcfg, seed=b, version=0)
            if b:
                times[name].append(time.time() - t0 - traj.verify_s)
                if name == "plain":
                    lengths.append(np.asarray(traj.lengths))
    lens = np.concatenate(lengths)
    stats = {"mean": float(lens.mean()), "p50": float(np.median(lens)), "p90": float(np.quantile(lens, 0.9)),
             "max": int(lens.max()), "share_at_max": float(np.mean(lens >= max_new_tokens))}
    out = {k: float(np.sum(v)) for k, v in times.items()}
    print(f"response lengths over {lens.size} samples: {stats}")
    print(f"generate seconds over {batches} batches of {cfg.rl.rollout.prompts_per_step} x "
          f"{cfg.rl.rollout.group_size}: plain {out['plain']:.2f}, refill {out['refill']:.2f} "
          f"(slots {cfg.rl.rollout.refill_slots or 'half the rows'})")
    return {"seconds": out, "lengths": stats, "per_batch": times}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--max-staleness", type=int, default=1)
    ap.add_argument("--refill", action="store_true", help="measure slot refill's generation time instead")
    ap.add_argument("--sft-steps", type=int, default=150, help="--refill: cold-start SFT steps of the policy")
    ap.add_argument("--batches", type=int, default=8, help="--refill: timed rollout batches per sampler")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="--refill: rl.rollout.max_new_tokens")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.refill:
        r = measure_refill(args.overrides, args.sft_steps, args.batches, args.max_new_tokens)
        plain, refill = r["seconds"]["plain"], r["seconds"]["refill"]
        print(json.dumps({"benchmark": "rl_refill_generate", "ours": round(refill, 3), "peer": round(plain, 3),
                          "unit": "s generating (ours: rl.rollout.refill=true, peer: plain sampler)",
                          "ratio": round(plain / max(refill, 1e-9), 3), "goal": "refill faster on long tails (> 1)",
                          "batches": args.batches, "lengths": r["lengths"]}))
        return
    r = measure(args.overrides, args.steps, args.max_staleness)
    a, s = r["async"]["trainer_idle_fraction"], r["sync"]["trainer_idle_fraction"]
    print(json.dumps({"benchmark": "rl_async_vs_sync_idle", "ours": round(a, 4), "peer": round(s, 4),
                      "unit": "trainer idle fraction (ours: async, peer: sync)", "ratio": round(s / max(a, 1e-9), 3),
                      "goal": "async idle <= 0.5 x sync idle (ratio >= 2); staleness <= bound", "steps": args.steps,
                      "detail": r}))


if __name__ == "__main__":
    main()
