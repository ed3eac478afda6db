"""The trusted side of code verification: hidden tests against proxies of the solution (stdlib only).

The tests never share a process with the solution. Each call of `candidate` (or of another name the
solution defines) is forwarded to the sandboxed agent and its result decoded into genuine builtins, so
the test's own `==` and `assert` decide. Every assert statement is counted; a canary must fail.
"""

import ast
import builtins

import wire  # standalone: grader_server puts this folder on sys.path (no package import in graders)


class CandidateError(Exception):
    """The solution raised, exited, or returned something that may not cross the boundary."""

    def __init__(self, reply: dict | None):
        self.reply = reply or {"exc": "SolutionExited", "msg": "the solution process ended"}
        super().__init__(f"{self.reply.get('exc')}: {self.reply.get('msg', '')}")


class _Channel:
    def __init__(self, req: int, resp: int):
        self.req, self.resp, self.calls, self.closed = req, resp, 0, False

    def ask(self, msg: dict) -> dict:
        if self.closed:
            raise CandidateError(None)
        try:
            wire.send(self.req, msg)
            reply = wire.recv(self.resp)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            self.closed = True
            raise CandidateError(None)
        return reply


def _proxy(chan: _Channel, name: str):
    def call(*args, **kwargs):
        chan.calls += 1
        reply = chan.ask({"op": "call", "name": name, "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)})
        if not reply.get("ok"):
            raise CandidateError(reply)
        return wire.decode(reply.get("value"))

    call.__name__ = name
    return call


class _Globals(dict):
    """Test globals: names the test does not define resolve to the solution's, through the channel."""

    def __init__(self, chan: _Channel):
        # builtins copied in so that common names never reach the (Python-level) __missing__
        super().__init__(vars(builtins), __name__="__rlpt_test__", __builtins__=builtins)
        self.chan = chan

    def __missing__(self, name):
        if hasattr(builtins, name):
            raise KeyError(name)
        reply = self.chan.ask({"op": "get", "name": name})
        if not reply.get("ok") or reply.get("kind") == "missing":
            raise KeyError(name)
        value = _proxy(self.chan, name) if reply["kind"] == "callable" else wire.decode(reply["value"])
        self[name] = value
        return value


class _CountAsserts(ast.NodeTransformer):
    """Put `__rlpt_hit__(i)` before assert i so the grader knows which asserts ran."""

    def __init__(self):
        self.count = 0

    def visit_Assert(self, node):
        hit = ast.parse(f"__rlpt_hit__({self.count})").body[0]
        self.count += 1
        return [ast.copy_location(hit, node), node]


def canary_ok() -> bool:
    """An assertion that must fail: if it passes, equality or the assert machinery is broken."""
    try:
        assert [1] == [2], "canary"
    except AssertionError:
        return True
    return False


def grade(test: str, entry_point: str, req: int, resp: int) -> dict:
    """Run `check(candidate)` from test against the solution behind (req, resp); return a plain dict."""
    chan = _Channel(req, resp)
    out = {
        "passed": False,
        "error": None,
        "tests_run": 0,
        "tests_expected": 0,
        "calls": 0,
        "canary_ok": canary_ok(),
        "solution_error": None,
    }
    try:
        tree = ast.parse(test)
        counter = _CountAsserts()
        tree = ast.fix_missing_locations(counter.visit(tree))
        out["tests_expected"] = counter.count
        code = compile(tree, "<hidden tests>", "exec")
    except (SyntaxError, ValueError, RecursionError) as e:
        out["error"] = f"test does not compile: {e}"
        return out
    hits = set()
    g = _Globals(chan)
    g["__rlpt_hit__"] = hits.add
    try:
        exec(code, g)
        check = dict.get(g, "check")
        if not callable(check):
            raise NameError("the test defines no check(candidate)")
        probe = chan.ask({"op": "get", "name": entry_point})
        if probe.get("kind") != "callable":
            raise CandidateError(
                probe
                if not probe.get("ok")
                else {"exc": "NameError", "msg": f"solution defines no function {entry_point!r}"}
            )
        check(_proxy(chan, entry_point))
        out["passed"] = True
    except CandidateError as e:
        out["solution_error"] = e.reply
        out["error"] = str(e)[:500]
    except AssertionError as e:
        out["error"] = f"AssertionError: {str(e)[:300]}"
    except BaseException as e:  # a test that errors is a failed test, never a crash of the grader
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    out["tests_run"], out["calls"] = len(hits), chan.calls
    try:
        out["report"] = chan.ask({"op": "report"}) if not chan.closed else None
    except CandidateError:
        out["report"] = None
    return out
