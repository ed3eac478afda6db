"""Alert sinks: a log line, a TensorBoard text event + scalar, an alerts.jsonl record, and named hooks."""
import dataclasses
import json
import logging
import os
from collections.abc import Callable

log = logging.getLogger("rlpt.observe.alerts")

# name -> callable(alert_record: dict); chosen by name from ObserveConfig.alert_hooks.
ALERT_HOOKS: dict[str, Callable[[dict], None]] = {}


def register_alert_hook(name: str):
    """Decorator: register fn(record: dict) as the alert hook `name` (e.g. a pager or a run-stopper)."""

    def wrap(fn):
        if name in ALERT_HOOKS and ALERT_HOOKS[name] is not fn:
            raise KeyError(f"alert hook {name!r} is already registered")
        ALERT_HOOKS[name] = fn
        return fn

    return wrap


def get_alert_hook(name: str) -> Callable[[dict], None]:
    if name not in ALERT_HOOKS:
        raise KeyError(f"observe.alert_hooks: unknown hook {name!r}; registered: {sorted(ALERT_HOOKS)}")
    return ALERT_HOOKS[name]


class AlertSink:
    """Sends each alert (a dataclass with .step, .message()) to every channel; counts them by kind."""

    def __init__(self, out_dir: str, tb=None, hooks: list[str] = ()):
        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, "alerts.jsonl")
        self.tb = tb
        self.hooks = [get_alert_hook(h) for h in hooks]  # fail at start-up on an unknown name
        self.counts: dict[str, int] = {}
        self._f = open(self.path, "a")

    def emit(self, kind: str, alert) -> dict:
        record = {"kind": kind, **dataclasses.asdict(alert), "message": alert.message()}
        log.warning("[alert %s] %s", kind, record["message"])
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        if self.tb is not None:
            self.tb.text(f"alerts/{kind}", record["message"], alert.step)
            self.tb.scalar(f"alerts/{kind}", 1.0, alert.step)
        for hook in self.hooks:
            hook(record)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return record

    def close(self):
        self._f.close()
