"""Curricula: adaptive promotion/demotion under a fake policy, staged unlocking, replay, checkpointing."""

import dataclasses

import numpy as np
import pytest

from rlpt.config.tasks import CurriculumConfig, DomainsConfig
from rlpt.tasks.curriculum import build_curriculum

DOMAINS = DomainsConfig(include=["arith/add", "list/sort"], tiers=[1, 2, 3, 4, 5])


def _simulate(cur, state, steps, success_of_index, seed=0, batch=32):
    """A fake policy whose success probability falls with the tier index."""
    rng = np.random.default_rng(seed)
    history = []
    for step in range(steps):
        draws = cur.draw(state, step, rng, batch)
        outcomes = [(d, t, s, float(rng.random() < success_of_index(cur.tiers[0].index(t)))) for d, t, s in draws]
        state = cur.update(state, outcomes)
        history.append(state["tier_index"].copy())
    return state, np.array(history)


def test_adaptive_promotes_into_the_band_and_demotes_from_above():
    cfg = CurriculumConfig(name="adaptive", band_low=0.3, band_high=0.8, ema=0.05, min_samples=16, explore=0.0)
    success = lambda i: [0.95, 0.9, 0.55, 0.1, 0.0][i]  # noqa: E731
    for start, seed in ((0, 0), (4, 1)):
        cur = build_curriculum(dataclasses.replace(cfg, start_tier_index=start), DOMAINS)
        state, hist = _simulate(cur, cur.init_state(), 80, success, seed=seed)
        assert hist[0].tolist() == [start, start] or abs(hist[0] - start).max() <= 1
        late = hist[40:]
        # Tier 3 (index 2, success 0.55) is the one inside the band; the run settles there.
        assert (late == 2).mean() > 0.8, hist[:, 0].tolist()
        assert (state["promotions"] >= 2) if start == 0 else (state["demotions"] >= 2)


def test_state_survives_checkpoint_round_trip(tmp_path):
    cfg = CurriculumConfig(name="adaptive", min_samples=8, replay_fraction=0.25, replay_capacity=16)
    cur = build_curriculum(cfg, DOMAINS)
    state, _ = _simulate(cur, cur.init_state(), 10, lambda i: 0.6)
    np.savez(tmp_path / "cur.npz", **state)
    with np.load(tmp_path / "cur.npz") as z:
        restored = {k: (z[k] if z[k].ndim else z[k].item()) for k in z.files}
    a = cur.draw(state, 10, np.random.default_rng(7), 64)
    b = cur.draw(restored, 10, np.random.default_rng(7), 64)
    assert a == b
    ocp = pytest.importorskip("orbax.checkpoint")
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(tmp_path / "orbax", {k: np.asarray(v) for k, v in state.items()})
    ckpt.wait_until_finished()
    loaded = ckpt.restore(tmp_path / "orbax")
    for key, value in state.items():
        np.testing.assert_array_equal(np.asarray(loaded[key]), np.asarray(value))


def test_staged_unlocks_tiers_by_step():
    cfg = CurriculumConfig(name="staged", stage_steps=[10, 20], window=2)
    cur = build_curriculum(cfg, DOMAINS)
    rng = np.random.default_rng(0)
    state = cur.init_state()
    tiers_at = {step: {t for _, t, _ in cur.draw(state, step, rng, 200)} for step in (0, 10, 25)}
    assert tiers_at == {0: {1}, 10: {1, 2}, 25: {2, 3}}


def test_fixed_mixture_follows_weights():
    cfg = CurriculumConfig(name="fixed", tier_weights=[3.0, 1.0])
    cur = build_curriculum(
        cfg, DomainsConfig(include=["arith/add", "list/sort"], weights={"list/*": 3.0}, tiers=[1, 2])
    )
    draws = cur.draw(cur.init_state(), 0, np.random.default_rng(0), 4000)
    share_sort = np.mean([d == "list/sort" for d, _, _ in draws])
    share_t1 = np.mean([t == 1 for _, t, _ in draws])
    assert abs(share_sort - 0.75) < 0.03 and abs(share_t1 - 0.75) < 0.03
    assert all(0 <= s < (1 << 30) for _, _, s in draws)


def test_replay_redraws_failed_tasks():
    cfg = CurriculumConfig(name="fixed", replay_fraction=0.5, replay_capacity=8)
    cur = build_curriculum(cfg, DOMAINS)
    state = cur.update(cur.init_state(), [("arith/add", 3, 12345, 0.0), ("list/sort", 1, 7, 1.0)])
    draws = cur.draw(state, 0, np.random.default_rng(0), 100)
    replayed = [x for x in draws if x == ("arith/add", 3, 12345)]
    assert 35 <= len(replayed) <= 65 and ("list/sort", 1, 7) not in draws
    tasks = cur.tasks(state, 0, np.random.default_rng(0), 4)
    assert len(tasks) == 4 and all(t.meta["split"] == "train" for t in tasks)


def test_bad_configs_fail_loudly():
    with pytest.raises(KeyError, match="unknown curriculum"):
        build_curriculum(CurriculumConfig(name="nope"), DOMAINS)
    with pytest.raises(ValueError, match="band"):
        build_curriculum(CurriculumConfig(name="adaptive", band_low=0.9, band_high=0.5), DOMAINS)
    with pytest.raises(KeyError, match="matches no registered domain"):
        build_curriculum(CurriculumConfig(), DomainsConfig(include=["nope/*"]))
