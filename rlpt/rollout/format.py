"""How a task becomes policy input and an answer becomes a completion: one place for SFT, RL and eval."""
import logging
import weakref

import numpy as np

from rlpt.models.image_processing import IMAGE_TOKEN, preprocess_tiles
from rlpt.models.tokenizer import SPLIT_PROBE, user_turn_ids, user_turn_split
from rlpt.models.tokenizer import response_text as response_text  # re-exported: rollout, eval and SFT use it here


def prompt_ids(tok, prompt, vision=None, tiles=None) -> list[int]:
    """Token ids of a task prompt (text or chat messages) rendered as a user turn awaiting the assistant.

    vision: the policy's `rlpt.models.config.VisionConfig`; each IMAGE_TOKEN ("<image>") marker in the prompt then
    becomes tokens_per_image image tokens (model.vision.image_token_id), where the images' features go. A
    tokenizer that renders the marker itself (an HF VLM's added "<image>" token) has each such token expanded; the
    built-in character tokenizer has the text around the markers encoded and the image tokens put in between.
    tiles: per image, the tiles it became (model.vision.max_tiles; None: one each); marker i then takes
    tiles[i] x tokens_per_image tokens.
    """
    if vision is not None:
        return _with_images(tok, prompt, vision, tiles)
    return user_turn_ids(tok, prompt)


def _image_tokens(vision, tiles, want: int) -> list[list[int]]:
    """The image tokens each of `want` placeholders becomes: tiles[i] x tokens_per_image ids (one tile each
    without tiles)."""
    tiles = [1] * want if tiles is None else list(tiles)
    if len(tiles) != want:
        raise ValueError(f"{want} image placeholders for {len(tiles)} images")
    return [[vision.image_token_id] * (vision.tokens_per_image * int(n)) for n in tiles]


def _with_images(tok, prompt, vision, tiles=None) -> list[int]:
    split = user_turn_split(tok) if isinstance(prompt, str) else None
    if split is not None:
        pieces = prompt.split(IMAGE_TOKEN)
        images = _image_tokens(vision, tiles, len(pieces) - 1)
        ids = list(split[0])
        for i, piece in enumerate(pieces):
            ids += (images[i - 1] if i else []) + tok.encode(piece)
        return ids + split[1]
    return expand_image_markers(tok, prompt_ids(tok, prompt), vision, _count_images(prompt), tiles)


def expand_image_markers(tok, ids: list[int], vision, want: int, tiles=None) -> list[int]:
    """Rendered ids with each IMAGE_TOKEN placeholder (one added token, an HF VLM's, else the tokens of its text)
    replaced by its image's tokens (tiles[i] x tokens_per_image); raises unless exactly `want` are found."""
    images = _image_tokens(vision, tiles, want)
    marker = tok.backend.token_to_id(IMAGE_TOKEN)
    marker = [marker] if marker is not None else tok.encode(IMAGE_TOKEN)
    out, i, found = [], 0, 0
    while i < len(ids):
        if ids[i:i + len(marker)] == marker:
            if found < want:
                out += images[found]
            found += 1
            i += len(marker)
        else:
            out.append(ids[i])
            i += 1
    if found != want:
        raise ValueError(f"tokenizer {tok.source}: found {found} image placeholders after tokenization where the "
                         f"text has {want} (the {IMAGE_TOKEN!r} text merges with its neighbours); add "
                         f"{IMAGE_TOKEN!r} as a special token")
    return out


def observation_parts(obs, vision, where: str) -> tuple[str, np.ndarray | None, list[int] | None]:
    """(text, pixel_values or None, tiles per image or None) of an environment observation: a string, or a dict
    with 'text' and an 'image' (H, W, 3) or 'images' (one IMAGE_TOKEN per image in the text). Images need a
    vision-language policy."""
    if isinstance(obs, str):
        return obs, None, None
    if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
        raise TypeError(f"{where}: an observation is a str or a dict with a 'text' str, got {type(obs).__name__}")
    images = list(obs.get("images") or []) + ([obs["image"]] if obs.get("image") is not None else [])
    if not images:
        return obs["text"], None, None
    if vision is None:
        raise ValueError(f"{where}: the observation holds {len(images)} image(s) but the policy has no vision "
                         "tower (set model.vision)")
    if obs["text"].count(IMAGE_TOKEN) != len(images):
        raise ValueError(f"{where}: the observation's text has {obs['text'].count(IMAGE_TOKEN)} {IMAGE_TOKEN} "
                         f"placeholders for {len(images)} images")
    return (obs["text"], *preprocess_tiles(images, vision.image_size, vision.max_tiles,
                                           sample_ids=[where] * len(images)))


def _count_images(prompt) -> int:
    """Image placeholders in a prompt: IMAGE_TOKEN markers in text, {"type": "image"} parts in content lists."""
    if isinstance(prompt, str):
        return prompt.count(IMAGE_TOKEN)
    n = 0
    for m in prompt:
        content = m.get("content")
        if isinstance(content, str):
            n += content.count(IMAGE_TOKEN)
        elif content:
            n += sum(1 if p.get("type") == "image" else str(p.get("text", "")).count(IMAGE_TOKEN) for p in content)
    return n


def task_images(task, vision) -> tuple[np.ndarray, list[int]]:
    """(pixel_values (N, C, S, S), tiles per image) of a task's meta['images'] for the vision tower: N tiles
    (one per image unless model.vision.max_tiles > 1; N may be 0); a corrupt or unsupported image raises a
    ValueError naming the task id."""
    images = list(task.meta.get("images") or [])
    return preprocess_tiles(images, vision.image_size, vision.max_tiles, sample_ids=[task.id] * len(images))


