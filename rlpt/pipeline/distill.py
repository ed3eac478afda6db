"""Distillation (stage=distill): a student learns a teacher's next-token distributions.

Logit distillation runs the teacher on fixed sequences (the run's SFT data, or completions the teacher samples);
on-policy distillation lets the student sample completions of task prompts and the teacher score every token the
student drew (GKD with lambda = 1; with reverse KL, the per-token loss is the dense signal of "on-policy
distillation"). The teacher is an HF folder with the student's tokenizer, or is trained here first with the
quickstart recipe. Held-out pass@1 of teacher, student before and after gives `recovered`: the share of the
teacher's gain over the student's start that the student reached.
"""
import dataclasses
import os
import time

import jax
import numpy as np

from rlpt.config.schema import Config, model_preset
from rlpt.eval.heldout import evaluate, heldout_tasks
from rlpt.models import Model, load_pretrained
from rlpt.pipeline import quickstart
from rlpt.pipeline.cold_start import cold_start_config
from rlpt.pipeline.cold_start import run as cold_start
from rlpt.rollout.single_turn import rollout, to_rows
from rlpt.tasks.curriculum import build_curriculum
from rlpt.train.data import HostData
from rlpt.train.loop import LoopHooks, RunLog, finish_run, make_trainer, maybe_resume, run_loop, to_float
from rlpt.train.losses import distill_loss
from rlpt.train.sft import domain_mixture, get_tokenizer
from rlpt.train.source import export_checkpoint, runtime_overrides

ROW_KEYS = ("inputs", "targets", "positions", "segment_ids", "loss_mask")


def load_teacher(cfg: Config, tok) -> tuple[Model, dict]:
    """The teacher: distill.teacher's folder, else the one an earlier run of this stage trained into
    <out_dir>/teacher/hf, else a new one trained there with the quickstart recipe on distill.teacher_model."""
    d, runtime = cfg.distill, runtime_overrides(cfg.model)
    if d.teacher:
        if not os.path.exists(os.path.join(d.teacher, "config.json")):
            raise ValueError(f"distill.teacher={d.teacher!r} is not an HF checkpoint folder (no config.json)")
        return load_pretrained(d.teacher, **runtime), {"teacher": d.teacher, "teacher_trained": False}
    folder = os.path.join(cfg.train.out_dir, "teacher", "hf")
    if os.path.exists(os.path.join(folder, "config.json")):
        return load_pretrained(folder, **runtime), {"teacher": folder, "teacher_trained": False}

    try:
        preset = model_preset(d.teacher_model)
    except ValueError as e:
        raise ValueError(f"distill.teacher_model={e}") from None
    t0 = time.time()
    tcfg = dataclasses.replace(
        cfg, stage="quickstart", model=dataclasses.replace(preset, **runtime),
        train=dataclasses.replace(cfg.train, out_dir=os.path.join(cfg.train.out_dir, "teacher"), init_from=""))
    print(f"[distill] training the teacher (quickstart recipe, model={d.teacher_model}) in "
          f"{tcfg.train.out_dir}", flush=True)
    model = quickstart.run(tcfg)["model"]
    export_checkpoint(model, tok, folder)
    return model, {"teacher": folder, "teacher_trained": True, "teacher_wall_s": round(time.time() - t0, 2)}


def _on_mesh(teacher: Model):
    """extra_frozen for make_trainer: the teacher's params on the student's mesh, sharded by the rules."""
    def frozen(student: Model) -> dict:
        return {"teacher": teacher.placed(jax.tree.leaves(student.params)[0].sharding.mesh).params}
    return frozen


class SampledRows:
    """Rows of completions sampled for curriculum tasks (rl.rollout's shapes and temperature), by the student
    (on-policy) or the teacher; each step's tasks and draws follow from train.seed and the step."""

    def __init__(self, cfg: Config, tok):
        self.cfg, self.tok = cfg, tok
        self.curriculum = build_curriculum(cfg.curriculum, cfg.domains)
        self.cstate = self.curriculum.init_state()
        r = cfg.rl.rollout
        self.row_len = r.max_prompt_len + r.max_new_tokens

    def __call__(self, model: Model, step: int) -> tuple[dict, dict]:
        rng = np.random.default_rng([self.cfg.train.seed, 23, step])
        tasks = self.curriculum.tasks(self.cstate, step, rng, self.cfg.rl.rollout.prompts_per_step)
        traj = rollout(model, self.tok, tasks, self.cfg.rl.rollout, seed=self.cfg.train.seed * 1_000_003 + step,
                       version=step)
        rows = to_rows(traj, self.row_len)
        return {k: rows[k] for k in ROW_KEYS}, {"sample_reward": float(np.mean(traj.rewards)),
                                                "sample_len": float(np.mean(traj.lengths))}


