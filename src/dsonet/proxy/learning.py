"""`dso proxy --learn`: lessons and outcomes from the traffic itself, with nothing for the client to call.

Every request an agent sends holds its run so far. `TrafficLearner.observe` reads it:

- **episodes**: code that raised, its error line, and later code of the same run that ran
  (`dsonet.learn.episodes`). Each becomes the rule lesson its error line spells out beside the code
  that ran, added to the memory on probation (``PROBATION`` confidence, under a hand-written
  lesson's 0.5) with the domain ``code``; outcomes then keep or evict it, as for any lesson. A request
  resent with one more turn yields each episode once (``seen``); the same lesson reached by another
  episode, or by another agent whose code named its variables otherwise (`code_lessons.advice_key`:
  "np.cumprod(a)" and "np.cumprod(b)" advise one thing), counts as more evidence for it, not a second row.
- **evidence**: each episode that gives a lesson adds one to its ``episodes`` in the memory, and one to
  its ``agents`` where the agent is new to it (`Provenance`; `Store.add_evidence`): a node publishes the
  lesson again, so its peers and every search see how many episodes and agents gave it. An agent is the
  API key its requests carry (the ``Authorization`` header, as OpenAI clients send theirs; only its
  hash is kept): agents that share a key are one, and requests without one are the proxy's own, one
  agent. Agents are told apart since this proxy started: one seen again after a restart counts again.
- **pairs across runs** (with a `Pairing`, as `dso proxy --learn` makes one): a failure no run of its
  own fixed, beside another run's code that ran for the same kind of task (`dsonet.learn.pairing`),
  learned as an episode is; its ``fixed_task`` names the other run's task.
- **outcomes**: the proxy remembers which lessons it injected into the turn whose answer it forwarded
  (`answered`), keyed by the run so far and the answer's code. When a later request of the same run
  (its history begins with that turn's) carries that code with its result, each lesson gets a
  verdict: helped where the code ran and wrote what the lesson advises (`code_lessons.follows`);
  harmed where it failed with an error that refutes the lesson's advice (`code_lessons.refutes`); none
  otherwise (a failure the lesson did not advise says nothing of it, nor a success that ignored it).

An error line that names no fix (a wrong value, a name the code that ran does not replace) gives no
rule lesson. The code that ran for the same task is then read as a task's reference would be
(`episodes.lesson_from_code`: "When computing the lower triangle of M, use np.tril(M)."), as a pair of
runs of one kind is. Where that gives nothing either (the fix was written out by hand), the episode is
``unexplained``, and the proxy started with ``--reflect`` asks its upstream model to compare the two
attempts (`episodes.reflection`) and keeps the lesson of its reply (`reflected`), on probation as well.

An answer whose code never comes back with a result (the run's last) leaves its lessons without an
outcome. A streamed answer is read once its stream has ended (`proxy.app.chat_answer`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from dsonet.errors import DsoError
from dsonet.learn.code_lessons import advice_key, follows, refutes
from dsonet.learn.episodes import (DOMAIN, PROBATION, Episode, attempts, episodes, history_key, lesson,
                                   lesson_from_code, reflected, remember, task_of)
from dsonet.learn.pairing import Pairing
from dsonet.library import Hits
from dsonet.library.contract import Store
from dsonet.scope import Probe, Scope

REMEMBERED = 4096  # episode keys and answered turns kept (oldest forgotten first)
log = logging.getLogger(__name__)


@dataclass
class Learned:
    """What one request taught: new episodes, the lessons they gave, and the outcomes recorded."""

    episodes: list[Episode] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)  # ids of the lessons added or given more evidence
    outcomes: int = 0
    unexplained: list[Episode] = field(default_factory=list)  # error lines that name no fix: for a reflector


def _turn_key(history: list[dict], code: str) -> str:
    """One answer of one run: the same code written in another run or turn is another key."""
    return hashlib.sha256(f"{history_key(history)}\n{' '.join(code.split())}".encode()).hexdigest()


def _remember(table: OrderedDict, key: str, value) -> None:
    remember(table, key, value, REMEMBERED)


def agent_key(authorization: str) -> str:
    """An agent as evidence counts it: a hash of the API key its requests carry, never the key itself."""
    return hashlib.sha256(authorization.encode()).hexdigest()


class TrafficLearner:
    def __init__(self, memory: Store, domain: str = DOMAIN, confidence: float = PROBATION,
                 environment: Probe | None = None, pairing: Pairing | None = None):
        """``environment``: what the agents run (`dso proxy --python/--scope`): each lesson is scoped to
        its Python and the distributions the lesson and its episode's code name there (`Probe.lesson_scope`).
        ``pairing``: a run's failures are also paired with other runs' code that ran for near tasks
        (`dsonet.learn.pairing`)."""
        self.memory, self.domain, self.confidence = memory, domain, confidence
        self.environment, self.pairing = environment, pairing
        self._lock = threading.RLock()  # the proxy reads requests on several threads at once; its tables are shared
        self.seen: OrderedDict[str, None] = OrderedDict()
        self._agents: OrderedDict[str, set[str]] = OrderedDict()  # lesson id -> the agents that gave it (`agent_key`)
        self._advised: OrderedDict[str, str] = OrderedDict()  # advice_key -> the id of the lesson that says it
        self._answered: OrderedDict[str, tuple[str, dict[str, str]]] = OrderedDict()  # code -> (retrieval, {id: text})

    def answered(self, history: list[dict], hits: Hits | None, answer: list[dict]) -> None:
        """The upstream's ``answer`` (assistant messages) to ``history`` (as the client sent it), which
        got ``hits``: its code is watched for in the run's later requests."""
        if hits is None or hits.retrieval_id is None or not len(hits):
            return
        lessons = {h.experience.id: h.experience.text for h in hits}
        with self._lock:
            for a in attempts(answer):
                _remember(self._answered, _turn_key(history, a.code), (hits.retrieval_id, lessons))

    def observe(self, messages: list[dict], agent: str = "") -> Learned:
        """Read one request's history, sent by ``agent`` (its Authorization header; '' none): learn its new
        episodes and record the outcomes it shows."""
        with self._lock:
            return self._observe(messages, agent_key(agent))

    def _observe(self, messages: list[dict], agent: str) -> Learned:
        out = Learned()
        tried = attempts(messages)
        for a in tried:
            pending = self._answered.pop(_turn_key(messages[:a.turn], a.code), None) if a.result is not None else None
            if pending is not None:
                out.outcomes += self._outcome(*pending, a.code, a.error)
        found = [(e, lesson(e) or lesson_from_code(e)) for e in episodes(messages)]
        if self.pairing is not None:
            done = [(a.code, a.error) for a in tried if a.result is not None]  # error: None where it ran
            found += self.pairing.add(task_of(messages), [(c, e) for c, e in done if e], [c for c, e in done if not e])
        for episode, text in found:
            if episode.key in self.seen:
                continue
            _remember(self.seen, episode.key, None)
            out.episodes.append(episode)
            if text is None:
                out.unexplained.append(episode)
            elif (said := self._store(text, episode, agent)) is not None:
                out.lessons.append(said)
        return out

    def reflected(self, episode: Episode, reply: str, agent: str = "") -> str | None:
        """A reflector's ``reply`` about an ``unexplained`` episode (`episodes.reflection` its prompt) that
        ``agent`` sent: its lesson on probation, as a rule lesson would be; the lesson's id, or None where
        the reply holds none that restates nothing of the episode's task."""
        text = reflected(episode, reply)
        if text is None:
            return None
        with self._lock:
            return self._store(text, episode, agent_key(agent))

    def _store(self, text: str, episode: Episode, agent: str) -> str | None:
        """The id of the lesson saying ``text`` (added, or one giving the same advice), scoped by the lesson
        and ``episode``'s code where the agents' environment is known; ``episode`` and its ``agent`` count
        as its evidence."""
        key = advice_key(text)
        said = self._advised.get(key)
        if said is None:
            scope = Scope() if self.environment is None else \
                self.environment.lesson_scope(text, episode.failed, episode.fixed)
            try:
                said = self.memory.add(text, self.domain, self.confidence, scope=scope).id
            except DsoError as exc:  # refused by the memory (a node that is down, a lesson it rejects): go on
                log.warning("a lesson learned from traffic was not stored: %s", exc)
                return None
        _remember(self._advised, key, said)
        agents = self._agents.get(said, set())
        try:
            counted = self.memory.add_evidence(said, 1, int(agent not in agents))
        except DsoError as exc:  # a node that is down, say: the lesson stands, this episode goes uncounted
            log.warning("an episode of lesson %s was not counted: %s", said[:12], exc)
            return said
        if counted is not None:  # None: the memory holds no copy of its own (deleted or evicted since)
            _remember(self._agents, said, agents | {agent})
        return said

    def _outcome(self, retrieval_id: str, lessons: dict[str, str], code: str, error: str | None) -> int:
        verdicts = {i: True for i, text in lessons.items() if follows(code, text)} if error is None else \
            {i: False for i, text in lessons.items() if refutes(error, code, text)}
        if not verdicts:
            return 0
        try:
            return self.memory.outcome(retrieval_id, lessons=verdicts)
        except DsoError as exc:  # forgotten by the memory, or already recorded by the client itself
            log.info("an inferred outcome was not recorded: %s", exc)
            return 0