def task_prompt(tok, task, vision=None) -> tuple[list[int], np.ndarray | None]:
    """(prompt ids, pixel_values or None) of a task for a policy with `vision` (None: text only): the one place
    SFT data, rollouts and evaluation turn an image task into model inputs."""
    if vision is None:
        return prompt_ids(tok, task.prompt), None
    pixels, tiles = task_images(task, vision)
    if _count_images(task.prompt) != len(tiles):
        raise ValueError(f"task {task.id}: the prompt has {_count_images(task.prompt)} {IMAGE_TOKEN} placeholders "
                         f"for {len(tiles)} images")
    ids = prompt_ids(tok, task.prompt, vision, tiles)
    n = sum(1 for t in ids if t == vision.image_token_id)
    if n != len(pixels) * vision.tokens_per_image:
        raise ValueError(f"task {task.id}: {n} image tokens in the prompt for {len(pixels)} image tiles x "
                         f"{vision.tokens_per_image} tokens per tile")
    return ids, pixels


def completion_ids(tok, text: str) -> list[int]:
    """The assistant's tokens for `text`, ending with the end-of-turn id."""
    return tok.encode(text) + [tok.eos_ids[0]]


# The turn that carries a tool's output back to the policy, and the header of the policy's next turn.
_OBS_SPLITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_HEAD = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


def _observation_render(tok, text: str) -> list[int]:
    """Tokens the chat template puts after the assistant's end-of-turn token: a tool turn with `text`,
    then the generation prompt of the next assistant turn."""
    before, _ = tok.encode_chat(_HEAD)
    stops = set(tok.eos_ids)
    ends = [i for i, t in enumerate(before) if t in stops]
    if not ends:
        raise ValueError(f"tokenizer {tok.source}: the chat template ends an assistant turn with none of the "
                         f"stop ids {sorted(stops)}; multi-turn rollouts need one")
    cut = ends[-1] + 1
    full, _ = tok.encode_chat(_HEAD + [{"role": "tool", "content": text}], add_generation_prompt=True)
    if full[:cut] != before[:cut]:
        raise ValueError(f"tokenizer {tok.source}: the chat template re-renders earlier turns when a tool turn "
                         "follows; token-in/token-out multi-turn rollouts need a prefix-stable template")
    return full[cut:]


def observation_ids(tok, text: str) -> list[int]:
    """Token ids appended after the policy's end-of-turn token: the tool turn holding `text` (e.g. a tool's
    output) and the next assistant header, exactly as the chat template renders them in a conversation."""
    if tok not in _OBS_SPLITS:
        split = None
        if tok.source == "builtin_tokenizer()":
            full, body = _observation_render(tok, SPLIT_PROBE), tok.encode(SPLIT_PROBE)
            at = next((i for i in range(len(full)) if full[i:i + len(body)] == body), None)
            if at is not None:
                split = (full[:at], full[at + len(body):])
        _OBS_SPLITS[tok] = split
    split = _OBS_SPLITS[tok]
    if split is not None:
        return split[0] + tok.encode(text) + split[1]
    return _observation_render(tok, text)


def task_prompt_or_blank(tok, task, vision=None) -> tuple[list[int], np.ndarray | None, bool]:
    """`task_prompt` plus ok: a task whose image is corrupt or unsupported is logged (naming the task id) and
    given blank pixels (ok=False), so that a rollout or an evaluation goes on; its callers drop it from the update
    and score it 0."""
    try:
        return (*task_prompt(tok, task, vision), True)
    except ValueError as e:
        if vision is None:
            raise
        logging.getLogger(__name__).warning("%s; dropped (scored 0, not trained on)", e)
        ids = prompt_ids(tok, task.prompt, vision)
        n = sum(1 for t in ids if t == vision.image_token_id) // vision.tokens_per_image
        return ids, np.zeros((n, vision.num_channels, vision.image_size, vision.image_size), np.float32), False


def policy_vision(model):
    """The policy's VisionConfig (a VisionLanguageModel's), or None for a text model (or no model)."""
    return getattr(getattr(model, "config", None), "vision", None)


def batch_prompts(tok, tasks, vision=None) -> tuple[list[list[int]], list | None, list[bool]]:
    """(prompt ids per task, pixel_values per task or None for a text policy, ok per task) for a batch of tasks
    (`task_prompt_or_blank`: a task with a corrupt image is sampled on blank pixels and marked not ok)."""
    inputs = [task_prompt_or_blank(tok, t, vision) for t in tasks]
    pixels = None if vision is None else [px for _, px, _ in inputs]
    return [ids for ids, _, _ in inputs], pixels, [ok for _, _, ok in inputs]


def sampler_images(pixels) -> dict:
    """The sampler's images kwarg for `batch_prompts`' pixels: {} for a text policy, else every task's images in
    prompt order."""
    return {} if pixels is None else {"images": np.concatenate(pixels)}


def fit_width(length: int, cap: int, floor: int = 8) -> int:
    """Row width for a batch whose longest sequence has `length` tokens: the next power of two (at least
    `floor`), at most `cap`. Rows no wider than the batch needs, with few distinct shapes to compile."""
    if length > cap:
        raise ValueError(f"a sequence of {length} tokens exceeds the row length {cap}")
    return min(cap, max(floor, 1 << (max(length, 1) - 1).bit_length()))
