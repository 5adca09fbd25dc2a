"""`dso bench relevance`'s second set: questions as users type them, and hard negatives.

1. **The set** (``data/relevance_users.toml``, `load_users`): lessons of four families (coding,
   data, operations, the `drift` family's), each with questions it answers and same-topic
   questions that no lesson of the set answers; the split by lesson into a tune and a held-out
   half is part of the file, fixed before anything was scored.
2. **Scores through the real `Library`** (`score_half`): a half's lessons are added to a library
   file, one domain each so none merges with another; each question is searched by text with the
   calibrated default (``Library.search``: both stages, as `dso search`, the node, MCP and the
   proxy do). For the curves, the same library gives every (question, lesson) score of the first
   stage alone (today's default space), of the shipped second stage over the first stage's best
   `CANDIDATES`, and, as alternatives, of MiniLM's own cosine against the whole lesson and against
   its "When" clause alone.
3. **Injection** (`injection`): a question's top k = 5 at or above the threshold. Precision: of
   the lessons injected into answerable questions, the share that is the question's own; recall:
   the share of answerable questions whose lesson is injected; silence: the share of hard
   negatives that get nothing. A threshold is chosen on the tune half (`choose`): the lowest whose
   precision and silence both hold their targets there and at every threshold above it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsonet.bench.relevance_pairs import DATA
from dsonet.bench.report import format_table
from dsonet.encoders.rescore import BackboneRescorer, when_clause
from dsonet.library import Library
from dsonet.library.policy import RESCORE_NAME, calibrated, calibrations, default_min_similarity
from dsonet.library.index.rescored import CANDIDATES

USERS = DATA / "relevance_users.toml"
HALVES = ("tune", "held_out")
K = 5
GRID = np.round(np.arange(0.0, 1.0001, 0.005), 3)
MISSING = -2.0  # a lesson a scoring did not score (not among the second stage's candidates)


@dataclass(frozen=True)
class UserLesson:
    text: str
    family: str  # coding, data, operations, drift
    split: str  # tune, held_out
    questions: tuple[str, ...]  # it answers them
    negatives: tuple[str, ...]  # same topic; no lesson of the set answers them


def load_users(path: Path = USERS) -> list[UserLesson]:
    lessons = [UserLesson(e["text"], e["family"], e["split"], tuple(e["questions"]), tuple(e["negatives"]))
               for e in tomllib.loads(path.read_text())["lesson"]]
    bad = sorted({lesson.split for lesson in lessons} - set(HALVES))
    if bad:
        raise ValueError(f"{path}: split {bad[0]!r}; expected one of {', '.join(HALVES)}")
    return lessons


def questions(lessons: list[UserLesson]) -> tuple[list[str], np.ndarray]:
    """Every question of ``lessons`` and its lesson's index there (-1: a hard negative)."""
    texts, gold = [], []
    for i, lesson in enumerate(lessons):
        texts += [*lesson.questions, *lesson.negatives]
        gold += [i] * len(lesson.questions) + [-1] * len(lesson.negatives)
    return texts, np.array(gold)


def score_half(lessons: list[UserLesson], encoder) -> dict:
    """(questions, lessons) scores of each scoring, and the real search's hits at the default."""
    texts, gold = questions(lessons)
    stage = BackboneRescorer(encoder.backbone)
    n = len(lessons)
    with tempfile.TemporaryDirectory() as tmp:
        lib = Library(Path(tmp) / "half.sqlite", encoder=encoder)
        for i, lesson in enumerate(lessons):
            lib.add(lesson.text, domain=f"u.l{i}")

        def lesson_of(hit) -> int:
            return int(hit.experience.domain.removeprefix("u.l"))

        searched = [[lesson_of(h) for h in lib.search(text)] for text in texts]  # both stages, the default
        first = np.full((len(texts), n), MISSING, np.float32)
        second = np.full((len(texts), n), MISSING, np.float32)
        for row, (text, vector) in enumerate(zip(texts, encoder.encode(texts, kind="query"))):
            hits = lib.search_vector(vector, n, -1.0, max_tokens=10**9)
            for hit in hits:
                first[row, lesson_of(hit)] = hit.score
            top = hits[:CANDIDATES]  # what `Library.search` hands the second stage
            second[row, [lesson_of(h) for h in top]] = stage.score(text, [h.experience.text for h in top])
        lib.close()
    backbone = encoder.backbone
    q = backbone.encode(texts, kind="query")  # (Q, 384)
    whole = backbone.encode([lesson.text for lesson in lessons])  # (L, 384)
    clause = backbone.encode([when_clause(lesson.text) for lesson in lessons])
    return {"gold": gold, "searched": searched, "scores": {
        "default": first, "rescored": second, "minilm": q @ whole.T, "minilm-when": q @ clause.T}}


