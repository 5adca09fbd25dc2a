"""Outcomes per scope on a node: harm where a lesson was never meant to hold moves no signer, harm
inside its scope still convicts (issue 36)."""

import asyncio

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub
from dsonet.scope import Scope

TEXT = "When integrating samples, call the trapezoid rule of numpy with y then x"
NEW, OLD = Scope.parse(["numpy==2.4.6"]), Scope.parse(["numpy==1.26.4"])
HERE = Scope.parse(["numpy==1.26.0", "python==3.11.9"])


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(16)
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_harm_counts_against_the_signer_whose_scope_held_and_never_the_other():
    honest, liar = NodeIdentity.from_seed(b"scope-honest"), NodeIdentity.from_seed(b"scope-liar")

    async def main(tmp_path):
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=16, rule="mean"), InProcessHub().transport())
        # the same words, signed in two environments: one cluster of two lessons
        for key, scope in ((honest, NEW), (liar, OLD)):
            exp = Experience(TEXT, "code.numpy", 0.7, scope=scope)
            await node._locked(node.library.ingest, make_batch([exp], _vec(1)[None, :], node.profile, key))
        lib = node.library
        jobs = lib.merge_jobs()  # the merge a node defers to its own step, run now
        lib.install_merged(jobs, lib.build_merged(jobs))
        rep = node.soup.reputation
        before = rep.get(honest.node_id)
        shown = []
        for _ in range(5):  # five harmful outcomes in and for the 1.26 environment: the sign test's 1/32
            hits = await node.recall(vector=_vec(1), min_similarity=0.5, environment=HERE)
            shown.append((hits[0].experience.scope, len(hits[0].members)))
            await node.outcome(hits.retrieval_id, helped=False)
        after = await node.recall(vector=_vec(1), min_similarity=0.5, environment=HERE)
        counted = node.library.outcomes_by_environment(Experience(TEXT, "code.numpy", scope=OLD).id)
        result = before, rep.get(honest.node_id), rep.skipped(honest.node_id), rep.skipped(liar.node_id), shown, \
            after, counted, rep.outcomes(honest.node_id)
        await node.close()
        return result

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        before, now, honest_skipped, liar_skipped, shown, after, counted, honest_outcomes = asyncio.run(main(Path(d)))
    assert shown == [(OLD, 2)] * 5  # the member that holds here was shown, the other never
    assert (now, honest_skipped, honest_outcomes) == (before, False, (0, 0))
    assert liar_skipped  # wrong inside the scope it claims: convicted as before
    assert list(after) == [] and len(after.held_back) == 1  # the honest lesson held back here, not hidden
    assert counted == {"numpy==1.26": (5, 0)}


def test_an_outcome_told_where_a_lesson_was_used_excuses_its_signer_only_outside_its_scope(tmp_path):
    peer = NodeIdentity.from_seed(b"scope-peer")

    async def main():
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=16, rule="mean"), InProcessHub().transport())
        exp = Experience(TEXT, "code.numpy", 0.7, scope=NEW)
        await node._locked(node.library.ingest, make_batch([exp], _vec(2)[None, :], node.profile, peer))
        rep, moved = node.soup.reputation, []
        for told in (HERE, Scope.parse(["numpy==2.4.1"]), None):  # outside its scope, inside, not told
            before = rep.get(peer.node_id)
            hits = await node.recall(vector=_vec(2), min_similarity=0.5)  # searched without an environment
            await node.outcome(hits.retrieval_id, helped=False, environment=told)
            moved.append(rep.get(peer.node_id) < before)
        counted = node.library.outcomes_by_environment(exp.id)
        await node.close()
        return moved, counted

    moved, counted = asyncio.run(main())
    assert moved == [False, True, True]
    assert counted == {"": (1, 0), "numpy==1.26": (1, 0), "numpy==2.4": (1, 0)}
