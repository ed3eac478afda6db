"""Repository tasks: a generated Python package of 3-8 modules with a visible test file, one or more injected
bugs, and a hidden test suite that only the verifier sees.

Modules are drawn from a library of 20 small functions in 8 modules; later modules call earlier ones, so a bug
in a helper shows up in the tests of its callers. Each task names every function by one of its aliases (`mean`,
`average` or `avg`, ...), so repositories differ in their text too, and each module ends with `<module>_version()`,
a version drawn per repository that the hidden suite checks: the code fixes it, not the prompt, so an answer
written without reading the repository (the no-tool baseline) cannot pass. Tiers grade the difficulty by what the
agent must find:

- tier 1: 3 modules (a random choice), one bug in a function the failing visible test calls directly;
- tier 2: 5 modules, one bug in a helper in another module (the symptom is in its caller's test);
- tier 3: all 8 modules, two bugs in two files, one of them behind a caller.

Task meta: files {path: text} (package `pkg/`, `tests/test_pkg.py`, `run_tests.py`); hidden {test name: source of
`check(candidate)`} where candidate(name, *args) calls the package's function `name` (module: where[name]);
failing (hidden tests the buggy package fails: the ones a fix makes newly pass); bugs [(module, function)]; fix
[(path, buggy line, fixed line)]; answer (the fixed modules as `# file:` blocks); functions {module: names}. The
prompt names the functions, the module of each and the failing visible tests (an issue report), so it is a function
of the repository and the train / eval split by prompt splits repositories; symptoms names those tests. The
hidden expectations come from the correct implementations, run here at generation time (trusted code)."""
from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import stat
import tempfile

from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier
from rlpt.tasks.native.common import domain

# name -> (module, source with {BUG} alternatives as (correct, buggy) pairs, uses, argument generator)
# Each source defines one function; `uses` are functions of earlier modules it calls (import added).


@dataclasses.dataclass(frozen=True)
class Fn:
    name: str
    module: str
    body: str  # the function's source; "@@correct@@buggy@@" marks the line a bug replaces
    uses: tuple[str, ...]
    args: object  # rng -> tuple of arguments


def _ints(rng, n=5, lo=-9, hi=20):
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng, n=3):
    return " ".join(rng.choice(["alpha", "Beta", "gamma", "delta", "Omega", "kappa", "tau", "zeta"])
                    for _ in range(n))


