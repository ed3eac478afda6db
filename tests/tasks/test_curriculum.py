"""Curricula: adaptive promotion/demotion under a fake policy, staged unlocking, replay, checkpointing."""

import dataclasses
import json

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


def test_replay_pool_tags_dedupes_and_graduates():
    cfg = CurriculumConfig(name="fixed", replay_fraction=1.0, replay_capacity=8)
    cur = build_curriculum(cfg, DOMAINS)
    state = cur.update(cur.init_state(), [
        ("arith/add", 3, 11, 0.25, "wrong_answer"), ("arith/add", 3, 11, 0.0, "truncated"),  # same task twice
        ("list/sort", 1, 7, 0.0, "verifier_error"),  # infrastructure failure: weight 0, kept out of the pool
        ("list/sort", 2, 8, 0.0, "empty"), ("list/sort", 2, 9, 1.0, "passed")])
    pool = cur.replay_pool(state)
    assert pool == [{"domain": "arith/add", "tier": 3, "seed": 11, "tag": "truncated", "attempts": 1},
                    {"domain": "list/sort", "tier": 2, "seed": 8, "tag": "empty", "attempts": 0}]
    assert set(cur.draw(state, 0, np.random.default_rng(0), 50)) == {("arith/add", 3, 11), ("list/sort", 2, 8)}
    state = cur.update(state, [("list/sort", 2, 8, 1.0, "passed")])  # solved on re-draw: leaves the pool
    assert [e["seed"] for e in cur.replay_pool(state)] == [11] and state["replay_solved"] == 1
    assert state["replay_redrawn"] == 2


def test_replay_weight_favours_fresh_failures_and_tag_weights():
    cfg = CurriculumConfig(name="fixed", replay_fraction=1.0, replay_capacity=8, replay_weight=0.25,
                           replay_tag_weights={"truncated": 2.0, "verifier_error": 0.0})
    cur = build_curriculum(cfg, DOMAINS)
    state = cur.update(cur.init_state(), [("arith/add", 1, 1, 0.0, "wrong_answer"), ("arith/add", 1, 2, 0.0),
                                          ("arith/add", 1, 3, 0.0, "truncated")])
    state = cur.update(state, [("arith/add", 1, 1, 0.0, "wrong_answer")] * 2)  # seed 1: 2 failed re-draws
    draws = cur.draw(state, 0, np.random.default_rng(0), 7000)
    share = {s: np.mean([d[2] == s for d in draws]) for s in (1, 2, 3)}
    # weights 1 * 0.25**2, 1, 2 -> shares 1/49, 16/49, 32/49
    assert share[1] == pytest.approx(1 / 49, abs=0.01) and share[3] == pytest.approx(32 / 49, abs=0.02)
    with pytest.raises(ValueError, match="replay_tag_weights"):
        build_curriculum(dataclasses.replace(cfg, replay_tag_weights={"nope": 1.0}), DOMAINS)
    with pytest.raises(ValueError, match="failure tag"):
        cur.update(state, [("arith/add", 1, 5, 0.0, "bogus")])
    with pytest.raises(KeyError, match="not in this curriculum"):
        cur.update(state, [("str/reverse", 1, 5, 0.0)])


def test_replay_pool_survives_encode_decode_and_old_states():
    from rlpt.tasks.curriculum import decode_state, encode_state

    cfg = CurriculumConfig(name="adaptive", min_samples=4, replay_fraction=0.5, replay_capacity=16)
    cur = build_curriculum(cfg, DOMAINS)
    state, _ = _simulate(cur, cur.init_state(), 6, lambda i: 0.5)
    restored = decode_state(json.loads(json.dumps(encode_state(state))))
    assert cur.replay_pool(restored) == cur.replay_pool(state) and len(cur.replay_pool(state)) > 0
    rng = lambda: np.random.default_rng(3)  # noqa: E731
    assert cur.draw(restored, 6, rng(), 64) == cur.draw(state, 6, rng(), 64)
    old = {k: v for k, v in restored.items() if k not in ("replay_tag", "replay_attempts", "replay_redrawn",
                                                          "replay_solved")}
    assert len(cur.draw(old, 6, rng(), 64)) == 64 and cur.update(old, [("arith/add", 1, 4, 0.0)])["replay_next"] > 0


def test_replay_file_preloads_the_pool(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"domain": "list/sort", "tier": 2, "seed": 77, "tag": "wrong_answer"}) + "\n")
    cur = build_curriculum(CurriculumConfig(replay_fraction=0.5, replay_capacity=4, replay_file=str(path)), DOMAINS)
    state = cur.init_state()
    assert cur.replay_pool(state) == [{"domain": "list/sort", "tier": 2, "seed": 77, "tag": "wrong_answer",
                                       "attempts": 0}]
    assert ("list/sort", 2, 77) in cur.draw(state, 0, np.random.default_rng(0), 16)
