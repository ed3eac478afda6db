"""Sampling under a device mesh (rows over data, heads over tensor) and resharding weights between meshes."""
import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from rlpt.parallel.rules import recording_unsplit
from rlpt.sampling import generate, shard_params
from rlpt.sampling.generate import prefill_copies
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


def test_prompts_that_do_not_divide_over_the_mesh_are_prefilled_once_per_sample():
    """2 prompts x 4 samples on 8 devices: the 8 rows split, the 2 prompts would not (every device would prefill
    both and hold their whole cache), so each row is prefilled from its own copy; the samples are the same."""
    model = tiny_model()
    mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
    assert (prefill_copies(2, 4, mesh), prefill_copies(8, 4, mesh), prefill_copies(3, 2, mesh)) == (4, 1, 1)
    assert prefill_copies(2, 4, None) == 1
    prompts = PROMPTS[:2]
    plain = generate(model, prompts, 6, n=4, temperature=1.0, seed=3)
    params = shard_params(model.params, model.config, mesh)
    jax.clear_caches()  # the unsplit records are made while tracing
    with recording_unsplit() as unsplit:
        sharded = generate(model.with_params(params), prompts, 6, n=4, temperature=1.0, seed=3, mesh=mesh)
    np.testing.assert_array_equal(sharded.tokens, plain.tokens)
    np.testing.assert_allclose(sharded.logprobs, plain.logprobs, atol=1e-5)
    assert [r["shape"] for r in unsplit if any(u["logical"] == "batch" for u in r["unsplit"])] == []
    assert sharded.state.cache["k"][0].sharding.spec[0] == "fsdp"


def test_self_speculation_on_a_mesh_matches_single_device():
    """The self-draft's shared cache and shortened verification under a (data, tensor) mesh: the same tokens as on
    one device, the target's cache sharded over the rows."""
    from rlpt.sampling.speculative import speculative_generate

    model = tiny_model()
    sampler = jax.make_mesh((2, 4), ("data", "tensor"), axis_types=(AxisType.Auto,) * 2)
    params = shard_params(model.params, model.config, sampler)
    prompts = PROMPTS + [[1, 2]] * 3
    plain = speculative_generate(model, 1, prompts, 8, k=3, temperature=0.0)
    sharded = speculative_generate(model.with_params(params), 1, prompts, 8, k=3, temperature=0.0, mesh=sampler)
    np.testing.assert_array_equal(sharded.tokens, plain.tokens)
    np.testing.assert_array_equal(sharded.tokens, generate(model, prompts, 8, temperature=0.0).tokens)
    assert (sharded.proposed, sharded.accepted) == (plain.proposed, plain.accepted)
