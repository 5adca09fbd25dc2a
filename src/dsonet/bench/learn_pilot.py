"""`dso bench learn --pilot`: which families can lessons help, and can the learner write them?

Both measure on training items only (the first ``n`` of each family's deduplicated training split),
before any held-out run:

* `pilot` — accuracy without lessons (is the model partly right?), with the family's hand-written
  correct lesson alone and with neutral text of its length (can *a* lesson change its answers?);
* `probe` — the learner's own first step on the ``practice`` training items after those: its
  rollouts and its proposal step (`Learner.rollouts`, `Learner.propose`, the code a learning run
  runs), with the reflector given; then every distinct proposal measured alone on the pilot items
  beside the correct lesson. It separates "no lesson helps this model" from "a lesson would help
  and this reflector does not write it", and records why the proposals it refused were refused.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from dsonet.bench.learn import KEPT
from dsonet.learn.control import neutral_notes
from dsonet.learn.tasks import FAMILIES


def _alone(llm, items, text: str, tokens: int) -> tuple:
    """Runs with ``text`` as the only note, and with neutral text of its length in its place."""
    from dsonet.learn.evaluate import answer

    return (answer(llm, items, notes=lambda t: ([text], []), max_tokens=tokens),
            answer(llm, items, notes=lambda t: (neutral_notes([len(text.split())]), []), max_tokens=tokens))


def pilot(llm, families, n: int, tokens: int, log=print) -> dict:
    """Per family, on ``n`` training items: accuracy without lessons, with the correct lesson, with neutral text."""
    from dsonet.learn.evaluate import answer, mcnemar
    from dsonet.learn.tasks import family_splits

    out = {}
    for family in families:
        (train,) = family_splits(family, [n])
        lesson = FAMILIES[family].reference
        run = answer(llm, train, None, max_tokens=tokens)
        row = {"n": n, "accuracy": round(run.accuracy, 4), "parse_failures": run.parse_failures,
               "s_per_item": round(run.wall_s / n, 2), "kept": family in KEPT}
        if lesson:
            ref, neutral = _alone(llm, train, lesson, tokens)
            row |= {"accuracy_reference": round(ref.accuracy, 4), "accuracy_neutral": round(neutral.accuracy, 4),
                    "p_mcnemar_reference": round(mcnemar(ref.correct, run.correct), 4)}
        out[family] = row
        log(f"  pilot {family}: {row}")
    return out


def probe(llm, family: str, n: int, tokens: int, practice: int = 16, reflector=None, group_size: int = 4,
          log=print) -> dict:
    """The learner's proposals from ``practice`` training items, each measured alone on the ``n`` pilot items."""
    from dsonet.learn.grpo import LearnConfig, Learner
    from dsonet.learn.tasks import family_splits

    items, rest = family_splits(family, [n, practice])
    config = LearnConfig(group_size=group_size, max_tokens=tokens, max_lessons=2, batch_size=practice)
    with tempfile.TemporaryDirectory() as tmp:
        learner = Learner(llm, None, config, tmp, reflector=reflector)
        groups = learner.rollouts(rest, rest.tasks, seed=0)
        proposals = learner.propose(groups)
        logged = [json.loads(line) for line in (Path(tmp) / "log.jsonl").read_text().splitlines()]
    refused = [r["reason"] for r in logged if r["type"] == "skipped"]
    texts = list(dict.fromkeys(p.text for p in proposals))
    measured = []
    for text in texts:
        run, neutral = _alone(llm, items, text, tokens)
        measured.append({"text": text, "accuracy": round(run.accuracy, 4), "accuracy_neutral": round(neutral.accuracy, 4)})
    row = {"reflector": (reflector or llm).name, "practice_items": practice, "group_size": group_size,
           "mixed_groups": sum(g.mixed for g in groups), "groups": len(groups),
           "practice_accuracy": round(sum(sum(g.rewards) for g in groups) / (len(groups) * group_size), 4),
           "proposals": measured, "refused": refused,
           "best_accuracy": max((m["accuracy"] for m in measured), default=None)}
    log(f"  probe {family}: {row['mixed_groups']}/{row['groups']} mixed groups, {len(measured)} proposals "
        f"(best {row['best_accuracy']}), {len(refused)} refused")
    return row
