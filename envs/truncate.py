"""Cut an observation to a budget (characters or tokens), keeping head and tail and a visible marker."""

from collections.abc import Callable

MARKER = "\n[... {n} characters cut to fit the observation budget ...]\n"


def truncate(text: str, budget: int, count: Callable[[str], int] = len) -> str:
    """Longest head + marker + tail with count(result) <= budget (count: len, or a tokenizer's length).

    Two thirds of the kept text is the head (errors usually show at the start, results at the end).
    """
    if budget <= 0:
        raise ValueError(f"observation budget must be > 0, got {budget}")
    if count(text) <= budget:
        return text

    def build(keep: int) -> str:
        head = (2 * keep) // 3
        tail = keep - head
        return text[:head] + MARKER.format(n=len(text) - keep) + (text[len(text) - tail :] if tail else "")

    lo, hi = 0, len(text)
    if count(build(0)) > budget:
        return MARKER.format(n=len(text)).strip()[:budget]  # not even the marker fits: show what does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(build(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return build(lo)
