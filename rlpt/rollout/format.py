"""How a task becomes policy input and an answer becomes a completion: one place for SFT, RL and eval."""


def prompt_ids(tok, prompt) -> list[int]:
    """Token ids of a task prompt (text or chat messages) rendered as a user turn awaiting the assistant."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    ids, _ = tok.encode_chat(messages, add_generation_prompt=True)
    return ids


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
