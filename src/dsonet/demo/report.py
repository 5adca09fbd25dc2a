"""The demo's report: typed records built from what the run counted, printed by `format_report`
and written as JSON by `DemoReport.to_dict`. Every number in it is counted in the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from dsonet.codec import Profile, bytes_per_vector, decode
from dsonet.demo.adversary import Sent
from dsonet.demo.agents import Answers, Learned
from dsonet.sim.nodes import NodeState, is_batch
from dsonet.learn.evaluate import paired_bootstrap, wilson
from dsonet.network.transport import SENDER, Message

CONDITIONS = {  # name -> what the held-out prompts carried
    "without": "without lessons",
    "own": "the node's own lessons",
    "fleet": "the fleet's lessons",
    "poisoned": "fleet + poison",
}


@dataclass(frozen=True)
class Condition:
    name: str  # a key of CONDITIONS
    accuracy: float
    wilson95: tuple[float, float]
    minus_without: float  # paired: same tasks, prompts and seeds
    minus_without_ci95: tuple[float, float]  # paired bootstrap over tasks
    coverage: float  # share of held-out prompts that received lessons
    from_attackers: float  # share of held-out prompts that received a Byzantine node's lesson
    parse_failures: int  # replies that stated no answer of the task's kind


@dataclass(frozen=True)
class Learning:
    rollouts: int
    mean_reward: float
    groups: int
    mixed_groups: int
    proposals: int
    skipped: int  # LLM outputs that were not a usable lesson or operation
    gated_out: int  # candidates that lowered accuracy on the validation slice, refused
    kept: int  # lessons added or rewritten, all nodes together
    tokens: int


@dataclass(frozen=True)
class Lesson:
    node: str
    text: str


@dataclass(frozen=True)
class Injected:
    source: str  # the node whose lesson it is
    score: float
    text: str


@dataclass(frozen=True)
class Example:
    condition: str
    node: str  # the node that answered
    question: str
    lessons: list[Injected]
    chat: list[dict]  # the messages the LLM was sent
    response: str
    correct: bool


@dataclass(frozen=True)
class NodeRow:
    name: str
    node_id: str
    role: str  # "honest" or the attacks it ran
    produced: int  # lessons it kept (honest) or experiences it sent (Byzantine)
    published_bytes: int
    admitted_elsewhere: float  # mean, over the honest nodes other than itself, of its experiences they hold
    batches_rejected: int  # its batches refused at verification by the honest nodes, summed
    mean_reward: float | None


@dataclass(frozen=True)
class AttackRow:
    name: str
    experiences_sent: int
    held_by_honest_libraries: int  # summed over the honest nodes


@dataclass(frozen=True)
class Wire:
    honest_batches: int
    honest_bytes: int
    bytes_per_experience: float  # msgpack on the wire: text, code, signature and framing
    code_bytes_per_experience: int  # the BitDelta code alone
    profile: dict


@dataclass(frozen=True)
class Fidelity:
    """cos(e, ê): the encoding of each published text against what every receiver decodes."""

    n: int
    cosine_mean: float | None
    cosine_min: float | None


@dataclass
class DemoReport:
    config: dict
    fleet: str  # "in-process" or "nats"
    n_eval: int
    conditions: list[Condition]
    learning: Learning
    lessons: list[Lesson]  # a few of the lessons learned
    example: Example | None  # one held-out prompt with the lessons injected into it
    nodes: list[NodeRow]
    attacks: list[AttackRow]
    wire: Wire
    fidelity: Fidelity
    seconds: dict[str, float]

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- building the records


def conditions(answers: dict[str, Answers], attackers: set[str]) -> list[Condition]:
    """One row per condition; differences are paired with the condition without lessons."""
    base = answers["without"].correct
    out = []
    for name, a in answers.items():
        from_attackers = [any(h.experience.provenance.node_id in attackers for h in hits) for hits in a.lessons]
        out.append(Condition(
            name, _r(a.correct.mean()), _r2(wilson(float(a.correct.sum()), len(a.correct))),
            _r(a.correct.mean() - base.mean()), _r2(paired_bootstrap(a.correct, base)),
            _r(np.mean([bool(hits) for hits in a.lessons])), _r(np.mean(from_attackers)), int((~a.parsed).sum())))
    return out


def learning(learned: Learned) -> Learning:
    rewards = [r for n in learned.nodes for r in n.rewards]
    return Learning(len(rewards), _r(np.mean(rewards)) if rewards else 0.0, sum(n.groups for n in learned.nodes),
                    sum(n.mixed_groups for n in learned.nodes), sum(n.proposals for n in learned.nodes),
                    sum(n.skipped for n in learned.nodes), sum(n.gated_out for n in learned.nodes),
                    sum(len(n.kept) for n in learned.nodes), learned.tokens)


def lessons(learned: Learned, names: list[str], count: int = 5) -> list[Lesson]:
    """Up to ``count`` lessons: every node's first before any node's second."""
    ranked = sorted((i, node) for node, n in enumerate(learned.nodes) for i in range(len(n.kept)))
    return [Lesson(names[node], learned.nodes[node].kept[i]) for i, node in ranked[:count]]


def example(answers: dict[str, Answers], held_out, names: dict[str, str], honest: list[str]) -> Example | None:
    """The first held-out prompt that carried lessons, in the most shared condition that gave any."""
    for condition in ("poisoned", "fleet", "own"):
        a = answers.get(condition)
        for i, hits in enumerate(a.lessons if a else []):
            if hits:
                task = held_out.tasks[i]
                injected = [Injected(names.get(h.experience.provenance.node_id, "unknown"), round(h.score, 3),
                                     h.experience.text) for h in hits]
                return Example(condition, names[honest[i % len(honest)]], task.question, injected, a.chats[i],
                               a.responses[i], bool(a.correct[i]))
    return None


def node_rows(names: dict[str, str], learned: Learned, final: list[NodeState], wire: list[Message],
              sent: list[Sent]) -> list[NodeRow]:
    holders = {s.node_id: Counter(e.provenance.node_id for e in s.experiences) for s in final}
    rejected = Counter()
    for state in final:
        rejected.update({p["node_id"]: int(p["rejected"]) for p in state.peers})
    sent_bytes = Counter()
    for m in wire:
        sent_bytes[m.headers.get(SENDER, "")] += len(m.data)

    def admitted_elsewhere(node_id: str) -> float:
        others = [held[node_id] for holder, held in holders.items() if holder != node_id]
        return round(float(np.mean(others)), 2) if others else 0.0

    rows = []
    for state, n in zip(final, learned.nodes):
        rows.append(NodeRow(names[state.node_id], state.node_id, "honest", len(n.kept), sent_bytes[state.node_id],
                            admitted_elsewhere(state.node_id), rejected[state.node_id],
                            _r(np.mean(n.rewards)) if n.rewards else None))
    for node_id in dict.fromkeys(s.node_id for s in sent):
        mine = [s for s in sent if s.node_id == node_id]
        rows.append(NodeRow(names[node_id], node_id, "+".join(sorted({s.attack for s in mine})),
                            sum(s.experiences for s in mine), sum(s.size for s in mine), admitted_elsewhere(node_id),
                            rejected[node_id], None))
    return rows


def attack_rows(sent: list[Sent], final: list[NodeState]) -> list[AttackRow]:
    """Per attack: experiences sent, and how many of them the honest libraries hold. An attacker's
    experience is one whose provenance names a Byzantine node or that a forger signed as
    "attacker" under an honest node's id; it counts when its text is one the attack sent."""
    attackers = {s.node_id for s in sent}
    held = [e for s in final for e in s.experiences
            if e.provenance.node_id in attackers or e.provenance.model == "attacker"]
    rows = []
    for name in dict.fromkeys(s.attack for s in sent):
        texts = frozenset().union(*(s.texts for s in sent if s.attack == name))
        rows.append(AttackRow(name, sum(s.experiences for s in sent if s.attack == name),
                              sum(1 for e in held if e.text in texts)))
    return rows


