"""Hop counts of a text query, a received batch and a learned lesson through the library (issue 38's Proof).

Traces, with ``sys.setprofile``/``threading.setprofile``, every Python-level 'call' event into a
function defined under ``dsonet/`` while one operation runs, on the thread that runs it (and on
threads that thread started), then counts how often control crosses from one dsonet module into
another whose function lives in the traced scope (``library/``, ``network/ingest.py``,
``aggregate/``, ``learn/operations.py``). The definition is printed with the results
(``DEFINITION``) and is the same for every tree it is run on; only the driver that sets up each
operation may adapt to a tree's API.

Run from any directory, with the project's interpreter:

    git worktree add /tmp/before 833a0d7; git worktree add /tmp/after HEAD   # + the built _kernels*.so in each
    .venv/bin/python bench/scripts/library_hops.py --before /tmp/before --after /tmp/after \\
        [--extra rework_parent=/tmp/parent] --json bench/results/library-hops.json --md /tmp/RESULT.md

Each side runs in a subprocess with ``PYTHONPATH=<tree>/src``, so the two trees never share an
import. ``--side TREE`` runs one tree in this process and prints its JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DEFINITION = (
    "Trace: every Python 'call' event (sys.setprofile on the driver's thread, threading.setprofile on every "
    "thread started after it) into a function whose code is defined in a file under src/dsonet/, on the thread running the "
    "operation and on threads that thread started; generator/coroutine resumptions are not calls and are "
    "left out. Module = the file's path under src/dsonet/. Scope = library/** + network/ingest.py + "
    "aggregate/** + learn/operations.py. A crossing = a call event whose callee's module is in Scope and "
    "whose caller frame's module is another module under src/dsonet/ (caller != callee; a call from outside "
    "dsonet, e.g. the driver, numpy, concurrent.futures, is not a crossing). "
    "hops = number of distinct (caller module, callee module) pairs among crossings (each module-to-module "
    "edge counted once, however often it is taken); hop_sites = distinct (caller module:function, callee "
    "module:function) pairs among crossings; crossings = every crossing call event (grows with loops and "
    "rows). hops_into_library = the hops whose callee module is under library/. library_modules = the "
    "distinct modules under library/ that receive at least one call event. "
    "ingest_entries = crossing call events whose caller frame is in network/ingest.py and whose callee is "
    "under library/ (resp. library/ or aggregate/), on any traced thread (the ingest thread, and the refit "
    "thread Ingest.merge starts at the after commit); returns_to_ingest = ingest_entries - 1 (times control "
    "came back to "
    "Ingest between two calls it makes into the library / into the library or the aggregation)."
)

SCOPE_DIRS = ("library/", "aggregate/")
SCOPE_FILES = ("network/ingest.py", "learn/operations.py")
INGEST = "network/ingest.py"
DIM = 384
QUESTION = "some question"


# ----------------------------------------------------------------------------------- the tracer

class Tracer:
    """Records (thread, caller module, caller function, callee module, callee function) per fresh call."""

    def __init__(self, root: Path):
        self.root = str(root.resolve()) + os.sep
        self._mods: dict[str, str | None] = {}
        self._first_resume: dict[object, int] = {}
        self.active = False
        self.threads: set[int] = set()  # the operation's threads
        self.start_on: tuple[str, str] | None = None  # (module, qualname): its first call starts the trace
        self.start_frame = None
        self.events: list[tuple[int, str | None, str, str, str]] = []
        self.resumptions = 0

    def module(self, filename: str) -> str | None:
        mod = self._mods.get(filename, "?")
        if mod == "?":
            path = os.path.realpath(filename) if not filename.startswith("<") else filename
            mod = path[len(self.root):] if path.startswith(self.root) else None
            self._mods[filename] = mod
        return mod

    def _fresh(self, frame) -> bool:
        code = frame.f_code
        if not code.co_flags & 0x2A0:  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
            return True
        first = self._first_resume.get(code)
        if first is None:
            first = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
            self._first_resume[code] = first
        return frame.f_lasti <= first

    def _ours(self, tid: int) -> bool:
        if tid in self.threads:
            return True
        parent = getattr(threading.current_thread(), "_hops_parent", None)
        if parent in self.threads:
            self.threads.add(tid)
            return True
        return False

    def __call__(self, frame, event, arg):
        if event == "call":
            if not self.active:
                if self.start_on is None:
                    return
                code = frame.f_code
                if code.co_name != self.start_on[1] or self.module(code.co_filename) != self.start_on[0]:
                    return
                self.start_on, self.start_frame, self.active = None, frame, True
                self.threads.add(threading.get_ident())
            tid = threading.get_ident()
            if not self._ours(tid):
                return
            callee = self.module(frame.f_code.co_filename)
            if callee is None:
                return
            if not self._fresh(frame):
                self.resumptions += 1
                return
            back = frame.f_back
            caller = None if back is None else self.module(back.f_code.co_filename)
            caller_fn = "" if back is None else back.f_code.co_qualname
            self.events.append((tid, caller, caller_fn, callee, frame.f_code.co_qualname))
        elif event == "return" and frame is self.start_frame:
            self.active, self.start_frame = False, None

    def run(self, fn, *args, **kwargs):
        """Trace fn(*args) on this thread."""
        self.events, self.resumptions, self.threads = [], 0, {threading.get_ident()}
        self.active = True
        try:
            return fn(*args, **kwargs)
        finally:
            self.active = False


def in_scope(mod: str | None) -> bool:
    return mod is not None and (mod.startswith(SCOPE_DIRS) or mod in SCOPE_FILES)


def summarise(events, resumptions: int, ingest: bool = False) -> dict:
    crossings = [e for e in events if in_scope(e[3]) and e[1] is not None and e[1] != e[3]]
    edges = sorted({(e[1], e[3]) for e in crossings})
    sites = sorted({(f"{e[1]}:{e[2]}", f"{e[3]}:{e[4]}") for e in crossings})
    libs = sorted({e[3] for e in events if e[3].startswith("library/")})
    out = {
        "hops": len(edges),
        "hops_into_library": sum(1 for _, b in edges if b.startswith("library/")),
        "hop_sites": len(sites),
        "crossings": len(crossings),
        "library_modules": len(libs),
        "library_module_names": libs,
        "calls_in_scope": sum(1 for e in events if in_scope(e[3])),
        "threads": len({e[0] for e in events}),
        "generator_resumptions_left_out": resumptions,
        "edges": [f"{a} -> {b}" for a, b in edges],
        "sites": [f"{a} -> {b}" for a, b in sites],
    }
    if ingest:
        mine = [e for e in crossings if e[1] == INGEST]
        lib = [e for e in mine if e[3].startswith("library/")]
        lib_agg = [e for e in mine if e[3].startswith(SCOPE_DIRS)]
        out["ingest_entries_library"] = len(lib)
        out["ingest_entries_library_or_aggregate"] = len(lib_agg)
        out["returns_to_ingest_library"] = max(0, len(lib) - 1)
        out["returns_to_ingest_library_or_aggregate"] = max(0, len(lib_agg) - 1)
        out["ingest_sequence"] = _runs([f"{e[3]}:{e[4]}" for e in lib_agg])
    # the crossings in order, consecutive repeats folded ("x ×n"), for reading
    out["crossing_sequence"] = _runs([f"{e[1]} -> {e[3]}:{e[4]}" for e in crossings])
    return out


def _runs(items: list[str]) -> list[str]:
    out: list[str] = []
    last, n = None, 0
    for it in items + [None]:
        if it == last:
            n += 1
            continue
        if last is not None:
            out.append(last if n == 1 else f"{last} x{n}")
        last, n = it, 1
    return out


# ----------------------------------------------------------------------------------- the drivers

class HashEncoder:
    """tests/library/lib_helpers.py's stand-in (the same code at both commits): unit vectors from a text's hash."""

    dim = DIM
    id = "test:hash"

    def encode(self, texts, kind="document"):
        import numpy as np
        out = np.stack([np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).standard_normal(DIM)
                        for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def lesson_text(i: int, prefix: str = "When case") -> str:
    return f"{prefix} {i} comes up, do step {i} before the rest"


def one_side(tree: Path) -> dict:
    import dsonet
    src = Path(dsonet.__file__).resolve().parent
    if not str(src).startswith(str(tree.resolve())):
        raise SystemExit(f"dsonet imported from {src}, not from {tree}: set PYTHONPATH={tree}/src")
    tracer = Tracer(src)
    _orig_start = threading.Thread.start

    def start(self, *a, **k):  # a thread remembers which thread started it
        self._hops_parent = threading.get_ident()
        return _orig_start(self, *a, **k)

    threading.Thread.start = start
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = {"query": query(tracer, Path(tmp)), "query_hits": query_hits(tracer, Path(tmp)),
                   "batch": batch(tracer, Path(tmp)),
                   "lesson_add": lesson_add(tracer, Path(tmp)), "lesson_learner": lesson_learner(tracer, Path(tmp))}
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        threading.Thread.start = _orig_start
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = commit.stdout.strip()
    return {"commit": commit, "tree": str(tree), **out}


def _library(path: Path, n: int = 200):
    from dsonet.library import Library
    lib = Library(path, encoder=HashEncoder())
    for i in range(n):
        lib.add(lesson_text(i), "general", 0.6)
    return lib


def query(tracer: Tracer, tmp: Path) -> dict:
    """Library holding 200 lessons; lib.search(QUESTION, k=3) traced after a warm-up search."""
    lib = _library(tmp / "query.db")
    try:
        lib.search(QUESTION, k=3)  # warm-up: the merged view and the index built, lazy imports done
        hits = tracer.run(lib.search, QUESTION, k=3)
        res = summarise(tracer.events, tracer.resumptions)
        res["driver"] = ("Library(path, encoder=HashEncoder) + 200 x lib.add; warm-up lib.search; "
                         "traced lib.search('some question', k=3)")
        res["hits"] = len(hits)
        return res
    finally:
        lib.close()


def query_hits(tracer: Tracer, tmp: Path) -> dict:
    """The same search with min_similarity=-1.0, so that k = 3 hits come back and are walked (with the hash
    encoder, 'some question' is near no lesson and the space's threshold leaves none)."""
    lib = _library(tmp / "query_hits.db")
    try:
        lib.search(QUESTION, k=3, min_similarity=-1.0)
        hits = tracer.run(lib.search, QUESTION, k=3, min_similarity=-1.0)
        res = summarise(tracer.events, tracer.resumptions)
        res["driver"] = "as query, both searches with min_similarity=-1.0"
        res["hits"] = len(hits)
        return res
    finally:
        lib.close()


def lesson_add(tracer: Tracer, tmp: Path) -> dict:
    """Library.add(text, domain, confidence) on a library of 200 lessons, after a warm-up add and search."""
    lib = _library(tmp / "add.db")
    try:
        lib.search(QUESTION, k=3)
        lib.add(lesson_text(1000), "general", 0.6)
        tracer.run(lib.add, lesson_text(1001), "general", 0.6)
        res = summarise(tracer.events, tracer.resumptions)
        res["driver"] = "200 lessons + warm-up search and add; traced lib.add(text, 'general', 0.6)"
        return res
    finally:
        lib.close()


def lesson_learner(tracer: Tracer, tmp: Path) -> dict:
    """The learner's store call: learn.operations.apply(library, [ADD]) (duplicate check, then the ADD)."""
    from dsonet.learn.operations import Operation, Proposal, apply
    lib = _library(tmp / "learn.db")
    try:
        lib.search(QUESTION, k=3)
        apply(lib, [Operation("ADD", Proposal(lesson_text(2000), "general", 0.6))])
        applied = tracer.run(apply, lib, [Operation("ADD", Proposal(lesson_text(2001), "general", 0.6))])
        res = summarise(tracer.events, tracer.resumptions)
        res["driver"] = "200 lessons + warm-up search and apply; traced learn.operations.apply(lib, [ADD])"
        res["applied"] = [a.applied for a in applied]
        return res
    finally:
        lib.close()


def batch(tracer: Tracer, tmp: Path) -> dict:
    """A real Node on an InProcessHub receives a warm-up batch, then one signed batch of 20 experiences
    from another identity, traced from Ingest.read_chunk's call to its return on the ingest thread."""
    return asyncio.run(_batch(tracer, tmp / "node"))


async def _batch(tracer: Tracer, data: Path) -> dict:
    from dsonet.codec.batch import make_batch
    from dsonet.codec.profile import default_profile
    from dsonet.experience import Experience, Provenance
    from dsonet.identity import NodeIdentity
    from dsonet.network.node import Node, NodeConfig
    from dsonet.network.transport import SENDER, InProcessHub, subject_for

    enc = HashEncoder()
    profile = default_profile(DIM, enc.id)
    hub = InProcessHub()
    config = NodeConfig(data, encoder=None, dim=DIM, encoder_id=enc.id, batch_interval_s=3600, soup={"seed": 0})
    node = await Node.open(config, hub.transport(), NodeIdentity.from_seed(b"hops-reader"), profile=profile)
    sender = hub.transport()

    async def send(seed: bytes, first: int):
        ident = NodeIdentity.from_seed(seed)
        now = int(time.time() * 1000)
        exps = [Experience(lesson_text(i, "When batch case"), "general", 0.7, Provenance(ident.node_id, "m", now, 0))
                for i in range(first, first + 20)]
        payload = make_batch(exps, enc.encode([e.text for e in exps]), profile, ident, timestamp_ms=now).to_msgpack()
        await sender.publish(payload, subject_for("dso", "batch", "general"), {SENDER: ident.node_id})
        await hub.drained([node.durable], timeout_s=120)

    try:
        await node.start()
        await send(b"hops-warmup", 0)
        rows_before = (await node.stats())["library"]["rows"]
        tracer.events, tracer.resumptions, tracer.threads = [], 0, set()
        tracer.start_on = (INGEST, "read_chunk")
        await send(b"hops-sender", 100)
        for _ in range(200):  # the trace ends when read_chunk returns on the ingest thread
            if not tracer.active and tracer.start_on is None:
                break
            await asyncio.sleep(0.01)
        tracer.start_on = None
        events, resumptions, threads = list(tracer.events), tracer.resumptions, set(tracer.threads)
        rows_after = (await node.stats())["library"]["rows"]
    finally:
        await node.close()
    res = summarise(events, resumptions, ingest=True)
    res["driver"] = ("Node(encoder=None, dim=384) on InProcessHub; warm-up batch of 20 from one identity; traced: "
                     "a signed batch of 20 (make_batch) from another identity, Ingest.read_chunk call to return")
    res["rows_admitted"] = rows_after - rows_before
    res["traced_threads"] = len(threads)
    return res


# ----------------------------------------------------------------------------------- both sides

ROWS = [("query", "text query: `Library.search`, 0 hits"), ("query_hits", "text query, 3 hits (`min_similarity=-1`)"),
        ("batch", "received batch: `Ingest.read_chunk`"),
        ("lesson_add", "lesson: `Library.add`"), ("lesson_learner", "lesson: learner's ADD (`operations.apply`)")]


def markdown(result: dict, sides: list[str]) -> str:
    def cell(r: dict) -> str:
        s = (f"{r['hops']} ({r['hops_into_library']} into library/) / {r['hop_sites']} / {r['crossings']}"
             f" / {r['library_modules']}")
        if "returns_to_ingest_library" in r:
            s += f" / {r['returns_to_ingest_library']} ({r['returns_to_ingest_library_or_aggregate']} with aggregate/)"
        return s

    head = " | ".join(f"{name} ({result[name]['commit'][:7]})" for name in sides)
    lines = [f"| operation | {head} |", "|---" * (len(sides) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(result[name][key]) for name in sides) + " |" for key, label in ROWS]
    return ("cells: hops (of them into library/) / hop sites / crossings / library modules"
            " [/ returns to Ingest (with aggregate/)]\n\n" + "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=Path, help="trace one tree in this process (PYTHONPATH=<tree>/src) and print JSON")
    ap.add_argument("--before", type=Path)
    ap.add_argument("--after", type=Path)
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=TREE", help="another tree, reported beside")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(one_side(args.side)))
        return
    if not (args.before and args.after):
        ap.error("give --side TREE, or --before TREE --after TREE")
    trees = [("before", args.before), *[(e.split("=", 1)[0], Path(e.split("=", 1)[1])) for e in args.extra],
             ("after", args.after)]
    result = {}
    for name, tree in trees:
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        run = subprocess.run([sys.executable, __file__, "--side", str(tree)], env=env, capture_output=True, text=True)
        if run.returncode:
            sys.stderr.write(run.stderr)
            raise SystemExit(f"{name}: exit {run.returncode}")
        result[name] = json.loads(run.stdout.strip().splitlines()[-1])
    result["definition"] = DEFINITION
    result["python"] = sys.version.split()[0]
    table = markdown(result, [name for name, _ in trees])
    print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.md:
        args.md.write_text(table)


if __name__ == "__main__":
    main()
