"""The fleet (rlpt.fleet): fleet=none and fleet=ray give the same verdicts and the same GRPO run; a worker killed
mid-batch is replaced and every verdict is recorded once; quarantine, routing by tags, back-pressure; multi-turn
environments hosted on Ray actors behave like local ones."""
import threading
import time

import pytest

from rlpt.config import compose
from rlpt.config.schema import FleetConfig, FleetPoolConfig
from rlpt.fleet import LocalFleet, VerifyItem, current, make_fleet, use
from rlpt.tasks.registry import register, unregister
from tests.fleet import domains

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def test_domains():
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(domains)  # the workers get the test's check functions by value
    for d in (domains.SLOW, domains.TAGGED):
        register(d)
    yield
    for d in (domains.SLOW, domains.TAGGED):
        unregister(d.name)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fleet(local_ray, test_domains):
    # half a CPU per worker: the GRPO test's fleet (the other half of the 2 CPUs) can start beside this one
    f = make_fleet(FleetConfig(kind="ray", quarantine_after=5, pools={"default": FleetPoolConfig(cpus=0.5)}))
    yield f
    f.close()


def _items(prefix, n, domain=domains.SLOW, wrong_every=3):
    out = []
    for s in range(n):
        t = domain.generate(s, 1)
        out.append(VerifyItem(f"{prefix}{s}", t, "x" if s % wrong_every == 0 else t.meta["answer"]))
    return out


def _scores(verdicts):
    return [(v.score, v.passed) for v, _ in verdicts]


def test_local_fleet_records_each_id_once_and_quarantines(test_domains):
    f = LocalFleet(quarantine_after=3)
    items = _items("a", 6)
    assert _scores(f.verify(items)) == [(0.0, False), (1.0, True), (1.0, True)] * 2
    with pytest.raises(ValueError, match="appears twice"):
        f.verify([items[0], items[0]])
    task = items[0].task
    out = f.verify([VerifyItem(f"q{k}", task, "boom") for k in range(5)])
    assert [e for _, e in out][:3] == [None] * 3  # Domain.verify turned the crash into a 0 with details
    assert out[3][1].startswith("DomainQuarantined: domain 'fleettest/slow' after 3 consecutive")
    assert f.quarantined and f.alerts[0]["kind"] == "fleet_quarantine"
    assert _scores(f.verify([VerifyItem("after", task, task.meta["answer"])])) == [(0.0, False)]
    assert current() is not f
    with use(f):
        assert current() is f
        with pytest.raises(RuntimeError, match="already in use"):
            with use(LocalFleet()):
                pass


def test_ray_fleet_matches_local_and_survives_a_killed_worker(fleet):
    items = _items("k", 80)
    local = LocalFleet().verify(items)
    fleet.step_stats()
    ticket = fleet.submit(items)
    deadline = time.monotonic() + 60
    while not fleet._verdicts and time.monotonic() < deadline:  # the batch is under way
        time.sleep(0.005)
    victim = max(fleet.workers, key=lambda w: len(w.inflight))
    assert victim.inflight, "the kill must land while the worker holds chunks"
    ray.kill(victim.actor)
    out = fleet.result(ticket, timeout_s=120)
    stats = fleet.step_stats()
    print(stats)
    assert _scores(out) == _scores(local)  # every verdict present, once, in order, equal to in-process ones
    assert stats["fleet/verified"] == len(items) and stats["fleet/workers_replaced"] == 1
    assert stats["fleet/retries"] >= 1
    assert len(fleet.workers) == 2 and victim not in fleet.workers
    assert fleet._pending == set() and fleet._verdicts == {}


