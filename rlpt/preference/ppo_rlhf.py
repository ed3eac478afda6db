"""PPO-RLHF: reward = reward-model score (+ the reward mixture's reward: the verifier's outcome and the components
cfg.reward names), KL-in-reward to the frozen reference, a value head on the policy's hidden states with GAE, the
clipped PPO surrogate and value loss."""
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.algos import gae_advantages, get_policy_loss, kl_in_reward, masked_whiten, value_loss
from rlpt.config.schema import Config
from rlpt.eval.heldout import heldout_tasks
from rlpt.models.transformer import hidden_states
from rlpt.observe.components import component_row, run_means
from rlpt.observe.tags import task_outcomes
from rlpt.parallel import axis_rules, to_host
from rlpt.preference.common import sub_config, warm_start
from rlpt.preference.heads import head_values, init_head, make_head_trainer
from rlpt.preference.judges import run_judges
from rlpt.preference.reward_model import RewardModel, train_reward_model
from rlpt.rewards.mixture import RewardMixture, mix_rewards
from rlpt.rollout.format import prompt_ids, response_text
from rlpt.rollout.single_turn import rollout, to_rows
from rlpt.sampling import generate
from rlpt.tasks import get_domain
from rlpt.tasks.curriculum import build_curriculum, decode_state, encode_state
from rlpt.tasks.mixture import rl_domains
from rlpt.train.logprobs import head_logprobs
from rlpt.train.loop import LoopHooks, RunLog, finish_run, maybe_resume, run_loop, to_float
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.source import export_checkpoint


def logps_values(params: dict, model_cfg, batch: dict) -> tuple[jax.Array, jax.Array]:
    """(log p(target) (B, T), value head V(s_t) (B, T)) from one forward of params {"lm", "head"}; the
    value head is a probe on the policy's detached hidden states."""
    hidden, _ = hidden_states(params["lm"], model_cfg, batch["inputs"], batch["positions"], batch["segment_ids"])
    logp, _ = head_logprobs(params["lm"], model_cfg, hidden, batch["targets"])
    # The value head reads detached features: value-loss gradients (large while the head is fresh) would
    # otherwise flow into the shared backbone and move the policy.
    return logp, head_values(params["head"], jax.lax.stop_gradient(hidden))


def ppo_loss(pcfg):
    """loss_fn factory: token-mean of PPO's clipped surrogate + vf_coef * clipped value loss."""
    surrogate = get_policy_loss("ppo")

    def factory(model_cfg):
        def loss_fn(params, frozen, batch, rng):
            del frozen, rng
            mask = batch["loss_mask"].astype(jnp.float32)
            logp, values = logps_values(params, model_cfg, batch)
            pg, pm = surrogate(logp, batch["old_logp"], batch["advantages"], mask, clip_low=pcfg.clip,
                               clip_high=pcfg.clip)
            vl, vm = value_loss(values, batch["old_values"], batch["returns"], mask, clip=pcfg.value_clip or None)
            n = jnp.sum(mask)
            total = jnp.sum(pg * mask) + pcfg.vf_coef * jnp.sum(vl)
            metrics = {f"ppo/{k}": v * n for k, v in (pm | vm).items() if jnp.ndim(v) == 0}
            return total, n, metrics | {"ppo/pg_loss": jnp.sum(pg * mask), "ppo/vf_loss": jnp.sum(vl)}
        return loss_fn
    return factory


def evaluate_with_rm(model, tok, tasks, rm: RewardModel, max_new_tokens: int) -> dict:
    """Greedy held-out pass@1 (domain verifiers, as rlpt.eval.heldout) and the mean RM score of the answers."""
    prompts = [prompt_ids(tok, t.prompt) for t in tasks]
    out = generate(model, prompts, max_new_tokens, temperature=0.0, stop_ids=tuple(tok.eos_ids))
    toks, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    responses = [toks[i, :int(lengths[i])].tolist() for i in range(len(tasks))]
    passed = [get_domain(t.domain).verify(t, response_text(tok, r)).passed for t, r in zip(tasks, responses)]
    scores = rm.score_ids(prompts, responses)
    return {"pass1": float(np.mean(passed)), "rm_score": float(np.mean(scores))}


