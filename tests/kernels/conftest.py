"""Shared attention test cases; each batches several masking regimes as rows so one compile covers them."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

T, H, D = 64, 4, 16


def _packed(T, lengths):
    """Positions restarting per segment, ids 1..len(lengths); the tail past sum(lengths) is padding."""
    pos, seg = np.zeros(T, np.int32), np.zeros(T, np.int32)
    start = 0
    for i, n in enumerate(lengths):
        pos[start:start + n] = np.arange(n)
        seg[start:start + n] = i + 1
        start += n
    return pos, seg


def _rows(T, regimes):
    """Stack per-row (positions, q segments, kv segments) for the named regimes -> three (B, T) int32."""
    pos, qseg, kseg = [], [], []
    for r in regimes:
        p, s = np.arange(T, dtype=np.int32), np.ones(T, np.int32)
        if r == "packed3":  # three packed segments
            p, s = _packed(T, (T // 4, T // 2, T // 4))
        elif r == "packed3_pad":  # three segments then padding
            p, s = _packed(T, (T // 8, 5 * T // 8, T // 8))
        elif r == "pad_row":  # a row that is all padding
            s = np.zeros(T, np.int32)
        elif r != "plain" and r != "fully_masked":
            raise ValueError(f"unknown row regime {r!r}")
        qs = s.copy()
        if r == "fully_masked":  # query segments 2, 3 have no keys: rows that see nothing, yet not padding
            qs[T // 2:] = 2
            qs[::5] = 3
        pos.append(p), qseg.append(qs), kseg.append(s)
    return np.stack(pos), np.stack(qseg), np.stack(kseg)


# name -> (row regimes, kv heads, options). "masks" holds causal, GQA, packed, padding and fully masked rows.
CASES = {
    "masks": (["plain", "packed3", "packed3_pad", "pad_row", "fully_masked"], 2, {}),
    "noncausal": (["plain", "packed3_pad"], H, {"causal": False}),
    "window": (["plain", "packed3"], 2, {"sliding_window": 12}),
    "window_noncausal": (["plain", "packed3_pad"], H, {"causal": False, "sliding_window": 12}),
    "softcap": (["plain", "packed3"], H, {"logit_softcap": 2.0}),
}
TOL = {"float32": 2e-6, "bfloat16": 2e-2}


def make_case(name, *, dtype=jnp.float32, T=T, seed=0):
    """Case `name` -> dict(q, k, v, qpos, kpos, qseg, kseg, w, opts); q (B, T, H, D), k, v (B, T, KV, D)."""
    regimes, KV, extra = CASES[name]
    opts = dict(causal=True, sliding_window=None, logit_softcap=None) | extra
    pos, qseg, kseg = _rows(T, regimes)
    B = len(regimes)
    kq, kk, kv, kw = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (B, T, H, D), jnp.float32).astype(dtype)
    k = jax.random.normal(kk, (B, T, KV, D), jnp.float32).astype(dtype)
    v = jax.random.normal(kv, (B, T, KV, D), jnp.float32).astype(dtype)
    w = jax.random.normal(kw, (B, T, H, D), jnp.float32)
    return dict(q=q, k=k, v=v, qpos=jnp.asarray(pos), kpos=jnp.asarray(pos), qseg=jnp.asarray(qseg),
                kseg=jnp.asarray(kseg), w=w, opts=opts)


def outputs_and_grads(fn, c):
    """fn(q, k, v, qpos, kpos, qseg, kseg, **opts) -> (out, lse); returns out, lse, (dq, dk, dv) in float32.

    Forward and backward share one jit: compiles are the test-time cost on CPU.
    """
    def run(q, k, v, qpos, kpos, qseg, kseg, w):
        def loss(q, k, v):  # d loss / d out = w: the same cotangent for every implementation
            out, lse = fn(q, k, v, qpos, kpos, qseg, kseg, **c["opts"])
            return jnp.sum(out.astype(jnp.float32) * w), (out, lse)
        (_, (out, lse)), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return out.astype(jnp.float32), lse, tuple(g.astype(jnp.float32) for g in grads)
    return jax.jit(run)(c["q"], c["k"], c["v"], c["qpos"], c["kpos"], c["qseg"], c["kseg"], c["w"])


def max_error(a, b):
    """Max abs error normalised by the reference's scale max(1, max|b|): values above 1 (where bf16 rounds
    to 2^-8 relative) are compared relatively, smaller ones absolutely."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def assert_matches(got, want, tol):
    """Compare (out, lse, grads) triples: same -inf pattern in lse, normalised error <= tol elsewhere."""
    (o1, l1, g1), (o2, l2, g2) = got, want
    np.testing.assert_array_equal(np.isneginf(l1), np.isneginf(l2))
    assert np.all(np.isfinite(o1)) and all(np.all(np.isfinite(g)) for g in g1), "NaN or inf in output/grads"
    fin = np.isfinite(np.asarray(l2))
    errors = {"lse": max_error(np.asarray(l1)[fin], np.asarray(l2)[fin])}
    for name, a, b in zip(["out", "dq", "dk", "dv"], [o1, *g1], [o2, *g2]):
        errors[name] = max_error(a, b)
    bad = {k: e for k, e in errors.items() if not e <= tol}
    assert not bad, f"errors above {tol}: {bad}"
    return errors


_REFERENCE = {}


@pytest.fixture
def reference_result():
    """(case name, dtype name) -> reference outputs and grads, computed once per session."""
    from rlpt.kernels.reference import reference_attention

    def get(name, dtype="float32"):
        key = (name, dtype)
        if key not in _REFERENCE:
            _REFERENCE[key] = outputs_and_grads(reference_attention, make_case(name, dtype=jnp.dtype(dtype)))
        return _REFERENCE[key]
    return get


@pytest.fixture
def case():
    return make_case
