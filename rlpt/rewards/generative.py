"""Generative judge: any rlpt Model grades (prompt, response) through the sampler with a rubric prompt."""
from __future__ import annotations

import re

import numpy as np

from rlpt.models.tokenizer import response_text, user_turn_ids
from rlpt.rewards.judges import JudgeScores, check_pairs, finish, new_counts
from rlpt.sampling import generate
from rlpt.sampling.methods import SamplingParams

DEFAULT_RUBRIC = (
    "You are a strict grader. Read the task and the response, then reply with one line 'Score: N', where N is an "
    "integer from 0 (wrong or off-task) to {scale} (fully correct).\nTask: {prompt}\nResponse: {response}\n"
)
_NUM = r"([+-]?\d+(?:\.\d+)?)"
_TAGGED = re.compile(r"<score>\s*" + _NUM + r"\s*</score>", re.IGNORECASE)
_LABELLED = re.compile(r"\b(?:score|rating|grade)\s*(?:is|[:=])?\s*" + _NUM + r"(?:\s*(?:/|out of)\s*(\d+))?",
                       re.IGNORECASE)
_FRACTION = re.compile(_NUM + r"\s*(?:/|out of)\s*(\d+)", re.IGNORECASE)
_PERCENT = re.compile(_NUM + r"\s*%")
_VERDICT = re.compile(r"\b(?:verdict|answer|judgement|judgment)\s*[:=]?\s*(\w+)", re.IGNORECASE)
_WORDS = {"correct": 1.0, "yes": 1.0, "pass": 1.0, "passed": 1.0, "true": 1.0, "good": 1.0, "right": 1.0,
          "incorrect": 0.0, "no": 0.0, "fail": 0.0, "failed": 0.0, "false": 0.0, "bad": 0.0, "wrong": 0.0}


def _one(values: list[float]) -> float | None:
    """The value if all candidates agree (a judge restating its score), None if they conflict or are absent."""
    values = sorted(set(values))
    return values[0] if len(values) == 1 else None


def _scaled(value: str, top: str | None, scale: float) -> float:
    denominator = float(top) if top else scale
    if denominator <= 0:
        return float("nan")
    v = float(value) / denominator
    return v if 0.0 <= v <= 1.0 else float("nan")


def parse_judgement(text: str, scale: float = 10.0) -> float | None:
    """A grade in [0, 1] from a judge's output, or None when it is absent, out of range or ambiguous.

    Tried in order, the first kind present decides: <score>N</score>; 'Score: N' / 'rating N/5' / 'grade is N
    out of 10'; a bare 'N/M'; 'N%'; 'Verdict: correct|incorrect|yes|no|pass|fail'; the whole text one such
    word; the whole text one number. N without a denominator is out of `scale`. Several different values of
    the deciding kind are ambiguous (None); repeats of one value are fine.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    for pattern, with_top in ((_TAGGED, False), (_LABELLED, True), (_FRACTION, True)):
        found = pattern.findall(text)
        if found:
            values = [_scaled(f[0], f[1] or None, scale) if with_top else _scaled(f, None, scale) for f in found]
            return None if any(np.isnan(values)) else _one(values)
    found = _PERCENT.findall(text)
    if found:
        values = [_scaled(f, "100", scale) for f in found]
        return None if any(np.isnan(values)) else _one(values)
    words = [w.casefold() for w in _VERDICT.findall(text)]
    if words:
        return _one([_WORDS[w] for w in words]) if all(w in _WORDS for w in words) else None
    bare = text.strip().strip(".!").casefold()
    if bare in _WORDS:
        return _WORDS[bare]
    if re.fullmatch(_NUM, bare):
        v = _scaled(bare, None, scale)
        return None if np.isnan(v) else v
    return None


class GenerativeJudge:
    """Grades with `model` through rlpt.sampling.generate: rubric.format(prompt=, response=, scale=) as a user
    turn, `votes` samples per pair (temperature 0 with votes=1 is greedy), the mean of the parsable grades.
    A pair with no parsable grade is a failure (score 0); counts['unparsed_votes'] counts single bad votes."""

    def __init__(self, model, tok, *, rubric: str = DEFAULT_RUBRIC, scale: float = 10.0, max_new_tokens: int = 16,
                 votes: int = 1, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 batch_size: int = 32, max_prompt_tokens: int | None = None, seed: int = 0):
        for key in ("{prompt}", "{response}"):
            if key not in rubric:
                raise ValueError(f"GenerativeJudge rubric lacks the {key} placeholder")
        if votes < 1 or batch_size < 1 or max_new_tokens < 1:
            raise ValueError(f"GenerativeJudge needs votes, batch_size, max_new_tokens >= 1; got {votes}, "
                             f"{batch_size}, {max_new_tokens}")
        if votes > 1 and temperature == 0:
            raise ValueError("GenerativeJudge votes > 1 at temperature 0 repeat one greedy answer; raise temperature")
        self.model, self.tok, self.rubric, self.scale = model, tok, rubric, scale
        self.sampling = dict(n=votes, sampling=SamplingParams(temperature, top_k, top_p))
        self.max_new_tokens, self.votes, self.batch_size, self.seed = max_new_tokens, votes, batch_size, seed
        limit = model.config.max_position_embeddings - max_new_tokens
        self.max_prompt_tokens = limit if max_prompt_tokens is None else min(max_prompt_tokens, limit)
        self.counts = {**new_counts(), "unparsed_votes": 0, "too_long": 0}

    def judge_prompts(self, prompts: list[str], responses: list[str]) -> list[list[int]]:
        return [user_turn_ids(self.tok, self.rubric.format(prompt=p, response=r, scale=int(self.scale)))
                for p, r in zip(prompts, responses)]

    def score(self, prompts, responses) -> JudgeScores:
        prompts, responses = check_pairs(prompts, responses)
        ids = self.judge_prompts(prompts, responses)
        raw = np.full((len(ids),), np.nan)
        texts = [""] * len(ids)
        fits = [i for i, p in enumerate(ids) if len(p) <= self.max_prompt_tokens]
        self.counts["too_long"] += len(ids) - len(fits)  # cannot be judged: a counted failure, not a crash
        calls = self.counts["calls"]
        for start in range(0, len(fits), self.batch_size):
            rows = fits[start:start + self.batch_size]
            out = generate(self.model, [ids[i] for i in rows], self.max_new_tokens, stop_ids=tuple(self.tok.eos_ids),
                           seed=self.seed + 7919 * calls + start, keep_state=False, **self.sampling)
            for j, i in enumerate(rows):
                grades, outs = [], []
                for v in range(self.votes):
                    r = j * self.votes + v
                    outs.append(response_text(self.tok, out.tokens[r, :int(out.lengths[r])]))
                    grades.append(parse_judgement(outs[-1], self.scale))
                self.counts["unparsed_votes"] += sum(g is None for g in grades)
                good = [g for g in grades if g is not None]
                raw[i] = float(np.mean(good)) if good else np.nan
                texts[i] = outs[0] if self.votes == 1 else " || ".join(outs)
        return finish(self.counts, raw, np.nan_to_num(raw), texts)
