"""Contamination report: copied eval prompts in SFT data are found; train-split tasks do not touch eval ones."""
import json

from rlpt.eval.__main__ import main
from rlpt.eval.contamination import report, training_texts
from rlpt.eval.suites import LoadArgs, get_suite


def test_copied_humaneval_prompts_are_flagged(tmp_path):
    tasks = get_suite("humaneval").load(LoadArgs(limit=40))
    sft = tmp_path / "sft.jsonl"
    copied = [3, 17, 25]
    rows = [{"prompt": tasks[i].prompt, "completion": "pass"} for i in copied]  # verbatim copies
    rows.append({"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]})
    # a paraphrase-free partial copy: the docstring of task 30 inside a longer document
    rows.append({"text": "Notes from a forum post.\n" + tasks[30].prompt[len(tasks[30].prompt) // 3:] + "\nThanks!"})
    sft.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = main(["suite=humaneval", "limit=40", f"contamination={sft}", f"out={tmp_path / 'c'}"])
    assert out["contaminated"] == {str(sft): 4} and out["n_eval"] == 40
    rep = report(tasks, training_texts(str(sft), 0), n=13)
    all_row = next(r for r in rep if r["domain"] == "all")
    assert all_row["exact"] == 0  # prompt + completion is not the bare prompt: the n-gram check catches them
    assert set(all_row["ids"]) == {tasks[i].id for i in copied + [30]}
    assert "| " + str(sft) + " | all | 40 |" in (tmp_path / "c" / "contamination.md").read_text()


def test_train_split_tasks_do_not_overlap_the_eval_suite(tmp_path):
    out = main(["suite=domains:arith/add,str/reverse", "per_domain=40", "train_tasks=300", f"out={tmp_path}",
                "contamination=tasks:arith/add,tasks:str/reverse"])
    assert out["contaminated"] == {"tasks:arith/add": 0, "tasks:str/reverse": 0}


def test_bad_source_is_named(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        training_texts(str(tmp_path / "nope.jsonl"), 10)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        training_texts(str(bad), 10)
