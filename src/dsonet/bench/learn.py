"""`dso bench learn`: do learned lessons make the model better on held-out tasks, shared or poisoned?

Per task family (reasoning-gym generators, `dsonet.learn.tasks.FAMILIES`) and learning seed:

1. fixed, deduplicated splits: training items (one disjoint slice per honest node), a validation
   slice of training items, and held-out items; the splits do not depend on the learning seed;
2. each honest node learns with training-free GRPO on its own slice (quality gate and best-epoch
   library on the validation slice), into its own SQLite library;
3. node 0 receives the others' lessons as signed BitDelta batches through DeltaSoup (fleet); in
   the poisoned fleet, one more node (1 of 3, 33%: what 2 shared cores allowed) publishes
   plausible but wrong lessons whose vectors honestly encode their texts, so no vector-space
   filter can see them. Node 0 admits a
   received lesson only through the same gate as its own (validation accuracy with it not below
   accuracy without), and a lesson that fails moves its author's reputation down;
4. held-out accuracy, greedy, answer-only prompts, under seven conditions on the same items:
   without lessons; own; neutral text of the same length in the same place (control); fleet;
   poisoned fleet; the poison alone (as peers' notes, to show that it is real); and the family's
   hand-written correct lesson alone (`Family.reference`: whether a lesson can help this model on
   this family at all, which separates "the learner found nothing" from "no lesson would help").

Statistics per family, pooled over seeds (`dsonet.bench.learn_report`): Wilson intervals per
condition; paired bootstrap 95% intervals of each condition − without (and own − neutral, fleet −
own); McNemar's exact p; coverage (share of held-out prompts that received lessons) and parse
failures per condition.

Retrieval threshold, measured: k = 3 lessons of the question's domain; the protocol's 0.6 when at
least half the validation questions have a lesson above it, else the 20th percentile of the
validation questions' best-lesson scores (so ~80% of validation prompts receive lessons). Chosen
on training data only; the held-out coverage it gives is reported.

Every answer is cached on disk per (model, full chat, settings, prompt version) (`CachedLLM`), and
learning runs resume from their state files, so an interrupted run restarts where it stopped.
The paper's reference (Training-free GRPO): AIME24 80.0 → 82.7 with DeepSeek-V3.1.

These families stay as they were measured (no more work on them): node 0's libraries are
built here with DeltaSoup directly (`NodeZero`), not on the scenario layer's fleet
(`dsonet.sim.scenario`) that `--family drift` and `dso demo` run on; moving them there would change
their published figures.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import click
import numpy as np

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig
from dsonet.bench import drift, drift_mixed
from dsonet.bench.learn_pilot import KEPT, write_pilot
from dsonet.bench.learn_report import CONDITIONS, plot, summarise
from dsonet.bench.report import RESULTS_DIR, format_table, write_results
from dsonet.codec.batch import make_batch, sign_batch
from dsonet.encoders import default_encoder
from dsonet.encoders.cache import cache_dir
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.learn.cache import CachedLLM
from dsonet.learn.context import Retrieval, best_scores, measured_threshold, messages, split_own
from dsonet.learn.control import neutral_notes
from dsonet.learn.evaluate import answer
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.llm import open_llm
from dsonet.learn.tasks import FAMILIES, family_splits
from dsonet.library import Admitted, Library

PAPER = {"task": "AIME24", "llm": "DeepSeek-V3.1", "accuracy_without": 0.800, "accuracy_with": 0.827,
         "cost_usd": 18}


@dataclass(frozen=True)
class Plan:
    honest: int = 2  # learning nodes; node 0's lessons are "own", nodes 1.. are its peers
    poisoners: int = 1  # of honest + poisoners nodes (1 of 3 = 33%; sized for 2 shared cores)
    train_per_node: int = 8
    validation: int = 24  # gate slice: one item moves accuracy by 4 points; a lesson that breaks more
    # items than it fixes is refused. 40+ would let less harm through; 2 shared cores did not allow it
    held_out: int = 120  # CI half-width of a paired difference ≈ 1.96·sqrt(discordant share / n); the
    # issue's ≤ 5 points needs ~200-400 when lessons change answers: 2 shared cores did not allow it
    epochs: int = 1
    group_size: int = 4
    batch_size: int = 8
    max_lessons: int = 2
    answer_tokens: int = 32  # answer-only replies ("Answer: 12/35")
    k: int = 3
    seeds: tuple = (0,)


FULL = Plan()
QUICK = Plan(honest=2, poisoners=1, train_per_node=4, validation=8, held_out=16, epochs=1, group_size=3,
             batch_size=4, max_lessons=1)


def _workdir(model: str, quick: bool) -> Path:
    return cache_dir() / "bench-learn" / (model.replace("/", "_") + ("-quick" if quick else ""))


class NodeZero:
    """Node 0's view of a family: its own library, the fleet library and the poisoned one."""

    def __init__(self, llm, family: str, plan: Plan, seed: int, root: Path, encoder, log=print, reflector=None):
        self.reflector = reflector
        self.llm, self.family, self.plan, self.seed, self.encoder, self.log = llm, family, plan, seed, encoder, log
        n_train = plan.honest * plan.train_per_node
        self.train, self.val, self.test = family_splits(family, [n_train, plan.validation, plan.held_out])
        self.dir = root / family / f"seed{seed}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ids = [f"node{i}" for i in range(plan.honest + plan.poisoners)]

    def slice(self, i: int):
        n = self.plan.train_per_node
        return self.train.subset(self.train.tasks[i * n:(i + 1) * n], f"{self.train.name}:node{i}")

    def learn(self, retrieval) -> tuple[list, list]:
        p = self.plan
        config = LearnConfig(group_size=p.group_size, max_tokens=p.answer_tokens, epochs=p.epochs,
                             batch_size=p.batch_size, max_lessons=p.max_lessons, retrieval=retrieval, seed=self.seed)
        libs, stats = [], []
        for i in range(p.honest):
            lib = Library(self.dir / f"node{i}.db", encoder=self.encoder)
            t0 = time.perf_counter()
            s = Learner(self.llm, lib, config, self.dir / f"node{i}.run", self.ids[i], self.reflector).run(
                self.slice(i), progress=False, validation=self.val)
            self.log(f"    node{i}: {s.rollouts} rollouts, mixed {s.mixed_groups}/{s.groups}, proposals {s.proposals}, "
                     f"gated out {s.gated_out}, skipped {s.skipped}, lessons {len(lib.all())}, validation "
                     f"{s.validation}, {time.perf_counter() - t0:.0f} s")
            libs.append(lib)
            stats.append(s)
        return libs, stats

    def gate_received(self, texts: list[str], baseline: np.ndarray) -> dict[str, bool]:
        """Node 0's gate on received lessons: validation accuracy with the lesson (as a peer's note) not below without."""
        out = {}
        for text in texts:
            run = answer(self.llm, self.val, notes=lambda t, x=text: ([], [x]), max_tokens=self.plan.answer_tokens)
            out[text] = bool(run.correct.mean() >= baseline.mean())
        return out

    def share(self, own_lib, peer_libs: list, poison: bool, baseline: np.ndarray) -> tuple[object, dict]:
        """A copy of node 0's library that received the peers' batches through DeltaSoup (and the
        poisoners' when ``poison``), with received lessons gated on the validation slice."""
        path = self.dir / ("poisoned.db" if poison else "fleet.db")
        for old in self.dir.glob(path.name + "*"):
            old.unlink() if old.is_file() else shutil.rmtree(old)
        lib = Library(path, encoder=self.encoder)
        mine = own_lib.all()
        if mine:
            lib.add_vectors(mine, own_lib.vectors([e.id for e in mine]))
        soup = DeltaSoup(DeltaSoupConfig(), profiles=[lib.profile], encoder=self.encoder)
        payloads = []
        for i, peer in enumerate(peer_libs, 1):
            exps, codes = peer.unpublished()
            if exps:
                ident = NodeIdentity.from_seed(f"bench-learn-{self.ids[i]}".encode())
                payloads.append(sign_batch(exps, codes, peer.profile, ident).to_msgpack())
        domain = self.test.tasks[0].domain
        if poison:
            for j in range(self.plan.poisoners):
                node = self.ids[self.plan.honest + j]
                ident = NodeIdentity.from_seed(f"bench-learn-{node}".encode())
                poison = FAMILIES[self.family].poison
                texts = list(poison[j::self.plan.poisoners] or poison[:1])
                exps = [Experience(t, domain, 0.9, Provenance(node, self.llm.name, int(time.time() * 1000), 0))
                        for t in texts]
                vecs = self.encoder.encode([e.text for e in exps], kind="document")
                payloads.append(make_batch(exps, vecs, lib.profile, ident).to_msgpack())
        for payload in payloads:
            soup.submit(payload)
        result = soup.round(reference=lib.vectors([e.id for e in mine]) if mine else None)
        received = []
        for batch, keep in zip(result.batches, result.keep):
            lib.ingest(Admitted(batch, keep), encode_texts=True)
            received += [(batch.node_id, e) for e, k in zip(batch.experiences, keep) if k]
        held = {e.text for e in mine}  # a peer's copy of a lesson node 0 holds already needs no second gate
        verdict = self.gate_received(sorted({e.text for _, e in received} - held), baseline)
        refused = []
        for signer, exp in received:
            ok = verdict.get(exp.text, True)
            soup.record_outcome(signer, ok)
            if not ok:  # drop that signer's row only: node 0's own copy of the same id stays
                lib.apply_tombstones([exp.id], signer=signer)
                refused.append(exp.text)
        info = {"received": len(received), "deltasoup_dropped": int(sum((~k).sum() for k in result.keep)),
                "gate_refused": len(refused), "refused": refused,
                "poison_admitted": sorted({e.text for _, e in received if e.text in FAMILIES[self.family].poison}
                                          - set(refused))}
        return lib, info


