"""The rehearsal's report: what to change when a program does not fit, a markdown page, the JSON summary."""
import json
import os

from rlpt.models.config import resolved_remat

GiB = 2**30


def gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def advice(cfg, summary: dict) -> list[str]:
    """Concrete overrides for each program that does not fit or leaves a large buffer replicated."""
    out = []
    cap = summary["hbm_capacity_bytes"] * summary["usable_fraction"]
    mesh = summary["mesh"]
    for p in summary["programs"]:
        m = p["memory"]
        for r in p["replicated"][:3]:
            out.append(f"{p['program']}: {r['name']} ({gib(r['bytes'])} per device) is whole on mesh axis "
                       f"{r['axis']!r}: add a rule mapping one of its logical axes onto {r['axis']!r} "
                       "(mesh.rules), or set that axis to 1")
        for u in p.get("unsplit", [])[:3]:
            out.append(f"{p['program']}: {unsplit_line(u)}")
        copies = p.get("input_copies", [])
        copied = sum(c["bytes"] for c in copies)
        if copied >= min(GiB, 0.25 * p["memory"]["temporaries"]) and copied > 0:
            c = copies[0]
            out.append(f"{p['program']}: {gib(copied)} of its temporaries are copies of its inputs made at entry "
                       f"(e.g. {c['count']} like {c['input']}, {c['from']} -> {c['to']}): it computes on them in "
                       "another layout (or dtype) than they arrive in")
        if p["fits"]:
            continue
        over = p["hbm_per_device_bytes"] - cap
        state = m["arguments"] + m["resident"]
        out.append(f"{p['program']} needs {gib(p['hbm_per_device_bytes'])} per device, {gib(over)} over the usable "
                   f"{gib(cap)}: state and inputs {gib(state)}, temporaries {gib(m['temporaries'])}")
        if state > 0.5 * cap:
            if mesh.get("fsdp", 1) < summary["devices"]:
                out.append("  shard the state over every device: mesh=fsdp (fsdp=-1, data=1)")
            out.append("  smaller state per device: lora.rank=16 (adapters only train), optim=adafactor (factored "
                       "moments), model.param_dtype=bfloat16, or a larger slice (more chips share the state)")
        vocab = f",{cfg.model.vocab_size}]"
        if any(v["shape"].endswith(vocab) for v in p["largest_values"][:2]):
            out.append(f"  the (rows, columns, vocab={cfg.model.vocab_size}) logits are the largest values: fewer rows "
                       "per micro-batch (optim.grad_accum), model.logits_dtype=bfloat16 (half their bytes)")
        if p["program"] in ("train_step", "rl_update", "dpo_step") and m["temporaries"] > 0.3 * cap:
            A = cfg.optim.grad_accum
            if resolved_remat(cfg.model) == "none":
                out.append("  activations: model.remat=full (recompute each layer in the backward pass; ~+33% FLOPs)"
                           " or model.remat=dots_saveable")
            out.append(f"  activations: optim.grad_accum={2 * A} (half the rows per micro-batch; same step)")
            if cfg.stage == "rl" and not cfg.rl.exec.share_prefix:
                out.append("  rl.exec.share_prefix=true (prompts run once per group)")
        if p["program"].startswith("sampler") and m["temporaries"] + m["arguments"] > 0.3 * cap:
            r = cfg.rl.rollout
            out.append(f"  sampler: fewer rows per call (rl.rollout.prompts_per_step={max(1, r.prompts_per_step // 2)}"
                       f"), a shorter cache (rl.rollout.max_new_tokens), or mesh.tensor>1 to split KV heads "
                       "(the cache is rows x KV heads x slots)")
            if r.compute_dtype is None and cfg.model.compute_dtype == "float32":
                out.append("  sampler: rl.rollout.compute_dtype=bfloat16 (half the cache and weights copy)")
    return out


def unsplit_line(u: dict) -> str:
    """One buffer `logical_spec` left whole on a mesh axis: what, why, and what would split it."""
    alike = f" (and {u['count'] - 1} alike)" if u["count"] > 1 else ""
    return (f"{u['name']}{alike} {u['dtype']}{u['shape']} {u['spec']}: {u['bytes'] / 2**20:.1f} MiB per device, "
            f"whole on mesh axis {u['axis']!r} ({u['axis_size']}): dim {u['dim']} ({u['logical']}={u['dim_size']}) "
            f"does not divide by {u['split']}; fix: {u['fix']}")


