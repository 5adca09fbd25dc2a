"""A node says at info level what travels: one line per batch it publishes, one per batch it
ingests (how many rows were admitted, new, held already, rejected), so an operator sees batches move."""

import asyncio
import logging
import sys
from pathlib import Path

from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import HashEncoder  # noqa: E402

TEXTS = ["When a rate and a time are given, multiply them for the distance.",
         "When denominators differ, rewrite both fractions over their least common multiple."]


def test_a_batch_published_and_ingested_is_one_info_line_on_each_side(tmp_path, caplog):
    async def main():
        hub = InProcessHub()
        a, b = [await Node.open(NodeConfig(tmp_path / n, rule="mean"), hub.transport(), encoder=HashEncoder())
                for n in "ab"]
        for node in (a, b):
            await node.start()
        for text in TEXTS:
            await a.submit(text, domain="math")
        await a.flush()
        for _ in range(100):
            if len(b.library) == 2:
                break
            await asyncio.sleep(0.05)
        held = len(b.library)
        for node in (a, b):
            await node.close()
        return a, held

    with caplog.at_level(logging.INFO, logger="dsonet.network"):
        a, held = asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("dsonet.network.")]
    published = [x for x in lines if x.startswith("published batch")]
    ingested = [x for x in lines if x.startswith("ingested batch")]
    assert held == 2 and len(published) == 1 and len(ingested) == 1
    assert published[0].endswith(" bytes") and ": 2 experiences of math," in published[0]
    assert f"from {a.node_id[:12]}: 2 of 2 admitted (2 new, 0 held already), 0 rejected" in ingested[0]
