"""Parity with TRL 1.16's GRPOTrainer: advantages, losses and gradients for loss_type grpo/bnpo/dr_grpo/dapo,
GSPO (importance_sampling_level="sequence") and CISPO, with scale_rewards "group" and "none".

The loss side calls TRL's own `GRPOTrainer._compute_loss` on a stand-in trainer object whose log-prob
method returns a leaf tensor, so the gradient compared is d loss / d per-token log-prob from TRL's code.
"""
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

from rlpt.algos import (  # noqa: E402
    aggregate,
    aggregate_with_denominator,
    get_advantage,
    get_kl,
    get_policy_loss,
    step_denominator,
)

G, NUM_GROUPS, T, MAX_LEN = 4, 4, 6, 8  # 16 completions in one generation batch, 2 micro-batches of 8
TOL = dict(rtol=1e-5, atol=1e-5)


def make_batch(seed=0):
    rng = np.random.default_rng(seed)
    rewards = rng.choice([0.0, 0.5, 1.0], size=NUM_GROUPS * G).astype(np.float32)
    rewards[:G] = 1.0  # one zero-variance group
    lengths = rng.integers(1, T + 1, size=NUM_GROUPS * G)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    logp = -rng.uniform(0.05, 3.0, size=mask.shape).astype(np.float32)
    old = (logp + rng.normal(0.0, 0.25, size=mask.shape)).astype(np.float32)
    ref = (logp + rng.normal(0.0, 0.5, size=mask.shape)).astype(np.float32)
    return rewards, mask, logp, old, ref


