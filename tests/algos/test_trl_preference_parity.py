"""Parity of the preference losses with TRL 1.16, values and gradients within 1e-5.

DPO (sigmoid, ipo, hinge, robust) and KTO call TRL's own `_compute_loss` on stand-in trainer objects whose
model returns fixed per-token log-probs; SimPO calls `CPOTrainer.cpo_loss`, ORPO `ORPOTrainer.odds_ratio_loss`
and `get_batch_logps`, the reward-model loss `RewardTrainer.compute_loss`.
"""
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from trl import DPOTrainer, KTOTrainer, RewardTrainer  # noqa: E402
from trl.experimental.cpo import CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOTrainer  # noqa: E402

from rlpt.algos import PairedLogps, UnpairedLogps, bradley_terry_loss, get_preference_loss  # noqa: E402

B, L, P = 3, 7, 2  # pairs, sequence length, prompt tokens
TOL = dict(rtol=1e-5, atol=1e-5)
APPROX = dict(rel=1e-5, abs=1e-5)


def accel():
    return SimpleNamespace(device="cpu", gather=lambda x: x, gather_for_metrics=lambda x: x,
                           reduce=lambda x, reduction: x)


def fake_trainer(**kw):
    return SimpleNamespace(model=SimpleNamespace(training=True), accelerator=accel(), aux_loss_enabled=False,
                           _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                           _total_train_tokens=0, _tp_size=1, **kw)


def fake_model(log_probs):
    z = torch.zeros(log_probs.shape)
    return lambda **kw: SimpleNamespace(log_probs=log_probs, entropy=z, mean_logits=z, is_top1=z.bool())


