"""Calendar domains: add days, weekday, day differences, clock arithmetic; the tier widens the ranges."""

import datetime as dt

from rlpt.tasks.native.common import domain

_SPAN = {1: 9, 2: 60, 3: 400, 4: 3000, 5: 40000}
_BASE = dt.date(2000, 1, 1)


def _date(rng, t):
    years = 1 if t == 1 else 5 * t * t
    return _BASE + dt.timedelta(days=rng.randint(0, 365 * years))


def _add_days(rng, t):
    d, n = _date(rng, t), rng.randint(1, _SPAN[t])
    sign = "-" if t >= 3 and rng.random() < 0.5 else "+"
    out = d + dt.timedelta(days=n if sign == "+" else -n)
    return f"{d.isoformat()} {sign}{n}d=", {"answer": out.isoformat()}


def _weekday(rng, t):
    d = _date(rng, t) + dt.timedelta(days=rng.randint(-_SPAN[t], _SPAN[t]))
    return f"weekday {d.isoformat()}=", {"answer": d.strftime("%A")}


def _diff(rng, t):
    a = _date(rng, t)
    b = a + dt.timedelta(days=rng.randint(1, _SPAN[t]))
    return f"days {a.isoformat()}..{b.isoformat()}=", {"answer": str((b - a).days)}


def _clock(rng, t):
    h, m = rng.randint(0, 23), rng.randint(0, 59)
    add = rng.randint(1, (15, 90, 600, 3000, 20000)[t - 1])
    total = (h * 60 + m + add) % (24 * 60)
    return f"{h:02d}:{m:02d} +{add}min=", {"answer": f"{total // 60:02d}:{total % 60:02d}"}


def _leap(rng, t):
    year = rng.choice([rng.randint(1, 4000), 4 * rng.randint(1, 1000), 100 * rng.randint(1, 40)])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    n_years = (1, 2, 5, 20, 100)[t - 1]
    count = sum(1 for y in range(year, year + n_years) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0))
    if n_years == 1:
        return f"leap year {year}?", {"answer": "yes" if leap else "no"}
    return f"leap years in {year}..{year + n_years - 1}=", {"answer": str(count)}


def domains():
    return [
        domain("date/add_days", _add_days, "exact", "ISO date plus/minus n days"),
        domain("date/weekday", _weekday, "normalised", "English weekday name of a date"),
        domain("date/diff", _diff, "numeric", "days between two dates"),
        domain("date/clock", _clock, "exact", "24h clock plus minutes (HH:MM)"),
        domain("date/leap", _leap, "normalised", "leap-year test, then counts over wider spans"),
    ]
