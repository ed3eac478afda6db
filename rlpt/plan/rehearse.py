"""The rehearsal: compile a stage's programs for a target, read what the compiler says, judge fit and sharding."""
import dataclasses
import logging
import os
import re
import tempfile
import time

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rlpt.models import Model
from rlpt.models.config import resolved_remat
from rlpt.models.ops import compiling_for, resolved_ops
from rlpt.parallel import axis_rules, make_mesh
from rlpt.parallel.rules import recording_unsplit
from rlpt.plan import analyze
from rlpt.plan.chips import parse_target, target_devices
from rlpt.plan.programs import (
    Program,
    decode_state,
    sampler_programs,
    sds,
    train_program,
    with_shardings,
)
from rlpt.plan.report import advice
from rlpt.sampling import engine

log = logging.getLogger(__name__)


def compile_program(prog: Program, ctx: dict) -> tuple[dict, object]:
    """Lower and compile one program; its memory, cost, collectives, largest buffers, and the buffers left whole
    on a mesh axis (`sharding_check`).

    For TPU the compile writes XLA's dump (optimized HLO text, buffer report) to a scratch folder: libtpu 0.0.51
    fails to read some compiled modules back from their proto ("async-update instruction should have 1 operands
    but sees 3"), and the dump's memory-usage report names the largest allocations."""
    t0 = time.time()
    # A trace that jit's cache answers does not call `constrain` again: clear it so every fallback is recorded.
    jax.clear_caches()
    with recording_unsplit() as traced:
        lowered = prog.fn.lower(*prog.args, **prog.kwargs)
    records = ctx["built"] + traced
    with tempfile.TemporaryDirectory() as folder:
        options = {"xla_dump_to": folder, "xla_dump_hlo_as_text": True, "xla_dump_hlo_pass_re": "^$"}
        try:
            compiled = lowered.compile(compiler_options=options if ctx["platform"] == "tpu" else None)
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            res = compile_oom(prog, ctx, str(e), time.time() - t0, records)
            # No optimized HLO: the largest values of the program as traced (global shapes, before partitioning).
            res["largest_values"] = [dict(v, scope="global") for v in
                                     analyze.largest_values(lowered.as_text(dialect="hlo"), ctx["plan"].top_buffers)]
            return res, None
        compile_s = time.time() - t0
        hlo, allocations = dumped(folder) if ctx["platform"] == "tpu" else (compiled.as_text(), [])
    mem, cost = analyze.memory(compiled), analyze.cost(compiled)
    resident = analyze.named_leaves(prog.resident, "resident")
    resident_bytes = sum(analyze.per_device_bytes(x) for _, x in resident)
    total = mem["total"] + resident_bytes
    n, plan = ctx["devices"], ctx["plan"]
    outputs = with_shardings(compiled.out_info, compiled.output_shardings)
    inputs, outs = analyze.named_leaves(prog.args, "in"), analyze.named_leaves(outputs, "out")
    replicated, unsplit = sharding_check(inputs, outs, records, ctx)
    # XLA's cost analysis counts a loop body once (a layer scan: one layer): FLOPs are the HLO's matmuls (dots and
    # convolutions, which are nearly all of a step's FLOPs), each times the trips of the loops around it.
    per_device, _ = analyze.matmul_flops(hlo)
    flops = per_device * n
    res = {
        "program": prog.name, "compile_s": round(compile_s, 2),
        "memory": mem | {"resident": resident_bytes, "total_with_resident": total},
        "hbm_per_device_bytes": total, "fits": total <= plan.usable_fraction * ctx["capacity"],
        "headroom_bytes": int(plan.usable_fraction * ctx["capacity"]) - total,
        "flops_per_device": per_device, "flops": flops, "xla_cost_flops_per_device": cost["flops"],
        "analytic_flops": prog.flops,
        "flops_vs_analytic": flops / prog.flops if prog.flops else None, "analytic_formula": prog.flops_formula,
        "bytes_accessed_per_device": cost["bytes_accessed"],
        "step_s_at_peak": per_device / ctx["peak"],
        "step_s_at_hbm_bandwidth": cost["bytes_accessed"] / ctx["bw"],
        "collectives": analyze.collectives(hlo),
        "largest_inputs": analyze.largest_inputs(inputs + resident, plan.top_buffers),
        "largest_values": analyze.largest_values(hlo, plan.top_buffers),
        "largest_allocations": allocations[:plan.top_buffers],
        "input_copies": analyze.input_copies(hlo, 2**20),
        "replicated": replicated,
        "unsplit": unsplit,
    }
    return res, compiled