LIBRARY = [
    Fn("clamp", "mathx", "def clamp(x, lo, hi):\n    @@return max(lo, min(x, hi))@@return max(lo, min(x, hi - 1))@@\n",
       (), lambda r: (r.randint(-20, 30), r.randint(-5, 0), r.randint(5, 15))),
    Fn("scale", "mathx", "def scale(xs, k):\n    @@return [x * k for x in xs]@@return [x + k for x in xs]@@\n",
       (), lambda r: (_ints(r), r.randint(2, 5))),
    Fn("mean", "mathx", "def mean(xs):\n    if not xs:\n        return 0.0\n"
       "    @@return sum(xs) / len(xs)@@return sum(xs) / (len(xs) + 1)@@\n", (), lambda r: (_ints(r),)),
    Fn("slug", "text", "def slug(s):\n    @@return '-'.join(s.lower().split())@@return '_'.join(s.lower().split())@@\n",
       (), lambda r: (_words(r),)),
    Fn("vowels", "text", "def vowels(s):\n    @@return sum(c in 'aeiou' for c in s.lower())@@"
       "return sum(c in 'aeiou' for c in s)@@\n",
       (), lambda r: (_words(r),)),
    Fn("initials", "text", "def initials(s):\n    @@return ''.join(w[0].upper() for w in s.split())@@"
       "return ''.join(w[0] for w in s.split())@@\n", (), lambda r: (_words(r),)),
    Fn("chunk", "seq", "def chunk(xs, n):\n    @@return [xs[i:i + n] for i in range(0, len(xs), n)]@@"
       "return [xs[i:i + n] for i in range(0, len(xs) - 1, n)]@@\n", (),
       lambda r: (_ints(r, r.randint(4, 9)), r.randint(2, 3))),
    Fn("dedupe", "seq", "def dedupe(xs):\n    out = []\n    for x in xs:\n"
       "        @@if x not in out:@@if not out or x != out[-1]:@@\n            out.append(x)\n    return out\n",
       (), lambda r: ([r.randint(0, 4) for _ in range(7)],)),
    Fn("running", "seq", "def running(xs):\n    out, total = [], 0\n    for x in xs:\n"
       "        @@total += x@@total = x@@\n        out.append(total)\n    return out\n", (), lambda r: (_ints(r),)),
    Fn("spread", "stats", "def spread(xs):\n    if not xs:\n        return 0\n    @@return max(xs) - min(xs)@@"
       "return max(xs) - xs[0]@@\n", (), lambda r: (_ints(r),)),
    Fn("centered", "stats", "def centered(xs):\n    m = mean(xs)\n    @@return [round(x - m, 3) for x in xs]@@"
       "return [round(m - x, 3) for x in xs]@@\n", ("mean",), lambda r: (_ints(r),)),
    Fn("bounded", "stats", "def bounded(xs, lo, hi):\n    @@return [clamp(x, lo, hi) for x in xs]@@"
       "return [clamp(x, hi, lo) for x in xs]@@\n", ("clamp",),
       lambda r: (_ints(r), r.randint(-5, 0), r.randint(5, 12))),
    Fn("label", "report", "def label(name, xs):\n    @@return f'{slug(name)}:{round(mean(xs), 2)}'@@"
       "return f'{slug(name)}:{round(mean(xs), 1)}'@@\n", ("slug", "mean"),
       lambda r: (_words(r, 2), [x + 0.37 for x in _ints(r)])),
    Fn("tags", "report", "def tags(s):\n    @@return sorted(set(initials(s)))@@return sorted(initials(s))@@\n",
       ("initials",), lambda r: (_words(r, 5),)),
    Fn("pages", "layout", "def pages(xs, n):\n    @@return len(chunk(xs, n))@@return len(chunk(xs, n)) - 1@@\n",
       ("chunk",), lambda r: (_ints(r, r.randint(5, 11)), r.randint(2, 4))),
    Fn("unique_total", "layout", "def unique_total(xs):\n    @@return sum(dedupe(xs))@@"
       "return sum(dedupe(sorted(xs))[1:])@@\n",
       ("dedupe",), lambda r: ([r.randint(0, 6) for _ in range(8)],)),
    Fn("peak", "series", "def peak(xs):\n    @@return max(running(xs)) if xs else 0@@"
       "return running(xs)[-1] if xs else 0@@\n",
       ("running",), lambda r: (_ints(r, 6, -8, 9),)),
    Fn("width", "series", "def width(xs, k):\n    @@return spread(scale(xs, k))@@return spread(xs) * k + 1@@\n",
       ("spread", "scale"), lambda r: (_ints(r), r.randint(2, 4))),
    Fn("vowel_rank", "rank", "def vowel_rank(words):\n    @@return sorted(words, key=lambda w: (-vowels(w), w))@@"
       "return sorted(words, key=lambda w: (vowels(w), w))@@\n", ("vowels",), lambda r: (_words(r, 4).split(),)),
    Fn("top_label", "rank", "def top_label(name, xs):\n    @@return label(name, bounded(xs, 0, 10))@@"
       "return label(name, xs)@@\n", ("label", "bounded"), lambda r: (_words(r, 2), _ints(r))),
]
BY_NAME = {f.name: f for f in LIBRARY}
# Each task names every function by one of these (so repositories differ in their text, not only in which bugs)
ALIASES = {
    "clamp": ("clamp", "bound", "limit"), "scale": ("scale", "times", "mul_all"), "mean": ("mean", "average", "avg"),
    "slug": ("slug", "slugify", "kebab"), "vowels": ("vowels", "count_vowels", "n_vowels"),
    "initials": ("initials", "acronym", "abbrev"), "chunk": ("chunk", "batches", "split_every"),
    "dedupe": ("dedupe", "unique", "distinct"), "running": ("running", "cumsum", "prefix_sums"),
    "spread": ("spread", "value_range", "extent"), "centered": ("centered", "demean", "deviations"),
    "bounded": ("bounded", "clipped", "clamp_all"), "label": ("label", "caption", "headline"),
    "tags": ("tags", "letters", "tag_set"), "pages": ("pages", "page_count", "n_pages"),
    "unique_total": ("unique_total", "distinct_sum", "sum_unique"), "peak": ("peak", "max_prefix", "high_water"),
    "width": ("width", "scaled_range", "stretch"), "vowel_rank": ("vowel_rank", "by_vowels", "vowel_sort"),
    "top_label": ("top_label", "clipped_caption", "safe_label"),
}
_NAME = re.compile(r"\b(" + "|".join(sorted(BY_NAME, key=len, reverse=True)) + r")\b")
MODULE_ORDER = ["mathx", "text", "seq", "stats", "report", "layout", "series", "rank"]
TIERS = (1, 2, 3)
ENV_ID = "rlpt/RepoAgent-v0"
_MODULES_PER_TIER = {1: 3, 2: 5, 3: 8}


