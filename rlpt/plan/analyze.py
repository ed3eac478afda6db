"""What a compiled program says about itself: per-device memory, FLOPs, collectives in its HLO (with their bytes,
counted as often as the loops around them run), the largest buffers, and replicated inputs that could be split."""
import math
import re
from collections import defaultdict

import jax
import numpy as np

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "collective-broadcast")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
                "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}
_SHAPE = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z][\w\-]*)\(")


def memory(compiled) -> dict:
    """Per-device bytes: arguments, outputs, temporaries, aliased (donated inputs reused as outputs), code, total."""
    m = compiled.memory_analysis()
    out = {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
           "temporaries": int(m.temp_size_in_bytes), "aliased": int(m.alias_size_in_bytes),
           "code": int(m.generated_code_size_in_bytes)}
    out["total"] = out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"] + out["code"]
    return out


def cost(compiled) -> dict:
    """Per-device FLOPs and bytes accessed from XLA's cost analysis."""
    c = compiled.cost_analysis()
    c = c[0] if isinstance(c, (list, tuple)) else c
    return {"flops": float(c.get("flops", 0.0)), "bytes_accessed": float(c.get("bytes accessed", 0.0)),
            "transcendentals": float(c.get("transcendentals", 0.0))}


def shape_bytes(text: str) -> int:
    """Bytes of every array shape in an HLO type string (a tuple counts all its parts)."""
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        if dtype in _DTYPE_BYTES:
            total += _DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def _computations(hlo: str) -> dict[str, list[str]]:
    comps, name = {}, None
    for line in hlo.splitlines():
        if name is None:
            m = _COMP.match(line)
            if m and "->" in line:
                name = "ENTRY" if line.startswith("ENTRY") else m.group(1)
                comps[name] = []
        elif line.strip() == "}":
            name = None
        else:
            comps[name].append(line)
    return comps


def _step(body: list[str]) -> int:
    """The counter increment of a loop body (a scalar integer add of a constant that the body's ROOT tuple carries
    on): XLA:TPU unrolls some loops (windowed einsums) and steps by 2; 1 when that is not clear."""
    consts, adds = {}, {}
    for text in body:
        m = re.match(r"\s*%?([\w.\-]+) = [su]32\[\]\S* constant\((\d+)\)", text)
        if m:
            consts[m.group(1)] = int(m.group(2))
        m = re.match(r"\s*%?([\w.\-]+) = [su]32\[\]\S* add\(([^)]*)\)", text)
        if m:
            adds[m.group(1)] = [a.strip().lstrip("%") for a in m.group(2).split(",")]
    root = next((t for t in body if t.lstrip().startswith("ROOT") and " tuple(" in t), "")
    carried = set(re.findall(r"%([\w.\-]+)", root.split(" tuple(", 1)[-1])) if root else set()
    steps = {consts[a] for name, ops in adds.items() if name in carried for a in ops if a in consts}
    return steps.pop() if len(steps) == 1 and min(steps | {1}) > 0 else 1


def _trip_count(line: str, cond: list[str], body: list[str]) -> int:
    """A while loop's trip count: XLA's known_trip_count, else the one integer constant its condition compares
    the counter with, divided by the counter's step (lax.scan and fori_loop count from 0 by 1; XLA's unrolled
    loops by more); 1 when neither says (a data-dependent loop)."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    if known:
        return int(known.group(1))
    consts = {int(c) for text in cond for c in re.findall(r"[su]32\[\]\S* constant\((\d+)\)", text)}
    if len(consts) != 1 or not any("compare(" in t for t in cond):
        return 1
    return -(-consts.pop() // _step(body))


def _multiplicity(comps: dict[str, list[str]]) -> dict[str, float]:
    """How often each computation runs per call: while bodies x their known trip count (1 when unknown),
    called / conditional branches as often as their caller."""
    calls = defaultdict(list)  # caller -> [(callee, times)]
    for name, lines in comps.items():
        for line in lines:
            body = re.search(r"\bbody=%?([\w.\-]+)", line)
            if body:
                cond = re.search(r"\bcondition=%?([\w.\-]+)", line)
                cond_lines = list(comps.get(cond.group(1), [])) if cond else []
                for callee in re.findall(r"\bcalls=%?([\w.\-]+)", "\n".join(cond_lines)):
                    cond_lines += comps.get(callee, [])
                calls[name].append((body.group(1), _trip_count(line, cond_lines, comps.get(body.group(1), []))))
            for key in ("to_apply", "calls", "true_computation", "false_computation"):
                for callee in re.findall(rf"\b{key}=%?([\w.\-]+)", line):
                    calls[name].append((callee, 1))
            branches = re.search(r"branch_computations=\{([^}]*)\}", line)
            if branches:
                calls[name] += [(b.strip().lstrip("%"), 1) for b in branches.group(1).split(",")]
    mult = defaultdict(float)

    def visit(name, times, depth=0):
        if depth > 50:
            return
        mult[name] += times
        for callee, k in calls.get(name, ()):
            visit(callee, times * k, depth + 1)

    visit("ENTRY", 1.0)
    return mult


def collectives(hlo: str) -> list[dict]:
    """Collectives per kind: ops in the HLO, executions per call (loops counted) and bytes moved per call
    (each op's result size per device, times its executions)."""
    comps = _computations(hlo)
    mult = _multiplicity(comps)
    agg, chains = {}, set()
    for name, lines in comps.items():
        for line in lines:
            m = _INSTR.match(line)
            if not m:
                continue
            kind = m.group(3).removesuffix("-start")
            if kind not in COLLECTIVES or m.group(3).endswith("-done"):
                continue
            # XLA:TPU spreads one collective over a chain of async collective fusions, each holding a copy of the
            # full-size op with the same channel: count a channel once.
            channel = re.search(r"channel_id=(\d+)", line)
            if channel:
                if (kind, channel.group(1)) in chains:
                    continue
                chains.add((kind, channel.group(1)))
            k = mult.get(name, 0.0) or 1.0
            row = agg.setdefault(kind, {"kind": kind, "ops": 0, "executions": 0.0, "bytes": 0.0})
            size = shape_bytes(m.group(2))
            if m.group(3).endswith("-start") and kind in ("all-gather", "all-reduce", "collective-permute"):
                size //= 2  # an async start returns (operand, result): count the result only (approximately)
            row["ops"] += 1
            row["executions"] += k
            row["bytes"] += size * k
    return sorted(agg.values(), key=lambda r: -r["bytes"])


def _dims(type_text: str) -> list[int] | None:
    m = _SHAPE.search(type_text)
    return [int(d) for d in m.group(2).split(",") if d] if m else None


def _window(line: str, key: str, n: int, default: int) -> list[int]:
    m = re.search(rf"\b{key}=([0-9x]+)", line)
    return [int(v) for v in m.group(1).split("x")] if m else [default] * n


def _taps(n: int, k: int, lo: int, stride: int, dilate: int, out: int) -> int:
    """Window taps over one spatial dimension that land on real input (not padding, not a dilation hole), summed
    over the output positions. XLA:TPU writes batched matmuls as convolutions whose 'spatial' dimension is a batch
    axis padded around a size-1 input, so window size x output size would overcount them."""
    if out * k > 4_000_000:
        return out * min(k, n)
    p = np.arange(out)[:, None] * stride + np.arange(k)[None, :] - lo
    ok = (p >= 0) & (p <= (n - 1) * dilate) & (p % dilate == 0)
    return int(ok.sum())


def _matmul_flops(line: str, op: str, result: str, shapes: dict[str, list[int]]) -> float:
    """2 x multiply-adds of one dot or convolution (XLA:TPU writes matmuls as convolutions)."""
    out = _dims(result)
    args = re.search(rf"{op}\(([^)]*)\)", line)
    if out is None or args is None:
        return 0.0
    lhs = shapes.get(args.group(1).split(",")[0].strip().split(" ")[-1].lstrip("%"))
    if lhs is None:
        return 0.0
    if op == "dot":
        m = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", line)
        contracted = math.prod(lhs[int(i)] for i in m.group(1).split(",") if i) if m else 1
        return 2.0 * math.prod(out) * contracted
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", line)
    if labels is None or len(labels.group(1)) != len(lhs) or len(labels.group(3)) != len(out):
        return 0.0
    lhs_l, out_l = labels.group(1), labels.group(3)
    spatial = sorted(c for c in lhs_l if c.isdigit())
    n = len(spatial)
    size, stride, ldil = _window(line, "size", n, 1), _window(line, "stride", n, 1), _window(line, "lhs_dilate", n, 1)
    pad = re.search(r"\bpad=([0-9_x\-]+)", line)
    lows = [int(p.split("_")[0]) for p in pad.group(1).split("x")] if pad else [0] * n
    macs = math.prod(out) * lhs[lhs_l.index("f")]
    for i, c in enumerate(spatial):
        o = out[out_l.index(c)]
        macs = macs / o * _taps(lhs[lhs_l.index(c)], size[i], lows[i], stride[i], ldil[i], o)
    groups = re.search(r"feature_group_count=(\d+)", line)
    return 2.0 * macs / (int(groups.group(1)) if groups else 1)


def matmul_flops(hlo: str) -> tuple[float, float]:
    """(matmul FLOPs per call with every loop's trip count applied, the same counting each loop body once).

    XLA's cost analysis counts a while loop's body once: a train step that scans its layers reports about one
    layer's worth. The HLO's dots and convolutions, each times how often its computation runs, give the real count.
    """
    comps = _computations(hlo)
    mult = _multiplicity(comps)
    looped = once = 0.0
    for name, lines in comps.items():
        shapes = {}
        for line in lines:
            m = _INSTR.match(line)
            if not m:
                continue
            shapes[m.group(1)] = _dims(m.group(2)) or []
            if m.group(3) in ("dot", "convolution") and not m.group(2).startswith("("):
                f = _matmul_flops(line, m.group(3), m.group(2), shapes)
                looped += f * (mult.get(name, 0.0) or 1.0)
                once += f
    return looped, once


def largest_values(hlo: str, n: int) -> list[dict]:
    """The n largest per-device values the HLO computes (instruction results; parameters and views excluded):
    what the temporaries are made of."""
    skip = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "conditional", "call",
            "opt-barrier", "copy-done", "copy-start"}
    seen = []
    for line in hlo.splitlines():
        m = _INSTR.match(line)
        if not m or m.group(3) in skip or m.group(2).startswith("("):
            continue
        seen.append((shape_bytes(m.group(2)), m.group(2).split("{")[0], m.group(3), m.group(1)))
    seen.sort(key=lambda r: -r[0])
    out, shapes = [], set()
    for size, shape, op, name in seen:
        if shape in shapes:
            continue
        shapes.add(shape)
        out.append({"bytes": size, "shape": shape, "op": op, "name": name})
        if len(out) == n:
            break
    return out


def input_copies(hlo: str, min_bytes: int) -> list[dict]:
    """Copies of the program's inputs at its entry (a `copy` of a parameter, directly or through the async
    `copy-start`/`copy-done` that moves it between memory spaces, of at least min_bytes per device), grouped by
    their types with layouts (from -> to): an input the program computes on in another layout (XLA:TPU's default
    layout of a (B, KV, S, Dh) cache with S not a multiple of 8 keeps S outside its tile) or dtype, or a donated
    buffer it could not update in place. Each costs a buffer of the input's size in the temporaries."""
    source = {}  # instruction -> (the parameter's type, its name) for parameters and their moves
    groups = {}
    for line in _computations(hlo).get("ENTRY", []):
        m = _INSTR.match(line)
        if not m:
            continue
        name, type_, op = m.groups()
        operand = re.search(rf"{re.escape(op)}\(%?([\w.\-]+)", line)
        operand = operand.group(1) if operand else None
        if op == "parameter":
            label = re.search(r'op_name="([^"]*)"', line)
            source[name] = (type_, label.group(1).replace("\\'", "'") if label else name)
        elif op in ("copy-start", "copy-done") and operand in source:
            source[name] = source[operand]
        elif op == "copy" and operand in source and shape_bytes(type_) >= min_bytes:
            origin, label = source[operand]  # a copy may also change the dtype (the compute-dtype cast)
            key = (re.sub(r"S\(\d+\)", "", origin).replace(":}", "}"), type_)
            row = groups.setdefault(key, {"input": label, "count": 0, "from": key[0], "to": key[1], "bytes": 0})
            row["count"] += 1
            row["bytes"] += shape_bytes(type_)
    return sorted(groups.values(), key=lambda r: -r["bytes"])


def per_device_bytes(x) -> int:
    shape = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) is not None else x.shape
    return int(np.prod(shape)) * np.dtype(x.dtype).itemsize


