"""The fleet interface the RL loop verifies through, its exactly-once bookkeeping, and the in-process fleet.

A fleet takes `VerifyItem`s (a unique id, the task, the policy's text) and gives back one `(Verdict, error)` per
item, in order: `verify(items)`, or `submit(items)` now and `result(ticket)` later. Every fleet records each id's
verdict exactly once (a retried or duplicated check that finishes second is counted in `fleet/duplicates` and
dropped), quarantines a domain whose verifier fails `quarantine_after` times in a row (its items then score 0 at
once, with an alert), and reports per-step counters for metrics.jsonl / TensorBoard (`step_stats`).

`LocalFleet` (fleet=none) verifies in the calling thread, one item after another: what rlpt always did.
`rlpt.fleet.ray_fleet.RayFleet` (fleet=ray) runs the same `verify_one` on Ray actors.
"""

import abc
import collections
import contextlib
import dataclasses
import itertools
import logging
import threading
import time

from rlpt.fleet.work import check, failed
from rlpt.rewards.verdict import Verdict

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class VerifyItem:
    """One response to verify: `id` unique among the fleet's pending items (e.g. '<batch>/<row>')."""

    id: str
    task: object  # rlpt.tasks.Task
    text: str


@dataclasses.dataclass(frozen=True)
class Ticket:
    """What `submit` returns: the ids to collect, in the order they were given."""

    ids: tuple[str, ...]


class FleetBase(abc.ABC):
    """Bookkeeping shared by every fleet: verdicts by id, quarantine, alerts, per-step counters."""

    kind = "base"
    envs = None  # an EnvHosts when multi-turn environments run on the fleet (rlpt.fleet.envs)

    def __init__(self, *, quarantine_after: int = 0, alert_hooks=()):
        if quarantine_after < 0:
            raise ValueError(f"fleet.quarantine_after={quarantine_after}; expected >= 0 (0: never quarantine)")
        self.quarantine_after = quarantine_after
        self.alert_hooks = list(alert_hooks)
        self.alerts: list[dict] = []
        self.quarantined: dict[str, str] = {}  # domain -> why
        self._cond = threading.Condition()
        self._verdicts: dict[str, tuple[Verdict, str | None]] = {}
        self._pending: set[str] = set()  # submitted, not yet collected by result()
        self._streak: collections.Counter = collections.Counter()  # consecutive failures per domain
        self._batches = itertools.count()
        self._stats = collections.Counter()
        self._depth: dict[str, int] = {}
        self._check_s: collections.Counter = collections.Counter()  # per domain since step_stats: seconds, checks
        self._checks: collections.Counter = collections.Counter()

    # --- the interface -------------------------------------------------------------------------------------
    def new_batch(self) -> int:
        """A number unique in this fleet, for callers building item ids."""
        return next(self._batches)

    def verify(self, items: list[VerifyItem]) -> list[tuple[Verdict, str | None]]:
        """(verdict, error) per item, in order; error is None unless the verifier (or its worker) failed."""
        return self.result(self.submit(items))

    def submit(self, items: list[VerifyItem]) -> Ticket:
        ids = tuple(it.id for it in items)
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in collections.Counter(ids).items() if n > 1)
            raise ValueError(f"fleet.submit: item id {dup!r} appears twice in one batch")
        with self._cond:
            clash = self._pending.intersection(ids)
            if clash:
                raise ValueError(f"fleet.submit: item id {sorted(clash)[0]!r} is already pending")
            self._pending.update(ids)
        self._run(items)
        return Ticket(ids)

    def result(self, ticket: Ticket, timeout_s: float | None = None) -> list[tuple[Verdict, str | None]]:
        """The verdicts of a submitted batch, once all are in (each id's first recorded verdict)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not all(i in self._verdicts for i in ticket.ids):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    missing = [i for i in ticket.ids if i not in self._verdicts]
                    raise TimeoutError(f"fleet: {len(missing)} verdicts (first {missing[0]!r}) not in after "
                                       f"{timeout_s:g} s")
                self._wait(left)
            out = [self._verdicts.pop(i) for i in ticket.ids]
            self._pending.difference_update(ticket.ids)
            return out

    def step_stats(self) -> dict[str, float]:
        """Counters since the last call, for one metrics row: items verified, failures, retries, duplicates dropped,
        workers replaced, back-pressure seconds, items finished past their deadline, quarantined domains, and per
        domain the deepest queue seen (fleet/queue/<domain>) and the mean milliseconds per check
        (fleet/check_ms/<domain>)."""
        with self._cond:
            stats, self._stats = self._stats, collections.Counter()
            depth, self._depth = self._depth, {}
            check_s, self._check_s = self._check_s, collections.Counter()
            checks, self._checks = self._checks, collections.Counter()
        out = {f"fleet/{k}": float(stats.get(k, 0)) for k in
               ("verified", "failures", "retries", "duplicates", "workers_replaced", "late")}
        out["fleet/backpressure_s"] = float(stats.get("backpressure_ms", 0)) / 1000
        out["fleet/quarantined"] = float(len(self.quarantined))
        out |= {f"fleet/queue/{d}": float(n) for d, n in depth.items()}
        out |= {f"fleet/check_ms/{d}": 1000 * check_s[d] / n for d, n in checks.items()}
        return out

    def close(self) -> None:  # noqa: B027  (an in-process fleet holds nothing to release)
        """Release the fleet's workers (nothing for an in-process fleet)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- for implementations -------------------------------------------------------------------------------
    @abc.abstractmethod
    def _run(self, items: list[VerifyItem]) -> None:
        """Start (or do) the verification of `items`; each ends in a `_record`."""

    def _wait(self, timeout: float | None) -> None:
        self._cond.wait(timeout)

    def _record(self, item_id: str, domain: str, verdict: Verdict, error: str | None, seconds: float | None = None,
                *, count_failure: bool = True) -> bool:
        """Store an item's verdict unless one is recorded already (then count a duplicate); False if dropped.
        Caller holds no lock."""
        alert = None
        with self._cond:
            if item_id in self._verdicts or item_id not in self._pending:
                self._stats["duplicates"] += 1
                return False
            self._verdicts[item_id] = (verdict, error)
            self._stats["verified"] += 1
            if seconds is not None:
                self._check_s[domain] += seconds
                self._checks[domain] += 1
            if count_failure and failed(verdict, error):
                self._stats["failures"] += 1
                self._streak[domain] += 1
                if self.quarantine_after and self._streak[domain] >= self.quarantine_after \
                        and domain not in self.quarantined:
                    why = (f"DomainQuarantined: domain {domain!r} after {self._streak[domain]} consecutive "
                           f"verifier failures (last: {error or verdict.details.get('error')})")
                    self.quarantined[domain] = why
                    alert = {"kind": "fleet_quarantine", "domain": domain, "message": why}
            elif count_failure:
                self._streak[domain] = 0
            self._cond.notify_all()
        if alert is not None:
            self._alert(alert)
        return True

    def _quarantine_verdict(self, domain: str) -> tuple[Verdict, str]:
        why = self.quarantined[domain]
        return Verdict(0.0, False, {"error": why, "process": 0.0}), why

    def _alert(self, alert: dict) -> None:
        log.warning("[alert %s] %s", alert["kind"], alert["message"])
        self.alerts.append(alert)
        for hook in self.alert_hooks:
            hook(alert)

    def _note_depths(self, depths: dict[str, int]) -> None:
        for d, n in depths.items():
            if n > self._depth.get(d, 0):
                self._depth[d] = n