def renamed(text: str, names: dict[str, str]) -> str:
    """`text` with every library function name replaced by its name in this task."""
    return _NAME.sub(lambda m: names[m.group(1)], text)


def _source(fn: Fn, buggy: bool) -> str:
    pre, correct, bug, post = fn.body.split("@@")
    return pre + (bug if buggy else correct) + post


def _closure(names: set[str]) -> set[str]:
    """The functions and every helper they use, transitively."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(BY_NAME[n].uses)
    return out


def module_sources(fns: list[Fn], bugs: set[str], versions: dict[str, str]) -> dict[str, str]:
    """{module: source} for the chosen functions, each module importing the helpers it uses from theirs and ending
    with `<module>_version()`, which returns its version from `versions` ({module: "x.y.z"})."""
    out = {}
    for mod in MODULE_ORDER:
        mine = [f for f in fns if f.module == mod]
        if not mine:
            continue
        imports = sorted({(BY_NAME[u].module, u) for f in mine for u in f.uses if BY_NAME[u].module != mod})
        head = "".join(f"from pkg.{m} import {u}\n" for m, u in imports)
        doc = f'"""pkg.{mod}: {", ".join(f.name for f in mine)}."""\n'
        version = f"def {version_name(mod)}():\n    return {versions[mod]!r}\n"
        defs = [_source(f, f.name in bugs) for f in mine] + [version]
        out[mod] = doc + head + ("\n\n" if head else "\n") + "\n\n".join(defs)
    return out


def version_name(module: str) -> str:
    """The function that returns a module's version (per repository: no prompt says it, only the code does)."""
    return f"{module}_version"


_IMPORT = re.compile(r"^from pkg\.(\w+) import (\w+)$")


def _run(sources: dict[str, str], fn: Fn, names: dict[str, str], args: tuple):
    """Call the package's function fn (named as in this task) with args, on `sources` loaded here: the trusted,
    generated code, each module in a private namespace (its `from pkg.X import f` lines bind f from X's; no
    sys.modules, so concurrent generation is safe). ("ok", value), or ("raises", the exception's type name)."""
    spaces: dict[str, dict] = {}
    for mod in MODULE_ORDER:
        if mod not in sources:
            continue
        ns: dict = {"__name__": f"pkg.{mod}"}
        body = []
        for line in sources[mod].splitlines():
            m = _IMPORT.match(line)
            if m:
                ns[m.group(2)] = spaces[m.group(1)][m.group(2)]
            else:
                body.append(line)
        exec(compile("\n".join(body) + "\n", f"pkg/{mod}.py", "exec"), ns)  # noqa: S102  (generated here)
        spaces[mod] = ns
    try:
        return ("ok", spaces[fn.module][names[fn.name]](*args))
    except Exception as e:  # noqa: BLE001  (a buggy variant may raise: that is its observed behaviour)
        return ("raises", type(e).__name__)


