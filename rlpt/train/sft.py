"""Supervised fine-tuning: packed completion-only cross-entropy on the shared train step."""
import logging
import os
import time

import jax
import numpy as np

from rlpt.config.schema import Config
from rlpt.tasks.heldout import evaluate, heldout_tasks
from rlpt.tasks.mixture import domain_mixture  # noqa: F401  (re-exported: rlpt.train.sft.domain_mixture)
from rlpt.train.data import HostData
from rlpt.train.loop import (
    LoopHooks,
    RunLog,
    export_hf,
    finish_run,
    make_trainer,
    maybe_resume,
    run_loop,
    to_float,
)
from rlpt.train.losses import sft_loss
from rlpt.train.source import run_tokenizer

log = logging.getLogger(__name__)


def get_tokenizer(cfg: Config):
    """The run's tokenizer: train.init_from's own, else data.tokenizer (rlpt/train/source.py)."""
    return run_tokenizer(cfg)


def run(cfg: Config, *, print_result: bool = True) -> dict:
    t_start = time.time()
    tok = get_tokenizer(cfg)
    needs_tasks = any(s.kind == "tasks" for s in cfg.data.sources.values()) or cfg.train.eval_every > 0
    mixture = domain_mixture(cfg) if needs_tasks else None
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    trainer = make_trainer(cfg, sft_loss)
    data = HostData(cfg.data, tok, cfg.train.seed, grad_accum=cfg.optim.grad_accum, domains=mixture,
                    total_steps=cfg.train.steps, vision=trainer.model_cfg.vision)
    meta = maybe_resume(trainer)
    if meta is not None:
        data.set_state(meta["data"])
    start = int(trainer.state.step)
    runlog = RunLog(cfg.train.out_dir, resume_at=start)
    evals = {}

    def run_eval(tag):
        if mixture is None or cfg.train.eval_every <= 0:
            return None

        names, _, tiers = mixture
        tasks = heldout_tasks(names, tiers, max(1, cfg.train.eval_samples // len(names)), cfg.domains.eval_offset)
        res = evaluate(trainer.model(), tok, tasks, max_new_tokens=cfg.train.eval_max_new_tokens)
        evals[tag] = res
        runlog.scalar("eval/pass1", res["pass1"], int(trainer.state.step))
        for d, v in res["per_domain"].items():
            runlog.scalar(f"eval/pass1/{d}", v, int(trainer.state.step))
        print(f"[eval {tag}] held-out pass@1 = {res['pass1']:.3f}", flush=True)
        return res

    if start == 0:
        run_eval("before")
    flops_tok = trainer.model_cfg.flops_per_token(cfg.data.seq_len)
    timed = {}

    def train(host):
        t0 = time.time()
        metrics = to_float(trainer.step(host, host_local=True))
        timed.update(dt=time.time() - t0, width=host["inputs"].size)
        return metrics

    def row(step, metrics, dmetrics):
        dt = timed["dt"]
        return metrics | dmetrics | {"lr": float(trainer.schedule(step - 1)), "tokens_per_s": metrics["tokens"] / dt,
                                     "tflops": flops_tok * timed["width"] * jax.process_count() / dt / 1e12}

    def step_eval(step):
        run_eval(f"step{step}")
        return {}

    with runlog:
        loop = run_loop(trainer, lambda step: data.next_batch(), LoopHooks(
            train=train, row=row, evaluate=step_eval, meta=lambda: {"data": data.get_state()}),
            steps=cfg.train.steps, log=runlog, log_every=cfg.train.log_every, progress=cfg.train.progress,
            eval_every=cfg.train.eval_every, show=("loss", "grad_norm", "lr", "tokens_per_s"))
        after = run_eval("after")
    last = {k: v for k, v in loop.last.items() if k != "step"}
    new_rows = loop.history[len(runlog.history):]
    tokens_seen = sum(r["tokens"] for r in new_rows)
    if cfg.train.export_hf:  # every process: the weights are gathered, process 0 writes
        export_hf(trainer, os.path.join(cfg.train.out_dir, "hf"), tok)
    history = [{"step": r["step"], "loss": r["loss"]} for r in new_rows]
    summary = {"stage": "sft", "experiment": cfg.experiment_name, "steps": cfg.train.steps,
               "init_from": cfg.train.init_from or None, "tokenizer": tok.source,
               "vocab_size": trainer.model_cfg.vocab_size,
               "final_loss": last.get("loss", float("nan")), "tokens_trained": tokens_seen,
               "tokens_per_s": tokens_seen / max(loop.wall_s, 1e-9),
               "data_overlong": data.overlong(),
               "pass1_before": evals.get("before", {}).get("pass1"),
               "pass1_after": after["pass1"] if after else None,
               "wall_s": round(time.time() - t_start, 2), "run_dir": os.path.abspath(cfg.train.out_dir)}
    objects = {"eval": evals, "last_metrics": {k: float(np.asarray(v)) for k, v in last.items()},
               "model": trainer.model(), "history": history}
    return finish_run(summary, cfg.train.out_dir, **objects) if print_result else summary | objects
