"""Where a lesson holds: the environment facts it was learned under, and an asker's.

A `Scope` is a set of pins ``name==version``: distributions (``numpy==2.4.6``) and Python itself
(``python==3.11.9``). A lesson carries one, signed with it (`dsonet.experience`); a query may carry
the asker's environment as one too, and `Scope.fit` says whether the lesson holds there:

    contradicts  a package both name differs in major.minor (numpy 2.4 learned, 1.26 asked):
                 the lesson is held back and never injected
    fits         every package both name agrees in major.minor, and there is at least one
    unknown      nothing to compare (an unscoped lesson, an asker who said nothing, or no
                 package in common): kept, ranked after the lessons that fit

Python's version is compared only for a lesson that pins no package: a lesson about NumPy's API
learned on Python 3.12 still holds on 3.11 with the same NumPy, while a lesson about the standard
library (``datetime.UTC``) holds where Python's major.minor does. Major.minor is the rule because
the APIs that move (a function removed, a default changed) move at minor releases in the families
we learn from (NumPy, pandas, SciPy, scikit-learn, NetworkX follow it); a patch release that breaks
an API is not told apart.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from typing import Iterable, Literal

from dsonet.errors import DsoError

PYTHON = "python"
MAX_LESSON_PINS = 16  # what a lesson's text and code name: a handful; bounds a hostile row
MAX_ENVIRONMENT_PINS = 2000  # an asker's whole environment (`--python`): every installed distribution
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*[A-Za-z0-9.+!_-]{0,30}$")
_RELEASE = re.compile(r"^([0-9]+)(?:\.([0-9]+))?")

Verdict = Literal["fits", "unknown", "contradicts"]


class ScopeError(DsoError, ValueError):
    """A scope that is not a list of name==version pins."""


def normalise_name(name: str) -> str:
    """PEP 503's normal form: ``Scikit_Learn`` and ``scikit-learn`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Fit:
    verdict: Verdict
    reason: str = ""  # for "contradicts": which pin, learned vs asked; for "fits": the pins that agree


@dataclass(frozen=True)
class Scope:
    pins: tuple[tuple[str, str], ...] = ()  # (normalised name, version), sorted by name, each name once

    @classmethod
    def parse(cls, items: Iterable[str] | str, limit: int = MAX_LESSON_PINS) -> "Scope":
        """Pins from ``name==version`` strings (one string may hold several, split by commas or spaces).
        Raises `ScopeError` naming the bad pin and the form it needs."""
        if not items:  # most lessons: every row of a received batch is parsed (0.03 s of 10,000 rows' split)
            return cls()
        if isinstance(items, str):
            items = [items]
        pins: dict[str, str] = {}
        for item in items:
            if not isinstance(item, str):
                raise ScopeError(f"scope: {item!r:.40} is not a string; give pins like 'numpy==2.4.6'")
            for pin in filter(None, re.split(r"[,\s]+", item)):
                name, sep, version = pin.partition("==")
                if not sep or not _NAME.match(name) or not _VERSION.match(version):
                    raise ScopeError(f"scope: {pin[:60]!r} is not name==version; give an exact pin like "
                                     "'numpy==2.4.6' or 'python==3.11.9'")
                key = normalise_name(name)
                if pins.get(key, version) != version:
                    raise ScopeError(f"scope: {key} is pinned twice ({pins[key]} and {version}); give one version")
                pins[key] = version
        if len(pins) > limit:
            raise ScopeError(f"scope: {len(pins)} pins, at most {limit}; pin the packages the lesson names")
        return cls(tuple(sorted(pins.items())))

    def strings(self) -> list[str]:
        return [f"{n}=={v}" for n, v in self.pins]

    def __str__(self) -> str:
        """The canonical form, hashed into a lesson's id and sent on the wire: ``numpy==2.4.6,python==3.11.9``."""
        return ",".join(self.strings())

    def __bool__(self) -> bool:
        return bool(self.pins)

    def get(self, name: str) -> str | None:
        return dict(self.pins).get(normalise_name(name))

    def only(self, names: Iterable[str]) -> "Scope":
        """The pins of these distributions (and Python's, always): a lesson's share of an environment."""
        wanted = {normalise_name(n) for n in names} | {PYTHON}
        return Scope(tuple(p for p in self.pins if p[0] in wanted))

    def fit(self, environment: "Scope") -> Fit:
        """Whether this lesson's scope holds in an asker's ``environment`` (the module's rule)."""
        mine = dict(self.pins)
        if len(mine) > 1 or PYTHON not in mine:
            mine.pop(PYTHON, None)  # Python decides only a lesson that pins nothing else
        theirs = dict(environment.pins)
        shared = sorted(mine.keys() & theirs.keys())
        for name in shared:
            if _release(mine[name]) != _release(theirs[name]):
                return Fit("contradicts", f"{name} {mine[name]} learned, {theirs[name]} here")
        if not shared:
            return Fit("unknown")
        return Fit("fits", ", ".join(f"{n} {'.'.join(map(str, _release(theirs[n])))}" for n in shared))

    def used_in(self, environment: "Scope") -> str:
        """The key an outcome of this lesson is counted under: the asker's major.minor of each pin the
        lesson names ('numpy==1.26'), '' where the asker said none of them."""
        mine = {n for n, _ in self.pins}
        return ",".join(f"{n}=={'.'.join(map(str, _release(v)))}" for n, v in environment.pins if n in mine)