def generate_repo(seed: int, tier: int) -> dict:
    """The meta of one repository task (see the module docstring); deterministic in (seed, tier)."""
    return make_repo(random.Random(f"repo/{seed}/{tier}"), tier)


def make_repo(rng: random.Random, tier: int) -> dict:
    """`generate_repo` from a given rng (the task domain's draw)."""
    if tier not in TIERS:
        raise ValueError(f"repo task tier {tier} is not one of {TIERS}")
    for _ in range(100):  # draw until every bug is visible in some hidden test
        k = _MODULES_PER_TIER[tier]
        mods = MODULE_ORDER if k == len(MODULE_ORDER) else sorted(rng.sample(MODULE_ORDER, k), key=MODULE_ORDER.index)
        fns = [f for f in LIBRARY if f.module in mods]
        while True:  # drop functions whose helpers are not in the package, until none is left to drop
            kept = [f for f in fns if all(BY_NAME[u] in fns for u in f.uses)]
            if len(kept) == len(fns):
                break
            fns = kept
        callers = [f for f in fns if f.uses and any(BY_NAME[u].module != f.module for u in f.uses)]
        if len({f.module for f in fns}) < k or (tier > 1 and not callers):
            continue  # a module left without functions, or no cross-module call to hide a bug behind
        names = {n: rng.choice(a) for n, a in ALIASES.items()}
        if tier == 1:
            bugs = {rng.choice(fns).name}
            shown = set(bugs)  # the visible tests call the buggy function itself
        else:
            caller = rng.choice(callers)
            bugs = {rng.choice([u for u in caller.uses if BY_NAME[u].module != caller.module])}
            shown = {caller.name}  # the symptom: a caller's test; the bug sits in a helper in another module
            if tier == 3:
                other = rng.choice([f for f in fns if f.module not in {BY_NAME[b].module for b in bugs}])
                bugs.add(other.name)
                shown.add(other.name)
        # drawn from their own stream, so the rest of the repository is what it was before versions existed
        vrng = random.Random(f"versions|{sorted(bugs)}|{sorted(names.items())}|{mods}")
        versions = {m: f"{vrng.randint(0, 9)}.{vrng.randint(0, 9)}.{vrng.randint(0, 9)}" for m in mods}
        good = {m: renamed(t, names) for m, t in module_sources(fns, set(), versions).items()}
        bad = {m: renamed(t, names) for m, t in module_sources(fns, bugs, versions).items()}
        hidden, failing, visible = {}, [], []
        for f in fns:
            calls = [f.args(rng) for _ in range(3)]
            want = [_run(good, f, names, a) for a in calls]
            if any(w[0] != "ok" for w in want):
                continue
            alias = names[f.name]
            lines = "".join(f"    assert candidate({alias!r}, *{a!r}) == {w[1]!r}\n" for a, w in zip(calls, want))
            hidden[f"test_{alias}"] = "def check(candidate):\n" + lines
            if any(_run(bad, f, names, a) != w for a, w in zip(calls, want)):
                failing.append(f.name)
            if f.name in shown:  # a visible test that fails on the buggy package: the symptom
                for a in (f.args(rng) for _ in range(20)):
                    w = _run(good, f, names, a)
                    if w[0] == "ok" and _run(bad, f, names, a) != w:
                        visible.append((f, a, w[1]))
                        break
            elif f.name not in _closure(bugs) and rng.random() < 0.5:
                a = f.args(rng)
                visible.append((f, a, _run(good, f, names, a)[1]))
        broken = {b for b in bugs if any(b in _closure({t}) for t in failing)}
        if broken == bugs and {f.name for f, _, _ in visible} >= shown:
            break
    else:
        raise RuntimeError(f"repo task tier {tier}: 100 draws and none showed every bug in a hidden test")
    # the code, not the prompt, fixes these: a policy that writes modules blind cannot pass (one check for all the
    # modules: each hidden test is a sandboxed run)
    hidden["test_versions"] = "def check(candidate):\n" + "".join(
        f"    assert candidate({version_name(m)!r}) == {versions[m]!r}\n" for m in mods)
    tests = "from pkg import " + ", ".join(sorted({f.module for f, _, _ in visible})) + "\n\n"
    for f, a, w in visible:
        args = ", ".join(repr(x) for x in a)
        tests += f"\ndef test_{names[f.name]}():\n    assert {f.module}.{names[f.name]}({args}) == {w!r}\n\n"
    files = {f"pkg/{m}.py": src for m, src in bad.items()}
    files["pkg/__init__.py"] = '"""A generated package; see its modules."""\n'
    files["tests/test_pkg.py"] = tests
    files["run_tests.py"] = RUNNER
    fixed = "".join(f"```python\n# file: pkg/{m}.py\n{good[m]}```\n" for m in sorted(good)
                    if good[m] != bad[m])
    fix = []
    for b in sorted(bugs):
        pre, correct, bug, _ = BY_NAME[b].body.split("@@")
        indent = pre.rsplit("\n", 1)[-1]
        fix.append((f"pkg/{BY_NAME[b].module}.py", indent + renamed(bug, names), indent + renamed(correct, names)))
    return {"files": files, "hidden": hidden, "failing": sorted(f"test_{names[n]}" for n in failing),
            "bugs": sorted((BY_NAME[b].module, names[b]) for b in bugs), "fix": fix,
            "where": {**{names[f.name]: f.module for f in fns}, **{version_name(m): m for m in mods}},
            "package": "pkg", "modules": sorted(bad),
            "visible_tests": [f"test_{names[f.name]}" for f, _, _ in visible], "answer": fixed,
            "functions": {m: [names[f.name] for f in fns if f.module == m] for m in sorted(bad)},
            "symptoms": sorted(f"test_{names[n]}" for n in shown)}


