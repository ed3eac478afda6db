"""Plain-XLA attention: the ground truth every other implementation is tested against."""
import jax.numpy as jnp
from rlpt.kernels.mask import attention_mask

# A large finite negative keeps fully masked rows NaN-free.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def reference_attention(q, k, v, q_positions, kv_positions, q_segment_ids, kv_segment_ids, *,
                        causal=True, sliding_window=None, scale=None, logit_softcap=None):
    """Attention in float32 softmax.

    q: (B, Tq, H, D); k, v: (B, Tk, KV, D) with H % KV == 0 (GQA/MQA).
    positions / segment ids: (B, Tq) and (B, Tk) int32.
    Returns out (B, Tq, H, D) in q.dtype and lse (B, H, Tq) float32; rows with no visible key give
    out = 0 and lse = -inf.
    """
    B, Tq, H, D = q.shape
    KV = k.shape[2]
    if H % KV:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({KV})")
    scale = D ** -0.5 if scale is None else scale
    G = H // KV
    qg = q.reshape(B, Tq, KV, G, D)
    s = jnp.einsum("bqkgd,bskd->bkgqs", qg, k, preferred_element_type=jnp.float32) * scale
    if logit_softcap is not None:
        s = logit_softcap * jnp.tanh(s / logit_softcap)
    mask = attention_mask(q_positions, kv_positions, q_segment_ids, kv_segment_ids,
                          causal=causal, sliding_window=sliding_window)  # (B, 1, Tq, Tk)
    mask = mask[:, :, None]  # (B, 1, 1, Tq, Tk) over (KV, G)
    s = jnp.where(mask, s, MASK_VALUE)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.where(mask, jnp.exp(s - m), 0.0)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    any_visible = denom > 0
    p = p / jnp.where(any_visible, denom, 1.0)
    out = jnp.einsum("bkgqs,bskd->bqkgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    out = out.reshape(B, Tq, H, D).astype(q.dtype)
    lse = jnp.where(any_visible, m + jnp.log(jnp.where(any_visible, denom, 1.0)), -jnp.inf)[..., 0]
    return out, lse.reshape(B, H, Tq)
