"""Sampling methods (frozen dataclasses that reshape next-token logits) and the sort-free categorical draw."""
import dataclasses

import jax
import jax.numpy as jnp
from jax.extend.random import threefry_2x32

NEG_INF = -jnp.inf
_CDF_BLOCK = 128  # block width of the two-level inverse-CDF draw (cumsums stay short; no O(V) cumsum)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """Keep only the most likely token (ties: every maximum survives; the draw then takes the first)."""

    def __call__(self, logits):
        """logits (B, V) f32 -> (B, V) with -inf everywhere but the maximum."""
        return jnp.where(logits >= jnp.max(logits, axis=-1, keepdims=True), logits, NEG_INF)


@dataclasses.dataclass(frozen=True)
class Temperature:
    """Divide logits by `temperature` (> 0)."""

    temperature: float

    def __call__(self, logits):
        return logits / jnp.float32(self.temperature)


@dataclasses.dataclass(frozen=True)
class TopK:
    """Keep the k largest logits (all tokens tied with the k-th survive)."""

    k: int

    def __call__(self, logits):
        # The k-th largest value by bisection over order-preserving integer keys: exact, and ~10x cheaper than
        # lax.top_k or a sort on XLA:CPU at vocabulary sizes.
        keys = _ordered_keys(logits)
        k = min(self.k, logits.shape[-1])
        kth = _max_threshold(lambda t: jnp.sum(keys >= t[:, None], axis=-1) >= k,
                             jnp.min(keys, axis=-1), jnp.max(keys, axis=-1))
        return jnp.where(keys >= kth[:, None], logits, NEG_INF)


@dataclasses.dataclass(frozen=True)
class TopP:
    """Nucleus: keep the most likely tokens until their probability reaches `top_p` (the crossing one kept)."""

    top_p: float

    def __call__(self, logits):
        probs = jax.nn.softmax(logits, axis=-1)
        # Non-negative floats order like their bit patterns, so bisection on the bits finds the exact
        # probability of the token that crosses top_p without sorting the vocabulary.
        bits = jax.lax.bitcast_convert_type(probs, jnp.uint32)
        target = jnp.float32(self.top_p) * jnp.sum(probs, axis=-1)
        mass = lambda t: jnp.sum(jnp.where(bits >= t[:, None], probs, 0.0), axis=-1)  # noqa: E731
        cut = _max_threshold(lambda t: mass(t) >= target, jnp.zeros(bits.shape[:1], jnp.uint32),
                             jnp.max(bits, axis=-1))
        return jnp.where(bits >= cut[:, None], logits, NEG_INF)


@dataclasses.dataclass(frozen=True)
class MinP:
    """Keep tokens whose probability is at least `min_p` times the most likely token's."""

    min_p: float

    def __call__(self, logits):
        floor = jnp.max(logits, axis=-1, keepdims=True) + jnp.log(jnp.float32(self.min_p))
        return jnp.where(logits >= floor, logits, NEG_INF)


