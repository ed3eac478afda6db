"""fleet=ray: verifier workers (and multi-turn environments) as Ray actors, fed by one dispatcher thread.

The dispatcher owns a `Scheduler` (rlpt.fleet.scheduler): `submit` queues items per domain (blocking while
fleet.max_pending items are unverified: back-pressure on the rollout producer), and each worker pulls the next
chunk it may run (its pool's tags cover the domain's fleet.domain_tags) whenever it has fewer than
fleet.inflight_per_worker chunks in flight. Completed chunks update the cost model and are recorded by id,
exactly once. A worker whose actor dies (killed, out of memory, node lost) is replaced by a new actor of its pool;
its unfinished items go back to the head of their queues with attempt + 1 and run on another worker, and an item
that loses its worker `retries + 1` times scores 0 with the reason. When the queues are empty, an idle worker
re-runs the oldest chunk that has run fleet.backup_after times its expected time on another worker (work stealing
from stragglers; checks are deterministic and the first verdict recorded wins).
"""

import collections
import dataclasses
import logging
import os
import threading
import time

from rlpt.fleet.core import FleetBase, VerifyItem
from rlpt.fleet.envs import EnvHosts
from rlpt.fleet.scheduler import CostModel, Item, Scheduler, match_table
from rlpt.fleet.work import check
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import get_domain, list_domains

log = logging.getLogger(__name__)
BACKUP_MIN_S = 1.0  # no chunk is re-run before it has run this long (a cold worker's first chunk imports its checks)


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("fleet=ray needs Ray: pip install -e \".[fleet]\" (or pip install 'ray>=2.40')") from e
    return ray


class VerifierWorker:
    """A Ray actor: verifies chunks of (id, domain, task, text) with `threads` checks at once."""

    def __init__(self, threads: int):
        import concurrent.futures

        self.domains: dict = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="verify")

    def ready(self) -> tuple[int, list[str]]:
        """(pid, domain names this process knows without being sent them)."""

        return os.getpid(), list_domains()

    def install(self, domains: dict) -> None:
        """Domains the driver registered at run time (RL prompt files), sent once per worker."""
        self.domains.update(domains)

    def verify(self, chunk: list) -> list:
        return list(self.pool.map(lambda entry: (entry[0], *check(entry[2], entry[3], self.domains)), chunk))


@dataclasses.dataclass
class _Worker:
    pool: str
    actor: object
    tags: frozenset
    builtin: set = dataclasses.field(default_factory=set)  # domains its process registers by itself
    installed: set = dataclasses.field(default_factory=set)  # domains the driver sent it
    inflight: list = dataclasses.field(default_factory=list)  # refs, oldest first
    alive: bool = True


@dataclasses.dataclass
class _Flight:
    worker: _Worker
    items: list  # scheduler Items
    sent: float
    expected_s: float
    backup: bool = False  # a copy of this chunk runs on another worker
    is_copy: bool = False


def connect(cfg) -> None:
    """ray.init for fleet.address (a no-op when this process is connected already)."""
    ray = _ray()
    if ray.is_initialized():
        return
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if cfg.address == "local":
        resources = collections.Counter()
        for pool in cfg.pools.values():
            for tag, amount in pool.tags.items():
                resources[tag] += amount * pool.workers
        if "bubblewrap" in resources:
            from rlpt.envs.sandbox import layers  # on use (start-up: gymnasium)

            if not layers.probe().get("namespaces"):
                raise ValueError("fleet.pools ask for the 'bubblewrap' tag, but this host's sandbox has no namespace "
                                 "layer (bubblewrap); drop the tag or run the pool on a node that has it")
        ray.init(num_cpus=cfg.local_cpus or os.cpu_count(), resources=dict(resources) or None, **quiet)
    elif cfg.address == "auto" or cfg.address.startswith("ray://"):
        ray.init(address=cfg.address, **({} if cfg.address.startswith("ray://") else quiet))
    else:
        raise ValueError(f"fleet.address={cfg.address!r}; expected local, auto or ray://host:port")


