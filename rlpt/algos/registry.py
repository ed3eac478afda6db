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

    def check_kwargs(self, name: str, kwargs: dict, key: str, supplied: tuple[str, ...] = ()) -> None:
        """Refuse, before any work, options the function registered under `name` does not take or lacks.

        Its keyword-only parameters (the registered function's own defaults are the one source of them) are the
        options; `supplied` are those the caller fills in itself (e.g. num_groups). `key` is the config key of the name
        (e.g. "rl.algo.policy_loss"; its options are `<key>_kwargs`), named in the error with the known options.
        """
        import inspect

        if name not in self:
            raise ValueError(f"{key}={name!r}: unknown {self.kind}; known: {sorted(self)}")
        params = {p.name: p for p in inspect.signature(self[name]).parameters.values()
                  if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in supplied}
        known = ", ".join(f"{n}={p.default!r}" if p.default is not p.empty else f"{n} (required)"
                          for n, p in params.items()) or "none"
        for k in kwargs:
            if k not in params:
                raise ValueError(f"{key}_kwargs.{k}: {self.kind} {name!r} takes no option {k!r}; its options: {known}")
        for n, p in params.items():
            if p.default is p.empty and n not in kwargs:
                raise ValueError(f"{key}_kwargs.{n} is required by {self.kind} {name!r}; its options: {known}")
