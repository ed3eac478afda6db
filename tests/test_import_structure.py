"""The package picture (#38, docs/design.md): no import of a private name across packages, and no pair of sibling
packages that import each other. A package is `rlpt.<name>` (envs/ and kernels/ install as rlpt.envs and
rlpt.kernels), except the subpackages in LAYERS_OF_THEIR_OWN; function-local imports count. KNOWN_CYCLES would
list pairs still to untangle (it is empty): the test fails on a new pair, and on a listed one that is gone."""
import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KNOWN_CYCLES = set()


# Subpackages that are a layer of their own: the sandbox sits below the task domains and verdicts that the
# environments beside it use (its own imports are the sandbox's modules and rlpt.rewards' Verdict).
LAYERS_OF_THEIR_OWN = ("rlpt.envs.sandbox",)


def _package(module: str) -> str:
    for sub in LAYERS_OF_THEIR_OWN:
        if module == sub or module.startswith(sub + "."):
            return sub
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "rlpt" and len(parts) > 1 else parts[0]


def _modules():
    """(path, dotted module name) of every source file of the installed packages."""
    for root in ("rlpt", "envs", "kernels"):
        for folder, _, files in os.walk(os.path.join(REPO, root)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    mod = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                    yield path, mod if mod.startswith("rlpt") else "rlpt." + mod


def _scan():
    """(edges {(from package, to package): [where]}, private uses [where])."""
    edges, private = {}, []
    for path, mod in _modules():
        here = _package(mod)
        tree = ast.parse(open(path).read())
        foreign = set()  # names bound to another package's modules or objects in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rlpt"):
                there = _package(node.module)
                if there == here:
                    continue
                edges.setdefault((here, there), []).append(f"{path}:{node.lineno}")
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{path}:{node.lineno} imports {node.module}.{a.name}")
                    foreign.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("rlpt") and _package(a.name) != here:
                        edges.setdefault((here, _package(a.name)), []).append(f"{path}:{node.lineno}")
                        if a.asname:
                            foreign.add(a.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in foreign
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.append(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")
    return edges, private


def test_no_private_name_is_used_across_packages():
    _, private = _scan()
    assert not private, "private names used from another package (make them public or move them):\n" + "\n".join(
        private)


def test_no_new_pair_of_packages_imports_each_other():
    edges, _ = _scan()
    mutual = {tuple(sorted(pair)) for pair in edges if pair[::-1] in edges}
    new = mutual - KNOWN_CYCLES
    where = {p: edges[p][:3] + edges[p[::-1]][:3] for p in new}
    assert not new, f"packages that now import each other: {where}"
    gone = KNOWN_CYCLES - mutual
    assert not gone, f"untangled (remove them from KNOWN_CYCLES): {sorted(gone)}"


def test_the_sandbox_layer_loads_without_the_environments_or_tasks():
    # Importing a subpackage runs its parent's __init__ first: rlpt.envs must stay light for the sandbox to be a
    # layer below the task domains at run time too, not only in the import graph.
    import subprocess
    import sys

    code = ("import sys, rlpt.envs.sandbox; "
            "print(sorted(m for m in sys.modules if m.startswith(('rlpt.tasks', 'rlpt.envs.base', 'rlpt.models'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_function_local_imports_say_why():
    """rlpt imports sit at module top; one inside a function says why on its line (`# on use (start-up: jax)`, an
    import cycle, an optional dependency): a measured start-up cost or a cycle, never habit."""
    silent = []
    for path, _ in _modules():
        src = open(path).read()
        lines = src.splitlines()
        for fn in ast.walk(ast.parse(src)):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                if any(n.startswith("rlpt") for n in names) and "#" not in " ".join(
                        lines[node.lineno - 1:node.end_lineno]):
                    silent.append(f"{path}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not silent, "function-local imports without a reason (move them to the top):\n" + "\n".join(
        sorted(set(silent)))


# Files that are not modules of the package: the sandbox's grader runs as a standalone script inside the sandbox.
STANDALONE = {"rlpt.envs.sandbox.grader", "rlpt.envs.sandbox.grader_server"}


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_process():
    """A module-top import can make an import cycle that only an import order starting at one module shows: each
    module is imported alone, in its own process (a few minutes on 2 cores; run it after moving an import)."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def error(mod: str) -> str | None:
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, cwd="/")
        return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["(no output)"])[-1]

    mods = sorted({mod for _, mod in _modules()} - STANDALONE)
    with ThreadPoolExecutor(2) as pool:
        failed = [f"{m}: {e}" for m, e in zip(mods, pool.map(error, mods), strict=True) if e]
    assert not failed, "modules that do not import alone:\n" + "\n".join(failed)
