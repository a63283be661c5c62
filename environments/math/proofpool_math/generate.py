"""Generate the shipped problem set, `data/problems.jsonl`, deterministically from a fixed seed.

    python -m proofpool_math.generate           # rewrite data/problems.jsonl
    python -m proofpool_math.generate --check   # exit 1 if the committed file differs

Why a generator rather than a downloaded set: pools pin the sha256 of the data, nothing may be
fetched at run time, and a reader must be able to see where every problem and answer came from.
Every family draws from its own `random.Random` seeded with a string (`"linear:<SEED>"`), which
Python hashes with sha512, so the output does not depend on `PYTHONHASHSEED`, the machine or the
order families are generated in. Answers are computed exactly (`fractions.Fraction`, integer
arithmetic) and the irrational ones are checked with sympy; they are written as LaTeX the scorer
(math-verify) parses: `-7`, `\\frac{3}{4}`, `2\\sqrt{3}`, `\\frac{1 + \\sqrt{5}}{2}`, `(2, -1)`, `12.5`.

Families are written interleaved (one problem of each family in turn) and levels alternate
1, 2, 3 within a family, so a `limit` taken in file order still covers every family and level.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Final

SEED: Final = 20240601
"""Changing it changes every problem (and the data digest pools pin)."""
PER_FAMILY: Final = 270
"""Problems per family; levels 1, 2, 3 alternate, so 90 of each."""
LEVELS: Final = (1, 2, 3)
DATA_PATH: Final = Path(__file__).parent / "data" / "problems.jsonl"

Draw = Callable[[random.Random, int], tuple[str, str]]
"""(rng, level) -> (question, answer in LaTeX)."""


# --- LaTeX formatting of exact numbers --------------------------------------------------------


def fmt_frac(value: Fraction | int) -> str:
    """`-7`, `\\frac{3}{4}`, `-\\frac{3}{4}`: a reduced fraction as LaTeX."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def fmt_decimal(value: Fraction) -> str:
    """A terminating fraction as a plain decimal (`12.5`, `-0.25`, `92`); fails on any other."""
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        raise ValueError(f"{value} has no terminating decimal")
    places = max(twos, fives)
    if places == 0:
        return str(value.numerator)
    scaled = abs(value) * 10**places
    assert scaled.denominator == 1
    digits = str(scaled.numerator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def fmt_coef(coef: int | Fraction, var: str, first: bool) -> str:
    """One term `coef*var` of a sum: `3x`, `- x`, `+ \\frac{1}{2}x`; empty for a zero coefficient."""
    if coef == 0:
        return ""
    magnitude = abs(Fraction(coef))
    body = ("" if magnitude == 1 and var else fmt_frac(magnitude)) + var
    if first:
        return ("-" if coef < 0 else "") + body
    return (" - " if coef < 0 else " + ") + body


def fmt_linear(terms: list[tuple[int | Fraction, str]]) -> str:
    """A sum of terms, e.g. [(3, "x"), (-5, "")] -> `3x - 5`; `0` if every term vanishes."""
    out = ""
    for coef, var in terms:
        out += fmt_coef(coef, var, first=not out)
    return out or "0"


def fmt_poly(coefs: list[int], var: str = "x") -> str:
    """Coefficients from the highest power down, e.g. [2, -3, 1] -> `2x^2 - 3x + 1`."""
    degree = len(coefs) - 1
    terms = []
    for power, coef in zip(range(degree, -1, -1), coefs, strict=True):
        name = "" if power == 0 else var if power == 1 else f"{var}^{power}"
        terms.append((coef, name))
    return fmt_linear(terms)


def squarefree_split(n: int) -> tuple[int, int]:
    """(k, m) with n = k^2 * m and m squarefree: sqrt(n) = k sqrt(m)."""
    k, m = 1, n
    factor = 2
    while factor * factor <= m:
        while m % (factor * factor) == 0:
            m //= factor * factor
            k *= factor
        factor += 1
    return k, m


def fmt_radical(k: int, m: int) -> str:
    """k sqrt(m) as LaTeX: `6\\sqrt{2}`, `\\sqrt{5}`, `-\\sqrt{3}`, or `k` when m == 1."""
    if m == 1:
        return str(k)
    if k == 1:
        return f"\\sqrt{{{m}}}"
    if k == -1:
        return f"-\\sqrt{{{m}}}"
    return f"{k}\\sqrt{{{m}}}"


def nonzero(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in [low, high] other than 0."""
    while True:
        value = rng.randint(low, high)
        if value:
            return value


# --- Families -----------------------------------------------------------------------------------


def linear(rng: random.Random, level: int) -> tuple[str, str]:
    """One linear equation in x: integer, then rational solutions, then fractional coefficients."""
    if level == 1:
        x = rng.randint(-20, 20)
        a, b = nonzero(rng, -12, 12), nonzero(rng, -40, 40)
        if abs(a) == 1:
            a *= rng.randint(2, 9)
        equation = f"{fmt_linear([(a, 'x'), (b, '')])} = {a * x + b}"
        return f"Solve for $x$: ${equation}$.", fmt_frac(x)
    if level == 2:
        a = rng.choice((-1, 1)) * rng.randint(2, 9)
        b, c, d = nonzero(rng, -15, 15), nonzero(rng, -9, 9), rng.randint(-40, 40)
        if a == c:
            c = a + rng.choice((-2, -1, 1, 2)) or 3
        x = Fraction(d - a * b, a - c)
        left = f"{a}(x {'+' if b > 0 else '-'} {abs(b)})"
        equation = f"{left} = {fmt_linear([(c, 'x'), (d, '')])}"
        return f"Solve for $x$: ${equation}$.", fmt_frac(x)
    a, b, c, d = nonzero(rng, -9, 9), rng.randint(-12, 12), nonzero(rng, -9, 9), rng.randint(-12, 12)
    m, n = rng.randint(2, 9), rng.randint(2, 9)
    if n * a == m * c:
        n += 1
    x = Fraction(m * d - n * b, n * a - m * c)
    left, right = fmt_linear([(a, "x"), (b, "")]), fmt_linear([(c, "x"), (d, "")])
    equation = f"\\frac{{{left}}}{{{m}}} = \\frac{{{right}}}{{{n}}}"
    return f"Solve for $x$: ${equation}$.", fmt_frac(x)


def system(rng: random.Random, level: int) -> tuple[str, str]:
    """Two linear equations in x and y with exactly one solution, answered as an ordered pair."""
    while True:
        bound = 5 if level == 1 else 12
        a, b, c, d = (nonzero(rng, -bound, bound) for _ in range(4))
        det = a * d - b * c
        if det == 0:
            continue
        if level < 3:
            x, y = Fraction(rng.randint(-10, 10)), Fraction(rng.randint(-10, 10))
            e, f = a * x + b * y, c * x + d * y
        else:
            e, f = Fraction(rng.randint(-30, 30)), Fraction(rng.randint(-30, 30))
            x, y = (e * d - b * f) / det, (a * f - e * c) / det
            if x.denominator == 1 and y.denominator == 1:
                continue
        first = f"{fmt_linear([(a, 'x'), (b, 'y')])} = {fmt_frac(e)}"
        second = f"{fmt_linear([(c, 'x'), (d, 'y')])} = {fmt_frac(f)}"
        question = (
            f"Solve the system of equations ${first}$ and ${second}$. Give your answer as an ordered pair $(x, y)$."
        )
        return question, f"({fmt_frac(x)}, {fmt_frac(y)})"


def fraction(rng: random.Random, level: int) -> tuple[str, str]:
    """Arithmetic on fractions, answered reduced: one operation, two, then a complex fraction."""

    def draw() -> Fraction:
        return Fraction(nonzero(rng, -12 if level > 1 else 1, 12), rng.randint(2, 12))

    def show(value: Fraction) -> str:
        text = f"\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}" if value.denominator != 1 else str(abs(value))
        return f"\\left(-{text}\\right)" if value < 0 else text

    ops: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
        "+": lambda p, q: p + q,
        "-": lambda p, q: p - q,
        "\\times": lambda p, q: p * q,
        "\\div": lambda p, q: p / q,
    }
    if level == 1:
        p, q = draw(), draw()
        op = rng.choice(("+", "-"))
        return f"Compute ${show(p)} {op} {show(q)}$. Give the answer as a reduced fraction.", fmt_frac(ops[op](p, q))
    if level == 2:
        p, q, r = draw(), draw(), draw()
        op1, op2 = rng.choice(("+", "-")), rng.choice(("\\times", "\\div"))
        value = ops[op1](p, ops[op2](q, r))
        expression = f"{show(p)} {op1} {show(q)} {op2} {show(r)}"
        return f"Compute ${expression}$. Give the answer as a reduced fraction.", fmt_frac(value)
    while True:
        p, q, r, s = draw(), draw(), draw(), draw()
        top_op, bottom_op = rng.choice(("+", "-")), rng.choice(("+", "-"))
        bottom = ops[bottom_op](r, s)
        if bottom:
            break
    value = ops[top_op](p, q) / bottom
    expression = f"\\frac{{{show(p)} {top_op} {show(q)}}}{{{show(r)} {bottom_op} {show(s)}}}"
    return f"Simplify ${expression}$. Give the answer as a reduced fraction.", fmt_frac(value)


def polynomial(rng: random.Random, level: int) -> tuple[str, str]:
    """Evaluate a polynomial, then the larger root of a quadratic: rational, then with a radical."""
    if level == 1:
        coefs = [nonzero(rng, -6, 6), rng.randint(-9, 9), rng.randint(-12, 12)]
        if rng.random() < 0.5:
            coefs.insert(0, nonzero(rng, -3, 3))
        x = nonzero(rng, -5, 5)
        value = sum(c * x**power for power, c in zip(range(len(coefs) - 1, -1, -1), coefs, strict=True))
        return f"Let $p(x) = {fmt_poly(coefs)}$. What is $p({x})$?", str(value)
    if level == 2:
        a = rng.choice((1, 1, 2, 3))
        r1, r2 = Fraction(rng.randint(-12, 12)), Fraction(rng.randint(-12, 12), rng.choice((1, a)))
        if r1 == r2:
            r2 += 1
        # a (x - r1)(x - r2), scaled to integer coefficients
        coefs = [Fraction(a), -a * (r1 + r2), a * r1 * r2]
        scale = math.lcm(*(c.denominator for c in coefs))
        ints = [int(c * scale) for c in coefs]
        return f"Find the larger root of ${fmt_poly(ints)} = 0$.", fmt_frac(max(r1, r2))
    while True:
        a, b, c = rng.choice((1, 1, 1, 2, 3)), rng.randint(-12, 12), rng.randint(-20, 20)
        disc = b * b - 4 * a * c
        if disc <= 0 or math.isqrt(disc) ** 2 == disc:
            continue
        k, m = squarefree_split(disc)
        # larger root: (-b + k sqrt(m)) / (2a), reduced by the common factor of -b, k, 2a
        g = math.gcd(b, k, 2 * a)
        p, q, r = -b // g, k // g, 2 * a // g
        numerator = fmt_radical(q, m) if p == 0 else f"{p} + {fmt_radical(q, m)}"
        answer = numerator if r == 1 else f"\\frac{{{numerator}}}{{{r}}}"
        import sympy

        root = (p + q * sympy.sqrt(m)) / sympy.Integer(r)
        assert sympy.expand(a * root**2 + b * root + c) == 0 and root > sympy.Rational(-b, 2 * a)  # the larger one
        return f"Find the larger root of ${fmt_poly([a, b, c])} = 0$.", answer


def radicals(rng: random.Random, level: int) -> tuple[str, str]:
    """Simplify square roots: one root, a sum of like roots, then a quotient to rationalize."""
    import sympy

    squarefree = (2, 3, 5, 6, 7, 10, 11, 13, 14, 15)
    if level == 1:
        k, m = rng.randint(2, 12), rng.choice(squarefree)
        n = k * k * m
        assert sympy.sqrt(n) == k * sympy.sqrt(m)
        return f"Simplify $\\sqrt{{{n}}}$.", fmt_radical(k, m)
    if level == 2:
        m = rng.choice(squarefree)
        k1, k2 = rng.randint(1, 9), rng.randint(2, 9)
        sign = rng.choice((1, -1))
        total = k1 + sign * k2
        if total == 0:
            total, sign = k1 + k2, 1
        expression = f"\\sqrt{{{k1 * k1 * m}}} {'+' if sign > 0 else '-'} \\sqrt{{{k2 * k2 * m}}}"
        assert sympy.sqrt(k1 * k1 * m) + sign * sympy.sqrt(k2 * k2 * m) == total * sympy.sqrt(m)
        return f"Simplify ${expression}$.", fmt_radical(total, m)
    m = rng.choice(squarefree)
    a = m * rng.randint(1, 12)  # a / sqrt(m) = (a / m) sqrt(m), an integer multiple
    value = sympy.Integer(a) / sympy.sqrt(m)
    k = a // m
    assert value == k * sympy.sqrt(m)
    return f"Simplify $\\frac{{{a}}}{{\\sqrt{{{m}}}}}$ and rationalize the denominator.", fmt_radical(k, m)


def number_theory(rng: random.Random, level: int) -> tuple[str, str]:
    """gcd of two numbers, lcm of two or three, then a large power modulo a small number."""
    if level == 1:
        g = rng.randint(2, 30)
        a, b = g * rng.randint(2, 40), g * rng.randint(2, 40)
        return f"What is the greatest common divisor of ${a}$ and ${b}$?", str(math.gcd(a, b))
    if level == 2:
        numbers = [rng.randint(4, 60) for _ in range(rng.choice((2, 3)))]
        listed = ", ".join(f"${n}$" for n in numbers[:-1]) + f" and ${numbers[-1]}$"
        return f"What is the least common multiple of {listed}?", str(math.lcm(*numbers))
    base, exponent, modulus = rng.randint(2, 30), rng.randint(20, 500), rng.randint(5, 50)
    return (
        f"What is the remainder when ${base}^{{{exponent}}}$ is divided by ${modulus}$?",
        str(pow(base, exponent, modulus)),
    )


def counting(rng: random.Random, level: int) -> tuple[str, str]:
    """A binomial coefficient, arrangements in a row, then committees with a condition."""
    if level == 1:
        n = rng.randint(5, 30)
        k = rng.randint(2, min(n - 2, 8))
        return f"Compute $\\binom{{{n}}}{{{k}}}$.", str(math.comb(n, k))
    if level == 2:
        n = rng.randint(5, 30)
        k = rng.randint(2, 5)
        if rng.random() < 0.5:
            question = f"In how many ways can a committee of ${k}$ people be chosen from ${n}$ people?"
            return question, str(math.comb(n, k))
        question = f"In how many ways can ${k}$ of ${n}$ runners finish first, second, and so on up to place ${k}$?"
        return question, str(math.perm(n, k))
    men, women = rng.randint(4, 10), rng.randint(4, 10)
    size = rng.randint(3, 6)
    exactly = rng.randint(1, min(size - 1, women))
    if size - exactly > men:
        exactly = size - men
    question = (
        f"A club has ${men}$ men and ${women}$ women. In how many ways can a committee of ${size}$ "
        f"be formed with exactly ${exactly}$ women?"
    )
    return question, str(math.comb(women, exactly) * math.comb(men, size - exactly))


def probability(rng: random.Random, level: int) -> tuple[str, str]:
    """Probabilities as reduced fractions: one draw, two draws without replacement, dice or coins."""
    if level == 1:
        red, blue = rng.randint(1, 15), rng.randint(1, 15)
        question = (
            f"A bag holds ${red}$ red and ${blue}$ blue marbles. One marble is drawn at random. "
            "What is the probability that it is red?"
        )
        return question, fmt_frac(Fraction(red, red + blue))
    if level == 2:
        red, blue = rng.randint(2, 12), rng.randint(1, 12)
        question = (
            f"A bag holds ${red}$ red and ${blue}$ blue marbles. Two marbles are drawn at random without "
            "replacement. What is the probability that both are red?"
        )
        return question, fmt_frac(Fraction(math.comb(red, 2), math.comb(red + blue, 2)))
    if rng.random() < 0.5:
        sides = rng.choice((4, 6, 8, 10, 12))
        total = rng.randint(3, 2 * sides - 1)
        ways = sum(1 for a in range(1, sides + 1) for b in range(1, sides + 1) if a + b == total)
        question = (
            f"Two fair ${sides}$-sided dice, with faces numbered $1$ to ${sides}$, are rolled. "
            f"What is the probability that the sum is ${total}$?"
        )
        return question, fmt_frac(Fraction(ways, sides * sides))
    flips = rng.randint(3, 10)
    heads = rng.randint(0, flips)
    question = f"A fair coin is flipped ${flips}$ times. What is the probability of exactly ${heads}$ heads?"
    return question, fmt_frac(Fraction(math.comb(flips, heads), 2**flips))


def percent(rng: random.Random, level: int) -> tuple[str, str]:
    """Percentages with terminating answers: p% of n, successive changes, then what percent.

    "What percent" answers are whole numbers: math-verify accepts `40` and `40\\%` for a gold `40`
    but not `12.5\\%` for a gold `12.5`, so fractional percentages would punish a correct answer.
    """
    if level == 1:
        rate, base = rng.choice((5, 10, 12, 15, 20, 25, 30, 35, 40, 45, 50, 60, 75, 80, 90)), rng.randint(2, 400)
        return f"What is ${rate}\\%$ of ${base}$?", fmt_decimal(Fraction(rate * base, 100))
    if level == 2:
        price = rng.randint(10, 500)
        up, down = rng.choice((5, 10, 15, 20, 25, 30, 40, 50)), rng.choice((5, 10, 15, 20, 25, 30, 40, 50))
        final = Fraction(price) * (100 + up) / 100 * (100 - down) / 100
        question = (
            f"A price of ${price}$ dollars is increased by ${up}\\%$, and the new price is then decreased "
            f"by ${down}\\%$. What is the final price in dollars?"
        )
        return question, fmt_decimal(final)
    while True:
        old = rng.randint(10, 400)
        change = rng.randint(-90, 150)
        new = Fraction(old * (100 + change), 100)
        if change and new.denominator == 1:
            break
    direction = "increase" if change > 0 else "decrease"
    question = (
        f"A quantity changes from ${old}$ to ${new.numerator}$. By what percent does it {direction}? "
        "Give the percentage as a positive number."
    )
    return question, str(abs(change))


FAMILIES: Final[dict[str, Draw]] = {
    "linear": linear,
    "system": system,
    "fraction": fraction,
    "polynomial": polynomial,
    "radicals": radicals,
    "number_theory": number_theory,
    "counting": counting,
    "probability": probability,
    "percent": percent,
}
"""Family name -> drawer, in the order families are interleaved in the file."""


def family_records(family: str) -> list[dict[str, object]]:
    """PER_FAMILY distinct problems of one family, levels 1, 2, 3 in turn."""
    rng = random.Random(f"{family}:{SEED}")
    draw = FAMILIES[family]
    seen: set[str] = set()
    records: list[dict[str, object]] = []
    for number in range(PER_FAMILY):
        level = LEVELS[number % len(LEVELS)]
        for _ in range(1000):
            question, answer = draw(rng, level)
            if question not in seen:
                break
        else:
            raise RuntimeError(f"{family} level {level}: no new problem after 1000 draws")
        seen.add(question)
        records.append(
            {"id": f"{family}/{number:04d}", "family": family, "level": level, "question": question, "answer": answer}
        )
    return records


def records() -> Iterator[dict[str, object]]:
    """Every problem, one of each family in turn (file order)."""
    per_family = [family_records(family) for family in FAMILIES]
    for row in zip(*per_family, strict=True):
        yield from row


def render() -> bytes:
    """The exact bytes of `data/problems.jsonl` (ASCII JSON, one record a line)."""
    return "".join(json.dumps(record, ensure_ascii=True) + "\n" for record in records()).encode("ascii")


def main(argv: list[str] | None = None) -> int:
    """Write the data file, or with `--check` compare it to a fresh rendering."""
    parser = argparse.ArgumentParser(prog="python -m proofpool_math.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    parser.add_argument("--output", type=Path, default=DATA_PATH)
    args = parser.parse_args(argv)
    data = render()
    if args.check:
        same = args.output.is_file() and args.output.read_bytes() == data
        print(f"{args.output}: {'up to date' if same else 'differs from the generator'}")
        return 0 if same else 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(data)
    print(f"wrote {len(data.splitlines())} problems ({len(data)} bytes) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
