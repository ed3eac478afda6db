"""`PrefixCache`: the K/V of prompt prefixes shared by a call's prompts (a system prompt, a few-shot preamble),
computed once and reused by later `generate` calls on the same weights."""
import collections
import dataclasses

import jax.numpy as jnp
import numpy as np


def common_prefix(prompts) -> list[int]:
    """The longest token prefix every prompt starts with, one token short of the shortest prompt (each row must
    still run its own last prompt token through the model to draw its first new token)."""
    first = np.asarray(prompts[0])
    n = min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        p = np.asarray(p[:n])
        diff = np.nonzero(p != first[:len(p)])[0]
        n = min(n, int(diff[0]) if diff.size else len(p))
    return first[:max(n, 0)].tolist()


@dataclasses.dataclass
class PrefixCache:
    """Shared prompt prefixes, kept per weight version (on the `Model`, like its decode layout: a new policy
    version starts empty) and per sampler setting (compute dtype, quantization, KV-cache dtype).

    Pass one to `generate(..., prefix_cache=cache)`: the call's prompts' common prefix (`common_prefix`) is
    looked up: the longest stored prefix it starts with is copied into every row's cache instead of being
    recomputed (a hit); with none and a common prefix of at least `min_tokens`, that prefix is computed once
    for the call and stored (a fill: the call already runs it once instead of once per prompt). At most
    `max_entries` prefixes per weight version, least recently used dropped first. Counters: `calls`, `hits`,
    `prompt_tokens` (the calls' prompt tokens, per prompt), `reused_tokens` (prompt tokens not run through the
    model: a hit's prefix on every prompt, a fill's on every prompt but one).
    """

    min_tokens: int = 16
    max_entries: int = 8
    calls: int = 0
    hits: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0

    def __post_init__(self):
        if self.min_tokens < 1 or self.max_entries < 1:
            raise ValueError(f"PrefixCache(min_tokens={self.min_tokens}, max_entries={self.max_entries}): both "
                             "must be >= 1")

    @property
    def hit_rate(self) -> float:
        """Fraction of calls served from a stored prefix."""
        return self.hits / self.calls if self.calls else 0.0

    @property
    def reused_fraction(self) -> float:
        """Fraction of the prompt tokens that were not recomputed."""
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def stats(self) -> dict:
        return {"prefix_hit_rate": self.hit_rate, "prefix_reused_fraction": self.reused_fraction,
                "prefix_calls": self.calls}

    def lookup(self, model, prompts, setting: tuple, compute):
        """(P, the prefix K/V or None) for these prompts: P tokens of every prompt come from the cache.
        compute(tokens (P,) int32) -> K/V runs the model on a new prefix (`engine.prefix_kv`)."""
        store = model.derived("prefix_cache", lambda params, cfg: collections.OrderedDict())
        shared = common_prefix(prompts)
        self.calls += 1
        self.prompt_tokens += sum(len(p) for p in prompts)
        best = None
        for key in store:
            if key[0] == setting and len(key[1]) <= len(shared) and shared[:len(key[1])] == list(key[1]):
                if best is None or len(key[1]) > len(best[1]):
                    best = key
        if best is not None:
            store.move_to_end(best)
            self.hits += 1
            self.reused_tokens += len(best[1]) * len(prompts)
            return len(best[1]), store[best]
        if len(shared) < self.min_tokens:
            return 0, None
        key = (setting, tuple(shared))
        store[key] = compute(jnp.asarray(shared, jnp.int32))
        while len(store) > self.max_entries:
            store.popitem(last=False)
        self.reused_tokens += len(shared) * (len(prompts) - 1)
        return len(shared), store[key]
