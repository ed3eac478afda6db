"""The cached prompt split of character-level tokenizers equals a full chat-template render."""
import pytest

from rlpt.models import builtin_tokenizer
from rlpt.rollout.format import _render, completion_ids, prompt_ids, response_text


@pytest.mark.parametrize("text", ["12+7=", "sort 3 9 0:", "a\nb\tc  ", "x<|end|>y", "", "é"])
def test_prompt_ids_equal_template_render(text):
    tok = builtin_tokenizer()
    assert prompt_ids(tok, text) == _render(tok, [{"role": "user", "content": text}])


def test_completion_roundtrip():
    tok = builtin_tokenizer()
    ids = completion_ids(tok, "0 3 9")
    assert ids[-1] == tok.eos_ids[0]
    assert response_text(tok, ids + [5, 6]) == "0 3 9"
