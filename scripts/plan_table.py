"""The smallest TPU slice each model preset fits on for issue #29's workloads, by compile-only rehearsal.

For each preset x workload it runs `python -m rlpt.plan` (under `nice -n 10`, one compile at a time) on one slice
after another and keeps the smallest slice whose programs fit. The search starts at a slice estimated from the
parameter count and the tokens per chip; when that fits it tries the next smaller slice (one compile), and keeps
going down while they fit, so the "smallest" is checked; when it does not fit (or the compiler fails on it) it goes
up until one does. libtpu 0.0.51 aborts on some models for `tpu:v5p-8` (planned as v5p:1x2x2); such a slice is
rehearsed again as Cloud's v5p-8 topology, `tpu:v5p:2x2x1`.

Workloads (fixed shapes; always `model.remat=full` and `mesh=fsdp` over the whole slice):
  sft   32 rows x 8192 tokens: stage=sft data.seq_len=8192 data.batch_size=32 (the train step only:
        plan.sampler=false)
  grpo  16 prompts x 8 samples of 1024 + 3072 tokens: stage=rl rl.rollout.prompts_per_step=16
        rl.rollout.group_size=8 rl.rollout.max_prompt_len=1024 rl.rollout.max_new_tokens=3072 (the RL update,
        and the sampler's prefill and decode loop for those 128 rows with the train state resident)
  dpo   32 pairs x 2048 tokens: stage=dpo pref.batch_size=32 pref.max_len=2048 (the train step only)
`optim.grad_accum` gives each micro-batch one row (SFT, GRPO) or one pair (DPO) per chip: grad_accum = rows / chips,
within what the batch allows (a power of two dividing 32 rows / pairs; for GRPO dividing the 16 prompts, as
`rl.exec.share_prefix` keeps groups whole), so at most 16 for GRPO (2 rows per chip on 4 chips), and 1 when the
slice has more chips than rows. Only when that does not fit and a larger grad_accum still leaves each chip at least
one row does it try that before a larger slice. Chips: v5e for models up to 1.5B parameters, v5p above.

Every run's last JSON line, exit status and wall time are appended to runs/plan_table/results.jsonl; a restart
skips runs already there.

    python scripts/plan_table.py                       # all (small presets first)
    python scripts/plan_table.py --only qwen2_5_0_5b   # one preset (or a workload: --only sft, or qwen2_5_7b/dpo)
    python scripts/plan_table.py --markdown            # the table from results.jsonl
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

from rlpt.config.plan_schema import PlanConfig
from rlpt.config.schema import model_preset
from rlpt.plan.chips import CHIPS, CORES_IN_NAME, SIZES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join("runs", "plan_table")
RESULTS = os.path.join(OUT, "results.jsonl")
GiB = 2**30

# Small presets first, so the cheap rows finish before the large compiles.
PRESETS = ("qwen2_5_0_5b", "llama3_2_1b", "qwen2_5_1_5b", "qwen2_5_7b", "llama3_1_8b", "qwen3_8b", "qwen2_5_32b",
           "llama3_1_70b")
NAMES = {"qwen2_5_0_5b": "Qwen2.5-0.5B", "llama3_2_1b": "Llama-3.2-1B", "qwen2_5_1_5b": "Qwen2.5-1.5B",
         "qwen2_5_7b": "Qwen2.5-7B", "llama3_1_8b": "Llama-3.1-8B", "qwen3_8b": "Qwen3-8B",
         "qwen2_5_32b": "Qwen2.5-32B", "llama3_1_70b": "Llama-3.1-70B"}
WORKLOADS = {
    # rows: rows (pairs) per optimizer step; accum_base: grad_accum must divide it; seq: tokens per row.
    "sft": {"overrides": ["stage=sft", "data.seq_len=8192", "data.batch_size=32", "plan.sampler=false"], "rows": 32,
            "accum_base": 32, "label": "SFT 32 x 8k"},
    "grpo": {"overrides": ["stage=rl", "rl.rollout.prompts_per_step=16", "rl.rollout.group_size=8",
                           "rl.rollout.max_prompt_len=1024", "rl.rollout.max_new_tokens=3072"],
             "rows": 128, "accum_base": 16, "label": "GRPO 16x8 of 4k"},
    "dpo": {"overrides": ["stage=dpo", "pref.batch_size=32", "pref.max_len=2048", "plan.sampler=false"], "rows": 32,
            "accum_base": 32, "label": "DPO 32 pairs x 2k"},
}
COMMON = ["model.remat=full", "mesh=fsdp"]
USABLE = PlanConfig.usable_fraction  # the planner's default share of HBM a program may use


def family(preset: str) -> str:
    return "v5e" if model_preset(preset).num_params() <= 1.6e9 else "v5p"


def chips_of(gen: str, size: int) -> int:
    """Chips in slice `<gen>-<size>` (rlpt.plan.chips: v5p names count TensorCores, v5e names chips)."""
    return size // CORES_IN_NAME[gen]


def accum_options(workload: str, chips: int) -> list[int]:
    """grad_accum values for a slice, first the one giving each chip one row per micro-batch, then larger ones
    that still leave every chip at least one row (a micro-batch of fewer rows than chips is replicated)."""
    w = WORKLOADS[workload]
    B, base = w["rows"], w["accum_base"]
    allowed = [a for a in (1, 2, 4, 8, 16, 32, 64) if a <= base and base % a == 0]
    first = next((a for a in allowed if B // a <= chips), allowed[-1])
    return [first] + [a for a in allowed if a > first and B // a >= chips and (B // a) % chips == 0]


def estimate(preset: str, workload: str, chips: int) -> float:
    """Rough per-chip bytes (a starting point for the search only): f32 master weights, two Adam moments and f32
    gradients (16 B/param) over the chips, plus per-token activations under remat (the layer checkpoints, one
    layer's recompute; the LM head runs in chunks, `model.logits_chunk`) for one micro-batch, plus 0.5 GiB."""
    m = model_preset(preset)
    A = accum_options(workload, chips)[0]
    w = WORKLOADS[workload]
    rows = w["rows"] // A
    rows_per_chip = rows / chips if rows % chips == 0 else rows
    per_token = 4 * m.num_layers * m.hidden_size + 48 * m.intermediate_size + 16 * m.hidden_size
    tokens = rows_per_chip * {"sft": 8192, "dpo": 2 * 2048, "grpo": 4096}[workload]
    train = 16 * m.num_params() / chips + tokens * per_token + GiB / 2
    if workload == "grpo":  # the sampler's KV cache, 128 rows x 4097 slots, beside the resident state
        cache = 2 * m.num_layers * 2 * m.num_kv_heads * m.head_dim * 4097 * 128 / chips
        return max(train, 14 * m.num_params() / chips + cache)
    return train


def run_name(preset: str, workload: str, target: str, accum: int) -> str:
    return f"{preset}_{workload}_{target.replace(':', '-')}_a{accum}"


def load_results() -> dict:
    out = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    out[r["name"]] = r
    return out


def rehearse(preset: str, workload: str, gen: str, size: int, accum: int, done: dict, timeout_s: float) -> dict:
    """One `python -m rlpt.plan` run (cached in results.jsonl): its JSON line, exit status and wall time."""
    target = f"tpu:{gen}-{size}"
    name = run_name(preset, workload, target, accum)
    if name in done:
        return done[name]
    args = ([f"model={preset}"] + WORKLOADS[workload]["overrides"] + [f"target={target}"] + COMMON
            + [f"optim.grad_accum={accum}", f"plan.out_dir={OUT}/{name}"])
    cmd = ["nice", "-n", "10", sys.executable, "-m", "rlpt.plan"] + args
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd[3:])}", flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        rc, timed_out = proc.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the rehearsal this script started, and its children
        stdout, stderr = proc.communicate()
        rc, timed_out = None, True
    wall = time.time() - t0
    summary = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    detail = {}
    if summary is not None:  # the per-program memory split from the rehearsal's own JSON file
        base = os.path.join(ROOT, OUT, name)
        files = [f for f in os.listdir(base) if f.endswith(".json")] if os.path.isdir(base) else []
        if files:
            with open(os.path.join(base, files[0])) as f:
                full = json.load(f)
            detail = {p["program"]: {"memory": p["memory"], "compile_s": p["compile_s"],
                                     "compile_error": p.get("compile_error"),
                                     "replicated": [r["name"] for r in p["replicated"]],
                                     "largest_values": [v["shape"] for v in p["largest_values"][:3]]}
                      for p in full["programs"]}
    rec = {"name": name, "preset": preset, "workload": workload, "target": target, "chips": chips_of(gen, size),
           "grad_accum": accum, "command": "python -m rlpt.plan " + " ".join(args), "rc": rc,
           "timed_out": timed_out, "wall_s": round(wall, 1), "summary": summary, "programs": detail,
           "stderr_tail": None if summary is not None and rc in (0, 1) else stderr[-3000:],
           "stderr_fit": [ln for ln in stderr.splitlines() if ln.startswith(("DOES NOT FIT", "REPLICATED"))]}
    os.makedirs(os.path.join(ROOT, OUT), exist_ok=True)
    with open(os.path.join(ROOT, RESULTS), "a") as f:
        f.write(json.dumps(rec, default=float) + "\n")
    done[name] = rec
    fits = summary["fits"] if summary else None
    hbm = f"{summary['hbm_per_device_bytes'] / GiB:.1f} GiB" if summary else "-"
    print(f"    rc={rc} fits={fits} hbm={hbm} wall={wall:.0f}s", flush=True)
    return rec


