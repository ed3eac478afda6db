"""Arithmetic domains with short prompts ('12+7=' -> '19'); the tier sets digit counts and operand counts."""

import math
from fractions import Fraction

from rlpt.tasks.native.common import domain, fmt_decimal, ndigits

_MUL_DIGITS = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2), 5: (3, 3)}
_DIV_DIGITS = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2), 5: (4, 2)}


def _add(rng, t):
    a, b = ndigits(rng, t), ndigits(rng, t)
    return f"{a}+{b}=", {"answer": str(a + b)}


def _sub(rng, t):
    a, b = ndigits(rng, t), ndigits(rng, t)
    if t <= 2 and b > a:
        a, b = b, a  # no negative results at the lowest tiers
    return f"{a}-{b}=", {"answer": str(a - b)}


def _mul(rng, t):
    da, db = _MUL_DIGITS[t]
    a, b = ndigits(rng, da), ndigits(rng, db)
    return f"{a}*{b}=", {"answer": str(a * b)}


def _div(rng, t):
    dq, db = _DIV_DIGITS[t]
    q, b = ndigits(rng, dq), max(ndigits(rng, db), 1 if db > 1 else 2)
    return f"{q * b}/{b}=", {"answer": str(q)}


def _mod(rng, t):
    a, b = ndigits(rng, t + 1), rng.randint(2, 3 + 3 * t)
    return f"{a}%{b}=", {"answer": str(a % b)}


def _expr(rng, t, n_terms, digits, parens):
    terms = [str(ndigits(rng, rng.randint(1, digits))) for _ in range(n_terms)]
    ops = [rng.choice("+-*") for _ in range(n_terms - 1)]
    if parens and n_terms >= 3:
        i = rng.randrange(n_terms - 1)
        terms[i], terms[i + 1] = "(" + terms[i], terms[i + 1] + ")"
    text = terms[0] + "".join(o + x for o, x in zip(ops, terms[1:]))
    return text


def _mixed(rng, t):
    text = _expr(rng, t, n_terms=t + 1, digits=1 if t <= 2 else 2, parens=t >= 3)
    return f"{text}=", {"answer": str(eval(text))}  # our own expression of digits and + - * ( )


def _chain(rng, t):
    nums = [ndigits(rng, 1 if t <= 2 else 2) for _ in range(t + 2)]
    signs = [rng.choice("+-") if t >= 3 else "+" for _ in nums[1:]]
    text = str(nums[0]) + "".join(s + str(n) for s, n in zip(signs, nums[1:]))
    return f"{text}=", {"answer": str(eval(text))}


def _power(rng, t):
    base, exp = rng.randint(2, 20 * t), rng.randint(2, 1 + t)
    return f"{base}^{exp}=", {"answer": str(base**exp)}


def _gcd(rng, t):
    g = rng.randint(1, 3 * t + 2)
    a, b = g * rng.randint(1, 4 * t + 2), g * rng.randint(1, 4 * t + 2)
    return f"gcd({a},{b})=", {"answer": str(math.gcd(a, b))}


def _lcm(rng, t):
    a, b = rng.randint(2, 6 + 4 * t), rng.randint(2, 6 + 4 * t)
    return f"lcm({a},{b})=", {"answer": str(math.lcm(a, b))}


def _digitsum(rng, t):
    n = ndigits(rng, 2 * t)
    return f"digitsum({n})=", {"answer": str(sum(map(int, str(n))))}


def _signed(rng, t):
    a, b = rng.randint(-(10**t) + 1, 10**t - 1), rng.randint(-(10**t) + 1, 10**t - 1)
    op = rng.choice("+-*")
    return f"({a}){op}({b})=", {"answer": str(eval(f"({a}){op}({b})"))}


def _fraction(rng, t):
    hi = 3 + 2 * t
    a, b = (Fraction(rng.randint(1, hi), rng.randint(2, hi)) for _ in range(2))
    op = rng.choice("+-" if t <= 2 else "+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    text = f"{_frac(a)}{op}{_frac(b)}="
    return text, {"answer": _frac(value)}


def _frac(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _decimal(rng, t):
    places = min(t, 3)
    a = Fraction(rng.randint(1, 10 ** (t + 1)), 10**places)
    b = Fraction(rng.randint(1, 10 ** (t + 1)), 10**places)
    op = rng.choice("+-")
    return f"{fmt_decimal(a)}{op}{fmt_decimal(b)}=", {"answer": fmt_decimal(a + b if op == "+" else a - b)}


def _percent(rng, t):
    p = rng.choice([10, 20, 25, 50, 75] if t <= 2 else list(range(1, 100)))
    n = 20 * rng.randint(1, 50 * t) if t <= 2 else 4 * rng.randint(1, 5 * 10 ** (t - 1))
    return f"{p}% of {n}=", {"answer": fmt_decimal(Fraction(p * n, 100))}


def _tobin(rng, t):
    n = rng.randint(1, 2 ** (5 + 2 * t) - 1)
    return f"bin({n})=", {"answer": format(n, "b")}


def _frombin(rng, t):
    n = rng.randint(1, 2 ** (5 + 2 * t) - 1)
    return f"0b{n:b}=", {"answer": str(n)}


def _tohex(rng, t):
    n = rng.randint(10, 16 ** (1 + t) - 1)
    return f"hex({n})=", {"answer": format(n, "x")}


def _square(rng, t):
    n = ndigits(rng, t + 1)
    return f"{n}^2=", {"answer": str(n * n)}


def domains():
    num = "numeric"
    return [
        domain("arith/add", _add, num, "a+b with tier-digit operands"),
        domain("arith/sub", _sub, num, "a-b; negative results from tier 3"),
        domain("arith/mul", _mul, num, "a*b, digit counts (1,1) .. (3,3)"),
        domain("arith/div", _div, num, "exact integer division"),
        domain("arith/mod", _mod, num, "a%b"),
        domain("arith/mixed", _mixed, num, "tier+1 operands of + - *, parentheses from tier 3"),
        domain("arith/chain", _chain, num, "sum of tier+2 numbers, signs from tier 3"),
        domain("arith/power", _power, num, "small integer powers"),
        domain("arith/gcd", _gcd, num, "greatest common divisor"),
        domain("arith/lcm", _lcm, num, "least common multiple"),
        domain("arith/digitsum", _digitsum, num, "sum of the digits of a 2*tier-digit number"),
        domain("arith/signed", _signed, num, "+ - * on signed tier-digit integers"),
        domain("arith/fraction", _fraction, num, "fraction + - *, any equal rational form accepted"),
        domain("arith/decimal", _decimal, num, "decimal + -"),
        domain("arith/percent", _percent, num, "p% of n"),
        domain("arith/tobin", _tobin, "exact", "decimal to binary"),
        domain("arith/frombin", _frombin, num, "binary to decimal"),
        domain("arith/tohex", _tohex, "exact", "decimal to lowercase hexadecimal"),
        domain("arith/square", _square, num, "n^2"),
    ]
