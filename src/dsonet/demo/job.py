"""The demo's last act: one agent's error becomes another agent's first-try pass, through `dso proxy`.

Nobody writes a lesson here and no reference answer is read. Two honest in-process nodes, each with
an agent of its own (`dsonet.bench.agent_loop`: write a line, run it in the sandbox, read what the
environment says, retry) talking to an embedded model served as `dso llm serve` serves it, each
through its own `dso proxy` (`dsonet.proxy.app.create_app`, the node's library as its memory):

1. agent B (the 0.5B) answers a task of the fact, its node empty: first try only;
2. agent A (the 1.5B) works on another instance of the same fact through a learning proxy
   (`--learn`): its failed line, the error line the sandbox gave back and its later line that ran
   are an episode, and the proxy files the lesson the error line spells out, on probation, in node A;
3. node A publishes (BitDelta, signed); node B reads it through DeltaSoup;
4. agent B answers its task again, and its proxy injects what node B now holds into the same prompt.

Agent A runs the 1.5B because a fleet learns from traffic only what one of its agents once fixed, and
the 0.5B seldom repairs its own errors (`dso bench agents`). The fact is scipy's ``simps``, which the
1.5B repairs on its first retry. Retries sample at the agent loop's temperature, seeded by the try,
so the act replays to the same lines on one machine; its answers are generated on every run (the
served models keep no answer cache).
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from dsonet.bench.agent_loop import Agent, RunRecord, locked
from dsonet.bench.proxy import Served
from dsonet.learn import drift
from dsonet.learn.cache import CachedRuns
from dsonet.learn.episodes import episodes
from dsonet.learn.llama_llm import embedded
from dsonet.learn.sandbox import Sandbox
from dsonet.proxy.learning import TrafficLearner
from dsonet.sim.scenario import running


@dataclass(frozen=True)
class JobConfig:
    fact: str = "scipy-simps"  # drift's fact id: integrate.simps is gone (SciPy 1.14); integrate.simpson is its name
    model: str = "qwen2.5-coder-0.5b"  # agent B's
    model_a: str = "qwen2.5-coder-1.5b"  # agent A's: the fleet learns from traffic only what an agent once fixed
    seed: int = 0  # which two instances of the fact A and B are given (`drift.instances`)
    tries: int = 3  # agent A's, as `dso bench agents` gives its agents
    max_tokens: int = 48
    threads: int | None = None  # llama.cpp threads; None: half the cores
    answers: Path | None = None  # the served models' sequences kept on disk (`CachedRuns`); None: always generate


@dataclass(frozen=True)
class Line:
    """One try: the code the agent wrote and what the environment said back."""

    code: str
    said: str
    passed: bool
    lessons: tuple[str, ...]  # the texts the proxy injected into the prompt that wrote it

    @property
    def outcome(self) -> str:
        """What running it showed: "passed", or the environment's line."""
        return "passed" if self.passed else self.said


@dataclass(frozen=True)
class JobAct:
    fact: str
    model_a: str  # agent A's, which practises through the learning proxy
    model_b: str  # agent B's, which the lesson reaches
    question_a: str
    question_b: str
    practice: tuple[Line, ...]  # agent A's tries
    episodes: int  # what A's learning proxy read off its traffic
    lessons: tuple[str, ...]  # what it filed in node A's library, on probation
    admitted: int  # of them, rows node B holds after reading node A's batch
    evidence: tuple[tuple[int, int], ...]  # (episodes, agents) each admitted row carries, as node A signed it
    before: Line  # agent B's first try, its node empty
    after: Line  # agent B's first try with its proxy injecting what node B holds
    seconds: float
    answers: dict[str, int]  # the served models' sequences: generated, and replayed from ``JobConfig.answers``

    @property
    def shown(self) -> bool:
        """The story held: B failed alone and passed with the lesson A's traffic gave."""
        return bool(self.lessons) and not self.before.passed and self.after.passed


