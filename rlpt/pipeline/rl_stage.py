"""stage=rl: GRPO-family RL with verifiable rewards from train.init_from (an HF folder) or a fresh model.

Tasks come from the `domains` mixture and/or prompt files (data=rl_jsonl); rewards from the `reward` mixture.
The policy is evaluated (held-out greedy pass@1) before and after on the same model it trains, and exported as
an HF folder (weights with LoRA merged, tokenizer, generation_config.json) when train.export_hf is set.
"""
import os
import time

import jax

from rlpt.config.schema import Config
from rlpt.eval.heldout import evaluate, heldout_tasks
from rlpt.observe.observers import default_observers
from rlpt.observe.report import write_report
from rlpt.parallel import axis_rules
from rlpt.pipeline.judges import needed_judges, run_judges
from rlpt.pipeline.rl import run_rl
from rlpt.rewards.judges import JUDGES
from rlpt.tasks.files import check_prompt_lengths
from rlpt.tasks.files import needed_judges as file_judges
from rlpt.train.loop import finish_run, setup_mesh
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.source import base_model, export_checkpoint


def run(cfg: Config) -> dict:
    t0 = time.time()
    tok = get_tokenizer(cfg)
    names, _, tiers = domain_mixture(cfg)
    check_prompt_lengths(names, tok, cfg.rl.rollout.max_prompt_len)  # a prompt file's too-long row: file:line
    missing = [j for j in file_judges(names) if j not in JUDGES and j not in needed_judges(cfg)]
    if missing:
        raise KeyError(f"prompt-file rows are scored by judges {missing}, which are not registered: register them "
                       "(rlpt.rewards.register_judge) before the run, or drop those rows")
    eval_tasks = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)

    def eval_model(model) -> dict:
        return evaluate(model, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)

    mesh = setup_mesh(cfg)
    with jax.set_mesh(mesh), axis_rules(cfg.mesh.rules):
        policy = base_model(cfg, mesh)  # streamed onto its shardings; the RL trainer keeps them
    source = cfg.train.init_from or "random init"
    print(f"[rl] policy {policy.config.family} with {policy.config.num_params() / 1e6:.1f}M parameters from "
          f"{source}; tokenizer {tok.source} ({tok.vocab_size} ids, stop ids {list(tok.eos_ids)})", flush=True)
    before = eval_model(policy)
    print(f"[eval before] held-out pass@1 = {before['pass1']:.3f} on {len(eval_tasks)} tasks", flush=True)
    rl_dir = os.path.join(cfg.train.out_dir, "rl")
    with run_judges(cfg, tok, policy, cfg.train.out_dir) as judge_info:
        rl = run_rl(cfg, tok, init_model=policy, out_dir=rl_dir, evaluate_fn=lambda m: eval_model(m)["pass1"],
                    observers=default_observers(cfg, rl_dir))
    after = eval_model(rl["model"])
    print(f"[eval after]  held-out pass@1 = {after['pass1']:.3f}", flush=True)
    exported = None
    if cfg.train.export_hf:  # every process: the weights are gathered, process 0 writes
        exported = export_checkpoint(rl["model"], tok, os.path.join(cfg.train.out_dir, "hf"),
                                     source=cfg.train.init_from)
    hist = rl["history"]
    k = max(1, min(5, len(hist) // 4))
    first = sum(h["reward_mean"] for h in hist[:k]) / k if hist else None
    last = sum(h["reward_mean"] for h in hist[-k:]) / k if hist else None
    summary = {"stage": "rl", "experiment": cfg.experiment_name, "init_from": cfg.train.init_from or None,
               "tokenizer": tok.source, "vocab_size": policy.config.vocab_size, "lora_rank": cfg.lora.rank,
               "pass1_before": before["pass1"], "pass1_after": after["pass1"],
               "pass1_gain": after["pass1"] - before["pass1"], "reward_first": first, "reward_last": last,
               "reward_window": k, **rl["summary"], **judge_info, "eval_tasks": len(eval_tasks),
               "hf_export": exported, "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    summary["report"] = write_report(cfg.train.out_dir, title=f"rlpt run: {cfg.experiment_name}", summary=summary,
                                     history=hist, evals={"before": before["pass1"], "after": after["pass1"]},
                                     per_domain={"before": before["per_domain"], "after": after["per_domain"]})
    return finish_run(summary, cfg.train.out_dir, model=rl["model"], history=hist)
