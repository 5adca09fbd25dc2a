"""The demo's report: typed records built from what the run counted, printed by `dsonet.demo.text.format_report`
and written as JSON by `DemoReport.to_dict`. Every number in it is counted in the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from dsonet.aggregate import DeltaSoupConfig
from dsonet.codec import Profile, bytes_per_vector, decode
from dsonet.demo.job import JobAct
from dsonet.learn.drift import extract_code
from dsonet.learn.evaluate import Run
from dsonet.network.transport import SENDER, Message
from dsonet.sim.adversary import Sent
from dsonet.sim.attacks import SimNode
from dsonet.sim.nodes import NodeState, is_batch
from dsonet.sim.report import Condition, hidden, measure

CONDITIONS = {  # name -> what the held-out prompts carried
    "without": "without lessons",
    "own": "the node's own lessons",
    "fleet": "the fleet's lessons",
    "poisoned": "fleet + poison",
    "after_feedback": "fleet + poison, after feedback",
}


@dataclass(frozen=True)
class Learning:
    rollouts: int
    mean_reward: float  # share of the practice attempts that passed
    groups: int
    mixed_groups: int
    proposals: int
    skipped: int  # LLM outputs that were not a usable lesson or operation
    gated_out: int  # candidates that fixed no validation task, refused
    kept: int  # lessons in the honest libraries after learning, all nodes together
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
    """A held-out task that failed without lessons and passed with the fleet's."""

    node: str  # the node whose agent answered
    fact: str
    question: str
    without: str  # the reply without lessons
    without_error: str  # what running it showed
    lessons: list[Injected]  # what the fleet's library gave the same prompt
    fleet: str  # the reply with them, which passed
    from_peer: bool  # a lesson another node learned was among them


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
class PoisonRow:
    id: str  # p1, p2... in the order of the wire
    signer: str
    text: str


@dataclass(frozen=True)
class Signer:
    """One Byzantine signer as one honest node sees it at the end."""

    name: str
    rows: list[str]  # ids of its poison rows the node holds
    reputation: float  # the node's DeltaSoup reputation of the signer (starts at 0.5)
    helped: int  # outcomes its agent reported on tasks where the signer's lessons were given: passed
    harmful: int  # ... failed
    dropped: bool  # skipped (under the floor, or convicted by outcomes): its rows are hidden from the node's searches
    convicted_after: int | None = None  # feedback tasks after which the node's outcomes convicted it (None: never)


@dataclass(frozen=True)
class NodePoison:
    node: str
    held: int  # poison rows in its library
    dropped: list[str]  # ids of the ones hidden
    signers: list[Signer]


@dataclass(frozen=True)
class Poison:
    floor: float  # DeltaSoup's reputation floor
    rows: list[PoisonRow]
    nodes: list[NodePoison]
    poison_rows_hidden: float  # the least share over the honest nodes
    honest_rows_hidden: float  # the most share of honest peers' rows hidden over the honest nodes


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
    conditions: list[Condition]
    controls: dict  # held-out tasks whose API did not change: n, accuracy without and with the fleet's lessons
    ran: dict[str, dict[str, int]]  # per full condition, what running each held-out reply showed (`ran`)
    learning: Learning
    lessons: list[Lesson]  # every lesson the honest nodes kept
    example: Example | None
    nodes: list[NodeRow]
    attacks: list[AttackRow]
    poison: Poison
    feedback: dict  # tasks per node, share passed per node, outcomes reported per node
    wire: Wire
    fidelity: Fidelity
    seconds: dict[str, float]
    job: JobAct | None = None  # the last act: an agent's error, learned from its traffic, another's first-try pass

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- building the records


def conditions(runs: dict[str, Run], half: list[int], control: list[bool], attackers: set[str]) -> list[Condition]:
    """One row per condition on its change-fact tasks (every held-out task, or the ``half`` rows),
    paired with the condition without lessons on the same tasks."""
    change = ~np.asarray(control, bool)
    out = []
    for name, run in runs.items():
        rows = np.arange(change.size) if len(run.correct) == change.size else np.asarray(half)
        mask = change[rows]
        hits = [h for h, m in zip(run.hits, mask) if m]
        from_attackers = [any(h.experience.provenance.node_id in attackers for h in hs) for hs in hits]
        out.append(measure(name, run.correct[mask], runs["without"].correct[rows][mask], run.injected[mask],
                           from_attackers, sum(not extract_code(t) for t, m in zip(run.texts, mask) if m)))
    return out


def controls(runs: dict[str, Run], control: list[bool]) -> dict:
    """Tasks on APIs that did not change: lessons should not break them."""
    mask = np.asarray(control, bool)
    return {"n": int(mask.sum()), **{name: _r(runs[name].correct[mask].mean()) if mask.any() else None
                                     for name in ("without", "fleet")}}


