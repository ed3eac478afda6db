"""The trusted side of code verification: hidden tests against proxies of the solution (stdlib only).

The tests never share a process with the solution. Each call of `candidate` is forwarded to the sandboxed
agent; every reply is checked against a strict schema (exact keys and types, bounded sizes) and its value
decoded into genuine builtins, so the test's own `==` and `assert` decide. A reply that breaks the schema is
a protocol violation: the verification fails whatever the test does with the exception. Helpers the task's
prompt defines (HumanEval's `poly`, `encode_cyclic`) run here from the trusted prompt, never from the
solution. Every assert statement is counted; a canary must fail.
"""

import ast
import builtins

import wire  # standalone: grader_server puts this folder on sys.path (no package import in graders)

# The solution's exceptions reach the test as the same builtin type (`except ValueError` works). Not the
# StopIteration family: raised inside map() or a generator it would end the test's loop early, as if done.
MAPPED_EXCEPTIONS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (StopIteration, StopAsyncIteration))
}


class Deadline(BaseException):
    """Raised by the grader worker's alarm: the tests ran past the verification's deadline."""


class CandidateError(Exception):
    """The solution raised something with no builtin equivalent, exited, or broke the protocol."""

    def __init__(self, reply: dict | None):
        self.reply = reply or {"exc": "SolutionExited", "msg": "the solution process ended"}
        super().__init__(f"{self.reply.get('exc')}: {self.reply.get('msg', '')}")


class _Channel:
    """The request/response pipes to the solution; remembers what went wrong, whatever the test catches."""

    def __init__(self, req: int, resp: int):
        self.req, self.resp, self.calls, self.closed = req, resp, 0, False
        self.ended = False  # the solution's process stopped answering
        self.violation: str | None = None  # the first reply that broke the protocol
        self.exc_names: set[str] = set()
        self.unserialisable = False

    def ask(self, msg: dict, schema) -> dict:
        """Send msg; return the reply if it passes schema (values decoded), else raise CandidateError."""
        if self.closed:
            raise CandidateError(None)
        try:
            wire.send(self.req, msg)
        except wire.WireError as e:  # the test's own arguments are too large: the test's error, not the solution's
            raise RuntimeError(f"the test's call cannot cross the sandbox boundary: {e}") from None
        except OSError:
            reply = None
        else:
            try:
                reply = wire.recv(self.resp)
            except Deadline:
                raise
            except BaseException as e:  # OSError, a malformed frame, MemoryError: the channel is unusable
                reply = e
        if reply is None or isinstance(reply, (OSError, wire.TruncatedFrame)):
            self.closed = self.ended = True
            raise CandidateError(None)
        if isinstance(reply, BaseException):
            return self._violate(f"{msg['op']}: {type(reply).__name__}: {str(reply)[:200]}")
        if not schema(reply):
            return self._violate(f"{msg['op']}: reply does not match the schema")
        if "value" in reply:
            try:
                reply["value"] = wire.decode(reply["value"])
            except wire.WireError as e:
                return self._violate(f"{msg['op']}: {e}")
        return reply

    def _violate(self, why: str):
        self.violation = self.violation or why[:300]
        self.closed = True
        raise CandidateError({"exc": "ProtocolViolation", "msg": why[:300]})

    def failure(self, reply: dict) -> Exception:
        """The exception a failed call raises in the test: the same builtin type where there is one."""
        name = reply["exc"]
        if len(self.exc_names) < 16:
            self.exc_names.add(name)
        if reply.get("unserialisable"):
            self.unserialisable = True
            return CandidateError(reply)
        cls = MAPPED_EXCEPTIONS.get(name)
        if cls is None:
            return CandidateError(reply)
        try:
            return cls(reply["msg"])
        except Exception:  # e.g. UnicodeDecodeError needs five arguments
            return CandidateError(reply)


def _proxy(chan: _Channel, name: str):
    def call(*args, **kwargs):
        chan.calls += 1
        msg = {"op": "call", "name": name, "args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
        reply = chan.ask(msg, wire.check_call)
        if reply["ok"]:
            return reply["value"]
        raise chan.failure(reply)

    call.__name__ = name
    return call


class _Globals(dict):
    """Test globals: names the test (and the trusted prompt) do not define may come from the solution."""

    def __init__(self, chan: _Channel, allowed: set[str] | None):
        # builtins copied in so that common names never reach the (Python-level) __missing__
        super().__init__(vars(builtins), __name__="__rlpt_test__", __builtins__=builtins)
        self.chan, self.allowed = chan, allowed

    def __missing__(self, name):
        if hasattr(builtins, name) or (self.allowed is not None and name not in self.allowed):
            raise KeyError(name)
        reply = self.chan.ask({"op": "get", "name": name}, wire.check_get)
        if not reply["ok"]:
            raise self.chan.failure(reply)
        if reply["kind"] == "missing":
            raise KeyError(name)
        value = _proxy(self.chan, name) if reply["kind"] == "callable" else reply["value"]
        self[name] = value
        return value


class _CountAsserts(ast.NodeTransformer):
    """Put `__rlpt_hit__(i)` before assert i so the grader knows which asserts ran.

    `assert False` (any constant false test) is left out: it marks a line that must not be reached (the
    `try: candidate(bad); assert False` / `except ValueError:` pattern) and fails the test if it is.
    """

    def __init__(self):
        self.count = 0

    def visit_Assert(self, node):
        if isinstance(node.test, ast.Constant) and not node.test.value:
            return node
        hit = ast.parse(f"__rlpt_hit__({self.count})").body[0]
        self.count += 1
        return [ast.copy_location(hit, node), node]


def _is_stub(node) -> bool:
    """A def whose body is only a docstring, `pass` or `...`: the solution's to write."""
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in node.body
    )


