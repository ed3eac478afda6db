"""Issue #31: distillation divergences against hand-computed values and TRL's GKD formula, term by term."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models import ModelConfig, init_model
from rlpt.train.losses import distill_loss, token_divergence

RNG = np.random.default_rng(0)
S = RNG.normal(size=(2, 3, 7)) * 2  # student logits (B, T, V)
T = RNG.normal(size=(2, 3, 7)) * 2


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _hand(s, t, divergence, beta, temp):  # float64 numpy, straight from the definitions
    ls, lt = _log_softmax(s / temp), _log_softmax(t / temp)
    ps, pt = np.exp(ls), np.exp(lt)
    if divergence == "forward_kl":
        return (pt * (lt - ls)).sum(-1)
    if divergence == "reverse_kl":
        return (ps * (ls - lt)).sum(-1)
    m = beta * pt + (1 - beta) * ps
    return beta * (pt * (lt - np.log(m))).sum(-1) + (1 - beta) * (ps * (ls - np.log(m))).sum(-1)


def _trl(s, t, beta, temp):
    """TRL GKDTrainer.generalized_jsd_loss with reduction="none" (torch's kl_div(input, target) = KL(target||input))."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    ls = F.log_softmax(torch.tensor(s) / temp, dim=-1)
    lt = F.log_softmax(torch.tensor(t) / temp, dim=-1)
    if beta == 0:
        jsd = F.kl_div(ls, lt, reduction="none", log_target=True)
    elif beta == 1:
        jsd = F.kl_div(lt, ls, reduction="none", log_target=True)
    else:
        b = torch.tensor(beta, dtype=ls.dtype)
        mix = torch.logsumexp(torch.stack([ls + torch.log(1 - b), lt + torch.log(b)]), dim=0)
        jsd = b * F.kl_div(mix, lt, reduction="none", log_target=True) + (1 - b) * F.kl_div(
            mix, ls, reduction="none", log_target=True)
    return jsd.sum(-1).numpy()


@pytest.mark.parametrize("divergence,beta,trl_beta", [("forward_kl", 0.5, 0.0), ("reverse_kl", 0.5, 1.0),
                                                      ("jsd", 0.5, 0.5), ("jsd", 0.1, 0.1), ("jsd", 0.9, 0.9)])
@pytest.mark.parametrize("temp", [1.0, 2.0])
def test_divergence_matches_hand_and_trl(divergence, beta, trl_beta, temp):
    with jax.enable_x64():
        got = np.asarray(token_divergence(jnp.asarray(S), jnp.asarray(T), divergence, beta=beta, temperature=temp))
    np.testing.assert_allclose(got, _hand(S, T, divergence, beta, temp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, _trl(S, T, trl_beta, temp), rtol=1e-5, atol=1e-6)
    assert (got > 0).all()


def test_divergence_zero_on_equal_and_gradients():
    for d in ("forward_kl", "reverse_kl", "jsd"):
        np.testing.assert_allclose(token_divergence(jnp.asarray(S), jnp.asarray(S), d), 0.0, atol=1e-6)
    # forward KL: d/ds KL(t||softmax(s/T)) = (softmax(s/T) - softmax(t/T)) / T; the teacher gets no gradient
    temp = 2.0
    gs, gt = jax.grad(lambda s, t: token_divergence(s, t, "forward_kl", temperature=temp).sum(), argnums=(0, 1))(
        jnp.asarray(S, jnp.float32), jnp.asarray(T, jnp.float32))
    want = (np.exp(_log_softmax(S / temp)) - np.exp(_log_softmax(T / temp))) / temp
    np.testing.assert_allclose(gs, want, rtol=1e-4, atol=1e-6)
    assert not np.asarray(gt).any()
    # reverse KL gradient against central differences in float64
    with jax.enable_x64():
        s, t = jnp.asarray(S[0, 0]), jnp.asarray(T[0, 0])
        g = jax.grad(lambda x: token_divergence(x, t, "reverse_kl"))(s)
        eps = 1e-6
        num = [(token_divergence(s.at[i].add(eps), t, "reverse_kl") - token_divergence(s.at[i].add(-eps), t,
                                                                                      "reverse_kl")) / (2 * eps)
               for i in range(s.shape[0])]
        np.testing.assert_allclose(g, np.asarray(num), rtol=1e-5, atol=1e-8)


def test_bad_divergence_and_beta_are_named():
    with pytest.raises(ValueError, match="distill.divergence"):
        token_divergence(jnp.asarray(S), jnp.asarray(T), "kl")
    with pytest.raises(ValueError, match="distill.beta"):
        token_divergence(jnp.asarray(S), jnp.asarray(T), "jsd", beta=1.0)


def _tiny(vocab=32, layers=1):
    return ModelConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_layers=layers, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=64, tie_embeddings=True)


def test_distill_loss_token_mean_over_mask_and_vocab_check():
    student, teacher = init_model(_tiny(), 0), init_model(_tiny(layers=2), 1)
    B, L = 2, 6
    tokens = np.asarray(RNG.integers(0, 32, size=(B, L + 1)), np.int32)
    mask = np.zeros((B, L), np.float32)
    mask[0, 2:5], mask[1, 1:] = 1, 1
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "positions": np.tile(np.arange(L), (B, 1)),
             "segment_ids": np.ones((B, L), np.int32), "loss_mask": mask}
    loss_fn = distill_loss(student.config, teacher.config, "jsd", beta=0.3, temperature=1.5)
    total, weight, metrics = loss_fn(student.params, {"teacher": teacher.params}, batch, None)
    s, t = (np.asarray(m(batch["inputs"]), np.float64) for m in (student, teacher))
    per_token = _hand(s, t, "jsd", 0.3, 1.5)
    np.testing.assert_allclose(total, (per_token * mask).sum(), rtol=1e-4)
    assert float(weight) == mask.sum() and float(metrics["divergence_sum"]) == pytest.approx(float(total))
    with pytest.raises(ValueError, match="vocabulary.*model.vocab_size=32"):
        distill_loss(student.config, _tiny(vocab=64), "reverse_kl")
