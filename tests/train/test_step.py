"""Gradient accumulation equals the large-batch step; packing leaves per-example losses unchanged."""
import jax
import jax.numpy as jnp
import numpy as np

from rlpt.config import OptimConfig
from rlpt.models import ModelConfig, builtin_tokenizer, init_model
from rlpt.rollout.format import completion_ids, prompt_ids
from rlpt.train.losses import per_segment_nll, sft_loss
from rlpt.train.optim import make_optimizer
from rlpt.train.packing import first_fit_decreasing, pack_rows, shift_example
from rlpt.train.state import create_state
from rlpt.train.step import build_train_step

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)


def _examples(n, seed=0):
    tok = builtin_tokenizer()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = rng.integers(0, 1000, 2)
        p, c = prompt_ids(tok, f"{a}+{b}="), completion_ids(tok, str(a + b) * int(rng.integers(1, 4)))
        out.append(shift_example(p + c, [0] * len(p) + [1] * len(c)))
    return out


def _unpacked(examples, T):
    return pack_rows(examples, [[i] for i in range(len(examples))], T)


def test_accumulation_equals_large_batch():
    batch = _unpacked(_examples(8), 40)
    params = init_model(CFG, 0).params
    # SGD with lr 1: the parameter change is exactly -grad, so the step compares the gradients themselves.
    opt = make_optimizer(OptimConfig(name="sgd", lr=1.0, warmup_steps=0, schedule="constant", clip_norm=0), 10)
    results = []
    for micro in (1, 4):
        step = build_train_step(sft_loss(CFG), opt, donate=False)
        state = create_state(params, opt, 0)
        mb = {k: v.reshape(micro, 8 // micro, *v.shape[1:]) for k, v in batch.items()}
        state, metrics = step(state, mb)
        results.append((float(metrics["loss"]), float(metrics["grad_norm"]), state.params))
    (l1, g1, p1), (l4, g4, p4) = results
    np.testing.assert_allclose(l4, l1, rtol=1e-5)
    np.testing.assert_allclose(g4, g1, rtol=1e-5)
    for p0, a, b in zip(jax.tree.leaves(params), jax.tree.leaves(p1), jax.tree.leaves(p4)):
        d1, d4 = np.asarray(a) - np.asarray(p0), np.asarray(b) - np.asarray(p0)
        np.testing.assert_allclose(d4, d1, rtol=1e-5, atol=1e-5 * np.abs(d1).max())


def test_packed_equals_unpacked_per_example():
    examples = _examples(7, seed=1)
    params = init_model(CFG, 1).params
    rows, unplaced = first_fit_decreasing([len(e[0]) for e in examples], 3, 64)
    assert not unplaced
    packed = pack_rows(examples, rows, 64)
    seg = np.asarray(per_segment_nll(params, CFG, jax.tree.map(jnp.asarray, packed), 8))
    alone = np.asarray(per_segment_nll(params, CFG, jax.tree.map(jnp.asarray, _unpacked(examples, 40)), 8))[:, 1]
    got = {}
    for r, items in enumerate(rows):
        for s, i in enumerate(items, start=1):
            got[i] = seg[r, s]
    np.testing.assert_allclose([got[i] for i in range(7)], alone, rtol=1e-5)


def test_ffd_places_longest_first_and_reports_unplaced():
    rows, unplaced = first_fit_decreasing([5, 9, 3, 7, 2], 2, 10)
    assert rows == [[1], [3, 0]] or rows[0][0] == 1
    assert sorted(i for r in rows for i in r) + unplaced == sorted(range(5)) or set(unplaced) | {
        i for r in rows for i in r} == set(range(5))
    assert all(sum([5, 9, 3, 7, 2][i] for i in r) <= 10 for r in rows)
