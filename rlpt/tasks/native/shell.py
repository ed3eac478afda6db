"""Shell tasks: reach a target workspace state; verified by running the script in envs.sandbox and
inspecting the files it leaves behind."""

import os
import re
import shutil
import stat
import tempfile

from rlpt.rewards.verdict import Verdict
from rlpt.rewards.verifiers import register_verifier
from rlpt.tasks.native.common import domain

_WORDS = "alpha beta gamma delta omega kappa sigma tau zeta iota lambda rho".split()
_EXTS = ("txt", "log", "csv")
_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.DOTALL)
ENV_ID = "rlpt/ShellAgent-v0"
_SANDBOX = None
_MAX_FILE = 1 << 16


def _lines(rng, n):
    return "".join(rng.choice(_WORDS) + "\n" for _ in range(n))


def _pick(rng, fs, ext=None):
    names = sorted(p for p in fs if "/" not in p and (ext is None or p.endswith("." + ext)))
    return rng.choice(names) if names else None


def _fresh(rng, fs, ext):
    while True:
        name = f"{rng.choice(_WORDS)}{rng.randint(1, 99)}.{ext}"
        if name not in fs:
            return name


def _op(rng, fs, dirs, level):
    """Apply one random operation of the given level to fs/dirs; return (instruction, bash)."""
    kind = rng.choice(
        {
            1: ["create", "mkdir", "rename"],
            2: ["delete_ext", "concat", "count"],
            3: ["move_ext", "sort_uniq", "copy_bak", "replace"],
        }[level]
    )
    ext = rng.choice([e for e in _EXTS if _pick(rng, fs, e)] or ["txt"])
    if kind == "create" or _pick(rng, fs) is None:
        name, word = _fresh(rng, fs, "txt"), rng.choice(_WORDS)
        fs[name] = word + "\n"
        return f"Create a file {name} containing the single line {word}.", f"echo {word} > {name}"
    if kind == "mkdir":
        d = f"{rng.choice(_WORDS)}_dir"
        dirs.add(d)
        return f"Create an empty directory {d}.", f"mkdir -p {d}"
    if kind == "rename":
        a = _pick(rng, fs)
        b = _fresh(rng, fs, a.rsplit(".", 1)[1])
        fs[b] = fs.pop(a)
        return f"Rename {a} to {b}.", f"mv {a} {b}"
    if kind == "delete_ext":
        for p in [p for p in fs if "/" not in p and p.endswith("." + ext)]:
            del fs[p]
        return f"Delete every .{ext} file in the current directory.", f"rm -f -- *.{ext}"
    if kind == "concat":
        a, b = _pick(rng, fs), _pick(rng, fs)
        c = _fresh(rng, fs, "txt")
        fs[c] = fs[a] + fs[b]
        return f"Write the contents of {a} followed by {b} into a new file {c}.", f"cat {a} {b} > {c}"
    if kind == "count":
        a = _pick(rng, fs)
        fs["count.txt"] = f"{fs[a].count(chr(10))}\n"
        return (
            f"Write the number of lines of {a} (just the number) into count.txt.",
            f"wc -l < {a} > count.txt",
        )
    if kind == "move_ext":
        d = f"{ext}_files"
        for p in [p for p in fs if "/" not in p and p.endswith("." + ext)]:
            fs[f"{d}/{p}"] = fs.pop(p)
        dirs.add(d)
        return f"Move every .{ext} file into a new directory {d}.", f"mkdir -p {d} && mv -- *.{ext} {d}/"
    if kind == "sort_uniq":
        a = _pick(rng, fs)
        fs["sorted.txt"] = "".join(line + "\n" for line in sorted(set(fs[a].splitlines())))
        return (
            f"Write the lines of {a}, sorted and without duplicates, into sorted.txt.",
            f"sort -u {a} > sorted.txt",
        )
    if kind == "copy_bak":
        for p in [p for p in fs if "/" not in p and p.endswith("." + ext)]:
            fs[p + ".bak"] = fs[p]
        return (
            f"For every .{ext} file in the current directory, create a copy named <file>.bak.",
            f'for f in *.{ext}; do cp -- "$f" "$f.bak"; done',
        )
    a = _pick(rng, fs)
    old, new = rng.choice(sorted(set(fs[a].split()))), rng.choice(["x", "y", "z"])
    fs[a] = fs[a].replace(old, new)
    return f"In {a}, replace every occurrence of {old} with {new}.", f"sed -i 's/{old}/{new}/g' {a}"