def injection(scores: np.ndarray, gold: np.ndarray, threshold: float, k: int = K) -> dict:
    """Precision, recall and silence of what a top-``k`` search at ``threshold`` injects."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (Q, k)
    injected = np.take_along_axis(scores, order, 1) >= threshold
    return _figures([row[ok].tolist() for row, ok in zip(order, injected)], gold, threshold)


def _figures(injected: list[list[int]], gold: np.ndarray, threshold: float | None) -> dict:
    answerable = gold >= 0
    shown = sum(len(injected[i]) for i in np.flatnonzero(answerable))
    found = sum(int(gold[i]) in injected[i] for i in np.flatnonzero(answerable))
    return {"threshold": None if threshold is None else float(threshold), "precision": round(found / shown, 4) if shown else 1.0,
            "recall": round(found / int(answerable.sum()), 4),
            "silent": round(float(np.mean([not injected[i] for i in np.flatnonzero(~answerable)])), 4),
            "injected": shown}


def searched_figures(half: dict, threshold: float) -> dict:
    """The figures of the real `Library.search` hits (both stages, the default threshold)."""
    return _figures(half["searched"], half["gold"], threshold)


def choose(curve: list[dict], precision: float, silent: float) -> float | None:
    """The lowest threshold whose precision and silence hold their targets there and everywhere
    above it (None: not even the highest)."""
    chosen = None
    for point in reversed(curve):  # from the highest threshold down
        if point["precision"] < precision or point["silent"] < silent:
            break
        chosen = point["threshold"]
    return chosen


def compare(halves: dict[str, dict], precision: float, silent: float, defaults: dict[str, float]) -> dict:
    """Per scoring: the curve on each half, figures at its default (``defaults``: scoring -> the
    threshold every entry point uses, where it ships), and at the threshold chosen on the tune half."""
    out = {}
    for name in halves["tune"]["scores"]:
        curves = {h: [injection(halves[h]["scores"][name], halves[h]["gold"], t) for t in GRID] for h in HALVES}
        chosen = choose(curves["tune"], precision, silent)
        entry = {"curve": curves, "chosen_on_tune": chosen,
                 "at_chosen": None if chosen is None else {
                     h: injection(halves[h]["scores"][name], halves[h]["gold"], chosen) for h in HALVES}}
        if name in defaults:
            entry["at_default"] = {h: injection(halves[h]["scores"][name], halves[h]["gold"], defaults[name])
                                   for h in HALVES}
        entry["best_recall_held_out"] = max(
            (p for p in curves["held_out"] if p["precision"] >= precision and p["silent"] >= silent),
            key=lambda p: p["recall"], default=None)  # the most a threshold could give, knowing the answers
        out[name] = entry
    return out


# Runs a command and prints its peak resident memory (KiB, Linux's ru_maxrss) on the last line.
_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
         "sys.stderr.write(r.stderr.decode()[-400:]); "
         "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def cold_costs(path: Path, query: str, threshold: float, runs: int) -> list[dict]:
    """Median wall seconds and peak memory of `dso search` in a fresh process on the library at
    ``path``: one stage (``--min-similarity``: the default space alone) and both (the default)."""
    setups = {"default space alone": ["--min-similarity", str(threshold)], "both stages (the default)": []}
    seconds: dict[str, list[float]] = {name: [] for name in setups}
    peak: dict[str, int] = {}
    for _ in range(runs):
        for name, extra in setups.items():  # interleaved: the machine's load colours both alike
            cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "dsonet.cli.main", "search", query,
                   "--db", str(path), *extra]
            start = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True)
            seconds[name].append(time.perf_counter() - start)
            code, kib = out.stdout.split()[-2:]
            if int(code) not in (0, 1):  # 1: nothing found (stderr says why), still a search
                raise RuntimeError(f"dso search failed: {out.stderr.strip()}")
            peak[name] = max(peak.get(name, 0), int(kib))
    return [{"setup": name, "median_s": round(float(np.median(seconds[name])), 3),
             "min_s": round(min(seconds[name]), 3), "peak_rss_mb": round(peak[name] / 1024, 1), "runs": runs}
            for name in setups]


def run(encoder, precision: float, silent: float, cold_library: Path | None, runs: int) -> dict:
    """The set scored on both halves, every scoring compared, the real search's figures at the
    default, and (with ``cold_library``) what a cold search costs with one stage and with both."""
    lessons = load_users()
    halves = {h: score_half([lesson for lesson in lessons if lesson.split == h], encoder) for h in HALVES}
    stage = BackboneRescorer(encoder.backbone)
    defaults = {"default": default_min_similarity(encoder)}
    if calibrated(stage.id):
        defaults["rescored"] = default_min_similarity(stage.id)
    result = {"data": USERS.name, "k": K, "target_precision": precision, "target_silent": silent,
              "rescorer": stage.id, "candidates": CANDIDATES, "defaults": defaults,
              "halves": {h: {"lessons": sum(lesson.split == h for lesson in lessons),
                             "questions": int((halves[h]["gold"] >= 0).sum()),
                             "hard_negatives": int((halves[h]["gold"] < 0).sum())} for h in HALVES},
              "scorings": compare(halves, precision, silent, defaults),
              "search": {h: searched_figures(halves[h], defaults.get("rescored", defaults["default"]))
                         for h in HALVES}}
    if cold_library is not None:
        result["cold"] = cold_costs(cold_library, COLD_QUERY, defaults["default"], runs)
    return result


COLD_QUERY = "my query got slow after the table grew"


def table(result: dict) -> str:
    """Each scoring's figures at its default and at the threshold chosen on the tune half, then
    the real `Library.search` at the default, then the cold costs."""
    columns = ["scoring", "threshold", "half", "precision", "recall", "silent"]
    rows = []
    for name, entry in result["scorings"].items():
        for label, figures in (("default", entry.get("at_default")), ("chosen on tune", entry["at_chosen"])):
            for h in HALVES if figures else ():
                rows.append({"scoring": name, "threshold": f"{figures[h]['threshold']} ({label})", "half": h,
                             **{c: figures[h][c] for c in columns[3:]}})
    for h, f in result["search"].items():
        rows.append({"scoring": "Library.search", "threshold": f"{f['threshold']} (default)", "half": h,
                     **{c: f[c] for c in columns[3:]}})
    out = format_table(rows, columns)
    if "cold" in result:
        out += "\n\n" + format_table(result["cold"], ["setup", "median_s", "min_s", "peak_rss_mb", "runs"])
    return out


def write_calibration(result: dict, backbone_dir: Path) -> Path:
    """The second stage's threshold chosen on the tune half, beside its backbone's weights."""
    entry = result["scorings"]["rescored"]
    if entry["chosen_on_tune"] is None:
        raise ValueError(f"no threshold keeps precision {result['target_precision']} and silence "
                         f"{result['target_silent']} on the tune half; lower --users-precision or --users-silent")
    figures = {h: {c: entry["at_chosen"][h][c] for c in ("precision", "recall", "silent")} for h in HALVES}
    path = backbone_dir / RESCORE_NAME
    path.write_text(json.dumps({
        "encoder_id": result["rescorer"], "min_similarity": entry["chosen_on_tune"],
        "target_precision": result["target_precision"], "target_silent": result["target_silent"], **figures,
        "measured_by": "dso bench relevance --write-calibration (bench/results/relevance.json, users)"}, indent=2) + "\n")
    calibrations.cache_clear()
    return path


def report_lines(result: dict) -> list[str]:
    """bench/REPORT.md's part on the users' set: the held-out figures of each scoring, the cold costs."""
    rows = []
    for name, entry in result["scorings"].items():
        for label, figures in (("default", entry.get("at_default")), ("chosen on tune", entry["at_chosen"])):
            if figures:
                f = figures["held_out"]
                rows.append(f"| {name} | {f['threshold']} ({label}) | {f['precision']:.3f} | {f['recall']:.3f} | "
                            f"{f['silent']:.3f} |")
        best = entry["best_recall_held_out"]
        if best:
            rows.append(f"| {name} | {best['threshold']} (best on held-out, knowing the answers) | "
                        f"{best['precision']:.3f} | {best['recall']:.3f} | {best['silent']:.3f} |")
    held = result["halves"]["held_out"]
    lines = [f"Questions typed the way users type them (`src/dsonet/bench/data/{result['data']}`), held-out half: "
             f"{held['lessons']} lessons, {held['questions']} questions, {held['hard_negatives']} hard negatives "
             f"(same topic, no lesson answers them). Precision over answerable questions' injections, recall of "
             f"their lessons, silence = hard negatives that get nothing; thresholds chosen on the tune half for "
             f"precision ≥ {result['target_precision']} and silence ≥ {result['target_silent']}.", "",
             "| scoring | threshold | precision | recall | silence |", "|---|---|---|---|---|", *rows]
    if "cold" in result:
        lines += ["", "Cold `dso search` (a fresh process, the real CLI):", "",
                  "| set-up | median s | min s | peak RSS MB |", "|---|---|---|---|",
                  *(f"| {c['setup']} | {c['median_s']} | {c['min_s']} | {c['peak_rss_mb']} |" for c in result["cold"])]
    return lines + [""]
