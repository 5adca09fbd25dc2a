"""Lenient parsing of what an LLM wrote: small models rarely emit clean JSON.

Each parser returns what it could recover and says why it recovered nothing, so the
learner can log and count skipped outputs instead of touching the library with garbage.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from dsonet.experience import MAX_WORDS

_WHEN = re.compile(r"\bwhen\b[^\n]*?(?:[.!?](?=\s|$)|$)", re.IGNORECASE | re.MULTILINE)  # one sentence
# the prompt's shape echoed back, e.g. "When <situation>, <what to do>: When ..."
_PLACEHOLDER = re.compile(r"when\s*<[^>]*>\s*,?\s*(<[^>]*>)?\s*(is)?\s*[:.-]?\s*", re.IGNORECASE)
_LEAD = re.compile(r"^[\s\-*•>#\d.)\]:\"'`]*(lesson|experience|strategy)?\s*\d*\s*[:.)-]?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Parsed:
    items: tuple
    skipped: tuple[str, ...] = ()  # one reason per fragment that was dropped


def first_json_object(text: str) -> dict | None:
    """The first balanced {...} in ``text`` that parses as a JSON object (single quotes tolerated)."""
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        depth, in_str, esc = 0, None, False
        for end in range(start, len(text)):
            ch = text[end]
            if in_str:
                esc = (ch == "\\") and not esc
                if ch == in_str and not esc:
                    in_str = None
                continue
            if ch in "\"'":
                in_str = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    candidate = text[start:end + 1]
                    for attempt in (candidate, candidate.replace("'", '"')):
                        try:
                            obj = json.loads(attempt)
                        except json.JSONDecodeError:
                            continue
                        if isinstance(obj, dict):
                            return obj
                    break
    return None


def clean_experience(fragment: str) -> str:
    """One lesson, without bullets, numbering, quotes or markdown around it."""
    text = _LEAD.sub("", fragment.strip()).strip().strip("\"'`*").strip()
    return " ".join(text.split())


_QUOTED = re.compile(r"[\"“”']([^\"“”']{1,40})[\"“”']")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_COMMON = {"0", "1", "2"}
_NAME = re.compile(r"\b[A-Z][a-z]+\b")  # not GCD or ASCII
# as _NAME, but not a lesson's first word ("When"), nor code: a class or module a dotted name starts with
# ("Graph.adjacency_matrix", "DataFrame.append") or a Python constant, which are the library's vocabulary
_CAPITALISED = re.compile(r"(?<=\s)(?!(?:True|False|None)\b)[A-Z][a-z]+\b(?!\.\w)")
_ASSIGNED = re.compile(r"^[ \t>]*([A-Za-z_]\w+)\s*=(?!=)", re.MULTILINE)  # a code problem's variables (2+ chars)


def _names(problem: str) -> set[str]:
    """The words that can make a lesson specific to ``problem``: its capitalised words and the
    variables its code assigns (a library's functions are called, not assigned, so they stay free)."""
    return set(_NAME.findall(problem)) | set(_ASSIGNED.findall(problem))


def shared_words(problems: list[str]) -> frozenset[str]:
    """The capitalised words and code variables every one of ``problems`` uses: their kind's vocabulary
    ("Least Common Multiple"), not one problem's names ("Mary", ``weights_b``); all of them when there
    is only one problem to go by."""
    words = [_names(p) for p in problems]
    return frozenset(set.intersection(*words) if len(words) > 1 else set().union(*words))


def generalise_arguments(text: str, problem: str, shared: frozenset[str] = frozenset()) -> str:
    """``text`` with ``problem``'s variables inside argument lists written as single letters: a lesson
    that copies the reference call ("call np.trapezoid(z, samples)") keeps the call's shape
    ("np.trapezoid(z, a)"), which a small agent needs to write the call right (a bare name, it wrote
    ``np.trapezoid(arr, left=0, right=9)``), without one task's variables."""
    # longest first (``xs`` before ``x``), then as the text writes them: never a set's order, which
    # differs between interpreter runs
    names = sorted(set(_ASSIGNED.findall(problem)) - shared, key=lambda name: (-len(name), text.find(name), name))
    if not names:
        return text
    free = iter(c for c in "xyuvwstpqmnkjhgfedcba" if not re.search(rf"\b{c}\b", text))  # read as variables
    letters: dict[str, str] = {}

    def general(m: re.Match) -> str:
        inside = m.group(0)
        for name in names:
            if re.search(rf"\b{name}\b", inside):
                letter = letters.setdefault(name, next(free, "x"))
                inside = re.sub(rf"\b{name}\b", letter, inside)
        return inside

    return re.sub(r"\([^()]*\)", general, text)


def specific_to(lesson: str, problem: str, reference: str = "", shared: frozenset[str] = frozenset()) -> str:
    """Why ``lesson`` restates one problem instead of generalising ('' when it does not): it names
    the reference answer or a number from the problem (0, 1 and 2 are too common in general advice
    to count: "divide by 2", "the GCD is 1"), a quoted word of the problem, or a word the problem
    capitalises (unless the reference calls it: "Simpson's rule", ``simpson(y, x)``), or a variable
    its code assigns, that other problems of its kind do not share
    (``shared``, see `shared_words`): "When Mary has 1 brothers and 1 sisters, her brother has 2
    sisters", "When integrating ys over xs, ...". Library and function names stay allowed: they are
    what a lesson about an environment is for."""
    low = lesson.casefold()
    ref = reference.strip().casefold()
    if ref and ref not in _COMMON and re.search(rf"(?<![\w.]){re.escape(ref)}(?!\w|\.\d)", low):
        return f"names the answer {reference!r}"
    lesson_numbers = set(_NUM.findall(lesson))
    for number in _NUM.findall(problem):
        if number not in _COMMON and number in lesson_numbers:
            return f"restates the problem's number {number}"
    for quoted in _QUOTED.findall(problem):
        if len(quoted.strip()) > 0 and re.search(rf"[\"“”']{re.escape(quoted)}[\"“”']", lesson):
            return f"quotes the problem's {quoted!r}"
    # a person's name is no lesson's, an API's is: "Simpson's rule" in the problem, simpson() in the answer
    named = set(_NAME.findall(problem)) - shared - {w for w in _NAME.findall(problem)
                                                    if re.search(rf"\b{w.lower()}\b", reference)}
    for word in _CAPITALISED.findall(lesson):
        if word in named:
            return f"names the problem's {word!r}"
    for name in set(_ASSIGNED.findall(problem)) - shared:
        # a name with _ or a digit is code wherever it stands; a plain word ("values", "model") only
        # where it sits in code: an argument, an index, an assignment
        anywhere = re.search(r"[_\d]", name) and re.search(rf"\b{name}\b", lesson)
        if anywhere or re.search(rf"[(\[,=]\s*{name}\b|\b{name}\s*[)\]\[=]", lesson):
            return f"names the problem's variable {name!r}"
    return ""


def experiences(text: str, max_items: int = 3, reject: tuple[str, ...] = (), problem: str = "",
                reference: str = "", truncated: bool = False, shared: frozenset[str] = frozenset()) -> Parsed:
    """"When X, Y" lessons from free text or from a JSON object/list of them. A lesson needs a
    condition and a strategy of at least two words each; lessons in ``reject`` (e.g. the prompt's
    example) are dropped, and so are lessons specific to ``problem`` (its numbers, quoted words
    or ``reference`` answer; the variables in its argument lists are first written as letters, see
    `generalise_arguments`) and, when the reply hit the token limit (``truncated``), its last
    lesson unless it ends its sentence: it may be cut mid-sentence even if it parses."""
    text = _PLACEHOLDER.sub("", text)
    rejected = {r.casefold().rstrip(".") for r in reject}
    candidates: list[str] = []
    obj = first_json_object(text)
    if obj is not None:
        values = obj.get("experiences") or obj.get("lessons") or obj.get("experience") or obj.get("lesson") or []
        values = [values] if isinstance(values, str) else values
        candidates = [v.get("text", "") if isinstance(v, dict) else str(v) for v in values]
    if not candidates:
        candidates = [m.group(0) for m in _WHEN.finditer(text)]
    found, skipped, seen = [], [], set()
    if truncated and candidates and not candidates[-1].rstrip().endswith((".", "!", "?")):
        skipped.append(f"truncated at the token limit: {clean_experience(candidates[-1])[:80]!r}")
        candidates = candidates[:-1]
    for raw in candidates:
        lesson = clean_experience(raw)
        start = lesson.lower().find("when")
        lesson = lesson[start:] if start >= 0 else lesson
        lesson = lesson[:1].upper() + lesson[1:]
        words = len(lesson.split())
        condition, _, strategy = lesson.partition(",")
        if lesson.rstrip(".").endswith((":", ",", ";", "-")):
            skipped.append(f"unfinished (ends on {lesson.rstrip('.')[-1]!r}): {lesson[:80]!r}")
        elif not lesson.lower().startswith("when") or "<" in lesson or not strategy:
            skipped.append(f"not 'When X, Y': {lesson[:80]!r}")
        elif words > MAX_WORDS:
            skipped.append(f"too long: {words} words > {MAX_WORDS}")
        elif len(condition.split()) < 3 or len(strategy.split()) < 2:
            skipped.append(f"too short: {lesson!r}")
        elif lesson.casefold().rstrip(".") in rejected:
            skipped.append("repeats the prompt's example")
        elif specific_to(lesson := generalise_arguments(lesson, problem, shared), problem, reference, shared):
            skipped.append(f"problem-specific ({specific_to(lesson, problem, reference, shared)}): {lesson[:80]!r}")
        elif lesson.lower() not in seen:
            seen.add(lesson.lower())
            found.append(lesson)
    if not candidates and not skipped:
        skipped.append("no JSON and no line starting 'When'")
    return Parsed(tuple(found[:max_items]), tuple(skipped))


_OP_WORD = re.compile(r"\b(ADD|UPDATE|DELETE|NONE)\b")
_ID = re.compile(r"\bE(\d+)\b")


def operation(text: str) -> tuple[dict | None, str]:
    """{"op", "id"?, "text"?} from a JSON object, or from a bare "UPDATE E2 ..." reply; (None, why) if neither."""
    obj = first_json_object(text)
    if obj is not None and isinstance(obj.get("op", obj.get("operation")), str):
        out = {"op": str(obj.get("op", obj.get("operation"))).upper().strip()}
        if obj.get("id") is not None:
            out["id"] = str(obj["id"]).strip()
        if isinstance(obj.get("text"), str):
            out["text"] = obj["text"]
        return out, ""
    word = _OP_WORD.search(text)
    if word is None:
        return None, f"no JSON operation and no ADD/UPDATE/DELETE/NONE in {text[:80]!r}"
    out = {"op": word.group(1)}
    ref = _ID.search(text[word.end():])
    if ref:
        out["id"] = f"E{ref.group(1)}"
    return out, ""


def first_json_list(text: str) -> list | None:
    """The first [...] in ``text`` that parses as a JSON list (single quotes tolerated)."""
    for start in [m.start() for m in re.finditer(r"\[", text)]:
        end = text.rfind("]")
        while end > start:
            for attempt in (text[start:end + 1], text[start:end + 1].replace("'", '"')):
                try:
                    obj = json.loads(attempt)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, list):
                    return obj
            end = text.rfind("]", start, end)
    return None


