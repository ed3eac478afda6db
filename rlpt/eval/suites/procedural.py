"""Procedural suites from rlpt.tasks domains: eval-split seeds, each domain's own verifier.

suite=quickstart          the quickstart experiment's held-out set (its domains, tiers, rl.eval_per_domain)
suite=<domains group>     experiments/conf/domains/<group>.yaml (include, tiers, eval_size per domain);
                          group:<name> reaches a group whose name is also an experiment (group:quickstart)
suite=domains:<p1>,<p2>   domain names or globs ('arith/*'), all of each domain's tiers
"""
import os

from rlpt.config import compose
from rlpt.config.tasks import DomainsConfig
from rlpt.eval.suites.base import LoadArgs, Suite, take
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task, get_domain, resolve
from rlpt.tasks.mixture import domain_mixture

CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "experiments", "conf")
DEFAULT_PER_DOMAIN = 50
EXPERIMENT_SUITES = ("quickstart",)


def domain_groups() -> list[str]:
    folder = os.path.join(CONF_DIR, "domains")
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml")) if os.path.isdir(folder) else []


def group_config(name: str):
    """The DomainsConfig of experiments/conf/domains/<name>.yaml on its own (composing the root config would let
    the default experiment preset override its domains)."""
    from omegaconf import OmegaConf


    path = os.path.join(CONF_DIR, "domains", f"{name}.yaml")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(DomainsConfig), OmegaConf.load(path)))


def _check(task: Task, response: str) -> Verdict:
    return get_domain(task.domain).verify(task, response)


def _suite(name: str, names: list[str], tiers: dict[str, list[int]], per_domain: int, offset: int,
           max_new: int, source: str) -> Suite:
    def load(args: LoadArgs) -> list[Task]:
        from rlpt.eval.heldout import heldout_tasks  # on use (start-up: PIL)

        return take(heldout_tasks(names, tiers, args.per_domain or per_domain, offset), args.limit)

    desc = f"{len(names)} procedural domain(s): {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"
    return Suite(name, desc, load, _check, max_new_tokens=max_new, source=source)


def _tiers(names: list[str], only: list[int]) -> dict[str, list[int]]:
    out = {}
    for n in names:
        own = list(get_domain(n).tiers)
        out[n] = [t for t in own if t in only] if only else own
        if not out[n]:
            raise ValueError(f"tiers {only} leave no tier of domain {n!r} (it has {own})")
    return out


def procedural_suite(name: str) -> Suite | None:
    """The procedural suite called `name`, or None when the name is not a procedural suite."""

    if name in EXPERIMENT_SUITES:
        cfg = compose([f"experiment={name}"])
        names, _, tiers = domain_mixture(cfg)
        return _suite(name, names, tiers, cfg.rl.eval_per_domain, cfg.domains.eval_offset,
                      cfg.rl.rollout.max_new_tokens, f"experiment={name}: its held-out set (rl.eval_per_domain)")
    if name.startswith("domains:"):
        patterns = [p for p in name[len("domains:"):].split(",") if p]
        if not patterns:
            raise ValueError("suite=domains:<pattern,...> needs at least one domain name or glob")
        names = resolve(patterns)
        return _suite(name, names, _tiers(names, []), DEFAULT_PER_DOMAIN, 0, 64, f"rlpt.tasks {patterns}")
    group = name[len("group:"):] if name.startswith("group:") else name
    if group in domain_groups():
        dc = group_config(group)
        names = resolve(list(dc.include), list(dc.exclude))
        return _suite(name, names, _tiers(names, list(dc.tiers)), dc.eval_size, dc.eval_offset, 64,
                      f"domains={group} (experiments/conf/domains/{group}.yaml)")
    return None
