"""Which verification runs next: per-domain queues, priorities, deadlines and a measured cost model.

Pure Python and clock-free (callers pass `now`), so the same `Scheduler` drives the Ray fleet's dispatcher
(rlpt.fleet.ray_fleet) and the discrete-event simulation of a pod (scripts/fleet_simulation.py).

Policy `domain` (the default): each domain has its own FIFO queue. The next chunk comes from the domain whose
head item has the highest priority, then the earliest deadline (a step's items before the next step's), then the
largest expected cost (expensive checks start first, so they do not form the tail of a step). A chunk holds as
many of that domain's items as fit in `chunk_s` seconds by the domain's cost estimate (cheap checks travel
together, so the per-dispatch overhead is paid once for many). Policy `fifo`: one queue in arrival order, one
item per dispatch (what a plain task queue does); the baseline the simulation compares against.
"""

import collections
import dataclasses
import fnmatch
import itertools
import math

POLICIES = ("domain", "fifo")


@dataclasses.dataclass
class Item:
    """One verification: `id` unique in the fleet, `payload` opaque to the scheduler (task, text)."""

    id: str
    domain: str
    payload: object = None
    deadline: float = math.inf
    priority: int = 0
    attempt: int = 0  # 1 after the worker running it died (rlpt.fleet retries once)
    enqueued: float = 0.0
    seq: int = 0  # arrival order, set by push


class CostModel:
    """Seconds per verification by domain: an exponential moving average of measured times (`alpha` the weight of
    the newest), `prior_s` until a domain has one; `count` the measurements per domain."""

    def __init__(self, prior_s: float = 0.01, alpha: float = 0.2):
        if prior_s <= 0 or not 0 < alpha <= 1:
            raise ValueError(f"CostModel needs prior_s > 0 and 0 < alpha <= 1, got {prior_s}, {alpha}")
        self.prior_s, self.alpha = prior_s, alpha
        self.mean: dict[str, float] = {}
        self.count: dict[str, int] = collections.Counter()

    def estimate(self, domain: str) -> float:
        return self.mean.get(domain, self.prior_s)

    def observe(self, domain: str, seconds: float) -> None:
        seconds = max(float(seconds), 1e-6)
        old = self.mean.get(domain)
        self.mean[domain] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds
        self.count[domain] += 1


def match_table(table: dict, domain: str, default):
    """The value of the first glob pattern in `table` (insertion order) that matches `domain`, else default."""
    for pattern, value in table.items():
        if fnmatch.fnmatchcase(domain, pattern):
            return value
    return default


class Scheduler:
    """Queues of pending items; `pop_chunk` picks the next chunk for a worker (see the module doc).

    priorities: domain glob -> int (higher first; default 0). chunk_s: target expected seconds per chunk;
    max_chunk: the most items in one chunk. Not thread-safe: the fleet's dispatcher owns it.
    """

    def __init__(self, policy: str = "domain", *, priorities: dict | None = None, chunk_s: float = 0.05,
                 max_chunk: int = 64, cost: CostModel | None = None):
        if policy not in POLICIES:
            raise ValueError(f"scheduler policy {policy!r}; expected one of {POLICIES}")
        if chunk_s <= 0 or max_chunk < 1:
            raise ValueError(f"Scheduler needs chunk_s > 0 and max_chunk >= 1, got {chunk_s}, {max_chunk}")
        self.policy, self.chunk_s, self.max_chunk = policy, chunk_s, max_chunk
        self.priorities = dict(priorities or {})
        self.cost = cost or CostModel()
        self.queues: dict[str, collections.deque] = {}
        self._fifo: collections.deque = collections.deque()
        self._seq = itertools.count()

    def priority(self, domain: str) -> int:
        return int(match_table(self.priorities, domain, 0))

    def push(self, item: Item, now: float = 0.0) -> None:
        item.seq, item.enqueued = next(self._seq), now
        item.priority = self.priority(item.domain)
        if self.policy == "fifo":
            self._fifo.append(item)
        else:
            self.queues.setdefault(item.domain, collections.deque()).append(item)

    def push_front(self, item: Item) -> None:
        """Put a retried item at the head of its queue (it has waited once already)."""
        if self.policy == "fifo":
            self._fifo.appendleft(item)
        else:
            self.queues.setdefault(item.domain, collections.deque()).appendleft(item)

    def __len__(self) -> int:
        return len(self._fifo) + sum(len(q) for q in self.queues.values())

    def depths(self) -> dict[str, int]:
        """Pending items per domain."""
        if self.policy == "fifo":
            return dict(collections.Counter(i.domain for i in self._fifo))
        return {d: len(q) for d, q in self.queues.items() if q}

    def pop_chunk(self, can_run=None, spread: int = 1) -> list[Item]:
        """The next chunk for a worker that can run the domains `can_run(domain)` accepts (None: all); [] when
        nothing it can run is pending. A domain not yet measured goes one item per chunk (its cost is unknown: a
        chunk of guesses could hold seconds of work); `spread` (the workers free now) caps a chunk at that share of
        its domain's queue, so idle workers split the work instead of one taking it all."""
        if self.policy == "fifo":
            for k, item in enumerate(self._fifo):
                if can_run is None or can_run(item.domain):
                    del self._fifo[k]
                    return [item]
            return []
        best, best_key = None, None
        for domain, q in self.queues.items():
            if not q or (can_run is not None and not can_run(domain)):
                continue
            head = q[0]
            key = (-head.priority, head.deadline, -self.cost.estimate(domain), head.seq)
            if best_key is None or key < best_key:
                best, best_key = domain, key
        if best is None:
            return []
        q = self.queues[best]
        n = 1
        if self.cost.count[best]:
            n = max(1, min(self.max_chunk, int(self.chunk_s / self.cost.estimate(best)), -(-len(q) // max(spread, 1))))
        return [q.popleft() for _ in range(min(n, len(q)))]

    def drain(self, domain: str) -> list[Item]:
        """Remove and return every pending item of `domain` (a quarantined domain's work)."""
        if self.policy == "fifo":
            out = [i for i in self._fifo if i.domain == domain]
            self._fifo = collections.deque(i for i in self._fifo if i.domain != domain)
            return out
        q = self.queues.pop(domain, collections.deque())
        return list(q)
