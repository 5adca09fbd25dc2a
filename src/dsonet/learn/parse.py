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


def experiences(text: str, max_items: int = 3, reject: tuple[str, ...] = ()) -> Parsed:
    """"When X, Y" lessons from free text or from a JSON object/list of them. A lesson needs a
    condition and a strategy of at least two words each (a reply cut off at the token limit
    usually ends mid-condition); lessons in ``reject`` (e.g. the prompt's example) are dropped."""
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
    for raw in candidates:
        lesson = clean_experience(raw)
        start = lesson.lower().find("when")
        lesson = lesson[start:] if start >= 0 else lesson
        lesson = lesson[:1].upper() + lesson[1:]
        words = len(lesson.split())
        condition, _, strategy = lesson.partition(",")
        if not lesson.lower().startswith("when") or "<" in lesson or not strategy or lesson.endswith("-"):
            skipped.append(f"not 'When X, Y': {lesson[:80]!r}")
        elif words > MAX_WORDS:
            skipped.append(f"too long: {words} words > {MAX_WORDS}")
        elif len(condition.split()) < 3 or len(strategy.split()) < 2:
            skipped.append(f"too short: {lesson!r}")
        elif lesson.casefold().rstrip(".") in rejected:
            skipped.append("repeats the prompt's example")
        elif lesson.lower() not in seen:
            seen.add(lesson.lower())
            found.append(lesson)
    if not candidates:
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
