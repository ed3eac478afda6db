"""RL prompt files (rlpt.tasks.files, rlpt.tasks.spec): every verifier type, load-time errors naming file:line,
deterministic draws, the content-hash split, chat prompts, mixing with registered domains, config, SFT, and a
2-step RL run whose rewards come from the file's verifiers."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rlpt.config.schema import SourceConfig, compose
from rlpt.rewards.judges import JUDGES, RewardModelJudge, register_judge
from rlpt.tasks import EVAL_SEED_START, split_of_prompt
from rlpt.tasks.files import FileTaskError, file_domain, load_rows, register_file
from rlpt.tasks.mixture import rl_domains
from rlpt.tasks.spec import SpecError, check_spec, parse_spec

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DATA = os.path.join(ROOT, "experiments", "data")


@pytest.fixture(autouse=True)
def _registry_unchanged():
    """Domains a test registers (file/*) are removed after it: tests that walk every domain must not see them."""
    from rlpt.tasks import list_domains
    from rlpt.tasks.registry import unregister

    before = set(list_domains())
    yield
    for name in set(list_domains()) - before:
        unregister(name)


def _write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _polite(prompts, responses):
    return np.array([1.0 if any(w in r.lower() for w in ("hello", "thank")) else 0.0 for r in responses])


@pytest.fixture
def polite_judge():
    register_judge("polite", RewardModelJudge(_polite, squash="clip"), replace=True)
    yield
    JUDGES.pop("polite", None)


PY_TESTS = "assert f(2) == 4\nassert f(-3) == 9"
CASES = [  # (spec, row answer, right responses, wrong responses)
    ({"type": "exact", "answer": "Paris"}, None, ["Paris", " <answer>Paris</answer>\n"], ["paris", "Paris!"]),
    ({"type": "exact"}, "Paris", ["Paris"], ["Lyon", "<answer>Paris</answer><answer>Lyon</answer>"]),
    ({"type": "exact", "answer": "New  York", "normalised": True}, None, ["new york", " NEW YORK "], ["newyork"]),
    ({"type": "numeric", "answer": "3.5"}, None, ["3.5", "3.50", "7/2"], ["3.6", "3.5 m", "1e0"]),
    ({"type": "numeric", "answer": "3.5", "rel_tol": 1e-6}, None, ["3.5000001"], ["3.5001"]),
    ({"type": "numeric", "answer": "3.14159", "abs_tol": 1e-3}, None, ["3.142"], ["3.15"]),
    ({"type": "numeric"}, 12, ["12"], ["13"]),
    ({"type": "math", "answer": "\\frac{1}{2}"}, None, ["0.5", "1/2"], ["1/3", "0.5\n1/3"]),
    ({"type": "regex", "pattern": "\\d{4}-\\d{2}-\\d{2}"}, None, ["2024-01-31"], ["2024-1-31", "on 2024-01-31"]),
    ({"type": "regex", "pattern": "yes|yeah", "flags": "i"}, None, ["YES", "<answer>Yeah</answer>"], ["yes!"]),
    ({"type": "json", "fields": {"name": "Ada", "age": 36}}, None,
     ['{"age": 36, "name": "Ada", "extra": 1}', '```json\n{"name": "Ada", "age": 36.0}\n```'],
     ['{"name": "Ada", "age": "36"}', '{"name": "Ada"}', "[1]", "Ada, 36"]),
    ({"type": "json", "fields": {"ok": True}}, None, ['{"ok": true}'], ['{"ok": 1}']),
    ({"type": "json", "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 2}}, None,
     ["[1, 2]", "[3, 4, 5]"], ['[1, "a"]', "[1]", "{}"]),
    ({"type": "python", "tests": PY_TESTS, "entry": "f"}, None,
     ["def f(x):\n    return x * x\n", "```python\ndef f(x):\n    return x ** 2\n```"],
     ["def f(x):\n    return x + x\n", "def g(x):\n    return x * x\n", "def f(x):\n    return x * x\n  oops"]),
    ({"type": "python", "entry": "add", "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}, None,
     ["def add(a, b):\n    return a + b"], ["def add(a, b):\n    return a - b"]),
    ({"type": "judge", "name": "polite"}, None, ["Hello there", "Thank you"], ["Go away"]),
    ({"type": "judge", "name": "polite", "threshold": 1.0}, None, ["hello"], ["no"]),
]


@pytest.mark.parametrize("spec,answer,right,wrong", CASES, ids=[f"{c[0]['type']}{i}" for i, c in enumerate(CASES)])
def test_each_verifier_passes_a_right_answer_and_fails_a_wrong_one(spec, answer, right, wrong, polite_judge):
    parsed = parse_spec(spec, None if answer is None else str(answer))
    for text in right:
        v = check_spec(parsed, text, "prompt")
        assert v.passed and v.score == 1.0, (text, v)
        assert v.details["verifier"] == spec["type"]
    for text in wrong:
        v = check_spec(parsed, text, "prompt")
        assert not v.passed and v.score == 0.0, (text, v)


def test_spec_defaults_and_answer_fallback():
    assert parse_spec({"type": "exact"}, " 4 ") == {"type": "exact", "answer": "4", "normalised": False}
    assert parse_spec({"type": "exact", "answer": "5"}, "4")["answer"] == "5"  # the spec's own answer wins
    assert parse_spec({"type": "numeric", "answer": 0.25})["answer"] == "0.25"
    assert parse_spec({"type": "regex", "pattern": "a", "flags": "si"})["flags"] == "is"
    with pytest.raises(SpecError, match="needs an 'answer'"):
        parse_spec({"type": "math"}, None)


def test_a_hanging_or_missing_check_scores_zero_and_never_raises(tmp_path):
    slow = parse_spec({"type": "regex", "pattern": "(a+)+b", "timeout_s": 0.5})
    v = check_spec(slow, "a" * 40)
    assert not v.passed and "timeout" in v.details["error"]
    # A judge is resolved by name when it scores: unregistered, the check raises and Domain.verify scores 0.
    path = _write(tmp_path / "judged_missing.jsonl", [{"prompt": "Greet me.",
                                                       "verifier": {"type": "judge", "name": "no_such_judge"}}])
    dom = file_domain(path)
    task = dom.generate(0, 0) if dom.rows.get((0, "train")) else dom.generate(EVAL_SEED_START, 0)
    v = dom.verify(task, "hello")
    assert v.score == 0.0 and "unknown judge 'no_such_judge'" in v.details["error"]


GOOD = {"prompt": "Say hi.", "answer": "hi"}
BAD_ROWS = [
    ("{not json", "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
    ({"answer": "x"}, "exactly one of 'prompt'"),
    ({"prompt": "p", "messages": [{"role": "user", "content": "p"}], "answer": "x"}, "exactly one of 'prompt'"),
    ({"prompt": 3, "answer": "x"}, "'prompt' must be a non-empty string"),
    ({"prompt": " ", "answer": "x"}, "'prompt' must be a non-empty string"),
    ({"prompt": "p"}, "needs an 'answer' or a 'verifier'"),
    ({"prompt": "p", "answer": "x", "anwser": "y"}, r"unknown keys \['anwser'\]"),
    ({"prompt": "p", "answer": ["x"]}, "'answer' must be a string or a number"),
    ({"prompt": "p", "answer": "x", "tier": "1"}, "integer >= 0"),
    ({"prompt": "p", "answer": "x", "difficulty": -1}, "integer >= 0"),
    ({"prompt": "p", "answer": "x", "difficulty": 1, "tier": 2}, "disagree"),
    ({"prompt": "p", "answer": "x", "id": True}, "'id' must be"),
    ({"prompt": "p", "answer": "x", "meta": 3}, "'meta' must be an object"),
    ({"messages": [{"role": "bot", "content": "p"}], "answer": "x"}, "role must be one of"),
    ({"messages": [{"role": "user", "content": "p"}, {"role": "assistant", "content": "a"}], "answer": "x"},
     "last message is the assistant's"),
    ({"messages": [], "answer": "x"}, "non-empty list"),
    ({"prompt": "p", "verifier": {"type": "fuzzy"}}, "verifier type 'fuzzy' is unknown"),
    ({"prompt": "p", "verifier": "exact"}, "verifier must be a JSON object"),
    ({"prompt": "p", "verifier": {"type": "exact", "answr": "x"}}, r"does not take \['answr'\]"),
    ({"prompt": "p", "verifier": {"type": "regex", "pattern": "("}}, "does not compile"),
    ({"prompt": "p", "verifier": {"type": "regex", "pattern": "a", "flags": "q"}}, "flags"),
    ({"prompt": "p", "verifier": {"type": "json", "schema": {"type": "nope"}}}, "not a valid JSON schema"),
    ({"prompt": "p", "verifier": {"type": "json"}}, "needs 'fields'"),
    ({"prompt": "p", "verifier": {"type": "numeric", "answer": "abc"}}, "not an integer, decimal"),
    ({"prompt": "p", "answer": "1", "verifier": {"type": "numeric", "rel_tol": -1}}, "'rel_tol' must be"),
    ({"prompt": "p", "verifier": {"type": "python", "tests": "x = 1", "entry": "f"}}, "hold no assert"),
    ({"prompt": "p", "verifier": {"type": "python", "tests": "assert f(", "entry": "f"}}, "do not compile"),
    ({"prompt": "p", "verifier": {"type": "python", "tests": "assert f(1)", "entry": "f()"}}, "'entry'"),
    ({"prompt": "p", "verifier": {"type": "judge"}}, "judge needs 'name'"),
    ({"prompt": "p", "answer": "x", "verifier": {"type": "exact", "normalised": "yes"}}, "must be true or false"),
    ({"prompt": "q", "answer": "x", "id": "dup"}, "id 'dup' was already used on line 1"),
]


@pytest.mark.parametrize("bad,message", BAD_ROWS, ids=[m[:24] for _, m in BAD_ROWS])
def test_malformed_rows_fail_at_load_naming_file_and_line(tmp_path, bad, message):
    path = _write(tmp_path / "bad.jsonl", [GOOD | {"id": "dup"}, "", bad])  # the bad row is line 3
    with pytest.raises(FileTaskError, match=f"bad.jsonl:3: .*{message}"):
        load_rows(path)


def test_empty_missing_and_non_utf8_files_fail(tmp_path):
    with pytest.raises(FileTaskError, match="no rows"):
        load_rows(_write(tmp_path / "empty.jsonl", ["", "  "]))
    with pytest.raises(FileTaskError, match="not found"):
        load_rows(str(tmp_path / "absent.jsonl"))
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "caf\xe9", "answer": "x"}\n')
    with pytest.raises(FileTaskError, match="latin.jsonl:1: not UTF-8"):
        load_rows(str(tmp_path / "latin.jsonl"))


def _many(n: int = 200, chat_every: int = 5):
    """n reversal rows in tiers 0 and 1 (alternating); every chat_every-th one a chat with a system turn."""
    rows = []
    for i in range(n):
        text = f"Reverse: {i:03d}"
        prompt = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]} \
            if i % chat_every == 0 else {"prompt": text}
        rows.append(prompt | {"answer": f"{i:03d}"[::-1], "id": f"r{i}", "tier": i % 2})
    return rows


def test_same_seed_same_task_and_draws_cover_the_rows(tmp_path):
    path = _write(tmp_path / "determ.jsonl", _many())
    a, b = file_domain(path), file_domain(path)  # two loads: nothing depends on process state
    for seed in (0, 1, 12345, EVAL_SEED_START + 7):
        for tier in (0, 1):
            ta, tb = a.generate(seed, tier), b.generate(seed, tier)
            assert ta == tb and ta.id == f"file/determ:t{tier}:s{seed}"
    ids = {a.generate(s, 0).meta["row_id"] for s in range(300)}
    assert len(ids) > 40  # ~90 train rows in tier 0: draws spread over them


def test_train_and_eval_seeds_never_share_a_row(tmp_path):
    path = _write(tmp_path / "split.jsonl", _many())
    dom = file_domain(path)
    for tier in dom.tiers:
        train = [dom.generate(s, tier) for s in range(300)]
        evals = [dom.generate(EVAL_SEED_START + s, tier) for s in range(300)]
        assert {t.meta["row_id"] for t in train}.isdisjoint({t.meta["row_id"] for t in evals})
        assert evals and all(t.meta["split"] == "eval" == split_of_prompt(t.meta["split_key"]) for t in evals)
        assert all(t.meta["split"] == "train" == split_of_prompt(t.meta["split_key"]) for t in train)


def test_a_tier_without_rows_of_a_split_says_so(tmp_path):
    rows = [{"prompt": f"Say {i}", "answer": str(i)} for i in range(3)]
    dom = file_domain(_write(tmp_path / "few.jsonl", rows))
    split = {split_of_prompt(r["prompt"]) for r in rows}
    assert split == {"train"}  # premise: three prompts, none in the 10% eval split
    with pytest.raises(ValueError, match="tier 0 has no eval rows"):
        dom.generate(EVAL_SEED_START, 0)


def test_chat_prompts_render_through_prompt_ids_and_log_as_json(tmp_path):
    from rlpt.models import builtin_tokenizer
    from rlpt.rewards.judges import prompt_text
    from rlpt.rollout.format import prompt_ids

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Reverse: abc"}]
    path = _write(tmp_path / "chat.jsonl", [{"messages": msgs, "answer": "cba", "id": i} for i in range(1)])
    dom = file_domain(path)
    task = next(dom.generate(s, 0) for s in (0, EVAL_SEED_START) if dom.rows.get((0, "train" if s == 0 else "eval")))
    assert task.prompt == tuple(msgs)
    tok = builtin_tokenizer()
    ids = prompt_ids(tok, task.prompt)
    assert ids == tok.encode_chat(msgs, add_generation_prompt=True)[0]
    assert tok.decode(ids) == "<bos><|system|>Be brief.<|end|><|user|>Reverse: abc<|end|><|assistant|>"
    assert json.loads(json.dumps({"prompt": task.prompt}))["prompt"] == msgs  # trajectory / failure logs
    assert prompt_text(task.prompt) == "system: Be brief.\nuser: Reverse: abc"  # what a judge reads
    assert task.meta["split_key"] == json.dumps(msgs, separators=(",", ":"), sort_keys=True)
    assert dom.verify(task, "cba").passed and not dom.verify(task, "abc").passed


def test_prompt_lengths_are_checked_before_training(tmp_path):
    from rlpt.models import builtin_tokenizer
    from rlpt.tasks.files import check_prompt_lengths

    rows = [{"prompt": "Say hi", "answer": "hi"}, {"prompt": "Say hi " + "x" * 30, "answer": "hi"}]
    name = register_file(_write(tmp_path / "lengths.jsonl", rows))
    tok = builtin_tokenizer()
    check_prompt_lengths(["arith/add", name], tok, 41)  # 37 characters + 4 template tokens
    with pytest.raises(FileTaskError, match=r"lengths.jsonl:2: the prompt renders to 41 tokens > .*=40 \(1 of 2"):
        check_prompt_lengths(["arith/add", name], tok, 40)


def test_register_is_idempotent_and_stem_collisions_fail(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write(tmp_path / "a" / "collide.jsonl", [GOOD])
    assert register_file(first) == register_file(first) == "file/collide"
    other = _write(tmp_path / "b" / "collide.jsonl", [GOOD])
    with pytest.raises(FileTaskError, match="already taken by file:"):
        register_file(other)
    _write(tmp_path / "a" / "collide.jsonl", [GOOD, {"prompt": "more", "answer": "x"}])
    with pytest.raises(FileTaskError, match="changed since it was registered"):
        register_file(first)


def test_compose_rl_jsonl_and_mix_with_registered_domains(tmp_path):
    from rlpt.tasks.curriculum import build_curriculum
    from rlpt.train.sft import domain_mixture

    path = _write(tmp_path / "mixme.jsonl", _many())
    cfg = compose(["data=rl_jsonl", f"data.path={path}"])
    assert cfg.data.sources["file"].path == path and cfg.data.sources["file"].kind == "rl_jsonl"
    names, weights, tiers = domain_mixture(cfg)
    # the default experiment's domains.tiers=[2] belongs to the domains group, which with_domains=false leaves out
    assert cfg.domains.tiers == [2] and not cfg.data.with_domains
    assert (names, weights, tiers) == (["file/mixme"], [1.0], {"file/mixme": [0, 1]})
    only = rl_domains(cfg)
    assert (only.include, only.weights, only.tiers) == (["file/mixme"], {"file/mixme": 1.0}, [])
    cfg = compose(["data=rl_jsonl", f"data.path={path}", "data.with_domains=true", "domains.include=[arith/add]",
                   "data.sources.file.weight=3", "domains.tiers=[1]"])
    names, weights, tiers = domain_mixture(cfg)
    assert names == ["file/mixme", "arith/add"] and weights == [3.0, 1.0]
    assert tiers == {"file/mixme": [1], "arith/add": [1]}
    rl = dataclasses.replace(cfg, domains=rl_domains(cfg))
    cur = build_curriculum(rl.curriculum, rl.domains)
    assert cur.domains == ("file/mixme", "arith/add") and np.allclose(cur.weights, [0.75, 0.25])
    tasks = cur.tasks(cur.init_state(), 1, np.random.default_rng(0), 64)
    assert {t.domain for t in tasks} == {"file/mixme", "arith/add"}
    assert all(t.difficulty == 1 for t in tasks)
    with pytest.raises(FileTaskError, match="data.path"):
        domain_mixture(compose(["data=rl_jsonl"]))  # data.path left out


def test_sft_uses_answered_train_rows_and_refuses_files_without_answers(tmp_path):
    from rlpt.models import builtin_tokenizer
    from rlpt.tasks.files import demonstrations
    from rlpt.train.data import SFTData
    from rlpt.train.sft import domain_mixture

    tok = builtin_tokenizer()
    path = _write(tmp_path / "sftfile.jsonl", _many())
    rows = load_rows(path)
    demos = demonstrations(path, tok)
    assert len(demos) == sum(split_of_prompt(r.key) == "train" for r in rows) < len(rows)  # eval rows held out
    cfg = compose(["data=rl_jsonl", f"data.path={path}", "data.seq_len=64", "data.batch_size=4"])
    batch, metrics = SFTData(cfg.data, tok, 0).next_batch()
    assert batch["inputs"].shape == (4, 64) and metrics["data/examples"] >= 4
    # the file as procedural tasks beside it (a `tasks` source over the mixture): gold answers are the completions
    tcfg = compose(["data=rl_jsonl", f"data.path={path}", "data.seq_len=64", "data.batch_size=4"])
    tcfg.data.sources["tasks"] = SourceConfig(kind="tasks")
    data = SFTData(tcfg.data, tok, 0, domains=domain_mixture(tcfg))
    assert data.next_batch()[0]["inputs"].shape == (4, 64)
    bare = _write(tmp_path / "noanswers.jsonl", [{"prompt": f"Greet {i}", "verifier": {"type": "judge", "name": "x"}}
                                                  for i in range(40)])
    with pytest.raises(FileTaskError, match="no train-split row has an 'answer'"):
        demonstrations(bare, tok)
    # some rows answered: the file gives demonstrations, but as procedural tasks a draw could hit an unanswered row
    spec = {"type": "exact", "answer": "hi"}
    part = _write(tmp_path / "someanswers.jsonl", [{"prompt": f"Greet {i}", "verifier": spec}
                                                   | ({"answer": "hi"} if i % 2 else {}) for i in range(40)])
    ncfg = compose(["data=tasks", "data.with_domains=false"])
    ncfg.data.sources["tasks"] = SourceConfig(kind="tasks")
    ncfg.data.sources["file"] = SourceConfig(kind="rl_jsonl", path=part)
    with pytest.raises(FileTaskError, match=r"someanswers.jsonl:\d+: no 'answer', so domain 'file/someanswers'"):
        SFTData(ncfg.data, tok, 0, domains=domain_mixture(ncfg))


def test_shipped_examples_load_and_every_answer_passes(polite_judge, tmp_path):
    for name, least in (("rl_example.jsonl", 300), ("rl_verifier_types.jsonl", 14)):
        rows = load_rows(os.path.join(DATA, name))
        assert len(rows) >= least
        for r in rows:
            assert check_spec(r.verifier, r.answer, r.prompt).passed, (name, r.id)
            assert not check_spec(r.verifier, "no", r.prompt).passed, (name, r.id)
    kinds = {r.verifier["type"] for r in load_rows(os.path.join(DATA, "rl_verifier_types.jsonl"))}
    assert kinds == {"exact", "numeric", "math", "regex", "json", "python", "judge"}
    dom = file_domain(os.path.join(DATA, "rl_example.jsonl"))
    assert all(len(dom.rows[(t, s)]) >= 10 for t in dom.tiers for s in ("train", "eval"))
    # the generator is deterministic: it rewrites the shipped files byte for byte
    script = os.path.join(ROOT, "scripts", "make_rl_example.py")
    subprocess.run([sys.executable, script, "--out-dir", str(tmp_path)], check=True, capture_output=True)
    for name in ("rl_example.jsonl", "rl_verifier_types.jsonl"):
        with open(os.path.join(DATA, name), "rb") as f:
            assert (tmp_path / name).read_bytes() == f.read(), name


TINY = ["model.hidden_size=32", "model.intermediate_size=64", "rl.rollout.prompts_per_step=4",
        "rl.rollout.group_size=4", "train.ckpt_every=0", "train.progress=false", "rl.rollout.max_new_tokens=8",
        "rl.rollout.max_prompt_len=48", "rl.steps=2", "observe.tensorboard=false", "rl.algo.old_logp=recompute"]


def _gold_or_wrong(model, tok, tasks, rcfg, *, seed, version):
    """A scripted policy: even samples write the row's gold answer, odd ones 'no'; verified as rollouts are."""
    from rlpt.rollout.format import completion_ids, prompt_ids
    from rlpt.rollout.single_turn import Trajectories, verify_all

    G, N = rcfg.group_size, rcfg.max_new_tokens
    R = len(tasks) * G
    response, lengths = np.zeros((R, N), np.int32), np.zeros(R, np.int32)
    for r in range(R):
        ids = completion_ids(tok, tasks[r // G].meta["answer"] if r % 2 == 0 else "no")
        response[r, :len(ids)], lengths[r] = ids, len(ids)
    rewards, passed, texts, verdicts, own = verify_all(tok, tasks, G, response, lengths)
    return Trajectories(tasks=tasks, prompts=[prompt_ids(tok, t.prompt) for t in tasks for _ in range(G)],
                        response=response, lengths=lengths, rollout_logp=np.zeros((R, N), np.float32),
                        rewards=rewards, passed=passed, group_ids=np.repeat(np.arange(len(tasks)), G),
                        truncated=np.zeros(R, bool), version=version, gen_s=0.0, verify_s=0.0, texts=texts,
                        verdicts=verdicts, reward_texts=own)


def test_rl_has_a_pulse_on_a_file_task(tmp_path):
    from rlpt.models import builtin_tokenizer, init_model
    from rlpt.observe.trajectory_log import read_trajectories
    from rlpt.pipeline.rl import run_rl

    path = _write(tmp_path / "pulse.jsonl", _many(chat_every=3))
    cfg = compose(TINY + ["data=rl_jsonl", f"data.path={path}"])
    cfg = dataclasses.replace(cfg, domains=rl_domains(cfg))
    tok = builtin_tokenizer()
    scripted = run_rl(cfg, tok, init_model=init_model(cfg.model, 0), out_dir=str(tmp_path / "gold"),
                      rollout_fn=_gold_or_wrong)
    for row in scripted["history"]:  # half of each group is the gold answer: the file's verifier pays exactly that
        assert row["pass_rate"] == 0.5 and row["reward_mean"] == 0.5 and row["reward/file/pulse"] == 0.5
        assert np.isfinite(row["loss"]) and row["grad_norm"] > 0
    records = read_trajectories(str(tmp_path / "gold" / "trajectories"))
    assert records and all(r["domain"] == "file/pulse" for r in records)
    assert {type(r["prompt"]) for r in records} == {str, list}  # chat prompts are logged as message lists
    # the real sampler on a random-init policy: rewards are the verifier's binary verdicts, and nothing crashes
    real = run_rl(cfg, tok, init_model=init_model(cfg.model, 0), out_dir=str(tmp_path / "real"))
    assert [h["step"] for h in real["history"]] == [1, 2]
    assert all(h["reward_mean"] == pytest.approx(h["pass_rate"]) for h in real["history"])
