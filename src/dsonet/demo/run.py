"""`run_demo`: the demo's steps, top to bottom.

One configuration of the drift scenario (`dsonet.sim.scenario`, whose other is `dso bench learn
--family drift`), on one learning seed and sized for ten minutes on two cores: honest coding agents
each practise on their own facts about the installed libraries, share what they learned, are
attacked and poisoned, and report the outcomes of the lessons they use, which is how they stop
trusting the poisoners.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from dsonet.demo import report
from dsonet.demo.job import JobConfig, run_job
from dsonet.demo.report import DemoReport
from dsonet.encoders.cache import cache_dir
from dsonet.errors import DsoError
from dsonet.learn import drift
from dsonet.learn.cache import CachedLLM, answer_counts
from dsonet.learn.context import Retrieval
from dsonet.learn.llm import open_llm
from dsonet.learn.sandbox import Sandbox
from dsonet.library.policy import default_min_similarity
from dsonet.sim import adversary, scenario
from dsonet.sim.scenario import Scenario, running

Echo = Callable[[str], None]
AGENT = "qwen2.5-coder-0.5b"  # the embedded coding model: about half of drift's stale lines right without help
CHANGE_FACTS = sum(not f.control for f in drift.FACTS)
# The model's answers are fixed by the chat, the sampling seed and the machine: a second `make demo`
# replays them (and every node, share, attack and check runs again) in minutes instead of ~25.
ANSWER_CACHE = cache_dir() / "demo" / "answers.sqlite"
STEPS = 9  # the story's eight, and the act on the job


@dataclass(frozen=True)
class DemoConfig:
    nodes: int = 6  # fleet size, Byzantine nodes included
    byzantine: int = 2  # how many of them attack
    facts: int = 8  # N change facts (and N // 3 controls), the libraries in turn, dealt out among the honest nodes
    train_per_fact: int = 1  # training instances per fact, practised by the one node the fact is dealt to
    eval_per_fact: int = 15  # held-out instances per change fact: 8 x 15 = 120 for without and fleet, 60 for the rest
    eval_per_control: int = 2
    # per honest node: tasks solved with the poisoned fleet's lessons, outcomes reported. The 20 training and
    # validation instances gave a signer 3-4 harmful outcomes and 0-1 helpful a node, under the 5 (none helpful)
    # or 7 (one helpful) that convict it; 5 practice instances a fact more widen the pool. With 70 tasks each
    # node's outcomes convicted both poisoners after 17-28, with 35 after 16-30, and every held-out figure was
    # the same to the digit: 35 halves the phase (it was half of a first run's 13 minutes)
    feedback_tasks: int = 35
    practice_per_fact: int = 5  # training instances per fact used only as feedback tasks, never learned from
    rollouts: int = 4  # G per training instance
    candidates: int = 1  # lesson proposals per group; more are sampled and the execution gate keeps the best
    gate_items: int = 2  # validation instances nearest a lesson that it is judged on (+ one other)
    max_tokens: int = 48  # per rollout and per answer: one line, fenced or not
    reflector: str | None = None  # the model that writes lessons; None: qwen2.5-coder-1.5b embedded, else the agent
    min_similarity: float | None = None  # None: the space's calibrated threshold
    llm_url: str | None = None  # an OpenAI-compatible server instead of the embedded model
    llm_model: str | None = None  # the served model, or an embedded model's key (default qwen2.5-coder-0.5b)
    nats: bool = False  # node processes on a local three-server NATS cluster instead of in-process nodes
    seed: int = 0
    workdir: Path | None = None  # where nodes keep keys and libraries: new or empty (a temporary directory by default)
    answer_cache: Path | None = ANSWER_CACHE  # greedy answers and seeded samples kept on disk; None: always generate
    job: bool = True  # the last act (`dsonet.demo.job`): on the embedded models only
    threads: int | None = None  # llama.cpp threads of the embedded models; None: half the cores (`dso demo` asks
    # for `idle_threads`: every core where the machine is otherwise idle)

    def __post_init__(self) -> None:
        if not 0 <= self.byzantine < self.nodes - self.byzantine:
            raise DsoError(f"byzantine: {self.byzantine} of {self.nodes} nodes; honest nodes must be the majority")
        if not 1 <= self.facts <= CHANGE_FACTS:
            raise DsoError(f"facts: {self.facts}; drift has {CHANGE_FACTS} change facts, choose 1 to {CHANGE_FACTS}")
        for name in ("train_per_fact", "eval_per_fact", "eval_per_control", "rollouts", "candidates", "max_tokens"):
            if getattr(self, name) < 1:
                raise DsoError(f"{name}: {getattr(self, name)}; must be at least 1")
        for name in ("feedback_tasks", "practice_per_fact", "gate_items"):
            if getattr(self, name) < 0:
                raise DsoError(f"{name}: {getattr(self, name)}; must be at least 0")

    def plan(self, min_similarity: float | None) -> scenario.DriftPlan:
        """The bench's plan for these sizes: every honest node runs the same agent model."""
        return scenario.DriftPlan(
            agents=self.nodes - self.byzantine, other_agents=0, poisoners=self.byzantine, facts=self.facts,
            train_per_fact=self.train_per_fact, validation_per_fact=1, held_out_per_fact=self.eval_per_fact,
            held_out_per_control=self.eval_per_control, feedback_tasks=self.feedback_tasks,
            practice_per_fact=self.practice_per_fact, group_size=self.rollouts,
            candidates=self.candidates, gate_items=self.gate_items, answer_tokens=self.max_tokens,
            min_similarity=min_similarity, seeds=(self.seed,))


