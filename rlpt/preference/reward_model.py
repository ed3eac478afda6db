"""Reward model: a scalar head read at the last response token, Bradley-Terry training on pairs (optional
margin), pairwise accuracy on held-out pairs, and `RewardModel` (score / save / load) for judges and PPO."""
import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.algos import bradley_terry_loss
from rlpt.config.schema import Config
from rlpt.models import Model, load_pretrained
from rlpt.models.config import ModelConfig
from rlpt.preference.common import sub_config, warm_start
from rlpt.preference.data import batch_indices, longest_pair
from rlpt.preference.pairs import make_pairs
from rlpt.rollout.format import completion_ids, fit_width, prompt_ids
from rlpt.train.heads import init_head, last_token_scores, make_head_trainer
from rlpt.train.loop import LoopHooks, RunLog, finish_run, maybe_resume, run_loop
from rlpt.train.sft import get_tokenizer

HEAD_FILE = "reward_head.npz"


def score_rows(seqs: list, row_len: int) -> dict[str, np.ndarray]:
    """Full sequences (prompt + response ids) -> tokens/positions/segment_ids (N, row_len), last (N,)."""
    N = len(seqs)
    out = {k: np.zeros((N, row_len), np.int32) for k in ("tokens", "positions", "segment_ids")}
    out["last"] = np.zeros((N,), np.int32)
    for i, seq in enumerate(seqs):
        if not 0 < len(seq) <= row_len:
            raise ValueError(f"sequence {i}: {len(seq)} tokens; a reward row holds 1..{row_len}")
        out["tokens"][i, :len(seq)] = seq
        out["positions"][i, :len(seq)] = np.arange(len(seq))
        out["segment_ids"][i, :len(seq)] = 1
        out["last"][i] = len(seq) - 1
    return out


