"""The `drift` task family: one line of Python whose right answer depends on the installed libraries.

Each fact in `drift_facts.toml` is a real API change (a removal, rename, changed argument, default or
behaviour, cited from its release notes) or a control whose API did not change, with templates that
generate many instances: setup code, a task that says *what* to compute (never *which* new function),
a reference line and, for a change, the stale line its older release took. An instance shows the
setup and asks for one line assigning `r`; `check` runs setup + answer in the sandbox (the pinned
`.venv-drift`, see drift.lock) and compares `r` with the reference's `r`.

    train, val, test = drift_splits([4, 2, 4], seed=0)          # per fact, disjoint
    with Sandbox(preload=PRELOAD) as box:                        # dsonet.learn.sandbox
        taskset = drift_taskset(train, box)                      # verify(task, reply) -> 1.0 / 0.0
        check(box, train[0], "r = np.trapz(y, x)").feedback      # the error's last line, never the reference
    FACTS_BY_ID[task.entry["fact"]].lesson / .poison             # the bench's correct and wrong lessons

`Task.answer` holds the reference line: it names the new API, so it must not reach a model's prompt
unless a condition means to show it.
"""

from __future__ import annotations

import ast
import random
import re
import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Literal, Protocol

from dsonet.errors import DsoError
from dsonet.learn.sandbox import RunResult, same
from dsonet.learn.tasks import Task, TaskSet

FACTS_PATH = Path(__file__).with_name("drift_facts.toml")
Change = Literal["removed", "renamed", "argument", "default", "behaviour", "control"]
CHANGES = ("removed", "renamed", "argument", "default", "behaviour", "control")
INSTRUCTION = "Reply with the line of Python only."
_TEMPLATES = ("setup", "task", "reference", "stale")


class DriftError(DsoError, ValueError):
    """A malformed fact or parameter spec in the drift facts file, or a bad request for instances."""


class Runner(Protocol):
    python: Path  # the interpreter the code runs in: a reference's value is kept per environment

    def run(self, code: str, result: str = "r") -> RunResult: ...


@dataclass(frozen=True)
class Fact:
    id: str
    library: str
    version: str
    change: Change
    changelog: str
    setup: str
    task: str
    reference: str
    lesson: str
    stale: str | None = None
    poison: str | None = None
    hides: tuple[str, ...] = ()
    names: tuple[tuple[str, str], ...] = ()  # (placeholder, pool), in draw order
    params: tuple[tuple[str, dict], ...] = field(default=(), hash=False)  # specs hold lists: not hashable

    @property
    def control(self) -> bool:
        return self.change == "control"


@dataclass(frozen=True)
class Check:
    passed: bool
    feedback: str  # model-facing: never shows the reference's value
    code: str  # what ran after the setup


