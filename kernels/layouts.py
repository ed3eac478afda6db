"""Sequence layouts for context parallelism: token permutations applied once in the data pipeline.

After `apply_layout`, shard i of the sequence axis (the i-th contiguous T/n slice, which is what a
`P(None, "seq")` sharding gives device i) holds:
  contiguous: chunk i of n;
  zigzag:     chunks i and 2n-1-i of 2n (balances causal work);
  striped:    tokens i, i+n, i+2n, ... (balances causal work at token granularity).
Attention masks are built from the permuted global positions, so every layout gives the same result;
the layout only changes how causal work spreads over devices.
"""
import numpy as np

LAYOUTS = ("contiguous", "zigzag", "striped")


def layout_permutation(layout, seq_len, n_shards):
    """Index array perm (seq_len,) with permuted[:, j] = original[:, perm[j]]."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {LAYOUTS}")
    parts = {"contiguous": n_shards, "zigzag": 2 * n_shards, "striped": n_shards}[layout]
    if seq_len % parts:
        raise ValueError(f"seq_len {seq_len} must be divisible by {parts} for layout {layout!r} "
                         f"with {n_shards} shards")
    idx = np.arange(seq_len)
    if layout == "contiguous":
        return idx
    if layout == "striped":
        return idx.reshape(seq_len // n_shards, n_shards).T.reshape(-1)
    chunks = idx.reshape(2 * n_shards, -1)
    order = [c for i in range(n_shards) for c in (i, 2 * n_shards - 1 - i)]
    return chunks[order].reshape(-1)


def apply_layout(x, layout, n_shards, axis=1):
    """Permute the sequence axis of x (tokens, positions, segment ids, loss masks, ...) into `layout`."""
    perm = layout_permutation(layout, x.shape[axis], n_shards)
    return x[(slice(None),) * axis + (perm,)]


def layout_positions(layout, seq_len, n_shards):
    """Inverse of `layout_permutation`: pos (seq_len,) with token-order column c at permuted column pos[c]."""
    return np.argsort(layout_permutation(layout, seq_len, n_shards))


def invert_layout(x, layout, n_shards, axis=1):
    """Undo `apply_layout` on the sequence axis of x (e.g. model outputs back to token order)."""
    inv = layout_positions(layout, x.shape[axis], n_shards)
    return x[(slice(None),) * axis + (inv,)]


def apply_layout_batch(batch, layout, n_shards, axis=1, index_keys=()):
    """Apply one layout to every array of a batch dict (targets must already be shifted: next-token
    labels are computed in token order, then permuted with their inputs).

    Arrays named in index_keys hold column indices into the sequence axis (e.g. the RL loss's logit window),
    not per-column values: they keep their shape and each index moves to its column's permuted place, so a
    gather with them still reads the same tokens in token order.
    """
    seq_len = next(x.shape[axis] for name, x in batch.items() if name not in index_keys)
    pos = layout_positions(layout, seq_len, n_shards)
    return {name: pos[x] if name in index_keys else apply_layout(x, layout, n_shards, axis)
            for name, x in batch.items()}


def causal_work(positions, segment_ids, n_shards, *, causal=True, sliding_window=None):
    """Visible (query, key) pairs per device for a batch laid out along axis 1.

    positions, segment_ids: (B, T) in the permuted layout (numpy). Returns an int array (n_shards,): the
    attention work each device does with perfect block skipping, summed over the batch.
    """
    positions, segment_ids = np.asarray(positions), np.asarray(segment_ids)
    B, T = positions.shape
    if T % n_shards:
        raise ValueError(f"sequence length {T} not divisible by {n_shards} shards")
    work = np.zeros(n_shards, np.int64)
    for b in range(B):
        kp, ks = positions[b], segment_ids[b]
        for d, (qp, qs) in enumerate(zip(np.split(kp, n_shards), np.split(ks, n_shards))):
            vis = (qs[:, None] == ks[None, :]) & (qs[:, None] != 0)
            if causal:
                vis &= qp[:, None] >= kp[None, :]
            if sliding_window is not None:
                vis &= np.abs(qp[:, None] - kp[None, :]) < sliding_window
            work[d] += int(vis.sum())
    return work


def work_balance(positions, segment_ids, n_shards, **mask_opts):
    """max/mean of `causal_work` over devices: 1.0 is perfect balance; the step time follows the max."""
    work = causal_work(positions, segment_ids, n_shards, **mask_opts)
    return float(work.max() / work.mean())