HOOK_FILES = ("conftest.py", "sitecustomize.py", "usercustomize.py")
MAX_MODULE_BYTES = 50_000


def workspace_flags(root: str, files: dict[str, str]) -> list[str]:
    """Signs of tampering with the grading in a workspace that started as `files`: edited, added, deleted or
    replaced tests (edited_tests), a changed runner (patched_runner), an import hook file (hook_file: conftest,
    sitecustomize, usercustomize, *.pth) and symlinks (symlink_out when it leads outside the workspace, else
    symlink); a tree that cannot be walked (too deep, unreadable) is unreadable_workspace."""
    flags = set()
    real_root = os.path.realpath(root)

    def fail(err):
        flags.add("unreadable_workspace")

    try:
        for folder, dirs, names in os.walk(root, onerror=fail):
            for name in dirs + names:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                st = os.lstat(path)
                guarded = rel.startswith("tests" + os.sep) or rel in ("tests", "run_tests.py")
                if stat.S_ISLNK(st.st_mode):
                    target = os.path.realpath(path)
                    inside = target == real_root or target.startswith(real_root + os.sep)
                    flags.add("symlink" if inside else "symlink_out")
                elif not stat.S_ISREG(st.st_mode):
                    if guarded and not stat.S_ISDIR(st.st_mode):  # a FIFO, socket or device among the tests
                        flags.add("patched_runner" if rel == "run_tests.py" else "edited_tests")
                    continue
                if name in HOOK_FILES or name.endswith(".pth"):
                    flags.add("hook_file")
                if guarded and not rel.endswith(".pyc") and _text(root, rel) != files.get(rel):
                    flags.add("patched_runner" if rel == "run_tests.py" else "edited_tests")
    except OSError:  # a path too long to stat, a folder that vanished: the workspace is not gradable
        flags.add("unreadable_workspace")
    for rel in files:  # a test or the runner deleted or replaced by something else than a file is an edit too
        path = os.path.join(root, rel)
        regular = os.path.lexists(path) and stat.S_ISREG(os.lstat(path).st_mode)
        if (rel.startswith("tests/") or rel == "run_tests.py") and not regular:
            flags.add("patched_runner" if rel == "run_tests.py" else "edited_tests")
    return sorted(flags)


