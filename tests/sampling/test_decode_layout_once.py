"""The sampler's CPU decode layout is built once per weight version; other backends decode on the params as they are
(no layout copy) and sample the same tokens."""
import dataclasses

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models import Model, ModelConfig, init_model
from rlpt.models.ops import compiling_for
from rlpt.models.ops.xla_cpu_decode import DecodeLayout, decode_layout
from rlpt.sampling import continue_generation, engine, generate, generate_refill
from rlpt.sampling.methods import make_methods
from tests.sampling.helpers import PROMPTS, tiny_model


@pytest.fixture
def layouts(monkeypatch):
    """Every decode layout built, as (params, cfg) pairs."""
    built = []

    def spy(params, cfg):
        built.append((params, cfg))
        return decode_layout(params, cfg)

    monkeypatch.setattr(engine, "decode_layout", spy)
    return built


def test_the_layout_is_built_once_per_weight_version(layouts):
    model = Model(tiny_model().config, tiny_model().params)
    first = generate(model, PROMPTS, 40, temperature=0.0, decode_phase=2)  # several decode calls
    generate(model, PROMPTS, 12, n=2, temperature=1.0, seed=3)
    continue_generation(model, first, [[5]] * len(PROMPTS), 4, temperature=0.0)
    generate_refill(model, PROMPTS, 6, slots=2, temperature=0.0)
    assert len(layouts) == 1 and layouts[0][0] is model.params

    newer = model.with_params(jax.tree.map(lambda x: x * 1.01, model.params))  # what the RL loop publishes
    generate(newer, PROMPTS, 4, temperature=0.0)
    assert len(layouts) == 2 and layouts[1][0] is newer.params


def test_replacing_a_weight_rebuilds_the_layout(layouts):
    """Invalidation is by the identity of every leaf: a replaced leaf is a new weight version."""
    base = tiny_model()
    model = Model(base.config, dict(base.params))
    generate(model, PROMPTS, 6, temperature=0.0)
    scaled = base.params["layers"]["w_down"] * -2.0
    model.params["layers"] = dict(model.params["layers"], w_down=scaled)
    got = generate(model, PROMPTS, 6, temperature=0.0)
    want = generate(Model(base.config, model.params), PROMPTS, 6, temperature=0.0)
    assert len(layouts) == 3
    np.testing.assert_array_equal(got.tokens, want.tokens)
    plain = generate(base, PROMPTS, 6, temperature=0.0)
    assert not np.array_equal(got.tokens, plain.tokens)  # the new weights are the ones sampled


def test_decode_weights_follow_the_compile_target():
    model = Model(tiny_model().config, tiny_model().params)
    assert isinstance(engine.decode_weights(model), DecodeLayout)
    for platform in ("gpu", "tpu"):
        with compiling_for(platform):
            assert engine.decode_weights(model) is model.params
    # f32 weights sampled at bf16 compute: matrices cast once per weight version; norms and biases stay f32
    wide = Model(dataclasses.replace(WIDE, compute_dtype="bfloat16"), init_model(WIDE, 0).params)
    with compiling_for("gpu"):
        cast = engine.decode_weights(wide)
        assert engine.decode_weights(wide) is cast
    assert cast["embed"].dtype == cast["layers"]["wo"].dtype == cast["lm_head"].dtype == jnp.bfloat16
    assert cast["layers"]["bq"].dtype == cast["layers"]["attn_norm"].dtype == jnp.float32
    np.testing.assert_array_equal(cast["layers"]["w_up"], wide.params["layers"]["w_up"].astype(jnp.bfloat16))


@pytest.mark.parametrize("kwargs", [dict(temperature=0.0), dict(temperature=1.0, n=2, seed=4),
                                    dict(temperature=0.7, top_k=5, seed=1, decode_phase=2)])
def test_the_plain_cached_forward_samples_what_the_cpu_layout_samples(kwargs):
    """The non-CPU decode (traced here for a GPU, run on this CPU) against the CPU layout, tiny f32 model."""
    model = tiny_model()
    cpu = generate(model, PROMPTS, 10, **kwargs)
    with compiling_for("gpu"):
        other = generate(model, PROMPTS, 10, **kwargs)
        cont = continue_generation(model, other, [[7, 8]] * len(other.lengths), 5, temperature=0.0)
        refill = generate_refill(model, PROMPTS, 10, slots=2, **kwargs)
    np.testing.assert_array_equal(other.tokens, cpu.tokens)
    np.testing.assert_array_equal(other.lengths, cpu.lengths)
    np.testing.assert_allclose(other.logprobs, cpu.logprobs, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(refill.tokens, cpu.tokens)
    want = continue_generation(model, cpu, [[7, 8]] * len(cpu.lengths), 5, temperature=0.0)
    np.testing.assert_array_equal(cont.tokens, want.tokens)
    np.testing.assert_allclose(cont.logprobs, want.logprobs, rtol=0, atol=1e-5)


# Weights much larger than any activation, so an op whose result is weight-sized is a weight copy.
WIDE = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2,
                   qkv_bias=True, tie_embeddings=False)
