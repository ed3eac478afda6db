"""Preference pairs: JSONL text and chat formats agree, malformed files name file and line, bad pairs are
dropped or cut and counted, batch rows mask exactly the responses, synthetic and verifier pairs verify."""
import json

import numpy as np
import pytest

from rlpt.models import builtin_tokenizer
from rlpt.preference.data import PrefPair, batch_indices, clean_pairs, pair_arrays, read_pairs
from rlpt.preference.pairs import synthetic_pairs, verifier_pairs
from rlpt.rollout.format import completion_ids, prompt_ids, response_text
from rlpt.train.data import DataError

TOK = builtin_tokenizer()


def _write(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return str(path)


def test_text_and_chat_formats_give_the_same_tokens(tmp_path):
    user = {"role": "user", "content": "12+30="}
    good, bad = {"role": "assistant", "content": "42"}, {"role": "assistant", "content": "41"}
    path = _write(tmp_path / "p.jsonl", [
        {"prompt": "12+30=", "chosen": "42", "rejected": "41"},
        {"prompt": [user], "chosen": [good], "rejected": [bad]},
        {"chosen": [user, good], "rejected": [user, bad]},
    ])
    pairs = read_pairs(path, TOK)
    want = (tuple(prompt_ids(TOK, "12+30=")), tuple(completion_ids(TOK, "42")), tuple(completion_ids(TOK, "41")))
    for p in pairs:
        assert (p.prompt, p.chosen, p.rejected) == want
    assert pairs[1].task_id.endswith("p.jsonl:2")


@pytest.mark.parametrize("line, needle", [
    ("{not json", "invalid JSON"),
    ('{"prompt": "a", "chosen": "b"}', "needs string"),
    ('[1, 2]', "expected a JSON object"),
    (json.dumps({"chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                 "rejected": [{"role": "user", "content": "X"}, {"role": "assistant", "content": "c"}]}),
     "differ before their last message"),
    (json.dumps({"prompt": [{"role": "user", "content": "a"}], "chosen": [{"role": "user", "content": "b"}],
                 "rejected": [{"role": "assistant", "content": "c"}]}), "assistant message"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, line, needle):
    path = _write(tmp_path / "bad.jsonl", ['{"prompt": "1+1=", "chosen": "2", "rejected": "3"}', line])
    with pytest.raises(DataError) as e:
        read_pairs(path, TOK)
    assert f"{path}:2" in str(e.value) and needle in str(e.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_pairs(str(tmp_path / "nope.jsonl"), TOK)
    with pytest.raises(DataError, match="no preference pairs"):
        read_pairs(_write(tmp_path / "e.jsonl", [""]), TOK)


def _pair(prompt, chosen, rejected):
    return PrefPair(tuple(prompt_ids(TOK, prompt)), tuple(completion_ids(TOK, chosen)),
                    tuple(completion_ids(TOK, rejected)))


def test_clean_pairs_drops_cuts_and_counts():
    ok = _pair("1+2=", "3", "4")
    same = _pair("1+2=", "3", "3")
    empty = _pair("1+2=", "", "4")
    long_ = _pair("1+2=", "3" * 30, "3" * 29 + "4")  # differs only in the tail
    long2 = _pair("1+2=", "1" + "3" * 30, "2" + "3" * 30)  # differs at the start
    max_len = len(ok.prompt) + 10
    kept, counts = clean_pairs([ok, same, empty, long_, long2], TOK.eos_ids, max_len, "drop")
    assert kept == [ok]
    assert counts == {"pairs_in": 5, "identical": 1, "empty": 1, "overlong_dropped": 2, "truncated": 0,
                      "pairs_kept": 1}
    kept, counts = clean_pairs([ok, same, empty, long_, long2], TOK.eos_ids, max_len, "truncate")
    assert len(kept) == 2 and counts["truncated"] == 2 and counts["identical"] == 2  # long_ became identical
    assert all(len(p.prompt) + len(p.chosen) <= max_len for p in kept)
    with pytest.raises(ValueError, match="pref.overlong"):
        clean_pairs([ok], TOK.eos_ids, max_len, "keep")


def test_pair_arrays_mask_the_responses_and_kl_rows_mismatch():
    pairs = [_pair("1+2=", "3", "45"), _pair("10+20=", "30", "3")]
    a = pair_arrays(pairs, 24, kl_rows=True)
    for i, p in enumerate(pairs):
        for pre, resp in (("c_", p.chosen), ("r_", p.rejected)):
            m = a[pre + "mask"][i]
            assert m.sum() == len(resp)
            assert a[pre + "targets"][i][m > 0].tolist() == list(resp)
        other = pairs[(i + 1) % 2].chosen
        assert a["kc_targets"][i][a["kc_mask"][i] > 0].tolist() == list(other)
    with pytest.raises(ValueError, match="row length"):
        pair_arrays(pairs, 8)
    with pytest.raises(ValueError, match="no preference pairs"):
        pair_arrays([], 8)


def test_batch_indices_cover_each_epoch_once():
    got = np.concatenate([batch_indices(10, 5, s, seed=3) for s in range(4)])
    assert sorted(got[:10]) == list(range(10)) and sorted(got[10:]) == list(range(10))
    assert not np.array_equal(got[:10], got[10:])


def test_synthetic_pairs_verify():
    from rlpt.tasks import get_domain

    dom = get_domain("arith/add")
    tasks = [dom.generate(s, 2) for s in range(40)]
    pairs, counts = synthetic_pairs(TOK, tasks, corruption="mixed", seed=0)
    assert len(pairs) == 40 and counts["no_corruption"] == 0
    for t, p in zip(tasks, pairs):
        assert dom.verify(t, response_text(TOK, p.chosen)).passed
        assert not dom.verify(t, response_text(TOK, p.rejected)).passed


def test_verifier_pairs_pair_a_pass_with_a_failure():
    from rlpt.config import compose
    from rlpt.models import init_model
    from rlpt.tasks import get_domain

    cfg = compose(["model.hidden_size=32", "model.intermediate_size=64"])
    model = init_model(cfg.model, 0)
    dom = get_domain("arith/add")
    tasks = [dom.generate(s, 2) for s in range(6)]
    pairs, counts = verifier_pairs(model, TOK, tasks, samples=4, temperature=1.0, max_new_tokens=6,
                                   max_prompt_len=24, seed=0, gold_fallback=True)
    assert counts["tasks"] == 6 and counts["tasks_with_pair"] + counts["all_passed"] + counts["all_failed"] == 6
    by_id = {t.id: t for t in tasks}
    assert pairs
    for p in pairs:
        t = by_id[p.task_id]
        assert dom.verify(t, response_text(TOK, p.chosen)).passed
        assert not dom.verify(t, response_text(TOK, p.rejected)).passed
    with pytest.raises(ValueError, match="at least 2"):
        verifier_pairs(model, TOK, tasks, samples=1, temperature=1.0, max_new_tokens=6, max_prompt_len=24, seed=0)
