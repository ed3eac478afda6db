"""The RL loss on the shared step: on-policy PPO gradient equals the policy-gradient identity."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.config.schema import AlgoConfig
from rlpt.models import ModelConfig, init_model
from rlpt.train.losses import rl_loss, token_logprobs

CFG = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2)


def _batch(params, rng):
    B, T = 4, 10
    inputs = rng.integers(0, 32, (B, T)).astype(np.int32)
    batch = {"inputs": inputs, "targets": np.roll(inputs, -1, 1), "positions": np.tile(np.arange(T), (B, 1)),
             "segment_ids": np.ones((B, T), np.int32)}
    mask = np.zeros((B, T), np.float32)
    mask[:, 4:9] = 1
    mask[3, 7:] = 0
    batch["loss_mask"] = mask
    batch["advantages"] = (rng.normal(size=(B, 1)) * mask).astype(np.float32)
    logp = token_logprobs(params, CFG, jax.tree.map(jnp.asarray, batch))
    batch["old_logp"] = batch["rollout_logp"] = np.asarray(logp) * mask
    return jax.tree.map(jnp.asarray, batch)


def test_on_policy_ppo_gradient_is_policy_gradient():
    params = init_model(CFG, 0).params
    batch = _batch(params, np.random.default_rng(0))
    loss_fn = rl_loss(AlgoConfig(aggregation="token-mean"))(CFG)

    def ours(p):
        num, den, _ = loss_fn(p, {}, batch, None)
        return num / den

    def identity(p):
        logp = token_logprobs(p, CFG, batch)
        m = batch["loss_mask"]
        return -jnp.sum(batch["advantages"] * logp * m) / jnp.sum(m)

    g1, g2 = jax.jit(jax.grad(ours))(params), jax.jit(jax.grad(identity))(params)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)


def test_seq_mean_aggregation_and_micro_scope():
    params = init_model(CFG, 1).params
    batch = _batch(params, np.random.default_rng(1))
    num, den, _ = rl_loss(AlgoConfig(aggregation="seq-mean-token-mean"))(CFG)(params, {}, batch, None)
    assert float(den) == 4.0  # four sequences with policy tokens
    m = np.asarray(batch["loss_mask"])
    per_seq = -(np.asarray(batch["advantages"]) * m).sum(1) / m.sum(1)  # ratio 1: loss = -A per token
    np.testing.assert_allclose(float(num), per_seq.sum(), rtol=1e-5)
    num, den, _ = rl_loss(AlgoConfig(scope="micro"))(CFG)(params, {}, batch, None)
    assert float(den) == 1.0


def _traj(seed, R=6, N=7, width=None):
    """Ragged prompts (2-9 tokens) and responses (1-N tokens), one row filling the whole width."""
    from rlpt.rollout.single_turn import Trajectories

    rng = np.random.default_rng(seed)
    plens = rng.integers(2, 10, R)
    lengths = rng.integers(1, N + 1, R)
    plens[0], lengths[0] = 9, N  # the longest row: its window must shift left to stay inside the row
    return Trajectories(tasks=[None] * R, prompts=[rng.integers(3, 32, n).tolist() for n in plens],
                        response=rng.integers(3, 32, (R, N)).astype(np.int32), lengths=lengths,
                        rollout_logp=-rng.random((R, N)).astype(np.float32), rewards=rng.random(R).astype(np.float32),
                        passed=np.zeros(R, bool), group_ids=np.repeat(np.arange(R // 2), 2),
                        truncated=np.zeros(R, bool), version=0, gen_s=0.0, verify_s=0.0, texts=[""] * R)


def test_response_window_covers_every_loss_column_inside_the_row():
    from rlpt.rollout.single_turn import response_window, to_rows

    for seed in range(5):
        traj = _traj(seed)
        rows = to_rows(traj, 64)
        W = rows["inputs"].shape[1]
        win = response_window(traj, W)
        assert win.shape[1] == 8 and win.min() >= 0 and win.max() < W  # fit_width(7) = 8 columns
        for r in range(len(win)):
            assert len(set(win[r].tolist())) == win.shape[1]
            assert rows["loss_mask"][r, win[r]].sum() == rows["loss_mask"][r].sum()


@pytest.mark.parametrize("algo", [
    dict(aggregation="token-mean"),
    dict(aggregation="seq-mean-token-sum-norm", aggregation_kwargs={"norm_constant": 7.0}, entropy_coef=0.01),
    dict(policy_loss="gspo", aggregation="seq-mean-token-mean", kl_coef=0.1, old_logp="recompute",
         correction_level="token", correction_mode="mask")], ids=["ppo", "ppo-norm-entropy", "gspo-kl-mis"])
def test_logits_window_gives_the_same_loss_metrics_and_gradients(algo):
    """Logits only at the window's columns: same loss, metrics and gradients as every column."""
    from rlpt.rollout.single_turn import response_window, to_rows

    params, ref = init_model(CFG, 2).params, init_model(CFG, 3).params
    traj = _traj(7)
    rows = to_rows(traj, 64)
    mask = rows["loss_mask"]
    rng = np.random.default_rng(0)
    rows["advantages"] = (rng.normal(size=(len(mask), 1)) * mask).astype(np.float32)
    rows["old_logp"] = (np.asarray(token_logprobs(params, CFG, rows)) + 0.3 * rng.normal(size=mask.shape)) * mask
    full = jax.tree.map(jnp.asarray, rows)
    windowed = full | {"window": jnp.asarray(response_window(traj, mask.shape[1]))}
    loss_fn = rl_loss(AlgoConfig(**algo))(CFG)
    (g1, (n1, d1, m1)), (g2, (n2, d2, m2)) = (_grads_and_loss(loss_fn, params, ref, b) for b in (full, windowed))
    assert float(d1) == float(d2)
    np.testing.assert_allclose(float(n2), float(n1), rtol=1e-6)
    assert m1.keys() == m2.keys()
    for k in m1:
        np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-7, err_msg=k)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)