def _text(root: str, rel: str, max_bytes: int = MAX_MODULE_BYTES + 1) -> str | None:
    """`read_inside`'s text of a workspace file, None where it is absent or not a regular file."""
    from rlpt.envs.sandbox.workspace import read_inside  # on use (start-up: gymnasium, via rlpt.envs)

    try:
        return read_inside(root, rel, max_bytes)
    except ValueError:
        return None


def package_sources(root: str, package: str, modules) -> dict[str, str]:
    """{module: source} of the package's modules named in `modules` (the task's: a module the agent adds is
    not loaded), regular files inside the workspace only (a FIFO or folder in a module's place, or a link out,
    is skipped), at most MAX_MODULE_BYTES each; the package's __init__ is not run."""
    out = {}
    for mod in modules:
        text = _text(root, f"{package}/{mod}.py")
        if text is not None and len(text) <= MAX_MODULE_BYTES:
            out[mod] = text
    return out


def loader_program(sources: dict[str, str], package: str, where: dict[str, str]) -> str:
    """The solution program the grader runs: the package's modules from `sources` behind an import hook (so
    `from pkg.mathx import mean` works), and call(name, *args) -> pkg.<where[name]>.<name>(*args)."""
    return f'''import importlib.abc, importlib.util, sys
_SOURCES = {sources!r}
_WHERE = {where!r}
_PKG = {package!r}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == _PKG:
            return importlib.util.spec_from_loader(name, self, is_package=True)
        head, _, mod = name.partition(".")
        if head == _PKG and mod in _SOURCES:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ == _PKG:
            module.__path__ = []
            return
        mod = module.__name__.partition(".")[2]
        exec(compile(_SOURCES[mod], _PKG + "/" + mod + ".py", "exec"), module.__dict__)


sys.meta_path.insert(0, _Finder())


def call(name, *args):
    if name not in _WHERE:
        raise NameError(name)
    return getattr(importlib.import_module(_PKG + "." + _WHERE[name]), name)(*args)
'''


def verify_repo(checker, root: str, meta: dict, *, timeout_s: float = 10.0, extra_flags=()) -> Verdict:
    """Grade the workspace at `root`: Verdict(1, passed) when every hidden test passes and nothing was tampered
    with. details: hidden_passed / hidden_total, newly_passing (of meta["failing"]), regressions, process (the
    share of the initially failing hidden tests now passing, 0 with a regression: the reward mixture's process
    component), flags."""
    flags = sorted(set(workspace_flags(root, meta["files"])) | set(extra_flags))
    sources = package_sources(root, meta["package"], meta["modules"])
    program = loader_program(sources, meta["package"], meta["where"])
    results, hacks = dict.fromkeys(meta["hidden"], False), set()
    failing = set(meta["failing"])
    for name, test in meta["hidden"].items():
        v = checker.check(program, test, "call", timeout_s=timeout_s)
        results[name] = bool(v.passed)
        vflags = set(v.details.get("flags") or ())
        hacks |= {f for f in vflags if not f.startswith("killed_")}  # a timeout or resource kill is no hack
        timed_out = "killed_deadline" in vflags or v.details.get("killed_for") is not None
        if (not v.passed and name not in failing) or timed_out:
            break  # a regression (the score and process credit are 0 whatever follows) or a hang: stop paying
    newly = sorted(n for n in failing if results[n])
    regressions = sorted(n for n, ok in results.items() if not ok and n not in failing)
    flags = sorted(set(flags) | hacks)
    process = 0.0 if regressions or flags else len(newly) / max(len(failing), 1)
    passed = all(results.values()) and not flags
    details = {"hidden_passed": sum(results.values()), "hidden_total": len(results), "newly_passing": newly,
               "regressions": regressions, "process": process, "flags": flags}
    if flags:
        details["error"] = "hacking: " + ", ".join(flags)
    return Verdict(1.0 if passed else 0.0, passed, details)


