"""Helpers shared by native domains: the Domain builder and seeded number/word draws."""

import random
import string
from fractions import Fraction

from rlpt.rewards.verifiers import get_verifier
from rlpt.tasks.base import SINGLE_TURN_ENV, Domain

TIERS = (1, 2, 3, 4, 5)
SOURCE = "native"


def domain(
    name,
    make,
    verifier,
    description,
    tiers=TIERS,
    env_id=SINGLE_TURN_ENV,
    max_response_chars=20_000,
    split_on="prompt",
) -> Domain:
    """A native Domain checked by the registered verifier `verifier`."""
    return Domain(
        name=name,
        tiers=tiers,
        make=make,
        check=get_verifier(verifier),
        split_on=split_on,
        source=SOURCE,
        verifier=verifier,
        env_id=env_id,
        description=description,
        max_response_chars=max_response_chars,
    )


def distinct(n: int, draw) -> list:
    """n distinct values of draw() in the order drawn (collecting them in a set would order them by
    PYTHONHASHSEED, not by the task seed)."""
    out: list = []
    while len(out) < n:
        value = draw()
        if value not in out:
            out.append(value)
    return out


def ndigits(rng: random.Random, d: int) -> int:
    """A uniform integer with exactly d digits (d=1 includes 0)."""
    return rng.randint(0, 9) if d == 1 else rng.randint(10 ** (d - 1), 10**d - 1)


def word(rng: random.Random, n: int, alphabet: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def fmt_decimal(value: Fraction) -> str:
    """Shortest exact decimal for a terminating fraction ('3.5', '-2', '0.125'); raises otherwise."""
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        raise ValueError(f"{value} has no terminating decimal expansion")
    if value.denominator == 1:
        return str(value.numerator)
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
    text = f"{abs(value.numerator) * 10**places // value.denominator:0{places + 1}d}"
    sign = "-" if value < 0 else ""
    return f"{sign}{text[:-places]}.{text[-places:]}"


def terminates(value: Fraction, max_places: int = 6) -> bool:
    return (value * 10**max_places).denominator == 1
