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

from dsonet.learn.control import neutral_notes
from dsonet.learn.evaluate import answer, mcnemar
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.tasks import FAMILIES, family_splits

# Pilot on 30 training items each (Qwen2.5-Coder-0.5B, greedy, answer only; `dso bench learn --pilot`).
# Kept: accuracy between 15% and 60% (partly right; the rest wrong in repeated ways, e.g. "1/1" for
# any fraction): letter_counting 0.57, lcm 0.23, fraction_simplification 0.17. Dropped: gcd 0.07,
# basic_arithmetic 0.07, count_bits 0.10, number_sorting 0.00 (copies the format example; 20 s an item).
# aiw (0.00) was added later as the family where a correct lesson changes the answers (0.00 -> 0.60 with
# its hand-written lesson, where the kept families move by at most 7 points): run it with --family aiw.
# bench/results/learn-pilot.json has every family tried. Four more, with hand-written correct lessons
# (syllogism 33%, number_format 40%, word_sorting 7%, simple_geometry 0%): no lesson moved them.
# The probe (`--pilot 30 --probe 32 --family aiw`, learn-probe-0.5b/1.5b.json): from the same 32 practice
# groups neither embedded reflector proposed a lesson above 6.7% on aiw, where the correct one gives 60%.
KEPT = ("letter_counting", "fraction_simplification", "lcm")


def _alone(llm, items, text: str, tokens: int) -> tuple:
    """Runs with ``text`` as the only note, and with neutral text of its length in its place."""
    return (answer(llm, items, notes=lambda t: ([text], []), max_tokens=tokens),
            answer(llm, items, notes=lambda t: (neutral_notes([len(text.split())]), []), max_tokens=tokens))


def pilot(llm, families, n: int, tokens: int, log=print) -> dict:
    """Per family, on ``n`` training items: accuracy without lessons, with the correct lesson, with neutral text."""
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


def write_pilot(llm, reflector, llm_name: str, families: list[str], n: int, practice: int, tokens: int, path: Path,
                log=print) -> None:
    """`dso bench learn --pilot N [--probe M]`: the pilot (and the probe) of ``families`` (all with a poison
    lesson when empty), merged into ``path`` beside the families measured earlier with the same model."""
    names = families or [f for f, v in FAMILIES.items() if v.poison]
    data = pilot(llm, names, n, tokens, log)
    for name in names if practice else ():
        data[name]["probe"] = probe(llm, name, n, tokens, practice, reflector, log=log)
    before = json.loads(path.read_text()) if path.exists() else {}
    earlier = before.get("families", {}) if before.get("llm") == llm_name else {}
    path.write_text(json.dumps({
        "llm": llm_name, "items": f"the first {n} training items of each family (family_splits)",
        "prompt": "system 'You are a careful problem solver.' (+ the lesson or the neutral text as a note), "
                  f"question + answer-only format, greedy, {tokens} tokens",
        "families": earlier | data}, indent=1))
