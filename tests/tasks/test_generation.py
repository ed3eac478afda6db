"""Bulk generation: pooled slow cells, the pool store, cell-affine worker scheduling, bounded rg generators."""

import dataclasses
import pickle
import time

import pytest

from rlpt.tasks import EVAL_SEED_START, get_domain, list_domains
from rlpt.tasks.generate import generate_many, mixture_specs, pregenerate
from rlpt.tasks.pool import POOLED, PoolStore, is_pooled, pool_seeds, pooled_cells

CELL = ("rg/ab", 4)  # a pooled cell, among the cheaper ones


def test_pooled_cells_are_registered_tiers():
    for name, tier in pooled_cells():
        assert tier in get_domain(name).tiers, (name, tier)
    assert is_pooled(*CELL) and not is_pooled("arith/add", 1)
    assert set(POOLED) <= set(list_domains())


def test_pool_seeds_are_distinct_training_seeds_and_extend():
    seeds = pool_seeds(*CELL, 50)
    assert len(set(seeds)) == 50 and all(0 <= s < EVAL_SEED_START for s in seeds)
    assert pool_seeds(*CELL, 80)[:50] == seeds
    assert pool_seeds("rg/ab", 3, 50) != seeds


def test_mixture_pools_change_seeds_not_cells():
    names = ["arith/add", "rg/sudoku", "rg/letter_counting"]
    plain, pooled = mixture_specs(names, 60, seed=4), mixture_specs(names, 60, seed=4, pool_size=3)
    assert [s[:2] for s in plain] == [s[:2] for s in pooled]
    for (name, tier, seed), (_, _, plain_seed) in zip(pooled, plain):
        if is_pooled(name, tier):
            assert seed in pool_seeds(name, tier, 3)
        else:
            assert seed == plain_seed
    assert any(is_pooled(n, t) for n, t, _ in pooled)


def test_store_serves_exactly_what_generate_returns(tmp_path):
    store = PoolStore(tmp_path)
    assert pregenerate(store, 3, workers=0, cells=[CELL]) == 3
    assert pregenerate(store, 3, workers=0, cells=[CELL]) == 0  # cached
    domain = get_domain(CELL[0])
    saved = store.load(*CELL)
    assert sorted(saved) == sorted(pool_seeds(*CELL, 3))
    assert all(task == domain.generate(seed, CELL[1]) for seed, task in saved.items())

    # A hit is read from the store, not regenerated: plant a marked copy under the same id.
    seed = pool_seeds(*CELL, 3)[0]
    marked = {seed: dataclasses.replace(saved[seed], prompt="from the store")}
    store.save(*CELL, marked)
    specs = [("arith/add", 2, 5), (CELL[0], CELL[1], seed), ("arith/add", 1, 7)]
    tasks = generate_many(specs, workers=0, store=store)
    assert tasks[1].prompt == "from the store"
    assert [t.id for t in tasks] == ["arith/add:t2:s5", f"rg/ab:t4:s{seed}", "arith/add:t1:s7"]


def test_store_ignores_other_fingerprints_and_rejects_mislabelled_files(tmp_path):
    store = PoolStore(tmp_path)
    path = store.path(*CELL)
    path.parent.mkdir(parents=True)
    stale = path.with_name(f"t{CELL[1]}-0000000000000000.pkl")  # what an edited generator wrote
    task = get_domain("arith/add").generate(1, 1)
    stale.write_bytes(pickle.dumps({1: task}))
    assert store.load(*CELL) == {}
    path.write_bytes(pickle.dumps({1: task}))
    with pytest.raises(ValueError, match="arith/add:t1:s1"):
        store.load(*CELL)
    path.unlink()
    seed = pool_seeds(*CELL, 1)[0]
    store.save(*CELL, {seed: get_domain(CELL[0]).generate(seed, CELL[1])})
    assert not stale.exists() and list(store.load(*CELL)) == [seed]  # saving prunes other fingerprints


def test_worker_pool_keeps_spec_order():
    specs = mixture_specs(["arith/add", "str/reverse", "rg/letter_counting", "logic/grid"], 40, seed=9)
    tasks = generate_many(specs, workers=2, chunk=4)
    assert [t.id for t in tasks] == [f"{d}:t{t}:s{s}" for d, t, s in specs]
    assert tasks == [get_domain(d).generate(s, t) for d, t, s in specs]


def test_bulk_generation_from_a_script_without_main_guard(tmp_path):
    """generate_many's workers never re-run the caller's __main__ (a spawn/forkserver pool did, and failed)."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from rlpt.tasks.generate import generate_many, mixture_specs\n"
        "specs = mixture_specs(['arith/add', 'rg/letter_counting'], 12, seed=1)\n"
        "print('TASKS', len(generate_many(specs, workers=2, chunk=3)))\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("TASKS") == 1 and "TASKS 12" in proc.stdout, proc.stdout


def test_bounded_number_sequence_matches_the_library():
    from reasoning_gym.factory import DATASETS

    from rlpt.tasks.rgym import _dataset

    ours = _dataset("number_sequence", 0)
    library = DATASETS["number_sequence"][0](config=ours.config)
    assert type(ours) is not type(library)
    for idx in range(0, 20_000, 97):
        assert ours[idx] == library[idx], idx


def test_bounded_number_sequence_is_fast_at_the_top_level():
    # The library's class spent up to 54 s on one item of this level (runaway squarings).
    from rlpt.tasks.rgym import _dataset

    dataset = _dataset("number_sequence", 3)
    t0 = time.perf_counter()
    items = [dataset[idx] for idx in range(300)]
    assert time.perf_counter() - t0 < 20
    assert all(abs(x) <= 1000 for item in items for x in item["metadata"]["sequence"])


def test_number_sequence_tasks_never_settle():
    domain = get_domain("rg/number_sequence")
    for tier in domain.tiers:
        for seed in range(15):
            seq = domain.generate(seed, tier).meta["rg_entry"]["metadata"]["sequence"]
            assert len(set(seq[-3:])) > 1 and seq != [2 * i for i in range(len(seq))], (tier, seed, seq)
