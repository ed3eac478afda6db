"""PPO-RLHF: rewards combine RM and verifier scores with the KL penalty into GAE returns; a pulse run from
a saved reward model trains, checkpoints and ends with pass1 / rm_score before and after."""
import json
import types

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.models import builtin_tokenizer, init_model
from rlpt.preference.heads import head_optimizer, init_head
from rlpt.preference.ppo_rlhf import make_batch, normalize_rm
from rlpt.preference.reward_model import RewardModel
from rlpt.rollout.single_turn import Trajectories
from rlpt.train.loop import setup_mesh

TOK = builtin_tokenizer()
SMALL = ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false"]


def _traj():
    return Trajectories(tasks=[None], prompts=[[1, 5, 30, 2, 6]] * 2, response=np.array([[40, 2, 0], [41, 42, 2]]),
                        lengths=np.array([2, 3]), rollout_logp=np.full((2, 3), -0.5, np.float32),
                        rewards=np.array([1.0, 0.0], np.float32), passed=np.array([True, False]),
                        group_ids=np.array([0, 0]), truncated=np.array([False, False]), version=0, gen_s=0.0,
                        verify_s=0.0, texts=["", ""])


def test_rewards_mix_rm_and_verifier_and_kl_enters_returns():
    cfg = compose(SMALL + ["pref.rm_weight=2.0", "pref.verifier_weight=1.0", "pref.kl_coef=0.5", "pref.lam=1.0",
                           "pref.reward_norm=none"])
    rm = types.SimpleNamespace(score_ids=lambda prompts, responses: np.array([0.25, -1.0], np.float32))
    ref_shift = 0.1  # the reference gives every sampled token log-prob 0.1 lower: k1 KL = 0.1 per token

    def aux(params, frozen, rows):
        mask = jnp.asarray(rows["loss_mask"])
        return jnp.asarray(rows["rollout_logp"]) - ref_shift * mask, jnp.zeros_like(mask)

    trainer = types.SimpleNamespace(mesh=setup_mesh(cfg), cfg=cfg, state=types.SimpleNamespace(params={}, frozen={}))
    batch, info = make_batch(trainer, aux, _traj(), rm, cfg.pref, row_len=12)
    want_reward = 2.0 * np.array([0.25, -1.0]) + np.array([1.0, 0.0])
    assert np.isclose(info["reward"], want_reward.mean()) and np.isclose(info["kl_ref"], ref_shift)
    for r, n in ((0, 2), (1, 3)):
        m = batch["loss_mask"][r] > 0
        assert m.sum() == n
        # gamma = lam = 1, V = 0: return_t = outcome reward - kl_coef * (KL of tokens t..end)
        want = want_reward[r] - 0.5 * ref_shift * np.arange(n, 0, -1)
        np.testing.assert_allclose(batch["returns"][r][m], want, rtol=1e-5)
    adv = batch["advantages"][batch["loss_mask"] > 0]
    assert abs(adv.mean()) < 1e-5  # whitened over the batch's response tokens
    np.testing.assert_array_equal(batch["old_logp"], batch["rollout_logp"])


def test_ppo_rlhf_pulse_from_saved_rm(tmp_path, capsys):
    from rlpt.preference.ppo_rlhf import run

    cfg = compose(["experiment=ppo_rlhf_tiny"] + SMALL)
    m = init_model(cfg.model, 5)
    RewardModel(m.config, {"lm": m.params, "head": init_head(m.config.hidden_size, 5)}).save(str(tmp_path / "rm"))
    cfg = compose(["experiment=ppo_rlhf_tiny", "pref.sft_steps=2", f"pref.rm_path={tmp_path / 'rm'}",
                   "pref.ppo_steps=2", "pref.ppo_epochs=2", "pref.verifier_weight=0.5", "rl.rollout.prompts_per_step=4",
                   "rl.rollout.group_size=2", "pref.eval_per_domain=4", "data.batch_size=8", "train.ckpt_every=2",
                   "reward=layered", f"train.out_dir={tmp_path / 'run'}"] + SMALL)
    out = run(cfg)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the verifier's part of the reward is the reward mixture's: its components reach the rows and the summary
    assert last["reward"] == "layered" and set(last["reward_components"]) == {"correctness", "format",
                                                                               "length_penalty"}
    assert all("reward_component/format" in h for h in out["history"])
    for h in out["history"]:  # layered = correctness + 0.1 format + 0.1 length_penalty (inside the clip range)
        c = {k: h[f"reward_component/{k}"] for k in ("correctness", "format", "length_penalty")}
        assert h["verifier_reward"] == pytest.approx(c["correctness"] + 0.1 * c["format"] + 0.1 * c["length_penalty"],
                                                     abs=1e-6)
    for k in ("pass1_before", "pass1_after", "rm_score_before", "rm_score_after"):
        assert isinstance(last[k], float)
    assert [h["step"] for h in out["history"]] == [1, 2]
    assert all(np.isfinite(h["loss"]) and "ppo/vf_clip_frac" in h for h in out["history"])
    assert (tmp_path / "run" / "ppo" / "checkpoints").is_dir()
    assert len((tmp_path / "run" / "ppo" / "metrics.jsonl").read_text().splitlines()) == 2


def test_rm_scores_are_standardised_per_batch_before_the_verifier_is_added():
    s = np.array([14.0, -6.0, 4.0, 12.0], np.float32)
    z = normalize_rm(s, "batch")
    np.testing.assert_allclose([z.mean(), z.std()], [0.0, 1.0], atol=1e-5)
    assert np.argsort(z).tolist() == np.argsort(s).tolist()
    np.testing.assert_array_equal(normalize_rm(s, "none"), s)
    with pytest.raises(ValueError, match="pref.reward_norm"):
        normalize_rm(s, "running")


def test_value_head_has_its_own_clip_and_learning_rate():
    cfg = compose(SMALL + ["optim.name=sgd", "optim.lr=0.1", "optim.clip_norm=1.0", "optim.warmup_steps=0",
                           "optim.schedule=constant"])
    params = {"lm": {"w": jnp.zeros(2)}, "head": {"w": jnp.zeros(2), "b": jnp.zeros(())}}
    grads = {"lm": {"w": jnp.array([0.3, 0.4])}, "head": {"w": jnp.array([300.0, 400.0]), "b": jnp.zeros(())}}
    shared = head_optimizer(cfg, None)
    up, _ = shared.update(grads, shared.init(params), params)
    assert float(jnp.linalg.norm(up["lm"]["w"])) < 2e-4  # one global clip: the head's norm (500) shrinks the lm step
    split = head_optimizer(cfg, 0.5)
    up, _ = split.update(grads, split.init(params), params)
    np.testing.assert_allclose(up["lm"]["w"], [-0.03, -0.04], rtol=1e-5)  # lm grad (norm 0.5) is not clipped
    np.testing.assert_allclose(up["head"]["w"], [-0.3, -0.4], rtol=1e-5)  # head: clipped to norm 1, lr 0.5
