"""Response hygiene shared by every verifier: reject pathological text, extract the final answer."""

import re

MAX_RESPONSE_CHARS = 20_000
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# Unicode category Cc minus \t \n \r, plus the surrogate block (lone surrogates cannot be encoded).
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def reject_reason(response: object, max_chars: int = MAX_RESPONSE_CHARS) -> str | None:
    """Why `response` must score 0 before any parsing, or None when it is ordinary text.

    Rejects non-strings, text over `max_chars`, lone surrogates (not encodable as UTF-8) and control
    characters other than newline, tab and carriage return.
    """
    if not isinstance(response, str):
        return f"response is {type(response).__name__}, not str"
    if len(response) > max_chars:
        return f"response has {len(response)} chars > {max_chars}"
    bad = _FORBIDDEN.search(response)
    if bad is None:
        return None
    if "\ud800" <= bad.group() <= "\udfff":
        return "response contains a lone surrogate"
    return f"response contains control character {ord(bad.group()):#x}"


def final_answer(response: str) -> str | None:
    """The answer a response commits to: the single <answer>...</answer> span if tags are used,
    else the whole stripped response. Several answer tags (a shotgun) give None."""
    spans = _ANSWER_TAG.findall(response)
    if len(spans) > 1:
        return None
    if spans:
        return spans[0].strip()
    if "<answer>" in response or "</answer>" in response:
        return None
    return response.strip()


def normalise(text: str) -> str:
    """Case-folded, whitespace-collapsed text for normalised matching."""
    return " ".join(text.split()).casefold()