async def run_demo(config: DemoConfig = DemoConfig(), echo: Echo = print) -> DemoReport:
    """A fleet learns drift, shares, is attacked and poisoned, reports outcomes, and is evaluated after each step.

    Held-out accuracy, on the same tasks and prompts but for the lessons injected: without lessons
    and with the fleet's on every held-out task; with each node's own, poisoned and after the
    feedback phase on every other block of H tasks (H honest nodes; task i is always answered by
    node i mod H), each paired with "without" on its own tasks.
    """
    clock = _Clock()
    honest = config.nodes - config.byzantine
    workdir = _fresh(config.workdir)
    model = config.llm_model or (AGENT if config.llm_url is None else None)
    reflector_name = config.reflector or (scenario.REFLECTOR if config.llm_url is None else None)

    plan = config.plan(config.min_similarity)
    splits = scenario.make_splits(plan, config.seed)
    echo(f"[1/{STEPS}] Loading the agent ({config.llm_url or 'embedded'} {model or ''}), the reflector and the "
         "sandbox; "
         f"drift: {config.facts} change facts + {len(scenario.facts_for(plan)) - config.facts} controls, "
         f"{sum(map(len, splits.train))} training / {len(splits.validation)} validation / {len(splits.held_out)} "
         "held-out instances")
    agent = _cached(open_llm(config.llm_url, model, threads=config.threads), config.answer_cache)
    reflector = _cached(open_llm(config.llm_url, reflector_name, threads=config.threads), config.answer_cache) \
        if reflector_name else agent
    with Sandbox(preload=drift.PRELOAD) as sandbox:
        tasks = scenario.taskset(splits, sandbox)
        clock.lap("load")
        fleet_kind = ("node processes on a 3-server NATS cluster" if config.nats
                      else "in-process nodes on one shared log")
        echo(f"[2/{STEPS}] Starting {honest} honest {fleet_kind} in {workdir}, and {config.byzantine} Byzantine nodes")
        async with running(config.nats, honest, workdir, agent.name) as fleet:
            clock.lap("start")
            report = await _story(config, plan, fleet, tasks, splits, agent, reflector, workdir, echo, clock)
        if not config.job or config.llm_url is not None:
            echo(f"[9/{STEPS}] On the job: skipped ({'--no-job' if not config.job else 'it runs the embedded models'})")
            return report
        echo(f"[9/{STEPS}] On the job: one agent's error, learned by its `dso proxy --learn` from its traffic alone, "
             "becomes another agent's first-try pass")
        act = await run_job(JobConfig(threads=config.threads, answers=config.answer_cache), sandbox, workdir / "job", echo)
        clock.lap("job")
        return replace(report, job=act, seconds=clock.laps())


