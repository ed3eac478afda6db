"""Rejection-sampling SFT data: N samples per prompt, keep the verified (or top judge-scored), deduplicate, write JSONL.

Rows are {"prompt", "completion"} (chat prompts: {"messages"}) plus provenance (task_id, domain, difficulty,
score, source), the format rlpt.train.data.read_jsonl reads.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from rlpt.rewards.guard import normalise
from rlpt.rewards.judges import prompt_text
from rlpt.sampling import generate
from rlpt.tasks import get_domain


def new_stats() -> dict:
    return {"prompts": 0, "generated": 0, "kept": 0, "rejected": 0, "duplicates_exact": 0, "duplicates_normalised": 0,
            "failed": {"empty": 0, "truncated": 0, "verifier_error": 0, "judge_failed": 0},
            "over_keep_top": 0, "prompts_with_kept": 0, "kept_verified": 0, "gen_s": 0.0, "select_s": 0.0}


def _verdicts(task, texts: list[str], stats: dict) -> list:
    """One Verdict per text (None where the verifier crashed, counted); exact repeats are verified once."""

    domain, cache, out = get_domain(task.domain), {}, []
    for text in texts:
        if text not in cache:
            try:
                cache[text] = domain.verify(task, text)
            except Exception:  # noqa: BLE001  (a crashing verifier rejects the sample; it is counted)
                cache[text] = None
                stats["failed"]["verifier_error"] += 1
        out.append(cache[text])
    return out


def _dedupe(candidates: list[tuple[float, str]], stats: dict) -> list[tuple[float, str]]:
    """Drop exact, then normalised (case and whitespace) repeats, keeping the first (best-ranked) of each."""
    exact, norm, out = set(), set(), []
    for score, text in candidates:
        if text in exact:
            stats["duplicates_exact"] += 1
            continue
        exact.add(text)
        if normalise(text) in norm:
            stats["duplicates_normalised"] += 1
            continue
        norm.add(normalise(text))
        out.append((score, text))
    return out


def select(task, texts: list[str], finish: list[str], stats: dict, *, judge=None, keep_top: int | None = None,
           min_score: float | None = None) -> list[tuple[float, str]]:
    """(score, text) kept for one task from its samples, best first.

    Without a judge: samples the domain's hard verifier passes (score = verdict score). With a judge: samples
    scoring >= min_score (default: the judge's fitted `threshold`, else 0.5), ranked by judge score; the verifier
    still runs when the domain has one, to count `kept_verified` (the judge's precision). keep_top caps the rows.
    """
    live = []
    for text, reason in zip(texts, finish):
        if reason != "stop":  # no end of turn: as SFT data it would teach the model never to stop
            stats["failed"]["truncated"] += 1
        elif not text.strip():
            stats["failed"]["empty"] += 1
        else:
            live.append(text)
    if not live:
        return []
    if judge is None:
        verdicts = _verdicts(task, live, stats)
        passing = [(float(v.score), t) for v, t in zip(verdicts, live) if v is not None and v.passed]
    else:
        out = judge.score([prompt_text(task.prompt)] * len(live), live)
        stats["failed"]["judge_failed"] += int(out.failed.sum())
        cut = min_score if min_score is not None else float(getattr(judge, "threshold", 0.5))
        order = np.argsort(-out.scores, kind="stable")
        passing = [(float(out.scores[i]), live[i]) for i in order if not out.failed[i] and out.scores[i] >= cut]
    stats["rejected"] += len(live) - len(passing)
    distinct = _dedupe(passing, stats)
    kept = distinct[:keep_top]
    stats["over_keep_top"] += len(distinct) - len(kept)
    if judge is not None and kept:
        stats["kept_verified"] += sum(v is not None and v.passed for v in _verdicts(task, [t for _, t in kept], stats))
    elif judge is None:
        stats["kept_verified"] += len(kept)
    return kept


def sft_row(task, score: float, text: str, source: str) -> dict:
    meta = {"task_id": task.id, "domain": task.domain, "difficulty": int(task.difficulty), "score": round(score, 6),
            "source": source}
    if isinstance(task.prompt, str):
        return {"prompt": task.prompt, "completion": text, **meta}
    return {"messages": [*task.prompt, {"role": "assistant", "content": text}], **meta}


def generate_sft_data(model, tok, tasks, *, n: int = 8, out_path: str, judge=None, seed: int = 0,
                      max_new_tokens: int = 32, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None, keep_top: int | None = None, min_score: float | None = None,
                      batch_tasks: int = 16) -> dict:
    """Sample `n` responses per task with rlpt.sampling.generate, keep per `select`, write JSONL to out_path.

    Returns counts: prompts, generated, kept, rejected, duplicates_exact, duplicates_normalised, over_keep_top,
    failed (by reason), prompts_with_kept, kept_verified, gen_s, select_s; generated = failed (empty + truncated)
    + rejected + duplicates + over_keep_top + kept. The file is written even when nothing is kept.
    """
    from rlpt.rollout.format import prompt_ids, response_text  # on use (start-up: PIL)

    if n < 1 or batch_tasks < 1 or (keep_top is not None and keep_top < 1):
        raise ValueError(f"generate_sft_data needs n, batch_tasks, keep_top >= 1; got {n}, {batch_tasks}, {keep_top}")
    tasks = list(tasks)
    stats = new_stats()
    rows = []
    for start in range(0, len(tasks), batch_tasks):
        chunk = tasks[start:start + batch_tasks]
        t0 = time.time()
        gen = generate(model, [prompt_ids(tok, t.prompt) for t in chunk], max_new_tokens, n=n, temperature=temperature,
                       top_k=top_k, top_p=top_p, stop_ids=tuple(tok.eos_ids), seed=seed + start, keep_state=False)
        stats["gen_s"] += time.time() - t0
        t0 = time.time()
        for j, task in enumerate(chunk):
            rs = range(j * n, (j + 1) * n)
            texts = [response_text(tok, gen.tokens[r, :int(gen.lengths[r])]) for r in rs]
            kept = select(task, texts, [gen.finish_reason[r] for r in rs], stats, judge=judge, keep_top=keep_top,
                          min_score=min_score)
            rows.extend(sft_row(task, s, t, "verifier" if judge is None else "judge") for s, t in kept)
            stats["prompts_with_kept"] += bool(kept)
        stats["select_s"] += time.time() - t0
        stats["prompts"] += len(chunk)
        stats["generated"] += len(chunk) * n
    stats["kept"] = len(rows)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out_path)
    return stats
