"""Effective context: needle-in-a-haystack and two-hop retrieval over generated documents, a lengths x depths
accuracy grid, nominal versus effective context, and a heatmap PNG."""
import random
import re

import numpy as np

from rlpt.observe.report import new_figure
from rlpt.rewards.verdict import Verdict
from rlpt.tasks import Task

_NAMES = ("Avery Brook Corin Dalia Emeric Farrah Galen Hollis Ilse Jarek Kenna Lorcan Mireille Nadir Oriel Pella "
          "Quill Rosalind Soren Tamsin Ulric Vesna Wystan Xanthe Yorick Zelda").split()
_NOUNS = "river lantern orchard harbor ledger meadow compass quarry violin glacier tavern archive".split()
_VERBS = "crossed repaired painted measured visited described guarded mapped sold followed".split()
_ADJS = "quiet northern ancient narrow crowded distant golden muddy silver hidden".split()
_SHORT = ("It rained.", "Time passed.", "All was calm.", "Bells rang.", "Wind rose.", "Ok.")
_NUMBER = re.compile(r"\d{6,}")
DISTRACTORS = 3


def _filler(rng: random.Random) -> str:
    a, b = rng.sample(_NOUNS, 2)
    adj1, verb, adj2, year = rng.choice(_ADJS), rng.choice(_VERBS), rng.choice(_ADJS), rng.randint(1200, 1999)
    return f"The {adj1} {a} {verb} the {adj2} {b} in year {year}."


def _facts(rng: random.Random, hops: int) -> tuple[list[str], str, str]:
    """(needle sentences in hop order, question, answer); distractors added by the caller."""
    name, value = rng.choice(_NAMES), str(rng.randint(100_000, 999_999))
    if hops == 1:
        return [f"The secret number of {name} is {value}."], f"What is the secret number of {name}?", value
    vault = f"{rng.choice(_NOUNS)}-{rng.randint(10, 99)}"
    facts = [f"{name} holds the key to the vault called {vault}.",
             f"The vault called {vault} contains the number {value}."]
    return facts, f"What number is in the vault whose key {name} holds?", value


def make_task(tok, length: int, depth: float, trial: int, hops: int, seed: int) -> Task:
    """A document of about `length` prompt tokens with the (first) needle at `depth` (0: start, 1: end); for
    hops=2 the second fact sits at depth 1 - depth. Distractor facts about other names fill other depths."""
    from rlpt.rollout.format import prompt_ids  # on use (start-up: PIL)

    rng = random.Random(f"needle|{hops}|{length}|{depth}|{trial}|{seed}")
    needles, question, answer = _facts(rng, hops)
    others = [n for n in _NAMES if n not in question]
    distract = [f"The secret number of {n} is {rng.randint(100_000, 999_999)}."
                for n in rng.sample(others, DISTRACTORS)]
    head = "Read the document and answer the question.\n\nDocument:\n"
    tail = f"\n\nQuestion: {question} Answer with the number only."
    fixed = len(prompt_ids(tok, head + " ".join(needles + distract) + tail))
    if fixed > length:
        raise ValueError(f"lengths: {length} tokens cannot hold the {fixed} tokens of the instructions, question, "
                         "needles and distractors; use longer lengths")
    budget = length - fixed
    sentences, costs, used = [], [], 0
    for make in (lambda: _filler(rng), lambda: rng.choice(_SHORT)):  # long sentences, then short ones to top up
        while True:
            s = make()
            cost = len(tok.encode(" " + s))
            if used + cost > budget:
                break
            sentences.append(s)
            costs.append(cost)
            used += cost
    for d in distract:
        at = rng.randrange(len(sentences) + 1)
        sentences.insert(at, d)
        costs.insert(at, len(tok.encode(" " + d)))
    spots = [(depth, needles[0])] + ([(1.0 - depth, needles[1])] if hops == 2 else [])
    for frac, text in reversed(spots):  # at token position frac; the first hop last, so it lands exactly
        before = np.cumsum([0] + costs)  # tokens before each slot
        at = int(np.searchsorted(before, frac * before[-1]))
        sentences.insert(min(at, len(sentences)), text)
        costs.insert(min(at, len(costs)), len(tok.encode(" " + text)))
    prompt = head + " ".join(sentences) + tail
    meta = {"answer": answer, "length": length, "depth": depth, "hops": hops,
            "prompt_tokens": len(prompt_ids(tok, prompt))}
    kind = "needle" if hops == 1 else "multihop"
    return Task(f"{kind}/{length}", f"{kind}:L{length}:d{depth:g}:t{trial}", prompt, length, meta)


def check(task: Task, response: str) -> Verdict:
    """Passed iff the 6+ digit numbers in the response are exactly {the gold value} (no shotgun listing)."""
    found = set(_NUMBER.findall(response))
    ok = found == {task.meta["answer"]}
    return Verdict(float(ok), ok, {"found": sorted(found)[:5]})


def grid_tasks(tok, lengths, depths, trials: int, hops: int, seed: int) -> list[Task]:
    return [make_task(tok, L, d, t, hops, seed) for L in lengths for d in depths for t in range(trials)]


def accuracy_grid(rows: list[dict], tasks: list[Task], lengths, depths) -> np.ndarray:
    """(len(depths), len(lengths)) mean greedy pass over trials."""
    acc = np.zeros((len(depths), len(lengths)))
    cnt = np.zeros_like(acc)
    for r, t in zip(rows, tasks):
        i, j = list(depths).index(t.meta["depth"]), list(lengths).index(t.meta["length"])
        acc[i, j] += r["passed"]
        cnt[i, j] += 1
    return acc / np.maximum(cnt, 1)


def effective_context(grid: np.ndarray, lengths, threshold: float) -> int:
    """Largest tested length L such that the depth-mean accuracy is >= threshold at L and every shorter length
    (0 when the shortest already falls short)."""
    best = 0
    for j, L in enumerate(lengths):
        if grid[:, j].mean() < threshold:
            break
        best = int(L)
    return best


def heatmap(grid: np.ndarray, lengths, depths, path: str, title: str) -> str:
    fig, ax = new_figure((1.2 + 0.9 * len(lengths), 1.2 + 0.6 * len(depths)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(lengths)), [f"{L // 1024}k" if L >= 1024 else str(L) for L in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
