"""Preference pairs: JSONL (text or chat) readers, verifier-made and synthetic pairs, cleaning, batch arrays.

A pair is token ids: the prompt rendered as a user turn awaiting the assistant, and two responses (each ending
with the end-of-turn id when finished). Sampled responses keep the sampler's tokens (token in, token out).
"""
import dataclasses
import functools
import random

import numpy as np

from rlpt.rollout.format import completion_ids, prompt_ids
from rlpt.tasks import get_domain
from rlpt.train.data import DataError, jsonl_records
from rlpt.train.packing import fit_width


@dataclasses.dataclass(frozen=True)
class PrefPair:
    """prompt / chosen / rejected token ids; `task_id` names the source task or file line."""

    prompt: tuple[int, ...]
    chosen: tuple[int, ...]
    rejected: tuple[int, ...]
    task_id: str = ""
    # a vision-language policy's image task: the prompt's pixel_values (n, C, H, W), shared by both responses
    images: object = dataclasses.field(default=None, compare=False, repr=False)


def _chat_pair(tok, prompt_msgs, chosen_msg, rejected_msg, where: str) -> PrefPair:
    p_ids, _ = tok.encode_chat(prompt_msgs, add_generation_prompt=True)
    responses = []
    for msg in (chosen_msg, rejected_msg):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            raise DataError(f"{where}: chosen/rejected must end with an assistant message; got {msg!r:.80}")
        ids, mask = tok.encode_chat(list(prompt_msgs) + [msg])
        if ids[:len(p_ids)] != p_ids:
            raise DataError(f"{where}: the rendered prompt is not a prefix of the rendered conversation")
        last = max((i for i, m in enumerate(mask) if m), default=len(p_ids) - 1)
        responses.append(tuple(ids[len(p_ids):last + 1]))
    return PrefPair(tuple(p_ids), responses[0], responses[1], where)


def parse_pair(rec, tok, where: str) -> PrefPair:
    """One JSONL record -> PrefPair. Formats: {"prompt": str, "chosen": str, "rejected": str};
    {"prompt": [messages], "chosen": [assistant message], "rejected": [...]}; or TRL's implicit-prompt chat form
    {"chosen": [messages], "rejected": [messages]} whose histories before the last assistant turn agree."""
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    c, r, p = rec.get("chosen"), rec.get("rejected"), rec.get("prompt")
    if isinstance(c, str) and isinstance(r, str) and isinstance(p, str):
        return PrefPair(tuple(prompt_ids(tok, p)), tuple(completion_ids(tok, c)), tuple(completion_ids(tok, r)),
                        where)
    if isinstance(c, list) and isinstance(r, list) and c and r:
        try:
            if isinstance(p, list):
                if len(c) != 1 or len(r) != 1:
                    raise DataError(f"{where}: with a 'prompt' message list, chosen/rejected hold one message each")
                return _chat_pair(tok, p, c[0], r[0], where)
            if p is None:
                if c[:-1] != r[:-1]:
                    raise DataError(f"{where}: chosen and rejected differ before their last message (no 'prompt')")
                if not c[:-1]:
                    raise DataError(f"{where}: chosen/rejected hold no prompt messages before the answer")
                return _chat_pair(tok, c[:-1], c[-1], r[-1], where)
        except (TypeError, ValueError, KeyError) as e:
            if isinstance(e, DataError):
                raise
            raise DataError(f"{where}: bad chat messages ({e})") from e
    raise DataError(f"{where}: needs string 'prompt'/'chosen'/'rejected', or chat message lists")


def read_pairs(path: str, tok) -> list[PrefPair]:
    """All pairs of a JSONL file; errors name the file and line."""
    out = [parse_pair(rec, tok, where) for where, rec in jsonl_records(path, "preference JSONL")]
    if not out:
        raise DataError(f"{path}: no preference pairs")
    return out


def clean_pairs(pairs: list[PrefPair], stop_ids, max_len: int, overlong: str) -> tuple[list[PrefPair], dict]:
    """Drop identical and empty pairs; over-long ones (prompt + response > max_len) are dropped, or with
    overlong="truncate" cut at the response's tail (dropped when the prompt alone does not fit). Counts each."""
    if overlong not in ("drop", "truncate"):
        raise ValueError(f"pref.overlong={overlong!r}; expected 'drop' or 'truncate'")
    stops = set(int(s) for s in stop_ids)
    counts = {"pairs_in": len(pairs), "identical": 0, "empty": 0, "overlong_dropped": 0, "truncated": 0}
    kept = []
    for pair in pairs:
        if any(all(t in stops for t in resp) for resp in (pair.chosen, pair.rejected)):
            counts["empty"] += 1
            continue
        if pair.chosen == pair.rejected:
            counts["identical"] += 1
            continue
        room = max_len - len(pair.prompt)
        if len(pair.chosen) > room or len(pair.rejected) > room:
            if overlong == "drop" or room < 1:
                counts["overlong_dropped"] += 1
                continue
            pair = dataclasses.replace(pair, chosen=pair.chosen[:room], rejected=pair.rejected[:room])
            counts["truncated"] += 1
            if pair.chosen == pair.rejected:  # the cut removed the only difference
                counts["identical"] += 1
                continue
        kept.append(pair)
    counts["pairs_kept"] = len(kept)
    return kept, counts


