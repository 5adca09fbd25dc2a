"""`dso bench relevance`: the relevance threshold of a space, calibrated on labelled pairs.

The protocol's 0.6 is a cosine in the experience-ledger paper's encoder space. In ours a question
and the lesson that helps it score far lower, so 0.6 injects almost nothing. This bench measures
where relevance lies in a space and chooses its threshold:

1. **Labelled data** (`build_pairs`, kept in the repo as ``data/relevance_pairs.json``): lessons and
   questions, each question naming the lessons that help it. The reasoning families' questions
   with their family's reference lesson (`dsonet.learn.tasks.FAMILIES`); GSM8K questions with
   topic lessons picked by a pattern (``data/gsm8k_topics.toml``); everyday agent questions with
   hand-written lessons (``data/agent_topics.toml``). A lesson is unrelated to a question from
   another area; lessons of the question's own area (or, for GSM8K, any math lesson) are left
   unjudged: they may help. The README's examples are not in it: they are the test.
2. **Split by lesson**: half of each source's lessons (and their questions) calibrate, the other
   half is held out, so the held-out numbers are on lessons the choice never saw.
3. **Scores through the real `Library`**: each split's lessons are added to a library file and
   every question is searched in it (k = all, no threshold): exact cosines over the floats, as a
   node scores its own lessons, and over the 1-bit codes, as it scores a peer's it holds no
   float for (a second library ingests the first's signed batch).
4. **Injection**, as an agent sees it: a question's top k = 5 lessons at or above the threshold;
   precision is the share of judged injected lessons that help, recall the share of helpful
   (question, lesson) pairs injected. The threshold is the lowest one whose calibration
   precision stays at or above ``--precision`` (0.9) from there up; the held-out split reports it.

``--write-calibration`` stores the chosen threshold beside the default head's config
(``relevance.json``), where `dsonet.library.policy.default_min_similarity` reads it.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import numpy as np

from dsonet.bench.report import RESULTS_DIR, write_results
from dsonet.library.policy import CALIBRATION_NAME, MIN_SIMILARITY, calibrations

DATA = Path(__file__).parent / "data"
PAIRS = DATA / "relevance_pairs.json"
K = 5
GRID = np.round(np.arange(0.0, 0.8001, 0.005), 3)
PER_FAMILY = 20  # questions drawn per reasoning family
PER_TOPIC = 15  # GSM8K questions per topic lesson
# What the README shows a user (tests/test_readme_examples.py walks it): never calibrated on.
README_TEXTS = (
    "When a ratio is asked, simplify the fraction by the greatest common divisor.",
    "What is 12:18 in lowest terms?",
    "When a ratio is asked, simplify the fraction first.",
    "ratio of two numbers",
    "The ratio of boys to girls is 3:5 and there are 40 pupils. How many girls?",
    "my pytest test fails randomly",
)


@dataclass(frozen=True)
class Lesson:
    id: str
    text: str
    area: str
    source: str  # families, gsm8k, agent (and drift when that family ships)


@dataclass(frozen=True)
class Query:
    text: str
    area: str
    source: str
    relevant: tuple[str, ...]  # ids of the lessons that help it


def _lesson(text: str, area: str, source: str) -> Lesson:
    return Lesson(hashlib.sha256(text.encode()).hexdigest()[:12], text, area, source)


def _family_area(name: str) -> str:
    # fraction simplification, gcd and lcm all turn on the greatest common divisor: one area
    return "math.divisibility" if name in ("fraction_simplification", "gcd", "lcm") else f"math.{name}"


def build_pairs(per_family: int = PER_FAMILY, per_topic: int = PER_TOPIC, seed: int = 0) -> dict:
    """The labelled data: {"lessons": [...], "queries": [...]}, the same for the same arguments."""
    from dsonet.data import gsm8k
    from dsonet.learn.tasks import FAMILIES, family_tasks

    lessons, queries = [], []
    for name, family in sorted(FAMILIES.items()):
        if not family.reference:
            continue
        lesson = _lesson(family.reference, _family_area(name), "families")
        lessons.append(lesson)
        seen = []
        for task in family_tasks(name, size=3 * per_family, seed=seed).tasks:
            if task.question not in seen:
                seen.append(task.question)
        queries += [Query(q, lesson.area, "families", (lesson.id,)) for q in seen[:per_family]]
    topics = tomllib.loads((DATA / "gsm8k_topics.toml").read_text())["lesson"]
    patterns = [(_lesson(t["text"], "math.gsm8k", "gsm8k"), re.compile(t["pattern"], re.I)) for t in topics]
    lessons += [lesson for lesson, _ in patterns]
    taken: dict[str, int] = {}
    for item in gsm8k():
        matched = tuple(lesson.id for lesson, pattern in patterns if pattern.search(item.question))
        if matched and taken.get(matched[0], 0) < per_topic:
            taken[matched[0]] = taken.get(matched[0], 0) + 1
            queries.append(Query(item.question, "math.gsm8k", "gsm8k", matched))
    for entry in tomllib.loads((DATA / "agent_topics.toml").read_text())["lesson"]:
        lesson = _lesson(entry["text"], entry["area"], "agent")
        lessons.append(lesson)
        queries += [Query(q, lesson.area, "agent", (lesson.id,)) for q in entry["questions"]]
    return {"lessons": [asdict(lesson) for lesson in lessons], "queries": [asdict(q) for q in queries]}


def load_pairs(path: Path = PAIRS) -> tuple[list[Lesson], list[Query]]:
    data = json.loads(path.read_text())
    return [Lesson(**lesson) for lesson in data["lessons"]], \
        [Query(q["text"], q["area"], q["source"], tuple(q["relevant"])) for q in data["queries"]]


def judge(query: Query, lesson: Lesson) -> int:
    """1: the lesson helps the question; 0: unrelated; -1: not judged (same area, or math beside GSM8K)."""
    if lesson.id in query.relevant:
        return 1
    near = query.area == lesson.area or ("math.gsm8k" in (query.area, lesson.area)
                                         and query.area.startswith("math.") and lesson.area.startswith("math."))
    return -1 if near else 0


def split(lessons: list[Lesson], queries: list[Query], seed: int = 0) -> dict[str, tuple[list, list]]:
    """{"calibration": (lessons, queries), "held_out": ...}: half of each source's lessons each,
    a question going with the lesson it was written for (its first relevant one)."""
    rng = np.random.default_rng(seed)
    held = set()
    for source in sorted({lesson.source for lesson in lessons}):
        ids = sorted(lesson.id for lesson in lessons if lesson.source == source)
        held.update(ids[i] for i in rng.permutation(len(ids))[: len(ids) // 2])
    out = {}
    for name, keep in (("calibration", False), ("held_out", True)):
        part = [lesson for lesson in lessons if (lesson.id in held) == keep]
        ids = {lesson.id for lesson in part}
        out[name] = (part, [Query(q.text, q.area, q.source, tuple(i for i in q.relevant if i in ids))
                            for q in queries if q.relevant[0] in ids])
    return out


def score_matrices(lessons: list[Lesson], queries: list[Query], encoder) -> dict[str, np.ndarray]:
    """(queries, lessons) cosines as `Library.search_vector` ranks them: over the floats (this
    node's own lessons) and over the 1-bit codes (a peer's, held without floats)."""
    from dsonet import NodeIdentity, sign_batch
    from dsonet.library import Library

    with tempfile.TemporaryDirectory() as tmp:
        own = Library(Path(tmp) / "own.sqlite", encoder=encoder)
        for i, lesson in enumerate(lessons):
            own.add(lesson.text, domain=f"cal.l{i}")  # one domain a lesson: none merges with another
        exps, codes = own.unpublished()
        peer = Library(Path(tmp) / "peer.sqlite", encoder=encoder)
        peer.ingest(sign_batch(exps, codes, own.profile, NodeIdentity.generate()))
        q = encoder.encode([query.text for query in queries], kind="query")  # (Q, d)
        out = {}
        for name, lib in (("floats", own), ("codes", peer)):
            scores = np.full((len(queries), len(lessons)), np.nan, np.float32)
            for row, vector in enumerate(q):
                for hit in lib.search_vector(vector, k=len(lessons), min_similarity=-1.0, max_tokens=10**9):
                    scores[row, int(hit.experience.domain.removeprefix("cal.l"))] = hit.score
            out[name] = scores
            lib.close()
    return out


def injection(scores: np.ndarray, labels: np.ndarray, threshold: float, k: int = K) -> dict:
    """Precision and recall of what a search at ``threshold`` injects (top ``k`` above it)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (Q, k)
    top = np.take_along_axis(scores, order, 1)
    judged = np.take_along_axis(labels, order, 1)
    injected = top >= threshold
    tp = int(((judged == 1) & injected).sum())
    fp = int(((judged == 0) & injected).sum())
    relevant = int((labels == 1).sum())
    return {"threshold": float(threshold), "precision": tp / (tp + fp) if tp + fp else 1.0,
            "recall": tp / relevant if relevant else 0.0, "injected": int(injected.sum()),
            "unjudged_injected": int(((judged == -1) & injected).sum()),
            "queries_helped": float(((judged == 1) & injected).any(1).mean())}


