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


def test_a_tiled_image_takes_one_image_of_tokens_per_tile():
    import dataclasses

    import numpy as np

    from rlpt.models.config import ModelConfig
    from rlpt.models.vision import VLMConfig, init_vlm
    from rlpt.rollout.format import task_prompt
    from rlpt.tasks.base import Task

    tok = builtin_tokenizer()
    vision = dataclasses.replace(VISION, image_size=16, hidden_size=32, intermediate_size=32, max_tiles=4)
    wide = np.random.default_rng(0).integers(0, 256, (16, 32, 3), dtype=np.uint8)
    task = Task("test/wide", "test/wide:t1:s0", "<image> and <image>?", 1,
                {"images": [wide, wide[:, :16]], "answer": "x"})
    ids, pixels = task_prompt(tok, task, vision)
    assert pixels.shape == (4, 3, 16, 16)  # thumbnail + 2 tiles, then the square image
    assert ids.count(127) == 4 * vision.tokens_per_image
    assert prompt_ids(tok, task.prompt, vision, [3, 1]) == ids
    vlm = init_vlm(VLMConfig(ModelConfig(hidden_size=32, intermediate_size=64), vision), seed=0)
    logits = np.asarray(vlm(np.asarray([ids], np.int32), pixels))
    assert logits.shape == (1, len(ids), 128) and np.isfinite(logits).all()
    with pytest.raises(ValueError, match="1 image placeholders for 2 images"):
        prompt_ids(tok, "<image>", vision, [1, 1])
