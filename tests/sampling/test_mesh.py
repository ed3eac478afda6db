"""Sampling under a device mesh (rows over data, heads over tensor) and resharding weights between meshes."""
import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from rlpt.sampling import generate, shard_params
from tests.sampling.helpers import PROMPTS, tiny_model


def test_generate_on_a_mesh_matches_single_device_and_shards_the_cache():
    model = tiny_model()
    trainer = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
    sampler = jax.make_mesh((2, 4), ("data", "tensor"), axis_types=(AxisType.Auto,) * 2)
    on_trainer = shard_params(model.params, model.config, trainer)
    params = shard_params(on_trainer, model.config, sampler)
    assert params["layers"]["wq"].sharding.spec == P(None, None, "tensor", None)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, model.params)
    prompts = PROMPTS + [[1, 2]] * 3  # 8 rows: divisible by the data axis
    plain = generate(model, prompts, 6, temperature=0.0)
    sharded = generate(model.with_params(params), prompts, 6, temperature=0.0, mesh=sampler)
    np.testing.assert_array_equal(sharded.tokens, plain.tokens)
    np.testing.assert_allclose(sharded.logprobs, plain.logprobs, atol=1e-5)
    assert sharded.state.cache["k"][0].sharding.spec[0] == "data"