class LocalFleet(FleetBase):
    """fleet=none: each item verified in the calling thread, in order, by `rlpt.fleet.work.check`."""

    kind = "none"

    def _run(self, items: list[VerifyItem]) -> None:
        for it in items:
            name = it.task.domain
            if name in self.quarantined:
                self._record(it.id, name, *self._quarantine_verdict(name), count_failure=False)
                continue
            self._record(it.id, name, *check(it.task, it.text))


_DEFAULT = LocalFleet()
_CURRENT: FleetBase | None = None
_LOCK = threading.Lock()


def current() -> FleetBase:
    """The fleet rollouts verify through: the one `use` installed, else an in-process LocalFleet."""
    return _CURRENT if _CURRENT is not None else _DEFAULT


@contextlib.contextmanager
def use(fleet: FleetBase):
    """Make `fleet` the process's current fleet for the block (the RL loop wraps a run in it)."""
    global _CURRENT
    with _LOCK:
        if _CURRENT is not None and _CURRENT is not fleet:
            raise RuntimeError("a fleet is already in use in this process; one run at a time uses a fleet")
        previous, _CURRENT = _CURRENT, fleet
    try:
        yield fleet
    finally:
        with _LOCK:
            _CURRENT = previous


def make_fleet(cfg, alert_hooks=()) -> FleetBase:
    """The fleet `cfg` (a FleetConfig: fleet=none|ray) describes; a Ray fleet connects and starts its workers."""
    if cfg.kind == "none":
        return LocalFleet(quarantine_after=cfg.quarantine_after, alert_hooks=alert_hooks)
    if cfg.kind == "ray":
        from rlpt.fleet.ray_fleet import RayFleet  # on use: ray (~1 s) loads only with fleet=ray

        return RayFleet(cfg, alert_hooks=alert_hooks)
    raise ValueError(f"fleet.kind={cfg.kind!r}; expected 'none' or 'ray'")
