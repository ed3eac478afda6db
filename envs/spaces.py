"""A text space that accepts any Unicode string (Gymnasium's Text rejects characters outside its charset)."""

from typing import Any

from gymnasium import spaces

# Sampled characters span ASCII, Latin-1, Greek, CJK and an emoji so tests exercise non-ASCII paths.
_SAMPLE_CHARS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t{}[]<>\"':,./\\_-+=*éüßñçαβγδλπΣ中文字🙂"
)


class UnicodeText(spaces.Space[str]):
    """Any str of length in [min_length, max_length]; sample() draws from a mixed-script alphabet."""

    def __init__(self, max_length: int = 1 << 20, min_length: int = 0, seed: int | None = None):
        if not 0 <= min_length <= max_length:
            raise ValueError(f"UnicodeText needs 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.min_length, self.max_length = int(min_length), int(max_length)
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of length <= min(max_length, 64) (bounded so samples stay cheap)."""
        hi = min(self.max_length, max(self.min_length, 64))
        n = int(self.np_random.integers(self.min_length, hi + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_CHARS), size=n)
        return "".join(_SAMPLE_CHARS[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )

    def to_jsonable(self, sample_n):
        return list(sample_n)

    def from_jsonable(self, sample_n):
        return [str(x) for x in sample_n]