@dataclasses.dataclass
class RewardModel:
    """A backbone `config` + params {"lm": transformer params, "head": {"w": (D,), "b": ()}}.

    score_ids(prompts, responses) -> (N,) float32 for token-id lists (the response as the policy produced
    it, end-of-turn included); score(tok, prompts, responses) for texts (prompt: str or chat messages;
    response: str, encoded as the assistant's turn). Higher is better; scores are uncalibrated logits of
    the Bradley-Terry model (P(a preferred to b) = sigmoid(s_a - s_b)).
    """

    config: ModelConfig
    params: dict

    def score_ids(self, prompts: list, responses: list, *, batch_size: int = 128) -> np.ndarray:
        if len(prompts) != len(responses):
            raise ValueError(f"score_ids: {len(prompts)} prompts but {len(responses)} responses")
        seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
        if not seqs:
            return np.zeros((0,), np.float32)
        row_len = max(8, 1 << (max(len(s) for s in seqs) - 1).bit_length())  # power of two: few compiles
        out = []
        for s in range(0, len(seqs), batch_size):
            rows = score_rows(seqs[s:s + batch_size], row_len)
            out.append(np.asarray(_jit_scores(self.config, self.params, rows)))
        return np.concatenate(out).astype(np.float32)

    def score(self, tok, prompts: list, responses: list[str], *, batch_size: int = 128) -> np.ndarray:
        return self.score_ids([prompt_ids(tok, p) for p in prompts], [completion_ids(tok, r) for r in responses],
                              batch_size=batch_size)

    def save(self, folder: str, tokenizer=None) -> None:
        """An HF folder for the backbone (config.json + safetensors) plus reward_head.npz."""
        Model(self.config, self.params["lm"]).save_pretrained(folder, tokenizer=tokenizer)
        head = jax.device_get(self.params["head"])
        np.savez(os.path.join(folder, HEAD_FILE), w=np.asarray(head["w"]), b=np.asarray(head["b"]))

    @classmethod
    def load(cls, folder: str, **config_overrides) -> "RewardModel":
        path = os.path.join(folder, HEAD_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{folder}: no {HEAD_FILE}; not a RewardModel folder (see RewardModel.save)")
        model = load_pretrained(folder, **config_overrides)
        with np.load(path) as z:
            head = {"w": jnp.asarray(z["w"], jnp.float32), "b": jnp.asarray(z["b"], jnp.float32)}
        if head["w"].shape != (model.config.hidden_size,):
            raise ValueError(f"{path}: head w has shape {head['w'].shape}; the backbone's hidden size is "
                             f"{model.config.hidden_size}")
        return cls(model.config, {"lm": model.params, "head": head})


_jit_scores = jax.jit(lambda config, params, rows: last_token_scores(
    params, config, rows["tokens"], rows["positions"], rows["segment_ids"], rows["last"]), static_argnums=0)


def score(rm: RewardModel, tok, prompts: list, responses: list[str]) -> np.ndarray:
    """Reward-model scores (N,) of text responses to prompts; see RewardModel.score."""
    return rm.score(tok, prompts, responses)


def pair_score_arrays(pairs, row_len: int) -> dict[str, np.ndarray]:
    """c_* and r_* score rows (tokens, positions, segment_ids, last) for pairs, `fit_width` of the longest pair
    wide (at most row_len)."""
    row_len = fit_width(longest_pair(pairs), row_len)
    c = score_rows([p.prompt + p.chosen for p in pairs], row_len)
    r = score_rows([p.prompt + p.rejected for p in pairs], row_len)
    return {f"c_{k}": v for k, v in c.items()} | {f"r_{k}": v for k, v in r.items()}


def bt_loss(pcfg):
    """loss_fn factory: Bradley-Terry on chosen vs rejected scores (one forward over both), with margin."""
    def factory(model_cfg):
        def loss_fn(params, frozen, batch, rng):
            del frozen, rng
            cat = {k: jnp.concatenate([batch["c_" + k], batch["r_" + k]]) for k in
                   ("tokens", "positions", "segment_ids", "last")}
            s = last_token_scores(params, model_cfg, cat["tokens"], cat["positions"], cat["segment_ids"],
                                  cat["last"])
            sc, sr = jnp.split(s, 2)
            margin = None if pcfg.rm_margin == 0 else jnp.full_like(sc, pcfg.rm_margin)
            loss, metrics = bradley_terry_loss(sc, sr, margin, pcfg.rm_center_coef or None)
            b = jnp.asarray(sc.shape[0], jnp.float32)
            return loss * b, b, {f"rm/{k}": v * b for k, v in metrics.items()}
        return loss_fn
    return factory


def pairwise_accuracy(rm: RewardModel, pairs) -> float:
    """Share of pairs whose chosen response scores above the rejected one."""
    if not pairs:
        return float("nan")
    sc = rm.score_ids([p.prompt for p in pairs], [p.chosen for p in pairs])
    sr = rm.score_ids([p.prompt for p in pairs], [p.rejected for p in pairs])
    return float(np.mean(sc > sr))


def train_reward_model(cfg: Config, tok, backbone: Model, out_dir: str) -> tuple[RewardModel, dict]:
    """Bradley-Terry training of backbone + fresh head on cfg.pref pairs; saves to out_dir/reward_model."""
    p = cfg.pref
    train, train_counts = make_pairs(cfg, tok, "train", model=backbone, seed=101)
    heldout, held_counts = make_pairs(cfg, tok, "heldout", model=backbone, seed=102)
    print(f"[rm pairs] train {train_counts} heldout {held_counts}", flush=True)
    if not train:
        raise ValueError(f"no reward-model training pairs left (counts: {train_counts})")
    rm0 = RewardModel(backbone.config, {"lm": backbone.params, "head": init_head(backbone.config.hidden_size,
                                                                                  cfg.train.seed + 3)})
    acc_before = pairwise_accuracy(rm0, heldout)
    scfg = sub_config(cfg, steps=p.rm_steps, lr=p.rm_lr, out_dir=out_dir, batch_size=p.rm_batch_size)
    trainer = make_head_trainer(scfg, bt_loss(p), backbone, rm0.params["head"])
    maybe_resume(trainer)
    arrays = pair_score_arrays(train, p.max_len)
    runlog = RunLog(out_dir, resume_at=int(trainer.state.step))

    def batch(step):
        idx = batch_indices(len(train), p.rm_batch_size, step - 1, cfg.train.seed + 5)
        return {k: v[idx] for k, v in arrays.items()}, None

    def row(step, m, extra):
        return {"loss": m["loss"], "grad_norm": m["grad_norm"]} | {
            k: v / p.rm_batch_size for k, v in m.items() if k.startswith("rm/")}

    with runlog:
        loop = run_loop(trainer, batch, LoopHooks(row=row), steps=p.rm_steps, log=runlog,
                        log_every=cfg.train.log_every, progress=cfg.train.progress, show=("loss", "rm/accuracy"))
        last = loop.last
        rm = RewardModel(backbone.config, jax.device_get(trainer.state.params))
        acc = pairwise_accuracy(rm, heldout)
        train_acc = pairwise_accuracy(rm, train[:512])
        runlog.scalar("eval/pairwise_accuracy", acc, p.rm_steps)
    path = os.path.join(out_dir, "reward_model")
    if jax.process_index() == 0:
        rm.save(path, tokenizer=tok)
    info = {"pairwise_accuracy": acc, "pairwise_accuracy_before": acc_before, "train_pairwise_accuracy": train_acc,
            "heldout_pairs": len(heldout), "train_pairs": len(train), "rm_final_loss": last.get("loss"),
            "pairs": train_counts, "heldout_pair_counts": held_counts, "rm_path": os.path.abspath(path)}
    with open(os.path.join(out_dir, "rm_eval.json"), "w") as f:
        json.dump(info, f, default=float)
    return rm, info


def run(cfg: Config) -> dict:
    """SFT warm start (optional) -> reward model on cfg.pref pairs; summary with pairwise_accuracy."""
    t0 = time.time()
    tok = get_tokenizer(cfg)
    os.makedirs(cfg.train.out_dir, exist_ok=True)
    backbone = warm_start(cfg)
    rm, info = train_reward_model(cfg, tok, backbone, cfg.train.out_dir)
    summary = {"stage": "rm", "experiment": cfg.experiment_name, "init_from": cfg.train.init_from or None,
               "tokenizer": tok.source, "vocab_size": backbone.config.vocab_size, "source": cfg.pref.source,
               "rm_steps": cfg.pref.rm_steps, **info, "wall_s": round(time.time() - t0, 2),
               "run_dir": os.path.abspath(cfg.train.out_dir)}
    return finish_run(summary, cfg.train.out_dir, reward_model=rm)
