"""Small function-writing tasks generated from a seed: HumanEval's shape, in any number.

Each task is one of the families below (sum of digits, reverse words, ...), cycling in order,
with inputs drawn from `random.Random(f"{seed}/{index}")` (string seeds hash the same on every
machine and Python version). The reference implementation computes the expected results on the
host, here: it is our own code, never the completion's. The reference's signature and body (read
from this file's source) are the prompt's signature and the canonical solution, so they cannot
drift apart.
"""

import ast
import inspect
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from proofpool_code.programs import CodeTask

CASES: Final = 8
"""Seeded test cases per task (the first two are the docstring's examples), plus the family's
fixed edge cases."""

_WORDS: Final = (
    "apple",
    "banana",
    "cherry",
    "delta",
    "echo",
    "forest",
    "garden",
    "harbor",
    "island",
    "jungle",
    "kettle",
    "lemon",
    "meadow",
    "north",
    "ocean",
    "pepper",
    "quartz",
    "river",
    "silver",
    "tiger",
    "umbrella",
    "valley",
    "winter",
    "yellow",
    "zebra",
    "cloud",
    "stone",
    "light",
    "paper",
    "orbit",
)


# --- Reference implementations: parameter names and annotations are the prompt's. -------------


def _sum_of_digits(n: int) -> int:
    return sum(int(digit) for digit in str(abs(n)))


def _reverse_words(text: str) -> str:
    return " ".join(reversed(text.split()))


def _count_vowels(text: str) -> int:
    return sum(1 for char in text.lower() if char in "aeiou")


def _fizzbuzz(n: int) -> list[str]:
    result = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            result.append("FizzBuzz")
        elif i % 3 == 0:
            result.append("Fizz")
        elif i % 5 == 0:
            result.append("Buzz")
        else:
            result.append(str(i))
    return result


def _running_max(numbers: list[int]) -> list[int]:
    result = []
    for number in numbers:
        result.append(number if not result else max(result[-1], number))
    return result


def _is_palindrome(text: str) -> bool:
    kept = [char.lower() for char in text if char.isalnum()]
    return kept == kept[::-1]


def _second_largest(numbers: list[int]) -> int | None:
    distinct = sorted(set(numbers))
    return distinct[-2] if len(distinct) >= 2 else None


def _run_length_encode(text: str) -> str:
    parts = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        parts.append(f"{text[i]}{j - i}")
        i = j
    return "".join(parts)


def _caesar_shift(text: str, shift: int) -> str:
    result = []
    for char in text:
        if "a" <= char <= "z":
            result.append(chr((ord(char) - ord("a") + shift) % 26 + ord("a")))
        elif "A" <= char <= "Z":
            result.append(chr((ord(char) - ord("A") + shift) % 26 + ord("A")))
        else:
            result.append(char)
    return "".join(result)


def _digital_root(n: int) -> int:
    while n >= 10:
        n = sum(int(digit) for digit in str(n))
    return n


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _dedupe(items: list[int]) -> list[int]:
    seen = set()
    result = []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result


def _word_frequencies(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def _primes_below(n: int) -> list[int]:
    return [k for k in range(2, n) if all(k % d != 0 for d in range(2, int(k**0.5) + 1))]


def _max_subarray_sum(numbers: list[int]) -> int:
    best = current = numbers[0]
    for number in numbers[1:]:
        current = max(number, current + number)
        best = max(best, current)
    return best


def _rotate_left(items: list[int], k: int) -> list[int]:
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


def _to_binary(n: int) -> str:
    return bin(n)[2:]


def _balanced_brackets(text: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def _pairwise_differences(numbers: list[int]) -> list[int]:
    return [numbers[i + 1] - numbers[i] for i in range(len(numbers) - 1)]


def _capitalize_words(text: str) -> str:
    return " ".join(word[:1].upper() + word[1:].lower() for word in text.split(" "))


def _merge_sorted(first: list[int], second: list[int]) -> list[int]:
    result = []
    i = j = 0
    while i < len(first) and j < len(second):
        if first[i] <= second[j]:
            result.append(first[i])
            i += 1
        else:
            result.append(second[j])
            j += 1
    return result + first[i:] + second[j:]


def _fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _transpose(matrix: list[list[int]]) -> list[list[int]]:
    return [list(row) for row in zip(*matrix, strict=True)]


def _longest_common_prefix(words: list[str]) -> str:
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        while not word.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


# --- Input generators: one argument tuple per call. ------------------------------------------


def _ints(rng: random.Random, low: int, high: int, min_len: int = 0, max_len: int = 10) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(min_len, max_len))]


def _letters(rng: random.Random, alphabet: str, low: int, high: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def _sentence(rng: random.Random, low: int = 1, high: int = 6, mixed_case: bool = False) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    if mixed_case:
        words = ["".join(c.upper() if rng.random() < 0.3 else c for c in w) for w in words]
    return " ".join(words)


def _spaced_sentence(rng: random.Random) -> tuple[Any, ...]:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 6))]
    return ("".join(word + rng.choice([" ", " ", "  ", "\t"]) for word in words).strip(),)