class RayFleet(FleetBase):
    """Verification on Ray actors with per-domain scheduling, back-pressure, retries and quarantine."""

    kind = "ray"

    def __init__(self, cfg, alert_hooks=()):
        super().__init__(quarantine_after=cfg.quarantine_after, alert_hooks=alert_hooks)
        ray = _ray()
        if not cfg.pools:
            raise ValueError("fleet.pools is empty; a Ray fleet needs at least one pool of workers")
        self.cfg = cfg
        connect(cfg)
        self._actor_cls = ray.remote(VerifierWorker)
        self.scheduler = Scheduler(cfg.policy, priorities=cfg.priorities, chunk_s=cfg.chunk_s,
                                   max_chunk=cfg.max_chunk, cost=CostModel(prior_s=cfg.cost_prior_s))
        self.workers: list[_Worker] = []
        self._flights: dict = {}  # ref -> _Flight
        self._domains: dict[str, str] = {}  # item id -> domain (pending)
        self._stop = False
        self._error: BaseException | None = None  # what stopped the dispatcher thread
        starting = [self._start_worker(name) for name, pool in cfg.pools.items() for _ in range(pool.workers)]
        self._await_ready(starting)
        self.workers = starting
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rlpt-fleet-dispatch")
        self._thread.start()
        if cfg.envs:
            self.envs = EnvHosts(cfg.env_hosts)

    # --- workers -------------------------------------------------------------------------------------------
    def _start_worker(self, pool_name: str) -> _Worker:
        pool = self.cfg.pools[pool_name]
        options = dict(num_cpus=pool.cpus, max_restarts=0, max_concurrency=1)
        if pool.memory_mb:
            options["memory"] = pool.memory_mb * 2**20
        if pool.tags:
            options["resources"] = dict(pool.tags)
        actor = self._actor_cls.options(**options).remote(pool.threads)
        worker = _Worker(pool_name, actor, frozenset(pool.tags))
        worker.ready_ref = actor.ready.remote()
        return worker

    def _await_ready(self, workers: list[_Worker]) -> None:
        ray = _ray()
        refs = [w.ready_ref for w in workers]
        ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.cfg.start_timeout_s)
        if waiting:
            w = workers[refs.index(waiting[0])]
            pool = self.cfg.pools[w.pool]
            for x in workers:
                ray.kill(x.actor)
            raise RuntimeError(f"fleet: {len(waiting)} of {len(refs)} workers did not start within "
                               f"fleet.start_timeout_s={self.cfg.start_timeout_s:g} s (first: pool {w.pool!r}, "
                               f"cpus={pool.cpus}, memory_mb={pool.memory_mb}, tags={dict(pool.tags)}); the cluster "
                               f"lacks those resources ({ray.available_resources()} available)")
        for w, ref in zip(workers, refs):
            _, names = ray.get(ref)
            w.builtin = set(names)

    def _can_run(self, worker: _Worker):
        def ok(domain: str) -> bool:
            return set(match_table(self.cfg.domain_tags, domain, ())) <= worker.tags
        return ok

    def _replace(self, worker: _Worker) -> None:
        """Start a new actor of the dead worker's pool (in the dispatcher thread; readiness is not awaited: the
        new actor's first chunk waits for it)."""
        if not worker.alive:
            return
        worker.alive = False
        self.workers.remove(worker)
        fresh = self._start_worker(worker.pool)
        fresh.builtin = set(worker.builtin)
        self.workers.append(fresh)
        self._stats["workers_replaced"] += 1
        log.warning("fleet: a worker of pool %r died; replaced", worker.pool)

    # --- the FleetBase interface ---------------------------------------------------------------------------
    def _run(self, items: list[VerifyItem]) -> None:
        t0 = time.monotonic()
        with self._cond:
            # back-pressure: hold the producer while the fleet is behind by max_pending items
            while self._unverified() and self._unverified() + len(items) > self.cfg.max_pending:
                self._cond.wait(0.1)
            self._stats["backpressure_ms"] += int(1000 * (time.monotonic() - t0))
            now = time.monotonic()
            deadline = now + self.cfg.deadline_s if self.cfg.deadline_s > 0 else now
            quarantined = []
            for it in items:
                name = it.task.domain
                if name in self.quarantined:
                    quarantined.append((it.id, name))
                    continue
                if not any(self._can_run(w)(name) for w in self.workers):
                    quarantined.append((it.id, name))
                    self.quarantined.setdefault(name, f"DomainQuarantined: no worker in the fleet carries the tags "
                                                      f"{match_table(self.cfg.domain_tags, name, ())} that domain "
                                                      f"{name!r} needs (fleet.domain_tags, fleet.pools.*.tags)")
                    continue
                self._domains[it.id] = name
                self.scheduler.push(Item(it.id, name, (it.task, it.text), deadline=deadline), now)
            self._note_depths(self.scheduler.depths())
            self._cond.notify_all()
        for item_id, name in quarantined:
            self._record(item_id, name, *self._quarantine_verdict(name), count_failure=False)

    def _unverified(self) -> int:
        """Items handed to the scheduler and not yet verified (a batch being submitted is not counted)."""
        return len(self._domains)

    def _done(self, item_id: str) -> bool:
        """Verified already (and maybe collected by result())."""
        return item_id in self._verdicts or item_id not in self._pending

    def _wait(self, timeout):
        if not self._thread.is_alive() and not self._stop:
            raise RuntimeError("fleet: the dispatcher thread died") from self._error
        self._cond.wait(0.5 if timeout is None else min(timeout, 0.5))

    def step_stats(self) -> dict[str, float]:
        out = super().step_stats()
        if self.envs is not None:  # multi-turn episodes verify inside their environments
            counts = self.envs.take_counts()
            out |= {f"fleet/{k}": float(counts.get(k, 0)) for k in ("env_episodes", "env_steps")}
        return out

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        self._thread.join(timeout=30)
        ray = _ray()
        for w in self.workers:
            ray.kill(w.actor)
        if self.envs is not None:
            self.envs.close()

    # --- the dispatcher ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        ray = _ray()
        try:
            while not self._stop:
                with self._cond:
                    self._dispatch()
                    refs = list(self._flights)
                    if not refs:
                        self._cond.wait(0.05)
                        continue
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.01)
                # everything finished by now, not just the first (fewer wakeups under load)
                if ready:
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                for ref in ready:
                    self._complete(ref)
        except BaseException as e:  # noqa: BLE001  (surfaced to result() callers by _wait)
            self._error = e
            log.exception("fleet dispatcher failed")

    def _dispatch(self) -> None:
        """Give every live worker chunks up to fleet.inflight_per_worker (lock held)."""
        now = time.monotonic()
        free = sum(len(w.inflight) < self.cfg.inflight_per_worker for w in self.workers)
        for w in list(self.workers):
            while len(w.inflight) < self.cfg.inflight_per_worker:
                chunk = self.scheduler.pop_chunk(self._can_run(w), spread=max(free, 1))
                if not chunk:
                    break
                self._send(w, chunk, now)
        if len(self.scheduler) == 0 and self.cfg.backup_after > 0:
            self._backup(now)

    def _send(self, w: _Worker, chunk: list[Item], now: float, is_copy: bool = False) -> None:
        for name in {it.domain for it in chunk} - w.builtin - w.installed:
            w.actor.install.remote({name: get_domain(name)})  # runs before the chunk: a sequential actor
            w.installed.add(name)
        payload = [(it.id, it.domain, *it.payload) for it in chunk]
        ref = w.actor.verify.remote(payload)
        threads = self.cfg.pools[w.pool].threads
        expected = sum(self.scheduler.cost.estimate(it.domain) for it in chunk) / min(threads, len(chunk))
        self._flights[ref] = _Flight(w, chunk, now, expected, is_copy=is_copy)
        w.inflight.append(ref)

    def _backup(self, now: float) -> None:
        idle = [w for w in self.workers if not w.inflight]
        if not idle:
            return
        for ref, fl in sorted(self._flights.items(), key=lambda kv: kv[1].sent):
            if not idle:
                return
            if fl.backup or fl.is_copy or fl.worker.inflight[:1] != [ref]:
                continue
            if now - fl.sent < max(self.cfg.backup_after * fl.expected_s, BACKUP_MIN_S):
                continue
            left = [it for it in fl.items if not self._done(it.id)]
            target = next((w for w in idle if w is not fl.worker and all(self._can_run(w)(it.domain) for it in left)),
                          None)
            if not left or target is None:
                continue
            fl.backup = True
            idle.remove(target)
            self._send(target, left, now, is_copy=True)

    def _complete(self, ref) -> None:
        ray = _ray()
        with self._cond:
            fl = self._flights.pop(ref)
            if ref in fl.worker.inflight:
                fl.worker.inflight.remove(ref)
        try:
            results = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError):
            self._lost(fl)
            return
        except ray.exceptions.RayTaskError as e:  # the chunk could not run (e.g. a task that does not unpickle)
            error = f"FleetWorkerError: {str(e).splitlines()[0][:300]}"
            for it in fl.items:
                self._record(it.id, it.domain, Verdict(0.0, False, {"error": error, "process": 0.0}), error)
            return
        now = time.monotonic()
        for item_id, verdict, error, seconds in results:
            domain = self._domains.get(item_id)
            if domain is None:  # collected already (a backup copy finishing second)
                self._stats["duplicates"] += 1
                continue
            self.scheduler.cost.observe(domain, seconds)
            it = next(i for i in fl.items if i.id == item_id)
            if now > it.deadline and self.cfg.deadline_s > 0:
                self._stats["late"] += 1
            if self._record(item_id, domain, verdict, error, seconds):
                with self._cond:
                    self._domains.pop(item_id, None)
        with self._cond:  # a domain quarantined meanwhile: its queued items score 0 now
            drained = [it for name in self.quarantined for it in self.scheduler.drain(name)]
        for it in drained:
            self._domains.pop(it.id, None)
            self._record(it.id, it.domain, *self._quarantine_verdict(it.domain), count_failure=False)

    def _lost(self, fl: _Flight) -> None:
        """The worker died with this chunk in flight: replace it, retry what is unverified."""
        with self._cond:
            self._replace(fl.worker)
            final = []
            for it in fl.items:
                if self._done(it.id) or fl.backup or fl.is_copy and self._copy_twin_alive(fl):
                    continue  # verified already, or the other copy of this chunk is still running
                if it.attempt < self.cfg.retries:
                    it.attempt += 1
                    self._stats["retries"] += 1
                    self.scheduler.push_front(it)
                else:
                    final.append(it)
            self._cond.notify_all()
        for it in final:
            self._domains.pop(it.id, None)
            why = (f"WorkerLost: the fleet worker verifying this item died {it.attempt + 1} times "
                   f"(fleet.retries={self.cfg.retries})")
            self._record(it.id, it.domain, Verdict(0.0, False, {"error": why, "process": 0.0}), why)

    def _copy_twin_alive(self, fl: _Flight) -> bool:
        ids = {it.id for it in fl.items}
        return any(not f.is_copy and ids & {it.id for it in f.items} for f in self._flights.values())
