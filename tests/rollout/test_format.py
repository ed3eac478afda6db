"""The cached prompt split of character-level tokenizers equals a full chat-template render."""
import pytest

from rlpt.models import builtin_tokenizer
from rlpt.models.tokenizer import render_user_turn as _render
from rlpt.rollout.format import completion_ids, prompt_ids, response_text


@pytest.mark.parametrize("text", ["12+7=", "sort 3 9 0:", "a\nb\tc  ", "x<|end|>y", "", "é"])
def test_prompt_ids_equal_template_render(text):
    tok = builtin_tokenizer()
    assert prompt_ids(tok, text) == _render(tok, [{"role": "user", "content": text}])


def test_completion_roundtrip():
    tok = builtin_tokenizer()
    ids = completion_ids(tok, "0 3 9")
    assert ids[-1] == tok.eos_ids[0]
    assert response_text(tok, ids + [5, 6]) == "0 3 9"


@pytest.mark.parametrize("text", ["exit code: 0\nstdout:\n", '<tool_response name="x">\nok\n</tool_response>', "", "é"])
def test_observation_ids_equal_a_tool_turn_in_the_conversation(text):
    """The tokens appended after the policy's end-of-turn are the template's tool turn + next assistant header."""
    from rlpt.rollout.format import observation_ids

    tok = builtin_tokenizer()
    head = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    before, _ = tok.encode_chat(head)
    full, _ = tok.encode_chat(head + [{"role": "tool", "content": text}], add_generation_prompt=True)
    assert before[-1] in tok.eos_ids and full[:len(before)] == before
    assert observation_ids(tok, text) == full[len(before):]