def test_ray_fleet_backpressure_tags_and_quarantine(fleet):
    cfg = fleet.cfg
    cfg.max_pending = 8
    try:
        first = _items("bp", 8)
        done = threading.Event()
        threading.Thread(target=lambda: (fleet.verify(first), done.set()), daemon=True).start()
        time.sleep(0.05)
        fleet.verify(_items("bq", 8))  # waits until the first batch is verified: back-pressure
        assert done.wait(30)
        assert fleet.step_stats()["fleet/backpressure_s"] > 0
    finally:
        cfg.max_pending = FleetConfig.max_pending
    cfg.domain_tags = {"fleettest/tagged": ["gpu"]}
    try:
        (verdict, error), = fleet.verify(_items("t", 2, domains.TAGGED)[1:])  # the oracle answer, never run
        assert verdict.score == 0 and "['gpu']" in error and "fleet.domain_tags" in error
    finally:
        cfg.domain_tags = {}
    task = _items("z", 1)[0].task
    out = fleet.verify([VerifyItem(f"boom{k}", task, "boom") for k in range(12)])
    assert "fleettest/slow" in fleet.quarantined
    assert all(v.score == 0 for v, _ in out) and out[-1][1].startswith("DomainQuarantined")
    assert fleet.step_stats()["fleet/quarantined"] >= 1


def test_grpo_run_with_fleet_ray_equals_fleet_none(local_ray, test_domains, tmp_path, shared_compiles):
    """The same seed gives the same rewards and losses whether verification runs here or on Ray actors, even when a
    worker is killed during the first step's verification: the step completes with every verdict, once."""
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.pipeline.rl import run_rl

    tiny = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
            "rl.rollout.group_size=4", "domains.include=[arith/add,fleettest/slow]", "train.ckpt_every=0",
            "train.progress=false", "rl.rollout.max_new_tokens=32", "rl.rollout.max_prompt_len=32", "rl.steps=2",
            "observe.tensorboard=false", "reward=short"]
    killed = []

    def kill_a_busy_worker():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            fleet = current()
            busy = [w for w in getattr(fleet, "workers", []) if w.inflight]
            if busy:
                ray.kill(busy[0].actor)
                killed.append(busy[0])
                return
            time.sleep(0.001)

    hist = {}
    for kind in ("none", "ray"):
        cfg = compose(tiny + [f"fleet={kind}"] + (["fleet.pools.default.cpus=0.5"] if kind == "ray" else []))
        if kind == "ray":
            threading.Thread(target=kill_a_busy_worker, daemon=True).start()
        res = run_rl(cfg, builtin_tokenizer(), init_model=init_model(cfg.model, 0), out_dir=str(tmp_path / kind))
        hist[kind] = res["history"]
        assert res["summary"]["fleet"] == kind
    same = ("reward_mean", "reward_std", "pass_rate", "loss", "tokens_generated")
    assert [{k: h[k] for k in same} for h in hist["none"]] == [{k: h[k] for k in same} for h in hist["ray"]]
    assert any(h["loss"] != 0 for h in hist["ray"])
    assert killed and sum(h["fleet/workers_replaced"] for h in hist["ray"]) == 1
    assert all(h["fleet/verified"] == 16 for h in hist["ray"])  # every row's verdict, once per step
    assert not any(k.startswith("fleet/") for k in hist["none"][0])


def test_environments_on_the_fleet_behave_like_local_ones(fleet):
    from rlpt.pipeline.agent import SOLUTION, tool_call, train_tasks
    from rlpt.rollout.multi_turn import default_env, env_task

    cfg = compose(["experiment=agent_code_tiny"])
    task = env_task(train_tasks(cfg, 1)[0])
    kwargs = dict(time_limit_s=60.0, obs_budget=400, count_tokens=len)
    actions = [tool_call("write_file", {"path": SOLUTION, "content": task.meta["answer"]}),
               tool_call("run_tests", {})]
    runs = []
    for env in (default_env(task, max_turns=3, **kwargs), fleet.envs.factory(max_steps=3, **kwargs)(task)):
        try:
            steps = [env.reset(seed=0, options={"task": task})[0]]
            for a in actions:
                obs, reward, terminated, truncated, info = env.step(a)
                steps.append((obs, reward, terminated, truncated, info.get("verdict", {}).get("passed")))
        finally:
            env.close()
        runs.append(steps)
    assert runs[0] == runs[1]
    assert fleet.step_stats()["fleet/env_steps"] == 2 and fleet.envs.take_counts() == {}
    assert runs[1][-1][1] == 1.0 and runs[1][-1][4] is True  # the oracle solution passes, on the actor too
