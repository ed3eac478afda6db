"""The quickstart's SFT cold start: supervised steps on a (noisy) teacher, stopped once greedy pass@1 on a dev split
of train-seed tasks reaches rl.sft_target_pass (checked every rl.sft_check_every steps), at most rl.sft_steps.

Why a target: how far a noisy-teacher SFT gets in a fixed number of steps varies a lot with the seed (4.8% to
86.5% greedy pass@1 at 600 steps); RL needs a policy that succeeds sometimes but not always, so the cold start
stops in that band instead of at a step count. Resumable: the data position, the dev-pass curve and whether the
stop rule fired are saved with each checkpoint.
"""
import dataclasses
import os

from rlpt.config.schema import Config
from rlpt.eval.heldout import evaluate
from rlpt.tasks import EVAL_SEED_START, get_domain
from rlpt.train.data import HostData
from rlpt.train.loop import LoopHooks, RunLog, make_trainer, maybe_resume, run_loop, to_float
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
    return [get_domain(n).generate(EVAL_SEED_START - 1 - i, tiers[n][i % len(tiers[n])])
            for n in names for i in range(per_domain)]


def run(cfg: Config, tok, mixture, *, max_new_tokens: int) -> dict:
    """SFT under `cfg` (train.steps = the cap) with the dev-pass stop rule of cfg.rl; returns model and curve."""
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
    curve, done = [tuple(x) for x in meta.get("dev_curve", [])], {"done": bool(meta.get("done", False))}
    start = int(trainer.state.step)
    runlog = RunLog(out_dir, resume_at=start)

    def check_dev(step):
        pass1 = evaluate(trainer.model(), tok, dev, max_new_tokens=max_new_tokens)["pass1"]
        curve.append((step, pass1))
        print(f"[cold start] step {step} dev pass@1 = {pass1:.3f} (target {cfg.rl.sft_target_pass})"
              f"{' -> stop' if pass1 >= cfg.rl.sft_target_pass else ''}", flush=True)
        return {"dev_pass1": pass1}

    def stop(step, row):
        reached = row.get("dev_pass1", -1.0) >= cfg.rl.sft_target_pass
        done["done"] = reached or step == cfg.train.steps
        return reached

    hooks = LoopHooks(train=lambda host: to_float(trainer.step(host, host_local=True)),
                      row=lambda step, m, extra: {"loss": m["loss"], "grad_norm": m["grad_norm"]},
                      evaluate=check_dev if dev else None, stop=stop,
                      meta=lambda: {"data": data.get_state(), "dev_curve": curve, "done": done["done"]})
    with runlog:
        loop = run_loop(trainer, lambda step: data.next_batch(), hooks,
                        steps=start if done["done"] else cfg.train.steps, log=runlog, log_every=cfg.train.log_every,
                        progress=cfg.train.progress, eval_every=cfg.rl.sft_check_every, eval_last=True)
    history = loop.history
    return {"model": trainer.model(), "steps": int(trainer.state.step), "dev_curve": curve,
            "final_loss": history[-1]["loss"] if history else float("nan"), "history": history}