def _make(rng, t):
    fs = {_fresh(rng, {}, rng.choice(_EXTS)): _lines(rng, rng.randint(2, 5)) for _ in range(rng.randint(3, 6))}
    initial = dict(fs)
    dirs: set[str] = set()
    levels = {1: [1], 2: [2], 3: [3], 4: [2, 3], 5: [1, 2, 3]}[t]
    steps = [_op(rng, fs, dirs, level) for level in levels]
    listing = "\n".join(f"--- {p}\n{c}" for p, c in sorted(initial.items()))
    prompt = (
        "The current directory contains these files:\n" + listing + "\nWrite a bash script that does, "
        "in order:\n" + "\n".join(f"{i + 1}. {s[0]}" for i, s in enumerate(steps)) + "\nReply with the script only."
    )
    expected = {**{p: c for p, c in fs.items()}, **{d + "/": None for d in sorted(dirs)}}
    for p in fs:  # parent folders of moved files are part of the state
        if "/" in p:
            expected[p.rsplit("/", 1)[0] + "/"] = None
    return prompt, {"answer": "\n".join(s[1] for s in steps) + "\n", "files": initial, "expected": expected}


def snapshot(root: str) -> dict:
    """{relative path: text} for regular files, {dir/: None} for folders; links and devices are not read."""
    state: dict = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            state[rel + "/"] = None
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            key = os.path.normpath(os.path.join(rel, name))
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_size <= _MAX_FILE:
                with open(path, "rb") as fh:
                    state[key] = fh.read().decode("utf-8", "replace")
            else:
                state[key] = f"<special file {stat.filemode(info.st_mode)}>"
    return state


def _same_state(expected: dict, got: dict) -> bool:
    """Same paths; file texts equal up to trailing whitespace."""
    if set(expected) != set(got):
        return False
    return all(
        e is None and g is None or (e is not None and g is not None and e.rstrip() == g.rstrip())
        for e, g in ((expected[k], got[k]) for k in expected)
    )


def _sandbox():
    global _SANDBOX
    if _SANDBOX is None:
        from rlpt.envs.sandbox import Limits, Sandbox, SandboxConfig  # OS-level machinery: import on use

        _SANDBOX = Sandbox(SandboxConfig(slots=2, limits=Limits(wall_s=10.0, memory_mb=256, workspace_mb=16)))
    return _SANDBOX


def extract_script(response: str) -> str | None:
    blocks = _FENCE.findall(response)
    if len(blocks) > 1:
        return None
    return blocks[0] if blocks else (None if "```" in response else response)


@register_verifier("shell_state")
def shell_state(task, response: str) -> Verdict:
    """Run the script on a copy of meta['files'] in the sandbox; pass iff the workspace then equals
    meta['expected']."""
    script = extract_script(response)
    if not script or not script.strip():
        return Verdict(0.0, False, {"static": "no script", "process": 0.0})
    root = tempfile.mkdtemp(prefix="rlpt_shell_")
    try:
        os.chmod(root, 0o777)  # the sandbox runs as an unprivileged per-slot uid
        for path, text in task.meta["files"].items():
            with open(os.path.join(root, path), "w") as fh:
                fh.write(text)
            os.chmod(os.path.join(root, path), 0o666)
        result = _sandbox().run(["/bin/bash", "-c", script], workspace=root)
        state = snapshot(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ok = _same_state(task.meta["expected"], state)
    return Verdict(
        float(ok),
        ok,
        {
            "exit_code": result.exit_code,
            "killed_for": result.killed_for,
            "stderr": result.stderr[-300:],
            "paths": len(state),
        },
    )


def domains():
    return [
        domain(
            "shell/files",
            _make,
            "shell_state",
            "file operations verified on the workspace state",
            env_id=ENV_ID,
        )
    ]