def run_family(llm, family: str, plan: Plan, seed: int, root: Path, encoder, log=print, reflector=None) -> dict:
    """Every condition's per-item correctness (and the run's facts) for one family and seed."""
    t0 = time.perf_counter()
    zero = NodeZero(llm, family, plan, seed, root, encoder, log, reflector)
    log(f"  {family} seed {seed}: {len(zero.train.tasks)} train / {len(zero.val.tasks)} validation / "
        f"{len(zero.test.tasks)} held-out; learning on {plan.honest} nodes")
    learn_retrieval = Retrieval(k=plan.k, min_similarity=0.0)  # rollouts see the node's best lessons
    libs, stats = zero.learn(learn_retrieval)
    own = libs[0]
    val_vecs = encoder.encode([t.question for t in zero.val.tasks], kind="query")
    best = best_scores(own, [t.question for t in zero.val.tasks], zero.val.tasks[0].domain, val_vecs)
    retrieval = Retrieval(k=plan.k, min_similarity=measured_threshold(best))
    baseline = answer(llm, zero.val, None, max_tokens=plan.answer_tokens).correct
    log(f"  threshold {retrieval.min_similarity} (validation best-lesson scores: median {np.median(best):.3f}); sharing")
    fleet_lib, fleet_info = zero.share(own, libs[1:], False, baseline)
    poisoned_lib, poison_info = zero.share(own, libs[1:], True, baseline)
    test = zero.test
    vecs = encoder.encode([t.question for t in test.tasks], kind="query")
    tok = plan.answer_tokens
    runs = {"without": answer(llm, test, None, max_tokens=tok)}
    log(f"  held-out without: {runs['without'].accuracy:.3f}")
    runs["own"] = answer(llm, test, own, retrieval, max_tokens=tok, node_id="node0", vectors=vecs, record=True)
    log(f"  own: {runs['own'].accuracy:.3f} (coverage {runs['own'].coverage:.2f})")
    own_counts = {t.id: [len(h.experience.text.split()) for h in hits] for t, hits in zip(test.tasks, runs["own"].hits)}
    runs["neutral"] = answer(llm, test, notes=lambda t: (neutral_notes(own_counts[t.id]), []), max_tokens=tok)
    log(f"  neutral: {runs['neutral'].accuracy:.3f}")
    runs["fleet"] = answer(llm, test, fleet_lib, retrieval, max_tokens=tok, node_id="node0", vectors=vecs, record=True)
    log(f"  fleet: {runs['fleet'].accuracy:.3f} (coverage {runs['fleet'].coverage:.2f})")
    runs["poisoned"] = answer(llm, test, poisoned_lib, retrieval, max_tokens=tok, node_id="node0", vectors=vecs,
                              record=True)
    log(f"  poisoned: {runs['poisoned'].accuracy:.3f} (coverage {runs['poisoned'].coverage:.2f})")
    poison = list(FAMILIES[family].poison[:plan.k])
    runs["poison_only"] = answer(llm, test, notes=lambda t: ([], poison), max_tokens=tok)
    log(f"  poison only: {runs['poison_only'].accuracy:.3f}")
    runs["reference"] = answer(llm, test, notes=lambda t: ([FAMILIES[family].reference], []), max_tokens=tok)
    log(f"  reference lesson (hand-written): {runs['reference'].accuracy:.3f}")
    example = next(((t, r) for t, r in zip(test.tasks, runs["own"].texts) if own_counts[t.id]), None)
    facts = {
        "lessons": [e.text for e in own.all()], "fleet_lessons": len(fleet_lib.all()),
        "poisoned_lessons": len(poisoned_lib.all()), "min_similarity": retrieval.min_similarity,
        "fleet_share": fleet_info, "poisoned_share": poison_info,
        "learning": [{"node": i, **{k: v for k, v in asdict(s).items() if k != "operations"}, **s.operations}
                     for i, s in enumerate(stats)],
        "tokens": sum(s.tokens for s in stats) + sum(r.tokens for r in runs.values()),
        "wall_s": round(time.perf_counter() - t0, 1),
        "rejected_examples": _rejections(zero.dir / "node0.run" / "log.jsonl"),
    }
    if example is not None:
        t, reply = example
        hits = runs["own"].hits[test.tasks.index(t)]
        facts["example_prompt"] = {"chat": messages(test.prompt(t), *split_own(hits, "node0")), "reply": reply,
                                   "answer": t.answer}
    for lib in (*libs, fleet_lib, poisoned_lib):
        lib.close()
    return {"runs": runs, "facts": facts}


