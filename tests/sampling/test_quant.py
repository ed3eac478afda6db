"""Quantized sampling: int8 / int4 weight round trips, the quantized decode step against a dequantized-weights
forward, generation close to full precision, the int8 KV cache, named errors, and the rollout setting."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import qwix

from rlpt.models import Model
from rlpt.models.ops.xla_cpu import cache_load as _cache_load
from rlpt.models.ops.xla_cpu import cache_write as _cache_write
from rlpt.models.ops.xla_cpu_decode import decode_layout
from rlpt.models.quant import QUANTIZED, quantize_matrix
from rlpt.models.transformer import hidden_states, init_cache, logits_from_hidden
from rlpt.sampling import continue_generation, engine, generate
from tests.sampling.helpers import PROMPTS, TINY, log_softmax, teacher_forced, tiny_model


def _dequantized_np(qm) -> np.ndarray:
    """A QuantizedMatrix's weight computed in numpy from its stored values and scales (float64)."""
    q = np.asarray(qm.q.qvalue).astype(np.float64)
    s = np.asarray(qm.q.scale, np.float64)
    s = np.repeat(s, q.shape[-2] // s.shape[-2], axis=-2)  # a group's scale for each of its input rows
    return (q * s).reshape(q.shape[:-2] + qm.shape)


def _reference_model(model, quant, group=16) -> Model:
    """The full-precision model with the sampler's quantized layer weights dequantized (in numpy)."""
    qparams = engine.sampler_params(model, quant, group)
    layers = dict(model.params["layers"])
    layers.update({k: jnp.asarray(_dequantized_np(qparams["layers"][k]), jnp.float32) for k in QUANTIZED})
    return Model(model.config, dict(model.params, layers=layers))


@pytest.mark.parametrize("n_in, shape", [(1, (3, 48, 5, 8)), (2, (2, 4, 8, 24))])
def test_int8_per_channel_round_trip_within_half_a_step(n_in, shape):
    w = jax.random.normal(jax.random.key(0), shape) * jnp.linspace(0.01, 2.0, shape[-1])  # scales vary per channel
    qm = quantize_matrix(w, n_in, "int8", 128)
    L, n, m = shape[0], int(np.prod(shape[1:1 + n_in])), int(np.prod(shape[1 + n_in:]))
    assert qm.q.qvalue.dtype == jnp.int8 and qm.q.scale.shape == (L, 1, m) and qm.shape == shape[1:]
    flat = np.asarray(w, np.float64).reshape(L, n, m)
    scale = np.asarray(qm.q.scale, np.float64)
    np.testing.assert_allclose(scale, np.abs(flat).max(1, keepdims=True) / 127.5, rtol=1e-6)  # qwix: qmax + 0.5
    err = np.abs(_dequantized_np(qm).reshape(L, n, m) - flat)
    assert (err <= scale * (0.5 + 1e-4)).all()  # half a step, plus the f32 rounding of x / scale (up to 128)
    np.testing.assert_allclose(np.asarray(qm.dequantized(jnp.float32)), _dequantized_np(qm), rtol=1e-6, atol=0)


def test_int4_grouped_round_trip_within_half_a_step():
    L, n, m, group = 2, 64, 24, 16
    rows = jnp.where(jnp.arange(n) < group, 0.01, 1.0)[:, None]  # the first group's weights are 100x smaller
    w = jax.random.normal(jax.random.key(1), (L, n, m)) * rows
    qm = quantize_matrix(w, 1, "int4", group)
    assert qm.q.qvalue.dtype == jnp.int4 and qm.q.scale.shape == (L, n // group, m)
    flat = np.asarray(w, np.float64)
    absmax = np.abs(flat.reshape(L, n // group, group, m)).max(2)
    np.testing.assert_allclose(np.asarray(qm.q.scale, np.float64), absmax / 7.5, rtol=1e-6)
    scale = np.repeat(absmax / 7.5, group, axis=1)
    err = np.abs(_dequantized_np(qm) - flat)
    assert (err <= scale * (0.5 + 1e-4)).all()
    # per-group scales keep the small group precise (a per-channel int4 scale would be set by the large ones)
    assert err[:, :group].max() < 0.1 * err[:, group:].max()


@jax.jit
def _prefill(params, tokens, segments):
    return hidden_states(params, TINY, tokens, None, segments, cache=init_cache(TINY, 2, 8))[1]


@jax.jit
def _forward_step(params, tokens, positions, segments, cache):
    hidden, cache = hidden_states(params, TINY, tokens[:, None], positions[:, None], segments[:, None], cache=cache)
    return logits_from_hidden(params, TINY, hidden)[:, 0], cache


_step_logits = jax.jit(engine._step_logits, static_argnames=("cfg", "window"))


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_quantized_decode_step_equals_the_dequantized_forward(quant):
    """One decode step on the quantized weights (the CPU decode layout, which contracts int8 / int4 values with
    their scales, and the plain-params path of other backends) gives the logits and cache writes of the model's
    own forward with the dequantized weights, up to f32 rounding."""
    model = tiny_model()
    ref = _reference_model(model, quant)
    qparams = engine.sampler_params(model, quant, 16)
    segments = (jnp.arange(5)[None] < jnp.asarray([5, 3])[:, None]).astype(jnp.int32)
    cache = _prefill(ref.params, jnp.asarray([[1, 2, 3, 4, 5], [9, 8, 7, 0, 0]]), segments)
    cache = dict(cache, index=jnp.asarray([5, 3], jnp.int32))
    tokens, positions, live = jnp.asarray([6, 11]), jnp.asarray([5, 3]), jnp.ones(2, jnp.int32)
    want, want_cache = _forward_step(ref.params, tokens, positions, live, cache)
    for weights in (decode_layout(qparams, TINY), qparams):
        got, got_cache = _step_logits(weights, cfg=TINY, tokens=tokens, positions=positions, segment_ids=live,
                                      cache=cache, window=None)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)
        for a, b in zip(jax.tree.leaves(got_cache), jax.tree.leaves(want_cache), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def _kl_and_check_logprobs(model, ref, out, prompts, n):
    """Mean KL(full || quantized sampler) of the next-token distributions at every sampled position, after
    checking that the sampler's log-probs are the quantized model's (teacher-forced through `ref`)."""
    kls = []
    for r in range(out.tokens.shape[0]):
        k = int(out.lengths[r])
        toks = out.tokens[r, :k]
        lq = log_softmax(teacher_forced(ref, prompts[r // n], toks))
        np.testing.assert_allclose(out.logprobs[r, :k], lq[np.arange(k), toks], atol=1e-4, rtol=0,
                                   err_msg=f"row {r}")
        lp = log_softmax(teacher_forced(model, prompts[r // n], toks))
        kls.append((np.exp(lp) * (lp - lq)).sum(-1))
    return float(np.mean(np.concatenate(kls)))


# The tiny model's weights are large (initializer_range 0.3: peaked logits) and its matrices have 32-64 inputs, so
# int4 in groups of 16 moves it much more than int8 does (measured KL ~1e-3 for int8, ~0.27 for int4).
@pytest.mark.parametrize("quant, kl_max", [("int8", 5e-3), ("int4", 0.5)])
def test_generate_quantized_samples_the_quantized_model_close_to_full(quant, kl_max):
    model = tiny_model()
    out = generate(model, PROMPTS, 8, n=2, temperature=1.0, seed=3, quant=quant, quant_group=16)
    kl = _kl_and_check_logprobs(model, _reference_model(model, quant), out, PROMPTS, 2)
    assert 0 < kl < kl_max, kl


def test_plain_params_decode_path_samples_what_the_cpu_layout_samples():
    """Other backends decode on the quantized params (dequantized in the loop) instead of the CPU layout: the same
    greedy tokens and log-probs."""
    from rlpt.models.ops import compiling_for

    model = tiny_model()
    cpu = generate(model, PROMPTS, 6, temperature=0.0, quant="int4", quant_group=16)
    with compiling_for("gpu"):
        assert engine.decode_weights(model, quant="int4", quant_group=16) is engine.sampler_params(model, "int4", 16)
        other = generate(model, PROMPTS, 6, temperature=0.0, quant="int4", quant_group=16)
    np.testing.assert_array_equal(other.tokens, cpu.tokens)
    np.testing.assert_allclose(other.logprobs, cpu.logprobs, atol=1e-4, rtol=0)


def test_int8_kv_cache_round_trip():
    cache = init_cache(TINY, 2, 6, "int8")
    buf = cache["k"][0]
    assert buf.qvalue.dtype == jnp.int8 and buf.qvalue.shape == (2, 2, 6, 8)
    assert buf.scale.dtype == jnp.float32 and buf.scale.shape == (2, 2, 6, 1)
    new = jax.random.normal(jax.random.key(2), (2, 2, 2, 8)) * jnp.asarray([0.01, 30.0])[None, :, None, None]
    out = np.asarray(_cache_load(_cache_write(buf, new, jnp.asarray([1, 3])), jnp.float32))
    new = np.asarray(new)
    for r, at in enumerate((1, 3)):
        got = out[r, :, at:at + 2]
        step = np.abs(new[r]).max(-1, keepdims=True) / 127.5  # one scale per (row, KV head, slot)
        assert (np.abs(got - new[r]) <= step * (0.5 + 1e-4)).all()
        others = np.delete(out[r], [at, at + 1], axis=1)
        assert not others.any()
    assert _cache_load(buf, jnp.bfloat16).dtype == jnp.bfloat16


def test_int8_kv_cache_generation_close_to_full():
    """Greedy decoding with an int8 KV cache: the log-probs it reports are within the cache's rounding of the
    full-precision model's at the same tokens, and the sampled tokens mostly agree."""
    model = tiny_model()
    full = generate(model, PROMPTS, 9, temperature=0.0)
    kv8 = generate(model, PROMPTS, 9, temperature=0.0, kv_cache_dtype="int8")
    assert isinstance(kv8.state.cache["v"][1], qwix.QArray)
    gaps = []
    for r, prompt in enumerate(PROMPTS):
        lp = log_softmax(teacher_forced(model, prompt, kv8.tokens[r]))
        gaps.append(np.abs(kv8.logprobs[r] - lp[np.arange(9), kv8.tokens[r]]))
    assert 0 < np.mean(gaps) < 0.02 and np.max(gaps) < 0.1, (np.mean(gaps), np.max(gaps))
    assert np.mean(full.tokens == kv8.tokens) > 0.8


def test_continuation_keeps_the_quantized_sampler():
    """A second turn with quant=int8 reports the quantized model's log-probs over the whole sequence (prompt, first
    turn, appended tokens); a kv_cache_dtype other than the generation's cache is refused."""
    model = tiny_model()
    prompts = PROMPTS[:2]
    first = generate(model, prompts, 4, temperature=0.0, max_cache_len=32, quant="int8")
    appended = [[5, 6, 7], [8]]
    with pytest.raises(ValueError, match="kv_cache_dtype='int8'"):
        continue_generation(model, first, appended, 4, temperature=0.0, quant="int8", kv_cache_dtype="int8")
    second = continue_generation(model, first, appended, 4, temperature=0.0, quant="int8")
    ref = _reference_model(model, "int8")
    for r, prompt in enumerate(prompts):
        context = prompt + list(first.tokens[r]) + appended[r]
        lq = log_softmax(teacher_forced(ref, context, second.tokens[r]))
        np.testing.assert_allclose(second.logprobs[r], lq[np.arange(4), second.tokens[r]], atol=1e-4, rtol=0)


def test_quant_none_is_the_full_precision_sampler():
    model = tiny_model()
    assert engine.sampler_params(model, "none") is model.params
    plain = generate(model, PROMPTS, 9, temperature=0.0)
    none = generate(model, PROMPTS, 9, temperature=0.0, quant="none", kv_cache_dtype=None)
    np.testing.assert_array_equal(none.tokens, plain.tokens)
    np.testing.assert_array_equal(none.logprobs, plain.logprobs)
    for r, prompt in enumerate(PROMPTS):
        np.testing.assert_array_equal(none.tokens[r], teacher_forced(model, prompt, none.tokens[r]).argmax(-1))


def test_settings_the_model_cannot_take_fail_with_named_errors():
    model = tiny_model()  # hidden 32, 4 heads x 8, intermediate 64
    with pytest.raises(ValueError, match=r"quant_group=24 does not divide"):
        generate(model, PROMPTS, 2, quant="int4", quant_group=24)
    with pytest.raises(ValueError, match="quant='int3'"):
        generate(model, PROMPTS, 2, quant="int3")
    with pytest.raises(ValueError, match="kv_cache_dtype='fp8'"):
        generate(model, PROMPTS, 2, kv_cache_dtype="fp8")
    generate(model, PROMPTS[:1], 1, quant="int8", quant_group=24)  # int8 is per channel: the group is not used


@dataclasses.dataclass(frozen=True)
class _Task:
    domain: str = "fake"
    id: str = "t0"
    prompt: str = "1+2="
    difficulty: int = 0
    meta: dict = dataclasses.field(default_factory=dict)
    env_id: str = "fake"


class _Stop(Exception):
    pass


def test_rollout_settings_compose_and_reach_the_sampler(monkeypatch):
    from rlpt.config import compose
    from rlpt.config.validate import ConfigError
    from rlpt.models import builtin_tokenizer
    from rlpt.rollout import multi_turn, single_turn

    rcfg = compose(["rl.rollout.quant=int4", "rl.rollout.quant_group=32", "rl.rollout.kv_cache_dtype=int8"]).rl.rollout
    assert (rcfg.quant, rcfg.quant_group, rcfg.kv_cache_dtype) == ("int4", 32, "int8")
    with pytest.raises(ConfigError, match="rl.rollout.quant='int3'"):
        compose(["rl.rollout.quant=int3"])

    seen = []

    def spy(*args, **kw):
        seen.append({k: kw.get(k) for k in ("quant", "quant_group", "kv_cache_dtype")})
        raise _Stop

    # the rollouts' own references (module-top imports): patching rlpt.sampling's would not reach them
    monkeypatch.setattr(single_turn, "generate", spy)
    monkeypatch.setattr(multi_turn, "generate", spy)
    tok = builtin_tokenizer()
    with pytest.raises(_Stop):
        single_turn.rollout(None, tok, [_Task()], rcfg, seed=0, version=0)
    with pytest.raises(_Stop):
        multi_turn.rollout(None, tok, [_Task()], dataclasses.replace(rcfg, group_size=1), seed=0, version=0,
                           max_turns=2, make_env=lambda task: _Env())
    monkeypatch.setattr(single_turn, "generate_refill", spy)
    with pytest.raises(_Stop):
        single_turn.rollout(None, tok, [_Task()], dataclasses.replace(rcfg, refill=True), seed=0, version=0)
    assert seen == [{"quant": "int4", "quant_group": 32, "kv_cache_dtype": "int8"}] * 3


def test_refill_samples_what_generate_samples_quantized():
    from rlpt.sampling import generate_refill
    model = tiny_model()
    plain = generate(model, PROMPTS, 12, quant="int8", seed=3, keep_state=False)
    refill = generate_refill(model, PROMPTS, 12, slots=2, quant="int8", seed=3)
    np.testing.assert_array_equal(refill.tokens, plain.tokens)
    np.testing.assert_allclose(refill.logprobs, plain.logprobs, atol=1e-5)


class _Env:
    def reset(self, seed=None, options=None):
        return "1+2=", {}

    def close(self):
        pass


def test_int8_cache_shards_values_and_scales_on_a_mesh():
    """`constrain_cache` places an int8 cache's values and scales like a plain cache: rows over data."""
    from jax.sharding import AxisType

    from rlpt.sampling import constrain_cache

    mesh = jax.make_mesh((2, 4), ("data", "tensor"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        cache = jax.jit(lambda: constrain_cache(init_cache(TINY, 8, 6, "int8")))()
    for buf in cache["k"] + cache["v"]:
        assert buf.qvalue.sharding.spec[0] == "data" and buf.scale.sharding.spec[0] == "data"


@pytest.mark.slow  # ~5-8 s here: compiling for 8 devices, like tests/sampling/test_mesh.py
def test_quantized_sampler_on_a_mesh_matches_single_device():
    """int8 weights and an int8 cache under a (data, tensor) mesh sample what one device samples, and the cache's
    values and scales shard their rows over data. The log-probs agree to an int8 step, not to f32 rounding: the
    sharded products round differently in the last bit, which flips the rounding of a few cached K/V entries."""
    from jax.sharding import AxisType

    from rlpt.sampling import shard_params

    model = tiny_model()
    mesh = jax.make_mesh((2, 4), ("data", "tensor"), axis_types=(AxisType.Auto,) * 2)
    sharded = model.with_params(shard_params(model.params, model.config, mesh))
    prompts = PROMPTS + [[1, 2]] * 3  # 8 rows: divisible by the data axis
    kw = dict(temperature=0.0, quant="int8", kv_cache_dtype="int8")
    plain = generate(model, prompts, 4, **kw)
    out = generate(sharded, prompts, 4, mesh=mesh, **kw)
    np.testing.assert_array_equal(out.tokens, plain.tokens)
    np.testing.assert_allclose(out.logprobs, plain.logprobs, atol=0.02, rtol=0)
    buf = out.state.cache["k"][0]
    assert buf.qvalue.sharding.spec[0] == "data" and buf.scale.sharding.spec[0] == "data"
