"""Sequence packing: first-fit-decreasing into fixed-length rows with segment ids and per-segment positions."""
import numpy as np

from rlpt.rollout.format import fit_width  # noqa: F401  (re-exported: the rows SFT packs)


def shift_example(ids: list[int], mask: list[int]):
    """(inputs, targets, loss_mask) of one example: predict token t+1 from tokens <= t."""
    return ids[:-1], ids[1:], mask[1:]


def first_fit_decreasing(lengths: list[int], num_rows: int, row_len: int, counts: list[int] | None = None,
                         max_count: int = 0) -> tuple[list[list[int]], list[int]]:
    """Assign items (by index) to at most num_rows rows of capacity row_len, longest first; with counts (e.g.
    each item's images), a row also holds at most max_count of them.

    Returns (rows, unplaced): rows[r] lists item indices in placement order; unplaced are the indices that
    did not fit (the caller carries them to the next batch; nothing is lost).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = [[] for _ in range(num_rows)]
    free = [row_len] * num_rows
    room = [max_count] * num_rows
    unplaced = []
    for i in order:
        n, c = lengths[i], 0 if counts is None else counts[i]
        for r in range(num_rows):
            if free[r] >= n and (counts is None or room[r] >= c):
                rows[r].append(i)
                free[r] -= n
                room[r] -= c
                break
        else:
            unplaced.append(i)
    return rows, sorted(unplaced)


def pack_rows(examples: list[tuple[list[int], list[int], list[int]]], rows: list[list[int]], row_len: int,
              pad_id: int = 0, images: list | None = None, slots: int = 0,
              image_shape: tuple = ()) -> dict[str, np.ndarray]:
    """Arrays (R, row_len): inputs, targets, loss_mask, positions (restart per segment), segment_ids
    (1.. per row; 0 is padding). With images (per example, (n, C, H, W) pixel values or None): also
    pixel_values (R, slots, *image_shape), each row's images in its segments' order (zeros past them), and
    num_images (R,)."""
    if images is not None:
        pixels = np.zeros((len(rows), slots, *image_shape), np.float32)
        counts = np.zeros((len(rows),), np.int32)
        for r, items in enumerate(rows):
            for i in items:
                if images[i] is not None and len(images[i]):
                    n = len(images[i])
                    if counts[r] + n > slots:
                        raise ValueError(f"row {r}: more than {slots} images (data.images_per_row)")
                    pixels[r, counts[r]:counts[r] + n] = images[i]
                    counts[r] += n
        return pack_rows(examples, rows, row_len, pad_id) | {"pixel_values": pixels, "num_images": counts}
    R = len(rows)
    out = {k: np.zeros((R, row_len), np.int32) for k in ("inputs", "targets", "positions", "segment_ids")}
    out["inputs"][:] = pad_id
    out["loss_mask"] = np.zeros((R, row_len), np.float32)
    for r, items in enumerate(rows):
        at = 0
        for seg, i in enumerate(items, start=1):
            inp, tgt, msk = examples[i]
            n = len(inp)
            out["inputs"][r, at:at + n] = inp
            out["targets"][r, at:at + n] = tgt
            out["loss_mask"][r, at:at + n] = msk
            out["positions"][r, at:at + n] = np.arange(n)
            out["segment_ids"][r, at:at + n] = seg
            at += n
    return out
