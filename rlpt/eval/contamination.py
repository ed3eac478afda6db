"""Contamination report: n-gram overlap (rlpt.tasks.contamination) between training data and an eval suite."""
import glob
import json
import os

from rlpt.tasks import get_domain, resolve
from rlpt.tasks.base import render_prompt
from rlpt.tasks.contamination import check_contamination


def _jsonl_texts(path: str) -> list[str]:
    texts = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "messages" in row:
                texts.append("\n".join(str(m.get("content", "")) for m in row["messages"]))
            elif "prompt" in row or "completion" in row:
                texts.append(f"{row.get('prompt', '')}\n{row.get('completion', '')}")
            elif "text" in row:
                texts.append(str(row["text"]))
            else:
                raise ValueError(f"{path}:{n}: a row needs messages, prompt/completion or text (keys {sorted(row)})")
    return texts


def _task_texts(patterns: list[str], per_domain: int) -> list[str]:
    """Prompts and gold answers of `per_domain` train-split tasks of each domain, spread over its tiers."""

    texts = []
    for name in resolve(patterns):
        dom = get_domain(name)
        for seed in range(per_domain):
            task = dom.generate(seed, dom.tiers[seed % len(dom.tiers)])
            answer = task.meta.get("answer")  # a prompt file's rows may carry none
            texts.append(render_prompt(task.prompt) + ("" if answer is None else f"\n{answer}"))
    return texts


def training_texts(spec: str, per_domain: int) -> dict[str, list[str]]:
    """{source: texts} for a comma list of JSONL files, folders of *.jsonl, and tasks:<domain glob> entries."""
    out: dict[str, list[str]] = {}
    for entry in [e.strip() for e in spec.split(",") if e.strip()]:
        if entry.startswith("tasks:"):
            out[entry] = _task_texts([entry[len("tasks:"):]], per_domain)
        elif os.path.isdir(entry):
            files = sorted(glob.glob(os.path.join(entry, "**", "*.jsonl"), recursive=True))
            if not files:
                raise FileNotFoundError(f"contamination={entry}: folder holds no *.jsonl")
            out[entry] = [t for f in files for t in _jsonl_texts(f)]
        elif os.path.isfile(entry):
            out[entry] = _jsonl_texts(entry)
        else:
            raise FileNotFoundError(f"contamination entry {entry!r}: not a file, a folder or tasks:<domain glob>")
    return out


def report(tasks, train: dict[str, list[str]], n: int = 13) -> list[dict]:
    """One row per eval domain (and 'all') per training source: exact and n-gram contaminated counts."""
    by_domain: dict[str, list] = {"all": list(tasks)}
    for t in tasks:
        by_domain.setdefault(t.domain, []).append(t)
    rows = []
    for source, texts in train.items():
        for domain, items in by_domain.items():
            rep = check_contamination(texts, [render_prompt(t.prompt) for t in items], n=n)
            rows.append({"source": source, "domain": domain, "n_eval": rep.n_eval, "n_train": rep.n_train,
                         "exact": len(rep.exact), "ngram": len(rep.ngram), "contaminated": rep.contaminated,
                         "rate": rep.contaminated / max(1, rep.n_eval), "max_overlap": rep.max_overlap,
                         "ids": [items[i].id for i in sorted(set(rep.exact) | set(rep.ngram))][:20]})
    return rows


def markdown(suite: str, rows: list[dict], n: int) -> str:
    lines = [f"# Contamination: suite {suite} ({n}-grams)", "",
             "| training source | eval domain | eval items | train texts | exact | n-gram | contaminated | rate | "
             "max overlap |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['domain']} | {r['n_eval']} | {r['n_train']} | {r['exact']} | "
                     f"{r['ngram']} | {r['contaminated']} | {r['rate']:.3f} | {r['max_overlap']:.3f} |")
    return "\n".join(lines) + "\n"
