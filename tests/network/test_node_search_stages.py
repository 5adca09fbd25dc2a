"""A node's text search is the library's: the same second stage, the same scores and threshold
as `Library.search`; a search by vector stays one stage."""

import asyncio

import numpy as np
import pytest

import dsonet.library.library as library_module
from dsonet.encoders.rescore import BackboneRescorer
from dsonet.library import Library
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub

WORDS = ("docker", "cache", "slow", "build", "git", "branch", "commit", "rename")
LESSONS = ["When a docker build is slow, cache the dependency layer.", "When a commit is on the wrong git branch, move it."]


class Bag:
    """A backbone whose vector of a text is its bag of known words."""
    id = "bag"
    dim = len(WORDS)

    def encode(self, texts, kind="document"):
        v = np.array([[t.lower().count(w) for w in WORDS] for t in texts], np.float32) + 1e-3
        return v / np.linalg.norm(v, axis=1, keepdims=True)


class Head:
    """An encoder over ``Bag``, as the Zen head is over MiniLM."""
    id = "head:bag"
    dim = len(WORDS)
    backbone = Bag()

    def encode(self, texts, kind="document"):
        return self.backbone.encode(texts, kind)


@pytest.fixture(autouse=True)
def stage_calibrated(monkeypatch):
    monkeypatch.setattr(library_module, "calibrated", lambda space_id: space_id == "rescore:bag:when-mean")


def test_a_nodes_text_search_scores_as_the_library_does(tmp_path):
    query = "my docker build is slow every time"

    async def main():
        node = await Node.open(NodeConfig(tmp_path / "node", encoder=None, dim=Head.dim), InProcessHub().transport(),
                               encoder=Head())
        for text in LESSONS:
            await node.submit(text, domain=text.split()[2])
        found = await node.search(query)
        by_vector = await node.search(vector=Head().encode([query])[0])
        await node.close()
        return found, by_vector

    found, by_vector = asyncio.run(main())
    expected = BackboneRescorer(Bag()).score(query, LESSONS[:1])[0]
    assert [h.experience.text for h in found] == LESSONS[:1] and found[0].score == pytest.approx(expected)
    assert found.threshold == 0.6  # the stage's (an uncalibrated id: the protocol's), not the space's
    lib = Library(tmp_path / "lib.sqlite", encoder=Head())
    for text in LESSONS:
        lib.add(text, domain=text.split()[2])
    assert [(h.experience.text, round(h.score, 5)) for h in lib.search(query)] == \
        [(h.experience.text, round(h.score, 5)) for h in found]
    assert by_vector[0].score != pytest.approx(expected)  # a vector alone: the first stage's cosine
