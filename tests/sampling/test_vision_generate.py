"""generate() with a VisionLanguageModel: images enter once, in the prefill; greedy tokens and log-probs equal a
teacher-forced forward of the whole VLM over prompt + generated tokens; bad inputs raise named errors."""
import jax
import numpy as np
import pytest

from rlpt.models.config import ModelConfig
from rlpt.models.transformer import forward
from rlpt.models.vision import VisionConfig, VLMConfig, image_features, init_vlm, merge_embeddings
from rlpt.sampling import generate

IMG = 3  # the image token id (a real vocabulary id, also used as a pad-free id here)


@pytest.fixture(scope="module")
def vlm():
    text = ModelConfig(family="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, qkv_bias=True)
    vision = VisionConfig(image_size=16, patch_size=8, hidden_size=32, intermediate_size=48, num_layers=2,
                          num_heads=4, image_token_id=IMG)
    return init_vlm(VLMConfig(text, vision), seed=1)


def test_greedy_generation_equals_teacher_forced_vlm(vlm):
    k = vlm.config.vision.tokens_per_image
    prompts = [[5, 6] + [IMG] * k + [7], [9] + [IMG] * k + [10, 11, 12, 13]]  # ragged: right padding in the prefill
    pixels = np.asarray(jax.random.normal(jax.random.key(0), (2, 3, 16, 16)), np.float32) * 2
    out = generate(vlm, prompts, 6, temperature=0.0, images=pixels, keep_state=False)
    # teacher forcing: prompt + generated tokens of both rows in one right-padded batch (one compile)
    seqs = [list(p) + [int(t) for t in out.tokens[r, :out.lengths[r]]] for r, p in enumerate(prompts)]
    width = max(map(len, seqs))
    tokens = np.zeros((2, width), np.int32)
    segments = np.zeros((2, width), np.int32)
    prompt_part = np.zeros((2, width), bool)  # a generated token equal to IMG is text, not an image
    for r, seq in enumerate(seqs):
        tokens[r, :len(seq)], segments[r, :len(seq)], prompt_part[r, :len(prompts[r])] = seq, 1, True

    @jax.jit
    def teacher_forced(params, tokens, segments, prompt_part, pixels):
        feats = image_features(params, vlm.config, pixels)
        embeds = merge_embeddings(params, vlm.config, tokens, feats, prompt_part)
        return forward(params["text"], vlm.config.text, tokens, segment_ids=segments, embeds=embeds)

    all_logits = np.asarray(teacher_forced(vlm.params, tokens, segments, prompt_part, pixels))
    for r, p in enumerate(prompts):
        logits = all_logits[r]
        for j in range(int(out.lengths[r])):
            pos = len(p) - 1 + j
            assert int(out.tokens[r, j]) == int(np.argmax(logits[pos]))
            want = logits[pos] - np.log(np.exp(logits[pos] - logits[pos].max()).sum()) - logits[pos].max()
            np.testing.assert_allclose(out.logprobs[r, j], want[out.tokens[r, j]], atol=2e-4)
    # the images matter: other pixels, other tokens (a test that could not fail otherwise)
    other = generate(vlm, prompts, 6, temperature=0.0, images=-pixels, keep_state=False)
    assert not np.array_equal(other.logprobs, out.logprobs)


def test_named_errors(vlm):
    k = vlm.config.vision.tokens_per_image
    with pytest.raises(ValueError, match="image tokens for 0 images"):
        generate(vlm, [[5] + [IMG] * k], 2)
    with pytest.raises(ValueError, match="needs a VisionLanguageModel"):
        generate(vlm.text_model(), [[5, 6]], 2, images=np.zeros((1, 3, 16, 16), np.float32))
    text_only = generate(vlm, [[5, 6, 7]], 3, temperature=0.0)  # a VLM samples text-only prompts as its decoder
    assert text_only.tokens.shape == (1, 3)


def test_a_second_turn_brings_a_new_image_and_keeps_the_first_in_the_cache(vlm):
    """Turn 2 appends an observation holding a new image (continue_generation(images=)): the tower runs on that
    image only, and the tokens and log-probs equal a teacher-forced forward of the whole conversation."""
    from rlpt.sampling import continue_generation

    k = vlm.config.vision.tokens_per_image
    prompt = [5] + [IMG] * k + [7]
    pixels = np.asarray(jax.random.normal(jax.random.key(2), (2, 3, 16, 16)), np.float32)
    first = generate(vlm, [prompt], 3, temperature=0.0, images=pixels[:1], stop_ids=())
    turn1 = [int(t) for t in first.tokens[0, :first.lengths[0]]]
    observation = [9] + [IMG] * k + [10]
    second = continue_generation(vlm, first, [observation], 4, temperature=0.0, images=pixels[1:])
    turn2 = [int(t) for t in second.tokens[0, :second.lengths[0]]]
    seq = prompt + turn1 + observation + turn2
    tokens = np.asarray([seq], np.int32)
    is_image = np.zeros((1, len(seq)), bool)
    is_image[0, 1:1 + k] = True
    start = len(prompt) + len(turn1) + 1
    is_image[0, start:start + k] = True  # generated tokens equal to IMG stay text

    @jax.jit
    def teacher_forced(params, tokens, valid, pixels):
        embeds = merge_embeddings(params, vlm.config, tokens, image_features(params, vlm.config, pixels), valid)
        return forward(params["text"], vlm.config.text, tokens, embeds=embeds)

    logits = np.asarray(teacher_forced(vlm.params, tokens, is_image, pixels))[0]
    at = len(prompt) + len(turn1) + len(observation) - 1
    for j, t in enumerate(turn2):
        assert t == int(np.argmax(logits[at + j]))
        row = logits[at + j] - logits[at + j].max()
        np.testing.assert_allclose(second.logprobs[0, j], row[t] - np.log(np.exp(row).sum()), atol=2e-4)
    with pytest.raises(ValueError, match="image tokens for 0 images"):
        again = generate(vlm, [prompt], 2, temperature=0.0, images=pixels[:1], stop_ids=())
        continue_generation(vlm, again, [observation], 2, temperature=0.0)
