"""The quickstart: tiny model from scratch, SFT cold start on a noisy teacher, then GRPO with verifiable
rewards under the curriculum; held-out pass@1 before and after each stage; report and JSON summary."""
import os
import time

from rlpt.config.schema import Config
from rlpt.eval.heldout import evaluate, heldout_tasks
from rlpt.observe.observers import default_observers
from rlpt.observe.report import write_report
from rlpt.pipeline.cold_start import cold_start_config
from rlpt.pipeline.cold_start import run as cold_start
from rlpt.pipeline.judges import run_judges
from rlpt.pipeline.rl import run_rl
from rlpt.train.loop import finish_run
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.source import base_model


def run(cfg: Config) -> dict:
    t0 = time.time()
    tok = get_tokenizer(cfg)
    names, _, tiers = domain_mixture(cfg)
    eval_tasks = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)

    def eval_model(model) -> dict:
        return evaluate(model, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)

    sft_cfg = cold_start_config(cfg)
    base = eval_model(base_model(cfg))  # the model the cold start starts from (train.init_from or a fresh init)
    print(f"[eval base] held-out pass@1 on the RL domains = {base['pass1']:.3f}", flush=True)
    sft_mixture = domain_mixture(sft_cfg)
    sft = cold_start(sft_cfg, tok, sft_mixture, max_new_tokens=cfg.rl.rollout.max_new_tokens)
    sft_eval = eval_model(sft["model"])
    print(f"[eval sft]  held-out pass@1 on the RL domains = {sft_eval['pass1']:.3f}", flush=True)
    rl_dir = os.path.join(cfg.train.out_dir, "rl")
    # judges the reward mixture names (reward=judged: a reward model on the SFT policy's backbone)
    with run_judges(cfg, tok, sft["model"], cfg.train.out_dir) as judge_info:
        rl = run_rl(cfg, tok, init_model=sft["model"], out_dir=rl_dir, evaluate_fn=lambda m: eval_model(m)["pass1"],
                    observers=default_observers(cfg, rl_dir))
    rl_eval = eval_model(rl["model"])
    print(f"[eval rl]   held-out pass@1 on the RL domains = {rl_eval['pass1']:.3f}", flush=True)
    summary = {"experiment": cfg.experiment_name, "base_pass1": base["pass1"], "sft_pass1": sft_eval["pass1"],
               "rl_pass1": rl_eval["pass1"], "rl_gain": rl_eval["pass1"] - sft_eval["pass1"],
               "sft_steps": sft["steps"], "sft_dev_pass1": {s: p for s, p in sft["dev_curve"]},
               "sft_final_loss": sft["final_loss"], **rl["summary"], **judge_info,
               "eval_tasks": len(eval_tasks), "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    report = write_report(cfg.train.out_dir, title=f"rlpt run: {cfg.experiment_name}", summary=summary,
                          history=rl["history"],
                          evals={"base": base["pass1"], "sft": sft_eval["pass1"], "rl": rl_eval["pass1"]},
                          per_domain={"base": base["per_domain"], "sft": sft_eval["per_domain"],
                                      "rl": rl_eval["per_domain"]})
    summary["report"] = report
    return finish_run(summary, cfg.train.out_dir, model=rl["model"], history=rl["history"])