def _rows(seqs: list[tuple[tuple[int, ...], tuple[int, ...]]], row_len: int, prefix: str) -> dict:
    """(prompt, response) sequences -> shifted rows (N, row_len) with the response tokens in the mask."""
    N = len(seqs)
    out = {f"{prefix}{k}": np.zeros((N, row_len), np.int32) for k in ("inputs", "targets", "positions",
                                                                      "segment_ids")}
    out[f"{prefix}mask"] = np.zeros((N, row_len), np.float32)
    for i, (p, resp) in enumerate(seqs):
        seq = list(p) + list(resp)
        L = len(seq) - 1
        if L > row_len:
            raise ValueError(f"pair row {i}: {L} tokens exceed the row length {row_len} (clean_pairs first)")
        out[f"{prefix}inputs"][i, :L] = seq[:-1]
        out[f"{prefix}targets"][i, :L] = seq[1:]
        out[f"{prefix}positions"][i, :L] = np.arange(L)
        out[f"{prefix}segment_ids"][i, :L] = 1
        out[f"{prefix}mask"][i, len(p) - 1:L] = 1.0
    return out


def longest_pair(pairs) -> int:
    """Tokens in the longest prompt + response sequence of the pairs (chosen or rejected)."""
    return max(len(p.prompt) + max(len(p.chosen), len(p.rejected)) for p in pairs)


def pair_arrays(pairs: list[PrefPair], row_len: int, *, kl_rows: bool = False) -> dict[str, np.ndarray]:
    """Rows for chosen (c_*) and rejected (r_*): inputs/targets/positions/segment_ids/mask (N, W).

    row_len is the most a row may hold; W = `fit_width` of the longest pair (a power of two, at most row_len),
    so short pairs do not pay for padding up to the configured maximum. kl_rows adds KTO's mismatched rows:
    prompt i with the chosen (kc_*) / rejected (kr_*) response of pair i+1 (mod N), cut to fit the row; their
    log-probs estimate KTO's reference point.
    """
    if not pairs:
        raise ValueError("no preference pairs left to train on (see the pair counts)")
    row_len = fit_width(longest_pair(pairs), row_len)
    out = _rows([(p.prompt, p.chosen) for p in pairs], row_len, "c_")
    out |= _rows([(p.prompt, p.rejected) for p in pairs], row_len, "r_")
    prefixes = ["c_", "r_"]
    if kl_rows:
        n = len(pairs)
        for key, prefix in (("chosen", "kc_"), ("rejected", "kr_")):
            seqs = []
            for i, p in enumerate(pairs):
                other = getattr(pairs[(i + 1) % n], key)
                seqs.append((p.prompt, other[:row_len + 1 - len(p.prompt)]))
            out |= _rows(seqs, row_len, prefix)
            prefixes.append(prefix)
    with_images = [p.images for p in pairs if p.images is not None and len(p.images)]
    if with_images:  # every row group of pair i has pair i's prompt, so its images (rlpt.train.losses)
        slots, shape = max(len(x) for x in with_images), with_images[0].shape[1:]
        pixels = np.zeros((len(pairs), slots, *shape), np.float32)
        counts = np.zeros((len(pairs),), np.int32)
        for i, p in enumerate(pairs):
            if p.images is not None and len(p.images):
                pixels[i, :len(p.images)], counts[i] = p.images, len(p.images)
        for prefix in prefixes:
            out[f"{prefix}pixel_values"], out[f"{prefix}num_images"] = pixels, counts
    return out


@functools.lru_cache(maxsize=4)
def _permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, 13, epoch]).permutation(n)


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """Rows of optimizer step `step` (0-based): epochs of a seeded permutation, wrapping across epochs."""
    out = []
    for i in range(step * batch_size, (step + 1) * batch_size):
        epoch, k = divmod(i, n)
        out.append(_permutation(n, seed, epoch)[k])
    return np.asarray(out)


def train_tasks(names: list[str], tiers: dict[str, list[int]], n: int, seed: int) -> list:
    """n train-split tasks spread round-robin over domains, seeds and tiers from `seed`."""

    rng = random.Random(f"pref-tasks|{seed}")
    tasks = []
    for i in range(n):
        name = names[i % len(names)]
        tasks.append(get_domain(name).generate(rng.randrange(1 << 29), rng.choice(tiers[name])))
    return tasks