def pair_curve(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    """Precision and recall over every judged (question, lesson) pair at ``threshold``."""
    s, y = scores[labels >= 0], labels[labels >= 0]
    above = s >= threshold
    tp = int((above & (y == 1)).sum())
    return {"threshold": float(threshold), "precision": tp / int(above.sum()) if above.any() else 1.0,
            "recall": tp / int((y == 1).sum())}


def choose(curve: list[dict], target: float) -> float:
    """The lowest threshold whose precision is at or above ``target`` there and everywhere above it."""
    chosen = None
    for point in reversed(curve):  # from the highest threshold down
        if point["precision"] < target:
            break
        chosen = point["threshold"]
    if chosen is None:
        raise click.ClickException(f"no threshold reaches precision {target} on the calibration split")
    return chosen


def calibrate(encoder, lessons: list[Lesson], queries: list[Query], target: float, seed: int = 0) -> dict:
    """Scores, curves and the chosen threshold for one space (the floats decide; codes reported)."""
    out = {"encoder_id": encoder.id}
    parts = split(lessons, queries, seed)
    for name, (ls, qs) in parts.items():
        labels = np.array([[judge(q, lesson) for lesson in ls] for q in qs], np.int8)
        mats = score_matrices(ls, qs, encoder)
        rel, unrel = mats["floats"][labels == 1], mats["floats"][labels == 0]
        out[name] = {"lessons": len(ls), "queries": len(qs), "relevant_pairs": int(rel.size),
                     "unrelated_pairs": int(unrel.size),
                     "relevant_scores": np.percentile(rel, [0, 5, 25, 50, 75, 95, 100]).round(3).tolist(),
                     "unrelated_scores": np.percentile(unrel, [0, 5, 25, 50, 75, 95, 100]).round(3).tolist(),
                     **{f"{kind}_curve": [injection(m, labels, t) for t in GRID] for kind, m in mats.items()},
                     "pair_curve": [pair_curve(mats["floats"], labels, t) for t in GRID]}
        out[name]["_scores"] = mats, labels
    threshold = choose(out["calibration"]["floats_curve"], target)
    out["min_similarity"] = threshold
    for name in parts:
        mats, labels = out[name].pop("_scores")
        out[name]["at_threshold"] = {kind: injection(m, labels, threshold) for kind, m in mats.items()}
        out[name]["at_protocol"] = {kind: injection(m, labels, MIN_SIMILARITY) for kind, m in mats.items()}
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, name in zip(axes, ("calibration", "held_out")):
        part = result["default"][name]
        for kind, style in (("floats", "-"), ("codes", ":")):
            curve = part[f"{kind}_curve"]
            t = [p["threshold"] for p in curve]
            ax.plot(t, [p["precision"] for p in curve], "C0" + style, label=f"precision ({kind})")
            ax.plot(t, [p["recall"] for p in curve], "C1" + style, label=f"recall ({kind})")
        ax.axvline(result["default"]["min_similarity"], color="k", lw=1, label="chosen")
        ax.axvline(MIN_SIMILARITY, color="grey", lw=1, ls="--", label="protocol 0.6")
        ax.set_title(f"{name.replace('_', '-')}: {part['lessons']} lessons, {part['queries']} questions")
        ax.set_xlabel("threshold (cosine)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("Injection (top 5 above the threshold) in the default space")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_calibration(result: dict, head_dir: Path) -> Path:
    """The chosen threshold beside the head's config.json, for `default_min_similarity`."""
    held = result["held_out"]["at_threshold"]["floats"]
    entry = {"encoder_id": result["encoder_id"], "min_similarity": result["min_similarity"],
             "target_precision": result["target_precision"],
             "held_out": {"precision": round(held["precision"], 4), "recall": round(held["recall"], 4)},
             "measured_by": "dso bench relevance --write-calibration (bench/results/relevance.json)"}
    path = head_dir / CALIBRATION_NAME
    path.write_text(json.dumps(entry, indent=2) + "\n")
    calibrations.cache_clear()
    return path


@click.command()
@click.option("--precision", "target", type=click.FloatRange(0.5, 1.0), default=0.9, show_default=True,
              help="Injection precision the threshold must keep on the calibration split.")
@click.option("--rebuild-pairs", is_flag=True, help=f"Regenerate {PAIRS.name} from its sources first.")
@click.option("--write-calibration", is_flag=True,
              help=f"Store the chosen threshold in the default head's {CALIBRATION_NAME} (what every entry point uses).")
@click.option("--seed", default=0, show_default=True, help="Seed of the lesson split.")
def cli(target: float, rebuild_pairs: bool, write_calibration: bool, seed: int) -> None:
    """Calibrate the default space's relevance threshold on labelled (question, lesson) pairs split
    by lesson; print precision and recall of injection on the held-out split, and write
    bench/results/relevance.json and relevance.png.

    \b
    Example:
      dso bench relevance --write-calibration
    """
    from dsonet.encoders import default_encoder, minilm
    from dsonet.encoders.default import default_head_dir

    if rebuild_pairs:
        PAIRS.write_text(json.dumps(build_pairs(seed=seed), indent=1) + "\n")
    lessons, queries = load_pairs()
    result = {"pairs": str(PAIRS.name), "target_precision": target, "k": K}
    result["default"] = calibrate(default_encoder(), lessons, queries, target, seed)
    result["minilm"] = calibrate(minilm(), lessons, queries, target, seed)  # the backbone alone, for comparison
    result["default"]["target_precision"] = target
    for space in ("default", "minilm"):
        r = result[space]
        click.echo(f"{space} ({r['encoder_id']}): threshold {r['min_similarity']}")
        for name in ("calibration", "held_out"):
            for kind in ("floats", "codes"):
                a, p = r[name]["at_threshold"][kind], r[name]["at_protocol"][kind]
                click.echo(f"  {name:11s} {kind:6s} precision {a['precision']:.3f} recall {a['recall']:.3f}"
                           f"   (at 0.6: precision {p['precision']:.3f} recall {p['recall']:.3f})")
            click.echo(f"  {name:11s} relevant pairs {r[name]['relevant_scores']}  unrelated {r[name]['unrelated_scores']}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    plot(result, RESULTS_DIR / "relevance.png")
    click.echo(f"wrote {write_results('relevance', result)} and {RESULTS_DIR / 'relevance.png'}")
    if write_calibration:
        click.echo(f"wrote {write_calibration(result['default'], default_head_dir())}")