def _release(version: str) -> tuple[int, ...]:
    """Major.minor of a version ('2.4.6' -> (2, 4); '2' -> (2,), which a '2.x' pin then differs from)."""
    m = _RELEASE.match(version)
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


# ---------------------------------------------------------------- an interpreter's environment

# the names code and lessons use for a module, beside the module's own (`import numpy as np`)
ALIASES = {"np": "numpy", "pd": "pandas", "nx": "networkx", "sp": "scipy", "plt": "matplotlib", "tf": "tensorflow"}
_PROBE = """import importlib.metadata as m, json, platform
d = {}
for x in m.distributions():
    n = x.metadata["Name"]
    if n: d.setdefault(n, x.version)
mods = {k: sorted(set(v)) for k, v in m.packages_distributions().items()}
print(json.dumps({"python": platform.python_version(), "dists": d, "modules": mods}))"""


@dataclass(frozen=True)
class Probe:
    """What an interpreter has: its environment (every distribution and Python) and which
    distributions each top-level module comes from (``sklearn`` -> ``scikit-learn``)."""

    environment: Scope
    modules: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def lesson_scope(self, *texts: str) -> Scope:
        """A lesson's scope here: Python's version and the distributions its text and code name, by
        module (``np.trapezoid``, ``import sklearn``) or by distribution name."""
        words = {w.lower() for t in texts for w in re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", t)}
        words |= {ALIASES[w] for w in words if w in ALIASES}
        named = {normalise_name(d) for w in words for d in self.modules.get(w, ())}
        named |= {normalise_name(w) for w in words}
        return self.environment.only(n for n, _ in self.environment.pins if n in named)


def probe(python: str, timeout: float = 30.0) -> Probe:
    """Ask the interpreter at ``python`` what it has installed (`--python` of the CLI, the sandbox's).
    Raises `ScopeError` saying how to fix a path that is not a working Python 3.10 or later."""
    try:
        out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=True)
        doc = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ScopeError(f"--python: {python!r} did not say what it has installed ({type(exc).__name__}); give the "
                         "path of a Python 3.10+ interpreter, e.g. .venv/bin/python") from None
    pins = [f"{PYTHON}=={doc['python']}"] + [f"{n}=={v}" for n, v in doc["dists"].items()
                                              if _NAME.match(n) and _VERSION.match(v)]
    modules = {k: tuple(v) for k, v in doc["modules"].items()}
    return Probe(Scope.parse(pins, limit=MAX_ENVIRONMENT_PINS), modules)