def fits(rec: dict) -> bool | None:
    """True / False from the rehearsal; None when it produced no result (an error or the time limit)."""
    return None if rec["summary"] is None else bool(rec["summary"]["fits"])


def at_slice(preset, workload, gen, size, done, timeout_s):
    """Rehearse a slice with its grad_accum options in increasing order, up to the first that fits."""
    rec = None
    for accum in accum_options(workload, chips_of(gen, size)):
        rec = rehearse(preset, workload, gen, size, accum, done, timeout_s)
        if fits(rec) is not False:
            return rec
    return rec


def search(preset: str, workload: str, done: dict, timeout_s: float) -> None:
    gen = family(preset)
    sizes = SIZES[gen]
    cap = USABLE * CHIPS[gen].hbm_bytes
    start = next((i for i, s in enumerate(sizes) if estimate(preset, workload, chips_of(gen, s)) <= 0.85 * cap),
                 len(sizes) - 1)
    i = start
    rec = at_slice(preset, workload, gen, sizes[i], done, timeout_s)
    if fits(rec):  # go down while the smaller slice fits (a smaller one without a result ends it, marked so)
        while i > 0:
            rec = at_slice(preset, workload, gen, sizes[i - 1], done, timeout_s)
            if not fits(rec):
                return
            i -= 1
    else:  # does not fit, or the compiler failed on it: go up to the first that fits (not past the time limit)
        while i + 1 < len(sizes) and not rec["timed_out"]:
            i += 1
            rec = at_slice(preset, workload, gen, sizes[i], done, timeout_s)
            if fits(rec):
                return


