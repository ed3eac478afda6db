"""Judges: verdict parsing, the reward-model judge over a scorer, the generative judge through the sampler,
and judges as reward-mixture components named in YAML."""
import numpy as np
import pytest
from omegaconf import OmegaConf

from rlpt.config.tasks import RewardConfig
from rlpt.models import builtin_tokenizer
from rlpt.rewards import RewardMixture
from rlpt.rewards.generative import GenerativeJudge, parse_judgement
from rlpt.rewards.judges import JUDGES, Judge, RewardModelJudge, register_judge
from rlpt.tasks import get_domain
from tests.sampling.helpers import fixed_logits_model


@pytest.mark.parametrize("text, want", [
    ("Score: 7", 0.7), ("score=7/10", 0.7), ("<score>3</score> because", 0.3), ("I'd say 8/10.", 0.8),
    ("The rating is 4 out of 5", 0.8), ("grade: 2.5", 0.25), ("75%", 0.75), ("Verdict: correct", 1.0),
    ("Verdict: incorrect", 0.0), ("no", 0.0), ("Yes.", 1.0), ("9", 0.9), ("Score: 7\nFinal score: 7", 0.7),
    ("<score>6</score> Score: 9", 0.6),  # the tagged form decides when present
])
def test_parse_judgement_reads_common_formats(text, want):
    assert parse_judgement(text) == pytest.approx(want)


@pytest.mark.parametrize("text", [
    "", "   ", "hello", "Score: 7. On reflection, Score: 8", "Score: 11", "Score: -1", "3/0", "150%",
    "Verdict: maybe", "Verdict: correct. Verdict: incorrect", "12", "score: seven",
])
def test_parse_judgement_refuses_missing_ambiguous_and_out_of_range(text):
    assert parse_judgement(text) is None


def test_reward_model_judge_squashes_batches_and_counts_failures():
    calls = []

    def scorer(prompts, responses):
        calls.append(len(prompts))
        return np.array([{"good": 2.0, "bad": -2.0, "nan": np.nan, "inf": np.inf}[r] for r in responses])

    judge = RewardModelJudge(scorer, batch_size=2)
    assert isinstance(judge, Judge)
    out = judge.score(["p"] * 5, ["good", "bad", "nan", "good", "inf"])
    assert calls == [2, 2, 1]
    np.testing.assert_allclose(out.scores, [1 / (1 + np.exp(-2)), 1 / (1 + np.exp(2)), 0, 1 / (1 + np.exp(-2)), 0])
    np.testing.assert_array_equal(out.failed, [False, False, True, False, True])
    assert np.isnan(out.raw[[2, 4]]).all() and out.raw[0] == 2.0
    assert judge.counts == {"calls": 1, "items": 5, "failed": 2}
    assert RewardModelJudge(scorer, squash="clip").score(["p"], ["good"]).scores[0] == 1.0


def test_reward_model_judge_rejects_caller_bugs():
    judge = RewardModelJudge(lambda p, r: np.zeros((len(p), 1)))
    with pytest.raises(ValueError, match="shape"):
        judge.score(["p"], ["r"])
    with pytest.raises(ValueError, match="1 prompts but 2 responses"):
        judge.score(["p"], ["r", "s"])
    with pytest.raises(TypeError, match=r"responses\[0\] is int"):
        judge.score(["p"], [3])
    with pytest.raises(KeyError, match="squash"):
        RewardModelJudge(lambda p, r: p, squash="tanh")


def _emitting_model(tok, text_ids_weights, vocab_boost=12.0):
    """A model whose next-token distribution is the same after any context: the given ids get the given
    log-weights, every other id sits vocab_boost below."""
    logits = np.full(tok.vocab_size, -vocab_boost, np.float32)
    for i, w in text_ids_weights.items():
        logits[i] = w
    return fixed_logits_model(logits)


def test_generative_judge_grades_through_the_sampler():
    tok = builtin_tokenizer()
    seven = tok.encode("7")[0]
    judge = GenerativeJudge(_emitting_model(tok, {seven: 5.0}), tok, max_new_tokens=1)
    out = judge.score(["2+2=", "3+3="], ["4", "5"])
    assert out.texts == ["7", "7"]
    np.testing.assert_allclose(out.scores, [0.7, 0.7])
    assert not out.failed.any() and judge.counts["calls"] == 1 and judge.counts["items"] == 2


def test_generative_judge_counts_unparsable_outputs_as_failures():
    tok = builtin_tokenizer()
    letter = tok.encode("x")[0]
    judge = GenerativeJudge(_emitting_model(tok, {letter: 5.0}), tok, max_new_tokens=3, max_prompt_tokens=400)
    out = judge.score(["q", "q" * 1000], ["a", "b"])
    assert out.texts[0] == "xxx" and out.failed.all() and (out.scores == 0).all()
    assert judge.counts["failed"] == 2 and judge.counts["too_long"] == 1 and judge.counts["unparsed_votes"] == 1