def trl_advantages(rewards: torch.Tensor, scale_rewards: str) -> torch.Tensor:
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, multi_objective_aggregation="sum_then_normalize"
    (that method needs a full trainer with generation, so its advantage lines are restated here)."""
    mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return advantages


def trl_trainer(loss_type, beta, eps_low, eps_high, grad_accum, level="token"):
    """The attributes GRPOTrainer._compute_loss reads, for one process, no vLLM, no entropy masking."""
    fake = SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level, beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=grad_accum),
        loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=grad_accum, max_completion_length=MAX_LEN,
        accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction: x),
        _entropy_bonus_enabled=False, aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, logps=None)
    def logps_and_entropies(model, *args, **kwargs):
        return fake.logps, torch.zeros_like(fake.logps), None

    fake._get_per_token_logps_and_entropies = logps_and_entropies
    return fake


def trl_loss_and_grad(fake, logp, mask, old, ref, adv, num_items):
    fake.logps = torch.tensor(logp, requires_grad=True)
    inputs = {
        "prompt_ids": torch.zeros((logp.shape[0], 2), dtype=torch.long),
        "prompt_mask": torch.ones((logp.shape[0], 2), dtype=torch.long),
        "completion_ids": torch.zeros(logp.shape, dtype=torch.long),
        "completion_mask": torch.tensor(mask),
        "advantages": adv,
        "num_items_in_batch": torch.tensor(num_items),
    }
    if old is not None:
        inputs["old_per_token_logps"] = torch.tensor(old)
    if fake.beta != 0.0:
        inputs["ref_per_token_logps"] = torch.tensor(ref)
    loss = GRPOTrainer._compute_loss(fake, None, inputs)
    loss.backward()
    return loss.item(), fake.logps.grad.numpy()


def rlpt_loss(loss_type, logp, old, adv, mask, ref, beta, eps_low, eps_high, grad_accum, den):
    if loss_type == "gspo":
        pt, _ = get_policy_loss("gspo")(logp, old, adv, mask, clip_low=eps_low, clip_high=eps_high)
    elif loss_type == "cispo":
        pt, _ = get_policy_loss("cispo")(logp, old, adv, mask, ratio_max=eps_high)
    else:
        pt, _ = get_policy_loss("ppo")(logp, old, adv, mask, clip_low=eps_low, clip_high=eps_high)
    if beta:
        pt = pt + beta * get_kl("k3")(logp, ref) * mask
    if loss_type in ("grpo", "gspo"):  # TRL grpo: per-sequence token mean, mean over the micro-batch
        return aggregate(pt, mask, "seq-mean-token-mean") / grad_accum
    if loss_type == "bnpo":
        return aggregate(pt, mask, "token-mean") / grad_accum
    if loss_type == "dr_grpo":
        return aggregate(pt, mask, "seq-mean-token-sum-norm", norm_constant=MAX_LEN) / grad_accum
    # dapo / cispo: token sum over the tokens of the whole generation batch (optimizer-step scope)
    return aggregate_with_denominator(pt, mask, "token-mean", den)


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_advantages_match_trl(scale_rewards):
    rewards, mask, *_ = make_batch()
    expected = trl_advantages(torch.tensor(rewards), scale_rewards).numpy()
    gids = jnp.repeat(jnp.arange(NUM_GROUPS), G)
    name, cfg = ("grpo", {"scale": "group", "eps": 1e-4}) if scale_rewards == "group" else ("dr_grpo", {})
    adv, _ = get_advantage(name)(jnp.asarray(rewards), jnp.asarray(mask), gids, num_groups=NUM_GROUPS, **cfg)
    np.testing.assert_allclose(adv, expected[:, None] * mask, **TOL)


CASES = [(lt, sr, 0.04, False) for lt in ["grpo", "bnpo", "dr_grpo", "dapo"] for sr in ["group", "none"]]
CASES += [("grpo", "group", 0.0, True), ("dapo", "none", 0.0, True),
          ("gspo", "group", 0.0, False), ("cispo", "group", 0.04, False)]


@pytest.mark.parametrize("loss_type,scale_rewards,beta,on_policy", CASES)
def test_loss_and_gradient_match_trl(loss_type, scale_rewards, beta, on_policy):
    rewards, mask, logp, old, ref = make_batch(seed=1)
    grad_accum = 2
    eps_low, eps_high = (3e-4, 4e-4) if loss_type == "gspo" else (0.2, 5.0 if loss_type == "cispo" else 0.28)
    if loss_type == "gspo":  # sequence ratios near 1 so that some rows sit inside the tiny GSPO clip range
        old = logp + 2e-3 * (old - logp) / np.maximum(mask.sum(-1, keepdims=True), 1.0)
    adv_all = trl_advantages(torch.tensor(rewards), scale_rewards)
    gids = jnp.repeat(jnp.arange(NUM_GROUPS), G)
    est = ("grpo", {"scale": "group", "eps": 1e-4}) if scale_rewards == "group" else ("dr_grpo", {})
    adv_tok, _ = get_advantage(est[0])(jnp.asarray(rewards), jnp.asarray(mask), gids, num_groups=NUM_GROUPS,
                                       **est[1])
    trl_type = {"gspo": "grpo"}.get(loss_type, loss_type)
    level = "sequence" if loss_type == "gspo" else "token"
    den = step_denominator([jnp.asarray(mask[:8]), jnp.asarray(mask[8:])], "token-mean")
    for sl in (slice(0, 8), slice(8, 16)):
        fake = trl_trainer(trl_type, beta, eps_low, eps_high, grad_accum, level)
        trl_old = None if on_policy else old[sl]
        t_loss, t_grad = trl_loss_and_grad(fake, logp[sl], mask[sl], trl_old, ref[sl], adv_all[sl],
                                           float(mask.sum()))

        def ours(lp, sl=sl):
            o = lp if on_policy else jnp.asarray(old[sl])  # num_iterations=1: ratio 1, detached denominator
            return rlpt_loss(loss_type, lp, o, adv_tok[sl], jnp.asarray(mask[sl]), jnp.asarray(ref[sl]), beta,
                             eps_low, eps_high, grad_accum, den)

        r_loss, r_grad = jax.value_and_grad(ours)(jnp.asarray(logp[sl]))
        assert float(r_loss) == pytest.approx(t_loss, rel=1e-5, abs=1e-5)
        np.testing.assert_allclose(r_grad, t_grad, **TOL)
        assert np.abs(t_grad).max() > 1e-3  # the comparison is not vacuous