def selected(only: list[str] | None) -> list[tuple[str, str]]:
    cells = [(p, w) for p in PRESETS for w in WORKLOADS]
    # the 70B GRPO compile is the longest: last
    cells.sort(key=lambda c: (c == ("llama3_1_70b", "grpo"), PRESETS.index(c[0])))
    if not only:
        return cells
    keep = []
    for p, w in cells:
        if any(o in (p, w, f"{p}/{w}") for o in only):
            keep.append((p, w))
    return keep


# ---- the table ----

def gib(x) -> str:
    return f"{x / GiB:.1f}"


def cell_rows(preset: str, workload: str, done: dict) -> list[dict]:
    return sorted((r for r in done.values() if r["preset"] == preset and r["workload"] == workload),
                  key=lambda r: (r["chips"], r["grad_accum"]))


def mesh_str(mesh: dict) -> str:
    return " x ".join(f"{k}{v}" for k, v in mesh.items() if v > 1) or "1 device"


def markdown(done: dict, only) -> str:
    head = ("| model | workload | smallest slice (chips) | mesh | grad_accum | HBM per chip (GiB) / capacity | "
            "train step FLOPs | predicted step s at peak | next smaller slice (what it needed, GiB) | "
            "rehearsal wall s |")
    lines = [head, "|" + "---|" * 10]
    notes = []
    for preset, workload in selected(only):
        rows = cell_rows(preset, workload, done)
        label = WORKLOADS[workload]["label"]
        lead = f"| {NAMES[preset]} | {label} |"
        if not rows:
            lines.append(lead + " not run | | | | | | | |")
            continue
        ok = [r for r in rows if fits(r)]
        errors = [r for r in rows if fits(r) is None]
        for r in errors:
            why = "time limit" if r["timed_out"] else f"exit {r['rc']}"
            err = (r["stderr_tail"] or "").strip().splitlines()
            err = [ln for ln in err if "Check failed" in ln or "Error" in ln] or err[-1:]
            # glog's prefix (severity, time, thread) differs from run to run
            msg = re.sub(r"^[FEWI]\d{4} [0-9:.]+\s+\d+ ", "", err[0].strip())[:300] if err else ""
            notes.append(f"{NAMES[preset]} on {r['target']}: no result ({why})" + (f": `{msg}`" if msg else ""))
        for r in rows:
            if r["summary"] and not r["summary"]["sharding_ok"]:
                notes.append(f"{NAMES[preset]} {label} on {r['target']}: replicated buffer(s): "
                             + "; ".join(r["stderr_fit"]))
        if not ok:
            tried = ", ".join(f"{r['target']} {gib(r['summary']['hbm_per_device_bytes'])}" if r["summary"]
                              else f"{r['target']} (no result)" for r in rows)
            lines.append(lead + f" none tried fits | | | | | | {tried} | "
                         f"{sum(r['wall_s'] for r in rows):.0f} |")
            continue
        best = min(ok, key=lambda r: (r["chips"], r["grad_accum"]))
        s = best["summary"]
        smaller = [r for r in rows if r["chips"] < best["chips"]]
        if smaller:
            below = max(r["chips"] for r in smaller)
            cands = [r for r in smaller if r["chips"] == below]
            parts = []
            for r in cands:
                need = gib(r["summary"]["hbm_per_device_bytes"]) if r["summary"] else "no result"
                parts.append(f"{r['target']} ({r['chips']}), grad_accum {r['grad_accum']}: {need}")
            nxt = "; ".join(parts)
        else:
            gen = family(preset)
            nxt = "none smaller" if best["chips"] == chips_of(gen, SIZES[gen][0]) else "not tried"
        flag = "" if s["sharding_ok"] else " (replicated buffer)"
        refused = [p for p, d in best["programs"].items() if d.get("compile_error")]
        lines.append(f"{lead} {best['target']} ({best['chips']}){flag} | {mesh_str(s['mesh'])} | "
                     f"{best['grad_accum']} | "
                     f"{gib(s['hbm_per_device_bytes'])} / {gib(s['hbm_capacity_bytes'])} | "
                     f"{s['flops_per_step']:.2e} | {s['step_s_at_peak']:.2f} | {nxt} | "
                     f"{best['wall_s']:.0f} |")
        if refused:
            notes.append(f"{NAMES[preset]} {label}: compiler refused {refused}")
    counts = {}
    for n in notes:  # one line per distinct note, with the workloads it came from counted
        counts[n] = counts.get(n, 0) + 1
    notes = [n + (f" ({k} workloads)" if k > 1 else "") for n, k in counts.items()]
    return "\n".join(lines) + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "") + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="presets, workloads (sft grpo dpo) or preset/workload")
    ap.add_argument("--markdown", action="store_true", help="print the table from results.jsonl and exit")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per rehearsal (70B GRPO: --timeout-70b)")
    ap.add_argument("--timeout-70b", type=float, default=900, help="seconds per Llama-3.1-70B GRPO rehearsal")
    a = ap.parse_args()
    os.chdir(ROOT)
    done = load_results()
    if a.markdown:
        print(markdown(done, a.only), end="")
        return
    for preset, workload in selected(a.only):
        t = a.timeout_70b if (preset, workload) == ("llama3_1_70b", "grpo") else a.timeout
        print(f"== {preset} {workload}", flush=True)
        search(preset, workload, done, t)


if __name__ == "__main__":
    main()