def sharding_check(inputs, outputs, records, ctx) -> tuple[list[dict], list[dict]]:
    """(buffers whole on a mesh axis one of their dimensions divides, buffers `logical_spec` left whole on a mesh
    axis their dimension does not divide) at or above plan.replication_mb per device; both empty when it is off.
    An output laid out as an input (the donated state) is that input again: the second list counts it once."""
    plan = ctx["plan"]
    if plan.replication_mb <= 0:
        return [], []
    args = (ctx["mesh"], int(plan.replication_mb * 2**20), tuple(plan.replication_ignore))
    layouts = {(x.shape, x.dtype, x.sharding) for _, x in inputs}
    new = [(k, x) for k, x in outputs if (x.shape, x.dtype, x.sharding) not in layouts]
    return (analyze.replicated_buffers(inputs + outputs, *args),
            analyze.unsplit_buffers(inputs + new, records, *args))


def dumped(folder: str) -> tuple[str, list[str]]:
    """(optimized HLO text, the largest allocations of XLA's memory-usage report) of the jit in a dump folder."""
    def largest(suffix):
        names = [f for f in os.listdir(folder) if ".jit_" in f and f.endswith(suffix)]
        if not names:
            return None
        with open(os.path.join(folder, max(names, key=lambda f: os.path.getsize(os.path.join(folder, f))))) as f:
            return f.read()

    hlo = largest(".after_optimizations.txt")
    if hlo is None:
        raise RuntimeError(f"no optimized HLO in XLA's dump ({sorted(os.listdir(folder))[:5]})")
    report = largest(".after_optimizations-memory-usage-report.txt") or ""
    rows = [ln.strip() for ln in report.splitlines() if re.match(r"\s*[0-9.]+[KMG]?i?B\(", ln)]
    return hlo, rows


def _gib_in(text: str, what: str) -> int | None:
    m = re.search(rf"{what} \(([0-9.]+)([KMGT])\)", text)
    return int(float(m.group(1)) * 2 ** (10 * "KMGT".index(m.group(2)) + 10)) if m else None


def compile_oom(prog: Program, ctx: dict, error: str, compile_s: float, records: list[dict]) -> dict:
    """The result for a program the TPU compiler refused because it does not fit (CompileTimeHbmOom): the
    temporaries it reports, the inputs' per-device bytes, the analytic FLOPs; no HLO to read collectives from."""
    named = analyze.named_leaves(prog.args, "in")
    resident = analyze.named_leaves(prog.resident, "resident")
    args = sum(analyze.per_device_bytes(x) for _, x in named)
    resident_bytes = sum(analyze.per_device_bytes(x) for _, x in resident)
    temps = _gib_in(error, "HLO temporaries") or 0
    total = args + temps + resident_bytes
    n, plan = ctx["devices"], ctx["plan"]
    per_device = prog.flops / n
    replicated, unsplit = sharding_check(named, [], records, ctx)
    return {
        "program": prog.name, "compile_s": round(compile_s, 2),
        "compile_error": error.strip().splitlines()[0][:500],
        "memory": {"arguments": args, "outputs": 0, "temporaries": temps, "aliased": 0, "code": 0,
                   "total": args + temps, "resident": resident_bytes, "total_with_resident": total},
        "hbm_per_device_bytes": total, "fits": False,
        "headroom_bytes": int(plan.usable_fraction * ctx["capacity"]) - total,
        "flops_per_device": per_device, "flops": prog.flops, "xla_cost_flops_per_device": None,
        "analytic_flops": prog.flops, "flops_vs_analytic": None,
        "analytic_formula": prog.flops_formula + " (the compiler refused the program: FLOPs are the analytic count)",
        "bytes_accessed_per_device": 0.0, "step_s_at_peak": per_device / ctx["peak"], "step_s_at_hbm_bandwidth": 0.0,
        "collectives": [], "largest_inputs": analyze.largest_inputs(named + resident, plan.top_buffers),
        "largest_values": [], "input_copies": [], "replicated": replicated, "unsplit": unsplit,
    }