def _palindrome_input(rng: random.Random) -> tuple[Any, ...]:
    half = _letters(rng, "abcdeXYZ", 1, 6)
    text = half + rng.choice(["", "q"]) + half[::-1] if rng.random() < 0.6 else _letters(rng, "abcde", 2, 9)
    return ("".join(c + rng.choice(["", "", " ", ",", "!"]) for c in text).strip(),)


def _brackets_input(rng: random.Random) -> tuple[Any, ...]:
    if rng.random() < 0.5:
        return (_letters(rng, "()[]{}", 0, 10),)
    text = ""
    for _ in range(rng.randint(1, 5)):
        opening, closing = rng.choice(["()", "[]", "{}"])
        text = rng.choice([opening + text + closing, text + opening + closing])
    return (text,)


def _prefix_words(rng: random.Random) -> tuple[Any, ...]:
    prefix = _letters(rng, "abc", 0, 4)
    return ([prefix + _letters(rng, "abcd", 0, 4) for _ in range(rng.randint(1, 5))],)


def _matrix(rng: random.Random) -> tuple[Any, ...]:
    rows, cols = rng.randint(1, 4), rng.randint(1, 4)
    return ([[rng.randint(-9, 9) for _ in range(cols)] for _ in range(rows)],)


def _sorted_pair(rng: random.Random) -> tuple[Any, ...]:
    return (sorted(_ints(rng, -20, 20, 0, 6)), sorted(_ints(rng, -20, 20, 0, 6)))


@dataclass(frozen=True)
class Family:
    """One kind of function: its name, what the docstring asks, its reference and its inputs."""

    name: str
    description: str
    reference: Callable[..., Any]
    inputs: Callable[[random.Random], tuple[Any, ...]]
    edges: tuple[tuple[Any, ...], ...] = ()