def _lines(run: RunRecord, texts: dict[str, str]) -> tuple[Line, ...]:
    codes = [m["content"] for m in run.messages if m["role"] == "assistant"]
    return tuple(Line(drift.extract_code(code).strip() or code.strip(), t.said, t.passed,
                      tuple(texts.get(i, i) for i in t.lessons)) for code, t in zip(codes, run.tries))


async def run_job(config: JobConfig, sandbox: Sandbox, workdir: Path, echo=print) -> JobAct:
    """The act on two fresh in-process nodes under ``workdir`` (new or empty)."""
    from dsonet.proxy.app import create_app as proxy_app  # loads uvicorn
    from dsonet.serve import ServedModel, create_app as serve_app  # loads jinja2

    start = asyncio.get_running_loop().time()
    task_a, task_b = drift.instances(drift.FACTS_BY_ID[config.fact], 2, seed=config.seed)
    check = locked(lambda task, reply: drift.check(sandbox, task, reply))
    async with running(False, 2, workdir, config.model) as fleet:
        node_a, node_b = fleet.stores
        learner = TrafficLearner(node_a)
        with ExitStack() as stack:
            caches: list[CachedRuns] = []

            def agent(name: str, memory, tries: int, **kw) -> Agent:
                llm = embedded(name, config.threads, slots=2)
                served = ServedModel.of(llm, name)
                if config.answers is not None:  # a warm rerun replays them, as the demo's other acts do
                    caches.append(CachedRuns(served.run, llm.name, config.answers))
                    served = replace(served, run=caches[-1])
                model = stack.enter_context(Served(serve_app(served)))
                proxy = stack.enter_context(Served(proxy_app(memory, f"{model.url}/v1", **kw)))
                made = Agent(0, f"{proxy.url}/v1", name, check, tries, config.max_tokens)
                stack.callback(made.close)
                return made

            a, b = agent(config.model_a, node_a, config.tries, learner=learner), agent(config.model, node_b, 1)
            echo(f"  agent B, its node empty: {task_b.question.splitlines()[-1]}")
            before = await asyncio.to_thread(b.solve, task_b)
            echo(f"  agent A, through `dso proxy --learn`, up to {config.tries} tries at another instance")
            practice = await asyncio.to_thread(a.solve, task_a)
            lessons = tuple(e.text for e in node_a.all())
            echo(f"  node A publishes {len(lessons)} lesson(s) learned from A's traffic; node B reads them "
                 "through DeltaSoup")
            await fleet.publish()
            await fleet.settle()
            rows = node_b.all()
            held = [e for e in rows if e.text in lessons]
            texts = {e.id: e.text for e in rows}
            after = await asyncio.to_thread(b.solve, task_b)
    return JobAct(config.fact, config.model_a, config.model, task_a.question, task_b.question, _lines(practice, {}),
                  len({e.key for e in episodes(list(practice.messages))}), lessons, len(held),
                  tuple((e.provenance.episodes, e.provenance.agents) for e in held),
                  _lines(before, {})[0], _lines(after, texts)[0], round(asyncio.get_running_loop().time() - start, 1),
                  {"generated": sum(c.misses for c in caches), "from_cache": sum(c.hits for c in caches)})


def job_record(act: JobAct) -> dict:
    """The act as the HTML report shows a record: agent B's question and the lessons it was given first."""
    def said(line: Line) -> str:
        return f"{line.code}\n-> {line.outcome}"

    return {"question": act.question_b, "lessons": list(act.after.lessons),
            f"agent B ({act.model_b}), its node empty": said(act.before),
            f"agent A ({act.model_a}), another instance, through dso proxy --learn":
                "\n".join(said(line) for line in act.practice),
            "filed by A's proxy, on probation": "\n".join(act.lessons) or "nothing",
            "admitted by node B, with the evidence node A signed": f"{act.admitted} " + "".join(
                f"({e} episode(s), {a} agent(s))" for e, a in act.evidence),
            "agent B again, the lesson injected": said(act.after)}