def normalize_rm(scores: np.ndarray, mode: str, eps: float = 1e-6) -> np.ndarray:
    """RM scores (R,) -> the reward's RM term. batch: standardised over the rollout batch (OpenRLHF's
    normalize_reward, per batch): Bradley-Terry logits have an arbitrary offset and scale (std ~8 on the tiny
    RM), which would swamp the verifier's 0/1 score and give the value head targets far from its init."""
    if mode == "none":
        return scores
    if mode == "batch":
        return (scores - scores.mean()) / (scores.std() + eps)
    raise ValueError(f"pref.reward_norm={mode!r}; expected batch or none")


@functools.partial(jax.jit, static_argnames=("kl_coef", "estimator", "gamma", "lam"))
def ppo_targets(reward, rollout_logp, ref_logp, values, mask, *, kl_coef, estimator, gamma, lam):
    """Outcome rewards (R,) -> whitened GAE advantages, returns, masked values (R, T) and the mean per-token
    KL of the rollout policy to the reference; the KL penalty is folded into the token rewards."""
    values = values * mask
    token_r = kl_in_reward(reward, rollout_logp, ref_logp, mask, kl_coef, estimator)
    adv, returns = gae_advantages(token_r, values, mask, gamma, lam)
    kl = jnp.sum((rollout_logp - ref_logp) * mask) / jnp.maximum(jnp.sum(mask), 1)
    return masked_whiten(adv, mask), returns, values, kl


def make_batch(trainer, aux_fn, traj, rm: RewardModel, pcfg, row_len: int) -> tuple[dict, dict]:
    """Rows with old log-probs (the sampler's), old values, KL-in-reward GAE advantages and returns."""
    rows = to_rows(traj, row_len)
    responses = [traj.response[r, :int(traj.lengths[r])].tolist() for r in range(len(traj.prompts))]
    rm_scores = rm.score_ids(traj.prompts, responses)
    reward = pcfg.rm_weight * normalize_rm(rm_scores, pcfg.reward_norm) + pcfg.verifier_weight * traj.rewards  # (R,)
    with jax.set_mesh(trainer.mesh), axis_rules(trainer.cfg.mesh.rules):
        ref_logp, values = aux_fn(trainer.state.params, trainer.state.frozen, rows)
    adv, returns, values, kl = ppo_targets(jnp.asarray(reward), jnp.asarray(rows["rollout_logp"]), ref_logp, values,
                                           jnp.asarray(rows["loss_mask"]), kl_coef=pcfg.kl_coef,
                                           estimator=pcfg.kl_estimator, gamma=pcfg.gamma, lam=pcfg.lam)
    adv, values, returns = to_host((adv, values, returns))  # rows sharded over the mesh: gathered on every process
    batch = rows | {"old_logp": rows["rollout_logp"], "advantages": adv, "old_values": values, "returns": returns}
    kl = float(kl)
    return batch, {"rm_score": float(rm_scores.mean()), "rm_score_std": float(rm_scores.std()),
                   "verifier_reward": float(traj.rewards.mean()),
                   "pass_rate": float(traj.passed.mean()), "reward": float(reward.mean()), "kl_ref": kl}


