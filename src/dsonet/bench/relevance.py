"""`dso bench relevance`: the relevance threshold of a space, calibrated on labelled pairs.

The protocol's 0.6 is a cosine in the experience-ledger paper's encoder space. In ours a question
and the lesson that helps it score far lower, so 0.6 injects almost nothing. This bench measures
where relevance lies in a space and chooses its threshold:

1. **Labelled data** and 2. **a split by lesson** (`dsonet.bench.relevance_pairs`): lessons and
   questions from four sources, each question naming the lessons that help it; half of each
   source's lessons calibrate, the other half is held out.
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

import json
import tempfile
from pathlib import Path

import click
import numpy as np

from dsonet import NodeIdentity, sign_batch
from dsonet.bench import relevance_users
from dsonet.bench.coldstart import library_file
from dsonet.bench.relevance_pairs import PAIRS, Lesson, Query, build_pairs, judge, load_pairs, split
from dsonet.bench.report import RESULTS_DIR, write_results
from dsonet.encoders import default_encoder, minilm
from dsonet.encoders.default import default_head_dir
from dsonet.encoders.minilm_numpy import minilm_dir
from dsonet.encoders.rescore import BackboneRescorer
from dsonet.library import Library
from dsonet.library.index.rescored import CANDIDATES as RESCORE_CANDIDATES
from dsonet.library.policy import CALIBRATION_NAME, MIN_SIMILARITY, calibrations

K = 5
GRID = np.round(np.arange(0.0, 0.8001, 0.005), 3)
# What the README shows a user (tests/test_readme_examples.py walks it): never calibrated on.
README_TEXTS = (
    "When a ratio is asked, simplify the fraction by the greatest common divisor.",
    "What is 12:18 in lowest terms?",
    "When a ratio is asked, simplify the fraction first.",
    "ratio of two numbers",
    "The ratio of boys to girls is 3:5 and there are 40 pupils. How many girls?",
    "my pytest test fails randomly",
)


def score_matrices(lessons: list[Lesson], queries: list[Query], encoder) -> dict[str, np.ndarray]:
    """(queries, lessons) cosines as `Library.search_vector` ranks them: over the floats (this
    node's own lessons) and over the 1-bit codes (a peer's, held without floats)."""
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


def rescored(candidates: np.ndarray, scores: np.ndarray, n: int = RESCORE_CANDIDATES) -> np.ndarray:
    """A second stage over pairs: each question's best ``n`` lessons by ``candidates`` keep their
    ``scores`` (another space's cosine), the rest drop out (-1). (Q, L) -> (Q, L)."""
    keep = np.argsort(-candidates, axis=1, kind="stable")[:, :n]  # (Q, n)
    out = np.full_like(scores, -1.0)
    np.put_along_axis(out, keep, np.take_along_axis(scores, keep, 1), 1)
    return out


def calibrate(name: str, mats: dict[str, np.ndarray], lessons: list[Lesson], queries: list[Query],
              labels: np.ndarray, target: float, seed: int = 0, seeds: int = 10,
              second: np.ndarray | None = None) -> dict:
    """Curves and the chosen threshold for one scoring (``mats``: (questions, lessons) scores over
    the floats, which decide, and over the codes), and the threshold and held-out figures over
    ``seeds`` other splits (how much the choice moves). ``second``: scores of a second stage that
    rescores each question's best candidates among the split's lessons (`rescored`).

    Every question is scored against every lesson once: a cosine does not depend on which other
    lessons a library holds, and a split's search is its lessons' top k."""
    def part(kind_scores: np.ndarray, qi: np.ndarray, li: np.ndarray) -> np.ndarray:
        sub = kind_scores[np.ix_(qi, li)]
        return sub if second is None else rescored(sub, second[np.ix_(qi, li)])

    out = {"encoder_id": name}
    indices = split(lessons, queries, seed)
    parts = {name: {**{kind: part(m, qi, li) for kind, m in mats.items()}, "labels": labels[np.ix_(qi, li)]}
             for name, (li, qi) in indices.items()}
    for name, scores in parts.items():
        y, f = scores["labels"], scores["floats"]
        rel, unrel = f[(y == 1) & (f > -1)], f[(y == 0) & (f > -1)]  # -1: not a candidate of the second stage
        out[name] = {"lessons": f.shape[1], "queries": f.shape[0],
                     "relevant_pairs": int((y == 1).sum()), "unrelated_pairs": int((y == 0).sum()),
                     "relevant_scores": np.percentile(rel, [0, 5, 25, 50, 75, 95, 100]).round(3).tolist(),
                     "unrelated_scores": np.percentile(unrel, [0, 5, 25, 50, 75, 95, 100]).round(3).tolist(),
                     **{f"{kind}_curve": [injection(scores[kind], y, t) for t in GRID] for kind in mats},
                     "pair_curve": [pair_curve(f, y, t) for t in GRID]}
    threshold = choose(out["calibration"]["floats_curve"], target)
    out["min_similarity"] = threshold
    for name, scores in parts.items():
        out[name]["at_threshold"] = {kind: injection(scores[kind], scores["labels"], threshold) for kind in mats}
        out[name]["at_protocol"] = {kind: injection(scores[kind], scores["labels"], MIN_SIMILARITY) for kind in mats}
        sources = np.array([queries[i].source for i in indices[name][1]])
        out[name]["by_source"] = {source: injection(scores["floats"][sources == source],
                                                    scores["labels"][sources == source], threshold)
                                  for source in sorted(set(sources))}
    out["other_splits"] = []
    for other in range(seed + 1, seed + 1 + seeds):
        (cl, cq), (hl, hq) = split(lessons, queries, other).values()
        cal, held_scores = part(mats["floats"], cq, cl), part(mats["floats"], hq, hl)
        t = choose([injection(cal, labels[np.ix_(cq, cl)], g) for g in GRID], target)
        held = injection(held_scores, labels[np.ix_(hq, hl)], t)
        out["other_splits"].append({"seed": other, "threshold": t, "held_out_precision": round(held["precision"], 4),
                                    "held_out_recall": round(held["recall"], 4)})
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 + ("minilm" in result) + ("users" in result)
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.2))
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
    fig.suptitle("Injection (top 5 above the threshold): precision and recall against the threshold")
    if "minilm" in result:
        _compare_spaces(axes[2], result)
    if "users" in result:
        _users(axes[-1], result["users"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _compare_spaces(ax, result: dict) -> None:
    """The same held-out questions scored in the backbone's own space, without the Zen head, and
    by the backbone as a second stage over the default space's candidates."""
    for space, style in (("default", "-"), ("minilm", "--"), ("rescored", ":")):
        if space not in result:
            continue
        curve = result[space]["held_out"]["floats_curve"]
        t = [p["threshold"] for p in curve]
        ax.plot(t, [p["precision"] for p in curve], "C0" + style, label=f"precision ({space})")
        ax.plot(t, [p["recall"] for p in curve], "C1" + style, label=f"recall ({space})")
        ax.axvline(result[space]["min_similarity"], color="k", lw=1, ls=style)
    ax.set_title("held-out (floats): three ways to score")
    ax.set_xlabel("threshold (cosine)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")


def _users(ax, users: dict) -> None:
    """The users' set, held-out half: recall against precision for each scoring, the defaults marked."""
    for i, (name, entry) in enumerate(users["scorings"].items()):
        curve = entry["curve"]["held_out"]
        ax.plot([p["recall"] for p in curve], [p["precision"] for p in curve], f"C{i}-", label=name)
        if "at_default" in entry:
            at = entry["at_default"]["held_out"]
            ax.plot(at["recall"], at["precision"], f"C{i}o")
    ax.axhline(users["target_precision"], color="grey", lw=1, ls="--")
    ax.set_title("users' questions, held-out (dots: defaults)")
    ax.set_xlabel("recall")
    ax.set_ylim(0.5, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")


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
@click.option("--write-calibration", "store", is_flag=True,
              help=f"Store the chosen thresholds beside the default head and MiniLM's weights ({CALIBRATION_NAME}), "
                   "where every entry point reads them.")
@click.option("--seed", default=0, show_default=True, help="Seed of the lesson split.")
@click.option("--quick", is_flag=True, help="The default space only, two other splits, no cold runs; writes "
                                              "relevance-quick.json.")
@click.option("--users-precision", default=0.95, show_default=True, type=click.FloatRange(0.5, 1.0),
              help="Users' set: injection precision the second stage's threshold must keep on the tune half.")
@click.option("--users-silent", default=0.9, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="Users' set: share of hard negatives that must get no lesson on the tune half.")
@click.option("--rows", default=10_000, show_default=True, type=click.IntRange(min=0),
              help="Rows of the library cold `dso search` is timed on (built once, cached; 0: not timed).")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(min=1), help="Cold searches per set-up.")
def cli(target: float, rebuild_pairs: bool, store: bool, seed: int, quick: bool, users_precision: float,
        users_silent: float, rows: int, runs: int) -> None:
    """Calibrate the default space's relevance threshold on labelled (question, lesson) pairs split
    by lesson, and the second stage's on questions as users type them with hard negatives
    (`dsonet.bench.relevance_users`); print precision, recall and silence of injection beside each
    alternative scoring and what a cold search costs, and write bench/results/relevance.json and
    relevance.png.

    \b
    Example:
      dso bench relevance --write-calibration
    """
    if rebuild_pairs:
        PAIRS.write_text(json.dumps(build_pairs(seed=seed), indent=1) + "\n")
    lessons, queries, near = load_pairs()
    result = {"pairs": str(PAIRS.name), "target_precision": target, "k": K,
              "sources": {source: sum(q.source == source for q in queries)
                          for source in sorted({q.source for q in queries})}}
    seeds = 2 if quick else 10
    labels = np.array([[judge(q, lesson, near) for lesson in lessons] for q in queries], np.int8)
    encoder = default_encoder()
    zen = score_matrices(lessons, queries, encoder)
    result["default"] = calibrate(encoder.id, zen, lessons, queries, labels, target, seed, seeds)
    spaces = ["default"]
    if not quick:  # the backbone alone, without the Zen head; and as a second stage over the default's candidates
        backbone = minilm()
        own = score_matrices(lessons, queries, backbone)
        result["minilm"] = calibrate(backbone.id, own, lessons, queries, labels, target, seed, seeds)
        stage = BackboneRescorer(encoder.backbone)  # the shipped second stage, on every pair
        second = np.stack([stage.score(q.text, [lesson.text for lesson in lessons]) for q in queries])
        result["rescored"] = calibrate(f"{encoder.id} top {RESCORE_CANDIDATES}, scored by {stage.id}", zen,
                                       lessons, queries, labels, target, seed, seeds, second=second)
        spaces += ["minilm", "rescored"]
    for space in spaces:
        r = result[space]
        r["target_precision"] = target
        click.echo(f"{space} ({r['encoder_id']}): threshold {r['min_similarity']}")
        for name in ("calibration", "held_out"):
            for kind in ("floats", "codes"):
                a, p = r[name]["at_threshold"][kind], r[name]["at_protocol"][kind]
                click.echo(f"  {name:11s} {kind:6s} precision {a['precision']:.3f} recall {a['recall']:.3f}"
                           f"   (at 0.6: precision {p['precision']:.3f} recall {p['recall']:.3f})")
            click.echo(f"  {name:11s} relevant pairs {r[name]['relevant_scores']}  "
                       f"unrelated {r[name]['unrelated_scores']}")
        others = r["other_splits"]
        click.echo(f"  {len(others)} other splits: threshold {min(o['threshold'] for o in others)}-"
                   f"{max(o['threshold'] for o in others)} (median {np.median([o['threshold'] for o in others])}), "
                   f"held-out precision {min(o['held_out_precision'] for o in others):.3f}-"
                   f"{max(o['held_out_precision'] for o in others):.3f}, recall "
                   f"{min(o['held_out_recall'] for o in others):.3f}-{max(o['held_out_recall'] for o in others):.3f}")
    cold = None if quick or not rows else library_file(rows)
    result["users"] = users = relevance_users.run(encoder, users_precision, users_silent, cold, runs)
    click.echo(f"questions as users type them ({users['data']}), second stage {users['rescorer']}:")
    click.echo(relevance_users.table(users))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    figure = RESULTS_DIR / ("relevance-quick.png" if quick else "relevance.png")
    plot(result, figure)
    click.echo(f"wrote {write_results('relevance', result, quick=quick)} and {figure}")
    if store:  # each shipped space beside its own weights: the default head, and MiniLM alone
        click.echo(f"wrote {write_calibration(result['default'], default_head_dir())}")
        if "minilm" in result:
            click.echo(f"wrote {write_calibration(result['minilm'], minilm_dir())}")
        click.echo(f"wrote {relevance_users.write_calibration(users, minilm_dir())}")


def report_section(data: dict) -> str:
    """bench/REPORT.md's section: the chosen threshold, held-out precision and recall beside the
    protocol's 0.6 and beside the backbone's own space, the score ranges, and the curve."""
    rows = []
    for space in [name for name in ("default", "minilm", "rescored") if name in data]:
        r = data[space]
        for name in ("calibration", "held_out"):
            for kind in ("floats", "codes"):
                at, p6 = r[name]["at_threshold"][kind], r[name]["at_protocol"][kind]
                rows.append(f"| {space} | {r['min_similarity']} | {name.replace('_', '-')} | {kind} | "
                            f"{at['precision']:.3f} | {at['recall']:.3f} | {at['queries_helped']:.3f} | "
                            f"{p6['precision']:.3f} | {p6['recall']:.3f} |")
    held = data["default"]["held_out"]
    others = data["default"]["other_splits"]
    spread = (f"Over {len(others)} other splits by lesson the rule chose "
              f"{min(o['threshold'] for o in others)}–{max(o['threshold'] for o in others)} (median "
              f"{float(np.median([o['threshold'] for o in others]))}), with held-out precision "
              f"{min(o['held_out_precision'] for o in others):.2f}–"
              f"{max(o['held_out_precision'] for o in others):.2f} and recall "
              f"{min(o['held_out_recall'] for o in others):.2f}–{max(o['held_out_recall'] for o in others):.2f}: "
              "with some 80 lessons a half, the choice moves by a few hundredths from split to split.")
    sizes = ", ".join(f"{n} {source}" for source, n in data.get("sources", {}).items())
    return "\n".join([
        f"Labelled questions ({sizes}) against the lessons that help them and unrelated ones "
        f"(`src/dsonet/bench/data/{data['pairs']}`), split by lesson; injection = the top {data['k']} lessons at or "
        f"above the threshold, precision = the share of judged injected lessons that help, recall = the share of "
        f"helpful (question, lesson) pairs injected. The threshold is the lowest whose calibration precision stays "
        f"≥ {data['target_precision']} above it. Scores through `Library.search_vector`: over the floats (a node's "
        f"own lessons) and over the 1-bit codes (a peer's).",
        "",
        "| space | threshold | split | scored over | precision | recall | questions helped | precision at 0.6 | "
        "recall at 0.6 |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        spread,
        "",
        "Held-out, default space, floats, at the chosen threshold, by where the questions come from: " + "; ".join(
            f"{source} precision {r['precision']:.2f}, recall {r['recall']:.2f}"
            for source, r in held["by_source"].items()) + ".",
        "",
        f"Held-out cosines in the default space (min, 5th, 25th, 50th, 75th, 95th percentile, max): helpful pairs "
        f"{held['relevant_scores']}, unrelated pairs {held['unrelated_scores']}. The two overlap, so no threshold "
        "separates them: the curve trades precision for recall. Rows `minilm`: the backbone's own space, without the "
        f"Zen head; rows `rescored`: the second stage a text search now runs (`dsonet.encoders.rescore`), the default "
        f"space's best {RESCORE_CANDIDATES} lessons per question scored again by MiniLM against the lesson and its "
        "\"When\" clause, its threshold chosen here on these pairs' calibration half (the shipped one comes from the "
        "users' set below).",
        "",
        *(relevance_users.report_lines(data["users"]) if "users" in data else []),
        "![Injection precision and recall against the threshold](results/relevance.png)",
    ])
