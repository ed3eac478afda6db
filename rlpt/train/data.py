"""SFT data: JSONL or procedural-task sources, a weighted mixture with a replay share, FFD packing, and a
deterministic iterator whose whole position is a small JSON-able dict (saved in checkpoints)."""
import dataclasses
import functools
import json
import logging
import os
import random

import jax
import numpy as np

from rlpt.config.schema import DataConfig, SourceConfig
from rlpt.parallel.distributed import HostLocal, gather_objects
from rlpt.rollout.format import completion_ids, prompt_ids, task_prompt
from rlpt.tasks import get_domain
from rlpt.train.packing import first_fit_decreasing, pack_rows, shift_example


class DataError(ValueError):
    """Bad training data; the message names the file and line."""


def _rng(*keys: int) -> random.Random:
    """A cheap deterministic generator for one example; hashing a tuple of ints is stable across runs."""
    return random.Random(hash(tuple(int(k) for k in keys)))


def jsonl_records(path: str, what: str = "JSONL"):
    """Yield ("file:line", record) for each non-blank line; a missing file, a line that is not UTF-8 or not
    JSON raises DataError naming the file and line."""
    if not os.path.exists(path):
        raise DataError(f"{path}: {what} file not found")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{lineno}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                                f"{what} files must be UTF-8 encoded") from None
            if not line.strip():
                continue
            try:
                yield f"{path}:{lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: invalid JSON ({e.msg})") from e


def read_jsonl(path: str, tok) -> list[tuple[list[int], list[int], int]]:
    """(ids, completion mask, difficulty) per line: {"prompt", "completion"} or {"messages": [...]}."""
    out = []
    for where, rec in jsonl_records(path):
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if "messages" in rec:
            try:
                ids, mask = tok.encode_chat(rec["messages"])
            except (TypeError, ValueError, KeyError) as e:
                raise DataError(f"{where}: bad 'messages' ({e})") from e
        elif isinstance(rec.get("prompt"), str) and isinstance(rec.get("completion"), str):
            p, c = prompt_ids(tok, rec["prompt"]), completion_ids(tok, rec["completion"])
            ids, mask = p + c, [0] * len(p) + [1] * len(c)
        else:
            raise DataError(f"{where}: needs string 'prompt' and 'completion', or 'messages'")
        if sum(mask) == 0:
            raise DataError(f"{where}: no assistant tokens to train on")
        out.append((ids, mask, int(rec.get("difficulty", 0))))
    if not out:
        raise DataError(f"{path}: no examples")
    return out


@dataclasses.dataclass
class TaskSource:
    """Procedural tasks from the registry: the gold answer is the completion (train seeds only)."""

    tok: object
    domains: list[str]
    weights: np.ndarray
    tiers: dict[str, list[int]]
    seed: int
    easy_to_hard: bool
    horizon: int
    noise: float = 0.0
    vision: object = None  # the policy's VisionConfig (model.vision): image tasks carry their pixels
    bad_images: int = 0  # tasks dropped for a corrupt or unsupported image

    def example(self, j: int):
        """(ids, completion mask, tier, pixel_values (n, C, H, W) or None) of example j of the stream. A task whose
        image is corrupt or unsupported is dropped (logged and counted in bad_images) and the next draw taken."""
        for attempt in range(100):
            try:
                return self._example(j, attempt)
            except ValueError as e:
                if self.vision is None:
                    raise
                self.bad_images += 1
                logging.getLogger(__name__).warning("SFT example %d dropped: %s", j, e)
        raise DataError(f"100 draws in a row for SFT example {j} had corrupt or unsupported images")

    def _example(self, j: int, attempt: int):
        r = _rng(self.seed, 7, j) if attempt == 0 else _rng(self.seed, 7, j, attempt)
        name = r.choices(self.domains, weights=self.weights)[0]
        tiers = self.tiers[name]
        if self.easy_to_hard:
            top = min(len(tiers) - 1, int(len(tiers) * min(j / max(self.horizon, 1), 0.999)))
            tier = tiers[r.randrange(top + 1)]
        else:
            tier = tiers[r.randrange(len(tiers))]
        dom = get_domain(name)
        task = dom.generate(r.randrange(1 << 29), tier)
        answer = task.meta["answer"]
        if self.noise > 0 and r.random() < self.noise:
            answer = dom.generate(r.randrange(1 << 29), tier).meta["answer"]  # a noisy teacher
        p, pixels = task_prompt(self.tok, task, self.vision)
        c = completion_ids(self.tok, answer)
        return p + c, [0] * len(p) + [1] * len(c), tier, pixels