def named_leaves(tree, prefix: str = "") -> list[tuple[str, object]]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [(prefix + jax.tree_util.keystr(path), leaf) for path, leaf in flat if hasattr(leaf, "shape")]


def largest_inputs(named: list[tuple[str, object]], n: int) -> list[dict]:
    rows = [{"name": k, "bytes": per_device_bytes(x), "shape": list(x.shape), "dtype": str(x.dtype),
             "spec": str(x.sharding.spec) if hasattr(x.sharding, "spec") else str(x.sharding)} for k, x in named]
    return sorted(rows, key=lambda r: -r["bytes"])[:n]


def replicated_buffers(named: list[tuple[str, object]], mesh, threshold_bytes: int, ignore=()) -> list[dict]:
    """Buffers of at least threshold_bytes per device that are whole on a mesh axis (size > 1) although one of
    their dimensions could be split over it (divisible by the axis size times its current split).

    An FSDP or tensor axis that leaves a large parameter, moment or cache replicated multiplies its memory by the
    axis size; this names each such buffer and axis."""
    bad = []
    for name, x in named:
        sharding = getattr(x, "sharding", None)
        if sharding is None or not hasattr(sharding, "spec") or per_device_bytes(x) < threshold_bytes:
            continue
        spec = tuple(sharding.spec) + (None,) * (len(x.shape) - len(sharding.spec))
        used, split = set(), []
        for entry in spec:
            axes = () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))
            used.update(axes)
            split.append(math.prod(mesh.shape[a] for a in axes))
        for axis, size in mesh.shape.items():
            if size == 1 or axis in used or axis in ignore:
                continue
            dims = [i for i, d in enumerate(x.shape) if d % (split[i] * size) == 0 and d // split[i] >= size]
            if dims:
                bad.append({"name": name, "axis": axis, "axis_size": size, "bytes": per_device_bytes(x),
                            "shape": list(x.shape), "spec": str(sharding.spec), "splittable_dims": dims})
    return sorted(bad, key=lambda r: -r["bytes"])


def _split(spec, ndim: int, mesh) -> list[int]:
    """How many ways spec splits each of ndim dimensions over mesh."""
    entries = tuple(spec) + (None,) * (ndim - len(spec))
    return [math.prod(mesh.shape[a] for a in ((e,) if isinstance(e, str) else tuple(e or ()))) for e in entries]


def _spec_key(spec, ndim: int) -> tuple:
    entries = tuple(spec) + (None,) * (ndim - len(spec))
    return tuple(e if e is None or isinstance(e, str) else tuple(e) for e in entries)


def unsplit_fix(u: dict, names, shape, spec, mesh) -> str:
    """What would split dimension u["dim"] (its size does not divide over the mesh axis its logical name maps to):
    padding it, an axis size that divides it, or a rule putting the axis on another dimension that divides."""
    n, split, axis, size, logical = u["dim_size"], u["split"], u["axis"], u["axis_size"], u["logical"]
    before = split // size  # the mesh axes the dimension already takes (data, when rows go over data then fsdp)
    padded = -(-n // split) * split
    if logical in ("vocab", "act_vocab"):
        out = [f"pad the vocabulary to {padded} (model.vocab_size; a multiple of {split})"]
    elif logical == "batch":
        out = [f"rows per micro-batch a multiple of {split} (data.batch_size, pref.batch_size or "
               "rl.rollout.prompts_per_step x group_size, over optim.grad_accum)"]
    else:
        out = [f"{logical} padded to {padded} (a multiple of {split})"]
    sizes = [d for d in range(size - 1, 1, -1) if mesh.size % d == 0 and n % (before * d) == 0]
    if sizes:
        out.append(f"mesh.{axis}={sizes[0]} (divides {n // before}; the other axes take the remaining devices)")
    if logical != "batch":  # rows are split by rows; another dimension of a weight or cache can take the axis
        for j, (name, d, k) in enumerate(zip(names, shape, _split(spec, len(shape), mesh), strict=True)):
            if j != u["dim"] and name not in (None, "batch", "act_seq") and d % (k * size) == 0:
                out.append(f"a rule mapping {name!r} (dim {j}, {d}) onto {axis!r} (mesh.rules)")
    return "; or ".join(out)


def unsplit_buffers(named: list[tuple[str, object]], records: list[dict], mesh, threshold_bytes: int,
                    ignore=()) -> list[dict]:
    """Buffers of at least threshold_bytes per device that `logical_spec` left whole on a mesh axis because a
    dimension's size does not divide over the axis its logical name maps to (a 151,936 vocabulary on tensor 3,
    12 rows on fsdp 8): `replicated_buffers` cannot see these when no dimension divides by the axis size, and
    values inside a program (logits, a cache written in the decode loop) are no inputs at all.

    records: `rlpt.parallel.rules.recording_unsplit()`'s. A named input or output takes its logical names from the
    record of its shape and spec; records of values constrained inside a program (`constrain`, with a dtype)
    that match no named buffer are listed by the function that constrained them. Alike buffers (one per layer)
    are one row with their count."""
    by_layout = {}
    for r in records:
        by_layout.setdefault((r["shape"], _spec_key(r["spec"], len(r["shape"]))), r)
    rows, matched = {}, set()

    def add(name, shape, dtype, spec, nbytes, r, value=False):
        for u in r["unsplit"]:
            if u["axis"] in ignore or nbytes < threshold_bytes:
                continue
            key = (name if value else None, tuple(shape), str(dtype), str(spec), u["dim"], u["axis"])
            if key in rows:
                rows[key]["count"] += 1
                continue
            rows[key] = {"name": name, "count": 1, "shape": list(shape), "dtype": str(dtype), "spec": str(spec),
                         "bytes": nbytes, "names": list(r["names"]), **u,
                         "fix": unsplit_fix(u, r["names"], shape, spec, mesh)}

    for name, x in named:
        spec = getattr(getattr(x, "sharding", None), "spec", None)
        if spec is None:
            continue
        key = (tuple(x.shape), _spec_key(spec, len(x.shape)))
        if key in by_layout:
            matched.add(key)
            add(name, x.shape, x.dtype, spec, per_device_bytes(x), by_layout[key])
    for r in records:
        key = (r["shape"], _spec_key(r["spec"], len(r["shape"])))
        if r["dtype"] is not None and key not in matched:
            per_device = math.prod(-(-d // k) for d, k in zip(r["shape"], _split(r["spec"], len(r["shape"]), mesh),
                                                               strict=True))
            add(f"{r['where']}: value {r['names']}", r["shape"], r["dtype"], r["spec"],
                per_device * np.dtype(r["dtype"]).itemsize, r, value=True)
    return sorted(rows.values(), key=lambda b: -b["bytes"])


def assert_sharded(named, mesh, threshold_bytes: int, ignore=(), records=()) -> None:
    """Raise AssertionError naming every buffer `replicated_buffers` finds, and with `records`
    (`rlpt.parallel.rules.recording_unsplit`) every one `unsplit_buffers` finds (a rehearsal's sharding check)."""
    bad = replicated_buffers(named, mesh, threshold_bytes, ignore)
    unsplit = unsplit_buffers(named, list(records), mesh, threshold_bytes, ignore)
    lines = [f"  {b['name']} {b['shape']} spec={b['spec']}: {b['bytes'] / 2**20:.1f} MiB per device, whole on "
             f"mesh axis {b['axis']!r} ({b['axis_size']}) though dims {b['splittable_dims']} divide" for b in bad]
    lines += [f"  {u['name']} {u['shape']} spec={u['spec']}: {u['bytes'] / 2**20:.1f} MiB per device, whole on "
              f"mesh axis {u['axis']!r}: dim {u['dim']} ({u['logical']}={u['dim_size']}) does not divide by "
              f"{u['split']}; fix: {u['fix']}" for u in unsplit]
    if lines:
        raise AssertionError("replicated buffers above the threshold:\n" + "\n".join(lines))