def run(cfg: Config) -> dict:
    """SFT warm start -> reward model (trained here unless pref.rm_path) -> PPO; held-out pass@1 and RM score
    before and after."""
    t0 = time.time()
    p, rcfg = cfg.pref, cfg.rl.rollout
    tok = get_tokenizer(cfg)
    names, _, tiers = domain_mixture(cfg)
    eval_tasks = heldout_tasks(names, tiers, p.eval_per_domain, cfg.domains.eval_offset)
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    policy = warm_start(cfg)
    split = {"sft": time.time() - t0}
    rm_info = {}
    if p.rm_path:
        rm = RewardModel.load(p.rm_path)
    else:
        rm, rm_info = train_reward_model(cfg, tok, policy, os.path.join(cfg.train.out_dir, "rm"))
        print(f"[rm] held-out pairwise accuracy = {rm_info['pairwise_accuracy']:.3f}", flush=True)
    split["rm"] = time.time() - t0 - split["sft"]
    before = evaluate_with_rm(policy, tok, eval_tasks, rm, rcfg.max_new_tokens)
    print(f"[eval before] pass@1 = {before['pass1']:.3f} rm_score = {before['rm_score']:.3f}", flush=True)
    out_dir = os.path.join(cfg.train.out_dir, "ppo")
    scfg = sub_config(cfg, steps=p.ppo_steps * p.ppo_epochs, lr=p.ppo_lr, out_dir=out_dir)
    trainer = make_head_trainer(scfg, ppo_loss(p), policy, init_head(policy.config.hidden_size, cfg.train.seed + 9),
                                ref=True, head_lr=p.vf_lr or None)
    aux_fn = jax.jit(lambda params, frozen, rows: (
        logps_values({"lm": frozen["ref"], "head": params["head"]}, policy.config, rows)[0],
        logps_values(params, policy.config, rows)[1]))
    meta = maybe_resume(trainer)
    curriculum = build_curriculum(cfg.curriculum, rl_domains(cfg))
    cstate = curriculum.init_state() if meta is None else decode_state(meta["curriculum"])
    start = int(trainer.state.step) // p.ppo_epochs
    row_len = rcfg.max_prompt_len + rcfg.max_new_tokens
    runlog = RunLog(out_dir, resume_at=start)
    t_ppo = time.time()
    mixture = RewardMixture(cfg.reward)
    cur, G = {}, rcfg.group_size

    def next_batch(step):
        tasks = curriculum.tasks(cstate, step, np.random.default_rng([cfg.train.seed, 23, step]),
                                 rcfg.prompts_per_step)
        traj = rollout(trainer.model(), tok, tasks, rcfg, seed=cfg.train.seed * 1_000_003 + step, version=step - 1)
        cur["traj"] = traj = mix_rewards(traj, mixture)  # the verifier's part of the reward is the run's mixture
        t_batch = time.time()
        batch, cur["row"] = make_batch(trainer, aux_fn, traj, rm, p, row_len)
        cur["score_s"] = time.time() - t_batch
        return batch, None

    def train(batch):
        t_train = time.time()
        for _ in range(p.ppo_epochs):
            m = to_float(trainer.step(batch))
        cur["train_s"] = time.time() - t_train
        return m

    def row(step, m, extra):
        traj, n = cur["traj"], max(m["tokens"], 1.0)
        out = cur["row"] | {"loss": m["loss"], "grad_norm": m["grad_norm"], "gen_s": traj.gen_s,
                            "verify_s": traj.verify_s, "score_s": cur["score_s"], "train_s": cur["train_s"]}
        return out | {k: v / n for k, v in m.items() if k.startswith("ppo/")} | component_row(traj)

    def after(step, out):
        nonlocal cstate
        cstate = curriculum.update(cstate, task_outcomes(cur["traj"], G))

    hooks = LoopHooks(train=train, row=row, after=after, meta=lambda: {"curriculum": encode_state(cstate)})
    with runlog:
        with run_judges(cfg, tok, policy, cfg.train.out_dir) as judge_info:  # judges the mixture names
            loop = run_loop(trainer, next_batch, hooks, steps=p.ppo_steps, start=start, log=runlog,
                            log_every=cfg.train.log_every, progress=cfg.train.progress,
                            show=("loss", "rm_score", "pass_rate", "kl_ref"))
    history = loop.history
    split["ppo"] = time.time() - t_ppo
    after = evaluate_with_rm(trainer.model(), tok, eval_tasks, rm, rcfg.max_new_tokens)
    print(f"[eval after] pass@1 = {after['pass1']:.3f} rm_score = {after['rm_score']:.3f}", flush=True)
    if cfg.train.export_hf:  # every process: the weights are gathered, process 0 writes
        export_checkpoint(trainer.model(), tok, os.path.join(cfg.train.out_dir, "hf"), source=cfg.train.init_from)
    summary = {"stage": "ppo_rlhf", "experiment": cfg.experiment_name, "init_from": cfg.train.init_from or None,
               "tokenizer": tok.source, "vocab_size": trainer.model_cfg.vocab_size, "ppo_steps": p.ppo_steps,
               "pass1_before": before["pass1"], "pass1_after": after["pass1"],
               "rm_score_before": before["rm_score"], "rm_score_after": after["rm_score"],
               "rm_weight": p.rm_weight, "verifier_weight": p.verifier_weight, "reward": cfg.reward.name,
               "reward_components": run_means(history), **judge_info, "kl_coef": p.kl_coef,
               "reward_norm": p.reward_norm, "vf_lr": p.vf_lr,
               "final_kl_ref": float(np.mean([h["kl_ref"] for h in history[-10:]])) if history else None,
               "rm_pairwise_accuracy": rm_info.get("pairwise_accuracy"), "rm_path": p.rm_path or rm_info.get("rm_path"),
               "eval_tasks": len(eval_tasks),
               "time_split_s": {k: round(v, 2) for k, v in split.items()}, "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    return finish_run(summary, cfg.train.out_dir, model=trainer.model(), history=history, reward_model=rm)

