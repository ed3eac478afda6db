"""Rotary position embeddings and their scalings (linear, dynamic NTK, YaRN, Llama-3), as in HF."""
import math

import jax.numpy as jnp
import numpy as np

from rlpt.models.config import ModelConfig
from rlpt.models.ops import ops_for


def _base_inv_freq(base: float, dim: int) -> np.ndarray:
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))


def _yarn(cfg: ModelConfig, dim: int) -> tuple[np.ndarray, float]:
    rs = cfg.rope_scaling
    base, factor = cfg.rope_theta, rs.factor
    orig = rs.original_max_position_embeddings or cfg.max_position_embeddings

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = rs.attention_factor
    if attention_factor is None:
        if rs.mscale and rs.mscale_all_dim:
            attention_factor = get_mscale(factor, rs.mscale) / get_mscale(factor, rs.mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)

    def correction_dim(rotations):
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(rs.beta_fast), correction_dim(rs.beta_slow)
    if rs.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
    inv_extra, inv_inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    inv = inv_inter * (1 - extrapolation_factor) + inv_extra * extrapolation_factor
    return inv.astype(np.float32), float(attention_factor)


def _llama3(cfg: ModelConfig, dim: int) -> np.ndarray:
    rs = cfg.rope_scaling
    inv = _base_inv_freq(cfg.rope_theta, dim)
    old = rs.original_max_position_embeddings or cfg.max_position_embeddings
    low_wavelen, high_wavelen = old / rs.low_freq_factor, old / rs.high_freq_factor
    wavelen = 2 * math.pi / inv
    inv_l = np.where(wavelen > low_wavelen, inv / rs.factor, inv)
    smooth = (old / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    smoothed = (1 - smooth) * inv_l / rs.factor + smooth * inv_l
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_l).astype(np.float32)


def rope_frequencies(cfg: ModelConfig, positions):
    """Inverse frequencies (B, Dh/2) float32 and the cos/sin scale for the configured RoPE type.

    Dynamic NTK depends on the longest sequence in the batch (max position + 1), like HF; it is computed
    in-graph so one compiled function serves every length.
    """
    dim, B = cfg.head_dim, positions.shape[0]
    rtype = cfg.rope_scaling.rope_type
    if rtype == "dynamic":
        factor, max_pos = cfg.rope_scaling.factor, cfg.max_position_embeddings
        seq_len = jnp.maximum(jnp.max(positions) + 1, max_pos).astype(jnp.float32)
        base = cfg.rope_theta * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        inv = 1.0 / (base ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
        return jnp.broadcast_to(inv, (B, dim // 2)), 1.0
    if rtype == "default":
        inv, scale = _base_inv_freq(cfg.rope_theta, dim), 1.0
    elif rtype == "linear":
        inv, scale = _base_inv_freq(cfg.rope_theta, dim) / cfg.rope_scaling.factor, 1.0
    elif rtype == "yarn":
        inv, scale = _yarn(cfg, dim)
    else:
        inv, scale = _llama3(cfg, dim), 1.0
    return jnp.broadcast_to(jnp.asarray(inv), (B, dim // 2)), scale


def rope_cos_sin(cfg: ModelConfig, positions):
    """cos, sin of shape (B, T, Dh) in float32 for integer positions (B, T)."""
    inv, scale = rope_frequencies(cfg, positions)
    freqs = positions.astype(jnp.float32)[:, :, None] * inv[:, None, :]  # (B, T, Dh/2)
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    # computed once for every layer (`ops.xla_cpu.buffered` keeps XLA:CPU from fusing them into each RoPE);
    # the flag is the CPU loop's runtime trip condition, never true for real positions
    return ops_for(cfg).buffered(lambda: (jnp.cos(emb) * scale, jnp.sin(emb) * scale), jnp.min(positions) < 0)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE on x (B, T, H, Dh) with cos/sin (B, T, Dh); computed in float32."""
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    out = xf * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)