async def _story(config: DemoConfig, plan: scenario.DriftPlan, fleet, tasks, splits, agent, reflector,
                 workdir: Path, echo: Echo, clock: "_Clock") -> DemoReport:
    honest = plan.honest
    threshold = config.min_similarity if config.min_similarity is not None else default_min_similarity(fleet.encoder)
    s = Scenario(fleet, tasks, splits, plan, [agent] * honest, reflector, Retrieval(k=plan.k, min_similarity=threshold),
                 workdir, lambda line: echo("  " + line.strip()))
    byz = adversary.byzantine_nodes(config.byzantine)
    names = {node_id: f"node{i}" for i, node_id in enumerate(fleet.node_ids)} | {b.node_id: b.name for b in byz}
    held = s.held
    half_rows = [i for i in range(len(held.tasks)) if (i // honest) % 2 == 0]  # keeps i mod H: the same node answers
    half = tasks.subset([held.tasks[i] for i in half_rows], "drift:held-out-half")

    async def evaluate(label: str, items=half, **kw):
        echo(f"      {label}: {len(items.tasks)} held-out tasks")
        return await s.answer(label, items, **kw)

    echo(f"[3/{STEPS}] Each honest node learns on its own facts: G = {plan.group_size} attempts per task, each run in "
         f"the sandbox; the reflector ({reflector.name}) turns what running them showed into 'When X, do Y'; "
         f"{plan.candidates} candidates, kept only if they fix validation tasks")
    learned = await s.learn(scenario.learn_config(plan, s.retrieval, config.seed))
    clock.lap("learn")

    echo(f"[4/{STEPS}] Held-out tasks without lessons, then with each node's own (retrieval threshold {threshold:.3f}, "
         + ("--min-similarity)" if config.min_similarity is not None else "the space's calibrated default)"))
    runs = {"without": await evaluate("without", held, stores=False)}
    runs["own"] = await evaluate("own")
    clock.lap("eval_without_and_own")

    echo(f"[5/{STEPS}] Sharing: honest nodes compress (BitDelta), sign and publish; the attackers hijack, send random "
         "codes, forge, tamper and replay; every honest node runs DeltaSoup on what it reads")
    keys = dict(zip(fleet.node_ids, fleet.public_keys))
    questions = [t.question for t in held.tasks]
    await s.share()
    seen = adversary.view(fleet.wire(), keys, fleet.encoder, fleet.profile, questions, config.seed)
    sent = await adversary.strike(fleet.attacker, adversary.classic_plan(byz), seen, scenario.DOMAIN)
    await fleet.settle()
    runs["fleet"] = await evaluate("fleet", held)
    clock.lap("share_and_eval_fleet")

    echo(f"[6/{STEPS}] Poison: the Byzantine nodes publish a plausible wrong lesson for every fact, honestly encoded "
         "and signed")
    poison = await s.poison(byz)
    sent += adversary.poison_sent(fleet.wire(), byz)
    echo(f"      {len(poison)} wrong lessons published")
    runs["poisoned"] = await evaluate("poisoned")
    clock.lap("poison_and_eval")

    echo(f"[7/{STEPS}] Feedback: each honest node's agent solves {plan.feedback_tasks} practice tasks with the lessons "
         "its node recalls, runs them, and reports each result as those lessons' outcome (POST /outcomes)")
    feedback = await s.feedback()
    runs["after_feedback"] = await evaluate("after_feedback")
    clock.lap("feedback_and_eval")

    echo(f"[8/{STEPS}] Stopping the nodes and counting what each one holds")
    final = await s.close()
    wire = fleet.wire()
    wire_row, fidelity = report.wire_and_fidelity(wire, set(fleet.node_ids), fleet.profile, fleet.encoder)
    attackers = {b.node_id for b in byz}
    control = [scenario.fact_of(t).control for t in held.tasks]
    return DemoReport(
        config=asdict(config) | {"workdir": str(workdir), "answer_cache": _path_or_none(config.answer_cache),
                                 "min_similarity_used": threshold, "agent": agent.name,
                                 "reflector_used": reflector.name, "answers": answer_counts(agent, reflector)},
        fleet=fleet.kind,
        conditions=report.conditions(runs, half_rows, control, attackers),
        controls=report.controls(runs, control),
        ran=report.ran(held, runs),
        learning=report.learning(learned),
        lessons=report.lessons(learned, [names[n] for n in fleet.node_ids]),
        example=report.example(held, runs, fleet.node_ids, names),
        nodes=report.node_rows(names, learned, final, wire, sent),
        attacks=report.attack_rows(sent, final),
        poison=report.poison_rows(final, byz, names, feedback, sent),
        feedback=feedback,
        wire=wire_row,
        fidelity=fidelity,
        seconds=clock.laps(),
    )


def _path_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)  # the report's dict stays JSON as it is


def _cached(llm, path: Path | None):
    return CachedLLM(llm, path) if path is not None else llm


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
