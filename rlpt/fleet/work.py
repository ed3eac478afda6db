"""What a verification is, wherever it runs: the in-process fleet and the Ray workers call the same function."""

import time

from rlpt.rewards.verdict import Verdict
from rlpt.tasks import get_domain


def verify_one(domain, task, text: str) -> tuple[Verdict, str | None]:
    """(verdict, error) for one response: the domain's verdict, or for a verifier that raises (a bug in the
    verifier, not in the policy's text: Domain.verify itself turns what a check raises into a 0) a Verdict of 0
    with the error in details and the error text, so a crashing verifier scores 0 and the run goes on."""
    try:
        return domain.verify(task, text), None
    except Exception as e:  # noqa: BLE001  (a broken verifier must not stop training; it is counted)
        error = f"{type(e).__name__}: {e}"[:500]
        return Verdict(0.0, False, {"error": error, "process": 0.0}), error


def failed(verdict: Verdict, error: str | None) -> bool:
    """A verification that says nothing about the response, as the fleet's quarantine counts them: the verifier
    raised, or its check crashed (Domain.verify's "check raised ..."). A wrong answer, or a program of the policy
    that times out in the sandbox, is an answer, not a failure."""
    return error is not None or str(verdict.details.get("error", "")).startswith("check raised")


def check(task, text: str, domains: dict | None = None) -> tuple[Verdict, str | None, float]:
    """(verdict, error, seconds) for one response: its domain from `domains` (the ones a worker was sent) or the
    registry (an unknown domain scores 0 with the KeyError), then `verify_one`."""

    t0 = time.perf_counter()
    try:
        domain = domains[task.domain] if domains and task.domain in domains else get_domain(task.domain)
    except KeyError as e:
        return Verdict(0.0, False, {"error": str(e), "process": 0.0}), f"KeyError: {e}", 0.0
    verdict, error = verify_one(domain, task, text)
    return verdict, error, time.perf_counter() - t0