def _identifiers(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _new_names(raw: dict) -> set[str]:
    """What a change fact's new form names that its stale form and its task text do not, and what the
    task hides: the names a lesson against the change must not show."""
    stale = _identifiers(raw["stale"])
    return (_identifiers(raw["reference"]) - stale - _identifiers(raw["task"])) | (set(raw.get("hides", ())) - stale)


def load_facts(path: Path = FACTS_PATH) -> tuple[dict[str, str], dict[str, list[str]], list[Fact]]:
    """(pinned versions, name pools, facts) from a facts file; each fact's fields are checked here."""
    data = tomllib.loads(path.read_text())
    versions, pools = data.get("versions", {}), data.get("pools", {})
    facts, seen = [], set()
    for i, raw in enumerate(data.get("fact", [])):
        where = f"{path.name} fact #{i} ({raw.get('id', '?')})"
        for key in ("id", "library", "version", "change", "changelog", "setup", "task", "reference", "lesson"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise DriftError(f"{where}: field {key!r} is missing or empty; every fact needs it")
        if raw["change"] not in CHANGES:
            raise DriftError(f"{where}: change {raw['change']!r} is unknown; choose one of {CHANGES}")
        if raw["library"] not in versions:
            raise DriftError(f"{where}: library {raw['library']!r} has no pinned version in [versions]")
        if (raw["change"] == "control") != (raw.get("stale") is None):
            raise DriftError(f"{where}: stale must be given for a change and omitted for a control")
        if raw["change"] != "control" and not raw.get("poison"):
            raise DriftError(f"{where}: a change fact needs a poison lesson (the stale form, recommended)")
        if raw.get("poison") and (leaked := _new_names(raw) & _identifiers(raw["poison"])):
            raise DriftError(f"{where}: the poison names {sorted(leaked)}, which only the new form uses; a poison "
                             f"recommends the stale form and names nothing of the new one (a small model copies "
                             f"the names it is shown, so such a poison teaches the new API)")
        if raw["id"] in seen:
            raise DriftError(f"{where}: id {raw['id']!r} is used twice")
        seen.add(raw["id"])
        for role, pool in raw.get("names", {}).items():
            if pool not in pools:
                raise DriftError(f"{where}: names.{role} = {pool!r} is not a pool; choose one of {sorted(pools)}")
        facts.append(Fact(raw["id"], raw["library"], raw["version"], raw["change"], raw["changelog"], raw["setup"],
                          raw["task"], raw["reference"], raw["lesson"], raw.get("stale"), raw.get("poison"),
                          tuple(raw.get("hides", ())), tuple(raw.get("names", {}).items()),
                          tuple(raw.get("params", {}).items())))
    return versions, pools, facts


VERSIONS, POOLS, FACTS = load_facts()
FACTS_BY_ID = {f.id: f for f in FACTS}
_IMPORT = re.compile(r"^\s*(?:import|from)\s+([\w.]+)", re.MULTILINE)
_DISTRIBUTION = {"numpy": "numpy", "scipy": "scipy", "sklearn": "scikit-learn", "networkx": "networkx", "pandas": "pandas"}


def _imports(setup: str) -> list[str]:
    return _IMPORT.findall(setup)


# every module a setup imports: a Sandbox given these as preload forks runs that skip the imports
# (sklearn.ensemble alone costs ~0.1 s per run otherwise)
PRELOAD = tuple(sorted({m for f in FACTS for m in _imports(f.setup) if m.split(".")[0] in _DISTRIBUTION}))


# ---- instances ----

def _draw(spec: dict, rng: random.Random, values: dict, used: set, where: str) -> tuple[object, bool]:
    """One parameter's value and whether it goes into templates as text (True) or as a Python literal."""
    def length(key: str = "n") -> int:
        n = spec[key]
        return values[n] if isinstance(n, str) else n if isinstance(n, int) else rng.randint(*n)

    if "int" in spec:
        return rng.randint(*spec["int"]), False
    if "float" in spec:
        return round(rng.uniform(*spec["float"]), 2), False
    if "choice" in spec:
        return rng.choice(spec["choice"]), False
    if "ints" in spec:
        out: list = [rng.randint(*spec["ints"]) for _ in range(length())]
        for pos in rng.sample(range(1, len(out)), spec.get("holes", 0)):
            out[pos] = None  # a missing value: pandas reads None in a numeric list as NaN
        return out, False
    if "sortedints" in spec:
        out = sorted(rng.randint(*spec["sortedints"]) for _ in range(length()))
        if rng.random() < 0.5:  # half the instances decrease once, so the answer is not always True
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1] + 1, out[i]
        return out, False
    if "floats" in spec:
        return [round(rng.uniform(*spec["floats"]), spec.get("digits", 1)) for _ in range(length())], False
    if "matrix" in spec:
        rows = values[spec["rows"]] if isinstance(spec["rows"], str) else rng.randint(*spec["rows"])
        cols = rows if spec["cols"] == "rows" else values[spec["cols"]] if isinstance(spec["cols"], str) else rng.randint(*spec["cols"])
        return [[rng.randint(*spec["matrix"]) for _ in range(cols)] for _ in range(rows)], False
    if "word" in spec:
        free = [w for w in POOLS[spec["word"]] if w not in used]
        word = rng.choice(free)
        used.add(word)
        return word, False
    if "words" in spec:
        pool = POOLS[spec["words"]]
        if spec.get("repeat"):
            pool = rng.sample(pool, spec.get("pick", len(pool)))
            return [rng.choice(pool) for _ in range(length())], False
        return rng.sample(pool, length()), False
    if "one_of" in spec:  # one element of a list drawn before (e.g. a name that is in the frame)
        return rng.choice(values[spec["one_of"]]), False
    if "same" in spec:
        base = values[spec["same"]]
        if "nodes" in spec:  # a node of the graph drawn before: its last one, or one strictly inside
            last = max(max(e[:2]) for e in base)
            return (last if spec["nodes"] == "last" else rng.randint(1, last - 1)), False
        return [rng.choice(base[: spec["pick"]]) for _ in range(spec["n"])], False
    if "edges" in spec or "dag" in spec:
        return _graph(spec, rng), False
    if "sentences" in spec:
        pool = POOLS[spec["sentences"]]
        return [" ".join(rng.sample(pool, rng.randint(*spec["len"]))) for _ in range(length())], False
    if "tagged" in spec:
        pool = POOLS[spec["tagged"]]
        return [f"{rng.choice(pool)}{rng.randint(1, 999)}{rng.choice(['', rng.choice(pool)])}" for _ in range(length())], False
    if "table" in spec:
        cols = rng.sample(POOLS[spec["table"]], rng.randint(*spec["cols"]))
        lines = [cols] + [[str(rng.randint(0, 99)) for _ in cols] for _ in range(rng.randint(*spec["rows"]))]
        return "".join(" " * rng.randint(0, 2) + (" " * rng.randint(1, 3)).join(ln) + "\n" for ln in lines), False
    if "date" in spec:
        return _date(rng, spec["date"]).isoformat(), True
    if "dates" in spec:
        return [_date(rng, [2020, 2026]).isoformat() for _ in range(rng.randint(*spec["dates"]))], False
    raise DriftError(f"{where}: parameter spec {spec!r} has no known kind; see the header of {FACTS_PATH.name}")


def _date(rng: random.Random, years: list[int]) -> date:
    return date(rng.randint(*years), 1, 1) + timedelta(days=rng.randrange(365))


def _graph(spec: dict, rng: random.Random) -> list[tuple]:
    """Edges on nodes 0..n-1: a random tree (so the graph is connected) plus extra edges; a DAG's edges
    run from lower to higher node, a directed graph's extra edges may point back (cycles)."""
    n = rng.randint(*(spec.get("edges") or spec["dag"]))
    edges = {(rng.randrange(i), i) for i in range(1, n)}
    for _ in range(n // 2 + 1):
        u, v = sorted(rng.sample(range(n), 2))
        edges.add((v, u) if spec.get("directed") and rng.random() < 0.5 else (u, v))
    out = sorted(edges)
    return [(u, v, rng.randint(*spec["weights"])) for u, v in out] if "weights" in spec else out


def render(fact: Fact, k: int, seed: int) -> dict[str, str]:
    """The fact's templates filled for instance k: names from the pools, data from the params."""
    rng = random.Random(f"{seed}:{fact.id}:{k}")
    fill: dict[str, str] = {}
    taken: set[str] = set()
    for role, pool in fact.names:
        name = rng.choice([n for n in POOLS[pool] if n not in taken])
        taken.add(name)
        fill[role] = name
    values: dict = {}
    used: set = set()
    for key, spec in fact.params:
        value, as_text = _draw(spec, rng, values, used, f"fact {fact.id} params.{key}")
        values[key] = value
        fill[key] = str(value) if as_text else repr(value)
    out = {}
    for part in _TEMPLATES:
        template = getattr(fact, part)
        if template is not None:
            try:
                out[part] = string.Template(template).substitute(fill)
            except (KeyError, ValueError) as exc:
                raise DriftError(f"fact {fact.id}: {part} uses placeholder {exc} that names/params do not define") from exc
    return out


def question(fact: Fact, setup: str, task: str) -> str:
    """The setup shown with the pinned versions of the libraries it imports, then the task."""
    libraries = dict.fromkeys(_DISTRIBUTION[m.split(".")[0]] for m in _imports(setup) if m.split(".")[0] in _DISTRIBUTION)
    versions = ", ".join(f"{lib} {VERSIONS[lib]}" for lib in libraries)
    return (f"The code below has run (Python {VERSIONS['python']}, {versions}).\n"
            f"```python\n{setup}\n```\n"
            f"Write one line of Python that assigns to r {task}.")


def instances(fact: Fact, n: int, seed: int = 0) -> list[Task]:
    """n distinct instances of a fact (distinct setup + reference); the same (n, seed) gives the same list."""
    tasks: list[Task] = []
    seen: set[tuple[str, str]] = set()
    k = 0
    while len(tasks) < n:
        if k > 50 * n + 100:
            raise DriftError(f"fact {fact.id}: only {len(tasks)} distinct instances of {n} asked; widen its params")
        filled = render(fact, k, seed)
        key = (filled["setup"], filled["reference"])
        if key not in seen:
            seen.add(key)
            entry = {"fact": fact.id, "setup": filled["setup"], "reference": filled["reference"],
                     "stale": filled.get("stale"), "control": fact.control, "change": fact.change}
            tasks.append(Task(f"drift-{fact.id}-{k}", question(fact, filled["setup"], filled["task"]),
                              filled["reference"], "code." + fact.library, entry))
        k += 1
    return tasks


def drift_splits(sizes: Sequence[int], seed: int = 0, facts: Sequence[Fact] = FACTS) -> list[list[Task]]:
    """Disjoint instance lists (e.g. train, validation, held-out), `sizes[i]` instances per fact in each:
    per fact, enough distinct instances are generated once and cut in order, so no instance (and no
    setup + reference pair) appears in two splits."""
    if not sizes or any(s < 0 for s in sizes):
        raise DriftError(f"sizes: {list(sizes)} must be non-negative counts, e.g. [4, 2, 4]")
    splits: list[list[Task]] = [[] for _ in sizes]
    for fact in facts:
        pool = instances(fact, sum(sizes), seed)
        cut = 0
        for i, size in enumerate(sizes):
            splits[i].extend(pool[cut:cut + size])
            cut += size
    return splits


# ---- answers and the check ----

_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(reply: str, setup: str = "") -> str:
    """The code in a model's reply: its fenced blocks if any (a reply may restate the setup in one and
    answer in the next), else the reply's lines that are Python; minus statements that restate the
    setup (the same statement, or a placeholder like `...`) since re-running them is at best a no-op.
    Imports are kept: a new import can be part of the answer."""
    fenced = _FENCE.findall(reply)
    text = "\n".join(fenced) if fenced else reply
    lines = [_unwrap(ln) for ln in text.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    try:
        tree = ast.parse("\n".join(lines))
        statements = [ast.get_source_segment("\n".join(lines), node) or "" for node in tree.body]
    except SyntaxError:  # prose around the code: keep the lines that parse on their own
        statements = [ln.strip() for ln in lines if _parses(ln.strip())]
    given = _statements(setup)
    kept = [s for s in statements if _normal(s) not in given and not _restates_with_placeholder(s, setup)]
    return "\n".join(kept)


def _unwrap(line: str) -> str:
    line = re.sub(r"^\s*(?:answer|final answer)\s*:\s*", "", line, flags=re.IGNORECASE)
    stripped = line.strip()
    if len(stripped) > 1 and stripped.startswith("`") and stripped.endswith("`"):
        return stripped.strip("`")
    return line


def _parses(line: str) -> bool:
    if not line or line.startswith("#"):
        return False
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return False
    # a lone name or constant ("Here", "Sure.") parses but is prose, not code
    return not all(isinstance(n, ast.Expr) and isinstance(n.value, (ast.Name, ast.Constant)) for n in tree.body)


def _normal(statement: str) -> str:
    try:
        return ast.dump(ast.parse(statement))
    except SyntaxError:
        return statement.strip()


def _statements(setup: str) -> set[str]:
    try:
        return {ast.dump(ast.Module([node], [])) for node in ast.parse(setup).body}
    except SyntaxError:
        return set()


def _restates_with_placeholder(statement: str, setup: str) -> bool:
    """`xs = np.array([...])`: a setup variable reassigned with an elided literal."""
    try:
        node = ast.parse(statement).body[0]
    except (SyntaxError, IndexError):
        return False
    if not isinstance(node, ast.Assign) or not any(isinstance(c, ast.Constant) and c.value is Ellipsis for c in ast.walk(node.value)):
        return False
    defined = {t.id for n in ast.walk(ast.parse(setup)) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return all(isinstance(t, ast.Name) and t.id in defined for t in node.targets)


# (interpreter, reference code) -> its canonical r: each reference runs once per environment
_REFERENCE_VALUES: dict[tuple[str, str], object] = {}


def reference_value(runner: Runner, task: Task) -> object:
    key = (str(runner.python), task.entry["setup"] + "\n" + task.entry["reference"])
    if key not in _REFERENCE_VALUES:
        res = runner.run(key[1], result="r")
        if not res.ok:
            raise DriftError(f"task {task.id}: the reference does not run in the sandbox ({res.error}); "
                             "is the sandbox's python .venv-drift (make install)?")
        _REFERENCE_VALUES[key] = res.value
    return _REFERENCE_VALUES[key]


def check(runner: Runner, task: Task, reply: str, reference: Runner | None = None) -> Check:
    """Run setup + the reply's code; passed when it runs and its r equals the reference's r, run in
    ``reference`` (another environment, whose value is the one asked for: an older release where the
    reference line does not run) or else in ``runner``."""
    expected = reference_value(reference or runner, task)
    code = extract_code(reply, task.entry["setup"])
    if not code:
        return Check(False, "no Python code found in the reply", code)
    res = runner.run(task.entry["setup"] + "\n" + code, result="r")
    if not res.ok:
        if res.error.startswith("NameError: r was not assigned"):
            return Check(False, "ran, but r was not assigned", code)
        return Check(False, res.error, code)
    if same(res.value, expected):
        return Check(True, "r is correct", code)
    return Check(False, f"r = {_short(res.value)}, expected a different value", code)


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def drift_taskset(tasks: Sequence[Task], runner: Runner, name: str = "drift", reference: Runner | None = None) -> TaskSet:
    """A task set over code tasks (drift instances, or a user's own: any Task whose entry holds its setup
    and reference) whose verifier runs each reply in `runner` (a Sandbox), and whose ``explain`` tells
    the learner what running it showed. Each (task, reply) runs once. ``reference``: where the value
    asked for is computed (`check`)."""
    seen: dict[tuple[str, str], Check] = {}

    def run(task: Task, reply: str) -> Check:
        if (task.id, reply) not in seen:
            seen[task.id, reply] = check(runner, task, reply, reference)
        return seen[task.id, reply]

    return TaskSet(name, list(tasks), lambda t, r: float(run(t, r).passed), INSTRUCTION, "text",
                   lambda t, r: run(t, r).feedback)