_CANDIDATE_LINE = re.compile(r"\bC(\d+)\b[^\n]*?\b(ADD|UPDATE|DELETE|NONE)\b(?:[^\n]*?\b(E\d+)\b)?", re.IGNORECASE)


def batch_operations(text: str, n_candidates: int) -> tuple[dict[int, dict], list[str]]:
    """{candidate index (0-based): {"op", "id"?, "text"?}} from the batch-update reply (a JSON list,
    or lines like "C2: UPDATE E1"), and the reasons entries were dropped."""
    out, skipped = {}, []
    items = first_json_list(text)
    if items is not None:
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                skipped.append(f"entry {i} is not an object: {str(item)[:60]!r}")
                continue
            ref = str(item.get("candidate", f"C{i + 1}")).strip().upper()
            op = str(item.get("op", item.get("operation", ""))).strip().upper()
            if not re.fullmatch(r"C\d+", ref) or not 1 <= int(ref[1:]) <= n_candidates:
                skipped.append(f"entry {i} names candidate {ref!r}; only C1..C{n_candidates} were shown")
                continue
            entry = {"op": op}
            if item.get("id") is not None:
                entry["id"] = str(item["id"]).strip().upper()
            if isinstance(item.get("text"), str):
                entry["text"] = item["text"]
            out.setdefault(int(ref[1:]) - 1, entry)
        return out, skipped
    for m in _CANDIDATE_LINE.finditer(text):
        index = int(m.group(1)) - 1
        if 0 <= index < n_candidates:
            out.setdefault(index, {"op": m.group(2).upper(), **({"id": m.group(3).upper()} if m.group(3) else {})})
    if not out:
        skipped.append(f"no JSON list and no 'C<n> ... ADD/UPDATE/DELETE/NONE' lines in {text[:80]!r}")
    return out, skipped
