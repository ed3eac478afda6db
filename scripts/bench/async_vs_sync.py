"""Trainer idle fraction, async vs sync RL on the same run (issue 8: async idle <= half of sync's).

The run: the quickstart's RL stage (experiments/conf/experiment/quickstart.yaml: tiny Qwen2-style model, 32 prompts
x 8 samples of two-digit addition, 6 new tokens, GRPO) for --steps steps from the same initial weights, once with
rl.mode=sync and once with rl.mode=async (rl.max_staleness=1), no checkpoints (no sync barriers). Idle = the
loop's wall time outside train steps (sync: generating + verifying + batch prep; async: waiting for the producer
+ batch prep), first step (compilation) left out: `rlpt.pipeline.rl.idle_fraction`. Staleness is asserted
per step inside run_rl and checked again here. On 2 shared CPU cores generation and training compete for the same
cores, so async mostly hides generation rather than saving wall time; s_per_step is printed for both.
Usage: python scripts/bench/async_vs_sync.py [--steps 30] [--sft-steps 0] [overrides ...]
The last stdout line is one JSON object (ratio = sync idle / async idle; > 1: async idles less).
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--max-staleness", type=int, default=1)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    r = measure(args.overrides, args.steps, args.max_staleness)
    a, s = r["async"]["trainer_idle_fraction"], r["sync"]["trainer_idle_fraction"]
    print(json.dumps({"benchmark": "rl_async_vs_sync_idle", "ours": round(a, 4), "peer": round(s, 4),
                      "unit": "trainer idle fraction (ours: async, peer: sync)", "ratio": round(s / max(a, 1e-9), 3),
                      "goal": "async idle <= 0.5 x sync idle (ratio >= 2); staleness <= bound", "steps": args.steps,
                      "detail": r}))


if __name__ == "__main__":
    main()
