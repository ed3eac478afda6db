"""rlpt.fleet.scheduler: which chunk runs next (priorities, deadlines, cost, chunk sizes, FIFO, tags)."""
import pytest

from rlpt.fleet.scheduler import CostModel, Item, Scheduler


def _push(s, domain, n, deadline=float("inf"), start=0):
    for k in range(n):
        s.push(Item(f"{domain}/{start + k}", domain, deadline=deadline))


def test_priority_then_deadline_then_expected_cost():
    s = Scheduler(priorities={"code/*": 5}, chunk_s=1e-9)
    _push(s, "arith/add", 2, deadline=1.0)
    _push(s, "code/synth", 2, deadline=9.0)
    assert [i.domain for i in s.pop_chunk()] == ["code/synth"]  # priority beats an earlier deadline
    s = Scheduler(chunk_s=1e-9)
    _push(s, "b", 1, deadline=2.0)
    _push(s, "a", 1, deadline=1.0)
    assert s.pop_chunk()[0].domain == "a"  # earliest deadline first (an older step's items)
    s = Scheduler(chunk_s=1e-9)
    s.cost.observe("slow", 1.0)
    s.cost.observe("fast", 0.001)
    _push(s, "fast", 1)
    _push(s, "slow", 1)
    assert s.pop_chunk()[0].domain == "slow"  # same deadline: the expensive check starts first


def test_chunks_hold_chunk_s_of_expected_work():
    s = Scheduler(chunk_s=0.05, max_chunk=8)
    s.cost.observe("cheap", 0.001)
    s.cost.observe("dear", 0.2)
    _push(s, "cheap", 20)
    _push(s, "dear", 3)
    first = s.pop_chunk()
    assert [i.domain for i in first] == ["dear"]  # 0.2 s > chunk_s: one item
    assert len(s.pop_chunk()) == 1
    assert len(s.pop_chunk()) == 1
    cheap = s.pop_chunk()
    assert len(cheap) == 8 and cheap[0].id == "cheap/0"  # capped by max_chunk, FIFO within the domain
    assert s.depths() == {"cheap": 12} and len(s) == 12


def test_fifo_and_can_run_and_drain_and_push_front():
    s = Scheduler("fifo")
    _push(s, "x", 2)
    _push(s, "y", 1)
    assert s.pop_chunk(lambda d: d == "y")[0].id == "y/0"  # skips what the worker cannot run
    assert [s.pop_chunk()[0].id] == ["x/0"]
    item = Item("x/9", "x")
    s.push_front(item)
    assert s.pop_chunk()[0] is item
    s = Scheduler()
    _push(s, "x", 3)
    _push(s, "y", 1)
    assert [i.id for i in s.drain("x")] == ["x/0", "x/1", "x/2"] and s.depths() == {"y": 1}
    assert s.pop_chunk(lambda d: d == "z") == []


def test_cost_model_and_bad_arguments():
    c = CostModel(prior_s=0.5, alpha=0.5)
    assert c.estimate("new") == 0.5
    c.observe("d", 1.0)
    c.observe("d", 3.0)
    assert c.estimate("d") == pytest.approx(2.0)
    with pytest.raises(ValueError, match="policy"):
        Scheduler("lifo")
    with pytest.raises(ValueError, match="chunk_s"):
        Scheduler(chunk_s=0)


def test_unmeasured_domains_go_one_by_one_and_free_workers_split_a_queue():
    s = Scheduler(chunk_s=1.0, max_chunk=64)
    _push(s, "new", 10)
    assert len(s.pop_chunk()) == 1  # no measurement yet: a chunk of guesses could hold seconds of work
    s.cost.observe("new", 0.001)
    assert len(s.pop_chunk(spread=3)) == 3  # 9 left, 3 free workers: a third each
    assert len(s.pop_chunk()) == 6
