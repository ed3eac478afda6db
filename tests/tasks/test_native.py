"""Native-domain specifics: CLI, long documents, tool calls, workspace snapshots, bulk generation."""

import json
import os

import pytest

from rlpt.tasks import get_domain
from rlpt.tasks.__main__ import main
from rlpt.tasks.generate import generate_many, mixture_specs
from rlpt.tasks.native.shell import snapshot
from rlpt.tasks.native.tools import execute_tool


def test_cli_list_and_sample(capsys):
    assert main(["list", "arith/*"]) == 0
    out = capsys.readouterr().out
    assert "arith/add" in out and "numeric" in out and "19 domains" in out
    assert main(["sample", "arith/add", "--tier", "1", "--n", "2"]) == 0
    out = capsys.readouterr().out
    task = get_domain("arith/add").generate(1, 1)
    assert task.prompt in out and f"--- gold answer:\n{task.meta['answer']}" in out


def test_document_length_grows_to_long_context():
    lengths = [len(get_domain("docqa/needle").generate(0, t).prompt) for t in (1, 3, 5)]
    assert lengths[0] < 2_000 < 10_000 < lengths[1] < 30_000 < 200_000 < lengths[2]


def test_tool_calls_run_against_hidden_data_and_reject_bad_calls():
    task = get_domain("tool/lookup").generate(0, 2)
    item = next(iter(task.meta["tables"]["prices"]))
    price = execute_tool(task, {"tool": "lookup", "args": {"table": "prices", "key": item}})
    assert price == str(task.meta["tables"]["prices"][item])
    assert execute_tool(task, {"tool": "calculator", "args": {"expr": "7/2-1/2"}}) == "3"
    for bad in (
        {"tool": "search", "args": {"query": "x"}},  # not offered by this task
        {"tool": "calculator", "args": {"expr": "__import__('os')"}},
        {"tool": "calculator", "args": {"expr": "2**99999"}},
        {"tool": "lookup", "args": {"table": "prices", "key": "unobtainium"}},
    ):
        with pytest.raises(ValueError):
            execute_tool(task, bad)
    calls_only = task.meta["answer"].rsplit("<answer>", 1)[0] + "<answer>0</answer>"
    verdict = get_domain("tool/lookup").verify(task, calls_only)
    assert verdict.score == 0.0 and verdict.details["process"] == 1.0


def test_snapshot_records_links_without_following(tmp_path):
    (tmp_path / "a.txt").write_text("hi\n")
    os.symlink("/etc/passwd", tmp_path / "leak")
    os.mkfifo(tmp_path / "pipe")
    state = snapshot(str(tmp_path))
    assert state["a.txt"] == "hi\n"
    assert state["leak"].startswith("<special file l") and state["pipe"].startswith("<special file p")


def test_extraction_gold_is_schema_valid_json():
    domain = get_domain("extract/json")
    for tier in domain.tiers:
        task = domain.generate(5, tier)
        import jsonschema

        jsonschema.validate(json.loads(task.meta["answer"]), task.meta["schema"])


def test_generate_many_matches_sequential_generation():
    specs = mixture_specs(["arith/add", "str/reverse", "rg/letter_counting"], 30, seed=3)
    tasks = generate_many(specs, workers=0)
    again = [get_domain(d).generate(s, t) for d, t, s in specs]
    assert [t.prompt for t in tasks] == [t.prompt for t in again]
    assert {t.domain for t in tasks} == {"arith/add", "str/reverse", "rg/letter_counting"}
