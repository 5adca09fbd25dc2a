"""`run_demo`: the demo's steps, top to bottom."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dsonet.demo import adversary, agents, report
from dsonet.demo.agents import Echo
from dsonet.sim.nodes import running
from dsonet.demo.report import DemoReport
from dsonet.errors import DsoError
from dsonet.learn.context import Retrieval


@dataclass(frozen=True)
class DemoConfig:
    nodes: int = 8  # fleet size, Byzantine nodes included
    byzantine: int = 2  # how many of them attack
    task: str = "letter_counting"  # a `dso bench learn` family the embedded model partly solves (57% in its pilot)
    train_per_node: int = 2  # training tasks in each honest node's slice
    eval_tasks: int = 60  # held-out tasks: enough that one task moves accuracy by under 2 points
    rollouts: int = 4  # G per query (the federated paper's 4; Training-free GRPO uses 5)
    max_tokens: int = 48  # per rollout and per answer; small on purpose for 2 CPU cores
    validation_tasks: int = 12  # training items held apart: the gate on new lessons, and the threshold's measure
    min_similarity: float | None = None  # None: measured on the validation questions (`agents.threshold`)
    llm_url: str | None = None  # an OpenAI-compatible server instead of the embedded model
    llm_model: str | None = None  # the served model, or an embedded model's key (see `dsonet.learn.llm.open_llm`)
    nats: bool = False  # node processes on a local three-server NATS cluster instead of in-process nodes
    seed: int = 0
    workdir: Path | None = None  # where nodes keep keys and libraries: new or empty (a temporary directory by default)

    def __post_init__(self) -> None:
        if not 0 <= self.byzantine < self.nodes - self.byzantine:
            raise DsoError(f"byzantine: {self.byzantine} of {self.nodes} nodes; honest nodes must be the majority")
        if self.train_per_node < 1 or self.eval_tasks < 1 or self.validation_tasks < 0:
            raise DsoError("train_per_node and eval_tasks must be at least 1, validation_tasks at least 0")


async def run_demo(config: DemoConfig = DemoConfig(), echo: Echo = print) -> DemoReport:
    """A fleet learns, shares, is attacked and poisoned, and is evaluated after each step.

    Held-out accuracy is measured four times on the same tasks and prompts, but for the
    lessons injected: without lessons; with each node's own (before anything is shared); with
    the fleet's, after the honest nodes published theirs and the attackers published theirs
    (every honest node ran DeltaSoup on all of it); and poisoned, after the Byzantine nodes
    also published plausible but wrong lessons that no check on the wire can refuse.
    """
    clock = _Clock()
    honest = config.nodes - config.byzantine
    workdir = _fresh(config.workdir)

    echo(f"[1/7] Loading the LLM ({config.llm_url or 'embedded'}) and {config.task}: {config.train_per_node} "
         f"training tasks for each of {honest} honest nodes and {config.eval_tasks} held out")
    work = agents.load(config.task, honest, config.train_per_node, config.eval_tasks, config.seed, config.llm_url,
                       config.llm_model, config.validation_tasks)
    domain = work.held_out.tasks[0].domain
    questions = [t.question for t in work.held_out.tasks]
    clock.lap("load")

    fleet_kind = "node processes on a 3-server NATS cluster" if config.nats else "in-process nodes on one shared log"
    echo(f"[2/7] Starting {honest} honest {fleet_kind} in {workdir}, and {config.byzantine} Byzantine nodes")
    async with running(config.nats, honest, workdir, work.llm.name) as fleet:
        byz = adversary.byzantine_nodes(config.byzantine)
        names = {node_id: f"node{i}" for i, node_id in enumerate(fleet.node_ids)} | {b.node_id: b.name for b in byz}
        keys = dict(zip(fleet.node_ids, fleet.public_keys))

        def answer(stores, label: str):  # held-out task i answered by honest node i mod H, off the event loop
            return asyncio.to_thread(agents.answer, work, stores, fleet.node_ids, config.max_tokens, retrieval, echo,
                                     label)

        clock.lap("start")

        echo(f"[3/7] Each honest node learns on its own tasks: G = {config.rollouts} rollouts at T = 0.7, "
             "the semantic advantage -> 'When X, do Y' -> ADD / UPDATE / DELETE / NONE")
        learned = await asyncio.to_thread(agents.learn, work, fleet.stores, fleet.node_ids, config.rollouts,
                                          config.max_tokens, Retrieval(), config.seed, echo)
        measured = await asyncio.to_thread(agents.threshold, work, fleet.stores)
        retrieval = Retrieval(min_similarity=measured if config.min_similarity is None else config.min_similarity)
        echo(f"      retrieval threshold {retrieval.min_similarity:.3f} ("
             + ("measured on the validation questions" if config.min_similarity is None else "--min-similarity")
             + "; prompts with no lesson above it get none)")
        clock.lap("learn")

        echo("[4/7] Held-out tasks without lessons, then with each node's own")
        answers = {"without": await answer([None] * honest, "without"), "own": await answer(fleet.stores, "own")}
        clock.lap("eval_without_and_own")

        echo("[5/7] Sharing: honest nodes compress (BitDelta), sign and publish; the attackers hijack, send random "
             "codes, forge, tamper and replay; every honest node runs DeltaSoup on what it reads")
        await fleet.publish()
        await fleet.settle()
        seen = adversary.view(fleet.wire(), keys, fleet.encoder, fleet.profile, questions, config.seed)
        sent = await adversary.strike(fleet.attacker, adversary.classic_plan(byz), seen, domain)
        await fleet.settle()
        clock.lap("share")
        answers["fleet"] = await answer(fleet.stores, "fleet")
        clock.lap("eval_fleet")

        echo(f"[6/7] Poison: the Byzantine nodes publish {len(adversary.wrong_lessons(domain))} plausible but wrong "
             "lessons, honestly encoded and signed")
        seen = adversary.view(fleet.wire(), keys, fleet.encoder, fleet.profile, questions, config.seed + 1)
        poison = adversary.poison_plan(byz, fleet.encoder, domain, work.llm.name)
        sent += await adversary.strike(fleet.attacker, poison, seen, domain)
        await fleet.settle()
        answers["poisoned"] = await answer(fleet.stores, "poisoned")
        clock.lap("eval_poisoned")

        echo("[7/7] Stopping the nodes and counting what each one holds")
        final = await fleet.close()
        wire = fleet.wire()
        wire_row, fidelity = report.wire_and_fidelity(wire, set(fleet.node_ids), fleet.profile, fleet.encoder)
        node_names = [names[n] for n in fleet.node_ids]
        return DemoReport(
            config=asdict(config) | {"workdir": str(workdir), "min_similarity_used": retrieval.min_similarity},
            fleet=fleet.kind,
            n_eval=len(work.held_out.tasks),
            conditions=report.conditions(answers, {b.node_id for b in byz}),
            learning=report.learning(learned),
            lessons=report.lessons(learned, node_names),
            example=report.example(answers, work.held_out, names, fleet.node_ids),
            nodes=report.node_rows(names, learned, final, wire, sent),
            attacks=report.attack_rows(sent, final),
            wire=wire_row,
            fidelity=fidelity,
            seconds=clock.laps(),
        )


class _Clock:
    """Seconds spent in each step, for the report."""

    def __init__(self):
        self.t0 = self.t = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step], self.t = round(now - self.t, 1), now

    def laps(self) -> dict[str, float]:
        return {**self.seconds, "total": round(time.perf_counter() - self.t0, 1)}


def _fresh(workdir: Path | None) -> Path:
    """The nodes' own lessons are measured before any are shared, so their libraries must start empty."""
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="dso-demo-"))
    workdir = Path(workdir)
    if workdir.exists() and any(workdir.iterdir()):
        raise DsoError(f"workdir: {workdir} is not empty; the demo starts its nodes with empty libraries: "
                       "give a new or empty directory")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir
