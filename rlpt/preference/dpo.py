"""DPO-family stage: preference losses by registry name on the shared train step, reference log-probs
precomputed once per round or computed on the fly from frozen reference params; iterative rounds optional."""
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.algos import REFERENCE_FREE, PairedLogps, UnpairedLogps, get_preference_loss
from rlpt.config.schema import Config
from rlpt.eval.heldout import evaluate, heldout_tasks
from rlpt.preference.common import joint_logps, sub_config, warm_start
from rlpt.preference.data import batch_indices, pair_arrays
from rlpt.preference.pairs import make_pairs
from rlpt.train.loop import LoopHooks, RunLog, finish_run, make_trainer, maybe_resume, run_loop
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.source import export_checkpoint

REF_MODES = ("precompute", "online")


def row_groups(loss: str) -> tuple[str, ...]:
    """Row prefixes a loss reads: chosen and rejected, plus KTO's mismatched rows."""
    return ("c_", "r_", "kc_", "kr_") if loss == "kto" else ("c_", "r_")


def loss_inputs(loss: str, logps: list, ref: list | None, batch: dict):
    """PairedLogps / UnpairedLogps from policy (and reference) sums per row group."""
    lengths = (jnp.sum(batch["c_mask"], -1), jnp.sum(batch["r_mask"], -1))
    if loss == "kto":  # every pair gives a desirable (chosen) and an undesirable (rejected) example
        c, r, kc, kr = logps
        B = c.shape[0]
        return UnpairedLogps(jnp.concatenate([c, r]), jnp.concatenate(ref[:2]),
                             jnp.concatenate([jnp.ones(B, bool), jnp.zeros(B, bool)]),
                             jnp.concatenate([kc, kr]), jnp.concatenate(ref[2:]))
    return PairedLogps(logps[0], logps[1], None if ref is None else ref[0], None if ref is None else ref[1],
                       *lengths)


def preference_loss(pcfg):
    """loss_fn factory for the shared train step; the batch holds rows per group and, when precomputed,
    the reference sums ref_<prefix> (B,)."""
    fn = get_preference_loss(pcfg.loss)
    kwargs = {"beta": pcfg.beta, **pcfg.loss_kwargs}
    groups = row_groups(pcfg.loss)
    needs_ref = pcfg.loss not in REFERENCE_FREE
    if pcfg.ref not in REF_MODES:
        raise ValueError(f"pref.ref={pcfg.ref!r}; expected one of {REF_MODES}")

    def factory(model_cfg):
        def loss_fn(params, frozen, batch, rng):
            del rng
            logps = joint_logps(params, model_cfg, batch, groups)
            ref = None
            if needs_ref and pcfg.ref == "online":
                ref = [jax.lax.stop_gradient(x) for x in joint_logps(frozen["ref"], model_cfg, batch, groups)]
            elif needs_ref:
                ref = [batch["ref_" + g] for g in groups]
            loss, metrics = fn(loss_inputs(pcfg.loss, logps, ref, batch), **kwargs)
            if pcfg.rpo_alpha:  # RPO: keep the chosen answers likely while separating the pair
                nll = -jnp.sum(logps[0]) / jnp.maximum(jnp.sum(batch["c_mask"]), 1.0)
                loss = loss + pcfg.rpo_alpha * nll
                metrics = metrics | {"nll": jax.lax.stop_gradient(nll)}
            b = jnp.asarray(batch["c_inputs"].shape[0], jnp.float32)
            # Metrics are means over this micro-batch; weighted by its size, the loop divides by the step's.
            return loss * b, b, {f"pref/{k}": v * b for k, v in metrics.items()}
        return loss_fn
    return factory


def reference_logps(model, arrays: dict, groups: tuple[str, ...], chunk: int = 128) -> dict:
    """ref_<prefix> (N,) summed log-probs of every row group under `model`, computed once."""
    fwd = jax.jit(lambda params, b: joint_logps(params, model.config, b, groups))
    n = arrays["c_inputs"].shape[0]
    outs = [[] for _ in groups]
    for s in range(0, n, chunk):
        res = fwd(model.params, {k: v[s:s + chunk] for k, v in arrays.items()})
        for o, r in zip(outs, res):
            o.append(np.asarray(r))
    return {"ref_" + g: np.concatenate(o).astype(np.float32) for g, o in zip(groups, outs)}


