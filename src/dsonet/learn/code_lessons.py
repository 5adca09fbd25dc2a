"""Lessons read off an error line, or off the reference where the error names nothing: a proposer that
needs no model.

A failed attempt at a code task comes with its own explanation: ``AttributeError: module 'numpy' has
no attribute 'trapz'``, ``TypeError: ... got an unexpected keyword argument 'base_estimator'``,
``The 'criterion' parameter ... Got 'mse' instead``. Set beside the reference code of the same
instance, the error names what this environment refuses and the reference what it accepts, which is
the lesson: "When computing ..., call np.trapezoid, not np.trapz: this environment refuses np.trapz
(AttributeError)". The learner adds it to the reflector's sampled candidates and the validation gate
chooses between them by execution, as for any candidate; it sees what the reflector sees (the task,
the attempt, its error line and the reference code), never the fact table.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from dsonet.experience import MAX_WORDS

_QUOTED = re.compile(r"'([A-Za-z_][\w.]*)'")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_KWARG = re.compile(r"(?<=[(,])\s*([A-Za-z_]\w*)\s*=(?!=)\s*('[^']*'|\"[^\"]*\"|[\w.\-]+)")  # inside a call
_FROM = re.compile(r"\bfrom\s+([\w.]+)\s+import\s+([\w \t,]+)")  # the names on its own line
_OBJECT = re.compile(r"'(\w+)' object")
# the task's line, not beyond: an agent's first turn may go on below it ("Reply with the line only.")
_TASK = re.compile(r"assigns to r (.+?)\.?[ \t]*(?:\n|$)")
_BARE_ARGUMENT = re.compile(r"^((?:[A-Za-z_]\w*\s*=\s*)?)[A-Za-z_]\w*$")  # a name passed, by position or keyword
_KEYWORD = re.compile(r"\b([A-Za-z_]\w*)\s*=(?!=)")  # "pass sparse=False" is advice outside a call too
_ASSIGNED = re.compile(r"^[ \t]*([A-Za-z_]\w*)\s*=(?!=)", re.MULTILINE)
_CONVERSIONS = {"array", "asarray", "tuple", "set"}  # np.array, np.asarray...: they wrap a value, compute nothing


def from_error(problem: str, code: str, error: str, reference: str, reference_problem: str = "") -> list[str]:
    """The lessons one failed attempt (``code`` and its ``error`` line) and the instance's ``reference``
    line spell out, the most specific first: the task and the call as the reference makes it ("When
    computing ..., use np.trapezoid(x, w), not np.trapz: ..."), then the call alone, then the name alone
    ("When your code would use np.trapz, use np.trapezoid instead: ..."). The learner keeps the first
    that restates nothing of this one problem. Empty when the error names nothing the attempt wrote or
    the reference does not show the fix. ``reference_problem``: the task the reference was written for,
    where another than ``problem`` (its variables are no lesson's either)."""
    variables = set(_ASSIGNED.findall(problem)) | set(_ASSIGNED.findall(reference_problem))
    r = _refused(code, error, reference, variables)
    if r is None:
        return []
    task = _task(problem)
    refuses = f"this environment refuses {r.old} ({error.split(':')[0].split('.')[-1]})."
    forms = [f"When computing {task}, use {r.new}, not {r.old}: {refuses}" if task else "",
             f"When your code would use {r.old}, use {r.new} instead: {refuses}",
             f"When your code would use {r.old}, use {r.bare} instead: {refuses}"]
    return [_letters(f, variables) for f in dict.fromkeys(forms) if f and len(f.split()) <= MAX_WORDS]


def from_reference(problem: str, code: str, reference: str, reference_problem: str = "") -> list[str]:
    """Where an attempt failed with nothing to refuse (a wrong value, a name it never defined, no code),
    the lessons its instance's reference spells out, the most specific first: the task and the reference's
    right-hand side ("When computing ..., use np.isin(x, y)."), then the task and the library name the
    reference calls and the attempt did not (dotted first). Empty without a task or such a name.
    ``reference_problem``: as for `from_error`."""
    task = _task(problem)
    theirs = _ranked(_names(reference) - _names(code), reference)
    if not task or not theirs:
        return []
    variables = set(_ASSIGNED.findall(problem)) | set(_ASSIGNED.findall(reference_problem))
    rhs = reference.split("=", 1)[1].strip() if _ASSIGNED.match(reference) else ""
    forms = [f"When computing {task}, use {rhs}." if rhs and "\n" not in rhs else "",
             f"When computing {task}, use {theirs[0]}."]
    return [_letters(f, variables) for f in dict.fromkeys(forms) if f and len(f.split()) <= MAX_WORDS]


def repair(problem: str, code: str, error: str, reference: str) -> str | None:
    """The failed attempt ``code`` with the one swap the lesson of its ``error`` line advises (the
    reference's name for the refused one, its argument for the refused argument), or None where the
    error spells out no lesson. Running it checks the lesson on the attempt it came from: np.trapz ->
    np.trapezoid passes; a swap the error line only seemed to suggest (an estimator's name -> predict)
    does not."""
    r = _refused(code, error, reference, set(_ASSIGNED.findall(problem)))
    if r is None:
        return None
    pattern, replacement = r.swap
    repaired = re.sub(pattern, lambda _: replacement, code)
    return repaired if repaired != code else None


def akin(code: str, error: str, reference: str) -> bool:
    """Whether what the ``reference`` does instead of what the ``error`` refuses keeps a part of its spelling
    (np.trapz -> np.trapezoid, np.product -> np.prod, sparse= -> sparse_output=), as a renamed API
    does. Where the two come from different tasks (`dsonet.learn.pairing`), a replacement spelled
    otherwise (np.alltrue -> np.any) is as likely another function altogether, which only re-running
    the task would tell."""
    r = _refused(code, error, reference, set())
    if r is None:
        return False
    old, new = (re.split(r"[=(]", side)[0].split(".")[-1].lower() for side in (r.old, r.bare))
    return any(old[i:i + 3] in new for i in range(len(old) - 2))


class _Refusal(NamedTuple):
    old: str  # what the attempt used that the error refuses
    new: str  # what the reference uses instead, as it calls it
    bare: str  # the same by name alone
    swap: tuple[str, str]  # what makes the attempt follow it: a pattern of the attempt's code, its replacement


def _refused(code: str, error: str, reference: str, variables: set[str]) -> _Refusal | None:
    """What the attempt's ``error`` line refuses and the ``reference`` does instead; None where the error
    names nothing the attempt wrote or the reference shows no other way."""
    if not error or ":" not in error.split()[0]:
        return None  # not "SomeError: ...": a wrong value or no code carries no name to go by
    if error.split(":")[0].split(".")[-1] == "AssertionError":
        return None  # a test's verdict on a value, as agents' harnesses say it: what it quotes ('shape') is data
    culprits = [q for q in _QUOTED.findall(error) if re.search(rf"\b{re.escape(q.split('.')[-1])}\b", code)]
    attempt_kw, reference_kw = dict(_KWARG.findall(code)), dict(_KWARG.findall(reference))
    for culprit in culprits:
        name = culprit.split(".")[-1]
        added = [k for k in reference_kw if k not in attempt_kw]
        if name in attempt_kw and added:  # an argument the call refuses: the reference passes another
            new = f"{added[0]}={_literal(reference_kw[added[0]])}"
            swap = (rf"\b{re.escape(name)}\s*=\s*{re.escape(attempt_kw[name])}", f"{added[0]}={reference_kw[added[0]]}")
            return _Refusal(f"{name}={_literal(attempt_kw[name])}", new, new, swap)
        for kw, value in attempt_kw.items():  # a value the argument refuses: the reference passes another
            if value.strip("'\"") == name and kw in reference_kw and reference_kw[kw] != value:
                new = f"{kw}={reference_kw[kw]}"
                return _Refusal(f"{kw}={value}", new, new, (rf"\b{re.escape(kw)}\s*=\s*{re.escape(value)}", new))
        used = _ranked({d for d in _names(code) if d.split(".")[-1] == name}, code)
        theirs = _ranked(_names(reference) - _names(code), reference)
        if used and theirs:  # a function or attribute that is gone: the reference uses another, shown as called
            fix = _reached(theirs[0], theirs[0], used[0])
            written = re.search(rf"(?<![\w.]){re.escape(used[0])}\b", code)  # else imported: swap the bare names
            swap = ((rf"(?<![\w.]){re.escape(used[0])}\b", fix) if written else
                    (rf"(?<![\w.]){re.escape(name)}\b", fix.split(".")[-1]))
            old = _general(used[0], error, variables)
            new = _general(_reached(_call(reference, theirs[0]), theirs[0], used[0]), error, variables)
            return _Refusal(old, new, _general(fix, error, variables), swap) if old != new else None
    return None


def assigned(text: str) -> list[str]:
    """The names a task's code assigns (``x = ...`` at a line's start), in order."""
    return _ASSIGNED.findall(text)


def _literal(value: str) -> str:
    """An argument's value where it is a literal (``False``, ``'l2'``, ``3``), else nothing: ``estimator=``."""
    return value if re.fullmatch(r"'[^']*'|\"[^\"]*\"|True|False|None|-?[\d.]+", value) else ""


def _call(code: str, name: str) -> str:
    """``name`` as ``code`` calls it, with its argument list (balanced), or the bare name. A name
    ``code`` imported (``scipy.integrate.simpson`` from ``from scipy.integrate import simpson``) is
    called by its last part."""
    found = re.search(rf"(?<![\w.]){re.escape(name)}\(", code) or \
        re.search(rf"(?<![\w.]){re.escape(name.split('.')[-1])}\(", code)
    if found is None:
        return name
    at = found.start()
    name = found.group(0)[:-1]
    depth = 0
    for end in range(at + len(name), len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            return code[at:end + 1]
    return name


def _reached(written: str, name: str, used: str) -> str:
    """``written`` (``name`` as the code that ran writes it) reached the way the failed attempt reached what
    it used: ``integrate.simpson(z, x)`` where the attempt wrote ``integrate.simps`` and the code that ran
    imported ``from scipy.integrate import simpson``. Told ``simpson(z, x), not integrate.simps``, the
    0.5B wrote integrate.simps again; the setup it is given imports the module, not the function."""
    module, _, bare = name.rpartition(".")
    prefix = used.rpartition(".")[0]
    if prefix and module and module.split(".")[-1] == prefix.split(".")[-1]:
        tail = bare + written[len(name):] if written.startswith(name) else written
        if tail.startswith(bare):
            return f"{prefix}.{tail}"
    return written


def _ranked(names: set[str], code: str) -> list[str]:
    """Dotted names first, then the shorter, then the first written in ``code`` (the outer call of a
    nested one), then by name; a call that only converts what it is given (`_CONVERSIONS`) comes last:
    in ``np.array(nx.to_numpy_array(G))`` the lesson is the call inside ("use np.array." advised a
    constructor). A total order: ties left to a set's order (``pd.unique`` or ``pd.Series``, both 9
    characters) made the lesson differ between interpreter runs, whose string hashes differ."""
    return sorted(names, key=lambda name: (name.rsplit(".", 1)[-1] in _CONVERSIONS, "." not in name, len(name),
                                           code.find(name), name))


def _names(code: str) -> set[str]:
    """Dotted names and called functions of a line (``np.trapezoid``, ``pd.concat``, ``sorted``), a name
    imported with ``from X import name`` written ``X.name``."""
    origin = {n.strip(): f"{module}.{n.strip()}" for module, names in _FROM.findall(code) for n in names.split(",")}
    code = _FROM.sub("", code)
    called = {origin.get(c, c) for c in _CALLED.findall(code) if c not in {"int", "float", "list", "str", "dict"}}
    return {d for d in _DOTTED.findall(code) if d.split(".")[0] not in origin} | called


def _general(name: str, error: str, variables: set[str]) -> str:
    """``df.append`` -> ``DataFrame.append`` (the error names the object's type): no task's variable."""
    head, _, rest = name.partition(".")
    if head in variables:
        kind = _OBJECT.search(error)
        return f"{kind.group(1)}.{rest}" if kind and rest else rest or name
    return name


def _task(problem: str) -> str:
    """What the problem asks to compute."""
    m = _TASK.search(problem)
    return " ".join(m.group(1).split()) if m else ""


def _letters(text: str, variables: set[str]) -> str:
    """``text`` with the problem's variables (two characters or more) written x, y, ... in order of
    appearance: the lesson keeps the shape of the call and the task, not one task's names. Letters that
    read as variables, not constants: given "the integral of z over a ... np.trapezoid(z, a)" the 0.5B
    passed a=0 as a bound; given "y over x ... np.trapezoid(y, x)" it wrote the call right."""
    names = [v for v in variables if len(v) > 1]
    found = sorted({m.start(): m.group(0) for v in names for m in re.finditer(rf"\b{re.escape(v)}\b", text)}.items())
    free = iter(c for c in "xyuvwstpqmnkjhgfedcba" if not re.search(rf"\b{c}\b", text))
    letters: dict[str, str] = {}
    for _, name in found:
        letters.setdefault(name, next(free, "x"))
    return re.sub(r"\b\w+\b", lambda m: letters.get(m.group(0), m.group(0)), text)



_REFUSALS = (  # (pattern, how the refused name is qualified): what the environment says it does not have
    (re.compile(r"module '([\w.]+)' has no attribute '(\w+)'"), "module"),
    (re.compile(r"`([\w.]+)\.(\w+)` was removed"), "module"),
    (re.compile(r"'[\w.]+' object has no attribute '(\w+)'"), "method"),
    (re.compile(r"cannot import name '(\w+)'|unexpected keyword argument '(\w+)'"), "name"),
)
_ALIASES = {"numpy": "np", "pandas": "pd", "networkx": "nx"}
_MODULES = {"np", "numpy", "pd", "pandas", "nx", "networkx", "scipy", "sklearn"}
_ADVICE_END = re.compile(r"[;:]|,\s*not\b|\bnot\b|\binstead of\b|\brather than\b|\bfails?\b")


def advice_key(lesson: str) -> str:
    """What a lesson advises, whatever the arguments its calls were written with: two agents' lessons of
    one error ("use np.cumprod(a) instead", "use np.cumprod(b) instead") share this key, so the second is
    more evidence for the first. Names passed bare to a call become ``_``; attributes, keywords and
    literals stay, as does the text outside the calls."""
    def arguments(call: re.Match) -> str:
        args = (_BARE_ARGUMENT.sub(r"\1_", a.strip()) for a in call.group(2).split(","))
        return f"{call.group(1)}({', '.join(args)})"

    return re.sub(r"([A-Za-z_][\w.]*)\(([^()]*)\)", arguments, " ".join(lesson.split()))


def refutes(error: str, code: str, lesson: str) -> bool:
    """Whether a failed attempt refutes ``lesson``: its ``error`` line refuses a name the attempt's
    ``code`` wrote (a removed function, a method or argument that is gone, a refused value) and the
    lesson's advice (the "do Y" of "When X, do Y", before any "not Z") tells the agent to write that
    name, qualified as the error qualifies it (``scipy.linalg.kron`` refutes "call scipy.linalg.kron",
    not "call numpy.kron"). An agent that followed a lesson into the environment's refusal has seen the
    lesson fail, whatever else its prompt held; leave-one-out can say so only when the attempt passes
    without the lesson."""
    if not error or ":" not in error.split()[0]:
        return False
    advice = _advice(lesson)
    for pattern, kind in _REFUSALS:
        for m in pattern.finditer(error):
            name = next(g for g in reversed(m.groups()) if g)
            if re.search(rf"\b{re.escape(name)}\b", code) and _advises(advice, name, kind, m.group(1)):
                return True
    values = {v.strip("'\"") for _, v in _KWARG.findall(code)}  # "... 'criterion' ... got 'mse'": the value
    return any(q in values and re.search(rf"\b{re.escape(q)}\b", advice) for q in _QUOTED.findall(error))


def follows(code: str, lesson: str) -> bool:
    """Whether ``code`` wrote what ``lesson`` advises: every name its advice calls, qualifies or passes
    as a keyword (the "do Y" of "When X, do Y", as `refutes` reads it) appears in the code. Code that ran
    credits only the lessons it followed: a retrieval also injects lessons the agent ignored, and crediting
    those with its success lets a poisoner's lesson, never written, earn the help of the honest ones
    beside it. False where the advice names nothing code could write: such a lesson cannot be judged
    from code."""
    advice = _advice(lesson)
    names = {n.rsplit(".", 1)[-1] for n in _DOTTED.findall(advice)} | set(_CALLED.findall(advice)) \
        | set(_KEYWORD.findall(advice))
    return bool(names) and all(re.search(rf"\b{re.escape(n)}\b", code) for n in names)


def _advises(advice: str, name: str, kind: str, owner: str | None) -> bool:
    """Whether ``advice`` writes ``name`` as the refusal qualifies it: after its module, as a method of
    an object (not a module), or anywhere (an argument, an imported name)."""
    if kind == "module":
        last = owner.split(".")[-1]
        heads = "|".join(map(re.escape, {last, _ALIASES.get(last, last)}))
        return re.search(rf"\b(?:{heads})\.{re.escape(name)}\b", advice) is not None
    if kind == "method":
        return any(head.split(".")[0] not in _MODULES for head in re.findall(rf"(\w[\w.]*)\.{re.escape(name)}\b", advice))
    return re.search(rf"\b{re.escape(name)}\b", advice) is not None


def _advice(lesson: str) -> str:
    """What a lesson says to do: after "When X," and up to the first "; ...", ", not ...", "instead of"."""
    text = lesson.split(",", 1)[1] if lesson.lstrip().lower().startswith("when ") and "," in lesson else lesson
    return _ADVICE_END.split(text, 1)[0]
