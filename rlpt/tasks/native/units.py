"""Unit-conversion domains with exact decimal answers; higher tiers use decimals and rarer units."""

from fractions import Fraction as F

from rlpt.tasks.native.common import domain, fmt_decimal, terminates

# Factor to the base unit; the first `2 + tier` units are in play at each tier.
_TABLES = {
    "length": {
        "m": F(1),
        "cm": F(1, 100),
        "km": F(1000),
        "mm": F(1, 1000),
        "in": F(254, 10000),
        "ft": F(3048, 10000),
        "yd": F(9144, 10000),
    },
    "mass": {
        "g": F(1),
        "kg": F(1000),
        "mg": F(1, 1000),
        "t": F(10**6),
        "lb": F(45359237, 10**5),
        "oz": F(45359237, 16 * 10**5),
    },
    "time": {"s": F(1), "min": F(60), "h": F(3600), "ms": F(1, 1000), "day": F(86400), "week": F(604800)},
    "data": {
        "B": F(1),
        "KB": F(1000),
        "MB": F(10**6),
        "KiB": F(1024),
        "MiB": F(1024**2),
        "bit": F(1, 8),
        "GB": F(10**9),
    },
    "volume": {
        "L": F(1),
        "mL": F(1, 1000),
        "m3": F(1000),
        "cL": F(1, 100),
        "dL": F(1, 10),
        "gal": F(3785411784, 10**9),
    },
    "speed": {
        "m/s": F(1),
        "km/h": F(1000, 3600),
        "cm/s": F(1, 100),
        "m/min": F(1, 60),
        "mph": F(1609344, 3600 * 1000),
    },
}


def _value(rng, t):
    if t <= 2:
        return F(rng.randint(1, 30 * t))
    return F(rng.randint(1, 10**t), 10 ** (t - 2))


def _convert(table):
    units = list(table)

    def make(rng, t):
        pool = units[: min(2 + t, len(units))]
        for _ in range(1000):
            a, b = rng.sample(pool, 2)
            x = _value(rng, t)
            y = x * table[a] / table[b]
            if terminates(y, 6):
                return f"{fmt_decimal(x)} {a} in {b}=", {"answer": fmt_decimal(y)}
        raise RuntimeError(f"no exact conversion found among {pool}")

    return make


def _temperature(rng, t):
    scales = ["C", "F", "K"][: 2 if t <= 2 else 3]
    a, b = rng.sample(scales, 2)
    step = 5 if t <= 3 else 1
    c = F(step * rng.randint(-20 // step * t, 100 * t // step))
    if t == 5:
        c += F(rng.randint(0, 9), 10)
    to_c = {"C": c, "F": c * 9 / 5 + 32, "K": c + F(27315, 100)}
    return f"{fmt_decimal(to_c[a])} {a} in {b}=", {"answer": fmt_decimal(to_c[b])}


def domains():
    out = [
        domain(f"units/{kind}", _convert(table), "numeric", f"{kind} conversion, exact decimal answer")
        for kind, table in _TABLES.items()
    ]
    out.append(domain("units/temperature", _temperature, "numeric", "Celsius, Fahrenheit, Kelvin"))
    return out