def markdown(summary: dict, command: str = "") -> str:
    s = summary
    mdl = s["model"]
    lines = [f"# Rehearsal: {mdl['family']} {mdl['params'] / 1e9:.2f}B, stage {s['stage']}, {s['target']}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [f"- topology {s['topology'] or '-'}: {s['devices']} devices of {s['chip']}, mesh {s['mesh']}",
              f"- capacity {gib(s['hbm_capacity_bytes'])} per device (x{s['usable_fraction']} usable); "
              f"source: {s['chip_source']}",
              f"- **fits: {s['fits']}**, sharding check: {'ok' if s['sharding_ok'] else 'REPLICATED BUFFERS'}; "
              f"largest program {gib(s['hbm_per_device_bytes'])} per device",
              f"- train step {s['flops_per_step']:.3e} FLOPs, {s['step_s_at_peak'] * 1e3:.1f} ms at peak", "",
              "| program | args | outputs | temps | aliased | resident | total/device | fits | FLOPs (all devices) "
              "| vs analytic | ms at peak | ms at HBM bw | compile s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in s["programs"]:
        m = p["memory"]
        ratio = f"{p['flops_vs_analytic']:.3f}" if p["flops_vs_analytic"] else "-"
        lines.append(f"| {p['program']} | {gib(m['arguments'])} | {gib(m['outputs'])} | {gib(m['temporaries'])} | "
                     f"{gib(m['aliased'])} | {gib(m['resident'])} | {gib(p['hbm_per_device_bytes'])} | {p['fits']} | "
                     f"{p['flops']:.3e} | {ratio} | {p['step_s_at_peak'] * 1e3:.2f} | "
                     f"{p['step_s_at_hbm_bandwidth'] * 1e3:.2f} | {p['compile_s']} |")
    for p in s["programs"]:
        lines += ["", f"## {p['program']}", "", f"Analytic FLOPs: {p['analytic_formula']}.", "",
                  "| collective | ops in HLO | executions per call | bytes per device per call |", "|---|---|---|---|"]
        lines += [f"| {c['kind']} | {c['ops']} | {c['executions']:.0f} | {c['bytes'] / 2**20:.1f} MiB |"
                  for c in p["collectives"]] or ["| none | | | |"]
        lines += ["", "Largest inputs per device:", ""]
        lines += [f"- {b['name']} {b['dtype']}{b['shape']} {b['spec']}: {b['bytes'] / 2**20:.1f} MiB"
                  for b in p["largest_inputs"]]
        if p.get("largest_allocations"):
            lines += ["", "Largest allocations (XLA's memory-usage report: cumulative; size; offset; values; shapes):",
                      "", "```"] + p["largest_allocations"] + ["```"]
        if p.get("input_copies"):
            lines += ["", "Inputs copied at entry (to another layout or dtype, or a buffer not updated in place; per "
                      "device):", ""]
            lines += [f"- {c['count']} x {c['input']} and alike: {c['from']} -> {c['to']}, {c['bytes'] / 2**20:.1f} MiB"
                      for c in p["input_copies"]]
        lines += ["", "Largest values the program computes (per device):", ""]
        lines += [f"- {v['shape']} ({v['op']}): {v['bytes'] / 2**20:.1f} MiB"
                  + (" (global, before partitioning: the compiler refused the program)" if v.get("scope") else "")
                  for v in p["largest_values"]]
        if p["replicated"]:
            lines += ["", "Replicated buffers:", ""]
            lines += [f"- {r['name']} {r['shape']} {r['spec']}: whole on {r['axis']!r}, {r['bytes'] / 2**20:.1f} MiB"
                      for r in p["replicated"]]
        if p.get("unsplit"):
            lines += ["", "Unsplit dimensions (the rules map them onto a mesh axis their size does not divide):", ""]
            lines += [f"- {unsplit_line(u)}" for u in p["unsplit"]]
    if s["advice"]:
        lines += ["", "## What to change", ""] + [f"- {a}" if not a.startswith("  ") else f"  - {a.strip()}"
                                                  for a in s["advice"]]
    return "\n".join(lines) + "\n"


def write(summary: dict, out_dir: str, name: str, command: str = "") -> tuple[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(summary, f, indent=1, default=float)
    with open(base + ".md", "w") as f:
        f.write(markdown(summary, command))
    return base + ".json", base + ".md"


def failures(summary: dict) -> list[str]:
    """The stderr lines of a rehearsal that fails: each program that does not fit (its largest buffers), the
    buffers whole on a mesh axis one of their dimensions divides, and those a dimension could not be split on."""
    out = []
    for p in summary["programs"]:
        if not p["fits"]:
            big = ", ".join(f"{b['name']} {gib(b['bytes'])}" for b in p["largest_inputs"][:3])
            vals = ", ".join(f"{v['shape']} {gib(v['bytes'])}" for v in p["largest_values"][:3])
            out.append(f"DOES NOT FIT: {p['program']} needs {gib(p['hbm_per_device_bytes'])} per device of "
                       f"{gib(summary['hbm_capacity_bytes'])}; largest inputs: {big}; largest values: {vals}")
    replicated = [f"{p['program']}: {r['name']} on {r['axis']!r}" for p in summary["programs"] for r in p["replicated"]]
    if replicated:
        out.append("REPLICATED: " + "; ".join(replicated))
    out += [f"UNSPLIT: {p['program']}: {unsplit_line(u)}" for p in summary["programs"] for u in p.get("unsplit", [])]
    return out


def last_line(summary: dict) -> str:
    """The JSON line printed last on stdout."""
    keys = ("fits", "sharding_ok", "hbm_per_device_bytes", "hbm_capacity_bytes", "flops_per_step", "step_s_at_peak",
            "target", "stage", "devices", "mesh", "wall_s")
    out = {k: summary[k] for k in keys}
    out["programs"] = {p["program"]: {"hbm_per_device_bytes": p["hbm_per_device_bytes"], "fits": p["fits"],
                                      "flops": p["flops"], "flops_vs_analytic": p["flops_vs_analytic"],
                                      "step_s_at_peak": p["step_s_at_peak"]} for p in summary["programs"]}
    return json.dumps(out, default=float)
