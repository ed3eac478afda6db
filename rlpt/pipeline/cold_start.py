"""The quickstart's SFT cold start: supervised steps on a (noisy) teacher, stopped once greedy pass@1 on a dev split
of train-seed tasks reaches rl.sft_target_pass (checked every rl.sft_check_every steps), at most rl.sft_steps.

Why a target: how far a noisy-teacher SFT gets in a fixed number of steps varies a lot with the seed (4.8% to
86.5% greedy pass@1 at 600 steps); RL needs a policy that succeeds sometimes but not always, so the cold start
stops in that band instead of at a step count. Resumable: the data position, the dev-pass curve and whether the
stop rule fired are saved with each checkpoint.
"""
import dataclasses
import json
import os

import jax

from rlpt.config.schema import Config
from rlpt.eval.heldout import evaluate
from rlpt.observe.tensorboard import TBWriter
from rlpt.train.data import HostData
from rlpt.train.loop import make_trainer, maybe_resume, to_float
from rlpt.train.losses import sft_loss


def cold_start_config(cfg: Config) -> Config:
    """The cold start's config from a run's: rl.sft_steps steps on data with rl.sft_noise, tiers rl.sft_tiers (or the
    run's), no periodic eval."""
    sft_domains = dataclasses.replace(cfg.domains, tiers=list(cfg.rl.sft_tiers) or list(cfg.domains.tiers))
    return dataclasses.replace(
        cfg, domains=sft_domains, data=dataclasses.replace(cfg.data, noise=cfg.rl.sft_noise),
        train=dataclasses.replace(cfg.train, steps=cfg.rl.sft_steps, eval_every=0))


def dev_tasks(names: list[str], tiers: dict[str, list[int]], per_domain: int) -> list:
    """Train-split tasks from the top of the train seed range (RL draws seeds uniformly below EVAL_SEED_START)."""
    from rlpt.tasks import EVAL_SEED_START, get_domain

    return [get_domain(n).generate(EVAL_SEED_START - 1 - i, tiers[n][i % len(tiers[n])])
            for n in names for i in range(per_domain)]


def run(cfg: Config, tok, mixture, *, max_new_tokens: int) -> dict:
    """SFT under `cfg` (train.steps = the cap) with the dev-pass stop rule of cfg.rl; returns model and curve."""
    from rlpt.pipeline.rl import restore_history

    out_dir = cfg.train.out_dir
    os.makedirs(out_dir, exist_ok=True)
    names, _, tiers = mixture
    dev = dev_tasks(names, tiers, cfg.rl.sft_dev_per_domain) if cfg.rl.sft_target_pass > 0 else []
    trainer = make_trainer(cfg, sft_loss)
    data = HostData(cfg.data, tok, cfg.train.seed, grad_accum=cfg.optim.grad_accum, domains=mixture,
                    total_steps=cfg.train.steps, vision=trainer.model_cfg.vision)
    meta = maybe_resume(trainer) or {}
    if meta.get("data") is not None:
        data.set_state(meta["data"])
    curve, done = [tuple(x) for x in meta.get("dev_curve", [])], bool(meta.get("done", False))
    start = int(trainer.state.step)
    is_main = jax.process_index() == 0
    path = os.path.join(out_dir, "metrics.jsonl")
    history = restore_history(path, start) if is_main else []
    tb = TBWriter(os.path.join(out_dir, "tb")) if is_main else None
    mlog = open(path, "a") if is_main else None
    ck = trainer.checkpointer
    step = start
    try:
        while not done and step < cfg.train.steps:
            step += 1
            host, _ = data.next_batch()
            metrics = to_float(trainer.step(host, host_local=True))
            row = {"step": step, "loss": metrics["loss"], "grad_norm": metrics["grad_norm"]}
            if dev and step % cfg.rl.sft_check_every == 0:
                row["dev_pass1"] = evaluate(trainer.model(), tok, dev, max_new_tokens=max_new_tokens)["pass1"]
                curve.append((step, row["dev_pass1"]))
                done = row["dev_pass1"] >= cfg.rl.sft_target_pass
                print(f"[cold start] step {step} dev pass@1 = {row['dev_pass1']:.3f} (target "
                      f"{cfg.rl.sft_target_pass}){' -> stop' if done else ''}", flush=True)
            done = done or step == cfg.train.steps
            history.append(row)
            if tb:
                tb.scalars({k: v for k, v in row.items() if k != "step"}, step)
            if mlog:
                mlog.write(json.dumps(row) + "\n")
                mlog.flush()
            if ck is not None and (step % cfg.train.ckpt_every == 0 or done):
                ck.save(step, trainer.state, {"data": data.get_state(), "dev_curve": curve, "done": done},
                        force=True)
            if step % max(cfg.train.log_every, 1) == 0 and is_main:
                print(f"[cold start] step {step}/{cfg.train.steps} loss={row['loss']:.4g}", flush=True)
    finally:
        if ck is not None:
            ck.close()
        if tb:
            tb.close()
            mlog.close()
    return {"model": trainer.model(), "steps": int(trainer.state.step), "dev_curve": curve,
            "final_loss": history[-1]["loss"] if history else float("nan"), "history": history}