def trusted_part(prompt: str, entry_point: str) -> tuple[ast.Module, set[str]]:
    """The prompt without the entry point and without stubs, and the names of those stubs.

    What is left (imports, helper functions with a body, constants) is the task's own code: it runs in the
    grader, so a test's `poly(...)` or `encode_cyclic(...)` is never the solution's.
    """
    tree = ast.parse(prompt)
    keep, stubs = [], {entry_point}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.name == entry_point or _is_stub(node)):
            stubs.add(node.name)
        else:
            keep.append(node)
    return ast.Module(body=keep, type_ignores=[]), stubs


def canary_ok() -> bool:
    """An assertion that must fail: if it passes, equality or the assert machinery is broken."""
    try:
        assert [1] == [2], "canary"
    except AssertionError:
        return True
    return False


def blank_result(error: str | None) -> dict:
    """A result with every field codecheck expects: nothing ran, nothing passed."""
    return {
        "passed": False,
        "error": error,
        "tests_run": 0,
        "tests_expected": 0,
        "calls": 0,
        "canary_ok": canary_ok(),
        "deadline": False,
        "report": None,
        "ended": False,
        "violation": None,
        "exc_names": [],
        "unserialisable": False,
    }


def grade(test: str, entry_point: str, req: int, resp: int, prompt: str | None = None) -> dict:
    """Run `check(candidate)` from test against the solution behind (req, resp); return a plain dict.

    Every field is the grader's own, of a fixed type and bounded size (the solution's words only as short
    text): grader_server sends it as is and codecheck checks it again.
    """
    chan = _Channel(req, resp)
    out = blank_result(None)
    hits: set[int] = set()
    try:
        _run(out, hits, chan, test, entry_point, prompt)
    except Deadline:
        out["deadline"], out["passed"] = True, False
        out["error"] = "the tests ran past the deadline"
    out["tests_run"], out["calls"] = len(hits), chan.calls
    out.update(
        ended=chan.ended,
        violation=chan.violation,
        exc_names=sorted(chan.exc_names),
        unserialisable=chan.unserialisable,
    )
    if out["error"] is not None:
        out["error"] = out["error"][:500]
    return out


def _run(out: dict, hits: set, chan: _Channel, test: str, entry_point: str, prompt: str | None) -> None:
    try:
        tree = ast.parse(test)
        counter = _CountAsserts()
        tree = ast.fix_missing_locations(counter.visit(tree))
        out["tests_expected"] = counter.count
        code = compile(tree, "<hidden tests>", "exec")
        trusted, from_solution = trusted_part(prompt, entry_point) if prompt is not None else (None, None)
        trusted_code = compile(trusted, "<task prompt>", "exec") if trusted is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        out["error"] = f"test or prompt does not compile: {e}"
        return
    g = _Globals(chan, from_solution)
    g["__rlpt_hit__"] = hits.add
    try:
        if trusted_code is not None:
            exec(trusted_code, g)
        exec(code, g)
        check = dict.get(g, "check")
        if not callable(check):
            raise NameError("the test defines no check(candidate)")
        probe = chan.ask({"op": "get", "name": entry_point}, wire.check_get)
        if not probe["ok"]:
            raise chan.failure(probe)
        if probe["kind"] != "callable":
            raise CandidateError({"exc": "NameError", "msg": f"solution defines no function {entry_point!r}"})
        check(_proxy(chan, entry_point))
        out["passed"] = True
    except Deadline:
        raise
    except AssertionError as e:
        out["error"] = f"AssertionError: {_describe(e)}"
    except BaseException as e:  # a test that errors is a failed test, never a crash of the grader
        out["error"] = f"{type(e).__name__}: {_describe(e)}"
    if not chan.closed:
        try:
            out["report"] = chan.ask({"op": "report"}, wire.check_report)
        except CandidateError:
            out["report"] = None


def _describe(e: BaseException) -> str:
    try:
        return str(e)[:300]
    except Exception:
        return "<unprintable>"
