import asyncio

import pytest

from dsonet.network.transport import MSG_ID, InProcessHub, Subject, TransportError, parse_subject, subject_for


def test_subject_per_domain_keeps_dotted_domains():
    assert subject_for("dso", "batch", "math.geometry") == "dso.batch.math.geometry"


def test_parse_subject_inverts_subject_for_and_refuses_anything_else():
    assert parse_subject(subject_for("dso", "tombstone", "math.geometry")) == Subject("dso", "tombstone", "math.geometry")
    assert parse_subject("dso.batch") is None and parse_subject("junk") is None


def test_a_hub_on_a_simulated_clock_stamps_messages_with_it():
    async def main():
        hub = InProcessHub(clock=lambda: 1_750_000_000.0)
        await hub.transport().publish(b"x", subject_for("dso", "batch", "math"))
        return hub.log[0].timestamp_ms

    assert asyncio.run(main()) == 1_750_000_000_000


def test_inprocess_readers_see_every_message_in_order_and_resume_where_they_stopped():
    async def main():
        hub = InProcessHub()
        a = hub.transport()
        got: list[int] = []

        async def handler(chunk):
            got.extend(m.seq for m in chunk)

        reader = hub.transport()
        await reader.subscribe("r", handler)
        for i in range(5):
            assert await a.publish(b"%d" % i, "dso.batch.general") == i + 1
        await asyncio.sleep(0.05)
        await reader.close()
        assert got == [1, 2, 3, 4, 5]
        for i in range(3):
            await a.publish(b"late", "dso.batch.general")
        again = hub.transport()
        await again.subscribe("r", handler)  # same durable: resumes after 5
        newcomer: list[int] = []

        async def fresh(chunk):
            newcomer.extend(m.seq for m in chunk)

        await again.subscribe("new", fresh)  # a new durable replays the history
        await asyncio.sleep(0.05)
        await again.close()
        return got, newcomer

    got, newcomer = asyncio.run(main())
    assert got == [1, 2, 3, 4, 5, 6, 7, 8]
    assert newcomer == list(range(1, 9))


def test_inprocess_failed_handler_gets_the_chunk_again():
    async def main():
        hub = InProcessHub()
        t = hub.transport()
        calls: list[list[int]] = []

        async def flaky(chunk):
            calls.append([m.seq for m in chunk])
            if len(calls) == 1:
                raise RuntimeError("disk full")

        await t.publish(b"x", "dso.batch.general")
        await t.subscribe("r", flaky)
        await asyncio.sleep(1.3)
        await t.close()
        return calls

    calls = asyncio.run(main())
    assert calls[:2] == [[1], [1]]


def test_inprocess_deduplicates_on_message_id_and_refuses_publish_after_close():
    async def main():
        hub = InProcessHub()
        t = hub.transport()
        first = await t.publish(b"a", "dso.batch.general", {MSG_ID: "h1"})
        again = await t.publish(b"a", "dso.batch.general", {MSG_ID: "h1"})
        await t.close()
        with pytest.raises(TransportError, match="closed"):
            await t.publish(b"b", "dso.batch.general")
        return first, again, len(hub.log)

    assert asyncio.run(main()) == (1, 1, 1)
