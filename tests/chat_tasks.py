"""Generated chat tasks with long exact answers: what a 135M instruct model learns in minutes, not knows.

Each task makes ``messages`` rows (one user question, one assistant answer) deterministically from a
seed; the held-out rows never repeat a training question or answer. The answers are ten or more tokens under
SmolLM2's tokenizer (which writes each digit as its own token), so a judge that cuts answers short
scores every one of them wrong. Used by ``benchmarks/peer_sft.py``; imported by name (the benchmark
and tests/conftest.py put this folder on sys.path).

- ``dates``: a date in words → its ISO form, ``Write the second of August, 1990 as an ISO date.`` →
  ``1990-08-02`` (the new user's trial of issue 31).
- ``phone``: a US phone number spelled digit by digit → ``(555) 123-4567``.
- ``reverse``: six words → the same words in reverse order, comma-joined.
- ``numbers``: a number between ten and a hundred million in words → digits with thousands separators,
  ``forty-five million two hundred and six thousand and thirteen`` → ``45,206,013``.
"""

from __future__ import annotations

import calendar
import random
from collections.abc import Callable

ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINAL_ONES = [
    "",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
]
NOUNS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "lamp",
    "garden",
    "window",
    "pencil",
    "horse",
    "candle",
    "bridge",
    "forest",
    "mirror",
    "basket",
    "ladder",
    "rocket",
    "pillow",
    "castle",
    "engine",
    "carpet",
    "violin",
    "island",
    "jacket",
    "kettle",
    "lemon",
    "magnet",
    "needle",
    "orange",
    "parrot",
    "rabbit",
    "saddle",
    "tiger",
    "umbrella",
    "valley",
    "wallet",
    "yogurt",
    "anchor",
    "bottle",
    "camera",
    "desert",
    "feather",
    "guitar",
    "hammer",
    "iceberg",
    "jungle",
    "kitten",
    "ladle",
    "meadow",
    "napkin",
    "oyster",
    "pepper",
    "quilt",
    "ribbon",
    "silver",
    "teapot",
    "tunnel",
    "village",
    "walnut",
    "zebra",
    "button",
]
DATE_ASKS = [
    "Write the {day} of {month}, {year} as an ISO date.",
    "What is the {day} of {month}, {year} in ISO format?",
    "Give the ISO date for the {day} of {month}, {year}.",
]


def number_words(n: int) -> str:
    """0 <= n < 10**9 in English words: ``forty-five million two hundred and six thousand and thirteen``."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else "")
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + (" and " + number_words(rest) if rest else "")
    for size, name in ((10**6, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            tail = "" if not rest else (" and " if rest < 100 else " ") + number_words(rest)
            return f"{number_words(high)} {name}{tail}"
    raise ValueError(n)


def ordinal_words(n: int) -> str:
    """1..31 as an ordinal in words: ``second``, ``twenty-third``, ``thirtieth``."""
    if n < 20:
        return ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens][:-1] + "ieth" if not ones else f"{TENS[tens]}-{ORDINAL_ONES[ones]}"


def date_row(rng: random.Random) -> tuple[str, str]:
    year, month = rng.randint(1900, 2099), rng.randint(1, 12)
    day = rng.randint(1, calendar.monthrange(year, month)[1])
    ask = rng.choice(DATE_ASKS).format(day=ordinal_words(day), month=calendar.month_name[month], year=year)
    return ask, f"{year:04d}-{month:02d}-{day:02d}"


def phone_row(rng: random.Random) -> tuple[str, str]:
    digits = [rng.randint(2, 9)] + [rng.randint(0, 9) for _ in range(9)]
    groups = ["".join(str(d) for d in g) for g in (digits[:3], digits[3:6], digits[6:])]
    spoken = ", ".join(" ".join(ONES[int(c)] for c in g) for g in groups)
    return f"Format this phone number: {spoken}.", f"({groups[0]}) {groups[1]}-{groups[2]}"


def reverse_row(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(NOUNS, 6)
    return f"Reverse the order of these words: {', '.join(words)}.", ", ".join(reversed(words))


def numbers_row(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(10_000_000, 99_999_999)
    return f"Write {number_words(n)} in digits.", f"{n:,}"


TASKS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "dates": date_row,
    "phone": phone_row,
    "reverse": reverse_row,
    "numbers": numbers_row,
}


def chat_rows(task: str, n_train: int = 200, n_eval: int = 60, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``n_train`` training and ``n_eval`` held-out ``messages`` rows of ``task``, every question and answer
    distinct."""
    make, rng = TASKS[task], random.Random(f"{task}:{seed}")
    seen: set[str] = set()
    rows: list[dict] = []
    for _ in range(100 * (n_train + n_eval)):
        if len(rows) == n_train + n_eval:
            break
        question, answer = make(rng)
        if question not in seen and answer not in seen:
            seen.update((question, answer))
            rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
    if len(rows) < n_train + n_eval:
        raise ValueError(f"{task}: only {len(rows)} distinct questions")
    return rows[:n_train], rows[n_train:]
