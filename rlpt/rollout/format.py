"""How a task becomes policy input and an answer becomes a completion: one place for SFT, RL and eval."""
import weakref

# Character-level tokenizers encode each character on its own, so a rendered user turn is exactly
# prefix + encode(text) + suffix; caching that split skips a jinja render per prompt (SFT data hot path).
_SPLITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PROBE = "probe 12+7="


def _render(tok, messages) -> list[int]:
    ids, _ = tok.encode_chat(messages, add_generation_prompt=True)
    return ids


def _split(tok):
    if tok not in _SPLITS:
        split = None
        if tok.source == "builtin_tokenizer()":
            full, body = _render(tok, [{"role": "user", "content": _PROBE}]), tok.encode(_PROBE)
            at = next((i for i in range(len(full)) if full[i:i + len(body)] == body), None)
            if at is not None:
                split = (full[:at], full[at + len(body):])
        _SPLITS[tok] = split
    return _SPLITS[tok]


def prompt_ids(tok, prompt) -> list[int]:
    """Token ids of a task prompt (text or chat messages) rendered as a user turn awaiting the assistant."""
    if isinstance(prompt, str):
        split = _split(tok)
        if split is not None:
            return split[0] + tok.encode(prompt) + split[1]
        return _render(tok, [{"role": "user", "content": prompt}])
    return _render(tok, list(prompt))


def completion_ids(tok, text: str) -> list[int]:
    """The assistant's tokens for `text`, ending with the end-of-turn id."""
    return tok.encode(text) + [tok.eos_ids[0]]


def response_text(tok, ids) -> str:
    """Decode generated ids up to (not including) the first stop id."""
    out = []
    stops = set(tok.eos_ids)
    for i in ids:
        if int(i) in stops:
            break
        out.append(int(i))
    return tok.decode(out, skip_special_tokens=True)


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
            full, body = _observation_render(tok, _PROBE), tok.encode(_PROBE)
            at = next((i for i in range(len(full)) if full[i:i + len(body)] == body), None)
            if at is not None:
                split = (full[:at], full[at + len(body):])
        _OBS_SPLITS[tok] = split
    split = _OBS_SPLITS[tok]
    if split is not None:
        return split[0] + tok.encode(text) + split[1]
    return _observation_render(tok, text)
