"""`dso bench agents`: coding agents learn on the job from their own traffic, share it, and are poisoned.

A fleet of honest agents, each a real agent loop (`dsonet.bench.agent_loop`: write code, run it in
the sandbox, read the result, up to ``tries`` times) through its own `dso proxy` to the embedded
model served as `dso llm serve` serves it, each proxy in front of its own `dso node start` process
on a three-server NATS JetStream cluster (`dsonet.sim.nats_nodes`, as `dso demo --nats` runs it),
and a Byzantine node publishing the drift family's poison (`dsonet.sim.adversary`). Nothing but
the scorer sees a reference: the proxies learn only from the request and response bodies they
forward (`dso proxy --learn`), never from a fact id, a reference answer or a hand-written lesson.

The steps (the drift family's facts and splits, `dsonet.sim.scenario.make_splits`):

1. **none**: the held-out tasks of every fact, through proxies that inject and learn nothing (the
   nodes are empty);
2. **practice**: each agent works on its own facts' training instances through its learning proxy:
   a failed attempt, its error line and a later attempt that ran become a lesson on probation in its
   node, and nothing else does;
3. **own**: the held-out tasks again, each agent's proxy injecting its own node's lessons;
4. the nodes publish what they hold and read each other's: **fleet**;
5. the Byzantine node publishes a plausible wrong lesson for every fact, honestly encoded and
   signed: **poisoned**;
6. **feedback**: each agent solves practice tasks through its learning proxy, which infers every
   injected lesson's outcome from the run's next request (the code ran: helped; it failed with an
   error that refutes the lesson: harmed), with nothing for the agent to call; a node hides a
   signer under its reputation floor or convicted by its outcomes;
7. **poisoned after feedback**.

Held-out task i is always solved by agent i mod ``agents``; every condition has the same prompts,
greedy sampling and token limits, and differs only in the lessons its proxy injects. Held-out
conditions go through proxies that do not learn, so no held-out task teaches the fleet; the
feedback phase's proxies learn (as `--learn` does) besides inferring outcomes, so the last
condition may also hold lessons learned then (counted in ``phases.feedback``).

``practice_model`` (where given) is the model the learning phases' agents run (practice, feedback),
served beside ``model``, which every held-out condition runs: the 0.5B seldom repairs its own error,
so a fleet of 0.5B agents learns almost nothing from its own traffic, while the 1.5B's repairs can
teach it; the row names both. With ``team``, each node's learning proxy also serves an agent on
``model`` in the practice phase, and both agents work through the node's practice tasks: one learner
reads both (`TrafficLearner`, shared by the node's two learning proxies, as one proxy in front of a
server of both models would be), so the smaller model's failures pair with the code of the larger
one's that ran for the same task (`dsonet.learn.pairing`). The 1.5B alone, in practice, mostly writes
right at once what it knows and never fixes what it does not: the contrast is between the two models.

``framework`` picks the agents of every phase: the bench's own loop (``loop``) or smolagents' own
agent (``smolagents``, `dsonet.bench.agent_smolagents`); the row says which.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import click
import numpy as np

from dsonet.bench.agent_loop import RunRecord, locked
from dsonet.bench.agents_fleet import FRAMEWORKS, Proxies, agent_type, episodes_in, held_out, open_proxies, work
from dsonet.bench.agents_report import COLUMNS, combined, row
from dsonet.bench.proxy import Served
from dsonet.bench.report import RESULTS_DIR, format_table, write_results
from dsonet.encoders.cache import cache_dir
from dsonet.learn import drift
from dsonet.learn.episodes import DOMAIN
from dsonet.learn.llama_llm import MODELS as GGUF, LlamaCppLLM, default_threads, gguf_path
from dsonet.learn.sandbox import Sandbox
from dsonet.sim import adversary
from dsonet.sim.report import hidden
from dsonet.sim.scenario import DriftPlan, Splits, facts_for, fact_of, make_splits, running

MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
CHANGE_FACTS = sum(not f.control for f in drift.FACTS)


@dataclass(frozen=True)
class AgentsPlan:
    agents: int = 4  # honest agents, each with its own proxy and node
    poisoners: int = 1
    facts: int = 0  # 0: every fact; N: N change facts (dealt from the libraries in turn) and N // 3 controls
    n_eval: int = 144  # held-out change tasks at least: ceil(n_eval / facts) per change fact, one per control
    practice_per_fact: int = 2  # training instances per fact, worked on by the agent the fact is dealt to
    feedback_tasks: int = 30  # per agent, from the practice and validation instances
    tries: int = 3
    answer_tokens: int = 48  # one line in a fence; the drift bench's limit
    retry_temperature: float = 0.7  # a retry samples (the first try is greedy): Training-free GRPO's temperature
    model: str = MODELS[0]
    practice_model: str = ""  # the model of the learning phases (practice, feedback); "": ``model``
    team: bool = False  # with practice_model: an agent on ``model`` practises beside it, behind the same learner
    seed: int = 0  # rotates which agent practises on which facts
    framework: str = FRAMEWORKS[0]  # whose agents: the bench's loop, or a real framework's (`agents_fleet.FRAMEWORKS`)

    def learner(self) -> str:
        """The model the practice and feedback phases' agents run."""
        return self.practice_model or self.model

    def practised_by(self) -> str:
        """The row's ``practice_model``: the models whose agents practised ("" where only ``model``)."""
        return f"{self.practice_model}+{self.model}" if self.team else self.practice_model

    def drift(self) -> DriftPlan:
        """The drift scenario's plan these sizes give (its splits, its facts in play)."""
        change = self.facts or CHANGE_FACTS
        return DriftPlan(agents=self.agents, other_agents=0, poisoners=self.poisoners, facts=self.facts,
                         train_per_fact=self.practice_per_fact, validation_per_fact=1,
                         held_out_per_fact=math.ceil(self.n_eval / change), held_out_per_control=1,
                         feedback_tasks=self.feedback_tasks, answer_tokens=self.answer_tokens, seeds=(self.seed,))