class SFTData:
    """Deterministic batches of packed rows. state = {"cursor", "counters", "deferred", "dropped", ...}."""

    def __init__(self, cfg: DataConfig, tok, seed: int, *, domains=None, total_steps: int = 1, shard: int = 0,
                 num_shards: int = 1, vision=None):
        self.cfg, self.tok, self.seed, self.vision = cfg, tok, seed, vision
        # shard k of S: rows batch_size / S per batch, from examples k, k + S, k + 2S, ... of each source and
        # source picks k, k + S, ... of the stream (S = 1: the whole stream)
        self.shard, self.num_shards = shard, num_shards
        if not 0 <= shard < num_shards or cfg.batch_size % num_shards:
            raise ValueError(f"data.shards={num_shards}: data.batch_size={cfg.batch_size} must divide into "
                             f"{num_shards} shards (shard {shard})")
        if cfg.overlong not in ("truncate", "drop"):
            raise ValueError(f"data.overlong={cfg.overlong!r}; expected 'truncate' or 'drop'")
        if not cfg.sources:
            raise ValueError("data.sources is empty")
        self.names = sorted(cfg.sources)
        self.sources = {}
        for name in self.names:
            src: SourceConfig = cfg.sources[name]
            if src.kind in ("jsonl", "rl_jsonl"):
                if src.kind == "jsonl":
                    rows = read_jsonl(src.path, tok)
                else:  # an RL prompt file: its answered train-split rows are the demonstrations
                    from rlpt.tasks.files import demonstrations  # on use (start-up: gymnasium)

                    rows = demonstrations(src.path, tok)
                if cfg.easy_to_hard:
                    rows = sorted(rows, key=lambda r: r[2])
                self.sources[name] = rows
            elif src.kind == "tasks":
                if not domains:
                    raise ValueError(f"data.sources.{name}: kind 'tasks' needs a non-empty domain mixture")
                names, weights, tiers = domains
                from rlpt.tasks.files import require_answers  # on use (start-up: gymnasium)

                require_answers(names)  # RL prompt files in the mixture: every train row needs a gold answer
                self.sources[name] = TaskSource(tok, names, np.asarray(weights) / np.sum(weights), tiers, seed,
                                                cfg.easy_to_hard, total_steps * cfg.batch_size * 4, cfg.noise,
                                                vision)
            else:
                raise ValueError(f"data.sources.{name}.kind={src.kind!r}; expected 'jsonl', 'tasks' or 'rl_jsonl'")
        self.state = {"cursor": 0, "counters": {n: 0 for n in self.names}, "deferred": [],
                      "dropped": 0, "truncated": 0, "batches": 0}
        stages = [tuple(int(x) for x in st) for st in cfg.length_stages]
        if any(len(st) != 2 for st in stages) or stages != sorted(stages):
            raise ValueError(f"data.length_stages={cfg.length_stages!r}: expected ascending [from_step, seq_len] pairs")
        self.stages = stages
        self._cache: dict = {}
        self._pixels: dict = {}  # stream key -> the example's pixel_values (model.vision)
        self._check_usable()

    def _check_usable(self, probe: int = 64) -> None:
        """Fail before training when a row length leaves no example of a source with a trained token.

        Examples are checked in stream order until each row length has one usable example (JSONL sources: at
        most all of them; procedural ones: at most `probe`). With overlong=drop an example must fit the row;
        with truncate its first completion token must (after the one-token shift).
        """
        lengths = [] if any(start == 0 for start, _ in self.stages) else [("data.seq_len", self.cfg.seq_len)]
        lengths += [(f"data.length_stages (from step {start})", n) for start, n in self.stages]
        drop = self.cfg.overlong == "drop"
        for name in self.names:
            src = self.sources[name]
            n = len(src) if isinstance(src, list) else min(probe, self.cfg.pool_size)
            sizes, first, todo = [], [], dict(lengths)
            for j in range(n):
                inp, _, msk = shift_example(*self._example(name, j))
                sizes.append(len(inp))
                first.append(next((i for i, m in enumerate(msk) if m), len(msk)))
                todo = {k: L for k, L in todo.items() if not (sizes[-1] <= L if drop else first[-1] < L)}
                if not todo:
                    break
            for key, row_len in todo.items():
                if drop:
                    need, why = min(sizes), f"all {n} are longer than {row_len} tokens (data.overlong=drop)"
                else:
                    need = min(first) + 1
                    why = (f"truncated to {row_len} tokens, none of the {n} keeps a completion token "
                           f"(data.overlong=truncate)")
                raise DataError(
                    f"{key}={row_len} leaves 0 of {n} examples of data.sources.{name} with a token to train on: "
                    f"{why}; examples are {min(sizes)}-{max(sizes)} tokens; raise it to at least {need}")

    def row_len(self, batch_index: int) -> int:
        """The sequence length of batch `batch_index` under the progressive length curriculum."""
        out = self.cfg.seq_len
        for start, length in self.stages:
            if batch_index >= start:
                out = length
        return out

    def _pick_source(self, i: int) -> str:
        r = _rng(self.seed, 3, i * self.num_shards + self.shard)
        replay = [n for n in self.names if self.cfg.sources[n].replay]
        main = [n for n in self.names if not self.cfg.sources[n].replay] or self.names
        pool = replay if replay and r.random() < self.cfg.replay_share else main
        return r.choices(pool, weights=[self.cfg.sources[n].weight for n in pool])[0]

    def _example(self, name: str, j: int, with_pixels: bool = False):
        src = self.sources[name]
        if isinstance(src, TaskSource):
            ids, mask, _, pixels = src.example(j)
            return (ids, mask, pixels) if with_pixels else (ids, mask)
        epoch, k = divmod(j, len(src))
        ids, mask, _ = src[int(self._order(name, epoch)[k])]
        return (ids, mask, None) if with_pixels else (ids, mask)

    @functools.lru_cache(maxsize=8)  # noqa: B019  (one permutation per source and epoch)
    def _order(self, name: str, epoch: int) -> np.ndarray:
        n = len(self.sources[name])
        if self.cfg.easy_to_hard:
            return np.arange(n)
        return np.random.default_rng([self.seed, 5, epoch]).permutation(n)

    def _shifted(self, key):
        """The shifted example for a stream key, from the window cache when it was drawn before."""
        if key not in self._cache:
            name, j = key
            ids, mask, pixels = self._example(name, j * self.num_shards + self.shard, with_pixels=True)
            if not self.cfg.completion_only:  # the loss covers the prompt too (image placeholders excepted)
                skip = self.vision.image_token_id if self.vision is not None else None
                mask = [int(t != skip) for t in ids]
            self._cache[key] = shift_example(ids, mask)
            self._pixels[key] = pixels
        return self._cache[key]

    def next_batch(self) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """One optimizer step of rows (batch_size, seq_len) plus data metrics."""
        cfg, st = self.cfg, self.state
        row_len, rows_n = self.row_len(st.get("batches", 0)), cfg.batch_size // self.num_shards
        st["batches"] = st.get("batches", 0) + 1
        window = [tuple(w) for w in st["deferred"]]
        examples = [self._shifted(w) for w in window]
        total, budget = sum(len(e[0]) for e in examples), rows_n * row_len
        # Draw a little more than fits so first-fit-decreasing can fill rows; the rest waits for the next batch.
        while (total < 1.25 * budget if cfg.packing else len(window) < rows_n) or len(window) < rows_n:
            s = self._pick_source(st["cursor"])
            st["cursor"] += 1
            window.append((s, st["counters"][s]))
            st["counters"][s] += 1
            examples.append(self._shifted(window[-1]))
            total += len(examples[-1][0])
        keep, over = [], 0
        pixels = [self._pixels.get(w) for w in window] if self.vision is not None else None
        counts = [0 if p is None else len(p) for p in pixels] if pixels is not None else None
        for idx, (inp, tgt, msk) in enumerate(examples):
            if counts is not None and counts[idx] > cfg.images_per_row:
                st["too_many_images"] = st.get("too_many_images", 0) + 1
                continue
            if len(inp) > row_len and counts is not None and counts[idx]:
                st["dropped"] += 1  # truncating could cut an image's tokens apart from its pixels: dropped
                continue
            if len(inp) > row_len:
                over += 1
                if cfg.overlong == "drop":
                    continue
                inp, tgt, msk = inp[:row_len], tgt[:row_len], msk[:row_len]
                examples[idx] = (inp, tgt, msk)
            keep.append(idx)
        if cfg.overlong == "drop":
            st["dropped"] += over
        else:
            st["truncated"] += over
        if cfg.packing:
            rows, unplaced = first_fit_decreasing([len(examples[i][0]) for i in keep], rows_n, row_len,
                                                  counts=None if counts is None else [counts[i] for i in keep],
                                                  max_count=cfg.images_per_row)
            rows = [[keep[i] for i in r] for r in rows]
            st["deferred"] = [list(window[keep[i]]) for i in unplaced]
        else:
            rows = [[i] for i in keep[:rows_n]] + [[] for _ in range(rows_n - len(keep[:rows_n]))]
            st["deferred"] = [list(window[i]) for i in keep[rows_n:]]
        if pixels is None:
            batch = pack_rows(examples, rows, row_len, pad_id=0)
        else:
            v = self.vision
            batch = pack_rows(examples, rows, row_len, pad_id=0, images=pixels, slots=cfg.images_per_row,
                              image_shape=(v.num_channels, v.image_size, v.image_size))
        deferred = {tuple(w) for w in st["deferred"]}
        self._cache = {k: v for k, v in self._cache.items() if k in deferred}
        self._pixels = {k: v for k, v in self._pixels.items() if k in deferred}
        metrics = {"data/examples": float(sum(len(r) for r in rows)), "data/overlong": float(over),
                   "data/seq_len": float(row_len),
                   "data/fill": float((batch["segment_ids"] > 0).mean())}
        return batch, metrics

    def get_state(self) -> dict:
        return json.loads(json.dumps(self.state))

    def set_state(self, state: dict) -> None:
        self.state = json.loads(json.dumps(state))
        self.state["deferred"] = [tuple(x) for x in self.state["deferred"]]


