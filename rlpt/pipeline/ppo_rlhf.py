"""stage=ppo_rlhf: PPO against a reward model on the RL loop. An SFT warm start, a Bradley-Terry reward model
(trained here unless pref.rm_path), then `run_rl` with the reward = pref.rm_weight x the RM score (standardised
per rollout batch, pref.reward_norm) + pref.verifier_weight x the reward mixture's reward (cfg.reward); the PPO
settings are the RL stage's (stage=ppo_rlhf sets them: KL-in-reward to the SFT reference, GAE from a value head,
rl.critic, the clipped surrogate). Held-out pass@1 and mean RM score before and after."""
import dataclasses
import os
import time

import numpy as np

from rlpt.config.schema import Config
from rlpt.eval.heldout import heldout_tasks
from rlpt.observe.components import run_means
from rlpt.pipeline.judges import run_judges
from rlpt.pipeline.rl import run_rl
from rlpt.preference.common import warm_start
from rlpt.preference.reward_model import RewardModel, train_reward_model
from rlpt.rollout.format import prompt_ids, response_text
from rlpt.sampling import generate
from rlpt.tasks import get_domain
from rlpt.tasks.mixture import domain_mixture
from rlpt.train.loop import finish_run
from rlpt.train.sft import get_tokenizer
from rlpt.train.source import export_checkpoint


def normalize_rm(scores: np.ndarray, mode: str, eps: float = 1e-6) -> np.ndarray:
    """RM scores (R,) -> the reward's RM term. batch: standardised over the rollout batch (OpenRLHF's
    normalize_reward, per batch): Bradley-Terry logits have an arbitrary offset and scale (std ~8 on the tiny
    RM), which would swamp the verifier's 0/1 score and give the value head targets far from its init."""
    if mode == "none":
        return scores
    if mode == "batch":
        return (scores - scores.mean()) / (scores.std() + eps)
    raise ValueError(f"pref.reward_norm={mode!r}; expected batch or none")


def rm_rescore(rm: RewardModel, pcfg):
    """The RL loop's rescore hook (`run_rl(rescore=)`): trajectories -> (the same with rewards = rm_weight x
    normalize_rm(RM score) + verifier_weight x their mixture reward, metrics)."""

    def rescore(traj):
        responses = [traj.response[r, :int(traj.lengths[r])].tolist() for r in range(len(traj.prompts))]
        scores = np.asarray(rm.score_ids(traj.prompts, responses), np.float32)
        reward = pcfg.rm_weight * normalize_rm(scores, pcfg.reward_norm) + pcfg.verifier_weight * traj.rewards
        metrics = {"rm_score": float(scores.mean()), "rm_score_std": float(scores.std()),
                   "verifier_reward": float(traj.rewards.mean())}
        return dataclasses.replace(traj, rewards=reward.astype(np.float32)), metrics

    return rescore


def evaluate_with_rm(model, tok, tasks, rm: RewardModel, max_new_tokens: int) -> dict:
    """Greedy held-out pass@1 (domain verifiers, as rlpt.eval.heldout) and the mean RM score of the answers."""
    prompts = [prompt_ids(tok, t.prompt) for t in tasks]
    out = generate(model, prompts, max_new_tokens, temperature=0.0, stop_ids=tuple(tok.eos_ids))
    toks, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    responses = [toks[i, :int(lengths[i])].tolist() for i in range(len(tasks))]
    passed = [get_domain(t.domain).verify(t, response_text(tok, r)).passed for t, r in zip(tasks, responses)]
    scores = rm.score_ids(prompts, responses)
    return {"pass1": float(np.mean(passed)), "rm_score": float(np.mean(scores))}


def run(cfg: Config) -> dict:
    """SFT warm start -> reward model (trained here unless pref.rm_path) -> PPO on the RL loop; held-out pass@1
    and RM score before and after."""
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
    t_ppo = time.time()
    with run_judges(cfg, tok, policy, cfg.train.out_dir) as judge_info:  # judges the mixture names
        rl = run_rl(cfg, tok, init_model=policy, out_dir=os.path.join(cfg.train.out_dir, "ppo"),
                    rescore=rm_rescore(rm, p))
    split["ppo"] = time.time() - t_ppo
    model, history = rl["model"], rl["history"]
    after = evaluate_with_rm(model, tok, eval_tasks, rm, rcfg.max_new_tokens)
    print(f"[eval after] pass@1 = {after['pass1']:.3f} rm_score = {after['rm_score']:.3f}", flush=True)
    if cfg.train.export_hf:  # every process: the weights are gathered, process 0 writes
        export_checkpoint(model, tok, os.path.join(cfg.train.out_dir, "hf"), source=cfg.train.init_from)
    kl = [h["kl_reward/kl"] for h in history[-10:] if "kl_reward/kl" in h]
    summary = {"stage": "ppo_rlhf", "experiment": cfg.experiment_name, "init_from": cfg.train.init_from or None,
               "tokenizer": tok.source, "vocab_size": model.config.vocab_size, "ppo_steps": cfg.rl.steps,
               "pass1_before": before["pass1"], "pass1_after": after["pass1"],
               "rm_score_before": before["rm_score"], "rm_score_after": after["rm_score"],
               "rm_weight": p.rm_weight, "verifier_weight": p.verifier_weight, "reward": cfg.reward.name,
               "reward_components": run_means(history), **judge_info, "kl_coef": cfg.rl.algo.kl_coef,
               "reward_norm": p.reward_norm, "advantage": cfg.rl.algo.advantage, "vf_lr": cfg.rl.critic.lr,
               "final_kl_ref": float(np.mean(kl)) if kl else None,
               "rm_pairwise_accuracy": rm_info.get("pairwise_accuracy"), "rm_path": p.rm_path or rm_info.get("rm_path"),
               "eval_tasks": len(eval_tasks), "rl_wall_s": rl["summary"]["rl_wall_s"],
               "time_split_s": {k: round(v, 2) for k, v in split.items()}, "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    return finish_run(summary, cfg.train.out_dir, model=model, history=history, reward_model=rm)
