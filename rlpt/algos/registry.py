"""Name -> function registries for the swappable pieces of rlpt.algos."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
    """A dict from name to function that fails loudly on unknown or duplicate names.

    `kind` is the human name used in error messages ("advantage estimator", "policy loss", ...).
    """

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: store the function under `name`; registering a name twice is an error."""

        def deco(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered (by {self[name].__qualname__})")
            self[name] = fn
            return fn

        return deco

    def lookup(self, name: str) -> Callable:
        """The function registered under `name`; an unknown name raises KeyError listing the known ones."""
        if name not in self:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {sorted(self)}")
        return self[name]
