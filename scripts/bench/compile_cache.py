"""What JAX's persistent compilation cache saves: the same `python -m rlpt.train` command run twice against a fresh
cache folder; the first run compiles and fills the cache, the second reads it.

    python scripts/bench/compile_cache.py [--steps 20] [overrides ...]

Both runs are real CLI processes (the README's command with runtime.compilation_cache pointed at a new folder).
Compile time is what the runs' summaries report (`compile_s`: time inside XLA compilation or cache reads, from
JAX's monitoring events), so data, training and evaluation do not blur it; wall times are printed too.
The last line is the JSON result: ours = the second run's compile_s, peer = the first (cold) run's,
ratio = peer / ours (goal >= 3).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(overrides: list[str], out_dir: str, cache: str) -> tuple[dict, float]:
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "rlpt.train", *overrides, f"train.out_dir={out_dir}",
                           f"runtime.compilation_cache={cache}"], cwd=REPO, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        sys.exit(f"rlpt.train failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="train.steps of each run")
    ap.add_argument("overrides", nargs="*", default=["experiment=sft_tiny"], help="rlpt.train overrides")
    args = ap.parse_args()
    overrides = [*args.overrides, f"train.steps={args.steps}"]
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        (cold, cold_wall), (warm, warm_wall) = (run(overrides, os.path.join(tmp, name), cache)
                                                for name in ("first", "second"))
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
    for name, s, wall in (("first (cold)", cold, cold_wall), ("second (cached)", warm, warm_wall)):
        print(f"{name:>16}: compile {s['compile_s']:.2f} s, cache hits {s['compile_cache_hits']}, misses "
              f"{s['compile_cache_misses']}; run {s['wall_s']:.1f} s, process {wall:.1f} s")
    print(f"cache folder: {size / 2**20:.1f} MiB")
    print(json.dumps({"benchmark": "compile_cache", "ours": warm["compile_s"], "peer": cold["compile_s"],
                      "unit": "s compiling", "ratio": round(cold["compile_s"] / max(warm["compile_s"], 1e-9), 2),
                      "goal": ">= 3", "command": " ".join(overrides), "wall_first_s": round(cold_wall, 1),
                      "wall_second_s": round(warm_wall, 1), "cache_mib": round(size / 2**20, 2)}))


if __name__ == "__main__":
    main()
