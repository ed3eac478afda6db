"""Test domains for the fleet: a check that takes time (to kill a worker mid-batch) and one that crashes."""
import time

from rlpt.rewards.verdict import Verdict
from rlpt.tasks.base import Domain

CHECK_S = 0.05


def make(rng, tier):
    a = rng.randint(0, 9)
    return f"say {a}", {"answer": str(a)}


def check(task, response):
    time.sleep(CHECK_S)
    if response == "boom":
        raise RuntimeError("verifier bug")
    ok = response.strip() == task.meta["answer"]
    return Verdict(float(ok), ok, {})


SLOW = Domain("fleettest/slow", (1, 2), make, check, source="test", verifier="exact")
TAGGED = Domain("fleettest/tagged", (1,), make, check, source="test", verifier="exact")
