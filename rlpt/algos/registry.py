"""Name -> function registries for the swappable pieces of rlpt.algos."""
from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

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

    def options_class(self, name: str, supplied: tuple[str, ...] = ()) -> type:
        """The frozen dataclass of the options of the function registered under `name`: one field per keyword-only
        parameter (less `supplied`, those the caller fills in), with the function's own default, so the function
        stays the one source of its defaults. Named after the function (ppo_loss -> PpoLossOptions)."""
        return _options_class(self.lookup(name), tuple(supplied))

    def options(self, name: str, kwargs: dict, key: str, supplied: tuple[str, ...] = ()):
        """`options_class(name)` built from the config's `kwargs`, checked before any work: an unknown name, an
        option the function does not take, a required one missing, or a value of the wrong type (a number where
        the default is a number, a bool where it is a bool, ...) raise ValueError naming the config key (`key` is
        the key of the name, e.g. "rl.algo.policy_loss"; its options are `<key>_kwargs`) and the known options."""
        if name not in self:
            raise ValueError(f"{key}={name!r}: unknown {self.kind}; known: {sorted(self)}")
        cls = self.options_class(name, supplied)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        known = ", ".join(f"{n}={f.default!r}" if f.default is not dataclasses.MISSING else f"{n} (required)"
                          for n, f in fields.items()) or "none"
        for k in kwargs:
            if k not in fields:
                raise ValueError(f"{key}_kwargs.{k}: {self.kind} {name!r} takes no option {k!r}; its options: {known}")
        for n, f in fields.items():
            if f.default is dataclasses.MISSING and n not in kwargs:
                raise ValueError(f"{key}_kwargs.{n} is required by {self.kind} {name!r}; its options: {known}")
            if n in kwargs and not _fits(kwargs[n], f):
                raise ValueError(f"{key}_kwargs.{n}={kwargs[n]!r}: {self.kind} {name!r} takes a {_type_name(f)} "
                                 f"there; its options: {known}")
        return cls(**kwargs)


def _expected(f: dataclasses.Field) -> tuple[type, ...] | None:
    """The types a value of option `f` may have: its annotation's, else its default's (None: any)."""
    hint = f.type if isinstance(f.type, type) and f.type is not Any else None
    if hint is None and f.default is not dataclasses.MISSING and f.default is not None:
        hint = type(f.default)
    if hint is None:
        return None
    if hint is float:
        return (int, float)
    return (hint,)


def _fits(value, f: dataclasses.Field) -> bool:
    if value is None:
        return f.default is None
    expected = _expected(f)
    if expected is None:
        return isinstance(value, int | float | str | bool)  # a default of None: a plain value
    return isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected)


def _type_name(f: dataclasses.Field) -> str:
    expected = _expected(f)
    names = "number" if expected == (int, float) else " or ".join(t.__name__ for t in expected or ())
    return names + (" or None" if f.default is None else "")


_PLAIN = {t.__name__: t for t in (int, float, bool, str)}


@functools.cache
def _options_class(fn: Callable, supplied: tuple[str, ...]) -> type:
    fields = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in supplied:
            hint = p.annotation if p.annotation is not p.empty else Any
            hint = _PLAIN.get(hint, hint)  # a postponed annotation ("float") of a plain type
            fields.append((p.name, hint) if p.default is p.empty else (p.name, hint, p.default))
    name = "".join(w.capitalize() for w in fn.__name__.split("_")) + "Options"
    return dataclasses.make_dataclass(name, fields, frozen=True, kw_only=True)