def repo_prompt(meta: dict) -> str:
    """The task as an issue report: the package's functions with the module of each, and which visible tests
    fail."""
    fns = ", ".join(f"{f} in pkg/{m}.py" for m, fs in meta["functions"].items() for f in fs)
    return (f"The Python package `{meta['package']}` has at least one bug: {', '.join(meta['symptoms'])} "
            f"fail{'s' if len(meta['symptoms']) == 1 else ''} (python run_tests.py runs tests/test_pkg.py). "
            f"Functions: {fns}. Find the cause and fix the package's code so that its tests pass and it behaves "
            "as its functions' names and tests say. Do not modify tests/ or run_tests.py.")



_BLOCK = re.compile(r"```(?:python)?[ \t]*\n# file: ([\w./-]+)\n(.*?)```", re.DOTALL)


def response_files(response: str) -> dict[str, str]:
    """Files a text answer writes: fenced blocks whose first line is `# file: <path>`."""
    return {path: text for path, text in _BLOCK.findall(response)}


@register_verifier("repo_hidden_tests")
def repo_hidden_tests(task, response: str) -> Verdict:
    """A text answer without tools (the no-tool baseline): the files it writes (`response_files`) over a copy of
    the task's repository, graded by `verify_repo`. The answer sees the prompt only, not the code."""
    from rlpt.envs.sandbox import default_checker  # on use (start-up: gymnasium, the sandbox's grader pool)
    from rlpt.envs.sandbox.workspace import write_inside  # on use (start-up: gymnasium, via rlpt.envs)

    written = response_files(response)
    if not written:
        return Verdict(0.0, False, {"error": "no file blocks", "process": 0.0, "flags": []})
    root = tempfile.mkdtemp(prefix="rlpt_repo_")
    try:
        for rel, text in {**task.meta["files"], **written}.items():
            try:
                write_inside(root, rel, text, None)
            except ValueError as e:  # a path out of the repository, onto a folder
                return Verdict(0.0, False, {"error": str(e), "process": 0.0, "flags": ["path_out"]})
        return verify_repo(default_checker(), root, task.meta)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _make(rng, tier):
    meta = make_repo(rng, tier)
    return repo_prompt(meta), meta


def domains():
    return [domain("agent/repo", _make, "repo_hidden_tests",
                   "fix injected bugs in a generated multi-file package; graded by hidden tests (RepoAgent tools)",
                   tiers=TIERS, env_id=ENV_ID, max_response_chars=60_000)]


# The visible test runner in the workspace (the agent may run or even edit it; grading never uses it).
RUNNER = '''"""Run tests/test_pkg.py: one line per test, then a count."""
import sys
import traceback

sys.path.insert(0, ".")
import tests.test_pkg as suite  # noqa: E402

failed = 0
for name in sorted(n for n in dir(suite) if n.startswith("test_")):
    try:
        getattr(suite, name)()
        print(f"PASS {name}")
    except Exception:
        failed += 1
        print(f"FAIL {name}")
        traceback.print_exc(limit=3, file=sys.stdout)
print(f"{failed} failed")
sys.exit(1 if failed else 0)
'''
