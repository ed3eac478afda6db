"""Image placeholders in prompts: `<image>` in text and {"type": "image"} parts in chat messages expand to
tokens_per_image image tokens; the built-in chat template renders content lists as transformers does."""
import pytest

from rlpt.models import builtin_tokenizer
from rlpt.models.config import VisionConfig
from rlpt.rollout.format import prompt_ids

VISION = VisionConfig(image_token_id=127)


def test_text_markers_and_image_parts_give_the_same_tokens():
    tok = builtin_tokenizer()
    text = prompt_ids(tok, "<image>\nWhich bar is <image> taller?", VISION)
    parts = [{"type": "image"}, {"type": "text", "text": "\nWhich bar is "}, {"type": "image"},
             {"type": "text", "text": " taller?"}]
    chat = prompt_ids(tok, [{"role": "user", "content": parts}], VISION)
    assert text == chat and text.count(127) == 2 * VISION.tokens_per_image
    plain = prompt_ids(tok, "Which bar?")
    assert prompt_ids(tok, "Which bar?", VISION) == plain  # no image: the text prompt's tokens


def test_the_builtin_template_renders_content_lists_as_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    tok = builtin_tokenizer()
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How tall?"}]},
                {"role": "assistant", "content": "4"}]
    ids, mask = tok.encode_chat(messages)
    assert ids == hf.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert tok.decode(ids) == "<bos><|user|><image>How tall?<|end|><|assistant|>4<|end|>"
    assert sum(mask) == 2  # the answer and its end-of-turn token
