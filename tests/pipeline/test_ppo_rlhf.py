"""RL with a value head (rl.algo.advantage=gae, rl.critic) and PPO-RLHF on that loop: the RM and verifier scores
mix into the reward, the reference KL enters the GAE returns, the value loss moves only the head, and a pulse
run from a saved reward model trains, checkpoints and ends with pass1 / rm_score before and after."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.config import compose
from rlpt.config.schema import AlgoConfig, CriticConfig
from rlpt.config.validate import ConfigError
from rlpt.models import ModelConfig, init_model
from rlpt.pipeline.ppo_rlhf import normalize_rm, rm_rescore
from rlpt.pipeline.rl import check_shared_prefix, make_batch
from rlpt.preference.reward_model import RewardModel
from rlpt.rollout.single_turn import Trajectories, response_window, to_rows
from rlpt.train.heads import head_optimizer, init_head
from rlpt.train.losses import rl_loss, token_logprobs, token_logprobs_entropy

SMALL = ["model.hidden_size=32", "model.intermediate_size=64", "train.progress=false"]
CFG = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  attention_impl="dense")


def _traj():
    return Trajectories(tasks=[None], prompts=[[1, 5, 30, 2, 6]] * 2, response=np.array([[40, 2, 0], [41, 42, 2]]),
                        lengths=np.array([2, 3]), rollout_logp=np.full((2, 3), -0.5, np.float32),
                        rewards=np.array([1.0, 0.0], np.float32), passed=np.array([True, False]),
                        group_ids=np.array([0, 0]), truncated=np.array([False, False]), version=0, gen_s=0.0,
                        verify_s=0.0, texts=["", ""])


def test_rm_rescore_mixes_rm_and_verifier_scores():
    pref = compose(SMALL + ["stage=ppo_rlhf", "pref.rm_weight=2.0", "pref.verifier_weight=1.0",
                            "pref.reward_norm=none"]).pref
    rm = type("RM", (), {"score_ids": lambda self, prompts, responses: np.array([0.25, -1.0], np.float32)})()
    traj, info = rm_rescore(rm, pref)(_traj())
    np.testing.assert_allclose(traj.rewards, 2.0 * np.array([0.25, -1.0]) + np.array([1.0, 0.0]))
    assert info == {"rm_score": pytest.approx(-0.375), "rm_score_std": pytest.approx(0.625),
                    "verifier_reward": 0.5}


def test_gae_batch_folds_the_reference_kl_into_the_returns():
    cfg = compose(SMALL + ["stage=ppo_rlhf", "rl.algo.kl_coef=0.5", "rl.algo.advantage_kwargs.lam=1.0",
                           "rl.rollout.group_size=2"])
    traj = _traj()
    rows = to_rows(traj, 12)
    ref_shift = 0.1  # the reference gives every sampled token log-prob 0.1 lower: k1 KL = 0.1 per token
    ref = rows["rollout_logp"] - ref_shift * rows["loss_mask"]
    batch, info = make_batch(traj, cfg, 12, ref_logp=ref, values=np.zeros_like(ref))
    assert info["kl_reward/kl"] == pytest.approx(ref_shift)
    for r, n in ((0, 2), (1, 3)):
        m = batch["loss_mask"][r] > 0
        assert m.sum() == n
        # gamma = lam = 1, V = 0: return_t = outcome reward - kl_coef * (KL of tokens t..end)
        want = traj.rewards[r] - 0.5 * ref_shift * np.arange(n, 0, -1)
        np.testing.assert_allclose(batch["returns"][r][m], want, rtol=1e-5)
    adv = batch["advantages"][batch["loss_mask"] > 0]
    assert abs(adv.mean()) < 1e-5  # whitened over the batch's response tokens
    np.testing.assert_array_equal(batch["old_logp"], batch["rollout_logp"])
    np.testing.assert_array_equal(batch["old_values"], 0.0)
    with pytest.raises(ValueError, match="needs values"):
        make_batch(traj, cfg, 12, ref_logp=ref)


def _critic_batch(params, head, seed=0, window=False):
    rng = np.random.default_rng(seed)
    R, N = 6, 7
    traj = Trajectories(tasks=[None] * R, prompts=[[3 + i, 4, 5 + i] for i in range(R)],
                        response=rng.integers(3, 32, (R, N)).astype(np.int32), lengths=rng.integers(1, N + 1, R),
                        rollout_logp=np.zeros((R, N), np.float32), rewards=rng.random(R).astype(np.float32),
                        passed=np.zeros(R, bool), group_ids=np.repeat(np.arange(3), 2), truncated=np.zeros(R, bool),
                        version=0, gen_s=0.0, verify_s=0.0, texts=[""] * R)
    rows = to_rows(traj, 16)
    mask = rows["loss_mask"]
    rows["advantages"] = (rng.normal(size=(R, 1)) * mask).astype(np.float32)
    rows["old_logp"] = rows["rollout_logp"] = (np.asarray(token_logprobs(params, CFG, rows)) - 0.2 * mask) * mask
    rows["old_values"] = (rng.normal(size=mask.shape) * mask).astype(np.float32)
    rows["returns"] = (rng.normal(size=mask.shape) * mask).astype(np.float32)
    if window:
        rows["window"] = response_window(traj, mask.shape[1])
    return jax.tree.map(jnp.asarray, rows)


@pytest.mark.parametrize("window", [False, True], ids=["all-columns", "window"])
def test_the_value_loss_is_added_per_token_and_moves_only_the_head(window):
    """rl_loss with a critic = the policy loss + vf_coef x the clipped value loss of the head on detached hidden
    states; the backbone's gradient is the policy loss's alone, the head's the value loss's."""
    lm, head = init_model(CFG, 0).params, init_head(CFG.hidden_size, 1)
    batch = _critic_batch(lm, head, window=window)
    algo, critic = AlgoConfig(advantage="gae"), CriticConfig(vf_coef=0.7, value_clip=0.1)

    def ours(p):
        num, den, metrics = rl_loss(algo, critic=critic)(CFG)(p, {}, batch, None)
        return num / den, metrics

    def policy_only(p):
        num, den, _ = rl_loss(algo)(CFG)(p, {}, batch, None)
        return num / den

    def value_only(h):  # by hand on the full rows: the head on the hidden states, the clipped loss, token-mean
        full = {k: v for k, v in batch.items() if k != "window"}
        _, _, values = token_logprobs_entropy(lm, CFG, full, value_head=h)
        mask = full["loss_mask"]
        vc = full["old_values"] + jnp.clip(values - full["old_values"], -0.1, 0.1)
        per = 0.5 * jnp.maximum((values - full["returns"]) ** 2, (vc - full["returns"]) ** 2)
        return jnp.sum(per * mask) / jnp.sum(mask)

    (loss, metrics), grads = jax.jit(jax.value_and_grad(ours, has_aux=True))({"lm": lm, "head": head})
    np.testing.assert_allclose(float(loss), float(policy_only(lm)) + 0.7 * float(value_only(head)), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(grads["lm"]), jax.tree.leaves(jax.grad(policy_only)(lm))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)
    for a, b in zip(jax.tree.leaves(grads["head"]), jax.tree.leaves(jax.grad(value_only)(head))):
        np.testing.assert_allclose(np.asarray(a), 0.7 * np.asarray(b), rtol=1e-4, atol=1e-7)
    n = float(jnp.sum(batch["loss_mask"]))
    assert float(metrics["critic/vf_loss"]) / n == pytest.approx(float(value_only(head)), rel=1e-5)
    assert {"critic/vf_clip_frac", "critic/value_mean", "critic/value_error"} <= set(metrics)


def test_values_with_a_shared_prefix_equal_the_full_rows():
    lm, head = init_model(CFG, 2).params, init_head(CFG.hidden_size, 3)
    rng = np.random.default_rng(5)
    G, N = 3, 5
    traj = Trajectories(tasks=[None] * 6, prompts=[[4, 9, 7, 3, 8, 8, 5, 6]] * G + [[5, 6, 11, 12, 13]] * G,
                        response=rng.integers(3, 32, (6, N)).astype(np.int32), lengths=rng.integers(1, N + 1, 6),
                        rollout_logp=np.zeros((6, N), np.float32), rewards=np.zeros(6, np.float32),
                        passed=np.zeros(6, bool), group_ids=np.repeat(np.arange(2), G), truncated=np.zeros(6, bool),
                        version=0, gen_s=0.0, verify_s=0.0, texts=[""] * 6)
    rows = to_rows(traj, 12)
    rows["window"] = response_window(traj, 12)
    check_shared_prefix(rows, G)
    batch = jax.tree.map(jnp.asarray, rows)
    full = token_logprobs_entropy(lm, CFG, batch, value_head=head)
    shared = token_logprobs_entropy(lm, CFG, batch, G, value_head=head)
    for a, b in zip(full, shared):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,match", [
    (["pref.ppo_steps=3"], r"pref.ppo_steps moved to rl.steps"),
    (["pref.vf_lr=1e-3"], r"pref.vf_lr moved to rl.critic.lr"),
    (["stage=rl", "rl.algo.advantage=gae", "lora.rank=4"], r"rl.algo.advantage=gae .* lora.rank=4"),
    (["experiment=vision_tiny", "rl.algo.advantage=gae", "rl.exec.share_prefix=false", "rl.rollout.refill=false"],
     r"rl.algo.advantage=gae \(a value head\) does not combine with model.vision"),
])
def test_ppo_keys_moved_and_value_head_combinations_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        compose(overrides)


def test_ppo_rlhf_pulse_from_saved_rm(tmp_path, capsys):
    from rlpt.pipeline.ppo_rlhf import run

    cfg = compose(["experiment=ppo_rlhf_tiny"] + SMALL)
    m = init_model(cfg.model, 5)
    RewardModel(m.config, {"lm": m.params, "head": init_head(m.config.hidden_size, 5)}).save(str(tmp_path / "rm"))
    cfg = compose(["experiment=ppo_rlhf_tiny", "pref.sft_steps=2", f"pref.rm_path={tmp_path / 'rm'}",
                   "rl.steps=2", "rl.ppo_epochs=2", "pref.verifier_weight=0.5", "rl.rollout.prompts_per_step=4",
                   "rl.rollout.group_size=2", "pref.eval_per_domain=4", "data.batch_size=8", "train.ckpt_every=2",
                   "reward=layered", f"train.out_dir={tmp_path / 'run'}"] + SMALL)
    out = run(cfg)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the verifier's part of the reward is the reward mixture's: its components reach the rows and the summary
    assert last["reward"] == "layered" and set(last["reward_components"]) == {"correctness", "format",
                                                                               "length_penalty"}
    for h in out["history"]:  # layered = correctness + 0.1 format + 0.1 length_penalty (inside the clip range)
        c = {k: h[f"reward_component/{k}"] for k in ("correctness", "format", "length_penalty")}
        assert h["verifier_reward"] == pytest.approx(c["correctness"] + 0.1 * c["format"] + 0.1 * c["length_penalty"],
                                                     abs=1e-6)
        assert np.isfinite(h["loss"]) and "critic/vf_clip_frac" in h and "kl_reward/kl" in h and "rm_score" in h
    for k in ("pass1_before", "pass1_after", "rm_score_before", "rm_score_after", "final_kl_ref"):
        assert isinstance(last[k], float)
    assert [h["step"] for h in out["history"]] == [1, 2]
    ckpts = tmp_path / "run" / "ppo" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.isdigit()) == ["4"]  # 2 steps x 2 epochs
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
