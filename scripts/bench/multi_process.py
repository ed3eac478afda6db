"""The distributed runtime's overhead: SFT tokens/s as 2 JAX processes x 4 CPU devices against 1 process x 8 devices.

Both runs train the same model on the same global mesh (data=8) and the same batches (data.shards=2: each of the
2 processes packs its own stream; the single process packs both), through rlpt's own path (`make_trainer`,
`HostData`, `Trainer.step(host_local=True)`). The 2-process run is started by `python -m rlpt.launch local`
(loopback coordinator, gloo collectives); the single process by this script. Each run times `--steps` steps after
`--warmup`, then profiles 3 more (`jax.profiler`) and reports the share of XLA op time spent in collectives
(all-reduce, all-gather, reduce-scatter, collective-permute, all-to-all), summed over devices. Both runs share
this machine's cores; measure when nothing else runs.

    python scripts/bench/multi_process.py [--steps 20] [--hidden 256] [--layers 4] [--seq 256] [--batch 32]

The last line is JSON: ours = 2x4 tokens/s, peer = 1x8 tokens/s, ratio = ours / peer (goal >= 0.8).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


def overrides(a) -> list[str]:
    return ["experiment=sft_tiny", f"model.hidden_size={a.hidden}", f"model.intermediate_size={a.hidden * 3}",
            f"model.num_layers={a.layers}", f"data.seq_len={a.seq}", f"data.batch_size={a.batch}", "data.shards=2",
            "mesh.data=8", "train.eval_every=0", "train.ckpt_every=0", "runtime.compilation_cache=",
            f"train.steps={a.warmup + a.steps + 3}"]


def collective_share(folder: str) -> tuple[float, float]:
    """(collective op seconds, all XLA op seconds) in a jax.profiler trace, summed over device threads."""
    import jax

    coll = total = 0.0
    for pb in glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True):
        for plane in jax.profiler.ProfileData.from_file(pb).planes:
            for line in plane.lines:
                if not line.name.startswith("tf_XLA"):
                    continue
                for ev in line.events:
                    name = ev.name
                    if name.startswith(("ThunkExecutor", "CommonPjRt", "[", "Wait", "PjRt")):
                        continue
                    total += ev.duration_ns / 1e9
                    if name.startswith(COLLECTIVES):
                        coll += ev.duration_ns / 1e9
    return coll, total


def worker(a) -> None:
    """One process of a run: train, time, profile; process 0 prints one JSON line."""
    import jax

    from rlpt.api import compose
    from rlpt.parallel import check_same_config, maybe_initialize_distributed
    from rlpt.train.data import HostData
    from rlpt.train.loop import make_trainer
    from rlpt.train.losses import sft_loss
    from rlpt.train.sft import domain_mixture, get_tokenizer

    cfg = compose(overrides(a) + [f"train.out_dir={a.out}"])
    maybe_initialize_distributed(cfg.mesh)
    check_same_config(cfg)
    tok = get_tokenizer(cfg)
    trainer = make_trainer(cfg, sft_loss)
    data = HostData(cfg.data, tok, cfg.train.seed, grad_accum=cfg.optim.grad_accum, domains=domain_mixture(cfg),
                    total_steps=cfg.train.steps)
    batches = [data.next_batch()[0] for _ in range(a.warmup + a.steps + 3)]

    def run(batch):
        return float(trainer.step(batch, host_local=True)["loss"])

    for b in batches[:a.warmup]:
        run(b)
    t0 = time.perf_counter()
    tokens = 0
    for b in batches[a.warmup:a.warmup + a.steps]:
        run(b)
        tokens += b["inputs"].size * jax.process_count()
    seconds = time.perf_counter() - t0
    trace = os.path.join(a.out, f"trace{jax.process_index()}")
    with jax.profiler.trace(trace):
        for b in batches[a.warmup + a.steps:]:
            run(b)
    coll, total = collective_share(trace)
    shares = [(coll, total)]
    if jax.process_count() > 1:
        from rlpt.parallel import gather_objects

        shares = gather_objects((coll, total), "bench/collectives")
    coll, total = sum(c for c, _ in shares), sum(t for _, t in shares)
    if jax.process_index() == 0:
        print(json.dumps({"processes": jax.process_count(), "devices": jax.device_count(), "tokens_per_s":
                          tokens / seconds, "step_s": seconds / a.steps, "collective_s_per_step": coll / 3,
                          "op_s_per_step": total / 3, "collective_share": coll / max(total, 1e-12)}), flush=True)


def last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.split("] ", 1)[1] if line.startswith("[p") else line
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result line in:\n{text[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(a.steps), "--warmup", str(a.warmup),
          "--hidden", str(a.hidden), "--layers", str(a.layers), "--seq", str(a.seq), "--batch", str(a.batch)]
    env = dict(os.environ, JAX_PLATFORMS="cpu", RLPT_COMPILATION_CACHE="")
    with tempfile.TemporaryDirectory() as tmp:
        two = subprocess.run([sys.executable, "-m", "rlpt.launch", "local", "--nproc", "2", "--devices-per-process",
                              "4", "--", *me, "--out", os.path.join(tmp, "two")], cwd=REPO, env=env,
                             capture_output=True, text=True)
        if two.returncode:
            raise SystemExit(f"2-process run failed:\n{two.stdout[-4000:]}")
        one = subprocess.run([*me, "--out", os.path.join(tmp, "one")], cwd=REPO, capture_output=True, text=True,
                             env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=8"))
        if one.returncode:
            raise SystemExit(f"1-process run failed:\n{one.stdout[-2000:]}{one.stderr[-4000:]}")
    r2, r1 = last_json(two.stdout), last_json(one.stdout)
    for name, r in (("2 processes x 4 devices", r2), ("1 process x 8 devices", r1)):
        print(f"{name}: {r['tokens_per_s']:.0f} tokens/s, {r['step_s'] * 1e3:.0f} ms/step, collectives "
              f"{r['collective_s_per_step'] * 1e3:.1f} ms of {r['op_s_per_step'] * 1e3:.1f} ms device-op time per step "
              f"({100 * r['collective_share']:.1f}%)")
    print(json.dumps({"benchmark": "multiprocess_sft", "ours": round(r2["tokens_per_s"], 1),
                      "peer": round(r1["tokens_per_s"], 1), "unit": "tokens/s",
                      "ratio": round(r2["tokens_per_s"] / r1["tokens_per_s"], 3), "goal": 0.8,
                      "collective_share_2x4": round(r2["collective_share"], 4),
                      "collective_share_1x8": round(r1["collective_share"], 4),
                      "model": f"hidden {a.hidden}, {a.layers} layers, seq {a.seq}, batch {a.batch}"}))


if __name__ == "__main__":
    main()
