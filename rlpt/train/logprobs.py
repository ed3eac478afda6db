"""Token log-probs and entropies from final hidden states, with the LM head chunked so that the (tokens, vocab)
logits never exist whole, in the forward pass or the backward."""
import functools
import math

import jax
import jax.numpy as jnp

from rlpt.models.config import ModelConfig, logits_chunk_tokens
from rlpt.models.transformer import logits_from_hidden
from rlpt.parallel.rules import current_mesh, logical_spec


def head_logprobs(params, cfg: ModelConfig, hidden, targets, *, entropy: bool = False):
    """(log p(target), entropy of the next-token distribution or None), each (B, T) f32.

    hidden: final-norm hidden states (B, T, D); targets: token ids (B, T). cfg.logits_chunk
    (`rlpt.models.config.logits_chunk_tokens`) picks the chunk: unchunked, the head runs once over all (B, T);
    chunked, over C columns at a time (columns j, j + n, j + 2n, ... for chunk j of n, so that a sharded sequence
    axis stays sharded inside each chunk) in `_chunked_head`, whose backward pass recomputes one chunk's logits at
    a time. Same values and gradients either way, up to f32 summation order.
    """
    B, T, D = hidden.shape
    shards = _row_shards(B)
    tokens = logits_chunk_tokens(cfg, B * T // shards)
    cols = T if tokens == 0 else max(1, tokens * shards // B)
    if cols >= T:
        logp, ent, _ = _head_stats(params, cfg, hidden, targets)
        return logp, ent if entropy else None
    n = math.ceil(T / cols)
    cols = math.ceil(T / n)  # the fewest padded columns for n chunks
    pad = n * cols - T
    h = jnp.moveaxis(jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(B, cols, n, D), 2, 0)  # (n, B, C, D)
    t = jnp.moveaxis(jnp.pad(targets, ((0, 0), (0, pad))).reshape(B, cols, n), 2, 0)  # (n, B, C)
    key = "embed" if cfg.tie_embeddings else "lm_head"  # the one weight `logits_from_hidden` reads
    out = _chunked_head(cfg, {key: params[key]}, h, t)
    # (n, B, C) -> (B, C, n) -> (B, T): column i * n + j came from chunk j
    logp, ent = (jnp.moveaxis(o, 0, 2).reshape(B, n * cols)[:, :T] for o in out)
    return logp, ent if entropy else None


def _head_stats(params, cfg, hidden, targets):
    """(log p(target), entropy, logsumexp), each (B, C) f32, from hidden (B, C, D) through the whole LM head."""
    logits = logits_from_hidden(params, cfg, hidden).astype(jnp.float32)  # (B, C, V)
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0] - logz
    logp = logits - logz[..., None]
    return picked, -jnp.sum(jnp.exp(logp) * logp, axis=-1), logz


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked_head(cfg, head, h, t):
    """(log p(target), entropy), each (n, B, C), for n chunks h (n, B, C, D), t (n, B, C), one chunk at a time."""
    return _chunked_head_fwd(cfg, head, h, t)[0]


def _chunked_head_fwd(cfg, head, h, t):
    logp, ent, logz = jax.lax.map(lambda x: _head_stats(head, cfg, *x), (h, t))
    return (logp, ent), (head, h, t, logz, ent)


def _chunked_head_bwd(cfg, res, g):
    """Recompute each chunk's logits z; with p = softmax(z) and H the entropy, d logp(t)/dz = onehot(t) - p and
    dH/dz = -p (log p + H); the head's own VJP (`logits_from_hidden`) maps dz to the weight and hidden
    gradients. The weight gradient is summed over chunks in f32."""
    head, h, t, logz, ent = res
    g_logp, g_ent = g

    def chunk(dhead, x):
        hc, tc, lz, en, gl, ge = x
        logits, pullback = jax.vjp(lambda w, hh: logits_from_hidden(w, cfg, hh), head, hc)
        logp = logits.astype(jnp.float32) - lz[..., None]
        p = jnp.exp(logp)
        onehot = jnp.arange(logp.shape[-1]) == tc[..., None]
        dz = gl[..., None] * (onehot - p) - ge[..., None] * p * (logp + en[..., None])
        dw, dh = pullback(dz.astype(logits.dtype))
        return jax.tree.map(lambda a, b: a + b.astype(jnp.float32), dhead, dw), dh

    zeros = jax.tree.map(lambda w: jnp.zeros(w.shape, jnp.float32), head)
    dhead, dh = jax.lax.scan(chunk, zeros, (h, t, logz, ent, g_logp, g_ent))
    return jax.tree.map(lambda d, w: d.astype(w.dtype), dhead, head), dh.astype(h.dtype), None


_chunked_head.defvjp(_chunked_head_fwd, _chunked_head_bwd)


def _row_shards(rows: int) -> int:
    """How many ways the active mesh splits `rows` (the logical "batch" axis); 1 without a mesh. The chunk
    budget is per device: a data-parallel device holds rows / shards of every chunk."""
    mesh = current_mesh()
    if mesh is None:
        return 1
    axes = logical_spec(("batch",), (rows,), mesh)[0]
    axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
    return math.prod(mesh.shape[a] for a in axes)