def _grads_and_loss(loss_fn, params, ref, batch):
    """Gradient of num / den, and (num, den, metrics), of an rl_loss at params (jitted)."""
    def f(p):
        num, den, metrics = loss_fn(p, {"ref": ref}, batch, None)
        return num / den, (num, den, metrics)
    return jax.jit(jax.grad(f, has_aux=True))(params)


def test_recompute_old_logp_is_the_trainers_forward_and_bad_settings_fail():
    from rlpt.config import compose
    from rlpt.pipeline.rl import check_algo, make_batch, recompute_old_logp
    from rlpt.rollout.single_turn import to_rows
    from rlpt.train.loop import make_trainer

    cfg = compose(["model.vocab_size=32", "model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=1",
                   "mesh=fsdp", "train.ckpt_every=0", "optim.grad_accum=2", "rl.algo.old_logp=recompute",
                   "rl.rollout.group_size=3"])
    trainer = make_trainer(cfg, rl_loss(cfg.rl.algo))
    params = trainer.model().params
    # _traj's "groups" have different prompts, so they run as full rows; _group_traj shares them (groups of 3,
    # 6 prompts: 3 per micro-batch).
    for window, share, traj in ((True, False, _traj(3)), (False, False, _traj(3)), (True, True, _group_traj(3, P=6))):
        cfg.rl.exec.logits_window, cfg.rl.exec.share_prefix = window, share
        batch, _ = make_batch(traj, cfg, 64)
        assert ("window" in batch) == window
        out = recompute_old_logp(trainer, batch, 3 if share else None)
        want = np.asarray(token_logprobs(params, trainer.model_cfg, to_rows(traj, 64))) * batch["loss_mask"]
        np.testing.assert_allclose(out["old_logp"], want, rtol=1e-5, atol=1e-6)
        assert np.array_equal(out["rollout_logp"], batch["rollout_logp"])
    with pytest.raises(ValueError, match="rl.algo.old_logp='stale'"):
        check_algo(AlgoConfig(old_logp="stale"))
    with pytest.raises(ValueError, match="set rl.algo.old_logp=recompute"):
        check_algo(AlgoConfig(correction_level="token"))
    check_algo(AlgoConfig(correction_level="token", old_logp="recompute"))


def test_logits_window_under_a_permuted_sequence_layout():
    """mesh=seq with ring attention and the zigzag layout: the window's columns follow the permutation, so the
    step's loss equals the full-row loss of the same params on one device."""
    import dataclasses

    from rlpt.config import compose
    from rlpt.pipeline.rl import make_batch
    from rlpt.train.loop import make_trainer

    cfg = compose(["model.vocab_size=32", "model.hidden_size=32", "model.intermediate_size=64",
                   "model.num_layers=1", "mesh=seq", "mesh.seq=2", "mesh.data=4", "model.attention_impl=ring",
                   "data.cp_layout=zigzag", "train.ckpt_every=0", "rl.exec.share_prefix=false"])
    trainer = make_trainer(cfg, rl_loss(cfg.rl.algo))
    batch, _ = make_batch(_traj(5), cfg, 64)
    assert "window" in batch
    params = jax.device_get(trainer.state.params)  # before the step donates them
    full = {k: jnp.asarray(v) for k, v in batch.items() if k != "window"}
    dense = dataclasses.replace(trainer.model_cfg, attention_impl="dense")
    num, den, _ = jax.jit(lambda p, b: rl_loss(cfg.rl.algo)(dense)(p, {}, b, None))(params, full)
    np.testing.assert_allclose(float(trainer.step(batch)["loss"]), float(num / den), rtol=1e-5)


