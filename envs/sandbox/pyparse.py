"""`ast.parse` behind one process-wide lock, for code that parses in verifier threads.

CPython 3.11 keeps the AST conversion's recursion-depth counter in interpreter state, and parses running at once in
several threads can corrupt it: `SystemError: AST constructor recursion depth mismatch` (seen here with the
HumanEval grader under a thread pool). A verifier that crashed on that would score a correct solution 0, so every
parse of candidate or trusted code goes through `parse`.
"""
import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)`, one at a time across threads."""
    with _LOCK:
        return ast.parse(source, filename, mode)