def _rejections(log: Path, keep: int = 6) -> list[dict]:
    """A few rejected or malformed LLM outputs from a run log, with the reason each was refused."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    out = [{"stage": r["stage"], "reason": r["reason"]} for r in rows if r["type"] == "skipped"]
    out += [{"stage": "gate", "reason": f"validation {r['accuracy_with']} < {r['accuracy_without']}: {r['text']}"}
            for r in rows if r["type"] == "gate" and not r["kept"]]
    return out[:keep]


@click.command()
@click.option("--quick", is_flag=True, help="A smoke run (one family, tiny splits): under 10 minutes on 2 cores.")
@click.option("--family", "families", multiple=True, help=f"Task family (repeatable; default: {', '.join(KEPT)}).")
@click.option("--seeds", default=None, help="Learning seeds, comma-separated (default: 0).")
@click.option("--held-out", type=int, default=None,
              help="Held-out items per family (default 200); with --family drift, per change fact (default 5).")
@click.option("--llm", "url", default=None, metavar="URL", help="An OpenAI-compatible endpoint instead of the embedded model.")
@click.option("--model", default="qwen2.5-coder-0.5b", show_default=True,
              help="Embedded model key, or the served model name with --llm.")
@click.option("--reflector", default=None,
              help="A second embedded model that writes the lessons (summaries, advantage, library update) "
                   "while --model answers, e.g. qwen2.5-coder-1.5b.")
@click.option("--reflector-llm", "reflector_url", default=None, metavar="URL",
              help="An OpenAI-compatible endpoint serving the reflector, which --reflector then names: a stronger "
                   "served model writing the lessons for the embedded agent.")
@click.option("--pilot", "pilot_n", type=int, default=0,
              help="Only run the family pilot on N training items each: accuracy without lessons, with the family's "
                   "hand-written correct lesson, and with neutral text of its length.")
@click.option("--probe", "probe_practice", type=int, default=0, metavar="M",
              help="With --pilot: also run the learner's rollouts and proposal step on M more training items "
                   "(with --reflector if given) and measure each proposed lesson alone on the pilot items.")
@click.option("--facts", "n_facts", type=int, default=None,
              help="With --family drift: that many change facts (and a third as many controls), dealt from the "
                   "libraries in turn (default: every fact).")
@click.option("--feedback-tasks", type=int, default=None,
              help="With --family drift: feedback tasks per honest node after the poison (default 30).")
@click.option("--mixed", is_flag=True,
              help="With --family drift: a fleet split between drift.lock's environment and an older one "
                   "(`dsonet.bench.drift_mixed`), lessons scoped and not; writes learn-drift-mixed.json (--out, "
                   "--held-out per fact, --seeds).")
@click.option("--probation", is_flag=True,
              help="With --family drift: a lesson that ties at the learner's gate goes in on probation (confidence "
                   "0.3) for the feedback phase's outcomes to settle, instead of being refused; writes "
                   "learn-drift-probation-<model>-seed<s>.json and learn-drift-probation.json.")
@click.option("--out", "out_name", default=None,
              help="Results name under bench/results (default learn / learn-quick, and learn-pilot with --pilot).")
@click.option("--combine", default=None, metavar="NAME,NAME",
              help="Only merge the rows of earlier runs' results (e.g. one per family) into learn.json and its plot.")
def cli(quick, families, seeds, held_out, url, model, reflector, reflector_url, pilot_n, probe_practice, n_facts,
        feedback_tasks, mixed, probation, out_name, combine):
    """Held-out accuracy per task family without lessons, with the node's own lessons, with neutral
    text of the same length, with the fleet's (through DeltaSoup), with a poisoned fleet, with the
    poison alone, and with the family's hand-written correct lesson alone (can any lesson help?);
    paired 95% CIs, McNemar p, Wilson intervals, coverage, parse failures.
    Resumable: answers are cached, learning runs resume. Writes bench/results/learn.json and learn.png.

    \b
    `--family drift` (library drift: one line of Python against the installed releases, checked by
    running it in the sandbox) is a fleet of its own: see `dsonet.bench.drift`. Each (model, seed) is
    written to its own file; `--combine` pools them.

    \b
    Examples:
      dso bench learn --family drift --quick
      dso bench learn --family drift --seeds 0,1,2
      dso bench learn --family drift --facts 16 --feedback-tasks 20
      dso bench learn --family drift --mixed
      dso bench learn --family drift --probation --seeds 0
      dso bench learn --family drift --mixed --held-out 6 --out learn-drift-mixed-h6
      dso bench learn --family drift --model qwen2.5-coder-1.5b --seeds 0
      dso bench learn --combine learn-drift-qwen2.5-coder-0.5b-seed0,learn-drift-qwen2.5-coder-1.5b-seed0
      dso bench learn --quick
      dso bench learn --family gcd --seeds 0,1,2
      dso bench learn --family aiw --held-out 200
      dso bench learn --pilot 30 --family aiw --family lcm
      dso bench learn --pilot 30 --probe 16 --family aiw --reflector qwen2.5-coder-1.5b
      dso bench learn --pilot 30 --probe 32 --family aiw --reflector-llm http://localhost:8000/v1 --reflector Qwen/Qwen3-8B
      dso bench learn --llm http://localhost:8000/v1 --model Qwen/Qwen3-8B
    """
    if probation and (list(families) != ["drift"] or mixed or combine):
        raise click.UsageError("--probation is a plan of the drift fleet: give --family drift alone (no --mixed, "
                               "no --combine; combine learn-drift-probation-* files by name)")
    if mixed:
        if list(families) != ["drift"] or url or reflector_url or pilot_n or combine:
            raise click.UsageError("--mixed runs with --family drift alone, on the embedded models")
        return drift_mixed.main(quick, seeds, model, reflector, held_out, out_name)
    if "drift" in families or (combine and combine.startswith("learn-drift")):
        return _drift(quick, families, seeds, held_out, url, model, reflector, reflector_url, pilot_n, combine, out_name,
                      n_facts, feedback_tasks, probation)
    if combine:
        parts = [json.loads((RESULTS_DIR / f"{name}.json").read_text()) for name in combine.split(",")]
        rows = [r for part in parts for r in part["rows"]]
        path = write_results(out_name or "learn", {**parts[0], "rows": rows, "combined_from": combine.split(",")})
        plot(rows, path.with_suffix(".png"))
        click.echo(f"wrote {path} and {path.with_suffix('.png')}")
        return
    plan = QUICK if quick else FULL
    if seeds:
        plan = replace(plan, seeds=tuple(int(s) for s in seeds.split(",")))
    if held_out:
        plan = replace(plan, held_out=held_out)
    if reflector_url and not reflector:
        raise click.UsageError("--reflector-llm serves the model that --reflector names: give --reflector too")
    if probe_practice and not pilot_n:
        raise click.UsageError("--probe measures on the pilot's items: give --pilot N too")
    base = open_llm(url, model)
    teacher = open_llm(reflector_url, reflector) if reflector else None
    root = _workdir(base.name + (f"+{teacher.name}" if teacher else ""), quick)
    llm = CachedLLM(base, _workdir(base.name, quick) / "answers.sqlite")
    teacher = CachedLLM(teacher, _workdir(base.name, quick) / "answers.sqlite") if teacher else None
    row_llm = base.name + (f" (lessons by {teacher.name})" if teacher else "")
    log = lambda msg: click.echo(f"[{time.strftime('%H:%M:%S')}] {msg}")  # noqa: E731
    if pilot_n:
        write_pilot(llm, teacher, base.name, list(families), pilot_n, probe_practice, plan.answer_tokens,
                    RESULTS_DIR / f"{out_name or 'learn-pilot'}.json", log)
        return
    families = list(families) or (["letter_counting"] if quick else list(KEPT))
    for f in families:
        if f not in FAMILIES or not FAMILIES[f].poison:
            raise click.BadParameter(f"{f!r}: choose one of {sorted(k for k, v in FAMILIES.items() if v.poison)}",
                                     param_hint="--family")
    encoder = default_encoder()
    rows = []
    for family in families:
        hits, misses = llm.hits, llm.misses
        per_seed = [run_family(llm, family, plan, s, root, encoder, log, teacher) for s in plan.seeds]
        # wall_s is this run's: a rerun answered from the cache takes seconds where a cold one took minutes
        rows.append(summarise(row_llm, family, per_seed) | {"answers": {"generated": llm.misses - misses,
                                                                        "from_cache": llm.hits - hits}})
        log(f"  cache: {llm.hits - hits} hits, {llm.misses - misses} answers generated")
    click.echo(format_table(rows + [{"llm": f"paper: {PAPER['llm']}", "task": PAPER["task"],
                                     "accuracy_without": PAPER["accuracy_without"],
                                     "accuracy_with": PAPER["accuracy_with"]}],
                            ["llm", "task", "n_eval", "seeds", "accuracy_without", "accuracy_with", "accuracy_neutral",
                             "accuracy_fleet", "accuracy_poisoned", "accuracy_poison_only", "ci95", "p_mcnemar",
                             "coverage"]))
    pilot_path = RESULTS_DIR / "learn-pilot.json"
    name = out_name or "learn"
    path = write_results(name, {"rows": rows, "paper": PAPER, "plan": asdict(plan), "quick": quick,
                                "pilot": json.loads(pilot_path.read_text()) if pilot_path.exists() else None},
                         quick=quick)
    plot(rows, path.with_suffix(".png"))
    click.echo(f"wrote {path} and {path.with_suffix('.png')}")


def _drift(quick, families, seeds, held_out, url, model, reflector, reflector_url, pilot_n, combine, out_name,
           n_facts, feedback_tasks, probation: bool = False) -> None:
    """`dso bench learn --family drift`: a configuration of the drift scenario (`dsonet.bench.drift`)."""
    if not combine and (list(families) != ["drift"] or url or reflector_url or pilot_n):
        raise click.UsageError("--family drift runs alone, on the embedded models (no --llm, --reflector-llm or --pilot)")
    drift.main(quick, seeds, held_out, model, reflector, n_facts, feedback_tasks, combine, out_name, probation)
