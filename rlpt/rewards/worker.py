"""The check worker process (`python -m rlpt.rewards.worker`): runs module-level functions for
rlpt.rewards.isolated, one request at a time, over its length-prefixed pickle protocol on stdin/stdout.

Unlike a multiprocessing spawn worker it never imports the caller's `__main__`, so a caller's script
needs no `if __name__ == "__main__":` guard. Only rlpt's own processes speak this protocol.
"""

import importlib
import os
import sys

from rlpt.rewards.isolated import describe, encode, read_message, write_bytes


def resolve(module: str, qualname: str):
    """The object named `qualname` in `module` (imported if needed)."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def serve(requests: int, replies: int) -> None:
    """Answer requests until the parent closes its end. A request is (sys_path, module, qualname, args):
    the worker imports with the caller's sys.path, so it finds what the caller can, and answers
    (True, fn(*args)) or (False, 'ExceptionType: message')."""
    while (request := read_message(requests)) is not None:
        path, module, qualname, args = request
        if path != sys.path:
            sys.path[:] = path
            importlib.invalidate_caches()
        try:
            reply = (True, resolve(module, qualname)(*args))
        except Exception as err:  # the caller's check failed: report it, keep serving
            reply = (False, describe(err))
        try:
            data = encode(reply)
        except Exception as err:  # an unpicklable result
            data = encode((False, f"result not picklable: {describe(err)}"))
        try:
            write_bytes(replies, data)
        except OSError:  # the caller is gone
            return


def main() -> None:
    # The protocol owns the original stdin/stdout; a check that prints (or reads) gets stderr (or nothing).
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    serve(requests, replies)


if __name__ == "__main__":
    main()