def _ordered_keys(x):
    """uint32 keys with the same order as the float32 values x (negative floats have their bits flipped)."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    sign = bits >> 31
    return jnp.where(sign == 1, ~bits, bits | jnp.uint32(0x80000000))


def _max_threshold(ok, lo, hi):
    """Largest t in [lo, hi] (uint32, per row) with ok(t), given ok(lo) and ok monotone (true, then false).

    At most 32 halvings; the loop ends as soon as every row has converged.
    """
    def body(carry):
        lo, hi = carry
        mid = lo + (hi - lo + 1) // 2
        good = ok(mid)
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid - 1)

    lo, _ = jax.lax.while_loop(lambda c: jnp.any(c[0] < c[1]), body, (lo, hi))
    return lo


def make_methods(temperature=1.0, top_k=None, top_p=None, min_p=None) -> tuple:
    """The chain of methods for these settings, in HF's order (temperature, top-k, top-p, min-p).

    temperature 0 means greedy (the others are then irrelevant). No-op settings add nothing, so plain
    temperature-1 sampling runs no truncation at all.
    """
    if temperature is None or isinstance(temperature, bool) or float(temperature) < 0:
        raise ValueError(f"temperature={temperature!r}; expected a number >= 0 (0 is greedy)")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k={top_k!r}; expected an integer >= 1 or None")
    if top_p is not None and not 0.0 < float(top_p) <= 1.0:
        raise ValueError(f"top_p={top_p!r}; expected a value in (0, 1] or None")
    if min_p is not None and not 0.0 <= float(min_p) <= 1.0:
        raise ValueError(f"min_p={min_p!r}; expected a value in [0, 1] or None")
    if float(temperature) == 0.0:
        return (Greedy(),)
    chain = []
    if float(temperature) != 1.0:
        chain.append(Temperature(float(temperature)))
    if top_k is not None:
        chain.append(TopK(int(top_k)))
    if top_p is not None and float(top_p) < 1.0:
        chain.append(TopP(float(top_p)))
    if min_p is not None and float(min_p) > 0.0:
        chain.append(MinP(float(min_p)))
    return tuple(chain)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How each token is drawn, passed whole (`generate(..., sampling=SamplingParams(...))`): temperature (0:
    greedy), top_k, top_p and min_p (None: off), applied in HF's order. Checked when built."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self):
        make_methods(self.temperature, self.top_k, self.top_p, self.min_p)  # a ValueError names the bad field

    @classmethod
    def of(cls, cfg) -> "SamplingParams":
        """From any config that holds the fields (rl.rollout's RolloutConfig; min_p where it has one)."""
        return cls(cfg.temperature, cfg.top_k, cfg.top_p, getattr(cfg, "min_p", None))


def resolve_sampling(sampling, temperature, top_k, top_p, min_p) -> tuple:
    """(temperature, top_k, top_p, min_p): a SamplingParams's when given (it replaces the four keywords), else the
    keywords as passed."""
    if sampling is None:
        return temperature, top_k, top_p, min_p
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling={sampling!r}; expected a rlpt.sampling.SamplingParams")
    return sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p


def apply_methods(methods: tuple, logits):
    """Sampling-distribution logits (B, V) f32 (-inf = excluded) from raw logits (B, V)."""
    logits = logits.astype(jnp.float32)
    for method in methods:
        logits = method(logits)
    return logits


def row_uniforms(key_data, row_ids, counters):
    """One uniform in [0, 1) per row from a counter-based hash: Threefry-2x32(key, (row_id, counter)).

    key_data (2,) uint32; row_ids, counters (B,). The same (key, row, counter) gives the same number in any
    batch layout (slot refill relies on it), and one vectorised hash per step costs far less on CPU than
    B vmapped fold_in + uniform calls.
    """
    count = jnp.concatenate([row_ids.astype(jnp.uint32), counters.astype(jnp.uint32)])
    bits = threefry_2x32((key_data[0], key_data[1]), count)[:row_ids.shape[0]]
    return jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0


def _inclusive_cumsum(x):
    """Cumsum over the last (short) axis as a matmul with a triangular matrix: XLA:CPU's cumsum is slow."""
    n = x.shape[-1]
    tri = (jnp.arange(n)[:, None] <= jnp.arange(n)[None, :]).astype(x.dtype)
    return jnp.matmul(x, tri, precision=jax.lax.Precision.HIGHEST)


def categorical(weights, uniforms):
    """Inverse-CDF draw of one token per row: weights (B, V) f32, non-negative and unnormalised (e.g.
    exp(logits - max); 0 = excluded, at least one positive per row), uniforms (B,) in [0, 1) -> tokens (B,)
    int32.

    Two levels (block masses, then within the chosen block) keep every cumsum short and avoid any sort.
    """
    B, V = weights.shape
    nb = -(-V // _CDF_BLOCK)
    probs = jnp.pad(weights, ((0, 0), (0, nb * _CDF_BLOCK - V))).reshape(B, nb, _CDF_BLOCK)
    block_mass = jnp.sum(probs, axis=-1)  # (B, nb)
    block_cdf = _inclusive_cumsum(block_mass)
    # u in (0, 1] so that the chosen token always has positive probability.
    target = (1.0 - uniforms) * block_cdf[:, -1]
    block = jnp.minimum(jnp.sum(block_cdf < target[:, None], axis=-1), nb - 1)
    pick = jax.nn.one_hot(block, nb, dtype=probs.dtype)  # a one-hot contraction: cheaper than a gather on CPU
    before = jnp.sum(pick * (block_cdf - block_mass), axis=-1)
    inner = jnp.einsum("bn,bnk->bk", pick, probs, precision=jax.lax.Precision.HIGHEST)  # (B, block)
    inner_cdf = _inclusive_cumsum(inner)
    pos = jnp.sum(inner_cdf < (target - before)[:, None], axis=-1)
    # Float rounding can push the target past the block's total; fall back to its last token with mass.
    last_pos = _CDF_BLOCK - 1 - jnp.argmax(inner[:, ::-1] > 0, axis=-1)
    return (block * _CDF_BLOCK + jnp.minimum(pos, last_pos)).astype(jnp.int32)


def _softmax_parts(logits):
    """(max, exp(logits - max), log of the sum of those) of logits (B, V): log_softmax(logits) at token t is
    logits[t] - max - log_total, so one exp pass over the vocabulary serves the draw and the log-probs."""
    top = jnp.max(logits, axis=-1, keepdims=True)
    weights = jnp.exp(logits - top)
    return top[:, 0], weights, jnp.log(jnp.sum(weights, axis=-1))


def sample(methods: tuple, logits, uniforms):
    """Draw next tokens: logits (B, V), uniforms (B,) in [0, 1) -> (tokens, sampling logprobs, raw logprobs).

    Raw logprobs are log_softmax(logits) at temperature 1 with no truncation (the policy's own probability,
    what importance ratios need); sampling logprobs are under the distribution the token was drawn from
    (0 for greedy). All outputs (B,). Only the sampled tokens' log-probs are formed: the (B, V) log-softmax
    is never materialised, and with no methods (temperature 1, no truncation) one exp pass serves both.
    """
    logits = logits.astype(jnp.float32)
    top, weights, log_total = _softmax_parts(logits)

    def at(x, tokens):
        return jnp.take_along_axis(x, tokens[:, None], axis=-1)[:, 0]

    if any(isinstance(m, Greedy) for m in methods):
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        sampling_lp = jnp.zeros(tokens.shape, jnp.float32)
    else:
        if methods:
            adjusted = apply_methods(methods, logits)
            a_top, a_weights, a_log_total = _softmax_parts(adjusted)
        else:
            adjusted, a_top, a_weights, a_log_total = logits, top, weights, log_total
        tokens = categorical(a_weights, uniforms)
        sampling_lp = at(adjusted, tokens) - a_top - a_log_total
    raw_lp = at(logits, tokens) - top - log_total
    return tokens, sampling_lp, raw_lp