def decode_weights_of(params, cfg):
    """The weights the decode loop reads (`rlpt.sampling.engine.decode_weights`) for abstract sharded params. Off
    CPU they are the params themselves, cast once to the compute dtype when stored wider (the shardings are the
    params'); the CPU-only feature-major layout is not planned (cpu:N targets plan the plain params)."""

    if resolved_ops(cfg) == "xla_cpu":
        return params
    shapes = jax.eval_shape(lambda p: engine.decode_weights(Model(cfg, p)), params)
    if jax.tree.structure(shapes) != jax.tree.structure(params):
        raise ValueError("decode_weights changed the parameter tree off CPU; the rehearsal cannot place it")
    return jax.tree.map(lambda s, p: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=p.sharding), shapes, params)


def rehearsal_context(cfg):
    """(target, its devices, the mesh over them, `compile_program`'s context: platform, device count, mesh, plan
    settings, per-device HBM capacity, peak FLOP/s and HBM bandwidth) for cfg.target and cfg.mesh."""
    target = parse_target(cfg.target)
    devices = target_devices(target)
    mesh = make_mesh(cfg.mesh, devices)
    per_chip = max(1, len(devices) // target.chips)  # v4's topology has one device per TensorCore
    ctx = {"platform": target.kind, "devices": len(devices), "mesh": mesh, "plan": cfg.plan,
           "capacity": target.chip.hbm_bytes // per_chip,
           "peak": target.chip.peak_flops / per_chip, "bw": target.chip.hbm_bw / per_chip}
    return target, devices, mesh, ctx


def rehearse(cfg) -> dict:
    """Compile cfg.stage's train step (and with cfg.plan.sampler the sampler's prefill and decode loop) for
    cfg.target on cfg.mesh; returns the summary dict (`fits`, per-program results, advice)."""
    t0 = time.time()
    target, devices, mesh, ctx = rehearsal_context(cfg)
    model_cfg = cfg.model
    programs = []
    # Programs are built outside the mesh context (optax evaluates init eagerly for the state's shardings, and
    # nothing may run on a topology's devices); they are lowered and compiled inside it.
    with compiling_for(target.kind), axis_rules(cfg.mesh.rules), recording_unsplit() as ctx["built"]:
        train = train_program(cfg, model_cfg, mesh)
        with jax.set_mesh(mesh):
            res, _ = compile_program(train, ctx)
        programs.append(res)
        if cfg.plan.sampler:
            state = train.args[0]
            # Alive while sampling: the train state beside the policy's parameters (the sampler reads those).
            keep = dataclasses.replace(state, params={}) if cfg.lora.rank == 0 else state
            prefill, decode = sampler_programs(cfg, model_cfg, mesh, keep)
            if cfg.plan.prefill:  # the decode loop takes the state as prefill leaves it
                with jax.set_mesh(mesh):
                    res, compiled = compile_program(prefill, ctx)
                programs.append(res)
                state = (decode_state(prefill, mesh) if compiled is None
                         else with_shardings(compiled.out_info, compiled.output_shardings))
            else:
                state = decode_state(prefill, mesh)
            scalar = sds((), jnp.int32, NamedSharding(mesh, P()))
            decode.args = (decode_weights_of(prefill.args[0], decode.kwargs["cfg"]), state, scalar, scalar)
            with jax.set_mesh(mesh):
                res, _ = compile_program(decode, ctx)
            programs.append(res)
    main = programs[0]
    summary = {
        "fits": all(p["fits"] for p in programs),
        "sharding_ok": not any(p["replicated"] or p["unsplit"] for p in programs),
        "hbm_per_device_bytes": max(p["hbm_per_device_bytes"] for p in programs),
        "hbm_capacity_bytes": ctx["capacity"],
        "usable_fraction": cfg.plan.usable_fraction,
        "flops_per_step": main["flops"],
        "step_s_at_peak": main["step_s_at_peak"],
        "target": target.spec, "topology": target.topology, "chip": target.chip.name, "chip_source": target.chip.source,
        "devices": len(devices), "mesh": dict(mesh.shape), "stage": cfg.stage,
        "model": {"family": model_cfg.family, "params": model_cfg.num_params(), "layers": model_cfg.num_layers,
                  "hidden": model_cfg.hidden_size, "vocab": model_cfg.vocab_size,
                  "param_dtype": model_cfg.param_dtype, "compute_dtype": model_cfg.compute_dtype,
                  "remat": resolved_remat(model_cfg)},
        "programs": programs,
        "wall_s": round(time.time() - t0, 1),
    }

    summary["advice"] = advice(cfg, summary)
    return summary