def train_round(cfg: Config, policy, arrays: dict, out_dir: str, runlog: RunLog, step0: int) -> tuple:
    """pref.steps DPO-family steps from `policy` (also the reference); returns (policy, last metrics). Rows go to
    `runlog` at steps step0 + 1 ..."""
    p = cfg.pref
    scfg = sub_config(cfg, steps=p.steps, lr=p.lr, out_dir=out_dir, batch_size=p.batch_size)
    groups = row_groups(p.loss)
    online = p.ref == "online" and p.loss not in REFERENCE_FREE
    if p.ref == "precompute" and p.loss not in REFERENCE_FREE:
        arrays = arrays | reference_logps(policy, arrays, groups)
    trainer = make_trainer(scfg, preference_loss(p), init=policy,
                           extra_frozen=(lambda m: {"ref": m.params}) if online else None)
    maybe_resume(trainer)
    n = arrays["c_inputs"].shape[0]

    def batch(step):
        idx = batch_indices(n, p.batch_size, step - 1, cfg.train.seed + step0)
        return {k: v[idx] for k, v in arrays.items()}, None

    def row(step, m, extra):
        return {"loss": m["loss"], "grad_norm": m["grad_norm"]} | {
            k: v / p.batch_size for k, v in m.items() if k.startswith("pref/")}

    loop = run_loop(trainer, batch, LoopHooks(row=row), steps=p.steps, log=runlog, log_every=cfg.train.log_every,
                    progress=cfg.train.progress, step_offset=step0)
    return trainer.model(), {k: v for k, v in loop.last.items() if k != "step"}


def run(cfg: Config) -> dict:
    """SFT warm start (optional), held-out pass@1, pref.rounds of (pairs from the policy, DPO-family
    training), held-out pass@1 again; prints the summary (pass1_before, pass1_after, pair counts)."""
    t0 = time.time()
    p = cfg.pref
    get_preference_loss(p.loss)  # fail on an unknown name before any training
    tok = get_tokenizer(cfg)
    names, _, tiers = domain_mixture(cfg)
    eval_tasks = heldout_tasks(names, tiers, p.eval_per_domain, cfg.domains.eval_offset)
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    policy = warm_start(cfg)
    before = evaluate(policy, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)
    print(f"[eval before] held-out pass@1 = {before['pass1']:.3f}", flush=True)
    runlog = RunLog(cfg.train.out_dir)
    counts, last, rounds = {}, {}, []
    for rnd in range(p.rounds):
        pairs, c = make_pairs(cfg, tok, "train", model=policy, seed=rnd)
        counts = {k: counts.get(k, 0) + v for k, v in c.items()}
        print(f"[pairs round {rnd}] {c}", flush=True)
        arrays = pair_arrays(pairs, p.max_len, kl_rows=p.loss == "kto")
        policy, last = train_round(cfg, policy, arrays, os.path.join(cfg.train.out_dir, f"round{rnd}"), runlog,
                                   rnd * p.steps)
        if p.rounds > 1:
            r_eval = evaluate(policy, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)
            rounds.append(r_eval["pass1"])
            print(f"[eval round {rnd}] held-out pass@1 = {r_eval['pass1']:.3f}", flush=True)
    after = evaluate(policy, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)
    print(f"[eval after] held-out pass@1 = {after['pass1']:.3f}", flush=True)
    runlog.scalar("eval/pass1", after["pass1"], p.rounds * p.steps)
    runlog.close()
    if cfg.train.export_hf:  # every process: the weights are gathered, process 0 writes
        export_checkpoint(policy, tok, os.path.join(cfg.train.out_dir, "hf"), source=cfg.train.init_from)
    summary = {"stage": "dpo", "experiment": cfg.experiment_name, "init_from": cfg.train.init_from or None,
               "tokenizer": tok.source, "vocab_size": policy.config.vocab_size, "loss": p.loss, "ref": p.ref,
               "source": p.source, "rounds": p.rounds, "steps_per_round": p.steps,
               "pass1_before": before["pass1"], "pass1_after": after["pass1"],
               "pass1_gain": after["pass1"] - before["pass1"], "pass1_rounds": rounds,
               "final_loss": last.get("loss"), "reward_accuracy": last.get("pref/reward_accuracy"),
               "pairs": counts, "eval_tasks": len(eval_tasks), "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    return finish_run(summary, cfg.train.out_dir, model=policy, last_metrics=last)
