"""Reward model: scores read at the last response token, save/load round trip, Bradley-Terry training learns
held-out pairs (pulse through `run`, JSON summary with pairwise_accuracy), loud errors."""
import json

import jax
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.models import builtin_tokenizer, init_model
from rlpt.preference.reward_model import RewardModel, bradley_terry_loss, score, score_rows
from rlpt.train.heads import init_head

TOK = builtin_tokenizer()
SMALL = ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false"]


def _rm(seed=0):
    cfg = compose(SMALL)
    m = init_model(cfg.model, seed)
    return RewardModel(m.config, {"lm": m.params, "head": init_head(m.config.hidden_size, seed)})


def test_scores_ignore_padding_and_depend_on_the_last_token():
    rm = _rm()
    prompts = [[1, 5, 30, 2, 6], [1, 5, 31, 2, 6]]
    a = rm.score_ids(prompts, [[40, 2], [41, 2]])
    b = rm.score_ids(prompts[:1], [[40, 2]])  # alone: a different row length and batch
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
    c = rm.score_ids(prompts[:1], [[40, 41]])
    assert abs(float(c[0]) - float(a[0])) > 1e-6
    rows = score_rows([[3, 4, 5]], 8)
    assert rows["last"].tolist() == [2] and rows["segment_ids"][0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="reward row holds"):
        score_rows([[]], 8)
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        rm.score_ids(prompts, [[40, 2]])


def test_save_load_round_trip_and_text_scores(tmp_path):
    rm = _rm(3)
    rm.save(str(tmp_path / "rm"), tokenizer=TOK)
    back = RewardModel.load(str(tmp_path / "rm"))
    prompts, answers = ["1+2=", "10+20="], ["3", "31"]
    np.testing.assert_allclose(score(back, TOK, prompts, answers), rm.score(TOK, prompts, answers), rtol=1e-5)
    with pytest.raises(FileNotFoundError, match="reward_head.npz"):
        RewardModel.load(str(tmp_path))


def test_bradley_terry_margin():
    sc, sr = np.array([1.0, 0.0]), np.array([0.0, 0.5])
    loss, m = bradley_terry_loss(sc, sr)
    np.testing.assert_allclose(float(loss), np.mean(np.log1p(np.exp(-(sc - sr)))), rtol=1e-6)
    loss_m, _ = bradley_terry_loss(sc, sr, np.array([1.0, 1.0]))
    np.testing.assert_allclose(float(loss_m), np.mean(np.log1p(np.exp(-(sc - sr - 1.0)))), rtol=1e-6)
    assert float(m["accuracy"]) == 0.5


def _pairs_file(path, seeds):
    rng = np.random.default_rng(seeds)
    with open(path, "w") as f:
        for _ in range(64):
            a, b = rng.integers(0, 50, 2)
            good, bad = ("yes", "no") if rng.random() < 0.5 else ("ok", "bad")
            f.write(json.dumps({"prompt": f"{a}+{b}=", "chosen": good, "rejected": bad}) + "\n")
    return str(path)


def test_rm_pulse_learns_heldout_pairs(tmp_path, capsys):
    from rlpt.preference.reward_model import run

    train, held = _pairs_file(tmp_path / "train.jsonl", 0), _pairs_file(tmp_path / "held.jsonl", 1)
    cfg = compose(["experiment=rm_tiny", "pref.sft_steps=0", "pref.source=jsonl", f"pref.path={train}",
                   f"pref.heldout_path={held}", "pref.rm_steps=25", "pref.rm_lr=3e-3", "pref.rm_batch_size=16",
                   "pref.rm_margin=0.5", "train.ckpt_every=25", f"train.out_dir={tmp_path / 'run'}"] + SMALL)
    out = run(cfg)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["pairwise_accuracy"] == 1.0 and last["heldout_pairs"] == 64
    assert last["pairs"]["pairs_kept"] == 64
    back = RewardModel.load(last["rm_path"])
    np.testing.assert_allclose(back.score(TOK, ["3+4="], ["yes"]), out["reward_model"].score(TOK, ["3+4="], ["yes"]),
                               rtol=1e-5)
    assert jax.tree.leaves(back.params["head"])
