"""Final-answer extraction and numeric matching, robust to how models write numbers.

Models write "The answer is $1,234.", "**18**", "Answer: 18.0" or end a paragraph on the
number; GSM8K's reference is a bare integer. We take the text after the last answer marker
(``Answer:``, ``answer is``, ``####``, ``\\boxed{}``), else the last number in the text, and
compare numbers as exact fractions, so "18", "18.00", "$18" and "1.8e1" all match 18.
We use this matcher rather than adding `math-verify` as a dependency: our tasks' references are
numbers, and this covers them in a few lines.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)?\s*:?|####", re.IGNORECASE)
_NUMBER = re.compile(r"-?\s?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?|-?\.\d+")


def extract_answer(text: str) -> str:
    """The model's final answer as a short string ('' when it gave none)."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    markers = list(_MARKER.finditer(text))
    if markers:
        tail = text[markers[-1].end():].strip()
        line = tail.splitlines()[0].strip() if tail else ""
        if line:
            number = _NUMBER.search(line)
            return number.group(0) if number else line.strip(" .*")
    numbers = _NUMBER.findall(text)
    return numbers[-1].strip() if numbers else text.strip().splitlines()[-1].strip() if text.strip() else ""


def parse_number(text: str) -> Fraction | None:
    """A number written any common way, as an exact fraction; None when ``text`` holds no number."""
    match = _NUMBER.search(text.replace("−", "-"))
    if not match:
        return None
    raw = re.sub(r"[\s$,]", "", match.group(0))
    try:
        if "/" in raw:
            num, den = raw.split("/")
            return Fraction(num) / Fraction(den) if Fraction(den) != 0 else None
        return Fraction(raw)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_match(predicted: str, reference: str, rel_tol: float = 1e-6) -> bool:
    """True when ``predicted``'s final answer equals the reference number."""
    want = parse_number(reference)
    got = parse_number(extract_answer(predicted))
    if want is None or got is None:
        return False
    if want == got:
        return True
    return abs(float(got) - float(want)) <= rel_tol * max(1.0, abs(float(want)))
