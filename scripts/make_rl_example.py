"""Writes the example RL prompt files (docs/rl_data.md), deterministically from --seed:

experiments/data/rl_example.jsonl: 2000 short, learnable rows for a small character-level model: reversing 3-4
  lowercase letters (exact; tier 0, every fourth as a chat message) and two-digit addition (numeric; tier 1).
  With the builtin character-level tokenizer every prompt is at most 17 tokens (the quickstart allows 24).
  2000 rows, not a few hundred: the tiny model (model=tiny) memorises 400 rows (SFT, 400 steps: loss 0.01,
  held-out pass@1 0.04) but generalises from 2000 (loss 0.32, held-out pass@1 0.59).
experiments/data/rl_verifier_types.jsonl: two rows of every verifier type (exact, exact normalised, numeric with
  a tolerance, math, regex, json fields / schema, python, judge), each with an "answer" that passes it.
Usage: python scripts/make_rl_example.py [--seed 0] [--n-reverse 1000] [--n-add 1000] [--out-dir experiments/data]
The last stdout line is one JSON object (rows written per file).
"""
import argparse
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def learnable_rows(rng: random.Random, n_reverse: int = 1000, n_add: int = 1000) -> list[dict]:
    rows, seen = [], set()
    while len(rows) < n_reverse:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.choice((3, 4))))
        if word in seen:
            continue
        seen.add(word)
        if len(rows) % 4 == 3:  # every fourth as a chat of one user turn (prompts fit max_prompt_len=24)
            row = {"messages": [{"role": "user", "content": f"Reverse: {word}"}]}
        else:
            row = {"prompt": f"Reverse: {word}"}
        rows.append(row | {"answer": word[::-1], "verifier": {"type": "exact"}, "id": f"rev-{word}", "tier": 0})
    pairs = set()
    while len(pairs) < n_add:
        pairs.add((rng.randrange(10, 100), rng.randrange(10, 100)))
    for a, b in sorted(pairs, key=lambda p: rng.random()):
        rows.append({"prompt": f"Add: {a}+{b}", "answer": str(a + b), "verifier": {"type": "numeric"},
                     "id": f"add-{a}-{b}", "tier": 1})
    return rows


def verifier_rows() -> list[dict]:
    """Two rows per verifier type; each row's answer passes its verifier (tests/tasks/test_rl_jsonl.py)."""
    return [
        {"id": "exact-1", "prompt": "Capital of France?", "answer": "Paris", "verifier": {"type": "exact"}},
        {"id": "exact-2", "prompt": "Spell the number 3.", "answer": "three",
         "verifier": {"type": "exact", "answer": "Three", "normalised": True}},
        {"id": "numeric-1", "prompt": "7 / 2 = ?", "answer": "3.5", "verifier": {"type": "numeric"}},
        {"id": "numeric-2", "prompt": "Pi to 4 decimals?", "answer": "3.1416",
         "verifier": {"type": "numeric", "answer": "3.14159265", "abs_tol": 1e-4}},
        {"id": "math-1", "prompt": "Simplify 2/4.", "answer": "\\frac{1}{2}", "verifier": {"type": "math"}},
        {"id": "math-2", "prompt": "Roots of x^2 - 5x + 6?", "answer": "\\{2, 3\\}",
         "verifier": {"type": "math", "answer": "\\{3, 2\\}"}},
        {"id": "regex-1", "prompt": "Write a date as YYYY-MM-DD.", "answer": "2024-02-29",
         "verifier": {"type": "regex", "pattern": "\\d{4}-\\d{2}-\\d{2}"}},
        {"id": "regex-2", "prompt": "Say yes.", "answer": "YES",
         "verifier": {"type": "regex", "pattern": "yes|yeah", "flags": "i"}},
        {"id": "json-1", "prompt": "Ada Lovelace as JSON with name and age 36.", "answer": '{"name": "Ada", "age": 36}',
         "verifier": {"type": "json", "fields": {"name": "Ada", "age": 36}}},
        {"id": "json-2", "tier": 1, "prompt": "A JSON list of two integers.", "answer": "[1, 2]",
         "verifier": {"type": "json", "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                                                 "maxItems": 2}}},
        {"id": "python-1", "tier": 1, "prompt": "Write f(x) returning x squared.",
         "answer": "def f(x):\n    return x * x\n",
         "verifier": {"type": "python", "tests": "assert f(2) == 4\nassert f(-3) == 9", "entry": "f"}},
        {"id": "python-2", "tier": 1, "prompt": "Write add(a, b).", "answer": "def add(a, b):\n    return a + b\n",
         "verifier": {"type": "python", "entry": "add", "timeout_s": 5,
                      "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert add(0, 0) == 0\n"}},
        {"id": "judge-1", "tier": 1, "messages": [{"role": "system", "content": "Be polite."},
                                                  {"role": "user", "content": "Greet me."}],
         "answer": "Hello!", "verifier": {"type": "judge", "name": "polite", "threshold": 0.5}},
        {"id": "judge-2", "tier": 1, "prompt": "Thank the user.", "answer": "Thank you!",
         "verifier": {"type": "judge", "name": "polite"}},
    ]


def write(path: str, rows: list[dict]) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-reverse", type=int, default=1000)
    p.add_argument("--n-add", type=int, default=1000)
    p.add_argument("--out-dir", default=os.path.join(HERE, "..", "experiments", "data"))
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    files = {"rl_example.jsonl": learnable_rows(random.Random(a.seed), a.n_reverse, a.n_add),
             "rl_verifier_types.jsonl": verifier_rows()}
    for name, rows in files.items():
        write(os.path.join(a.out_dir, name), rows)
    print(json.dumps({name: len(rows) for name, rows in files.items()}))


if __name__ == "__main__":
    main()
