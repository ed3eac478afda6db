"""Stage losses on the shared train step. Each returns (loss_sum, weight, metrics)."""
import jax
import jax.numpy as jnp

from rlpt.models.transformer import forward


def token_logprobs(params, model_cfg, batch):
    """log p(target) per position (B, T) f32 for batch inputs/targets/positions/segment_ids."""
    logits = forward(params, model_cfg, batch["inputs"], batch["positions"], batch["segment_ids"])
    logz = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logits, batch["targets"][..., None], axis=-1)[..., 0].astype(jnp.float32)
    return picked - logz


def sft_loss(model_cfg):
    """Token-level cross-entropy on loss_mask tokens: sum and token count (completion-only when the mask is)."""
    def loss_fn(params, frozen, batch, rng):
        del frozen, rng
        logp = token_logprobs(params, model_cfg, batch)
        mask = batch["loss_mask"].astype(jnp.float32)
        nll = -jnp.sum(logp * mask)
        return nll, jnp.sum(mask), {"nll_sum": nll}
    return loss_fn


def per_segment_nll(params, model_cfg, batch, max_segments: int):
    """NLL summed per (row, segment id) -> (B, max_segments), for checking packing invariance."""
    logp = token_logprobs(params, model_cfg, batch)
    onehot = jax.nn.one_hot(batch["segment_ids"], max_segments, dtype=jnp.float32)  # (B, T, S)
    return -jnp.einsum("bt,bts->bs", logp * batch["loss_mask"], onehot)
