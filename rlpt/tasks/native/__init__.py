"""Native procedural domains: generators with strict verifiers, five difficulty tiers each (vision/*: three)."""

from rlpt.tasks.native import (
    algebra,
    arith,
    code,
    counting,
    dates,
    docqa,
    extraction,
    lists,
    logic,
    repo,
    shell,
    strings,
    tools,
    units,
    vision,
)

MODULES = (
    arith,
    algebra,
    lists,
    strings,
    counting,
    dates,
    units,
    logic,
    code,
    shell,
    repo,
    extraction,
    docqa,
    tools,
    vision,
)


def register_all(register) -> None:
    for module in MODULES:
        for domain in module.domains():
            register(domain)