class HostData:
    """This process's share of the SFT data: the streams (`SFTData` shards) it owns out of data.shards.

    The global batch of a step is the data.shards streams' rows; micro-batch a (optim.grad_accum) takes rows
    a*b .. (a+1)*b - 1 of every stream, in stream order. Process p of P owns the streams p*S/P .. (p+1)*S/P - 1,
    builds only their rows (`next_batch`: host-local, in that micro-batch order), and the step places them with
    `jax.make_array_from_process_local_data`. The data therefore depends on data.shards, never on the process
    count: runs with the same data.shards give the same batches on 1 or P processes, and a checkpoint resumes on
    any process count that divides it (the state holds every stream's). data.shards=0: one stream per process.
    """

    def __init__(self, cfg: DataConfig, tok, seed: int, *, grad_accum: int = 1, domains=None, total_steps: int = 1,
                 vision=None):
        count, me = jax.process_count(), jax.process_index()
        self.num_shards = cfg.shards or count
        if self.num_shards % count:
            raise ValueError(f"data.shards={cfg.shards} must be a multiple of the process count {count}")
        if cfg.batch_size % (self.num_shards * grad_accum):
            raise ValueError(f"data.batch_size={cfg.batch_size} must divide into data.shards={self.num_shards} "
                             f"streams x optim.grad_accum={grad_accum} micro-batches")
        per = self.num_shards // count
        self.owned = list(range(me * per, (me + 1) * per))
        self.grad_accum = grad_accum
        self.streams = {k: SFTData(cfg, tok, seed, domains=domains, total_steps=total_steps, shard=k,
                                   num_shards=self.num_shards, vision=vision) for k in self.owned}

    def next_batch(self) -> tuple[HostLocal, dict[str, float]]:
        """This process's rows of the next global batch (host-local) and the whole batch's data metrics."""
        parts = [self.streams[k].next_batch() for k in self.owned]
        A = self.grad_accum
        batch = {key: np.concatenate([np.concatenate([b[key][a * len(b[key]) // A:(a + 1) * len(b[key]) // A]
                                                      for b, _ in parts]) for a in range(A)])
                 for key in parts[0][0]}
        if jax.process_count() > 1:
            metrics = [m for ms in gather_objects([m for _, m in parts], "sft/data_metrics") for m in ms]
        else:
            metrics = [m for _, m in parts]
        return HostLocal(batch), {"data/examples": sum(m["data/examples"] for m in metrics),
                       "data/overlong": sum(m["data/overlong"] for m in metrics),
                       "data/seq_len": metrics[0]["data/seq_len"],
                       "data/fill": float(np.mean([m["data/fill"] for m in metrics]))}

    def get_state(self) -> dict:
        """Every stream's state (all processes must call it: the streams are exchanged)."""
        own = {k: self.streams[k].get_state() for k in self.owned}
        if jax.process_count() > 1:
            own = {k: v for part in gather_objects(own, "sft/data_state") for k, v in part.items()}
        return {"num_shards": self.num_shards, "shards": {str(k): v for k, v in sorted(own.items())}}

    def set_state(self, state: dict) -> None:
        if "shards" not in state:  # a checkpoint of one stream (before data.shards)
            state = {"num_shards": 1, "shards": {"0": state}}
        if int(state["num_shards"]) != self.num_shards:
            raise DataError(f"the checkpoint's data has {state['num_shards']} streams (data.shards) but this run has "
                            f"{self.num_shards}; set data.shards={state['num_shards']} to resume it exactly")
        for k in self.owned:
            self.streams[k].set_state(state["shards"][str(k)])

    def overlong(self) -> int:
        """Examples dropped or truncated so far, over every stream (all processes must call it)."""
        own = sum(self.streams[k].state["dropped"] + self.streams[k].state["truncated"] for k in self.owned)
        return sum(gather_objects(own, "sft/data_overlong")) if jax.process_count() > 1 else own
