"""KV-cache sampling for rollouts: prefill, a jitted decode loop, sampling methods, continuation, slot refill."""
from rlpt.sampling.engine import append, decode, decode_step, emit, insert_rows, prefill
from rlpt.sampling.generate import Generation, bucket, continue_generation, generate
from rlpt.sampling.methods import (
    Greedy,
    MinP,
    SamplingParams,
    Temperature,
    TopK,
    TopP,
    apply_methods,
    categorical,
    make_methods,
    row_uniforms,
    sample,
)
from rlpt.sampling.prefix import PrefixCache, common_prefix
from rlpt.sampling.refill import generate_refill
from rlpt.sampling.sharding import constrain_cache, shard_params
from rlpt.sampling.state import FINISH_REASONS, SamplingState

__all__ = [
    "FINISH_REASONS", "Generation", "Greedy", "MinP", "PrefixCache", "SamplingParams", "SamplingState", "Temperature",
    "TopK", "TopP",
    "append", "apply_methods", "bucket", "categorical", "common_prefix", "constrain_cache", "continue_generation",
    "decode", "decode_step", "emit", "generate", "generate_refill", "insert_rows", "make_methods", "prefill",
    "row_uniforms", "sample", "shard_params",
]
