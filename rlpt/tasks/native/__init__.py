"""Native procedural domains: generators with strict verifiers, five difficulty tiers each."""

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
    shell,
    strings,
    tools,
    units,
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
    extraction,
    docqa,
    tools,
)


def register_all(register) -> None:
    for module in MODULES:
        for domain in module.domains():
            register(domain)
