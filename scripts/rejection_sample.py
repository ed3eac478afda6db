"""Rejection-sampling SFT data from a checkpoint: N samples per train-seed task, keep the verified, dedupe, write JSONL.

Usage: python scripts/rejection_sample.py --checkpoint runs/quickstart --domains arith/add,arith/sub --tasks 64 \
           --n 8 --out runs/rs/sft.jsonl [--tier 1] [--max-new-tokens 16] [--temperature 1.0] [--keep-top 2] [--seed 0]
The checkpoint is anything `python -m rlpt.eval checkpoint=...` reads (an HF folder or a run folder). The output
feeds SFT as a JSONL source (data.sources.<name>.kind=jsonl, path=...). The last stdout line is one JSON object.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--domains", default="arith/add")
    ap.add_argument("--tasks", type=int, default=64, help="tasks per domain (train seeds)")
    ap.add_argument("--tier", type=int, default=None, help="difficulty tier (default: each domain's first)")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--keep-top", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import numpy as np

    from rlpt.eval.checkpoint import load_policy
    from rlpt.preference.rejection import generate_sft_data
    from rlpt.tasks import get_domain, resolve

    t0 = time.time()
    model, tok, where = load_policy(a.checkpoint)
    rng = np.random.default_rng(a.seed)
    tasks = []
    for name in resolve(a.domains.split(",")):
        dom = get_domain(name)
        tier = dom.tiers[0] if a.tier is None else a.tier
        if tier not in dom.tiers:
            raise ValueError(f"--tier {tier} is not a tier of {name}: {dom.tiers}")
        tasks += [dom.generate(int(s), tier) for s in rng.choice(1 << 29, a.tasks, replace=False)]
    stats = generate_sft_data(model, tok, tasks, n=a.n, out_path=a.out, seed=a.seed, max_new_tokens=a.max_new_tokens,
                              temperature=a.temperature, keep_top=a.keep_top)
    print(f"{where}: {stats['prompts']} prompts x {a.n} samples -> kept {stats['kept']} rows "
          f"({stats['prompts_with_kept']} prompts), rejected {stats['rejected']}, duplicates "
          f"{stats['duplicates_exact']} exact + {stats['duplicates_normalised']} normalised, failed {stats['failed']}; "
          f"wrote {a.out}")
    print(json.dumps({"script": "rejection_sample", "checkpoint": where, "out": a.out, **stats,
                      "wall_s": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
