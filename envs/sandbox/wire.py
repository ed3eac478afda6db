"""Typed, strict serialisation of plain Python values for the untrusted/trusted channel (stdlib only).

Only exact builtin types cross (type(x) is int, not isinstance): an object with a rigged __eq__, or a
subclass of int or str, cannot be encoded, so equality is always decided on genuine builtins in the grader.
"""

import json
import math
import os
import struct

MAX_FRAME = 16 << 20
MAX_DEPTH = 64


class WireError(ValueError):
    """A value that may not cross the channel, or a malformed frame."""


def encode(x, depth: int = 0):
    """Plain value -> JSON-able tagged tree."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return {"i": str(x)} if abs(x) >= 1 << 53 else x
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


def decode(x, depth: int = 0):
    """Tagged tree -> plain value (only builtin types are ever constructed)."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(x)
    if x is None or t in (bool, str, int):
        return x
    if t is float:
        return x
    if t is list:
        return [decode(v, depth + 1) for v in x]
    if t is dict and len(x) == 1:
        ((tag, v),) = x.items()
        if tag == "i" and type(v) is str:
            return int(v)
        if tag == "f":
            return float(v)
        if tag == "t" and type(v) is list:
            return tuple(decode(e, depth + 1) for e in v)
        if tag == "d" and type(v) is list:
            return {decode(k, depth + 1): decode(e, depth + 1) for k, e in v}
        if tag == "s" and type(v) is list:
            return {decode(e, depth + 1) for e in v}
        if tag == "fs" and type(v) is list:
            return frozenset(decode(e, depth + 1) for e in v)
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "c" and type(v) is list and len(v) == 2:
            return complex(float(v[0]), float(v[1]))
    raise WireError(f"malformed value on the wire: {str(x)[:80]}")


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
        raise WireError("stream ended inside a frame")
    msg = json.loads(body)
    if type(msg) is not dict:
        raise WireError("frame is not an object")
    return msg


def _read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            if got == 0:
                return None
            raise WireError("stream ended inside a frame")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
