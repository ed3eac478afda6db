"""Eval suites by name: shipped offline benchmarks (humaneval, bfcl, arc, gsm_symbolic) and procedural ones."""
from rlpt.eval.suites import arc, bfcl, bfcl_env, gsm_symbolic, humaneval  # noqa: F401  (register the shipped suites)
from rlpt.eval.suites.base import SUITES, LoadArgs, Suite, register_suite
from rlpt.eval.suites.procedural import domain_groups, procedural_suite


def get_suite(name: str) -> Suite:
    """A shipped suite, `quickstart`, a domains group name, or `domains:<patterns>`; raises naming the options."""
    if name in SUITES:
        return SUITES[name]()
    suite = procedural_suite(name)
    if suite is None:
        raise KeyError(f"unknown suite {name!r}: shipped {sorted(SUITES)}, experiments ['quickstart'], "
                       f"domain groups {domain_groups()} (or group:<name>), or domains:<name or glob,...>")
    return suite


__all__ = ["SUITES", "LoadArgs", "Suite", "domain_groups", "get_suite", "procedural_suite", "register_suite"]
