"""Imported by the forkserver of `rlpt.tasks.generate`: builds the domain registry once, so that every worker
forked from it starts with the registry (seconds of reasoning-gym curriculum validation) already built."""

from rlpt.tasks.registry import list_domains

list_domains()
