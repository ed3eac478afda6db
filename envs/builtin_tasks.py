"""Small seeded tasks the environments use when reset() gets no task (env checker, smoke tests, demos).

EnvTask has the fields of rlpt.tasks.Task that environments read, so either kind can be passed in.
"""

import dataclasses
import random
from typing import Any

from rlpt.rewards import Verdict


@dataclasses.dataclass(frozen=True)
class EnvTask:
    domain: str
    id: str
    prompt: Any
    difficulty: int = 0
    meta: dict = dataclasses.field(default_factory=dict)
    env_id: str = ""


class ArithmeticDomain:
    """Add two integers; the answer is the last integer in the response."""

    name = "envs.arithmetic"
    tiers = (0, 1, 2)

    def generate(self, seed: int, tier: int = 0) -> EnvTask:
        rng = random.Random(f"{self.name}/{seed}/{tier}")
        hi = 10 ** (tier + 1)
        a, b = rng.randrange(hi), rng.randrange(hi)
        return EnvTask(
            self.name,
            f"{self.name}/{tier}/{seed}",
            f"What is {a} + {b}? Answer with the number.",
            tier,
            {"answer": str(a + b)},
            "rlpt/SingleTurn-v0",
        )

    def verify(self, task, response: str) -> Verdict:
        import re

        nums = re.findall(r"-?\d+", response)
        got = nums[-1] if nums else None
        ok = got == task.meta["answer"]
        return Verdict(1.0 if ok else 0.0, ok, {"expected": task.meta["answer"], "got": got})


_CODE = (
    (
        "add",
        'def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
        lambda r: [((x, y), x + y) for x, y in [(r.randrange(-99, 99), r.randrange(-99, 99)) for _ in range(4)]],
    ),
    (
        "reverse_words",
        'def reverse_words(s: str) -> str:\n    """Reverse the order of the words in s."""\n',
        lambda r: [
            ((s,), " ".join(s.split()[::-1]))
            for s in [
                " ".join(r.choice(["ab", "cd", "ef", "gh", "ij"]) for _ in range(r.randrange(1, 5))) for _ in range(4)
            ]
        ],
    ),
    (
        "count_vowels",
        'def count_vowels(s: str) -> int:\n    """Number of vowels (aeiou, any case) in s."""\n',
        lambda r: [
            ((s,), sum(c in "aeiouAEIOU" for c in s))
            for s in ["".join(r.choice("abcdeiOUxyz") for _ in range(r.randrange(0, 12))) for _ in range(4)]
        ],
    ),
)


def code_task(seed: int) -> EnvTask:
    """Write one function in solution.py; hidden tests call it with seeded inputs."""
    rng = random.Random(f"envs.code/{seed}")
    name, stub, cases = _CODE[seed % len(_CODE)]
    asserts = "".join(f"    assert candidate(*{args!r}) == {want!r}\n" for args, want in cases(rng))
    return EnvTask(
        "envs.code",
        f"envs.code/{seed}",
        f"Implement `{name}` in solution.py (stub given), then submit.\n\n{stub}",
        0,
        {
            "files": {"solution.py": stub + "    raise NotImplementedError\n"},
            "tests": f"def check(candidate):\n{asserts}",
            "entry_point": name,
            "solution_file": "solution.py",
        },
        "rlpt/CodeAgent-v0",
    )


def shell_task(seed: int) -> EnvTask:
    """Reach a target state of files with shell commands."""
    rng = random.Random(f"envs.shell/{seed}")
    words = [rng.choice(["pear", "fig", "kiwi", "plum", "lime", "date"]) + str(rng.randrange(100)) for _ in range(5)]
    kind = seed % 3
    if kind == 0:
        prompt = "Write the lines of data.txt in sorted order to sorted.txt."
        files, target = {"data.txt": "\n".join(words) + "\n"}, {"sorted.txt": "\n".join(sorted(words)) + "\n"}
    elif kind == 1:
        prompt = "Rename notes.txt to archive/notes.txt (create the folder)."
        files = {"notes.txt": words[0] + "\n"}
        target = {"archive/notes.txt": words[0] + "\n", "notes.txt": None}
    else:
        prompt = f"Create hello.txt containing exactly the line: {words[1]}"
        files, target = {}, {"hello.txt": words[1] + "\n"}
    return EnvTask(
        "envs.shell",
        f"envs.shell/{seed}",
        prompt,
        0,
        {"files": files, "target": target},
        "rlpt/ShellAgent-v0",
    )


def terminal_task(seed: int) -> EnvTask:
    """A shell task whose steps lean on a persistent terminal: a sourced environment file, a working folder,
    a background job to wait for. Checked by the workspace's final state (meta target)."""
    rng = random.Random(f"envs.terminal/{seed}")
    word = rng.choice(["pear", "fig", "kiwi", "plum", "lime", "date"]) + str(rng.randrange(100))
    folder = rng.choice(["build", "out", "work", "stage"]) + str(rng.randrange(10))
    kind = seed % 3
    if kind == 0:
        prompt = (f"env.sh sets the variable TOKEN. Source it, make a folder {folder}, go into it, and there write "
                  "the value of TOKEN to token.txt (one line).")
        files = {"env.sh": f"TOKEN={word}\nexport TOKEN\n"}
        target = {f"{folder}/token.txt": word + "\n"}
    elif kind == 1:
        prompt = ("worker.sh runs for a while and writes its result to result.txt when done. Start it in the "
                  "background, wait until result.txt exists, then copy it to final.txt.")
        files = {"worker.sh": f"sleep 1\necho {word} > result.tmp\nmv result.tmp result.txt\n"}
        target = {"final.txt": word + "\n", "result.txt": word + "\n"}
    else:
        prompt = (f"Define a shell function tag that prints its argument followed by -{word}. Then use it to write "
                  f"tag a to {folder}/a.txt and tag b to {folder}/b.txt.")
        files = {}
        target = {f"{folder}/a.txt": f"a-{word}\n", f"{folder}/b.txt": f"b-{word}\n"}
    return EnvTask("envs.terminal", f"envs.terminal/{seed}", prompt, 0, {"files": files, "target": target},
                   "rlpt/TerminalAgent-v0")


def tool_task(seed: int) -> EnvTask:
    """A question that needs the unit converter and the calculator."""
    rng = random.Random(f"envs.tool/{seed}")
    km, k = rng.randrange(2, 500), rng.randrange(2, 9)
    answer = km * 1000 / 1609.344 * k
    prompt = f"Convert {km} km to miles, multiply the result by {k}, and answer with the number (call final_answer)."
    return EnvTask(
        "envs.tool",
        f"envs.tool/{seed}",
        prompt,
        0,
        {"answer": answer, "tools": ["calculator", "convert_units"], "rel_tol": 1e-6},
        "rlpt/ToolUse-v0",
    )