def ran(held, runs: dict[str, Run]) -> dict[str, dict[str, int]]:
    """What running the replies in the sandbox showed, without lessons and with the fleet's: passed,
    the exception's name, a wrong value, or no code."""
    def kind(feedback: str) -> str:
        if feedback == "r is correct":
            return "passed"
        if feedback.startswith("r = "):
            return "wrong value"
        if feedback.startswith("no Python code"):
            return "no code"
        return feedback.split(":")[0].split()[0] if feedback.strip() else "error"

    return {name: dict(Counter(kind(held.explain(t, text)) for t, text in zip(held.tasks, runs[name].texts))
                       .most_common()) for name in ("without", "fleet")}


def learning(learned: list[dict]) -> Learning:
    rollouts = sum(n["rollouts"] for n in learned)
    reward = sum(n["mean_reward"] * n["rollouts"] for n in learned) / rollouts if rollouts else 0.0
    return Learning(rollouts, _r(reward), sum(n["groups"] for n in learned), sum(n["mixed_groups"] for n in learned),
                    sum(n["proposals"] for n in learned), sum(n["skipped"] for n in learned),
                    sum(n["gated_out"] for n in learned), sum(len(n["lessons"]) for n in learned),
                    sum(n["tokens"] for n in learned))


def lessons(learned: list[dict], names: list[str]) -> list[Lesson]:
    return [Lesson(names[n["node"]], text) for n in learned for text in n["lessons"]]


def example(held, runs: dict[str, Run], honest: list[str], names: dict[str, str]) -> Example | None:
    """The first held-out task that failed without lessons and passed with the fleet's, preferring
    one where a lesson another node learned was in the prompt."""
    found = []
    for i, task in enumerate(held.tasks):
        hits = runs["fleet"].hits[i]
        if runs["without"].correct[i] < 1 and runs["fleet"].correct[i] >= 1 and hits:
            peer = any(h.experience.provenance.node_id != honest[i % len(honest)] for h in hits)
            found.append((not peer, i, peer))
    if not found:
        return None
    _, i, peer = min(found)
    task, without = held.tasks[i], runs["without"].texts[i]
    lessons = [Injected(names.get(h.experience.provenance.node_id, "unknown"), round(h.score, 3), h.experience.text)
               for h in runs["fleet"].hits[i]]
    return Example(names[honest[i % len(honest)]], task.entry["fact"], task.question, without,
                   held.explain(task, without), lessons, runs["fleet"].texts[i], peer)


def node_rows(names: dict[str, str], learned: list[dict], final: list[NodeState], wire: list[Message],
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

    rows = [NodeRow(names[state.node_id], state.node_id, "honest", len(n["lessons"]), sent_bytes[state.node_id],
                    admitted_elsewhere(state.node_id), rejected[state.node_id], n["mean_reward"])
            for state, n in zip(final, learned)]
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


def poison_rows(final: list[NodeState], byz: list[SimNode], names: dict[str, str], feedback: dict,
                sent: list[Sent], floor: float = DeltaSoupConfig().rep_floor) -> Poison:
    """Which poison rows each honest node holds and hides, and why: the node skips their signer, its
    reputation moved by the outcomes its agent reported (`Scenario.feedback`'s ``by_signer``: per node,
    signer -> [helped, harmed]) under the floor, or those outcomes harmful beyond chance
    (`Reputation.convicted`; ``convicted_after``: after how many feedback tasks)."""
    rows = [PoisonRow(f"p{j + 1}", names[s.node_id], text) for j, (s, text) in
            enumerate((s, t) for s in sent if s.attack == "poison" for t in sorted(s.texts))]
    row_id = {(r.signer, r.text): r.id for r in rows}
    nodes = []
    convicted_after = feedback.get("convicted_after") or [{} for _ in final]
    for state, counts, convicted in zip(final, feedback["by_signer"], convicted_after):
        rep = {p["node_id"]: p["reputation"] for p in state.peers}
        skipped = {p["node_id"] for p in state.peers if p["skipped"]}
        signers = []
        for b in byz:
            mine = sorted({row_id[b.name, e.text] for e in state.experiences
                           if e.provenance.node_id == b.node_id and (b.name, e.text) in row_id}, key=_row_order)
            reputation = rep.get(b.node_id, DeltaSoupConfig().rep_initial)
            helped, harmed = counts.get(b.node_id, (0, 0))
            signers.append(Signer(b.name, mine, round(reputation, 4), helped, harmed, b.node_id in skipped,
                                  convicted.get(b.node_id)))
        nodes.append(NodePoison(names[state.node_id], sum(len(s.rows) for s in signers),
                                sorted((r for s in signers if s.dropped for r in s.rows), key=_row_order), signers))
    summary = hidden(final, {b.node_id for b in byz})
    return Poison(floor, rows, nodes, summary["poison_rows_hidden"], summary["honest_rows_hidden"])


def _row_order(row: str) -> int:
    return int(row[1:])


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
