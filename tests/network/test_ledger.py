"""The node's ledger (deferred batches, outbox, seen hashes) lives in the library file beside the
rows, in tables a file written before the ledger moved to the network layer already holds."""

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from dsonet.codec import default_profile, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.network.ledger import Ledger
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub

DIM = 16
# Written by the library as of commit 070b1ed, when its schema held these tables (see the docstring
# of `dsonet.network.ledger`): one own row, one peer batch stored (its hash seen), two payloads
# deferred, one tombstone in the outbox.
BEFORE = Path(__file__).parent / "data" / "library-before-ledger.sqlite"
BEFORE_BATCH = "b51af27174a9e5a9de12f3f0c3612537a964d9a25fba0414c715dd1f9c0b3814"
BEFORE_PEER = "baa3215983f01317acbb7d4b7912f297be70f847199fd9c29127bc6c54ac4330"


def _profile():
    return default_profile(DIM, "none")


def test_deferred_payloads_are_counted_and_weighed_without_reading_them_and_read_in_pages(tmp_path):
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        ledger = Ledger(lib.db)
        assert ledger.count_deferred() == 0 == ledger.deferred_bytes()
        ledger.defer(b"one", 1, "a")
        ledger.defer(b"two!", 2, "b", share="new")
        ledger.defer(b"one", 3, "a")  # the same payload again: held once
        ledger.defer(b"three", 4, "a")
        assert ledger.count_deferred() == 3 and ledger.deferred_bytes() == 12
        assert (ledger.deferred_bytes("a"), ledger.deferred_bytes("new"), ledger.deferred_bytes("b")) == (8, 4, 0)
        assert ledger.deferred_signers() == ["a", "b"]
        first = ledger.deferred("a", limit=1)
        assert [p for _, _, p, _ in first] == [b"one"]
        assert [p for _, _, p, _ in ledger.deferred("a", after=first[0][0], limit=1)] == [b"three"]
        assert ledger.drop_deferred("a") == 2 and ledger.deferred_signers() == ["b"]


def test_the_outbox_keeps_messages_in_order_until_each_is_sent(tmp_path):
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        ledger = Ledger(lib.db)
        first, second = ledger.queue_outgoing("s.1", b"first"), ledger.queue_outgoing("s.2", b"second")
        assert ledger.queue_outgoing("s.1", b"first") == first  # queued once
        assert [(s, p) for _, s, p in ledger.outgoing()] == [("s.1", b"first"), ("s.2", b"second")]
        ledger.sent(first)
        assert [d for d, _, _ in ledger.outgoing()] == [second]


def test_a_library_alone_writes_no_ledger_tables(tmp_path):
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        names = {n for (n,) in lib.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not names & {"deferred", "outbox", "seen", "sampled"}


def test_rows_stored_on_a_samples_word_are_marked_in_their_rows_transaction_or_not_at_all(tmp_path):
    key = NodeIdentity.from_seed(b"ledger-sampled")
    x = np.random.default_rng(0).standard_normal((3, DIM)).astype(np.float32)
    exps = [Experience(f"When ledger case {i} comes, do {i}.", "math") for i in range(3)]
    batch = make_batch(exps, x / np.linalg.norm(x, axis=1, keepdims=True), _profile(), key)
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        ledger = Ledger(lib.db)
        record = ledger.seen_by(batch, [exps[1].id, exps[2].id])

        def failing() -> None:  # the rows' transaction fails after the ledger wrote: nothing stays
            record()
            raise OSError("disk full")

        with pytest.raises(OSError):
            lib.ingest(batch, within=failing)
        assert (len(lib), ledger.seen(0), ledger.sampled(key.node_id)) == (0, {}, [])
        lib.ingest(batch, within=record)
        assert len(lib) == 3 and batch.hash in ledger.seen(0)
        assert sorted(ledger.sampled(key.node_id)) == sorted([exps[1].id, exps[2].id])
        assert ledger.forget_sampled(key.node_id) == 2 and ledger.sampled(key.node_id) == []


def test_a_file_written_before_the_ledger_moved_keeps_its_queue_outbox_and_hashes(tmp_path):
    path = tmp_path / "library.sqlite"
    shutil.copy(BEFORE, path)
    with Library(path, encoder=None, profile=_profile()) as lib:
        ledger = Ledger(lib.db)
        assert len(lib) == 2
        assert ledger.seen(0) == {BEFORE_BATCH: 1_750_000_000_000}
        assert ledger.deferred_signers() == [BEFORE_PEER, ""]
        assert ledger.deferred_bytes("(new keys)") == len(b"held payload two")
        assert [p for _, _, p, _ in ledger.deferred(BEFORE_PEER)] == [b"held payload one"]
        assert [(s, p) for _, s, p in ledger.outgoing()] == [("dso.tombstone.math", b"a signed tombstone")]


def test_a_node_opens_a_file_written_before_the_ledger_moved_and_sends_its_outbox(tmp_path):
    shutil.copy(BEFORE, tmp_path / "library.sqlite")

    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, batch_interval_s=3600), hub.transport())
        held = await node.all()
        await node.flush()  # the outbox's tombstone first, then the own row, never published, as a batch
        await node.close()
        return held, [(m.subject.split(".")[1], m.data) for m in hub.log]

    held, sent = asyncio.run(main())
    assert len(held) == 2
    assert sent[0] == ("tombstone", b"a signed tombstone") and [kind for kind, _ in sent] == ["tombstone", "batch"]

