"""The agents of `dso bench agents`, each behind its own `dso proxy` in front of its own node.

Per honest node two proxies (`dsonet.proxy.app.create_app`, each on a port of its own, the node's
HTTP API as its memory): a learning one (`--learn`: its `TrafficLearner` reads every request and
answer for episodes and outcomes) for the practice and feedback phases, and a plain one for the
held-out conditions, so that held-out tasks never teach the fleet what it is then scored on. Both
forward to the one served model (`dsonet.serve`, what `dso llm serve` runs). The agent behind each
proxy is the bench's own loop (`agent_loop.Agent`, framework ``loop``) or a real framework's
(`agent_smolagents.SmolAgent`, ``smolagents``), the same in every phase.

`work` runs a phase: every agent through its own list of tasks, the agents at once, one
progress bar over all of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

from tqdm import tqdm

from dsonet.bench.agent_loop import Agent, RunRecord, Solver
from dsonet.bench.proxy import Served
from dsonet.learn.drift import Check
from dsonet.encoders.minilm_numpy import numpy_minilm
from dsonet.learn.episodes import episodes
from dsonet.learn.pairing import Pairing
from dsonet.learn.tasks import Task
from dsonet.network.client import NodeClient
from dsonet.proxy.learning import Learned, TrafficLearner


class CountingLearner(TrafficLearner):
    """The proxy's own learner, as `dso proxy --learn` makes it (its runs paired), counting what it read:
    requests, new episodes inside one run and paired across runs, lessons, inferred outcomes."""

    def __init__(self, memory):
        super().__init__(memory, pairing=Pairing(numpy_minilm().encode))
        self.requests = self.episodes = self.paired = self.outcomes = 0
        self.lessons: list[str] = []

    def observe(self, messages: list[dict], agent: str = "") -> Learned:
        learned = super().observe(messages, agent)
        paired = sum(bool(e.fixed_task) for e in learned.episodes)
        self.requests += 1
        self.episodes += len(learned.episodes) - paired
        self.paired += paired
        self.outcomes += learned.outcomes
        self.lessons += learned.lessons
        return learned

    def counts(self) -> dict:
        return {"requests": self.requests, "episodes": self.episodes, "paired": self.paired,
                "lessons": len(self.lessons), "outcomes": self.outcomes}


@dataclass
class Proxies:
    learning: list[Solver] = field(default_factory=list)  # through a `--learn` proxy (practice, feedback)
    team: list[Solver] = field(default_factory=list)  # on the held-out model, behind the same learner (practice)
    plain: list[Solver] = field(default_factory=list)  # through a proxy that only injects (held-out)
    learners: list[CountingLearner] = field(default_factory=list)


FRAMEWORKS = ("loop", "smolagents")
INSTALL_SMOLAGENTS = "pip install 'dsonet[frameworks]' (or: pip install smolagents==1.22.0)"


def agent_type(framework: str) -> type:
    """The agent class of ``framework``; a ModuleNotFoundError naming the install command where it is missing."""
    if framework == "loop":
        return Agent
    if framework != "smolagents":
        raise ValueError(f"unknown framework {framework!r}: one of {', '.join(FRAMEWORKS)}")
    try:
        from dsonet.bench.agent_smolagents import SmolAgent
    except ModuleNotFoundError as e:
        if e.name != "smolagents":
            raise
        raise ModuleNotFoundError(f"--framework smolagents needs smolagents: {INSTALL_SMOLAGENTS}",
                                  name=e.name) from e
    return SmolAgent


def open_proxies(stack: ExitStack, node_urls: list[str], upstreams: dict[str, str], model: str, learning_model: str,
                 check: Callable[[Task, str], Check], tries: int, max_tokens: int, retry_temperature: float,
                 make: type = Agent, team: bool = False) -> Proxies:
    """Two proxies per node, started on ``stack`` (closed with it), and an agent of class ``make`` behind each
    (`agent_type`): the learning proxy's agent runs ``learning_model``, the plain one's ``model``, each
    forwarded to its server (``upstreams``: model -> base URL). With ``team``, a third, learning with the
    same learner as the first, whose agent runs ``model``."""
    from dsonet.proxy.app import create_app  # loads uvicorn

    out = Proxies()
    for i, url in enumerate(node_urls):
        memory = NodeClient(url)  # the node's HTTP API is the proxy's memory, as `dso proxy --node` opens it
        stack.callback(memory.close)
        learner = CountingLearner(memory)
        proxies = [(create_app(memory, upstreams[learning_model], learner=learner), out.learning, learning_model),
                   (create_app(memory, upstreams[model]), out.plain, model)]
        if team:
            proxies.append((create_app(memory, upstreams[model], learner=learner), out.team, model))
        for app, agents, name in proxies:
            served = stack.enter_context(Served(app))
            agent = make(i, f"{served.url}/v1", name, check, tries, max_tokens, retry_temperature)
            stack.callback(agent.close)
            agents.append(agent)
        out.learners.append(learner)
    return out


def work(agents: list[Solver], jobs: list[list[Task]], label: str) -> list[list[RunRecord]]:
    """Agent k solves ``jobs[k]`` in order, every agent at once; their records, per agent."""
    with tqdm(total=sum(map(len, jobs)), desc=label, unit="task") as bar, ThreadPoolExecutor(len(agents)) as pool:
        def solve_all(agent: Solver, tasks: list[Task]) -> list[RunRecord]:
            out = []
            for task in tasks:
                out.append(agent.solve(task))
                bar.update(1)
            return out
        return list(pool.map(solve_all, agents, jobs))


def held_out(agents: list[Solver], tasks: list[Task], label: str) -> list[RunRecord]:
    """Task i solved by agent i mod len(agents) (the same in every condition); records in the tasks' order."""
    n = len(agents)
    per_agent = work(agents, [tasks[k::n] for k in range(n)], label)
    out: list[RunRecord | None] = [None] * len(tasks)
    for k, records in enumerate(per_agent):
        for j, record in enumerate(records):
            out[k + j * n] = record
    return out  # type: ignore[return-value]


def episodes_in(records: list[RunRecord]) -> int:
    """The distinct episodes in the runs' final histories, per agent (each proxy learns its own agent's):
    how many the learners should have learned, each once however often its history was resent."""
    return len({(r.agent, e.key) for r in records for e in episodes(list(r.messages))})