def wire_and_fidelity(wire: list[Message], honest: set[str], profile: Profile, encoder) -> tuple[Wire, Fidelity]:
    """What the honest nodes' batches cost on the wire, and how faithfully their codes decode."""
    batches = [m for m in wire if m.headers.get(SENDER) in honest and is_batch(m)]
    cos = []
    for m in batches:
        batch = decode(m.data, [profile])
        sent = batch.vectors()  # (m, d) what every receiver decodes
        ours = encoder.encode([e.text for e in batch.experiences], kind="document")  # (m, d)
        cos.append(np.einsum("ij,ij->i", sent, ours) / np.linalg.norm(sent, axis=1) / np.linalg.norm(ours, axis=1))
    cos = np.concatenate(cos) if cos else np.zeros(0)
    size = sum(len(m.data) for m in batches)
    wire_row = Wire(len(batches), size, round(size / max(cos.size, 1), 1),
                    bytes_per_vector(profile.dim, profile.group_size), profile.to_dict())
    fidelity = Fidelity(int(cos.size), _r(cos.mean()) if cos.size else None, _r(cos.min()) if cos.size else None)
    return wire_row, fidelity


def _r(x) -> float:
    return round(float(x), 4)


def _r2(pair) -> tuple[float, float]:
    return _r(pair[0]), _r(pair[1])