class Cores:
    """The threads the bench's served models decode on, shared by the models a phase runs: as many in all
    as each model's `default_threads` together, what the team's practice (both models at once) takes. A
    held-out phase runs the one model, which then has them all, where one core idled before."""

    def __init__(self, llms: dict[str, LlamaCppLLM]):
        self.llms, self.budget = llms, default_threads() * len(llms)

    def give(self, *models: str) -> None:
        running = dict.fromkeys(models)
        for m in running:
            self.llms[m].set_threads(max(1, self.budget // len(running)))


def feedback_jobs(splits: Splits, agents: int, per_agent: int) -> list[list]:
    """Agent i's feedback tasks: the next ``per_agent`` of the shuffled practice pool, wrapping round."""
    pool = splits.feedback
    return [[pool[(i * per_agent + j) % len(pool)] for j in range(per_agent)] for i in range(agents)]


class Steps:
    """The measured steps on a started fleet: held-out conditions through the plain proxies, practice and
    feedback through the learning ones, each logged and kept."""

    def __init__(self, px: Proxies, held: list, log=print):
        self.px, self.held, self.log = px, held, log
        self.runs: dict[str, list[RunRecord]] = {}  # condition -> the held-out runs, in the tasks' order
        self.learning: dict[str, list[RunRecord]] = {}  # practice, feedback -> their runs
        self.phases: dict[str, dict] = {}

    async def condition(self, name: str) -> None:
        start = time.perf_counter()
        self.runs[name] = runs = await asyncio.to_thread(held_out, self.px.plain, self.held, name)
        self.log(f"  {name}: first try {np.mean([r.first_try for r in runs]):.3f}, solved "
                 f"{np.mean([r.solved for r in runs]):.3f} ({time.perf_counter() - start:.0f} s)")

    async def learn(self, name: str, jobs: list[list], team: bool = False) -> None:
        """Agent k works through ``jobs[k]`` through its learning proxy (with ``team``, its node's agent on the
        held-out model too, behind the same learner); what each proxy's learner counted."""
        start, before = time.perf_counter(), [lr.counts() for lr in self.px.learners]
        agents, jobs = (self.px.learning + self.px.team, jobs + jobs) if team else (self.px.learning, jobs)
        records = [r for agent in await asyncio.to_thread(work, agents, jobs, name) for r in agent]
        counts = [{k: v - b[k] for k, v in lr.counts().items()} for lr, b in zip(self.px.learners, before)]
        self.learning[name] = records
        self.phases[name] = {"runs": len(records), "solved": round(float(np.mean([r.solved for r in records])), 4)
                             if records else None, "per_agent": counts, "wall_s": round(time.perf_counter() - start, 1)}
        self.log(f"  {name}: {len(records)} runs; per agent (requests, episodes, paired, lessons, outcomes) "
                 f"{[tuple(c.values()) for c in counts]}")


async def run_fleet(plan: AgentsPlan, workdir: Path, log=print) -> dict:
    """Every step on a started fleet; what each condition's runs showed and what the fleet held at the end."""
    from dsonet.serve import ServedModel, create_app as serve_app  # loads jinja2

    make = agent_type(plan.framework)  # a missing framework says so before anything starts
    dplan, t0 = plan.drift(), time.perf_counter()
    splits = make_splits(dplan, plan.seed)
    log(f"{len(splits.held_out)} held-out tasks of {len(facts_for(dplan))} facts; {sum(map(len, splits.train))} "
        f"practice tasks on {plan.agents} agents; {plan.feedback_tasks} feedback tasks each")
    byz = adversary.byzantine_nodes(plan.poisoners, "agents-byzantine")
    with Sandbox(preload=drift.PRELOAD) as sandbox, ExitStack() as stack:
        llms = {m: LlamaCppLLM(gguf_path(m), GGUF[m].name, slots=max(plan.agents, 2))
                for m in dict.fromkeys((plan.model, plan.learner()))}
        served = {m: stack.enter_context(Served(serve_app(ServedModel.of(llm, m))))
                  for m, llm in llms.items()}  # one server per model, as `dso llm serve` runs
        cores = Cores(llms)
        check = locked(lambda task, reply: drift.check(sandbox, task, reply))
        async with running(True, plan.agents, workdir, plan.model) as fleet:
            px = open_proxies(stack, [p.url for p in fleet.procs], {m: f"{s.url}/v1" for m, s in served.items()},
                              plan.model, plan.learner(), check, plan.tries, plan.answer_tokens,
                              plan.retry_temperature, make, plan.team)
            steps = Steps(px, splits.held_out, log)
            cores.give(plan.model)
            await steps.condition("none")  # 1. the nodes are empty
            cores.give(plan.learner(), *[plan.model] * plan.team)  # the team's agents run both models at once
            await steps.learn("practice", [splits.train[i] for i in range(plan.agents)], plan.team)  # 2.
            cores.give(plan.model)
            await steps.condition("own")  # 3.
            await fleet.publish()  # 4. every node publishes what it holds and reads the others'
            await fleet.settle()
            await steps.condition("fleet")
            poison = await adversary.publish_poison(fleet, byz, facts_for(dplan), plan.model, DOMAIN)  # 5.
            await fleet.settle()
            await steps.condition("poisoned")
            cores.give(plan.learner())
            await steps.learn("feedback", feedback_jobs(splits, plan.agents, plan.feedback_tasks))  # 6.
            cores.give(plan.model)
            await steps.condition("poisoned_after_feedback")  # 7.
            learned, paired = sum(lr.episodes for lr in px.learners), sum(lr.paired for lr in px.learners)
            states = await fleet.close()
    return {"steps": steps, "poison": poison, "held": splits.held_out, "wall_s": round(time.perf_counter() - t0, 1),
            "episodes": {"learned": learned, "paired": paired,
                         "in_histories": episodes_in([r for rs in steps.learning.values() for r in rs])},
            **held_at_end(states, {b.node_id for b in byz})}


def held_at_end(states: list, byz_ids: set[str]) -> dict:
    """What the honest nodes held at the end: the poison hidden, each node's own lessons, the poison's ids."""
    return {"counted": hidden(states, byz_ids),
            "lessons": [{"node": i, "text": e.text, "confidence": round(e.confidence, 3)}
                        for i, s in enumerate(states) for e in s.experiences if e.provenance.node_id == s.node_id],
            "poison_ids": {e.id for s in states for e in s.experiences if e.provenance.node_id in byz_ids},
            "texts": {e.id: e.text for s in states for e in s.experiences}}


def example(held: list, runs: dict[str, list[RunRecord]], texts: dict[str, str]) -> dict | None:
    """One held-out task that failed its first try without lessons and passed it with the fleet's."""
    for task, none, fleet in zip(held, runs["none"], runs["fleet"]):
        if none.tries and not none.first_try and fleet.first_try and fleet.tries[0].lessons:
            return {"task": task.question, "fact": task.entry["fact"], "none": none.tries[0].code,
                    "none_said": none.tries[0].said, "fleet": fleet.tries[0].code,
                    "lessons": [texts.get(i, i) for i in fleet.tries[0].lessons]}
    return None


def _record(r: RunRecord) -> dict:
    """A run as the result file keeps it: each try's code, what the environment said, tokens and lessons."""
    return {"task": r.task_id, "agent": r.agent, "passed": [t.passed for t in r.tries],
            "code": [t.code for t in r.tries], "said": [t.said for t in r.tries],
            "tokens": [t.tokens for t in r.tries], "lessons": [list(t.lessons) for t in r.tries]}


def run(plan: AgentsPlan, out: str = "agents", log=print) -> Path:
    """The bench at ``plan``'s sizes: bench/results/<out>.json, one row for ``plan.framework``'s agents."""
    workdir = cache_dir() / "bench-agents" / out
    shutil.rmtree(workdir, ignore_errors=True)  # the nodes start empty
    workdir.mkdir(parents=True)
    got = asyncio.run(run_fleet(plan, workdir, log))
    control = np.array([fact_of(t).control for t in got["held"]], bool)
    steps: Steps = got["steps"]
    result = row(plan.framework, plan.model, plan.tries, steps.runs, control, got["poison_ids"])
    counted = got["counted"]
    if plan.practice_model:
        result["practice_model"] = plan.practised_by()
    result |= {"poison_rows_hidden": counted["poison_rows_hidden"], "honest_rows_hidden": counted["honest_rows_hidden"],
               "episodes_learned": got["episodes"]["learned"], "episodes_paired": got["episodes"]["paired"],
               "episodes_in_histories": got["episodes"]["in_histories"],
               "lessons_learned": len(got["lessons"]), "wall_s": got["wall_s"]}
    data = {"benchmark": "agents", "plan": asdict(plan), "rows": [result], "phases": steps.phases,
            "hidden": counted, "lessons": got["lessons"], "poison": got["poison"],
            "example": example(got["held"], steps.runs, got["texts"]),
            "runs": {c: [_record(r) for r in records] for c, records in (steps.runs | steps.learning).items()}}
    path = write_results(out, data)
    print(format_table([result], COLUMNS))
    return path


def write_combined(names: list[str], out: str = "agents", results_dir: Path = RESULTS_DIR) -> Path:
    """bench/results/OUT.json: the rows of the named runs' results, one per (framework, model)."""
    missing = [n for n in names if not (results_dir / f"{n}.json").is_file()]
    if missing:
        raise click.UsageError(f"--combine: no {', '.join(f'{n}.json' for n in missing)} in {results_dir}")
    if out in names:
        raise click.UsageError(f"--combine would overwrite {out}.json, one of its inputs: give another --out")
    try:
        data = combined({n: json.loads((results_dir / f"{n}.json").read_text()) for n in names})
    except ValueError as e:
        raise click.UsageError(f"--combine: {e}") from e
    print(format_table(data["rows"], COLUMNS))
    return write_results(out, data, results_dir)


@click.command()
@click.option("--agents", type=click.IntRange(2), default=AgentsPlan.agents, show_default=True,
              help="Honest agents, each with its own proxy and node.")
@click.option("--facts", type=click.IntRange(0), default=AgentsPlan.facts, show_default=True,
              help="Change facts in play (0: all 72), with a third as many controls.")
@click.option("--n-eval", type=click.IntRange(1), default=AgentsPlan.n_eval, show_default=True,
              help="Held-out change tasks at least (spread evenly over the facts).")
@click.option("--tries", type=click.IntRange(1), default=AgentsPlan.tries, show_default=True,
              help="Tries per task: each failed try's result goes back as the next user turn.")
@click.option("--practice-per-fact", type=click.IntRange(1), default=AgentsPlan.practice_per_fact, show_default=True,
              help="Practice instances per fact, for the agent the fact is dealt to.")
@click.option("--feedback-tasks", type=click.IntRange(0), default=AgentsPlan.feedback_tasks, show_default=True,
              help="Feedback tasks per agent after the poison (their outcomes inferred by the proxies).")
@click.option("--model", type=click.Choice(MODELS), default=AgentsPlan.model, show_default=True,
              help="The embedded model every agent runs (served once, as `dso llm serve`).")
@click.option("--practice-model", type=click.Choice(MODELS), default=None,
              help="The model the agents run while they learn (practice and feedback, served beside --model), where "
                   "it differs from the one measured on the held-out tasks: a fleet whose larger agents' repairs "
                   "teach the smaller ones. Default: --model.")
@click.option("--team", is_flag=True,
              help="With --practice-model: in the practice phase an agent on --model works through each node's tasks "
                   "beside the one on --practice-model, behind the same learner, so the smaller model's failures "
                   "pair with the larger one's code that ran for the same task. The row's practice_model names both.")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=AgentsPlan.framework, show_default=True,
              help="Whose agents: the bench's own loop, or smolagents' ToolCallingAgent with a run_python tool "
                   "(pip install 'dsonet[frameworks]').")
@click.option("--seed", type=int, default=0, show_default=True, help="Rotates which agent practises on which facts.")
@click.option("--out", default="agents", show_default=True, help="Results name: bench/results/OUT.json.")
@click.option("--combine", default=None, metavar="NAME,NAME",
              help="Run nothing: gather the rows of bench/results/NAME.json files (one per framework and model) "
                   "into OUT.json.")
def cli(agents, facts, n_eval, tries, practice_per_fact, feedback_tasks, model, practice_model, team, framework, seed,
        out, combine) -> None:
    """Agents that learn on the job: honest coding agents (write a line of Python, run it in the
    sandbox, read the result, retry) each through its own `dso proxy --learn` and node on a NATS
    cluster, and a Byzantine node publishing the drift poison. Per condition (no lessons, the agent's
    own, the fleet's, poisoned, poisoned after a feedback phase whose outcomes the proxies infer):
    first-try pass rate, solved within the tries, tries and tokens per solved task, with paired 95%
    intervals resampling tasks. Writes bench/results/OUT.json. The defaults are the full size (hours on
    2 cores); shrink with --facts, --n-eval, --tries, --agents. --framework smolagents runs smolagents'
    own agent in every phase instead of the bench's loop (its row's framework). A run writes one row;
    --combine gathers several runs' rows into one table.

    \b
    Examples:
      dso bench agents                                      the full size: 72 facts, 144 held-out tasks
      dso bench agents --facts 2 --n-eval 4 --tries 1 --practice-per-fact 1 --feedback-tasks 2 --out agents-smoke
      dso bench agents --framework smolagents --facts 2 --n-eval 4 --feedback-tasks 2 --out agents-smolagents
      dso bench agents --practice-model qwen2.5-coder-1.5b --facts 20 --n-eval 100 --out agents-mixed
      dso bench agents --practice-model qwen2.5-coder-1.5b --team --facts 20 --n-eval 100 --out agents-team
      dso bench agents --combine agents-paired,agents-smolagents-1.5b               both rows into agents.json
    """
    if combine:
        click.echo(f"wrote {write_combined(combine.split(','), out)}")
        return
    try:
        agent_type(framework)
    except ModuleNotFoundError as e:
        raise click.UsageError(str(e)) from e
    practice_model = "" if practice_model in (None, model) else practice_model
    if team and not practice_model:
        raise click.UsageError(f"--team needs a --practice-model other than --model ({model}): the team is one agent "
                               "on each")
    plan = replace(AgentsPlan(), agents=agents, facts=facts, n_eval=n_eval, tries=tries,
                   practice_per_fact=practice_per_fact, feedback_tasks=feedback_tasks, model=model,
                   practice_model=practice_model, team=team, framework=framework, seed=seed)
    log = lambda msg: click.echo(f"[{time.strftime('%H:%M:%S')}] {msg}")  # noqa: E731
    path = run(plan, out, log)
    click.echo(f"wrote {path}")
