"""The run's task mixture: which domains (procedural and RL prompt files), their weights and tiers."""
import dataclasses
import fnmatch

from rlpt.tasks.files import file_sources
from rlpt.tasks.registry import get_domain, resolve


def domain_mixture(cfg):
    """(names, weights, tiers per domain): the RL prompt files of `kind: rl_jsonl` data sources (weight: the
    source's) and, when data.with_domains, the `domains` group's domains (weights: domains.weights) with its
    tier filter domains.tiers over the whole mixture. data.with_domains=false leaves the `domains` group out
    entirely: the files alone, with all their tiers."""
    files = file_sources(cfg.data)
    names = [n for n, _ in files]
    weights = [w for _, w in files]
    for n in resolve(list(cfg.domains.include), list(cfg.domains.exclude)) if cfg.data.with_domains else []:
        if n in names:  # a file domain also named in domains.include: its source weight stands
            continue
        w = [v for pat, v in cfg.domains.weights.items() if fnmatch.fnmatchcase(n, pat)]
        names.append(n)
        weights.append(w[0] if w else 1.0)
    if not names:
        raise ValueError("the task mixture is empty: data.with_domains=false and no data source has kind rl_jsonl")
    tiers, keep = {}, list(cfg.domains.tiers) if cfg.data.with_domains else []
    for n in names:
        own = list(get_domain(n).tiers)
        tiers[n] = [t for t in own if t in keep] if keep else own
        if not tiers[n]:
            raise ValueError(f"domains.tiers={keep} leaves no tier of domain {n!r} ({own})")
    return names, weights, tiers


def rl_domains(cfg):
    """cfg.domains naming exactly the task mixture of `domain_mixture(cfg)` (RL prompt files included, each
    with its weight, and its tiers), for consumers that build their own curriculum from cfg.domains
    (rlpt.pipeline.rl.run_rl: `dataclasses.replace(cfg, domains=rl_domains(cfg))`)."""
    names, weights, _ = domain_mixture(cfg)
    bad = [n for n in names if any(c in n for c in "*?[")]
    if bad:
        raise ValueError(f"domain names {bad} hold glob characters; cfg.domains.include cannot name them exactly")
    tiers = list(cfg.domains.tiers) if cfg.data.with_domains else []  # as domain_mixture filters them
    return dataclasses.replace(cfg.domains, include=list(names), weights=dict(zip(names, map(float, weights))),
                               tiers=tiers)
