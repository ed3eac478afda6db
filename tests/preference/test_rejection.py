"""Rejection sampling: every kept row verifies, duplicates and failures are counted, the file loads as SFT data."""
import json
from collections import Counter

import numpy as np
import pytest

from rlpt.models import builtin_tokenizer
from rlpt.preference.rejection import generate_sft_data
from rlpt.rewards.guard import normalise
from rlpt.rewards.judges import RewardModelJudge
from rlpt.tasks import get_domain
from rlpt.train.data import read_jsonl
from tests.sampling.helpers import fixed_logits_model


def _digit_model(tok):
    """Same next-token distribution after any context: '1', '2', '3' 0.15 each, ' ' 0.15, end of turn 0.4."""
    logits = np.full(tok.vocab_size, -30.0, np.float32)
    for ch in "123 ":
        logits[tok.encode(ch)[0]] = np.log(0.15)
    logits[tok.eos_ids[0]] = np.log(0.4)
    return fixed_logits_model(logits)


@pytest.fixture(scope="module")
def setup():
    tok = builtin_tokenizer()
    domain = get_domain("count/char")
    tasks = [t for t in (domain.generate(s, 1) for s in range(40)) if t.meta["answer"] in "123"][:6]
    return tok, _digit_model(tok), tasks


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_kept_rows_verify_are_distinct_and_load_as_sft_data(setup, tmp_path):
    tok, model, tasks = setup
    out = tmp_path / "sft.jsonl"
    stats = generate_sft_data(model, tok, tasks, n=32, out_path=str(out), seed=0, max_new_tokens=3, batch_tasks=3)
    rows = _rows(out)
    by_id = {t.id: t for t in tasks}
    assert stats["kept"] == len(rows) > 0 and stats["generated"] == 6 * 32 and stats["prompts"] == 6
    for row in rows:
        task = by_id[row["task_id"]]
        assert row["prompt"] == task.prompt and row["source"] == "verifier"
        assert get_domain(task.domain).verify(task, row["completion"]).passed
    keys = Counter((r["task_id"], normalise(r["completion"])) for r in rows)
    assert max(keys.values()) == 1  # no exact or normalised repeats within a prompt
    failed = stats["failed"]
    assert failed["empty"] > 0 and failed["truncated"] > 0 and stats["duplicates_exact"] > 0
    assert stats["duplicates_normalised"] > 0  # '2 ' after '2'
    assert stats["generated"] == (failed["empty"] + failed["truncated"] + stats["rejected"] + stats["duplicates_exact"]
                                  + stats["duplicates_normalised"] + stats["over_keep_top"] + stats["kept"])
    assert stats["kept_verified"] == stats["kept"] and stats["prompts_with_kept"] == len({r["task_id"] for r in rows})
    examples = read_jsonl(str(out), tok)  # the SFT data source reads the file
    assert len(examples) == len(rows)
    ids, mask, difficulty = examples[0]
    assert tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=True) == rows[0]["completion"]
    again = tmp_path / "again.jsonl"
    assert generate_sft_data(model, tok, tasks, n=32, out_path=str(again), seed=0, max_new_tokens=3,
                             batch_tasks=3)["kept"] == stats["kept"]
    assert again.read_text() == out.read_text()  # deterministic from the seed


def test_judge_mode_keeps_the_top_scored_and_counts_its_precision(setup, tmp_path):
    tok, model, tasks = setup
    calls = []

    def prefers_two(prompts, responses):  # a soft verifier that is right only where the answer is 2
        calls.append(len(responses))
        return np.array([3.0 if r.strip() == "2" else 1.0 if r.strip() in ("1", "3") else -3.0 for r in responses])

    out = tmp_path / "judged.jsonl"
    stats = generate_sft_data(model, tok, tasks, n=32, out_path=str(out), judge=RewardModelJudge(prefers_two),
                              seed=1, max_new_tokens=3, keep_top=1, batch_tasks=3)
    rows = _rows(out)
    assert len(calls) == len(tasks)  # one judge call per prompt, over its live samples
    assert len(rows) == stats["kept"] == len({r["task_id"] for r in rows}) > 0
    assert all(r["completion"].strip() in "123" and r["source"] == "judge" and r["score"] > 0.7 for r in rows)
    assert sum(r["completion"].strip() == "2" for r in rows) > len(rows) / 2  # the judge's favourite wins mostly
    by_id = {t.id: t for t in tasks}
    right = sum(r["completion"].strip() == by_id[r["task_id"]].meta["answer"] for r in rows)
    assert stats["kept_verified"] == right < stats["kept"]  # the judge's mistakes are counted
    assert stats["over_keep_top"] > 0
    read_jsonl(str(out), tok)


def test_nothing_kept_still_writes_a_file_and_bad_arguments_raise(setup, tmp_path):
    tok, model, tasks = setup
    out = tmp_path / "none.jsonl"
    stats = generate_sft_data(model, tok, tasks[:3], n=32, out_path=str(out), seed=0, max_new_tokens=1)
    assert stats["kept"] == 0 and out.read_text() == ""
    assert stats["failed"]["truncated"] + stats["failed"]["empty"] == 96
    with pytest.raises(ValueError, match="n, batch_tasks, keep_top"):
        generate_sft_data(model, tok, tasks, n=0, out_path=str(out))