def test_generative_judge_averages_votes():
    tok = builtin_tokenizer()
    three, nine, x = tok.encode("3")[0], tok.encode("9")[0], tok.encode("x")[0]
    model = _emitting_model(tok, {three: 5.0, nine: 5.0, x: 5.0})
    judge = GenerativeJudge(model, tok, max_new_tokens=1, votes=16, temperature=1.0, seed=3)
    out = judge.score(["q"] * 4, ["r"] * 4)
    assert not out.failed.any()  # 16 votes: all three unparsable has chance (1/3)^16
    assert ((out.raw > 0.3) & (out.raw < 0.9)).all() and len(set(out.raw.round(6))) > 1
    assert 0 < judge.counts["unparsed_votes"] < 64
    with pytest.raises(ValueError, match="temperature"):
        GenerativeJudge(model, tok, votes=4)
    with pytest.raises(ValueError, match="placeholder"):
        GenerativeJudge(model, tok, rubric="Grade {prompt}")


@pytest.fixture
def length_judge():
    """A registered judge preferring short responses; removed afterwards."""
    calls = []

    def scorer(prompts, responses):
        calls.append(len(responses))
        return np.array([2.0 - len(r) for r in responses])

    register_judge("brevity", RewardModelJudge(scorer))
    yield calls
    del JUDGES["brevity"]


YAML = """
name: judged
components:
  correctness: {weight: 1.0, target_chars: 0, max_chars: 0}
  judge_brevity: {weight: 0.5, target_chars: 0, max_chars: 0}
per_domain:
  "str/*":
    judge_brevity: {weight: 1.0, target_chars: 0, max_chars: 0}
clip_low: -1.0
clip_high: 2.0
"""


def test_yaml_mixture_names_a_judge_component(length_judge):
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RewardConfig), OmegaConf.create(YAML)))
    mix = RewardMixture(cfg)
    add, rev = get_domain("arith/add"), get_domain("str/reverse")
    tasks = [add.generate(1, 1), add.generate(2, 1), rev.generate(3, 1)]
    responses = [tasks[0].meta["answer"], "nope", "abc"]
    verdicts = [get_domain(t.domain).verify(t, r) for t, r in zip(tasks, responses)]
    single = [mix.score(t, r, v) for t, r, v in zip(tasks, responses, verdicts)]
    n_single = len(length_judge)
    rewards, parts = mix.score_batch(tasks, responses, verdicts)
    assert len(length_judge) == n_single + 1  # one judge call for the whole batch
    np.testing.assert_allclose(rewards, [s[0] for s in single], rtol=1e-6)
    assert parts == [s[1] for s in single]
    sig = 1 / (1 + np.exp(-(2.0 - len(responses[0]))))
    assert single[0][0] == pytest.approx(1.0 + 0.5 * sig)
    assert list(parts[2]) == ["judge_brevity"] and single[2][0] == pytest.approx(1 / (1 + np.exp(1.0)))


def test_mixture_with_an_unregistered_judge_fails_loudly():
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RewardConfig),
                                              OmegaConf.create(YAML.replace("brevity", "ghost"))))
    with pytest.raises(KeyError, match="no judge 'ghost' registered"):
        RewardMixture(cfg)
    register_judge("dup", RewardModelJudge(lambda p, r: np.zeros(len(p))))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_judge("dup", RewardModelJudge(lambda p, r: np.zeros(len(p))))
    finally:
        del JUDGES["dup"]


def test_reward_model_from_rlpt_preference_is_a_scorer():
    import dataclasses
    import functools

    from rlpt.models import init_model
    from rlpt.preference.reward_model import RewardModel
    from rlpt.train.heads import init_head
    from tests.sampling.helpers import TINY

    tok = builtin_tokenizer()
    cfg = dataclasses.replace(TINY, vocab_size=tok.vocab_size)
    rm = RewardModel(cfg, {"lm": init_model(cfg, seed=0).params, "head": init_head(cfg.hidden_size, seed=1)})
    judge = RewardModelJudge(functools.partial(rm.score, tok))
    prompts, responses = ["2+2=", "3+3=", "1+1="], ["4", "5", "2"]
    out = judge.score(prompts, responses)
    np.testing.assert_allclose(out.raw, rm.score(tok, prompts, responses), rtol=1e-6)
    np.testing.assert_allclose(out.scores, 1 / (1 + np.exp(-out.raw)), rtol=1e-6)
    assert not out.failed.any() and len(set(out.raw.round(6))) == 3
