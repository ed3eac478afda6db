"""Typed, strict serialisation of plain Python values for the untrusted/trusted channel (stdlib only).

Only exact builtin types cross (type(x) is int, not isinstance): an object with a rigged __eq__, or a
subclass of int or str, cannot be encoded, so equality is always decided on genuine builtins in the grader.
"""

import json
import math
import os
import re
import struct

MAX_FRAME = 16 << 20
MAX_DEPTH = 64
_HEX = re.compile(r"-?[0-9a-f]+")
_NONFINITE = ("inf", "-inf", "nan")
MAX_TEXT = 1000
REPORT_KEYS = {"load_error", "events", "opened", "canary", "builtins_changed", "test_modules"}


class WireError(ValueError):
    """A value that may not cross the channel, or a malformed frame."""


class TruncatedFrame(WireError):
    """The stream ended inside a frame: the writer died mid-message (a kill at a limit does that)."""


def encode(x, depth: int = 0):
    """Plain value -> JSON-able tagged tree."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:  # hex: unlike str(), no 4,300-digit limit and linear time
        return {"x": format(x, "x")} if abs(x) >= 1 << 53 else x
    if t is float:
        return {"f": repr(x)} if not math.isfinite(x) else {"f": x}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(v, depth + 1) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    raise WireError(f"type {t.__module__}.{t.__qualname__} cannot cross the sandbox boundary")


def decode(x):
    """Tagged tree -> plain value (only builtin types are ever constructed); anything malformed: WireError."""
    try:
        return _decode(x, 0)
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:  # int('zz'), {[1]: 2}, ...
        raise WireError(f"malformed value on the wire: {type(e).__name__}") from None


def _decode(x, depth: int):
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(x)
    if x is None or t in (bool, str, int):
        return x
    if t is float:
        return x
    if t is list:
        return [_decode(v, depth + 1) for v in x]
    if t is dict and len(x) == 1:
        ((tag, v),) = x.items()
        if tag == "x" and type(v) is str and _HEX.fullmatch(v):
            return int(v, 16)
        if tag == "f" and (type(v) is float or v in _NONFINITE):
            return float(v)
        if tag == "t" and type(v) is list:
            return tuple(_decode(e, depth + 1) for e in v)
        if tag == "d" and type(v) is list:
            return {_decode(k, depth + 1): _decode(e, depth + 1) for k, e in v}
        if tag == "s" and type(v) is list:
            return {_decode(e, depth + 1) for e in v}
        if tag == "fs" and type(v) is list:
            return frozenset(_decode(e, depth + 1) for e in v)
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "c" and type(v) is list and len(v) == 2:
            return complex(float(v[0]), float(v[1]))
    raise WireError(f"malformed value on the wire: a {t.__name__} that is no encoded value")


# Schemas of the agent's replies: exact keys, exact types, bounded sizes (values are checked by decode).


def _text(x, limit: int = MAX_TEXT) -> bool:
    return type(x) is str and len(x) <= limit


def _texts(x, count: int, limit: int) -> bool:
    return type(x) is list and len(x) <= count and all(_text(v, limit) for v in x)


def check_error(r: dict) -> bool:
    """{"ok": false, "exc": name, "msg": text} with an optional "unserialisable": true."""
    keys = set(r)
    plain = keys == {"ok", "exc", "msg"}
    return (
        (plain or (keys == {"ok", "exc", "msg", "unserialisable"} and r["unserialisable"] is True))
        and r["ok"] is False
        and _text(r["exc"], 100)
        and _text(r["msg"])
    )


def check_call(r: dict) -> bool:
    return (set(r) == {"ok", "value"} and r["ok"] is True) or check_error(r)


def check_get(r: dict) -> bool:
    if r.get("ok") is True and r.get("kind") in ("missing", "callable"):
        return set(r) == {"ok", "kind"}
    if r.get("ok") is True and r.get("kind") == "value":
        return set(r) == {"ok", "kind", "value"}
    return check_error(r)


def check_report(r: dict) -> bool:
    """The agent's report: exactly REPORT_KEYS, each of its type, bounded."""
    canary, events = r.get("canary"), r.get("events")
    return (
        set(r) == REPORT_KEYS
        and (r["load_error"] is None or _text(r["load_error"]))
        and type(events) is dict
        and len(events) <= 64
        and all(_text(k, 100) and type(v) is int and v >= 0 for k, v in events.items())
        and _texts(r["opened"], 32, 300)
        and type(canary) is dict
        and set(canary) == {"eq", "assert"}
        and type(canary["eq"]) is bool
        and type(canary["assert"]) is bool
        and _texts(r["builtins_changed"], 64, 100)
        and _texts(r["test_modules"], 64, 300)
    )


def send(fd: int, msg: dict) -> None:
    """Write one length-prefixed JSON frame."""
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise WireError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    buf = memoryview(struct.pack("!I", len(data)) + data)
    while buf:
        buf = buf[os.write(fd, buf) :]


def recv(fd: int) -> dict | None:
    """Read one frame; None at end of stream."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack("!I", head)
    if n > MAX_FRAME:
        raise WireError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    body = _read_exact(fd, n)
    if body is None:
        raise TruncatedFrame("stream ended inside a frame")
    try:
        msg = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:  # garbage, or nesting past the parser's recursion limit
        raise WireError(f"malformed frame: {type(e).__name__}: {str(e)[:80]}") from None
    if type(msg) is not dict:
        raise WireError("frame is not an object")
    return msg


def _no_constant(name: str):
    raise WireError(f"{name} is not a JSON value")


def _read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            if got == 0:
                return None
            raise TruncatedFrame("stream ended inside a frame")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
