"""Final-answer extraction per answer kind, and numeric matching robust to how models write numbers.

Every prompt asks for a last line ``Answer: <answer>``. We read the text after the last answer
marker (``Answer:``, ``answer is``, ``####``, or inside ``\\boxed{}``); with no marker, the final
line of the reply counts only when it is nothing but an answer of the right kind ("18", "3/4"): a
reply that copied a numbered list of lessons must not score as its first list number. Within the
segment the answer is read by its kind:

* ``number``   — the first number after the segment's last "=" ("Answer: 8 + 5 = 13" is 13, not 8);
* ``fraction`` — "a/b" (also ``\\frac{a}{b}``), or a whole number;
* ``list``     — the first ``[...]`` in the segment, else the segment itself;
* ``text``     — the segment without markdown, quotes or a closing period.

`extract` returns None when the segment holds nothing of the right kind: the caller counts that
as a parse failure, so a condition whose outputs stop following the format is visible as such.
Numbers compare as exact fractions: "18", "18.00", "$18" and "1.8e1" all match 18. We use this
rather than `math-verify`: our references are numbers, fractions, lists and short strings.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Literal

Kind = Literal["number", "fraction", "list", "text"]
KINDS = ("number", "fraction", "list", "text")

_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)?\s*:?|####", re.IGNORECASE)
_NUMBER = re.compile(r"-?\s?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?|-?\.\d+")
_FRACTION = re.compile(r"(-?\d+)\s*/\s*(-?\d+)")
_LATEX_FRAC = re.compile(r"\\d?frac\{\s*(-?\d+)\s*\}\{\s*(-?\d+)\s*\}")
_INTEGER = re.compile(r"-?\d+")


def answer_segment(text: str) -> tuple[str, bool]:
    """(the part of a reply that states the final answer, whether a marker or box introduced it)."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip(), True
    markers = list(_MARKER.finditer(text))
    if markers:
        lines = [ln.strip() for ln in text[markers[-1].end():].splitlines() if ln.strip(" *`\t")]
        return (lines[0].strip(" *`") if lines else ""), True
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else ""), False


_BARE = {"number": re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"), "fraction": re.compile(r"-?\d+(?:\s*/\s*\d+)?"),
         "list": re.compile(r"\[.*\]"), "text": re.compile(r".+")}


def extract(text: str, kind: Kind = "number") -> str | None:
    """The final answer of ``kind`` in a reply, as a short string; None when there is none (a parse failure)."""
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is unknown; choose one of {KINDS}")
    segment, marked = answer_segment(text.replace("−", "-"))
    if not marked and not _BARE[kind].fullmatch(segment.strip(" .*`")):
        return None
    if kind == "number":
        match = _NUMBER.search(segment.rsplit("=", 1)[-1])
        return re.sub(r"[\s$,]", "", match.group(0)) if match else None
    if kind == "fraction":
        tail = _LATEX_FRAC.sub(r"\1/\2", segment).rsplit("=", 1)[-1]
        match = _FRACTION.search(tail)
        if match:
            return f"{match.group(1)}/{match.group(2)}"
        match = _INTEGER.search(tail)
        return match.group(0) if match else None
    if kind == "list":
        match = re.search(r"\[[^\[\]]*\]", segment)
        if match:
            return match.group(0)
        return segment.strip(" .*`") or None
    out = segment.strip(" *`\"'").rstrip(".").strip(" *`\"'")
    return out or None


def extract_answer(text: str) -> str:
    """The reply's final answer segment as plain text ('' when it gave none)."""
    return extract(text, "text") or ""


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
    answer = extract(predicted, "number")
    got = parse_number(answer) if answer is not None else None
    if want is None or got is None:
        return False
    if want == got:
        return True
    return abs(float(got) - float(want)) <= rel_tol * max(1.0, abs(float(want)))