FAMILIES: Final[tuple[Family, ...]] = (
    Family(
        "sum_of_digits",
        "Return the sum of the decimal digits of n, ignoring its sign.",
        _sum_of_digits,
        lambda rng: (rng.randint(-(10**9), 10**9),),
        ((0,),),
    ),
    Family(
        "reverse_words",
        "Return the words of text (separated by any whitespace) in reverse order, joined by single spaces.",
        _reverse_words,
        _spaced_sentence,
        (("",),),
    ),
    Family(
        "count_vowels",
        "Return how many characters of text are vowels (a, e, i, o, u, in either case; not y).",
        _count_vowels,
        lambda rng: (_sentence(rng, mixed_case=True),),
        (("",), ("AEIOU y",)),
    ),
    Family(
        "fizzbuzz",
        'Return the strings for 1..n: "FizzBuzz" for multiples of 15, "Fizz" for other multiples of 3, '
        '"Buzz" for other multiples of 5, and the number itself otherwise.',
        _fizzbuzz,
        lambda rng: (rng.randint(1, 30),),
        ((0,), (15,)),
    ),
    Family(
        "running_max",
        "Return the list whose i-th item is the largest of numbers[0..i].",
        _running_max,
        lambda rng: (_ints(rng, -50, 50),),
        (([],),),
    ),
    Family(
        "is_palindrome",
        "Return whether text reads the same backwards, ignoring case and every character that is not a "
        "letter or a digit.",
        _is_palindrome,
        _palindrome_input,
        (("",), ("A man, a plan, a canal: Panama",)),
    ),
    Family(
        "second_largest",
        "Return the second largest distinct value of numbers, or None if there are fewer than two distinct values.",
        _second_largest,
        lambda rng: (_ints(rng, -10, 10, 0, 8),),
        (([],), ([5, 5],)),
    ),
    Family(
        "run_length_encode",
        "Encode text as runs: each maximal run of one character becomes the character and the run's length, "
        'e.g. "aaab" -> "a3b1".',
        _run_length_encode,
        lambda rng: ("".join(rng.choice("abc") * rng.randint(1, 4) for _ in range(rng.randint(1, 5))),),
        (("",),),
    ),
    Family(
        "caesar_shift",
        "Shift every ASCII letter of text by shift places in the alphabet (wrapping around, keeping its case; "
        "shift may be negative or larger than 26); leave other characters unchanged.",
        _caesar_shift,
        lambda rng: (_sentence(rng, mixed_case=True) + rng.choice(["", "!", " 42."]), rng.randint(-30, 30)),
        (("", 3),),
    ),
    Family(
        "digital_root",
        "Return the digital root of n >= 0: sum its digits repeatedly until a single digit remains.",
        _digital_root,
        lambda rng: (rng.randint(0, 10**12),),
        ((0,),),
    ),
    Family(
        "collatz_steps",
        "Return how many steps the Collatz map (n / 2 if n is even, else 3n + 1) takes to reach 1 from n >= 1.",
        _collatz_steps,
        lambda rng: (rng.randint(1, 10_000),),
        ((1,),),
    ),
    Family(
        "dedupe",
        "Return items without repeats, keeping the first occurrence of each value in its original order.",
        _dedupe,
        lambda rng: (_ints(rng, 0, 6),),
        (([],),),
    ),
    Family(
        "word_frequencies",
        "Return a dict mapping each lower-cased word of text (split on whitespace) to how often it occurs.",
        _word_frequencies,
        lambda rng: (_sentence(rng, 0, 8, mixed_case=True),),
        (("",),),
    ),
    Family(
        "primes_below",
        "Return the primes smaller than n, in increasing order.",
        _primes_below,
        lambda rng: (rng.randint(0, 120),),
        ((2,), (3,)),
    ),
    Family(
        "max_subarray_sum",
        "Return the largest sum of a non-empty contiguous slice of numbers (numbers is not empty).",
        _max_subarray_sum,
        lambda rng: (_ints(rng, -20, 20, 1, 10),),
        (([-3],),),
    ),
    Family(
        "rotate_left",
        "Return items rotated left by k >= 0 places (k may exceed the length; an empty list stays empty).",
        _rotate_left,
        lambda rng: (_ints(rng, -9, 9, 0, 7), rng.randint(0, 12)),
        (([], 3),),
    ),
    Family(
        "to_binary",
        'Return the binary digits of n >= 0 as a string, without a prefix ("0" for 0).',
        _to_binary,
        lambda rng: (rng.randint(0, 5000),),
        ((0,),),
    ),
    Family(
        "balanced_brackets",
        "Return whether the brackets (), [] and {} of text are balanced and properly nested.",
        _balanced_brackets,
        _brackets_input,
        (("",), ("([)]",)),
    ),
    Family(
        "pairwise_differences",
        "Return the differences numbers[i + 1] - numbers[i] of neighbouring items.",
        _pairwise_differences,
        lambda rng: (_ints(rng, -30, 30),),
        (([7],),),
    ),
    Family(
        "capitalize_words",
        "Return text (words separated by single spaces) with each word's first letter upper-cased and the "
        "rest lower-cased.",
        _capitalize_words,
        lambda rng: (_sentence(rng, mixed_case=True),),
        (("x",),),
    ),
    Family(
        "merge_sorted",
        "Merge two sorted lists into one sorted list (keeping duplicates).",
        _merge_sorted,
        _sorted_pair,
        (([], []),),
    ),
    Family(
        "fibonacci",
        "Return the n-th Fibonacci number, with fibonacci(0) == 0 and fibonacci(1) == 1.",
        _fibonacci,
        lambda rng: (rng.randint(0, 80),),
        ((0,), (1,)),
    ),
    Family(
        "transpose",
        "Return the transpose of a rectangular, non-empty matrix given as a list of rows.",
        _transpose,
        _matrix,
    ),
    Family(
        "longest_common_prefix",
        'Return the longest string that every word starts with ("" for an empty list).',
        _longest_common_prefix,
        _prefix_words,
        (([],),),
    ),
)


def _call(name: str, args: tuple[Any, ...]) -> str:
    return f"{name}({', '.join(repr(arg) for arg in args)})"


def _signature(family: Family) -> str:
    return f"def {family.name}{inspect.signature(family.reference)}:"


def _body(family: Family) -> str:
    """The reference's body, as the canonical solution (4-space indented lines)."""
    source = textwrap.dedent(inspect.getsource(family.reference))
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    lines = source.splitlines()[function.body[0].lineno - 1 : function.end_lineno]
    return "\n".join(lines) + "\n"


def make_task(seed: int, index: int) -> CodeTask:
    """The generated task at `index` (0-based) for `seed`."""
    family = FAMILIES[index % len(FAMILIES)]
    rng = random.Random(f"proofpool-code/{seed}/{index}")
    cases = [family.inputs(rng) for _ in range(CASES)]
    examples = "".join(f"    >>> {_call(family.name, args)}\n    {family.reference(*args)!r}\n" for args in cases[:2])
    description = "\n    ".join(textwrap.wrap(family.description, 92))
    prompt = f'{_signature(family)}\n    """{description}\n\n{examples}    """\n'
    asserts = "".join(
        f"    assert candidate{_call('', args)} == {family.reference(*args)!r}\n" for args in (*cases, *family.edges)
    )
    return CodeTask(
        source="generated",
        source_id=f"generated/{seed}/{index}",
        prompt=prompt,
        test=f"def check(candidate):\n{asserts}",
        entry_point=family.name,
        canonical_solution=_body(family),
        family=family.name,
    )


def make_tasks(seed: int, count: int) -> tuple[CodeTask, ...]:
    """`count` tasks for `seed`: the families in turn, each time with new inputs."""
    return tuple(make_task(seed, index) for index in range(count))
