"""The domain registry: native domains, the reasoning-gym adapter, lookup by name."""

import fnmatch

from rlpt.tasks import native, rgym
from rlpt.tasks.base import Domain

_DOMAINS: dict[str, Domain] = {}
_LOADED = False


def register(domain: Domain) -> Domain:
    if domain.name in _DOMAINS:
        raise ValueError(f"domain {domain.name!r} is already registered")
    if not domain.tiers or list(domain.tiers) != sorted(set(domain.tiers)):
        raise ValueError(f"domain {domain.name!r}: tiers must be increasing and non-empty, got {domain.tiers}")
    _DOMAINS[domain.name] = domain
    return domain


def unregister(name: str) -> Domain:
    """Remove a registered domain and return it (tests that register RL prompt files clean up with it)."""
    if name not in _DOMAINS:
        raise KeyError(f"domain {name!r} is not registered")
    return _DOMAINS.pop(name)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True

    native.register_all(register)
    rgym.register_all(register)


def list_domains() -> list[str]:
    """All registered domain names, sorted."""
    _load()
    return sorted(_DOMAINS)


def get_domain(name: str) -> Domain:
    _load()
    if name not in _DOMAINS:
        close = [n for n in _DOMAINS if name.split("/")[-1] in n][:8]
        raise KeyError(f"unknown domain {name!r} ({len(_DOMAINS)} registered; similar: {close})")
    return _DOMAINS[name]


def resolve(patterns: list[str], exclude: list[str] = ()) -> list[str]:
    """Domain names matching any of the glob patterns (e.g. 'arith/*', 'rg/*') and none of `exclude`; each
    pattern must match."""
    names = [n for n in list_domains() if not any(fnmatch.fnmatchcase(n, x) for x in exclude)]
    out: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise KeyError(f"domain pattern {pattern!r} matches no registered domain")
        out.extend(h for h in hits if h not in out)
    return out
