"""`SamplingState`: the fixed-size buffers the decode loop carries, and the finish-reason codes."""
import flax.struct
import jax
import jax.numpy as jnp

RUNNING, STOP, LENGTH, CACHE_FULL = 0, 1, 2, 3
FINISH_REASONS = ("running", "stop", "length", "cache_full")


@flax.struct.dataclass
class SamplingState:
    """Everything one decode step reads and writes; B rows, N = width of the new-token buffers.

    `last_token` is the most recently sampled token of each row: it is not yet in the cache (the next
    step writes it at slot `cache["index"]` and position `positions`).
    """

    tokens: jax.Array  # (B, N) int32 new tokens; pad_id after each row's length
    logprobs: jax.Array  # (B, N) f32 log-prob under the sampling distribution actually used
    raw_logprobs: jax.Array  # (B, N) f32 log-prob under the raw policy (temperature 1, no truncation)
    cache: dict  # rlpt.models.init_cache layout (per-layer (B, KV, S, Dh) buffers); the last slot is scratch
    last_token: jax.Array  # (B,) int32
    positions: jax.Array  # (B,) int32 position of last_token
    lengths: jax.Array  # (B,) int32 tokens generated so far
    max_new: jax.Array  # (B,) int32 per-row limit
    done: jax.Array  # (B,) bool
    finish: jax.Array  # (B,) int32 one of RUNNING, STOP, LENGTH, CACHE_FULL
    rng: jax.Array  # (2,) uint32 Threefry key data shared by all rows (a new one per continuation turn)
    row_ids: jax.Array  # (B,) uint32 global row id; token t of row r uses the uniform hash(rng, (r, t))
    step: jax.Array  # () int32 decode steps run (all rows together)

    @property
    def capacity(self) -> int:
        """Usable cache slots per row (one slot is kept as scratch for rows that are already done)."""
        return self.cache["positions"].shape[1] - 1


def empty_state(cache, rows: int, width: int, max_new, rng, row_ids, pad_id: int = 0) -> SamplingState:
    """A state with no tokens yet: B = rows rows, buffers of width N = width."""
    B = rows
    return SamplingState(
        tokens=jnp.full((B, width), pad_id, jnp.int32),
        logprobs=jnp.zeros((B, width), jnp.float32),
        raw_logprobs=jnp.zeros((B, width), jnp.float32),
        cache=cache,
        last_token=jnp.zeros((B,), jnp.int32),
        positions=jnp.zeros((B,), jnp.int32),
        lengths=jnp.zeros((B,), jnp.int32),
        max_new=max_new.astype(jnp.int32),
        done=jnp.zeros((B,), bool),
        finish=jnp.full((B,), RUNNING, jnp.int32),
        rng=rng,
        row_ids=row_ids.astype(jnp.uint32),
        step=jnp.zeros((), jnp.int32),
    )