def _group_traj(seed, P=3, G=3, N=7):
    """P prompts (ragged, 2-9 tokens) sampled G times each, ragged responses; group 0 fills the whole row."""
    from rlpt.rollout.single_turn import Trajectories

    rng = np.random.default_rng(seed)
    plens = rng.integers(2, 10, P)
    plens[0] = 10
    prompts = [p for n in plens for p in [rng.integers(3, 32, n).tolist()] * G]
    lengths = rng.integers(1, N + 1, P * G)
    lengths[0] = N  # its window shifts left into the prompt: the shared prefix ends before the prompt does
    R = P * G
    return Trajectories(tasks=[None] * R, prompts=prompts, response=rng.integers(3, 32, (R, N)).astype(np.int32),
                        lengths=lengths, rollout_logp=-rng.random((R, N)).astype(np.float32),
                        rewards=rng.random(R).astype(np.float32), passed=np.zeros(R, bool),
                        group_ids=np.repeat(np.arange(P), G), truncated=np.zeros(R, bool), version=0, gen_s=0.0,
                        verify_s=0.0, texts=[""] * R)


@pytest.mark.parametrize("impl", ["dense", "reference"])
@pytest.mark.parametrize("algo", [
    dict(aggregation="token-mean", entropy_coef=0.01),
    dict(policy_loss="gspo", aggregation="seq-mean-token-mean", kl_coef=0.1, old_logp="recompute",
         correction_level="token", correction_mode="mask")], ids=["ppo-entropy", "gspo-kl-mis"])
def test_shared_prefix_gives_the_same_loss_metrics_and_gradients(algo, impl):
    """Each group's prompt once (rl.exec.share_prefix), K/V broadcast to its rows: same as full rows."""
    import dataclasses

    from rlpt.pipeline.rl import check_shared_prefix
    from rlpt.rollout.single_turn import response_window, to_rows

    cfg = dataclasses.replace(CFG, num_layers=2, attention_impl=impl)
    params, ref = init_model(cfg, 4).params, init_model(cfg, 5).params
    traj = _group_traj(11)
    rows = to_rows(traj, 64)
    mask = rows["loss_mask"]
    rng = np.random.default_rng(1)
    rows["advantages"] = (rng.normal(size=(len(mask), 1)) * mask).astype(np.float32)
    rows["old_logp"] = (np.asarray(token_logprobs(params, cfg, rows)) + 0.3 * rng.normal(size=mask.shape)) * mask
    rows["window"] = response_window(traj, mask.shape[1])
    assert rows["window"][0, 0] < len(traj.prompts[0]) - 1  # the shifted window case is covered
    check_shared_prefix(rows, 3)
    batch = jax.tree.map(jnp.asarray, rows)
    (g1, (n1, d1, m1)), (g2, (n2, d2, m2)) = (
        _grads_and_loss(rl_loss(AlgoConfig(**algo), group)(cfg), params, ref, batch) for group in (None, 3))
    assert float(d1) == float(d2)
    np.testing.assert_allclose(float(n2), float(n1), rtol=1e-5)
    for k in m1:
        np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_shared_prefix_rejects_rows_that_do_not_share_it():
    from rlpt.pipeline.rl import check_shared_prefix
    from rlpt.rollout.single_turn import response_window, to_rows

    traj = _group_traj(12)
    rows = to_rows(traj, 64)
    rows["window"] = response_window(traj, rows["inputs"].shape[1])
    bad = dict(rows, inputs=rows["inputs"].copy())
    bad["inputs"][4, 0] += 1  # row 4 (group 1) has another prompt
    with pytest.raises(ValueError, match="group 1 .*rl.exec.share_prefix=false"):
        check_shared_prefix(bad, 3)
    with pytest.raises(ValueError, match="not whole groups"):
        check_shared_prefix(rows, 4)


def test_kl_in_reward_folds_the_reference_kl_into_the_grpo_scores():
    """rl.algo.kl_in=reward (verl's use_kl_in_reward): score_i = r_i - beta * sum_t kl_t, then GRPO's group
    normalisation; the loss itself carries no KL term. Hand-computed for groups of two."""
    from rlpt.config import compose
    from rlpt.pipeline.rl import make_batch

    cfg = compose(["rl.algo.kl_coef=0.5", "rl.algo.kl_in=reward", "rl.algo.kl_estimator=k1",
                   "rl.exec.share_prefix=false"])
    traj = _traj(4)
    plain, _ = make_batch(traj, cfg, 64)
    mask = plain["loss_mask"]
    ref = (plain["rollout_logp"] - 0.3 * np.random.default_rng(0).random(mask.shape)) * mask
    rows, metrics = make_batch(traj, cfg, 64, ref_logp=ref)
    kl_sum = ((plain["rollout_logp"] - ref) * mask).sum(1)  # k1 = logp - ref per policy token
    score = traj.rewards - 0.5 * kl_sum
    a, b = score[0::2], score[1::2]
    adv = np.stack([(a - b) / 2, (b - a) / 2], 1).reshape(-1) / (np.abs(a - b).repeat(2) / np.sqrt(2) + 1e-6)
    np.testing.assert_allclose(rows["advantages"], adv[:, None] * mask, rtol=1e-4, atol=1e-6)
    assert metrics["kl_reward/kl"] == pytest.approx(float(kl_sum.sum() / mask.sum()), rel=1e-5)
    assert not np.allclose(rows["advantages"], plain["advantages"])