def sequences(seed):
    """(2B, L) completion mask (chosen rows first) and per-token log-probs on the shifted grid (2B, L - 1)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, L - P + 1, size=2 * B)
    pos = np.arange(L)[None, :]
    completion_mask = ((pos >= P) & (pos < P + lengths[:, None])).astype(np.int64)
    shift_mask = completion_mask[:, 1:].astype(np.float32)
    per_token = (-rng.uniform(0.1, 1.5, size=shift_mask.shape) * shift_mask).astype(np.float32)
    ref_sums = (per_token.sum(1) + rng.normal(0, 0.7, size=2 * B)).astype(np.float32)
    return completion_mask, shift_mask, per_token, ref_sums


def ours_on_tokens(name, shift_mask, ref_sums, lengths, **cfg):
    def f(per_token):
        sums = jnp.sum(per_token * shift_mask, axis=1)
        batch = PairedLogps(chosen=sums[:B], rejected=sums[B:], ref_chosen=jnp.asarray(ref_sums[:B]),
                            ref_rejected=jnp.asarray(ref_sums[B:]), chosen_lengths=jnp.asarray(lengths[:B]),
                            rejected_lengths=jnp.asarray(lengths[B:]))
        return get_preference_loss(name)(batch, **cfg)
    return f


@pytest.mark.parametrize("loss_type,label_smoothing", [("sigmoid", 0.0), ("ipo", 0.0), ("hinge", 0.0),
                                                       ("robust", 0.2)])
def test_dpo_losses_match_trl(loss_type, label_smoothing):
    completion_mask, shift_mask, per_token, ref_sums = sequences(seed=3)
    beta = 0.3
    fake = fake_trainer(ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl",
                        loss_types=[loss_type], loss_weights=[1.0], beta=beta,
                        label_smoothing=label_smoothing, use_weighting=False)
    leaf = torch.tensor(per_token, requires_grad=True)
    inputs = {"input_ids": torch.zeros((2 * B, L), dtype=torch.long),
              "attention_mask": torch.ones((2 * B, L), dtype=torch.long),
              "completion_mask": torch.tensor(completion_mask),
              "ref_chosen_logps": torch.tensor(ref_sums[:B]),
              "ref_rejected_logps": torch.tensor(ref_sums[B:])}
    t_loss = DPOTrainer._compute_loss(fake, fake_model(leaf), inputs, return_outputs=False)
    t_loss.backward()
    lengths = completion_mask.sum(1).astype(np.float32)
    cfg = {"beta": beta} | ({"label_smoothing": label_smoothing} if loss_type == "robust" else {})
    f = ours_on_tokens(loss_type, shift_mask, ref_sums, lengths, **cfg)
    (r_loss, metrics), r_grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(per_token))
    assert float(r_loss) == pytest.approx(t_loss.item(), **APPROX)
    np.testing.assert_allclose(np.asarray(r_grad) * shift_mask, leaf.grad.numpy() * shift_mask, **TOL)
    logged = fake._metrics["train"]
    for ours, theirs in [("reward_accuracy", "rewards/accuracies"), ("reward_margin", "rewards/margins"),
                         ("rewards_chosen", "rewards/chosen"), ("rewards_rejected", "rewards/rejected")]:
        assert float(metrics[ours]) == pytest.approx(logged[theirs][-1], **APPROX)


def cpo_fake(loss_type, beta, label_smoothing, gamma=0.0):
    return SimpleNamespace(alpha=0.0, loss_type=loss_type, beta=beta, label_smoothing=label_smoothing,
                           simpo_gamma=gamma, accelerator=accel())


def test_conservative_dpo_matches_trl_label_smoothing_formula():
    # TRL 1.16 dropped label smoothing from DPOTrainer's "sigmoid"; its conservative form lives on in
    # CPOTrainer.cpo_loss(loss_type="sigmoid"), which is cDPO when handed the policy/reference log-ratios.
    rng = np.random.default_rng(4)
    c, r, rc, rr = (rng.normal(-5, 2, size=B).astype(np.float32) for _ in range(4))
    tc = torch.tensor(c - rc, requires_grad=True)
    tr = torch.tensor(r - rr, requires_grad=True)
    losses, _, _ = CPOTrainer.cpo_loss(cpo_fake("sigmoid", 0.4, 0.15), tc, tr)
    losses.mean().backward()

    def f(cc, rj):
        return get_preference_loss("sigmoid")(PairedLogps(cc, rj, jnp.asarray(rc), jnp.asarray(rr)),
                                              beta=0.4, label_smoothing=0.15)[0]

    val, (gc, gr) = jax.value_and_grad(f, argnums=(0, 1))(jnp.asarray(c), jnp.asarray(r))
    assert float(val) == pytest.approx(losses.mean().item(), **APPROX)
    np.testing.assert_allclose(gc, tc.grad.numpy(), **TOL)
    np.testing.assert_allclose(gr, tr.grad.numpy(), **TOL)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_simpo_matches_trl_cpo(label_smoothing):
    rng = np.random.default_rng(5)
    avg_c = -rng.uniform(0.2, 2.0, size=B).astype(np.float32)
    avg_r = -rng.uniform(0.2, 2.0, size=B).astype(np.float32)
    lc, lr = rng.integers(1, 9, size=B).astype(np.float32), rng.integers(1, 9, size=B).astype(np.float32)
    tc, tr = torch.tensor(avg_c, requires_grad=True), torch.tensor(avg_r, requires_grad=True)
    beta, gamma = 2.0, 0.8
    losses, chosen_rewards, _ = CPOTrainer.cpo_loss(cpo_fake("simpo", beta, label_smoothing, gamma), tc, tr)
    losses.mean().backward()

    def f(ac, ar):  # rlpt takes sums and lengths; TRL takes the averages
        batch = PairedLogps(ac * lc, ar * lr, chosen_lengths=jnp.asarray(lc),
                            rejected_lengths=jnp.asarray(lr))
        return get_preference_loss("simpo")(batch, beta=beta, gamma=gamma, label_smoothing=label_smoothing)

    (val, metrics), (gc, gr) = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(jnp.asarray(avg_c),
                                                                                    jnp.asarray(avg_r))
    assert float(val) == pytest.approx(losses.mean().item(), **APPROX)
    np.testing.assert_allclose(gc, tc.grad.numpy(), **TOL)
    np.testing.assert_allclose(gr, tr.grad.numpy(), **TOL)
    assert float(metrics["rewards_chosen"]) == pytest.approx(chosen_rewards.mean().item(), **APPROX)


def test_orpo_matches_trl_from_logits():
    rng = np.random.default_rng(6)
    vocab = 11
    ids = rng.integers(0, vocab, size=(2 * B, L))
    lengths = rng.integers(1, L - P + 1, size=2 * B)
    pos = np.arange(L)[None, :]
    attention = (pos < P + lengths[:, None]).astype(np.int64)
    response = ((pos >= P) & (attention == 1))
    labels = np.where(response, ids, -100)
    logits = torch.tensor(rng.normal(0, 2, size=(2 * B, L, vocab)).astype(np.float32), requires_grad=True)

    # ORPOTrainer.concatenated_forward: NLL over prompt + response of the chosen rows, averaged log-probs
    nll_labels = torch.where(torch.tensor(attention) == 1, torch.tensor(ids), -100)
    t_nll = torch.nn.CrossEntropyLoss()(logits[:B, :-1].reshape(-1, vocab), nll_labels[:B, 1:].reshape(-1))
    avg = ORPOTrainer.get_batch_logps(logits, torch.tensor(labels), average_log_prob=True)
    fake = SimpleNamespace(beta=0.25, accelerator=accel())
    losses, _, _, _, _ = ORPOTrainer.odds_ratio_loss(fake, avg[:B], avg[B:])
    t_loss = t_nll - losses.mean()  # ORPOTrainer.get_batch_loss_metrics
    t_loss.backward()

    tgt = jnp.asarray(np.where(response, ids, 0)[:, 1:])
    resp = jnp.asarray(response[:, 1:], jnp.float32)
    nll_mask = jnp.asarray(attention[:, 1:], jnp.float32)

    def f(lg):
        logsm = jax.nn.log_softmax(lg[:, :-1])
        logp = jnp.take_along_axis(logsm, tgt[..., None], -1)[..., 0]
        full = jnp.take_along_axis(logsm, jnp.asarray(ids[:, 1:])[..., None], -1)[..., 0]
        nll = -jnp.sum(full[:B] * nll_mask[:B]) / jnp.sum(nll_mask[:B])
        sums = jnp.sum(logp * resp, axis=1)
        n = jnp.sum(resp, axis=1)
        batch = PairedLogps(sums[:B], sums[B:], chosen_lengths=n[:B], rejected_lengths=n[B:])
        return get_preference_loss("orpo")(batch, beta=0.25, nll=nll)[0]

    val, grad = jax.value_and_grad(f)(jnp.asarray(logits.detach().numpy()))
    assert float(val) == pytest.approx(t_loss.item(), **APPROX)
    np.testing.assert_allclose(grad, logits.grad.numpy(), **TOL)


def test_kto_matches_trl():
    rng = np.random.default_rng(7)
    n, seq = 5, 6
    labels = np.array([True, False, True, True, False])
    mask = np.zeros((n, seq), np.int64)
    mask[:, 2:] = 1
    per_token = (-rng.uniform(0.1, 1.2, size=(n, seq - 1))).astype(np.float32) * mask[:, 1:]
    ref = (per_token.sum(1) + rng.normal(0, 0.5, size=n)).astype(np.float32)
    kl_logps = rng.normal(-6, 1, size=n).astype(np.float32)
    ref_kl = (kl_logps - rng.normal(0.3, 0.2, size=n)).astype(np.float32)
    fake = fake_trainer(precompute_ref_logps=True, calculate_KL=True, loss_type="kto", beta=0.2,
                        desirable_weight=1.0, undesirable_weight=1.5,
                        _compute_kl_logps=lambda model, batch: torch.tensor(kl_logps))
    leaf = torch.tensor(per_token, requires_grad=True)
    inputs = {"input_ids": torch.zeros((n, seq), dtype=torch.long), "attention_mask": torch.ones((n, seq)),
              "completion_mask": torch.tensor(mask), "label": torch.tensor(labels),
              "ref_logps": torch.tensor(ref), "ref_KL_logps": torch.tensor(ref_kl)}
    t_loss = KTOTrainer._compute_loss(fake, fake_model(leaf), inputs, return_outputs=False)
    t_loss.backward()

    def f(pt):
        batch = UnpairedLogps(jnp.sum(pt, axis=1), jnp.asarray(ref), jnp.asarray(labels),
                              jnp.asarray(kl_logps), jnp.asarray(ref_kl))
        return get_preference_loss("kto")(batch, beta=0.2, desirable_weight=1.0, undesirable_weight=1.5)

    (val, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(per_token))
    assert float(val) == pytest.approx(t_loss.item(), **APPROX)
    np.testing.assert_allclose(grad, leaf.grad.numpy(), **TOL)
    assert float(metrics["kl"]) == pytest.approx(fake._metrics["train"]["kl"][-1], **APPROX)
    logged = fake._metrics["train"]
    assert float(metrics["rewards_chosen"]) == pytest.approx(logged["rewards/chosen"][-1], **APPROX)
    assert float(metrics["rewards_rejected"]) == pytest.approx(logged["rewards/rejected"][-1], **APPROX)


@pytest.mark.parametrize("with_margin", [False, True])
def test_bradley_terry_matches_trl_reward_trainer(with_margin):
    rng = np.random.default_rng(8)
    scores = torch.tensor(rng.normal(0, 1.5, size=(2 * B, 1)).astype(np.float32), requires_grad=True)
    margin = rng.uniform(0, 1, size=B).astype(np.float32)
    fake = fake_trainer(args=SimpleNamespace(center_rewards_coefficient=0.01))
    inputs = {"attention_mask": torch.ones((2 * B, 4))}
    if with_margin:
        inputs["margin"] = torch.tensor(margin)
    t_loss = RewardTrainer.compute_loss(fake, lambda **kw: SimpleNamespace(logits=scores), inputs)
    t_loss.backward()

    def f(s):
        return bradley_terry_loss(s[:B, 0], s[B:, 0], jnp.asarray(margin) if with_margin else None,
                                  center_coef=0.01)

    (val, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(scores.detach().numpy()))
    assert float(val) == pytest.approx(t_loss.item(), **APPROX)
    np.testing.assert_allclose(grad, scores.grad.numpy(), **TOL)
    assert float(metrics["accuracy"]) == pytest.approx(fake._metrics["train"]["accuracy"][-1])