_COPIES = {"transpose", "concatenate", "convert_element_type", "copy", "copy_p"}


def _weight_copies(jaxpr, min_size) -> list[str]:
    """Equations (nested jaxprs included) that transpose, concatenate, convert or copy a weight-sized array."""
    found = [f"{eqn.primitive.name} -> {[v.aval.str_short() for v in eqn.outvars]}" for eqn in jaxpr.eqns
             if eqn.primitive.name in _COPIES and any(np.prod(v.aval.shape) >= min_size for v in eqn.outvars)]
    for sub in jax.extend.core.subjaxprs(jaxpr):
        found += _weight_copies(sub, min_size)
    return found


def _decode_args(model, B=2, cache_len=16):
    methods = make_methods(1.0, None, None, None)
    state = engine.prefill(model.params, np.ones((B, 4), np.int32), np.full(B, 3, np.int32), np.full(B, 8, np.int32),
                           np.zeros(2, np.uint32), np.arange(B, dtype=np.uint32), cfg=model.config, methods=methods,
                           stop_ids=(), n=1, cache_len=cache_len, width=8)
    return state, dict(cfg=model.config, methods=methods, stop_ids=())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_makes_no_copy_of_the_weights(dtype):
    """No backend's decode call copies the weights: on CPU it reads the layout made beforehand, elsewhere the params
    (the layer slices it takes fuse into the matmuls: see the TPU compile below)."""
    model = init_model(dataclasses.replace(WIDE, compute_dtype=dtype), seed=0)
    lp = model.params["layers"]
    min_size = min(lp[w][0].size for w in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"))  # wk: 32768
    state, static = _decode_args(model)
    cfg = model.config
    # logits, a cache buffer, top-p's (128, 128) cumsum triangle
    largest_activation = max(2 * cfg.vocab_size, 2 * cfg.num_kv_heads * 16 * cfg.head_dim, 128 * 128)
    assert largest_activation < min_size
    layout_copies = _weight_copies(jax.make_jaxpr(decode_layout, static_argnums=1)(model.params, model.config).jaxpr,
                                   min_size)
    assert len(layout_copies) >= 4  # the check sees the layout's copies
    for platform in ("cpu", "tpu"):
        with compiling_for(platform):
            weights = engine.decode_weights(model)
            jaxpr = jax.make_jaxpr(lambda w, s: engine.decode.__wrapped__(w, s, 2, 8, **static))(weights, state)
            assert _weight_copies(jaxpr.jaxpr, min_size) == [], platform
            compiled = engine.decode.lower(weights, state, 2, 8, **static).compile()  # lowers and compiles here
            assert compiled is not None


@pytest.mark.parametrize("param_dtype", ["bfloat16", "float32"])
def test_tpu_decode_temporaries_are_far_below_the_weights(param_dtype):
    """AOT for a TPU v5e chip (libtpu, the `plan` extra): the decode loop on the params as they are (bf16) or cast
    once per weight version (f32 params, bf16 compute) keeps no weight-sized temporary (2.3 / 2.6 MiB here).
    Measured on this config before: the layout built inside every decode call, 43 MiB (bf16 weights) and 75 MiB
    (f32); f32 weights read uncast, 74 MiB (XLA hoists their conversion out of the loop: a copy per call)."""
    pytest.importorskip("libtpu")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from rlpt.plan import parse_target
    from rlpt.plan.chips import target_devices

    rep = NamedSharding(jax.sharding.Mesh(target_devices(parse_target("tpu:v5e-4"))[:1], ("x",)), P())
    cfg = ModelConfig(vocab_size=16384, hidden_size=1024, intermediate_size=4096, num_layers=4, num_heads=16,
                      num_kv_heads=4, compute_dtype="bfloat16", param_dtype=param_dtype)
    place = lambda tree: jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), tree)  # noqa: E731
    params = jax.eval_shape(lambda: init_model(cfg, 0).params)
    state = jax.eval_shape(lambda p: _decode_args(Model(cfg, p), B=16, cache_len=128)[0], params)
    static = dict(cfg=cfg, methods=make_methods(1.0, None, None, None), stop_ids=())
    scalar = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)
    with compiling_for("tpu"):
        weights = place(jax.eval_shape(lambda p: engine.decode_weights(Model(cfg, p)), params))
        compiled = engine.decode.lower(weights, place(state), scalar, scalar, **static).compile()
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(weights))
    temp = compiled.memory_analysis().temp_size_in_bytes
    print(f"TPU decode ({param_dtype} params): temporaries {temp / 2**20:.2f} MiB, weights "
          f"{weight_bytes / 2**20:.2f} MiB")
    one_matrix = weights["layers"]["w_up"].size // cfg.num_layers * 2  # one layer's MLP matrix in bf16: 8 MiB
    assert temp < 0.05 * weight_bytes and temp < one_matrix