# ---------------------------------------------------------------------------- printing


def format_report(report: DemoReport) -> str:
    from dsonet.bench.report import format_table

    lines = ["", f"== Fleet ({report.fleet}) =="]
    lines.append(format_table([asdict(n) | {"node_id": n.node_id[:12]} for n in report.nodes],
                              ["name", "node_id", "role", "produced", "published_bytes", "admitted_elsewhere",
                               "batches_rejected", "mean_reward"]))
    ln = report.learning
    lines += ["", f"== Learning == {ln.rollouts} rollouts, mean reward {ln.mean_reward:.2f}, {ln.mixed_groups}/"
              f"{ln.groups} groups with mixed rewards, {ln.proposals} proposals, {ln.skipped} malformed LLM outputs "
              f"skipped, {ln.gated_out} refused by the validation gate, {ln.kept} lessons kept, {ln.tokens:,} tokens"]
    lines += [f"  {lesson.node}: {lesson.text}" for lesson in report.lessons]
    w = report.wire
    lines += ["", f"== Wire == {w.honest_batches} honest batches, {w.honest_bytes:,} bytes: {w.bytes_per_experience:.0f} "
              f"B per experience on the wire (msgpack: text, code, signature and framing); the code itself is "
              f"{w.code_bytes_per_experience} B at d = {w.profile['dim']}. The baseline is the profile's, named by "
              "its key and never sent (protocol v2)."]
    f = report.fidelity
    if f.n:
        lines.append(f"== Compression fidelity == cos(e, ê) over {f.n} published experiences: "
                     f"mean {f.cosine_mean:.3f}, min {f.cosine_min:.3f}")
    lines += ["", "== Attacks == experiences sent -> held by honest libraries (summed over nodes)"]
    for a in report.attacks:
        note = ("   well-formed by design: wrong lessons, honestly encoded and signed; what they do to accuracy "
                "is below") if a.name == "poison" else ""
        lines.append(f"  {a.name:<14} {a.experiences_sent:>4} -> {a.held_by_honest_libraries}{note}")
    if report.example is not None:
        ex = report.example
        lines += ["", f"== One held-out prompt, {CONDITIONS[ex.condition]}, answered by {ex.node} =="]
        lines += [f"  {i.score:+.3f} [{i.source}] {i.text}" for i in ex.lessons]
        for message in ex.chat:
            lines += [f"  {message['role']}:"] + [f"    | {line}" for line in message["content"].splitlines()]
        lines += [f"  answer ({'right' if ex.correct else 'wrong'}): {ex.response[:200]!r}"]
    lines += ["", f"== Held-out accuracy == {report.n_eval} tasks, greedy, the same prompts in every condition but "
              "for the lessons; task i is answered by honest node i mod H"]
    lines.append(format_table([_condition_row(c) for c in report.conditions],
                              ["condition", "accuracy", "Wilson 95%", "minus without", "paired 95% CI", "coverage",
                               "attacker lessons", "parse failures"]))
    lines += ["  coverage: share of prompts that received lessons; attacker lessons: share that received one from "
              "a Byzantine node; parse failures: replies that stated no answer.",
              "  paper (federated §9): isolated 18.2%, fleet 23.7%, at f = N/3 22.0% — a different task and model.",
              "", "Seconds: " + ", ".join(f"{k} {v}" for k, v in report.seconds.items())]
    return "\n".join(lines)


def _condition_row(c: Condition) -> dict:
    first = c.name == "without"
    return {"condition": CONDITIONS[c.name], "accuracy": _pct(c.accuracy), "Wilson 95%": _span(c.wilson95),
            "minus without": "" if first else f"{100 * c.minus_without:+.1f} pts",
            "paired 95% CI": "" if first else _span(c.minus_without_ci95, "+"), "coverage": _pct(c.coverage),
            "attacker lessons": _pct(c.from_attackers), "parse failures": c.parse_failures}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _span(pair: tuple[float, float], sign: str = "") -> str:
    return f"[{100 * pair[0]:{sign}.1f}, {100 * pair[1]:{sign}.1f}]"
