"""Algebra domains checked symbolically with math-verify: linear and quadratic equations, systems,
derivatives, polynomial evaluation."""

from fractions import Fraction

from rlpt.tasks.native.common import domain


def _coef(rng, t, allow_zero=False):
    lo = 0 if allow_zero else 1
    c = rng.randint(lo, 3 + 3 * t)
    return -c if t >= 3 and rng.random() < 0.4 else c


def _term(c, var, first=False):
    if c == 0:
        return ""
    sign = "-" if c < 0 else ("" if first else "+")
    mag = abs(c)
    body = var if mag == 1 and var else f"{mag}{var}"
    return sign + body


def _poly(coefs):
    """'3x^2-2x+1' from (3, -2, 1), highest degree first."""
    deg = len(coefs) - 1
    parts = []
    for i, c in enumerate(coefs):
        p = deg - i
        var = "" if p == 0 else ("x" if p == 1 else f"x^{p}")
        parts.append(_term(c, var, first=not any(parts)))
    return "".join(parts) or "0"


def _frac(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _linear(rng, t):
    a = _coef(rng, t)
    if t <= 2:
        x = Fraction(rng.randint(-2 * t if t > 1 else 0, 10 * t))
        b = rng.randint(0, 10 * t)
        return f"solve {_poly([a, b])}={_frac(a * x + b)} for x", {"answer": _frac(x)}
    b, c, d = _coef(rng, t, True), _coef(rng, t), _coef(rng, t, True)
    if a == c:
        c += 1
    x = Fraction(d - b, a - c)  # a x + b = c x + d
    return f"solve {_poly([a, b])}={_poly([c, d])} for x", {"answer": _frac(x)}


def _quadratic(rng, t):
    r1 = rng.randint(-3 * t, 3 * t)
    r2 = rng.choice([r for r in range(-3 * t, 3 * t + 1) if r != r1])
    k = 1 if t <= 3 else rng.randint(1, t - 2)
    coefs = [k, -k * (r1 + r2), k * r1 * r2]
    lo, hi = sorted((r1, r2))
    return f"roots of {_poly(coefs)}=0 (comma separated)", {"answer": f"{lo}, {hi}"}


def _system(rng, t):
    x, y = rng.randint(-2 * t, 3 * t), rng.randint(-2 * t, 3 * t)
    while True:
        a, b, c, d = (_coef(rng, t) for _ in range(4))
        if a * d - b * c != 0:
            break
    e1 = _poly([a, 0]).replace("x", "x") + _term(b, "y") + f"={a * x + b * y}"
    e2 = _poly([c, 0]) + _term(d, "y") + f"={c * x + d * y}"
    return f"solve {e1}, {e2}; answer (x, y)", {"answer": f"({x}, {y})"}


def _derivative(rng, t):
    deg = min(t + 1, 5)
    coefs = [_coef(rng, t, allow_zero=i > 0) for i in range(deg + 1)]
    d = [c * (deg - i) for i, c in enumerate(coefs[:-1])]
    return f"d/dx {_poly(coefs)}=", {"answer": _poly(d)}


def _evaluate(rng, t):
    deg = min(t, 4)
    coefs = [_coef(rng, t, allow_zero=i > 0) for i in range(deg + 1)]
    x = rng.randint(-t, t + 2)
    value = sum(c * x ** (deg - i) for i, c in enumerate(coefs))
    return f"p(x)={_poly(coefs)}; p({x})=", {"answer": str(value)}


def domains():
    sym = "symbolic"
    return [
        domain("algebra/linear", _linear, sym, "solve a linear equation; rational answers from tier 3"),
        domain("algebra/quadratic", _quadratic, sym, "both integer roots of a quadratic"),
        domain("algebra/system", _system, sym, "2x2 linear system, ordered pair"),
        domain("algebra/derivative", _derivative, sym, "derivative of a polynomial"),
        domain("algebra/evaluate", _evaluate, "numeric", "evaluate a polynomial at a point"),
    ]