def run(cfg: Config) -> dict:
    t_start = time.time()
    d = cfg.distill
    tok = get_tokenizer(cfg)
    names, _, tiers = domain_mixture(cfg)
    eval_tasks = heldout_tasks(names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset)
    out_dir = cfg.train.out_dir
    os.makedirs(out_dir, exist_ok=True)

    def pass1(model) -> float:
        return evaluate(model, tok, eval_tasks, max_new_tokens=cfg.rl.rollout.max_new_tokens)["pass1"]

    teacher, teacher_info = load_teacher(cfg, tok)
    teacher_pass1 = pass1(teacher)
    print(f"[distill] teacher held-out pass@1 = {teacher_pass1:.3f}", flush=True)
    t_student = time.time()
    init, sft_steps = None, 0
    if cfg.rl.sft_steps > 0:  # the student's own start: the quickstart's cold start
        sft_cfg = cold_start_config(dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, out_dir=os.path.join(out_dir, "student_sft"))))
        sft = cold_start(sft_cfg, tok, domain_mixture(sft_cfg), max_new_tokens=cfg.rl.rollout.max_new_tokens)
        init, sft_steps = sft["model"], sft["steps"]

    def loss(model_cfg):
        return distill_loss(model_cfg, teacher.config, d.divergence, beta=d.beta, temperature=d.temperature)

    trainer = make_trainer(cfg, loss, extra_frozen=_on_mesh(teacher), init=init, subdir="distill_checkpoints")
    meta = maybe_resume(trainer) or {}
    start = int(trainer.state.step)
    curve = [tuple(x) for x in meta.get("curve", [])]
    if start == 0:
        curve = [(0, pass1(trainer.model()))]
    before = curve[0][1]
    print(f"[distill] student ({trainer.model_cfg.num_layers} layers) held-out pass@1 before = {before:.3f}",
          flush=True)

    sampled = d.mode == "on_policy" or d.sequences == "teacher"
    if sampled:
        sample = SampledRows(cfg, tok)
    else:
        data = HostData(cfg.data, tok, cfg.train.seed, grad_accum=cfg.optim.grad_accum,
                        domains=domain_mixture(cfg), total_steps=cfg.train.steps)
        if meta.get("data") is not None:
            data.set_state(meta["data"])

    runlog = RunLog(out_dir, resume_at=start)

    def batch(step):
        if sampled:
            return sample(trainer.model() if d.mode == "on_policy" else teacher, step)
        return data.next_batch()

    def row(step, metrics, extra):
        tokens = max(metrics["tokens"], 1.0)
        return {"divergence": metrics["loss"], "grad_norm": metrics["grad_norm"],
                "student_nll": metrics["student_nll_sum"] / tokens, "teacher_nll": metrics["teacher_nll_sum"] / tokens,
                **{k: v for k, v in extra.items() if np.ndim(v) == 0}}

    def check(step):
        curve.append((step, pass1(trainer.model())))
        return {"eval_pass1": curve[-1][1]}

    hooks = LoopHooks(train=lambda b: to_float(trainer.step(b, host_local=not sampled)), row=row, evaluate=check,
                      meta=lambda: {"curve": curve} | ({} if sampled else {"data": data.get_state()}))
    with runlog:
        loop = run_loop(trainer, batch, hooks, steps=cfg.train.steps, log=runlog, log_every=cfg.train.log_every,
                        progress=cfg.train.progress, eval_every=cfg.train.eval_every,
                        show=("divergence", "student_nll", "grad_norm"))
    last, t_loop = loop.last, time.time() - loop.wall_s
    after = pass1(trainer.model())
    if not curve or curve[-1][0] != cfg.train.steps:
        curve.append((cfg.train.steps, after))
    gain = teacher_pass1 - before
    summary = {
        "stage": "distill", "experiment": cfg.experiment_name, "mode": d.mode,
        "sequences": None if d.mode == "on_policy" else d.sequences, "divergence": d.divergence,
        "temperature": d.temperature, **teacher_info,
        "teacher_params": teacher.config.num_params(), "student_params": trainer.model_cfg.num_params(),
        "teacher_layers": teacher.config.num_layers, "student_layers": trainer.model_cfg.num_layers,
        "teacher_pass1": teacher_pass1, "student_before_pass1": before, "student_after_pass1": after,
        # the share of the teacher's gain over the student's start; None when the teacher is not better
        "recovered": (after - before) / gain if gain > 0 else None,
        "student_sft_steps": sft_steps, "steps": cfg.train.steps,
        "final_divergence": last.get("divergence", float("nan")),
        "curve": {str(s): p for s, p in curve},
        "distill_wall_s": round(time.time() - t_loop, 2), "student_wall_s": round(time.time() - t_student, 2),
        "wall_s": round(time.time() - t_start, 2), "run_dir": os.path.abspath(out_dir)}
    if cfg.train.export_hf:
        export_checkpoint(trainer.model(), tok, os.path.join(out_dir, "hf"))
    return finish_run(summary, out_dir, model=trainer.model(), teacher=teacher)
