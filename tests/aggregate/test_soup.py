import msgpack
import numpy as np
import pytest

from dsonet.aggregate import AggregationError, DeltaSoup, DeltaSoupConfig
from dsonet.errors import BatchError

from agg_helpers import NOW, PROFILE


def soup_for(config=DeltaSoupConfig(), profiles=None, **kw):
    """A DeltaSoup that reads the test profile (or ``profiles``)."""
    return DeltaSoup(config, profiles or [PROFILE], **kw)


def test_submit_then_round_admits_honest_batches_and_reports_shapes(batch_of, cloud):
    soup = soup_for(DeltaSoupConfig(seed=0))
    for i in range(5):
        soup.submit(batch_of(f"n{i}", cloud(20, seed=i)).to_msgpack(), now_ms=NOW)
    result = soup.round(now_ms=NOW)
    assert len(result.batches) == 5 and [len(k) for k in result.keep] == [20] * 5
    assert result.stats["admitted"] == 100 and result.stats["admitted"] == sum(int(k.sum()) for k in result.keep)
    assert soup.round(now_ms=NOW).stats["batches"] == 0  # the queue was consumed


def test_tampered_payload_is_refused_by_its_signature(batch_of, cloud):
    content, signature = msgpack.unpackb(batch_of("a", cloud(4, 0)).to_msgpack(), raw=False)
    doc = msgpack.unpackb(content, raw=False)
    doc["rows"][0][2] = 0.99  # a raised confidence
    with pytest.raises(BatchError, match="signature"):
        soup_for().submit(msgpack.packb([msgpack.packb(doc), signature]), now_ms=NOW)


def test_forged_signature_is_refused(batch_of, cloud):
    victim, forger = batch_of("victim", cloud(4, 0)), batch_of("forger", cloud(4, 1))
    with pytest.raises(BatchError, match="signature"):
        soup_for().submit(msgpack.packb([victim.content, forger.signature]), now_ms=NOW)


def test_replay_is_refused_and_not_queued(batch_of, cloud):
    soup = soup_for()
    payload = batch_of("a", cloud(4, 0)).to_msgpack()
    soup.submit(payload, now_ms=NOW)
    with pytest.raises(AggregationError, match="already received"):
        soup.submit(payload, now_ms=NOW + 1000)
    assert soup.round(now_ms=NOW).stats["batches"] == 1


@pytest.mark.parametrize("skew_s", [-301, 301])
def test_stale_or_future_batches_are_refused(batch_of, cloud, skew_s):
    with pytest.raises(AggregationError, match="timestamp"):
        soup_for().submit(batch_of("a", cloud(4, 0), ts=NOW + skew_s * 1000).to_msgpack(), now_ms=NOW)


def test_rate_limit_counts_per_node_within_the_window(batch_of, cloud):
    soup = soup_for(DeltaSoupConfig(rate_limit=2))
    for i in range(2):
        soup.submit(batch_of("a", cloud(3, i), ts=NOW + i).to_msgpack(), now_ms=NOW)
    with pytest.raises(AggregationError, match="limit is 2"):
        soup.submit(batch_of("a", cloud(3, 9), ts=NOW + 9).to_msgpack(), now_ms=NOW)
    soup.submit(batch_of("b", cloud(3, 9)).to_msgpack(), now_ms=NOW)  # another node is unaffected
    soup.settle(soup.round(now_ms=NOW).batches)  # stored: they count in the window from when they came
    later = NOW + 3_600_001
    soup.submit(batch_of("a", cloud(3, 10), ts=later).to_msgpack(), now_ms=later)


def test_a_released_round_may_come_again_but_a_settled_one_is_a_replay(batch_of, cloud):
    soup = soup_for()
    payload = batch_of("a", cloud(3, 0)).to_msgpack()
    soup.submit(payload, now_ms=NOW)
    soup.release(soup.round(now_ms=NOW).batches)  # the receiver's disk was full: nothing stored
    soup.submit(payload, now_ms=NOW)  # the redelivery is admitted
    soup.settle(soup.round(now_ms=NOW).batches)
    with pytest.raises(AggregationError, match="replays"):
        soup.submit(payload, now_ms=NOW)


def test_batch_size_limit(batch_of, cloud):
    with pytest.raises(AggregationError, match="at most 3 per batch"):
        soup_for(DeltaSoupConfig(max_batch_experiences=3)).submit(batch_of("a", cloud(4, 0)).to_msgpack(), now_ms=NOW)
    with pytest.raises(BatchError, match="over the limit"):
        soup_for(DeltaSoupConfig(max_batch_bytes=100)).submit(batch_of("a", cloud(4, 0)).to_msgpack(), now_ms=NOW)


def test_low_reputation_nodes_are_skipped_and_outcomes_move_reputation(batch_of, cloud):
    soup = soup_for()
    node = batch_of("bad", cloud(2, 0)).node_id
    for _ in range(5):
        soup.record_outcome(node, helped=False)
    assert soup.reputation.get(node) == pytest.approx(0.5 * 0.9**5)
    with pytest.raises(AggregationError, match=r"floor 0.3\).*under the floor or convicted"):
        soup.submit(batch_of("bad", cloud(2, 0)).to_msgpack(), now_ms=NOW)
    off = soup_for(DeltaSoupConfig(feedback=False))
    off.record_outcome(node, helped=False)
    assert off.reputation.get(node) == 0.5


def test_the_papers_random_attacker_is_refused_at_verification_and_unit_random_signs_are_filtered(batch_of, cloud):
    import hashlib

    from dsonet.identity import NodeIdentity

    rng = np.random.default_rng(5)
    loud = msgpack.unpackb(batch_of("loud", cloud(30, seed=0)).content)
    for row in loud["rows"]:  # the paper's attacker: scales 100× an honest one, signed with its own key
        code = np.frombuffer(row[-1], np.uint8).copy()
        code[-4:] = np.array([100 * np.frombuffer(code[-4:].tobytes(), "<f4")[0]], "<f4").view(np.uint8)
        row[-1] = code.tobytes()
    content, me = msgpack.packb(loud), NodeIdentity.from_seed(b"loud")
    with pytest.raises(BatchError, match="over"):  # no unit vector has such a code against the profile
        soup_for().submit(msgpack.packb([content, me.sign(hashlib.sha256(content).hexdigest().encode())]), now_ms=NOW)

    soup = soup_for(DeltaSoupConfig(seed=0), rule="median")
    for i in range(7):
        soup.submit(batch_of(f"h{i}", cloud(30, seed=i)).to_msgpack(), now_ms=NOW)
    attackers = []
    for i in range(3):
        b = batch_of(f"x{i}", rng.choice([-1.0, 1.0], size=(30, 64)).astype(np.float32) / 8.0)  # unit, random signs
        attackers.append(b.node_id)
        soup.submit(b.to_msgpack(), now_ms=NOW)
    result = soup.round(now_ms=NOW)
    by_node = {b.node_id: k for b, k in zip(result.batches, result.keep)}
    assert np.mean([by_node[a].mean() for a in attackers]) < 0.1
    assert np.mean([by_node[b.node_id].mean() for b in result.batches if b.node_id not in attackers]) > 0.9
    honest_rep = soup.reputation.get(result.batches[0].node_id)
    assert all(soup.reputation.get(a) < honest_rep for a in attackers)
    assert {r for _, _, r in result.rejected} >= {"filter: median"}


class _Encoder:
    """A fixed text -> vector table standing in for the profile's encoder (the subject here is
    DeltaSoup's re-encoding check, not an encoder)."""

    id = "test-encoder"
    dim = 64

    def __init__(self, table):
        self.table = table

    def encode(self, texts, kind="document"):
        return np.stack([self.table[t] for t in texts])


def test_reencode_check_rejects_a_batch_whose_vectors_do_not_encode_its_texts(batch_of, cloud):
    honest_vecs, liar_vecs = cloud(10, seed=1), cloud(10, seed=2)
    honest_texts = [f"When honest case {i} appears, do step {i}." for i in range(10)]
    liar_texts = [f"When liar case {i} appears, do step {i}." for i in range(10)]
    table = dict(zip(honest_texts, honest_vecs)) | dict(zip(liar_texts, cloud(10, seed=3)))
    soup = soup_for(DeltaSoupConfig(seed=0, reencode_per_batch=2), encoder=_Encoder(table))
    soup.submit(batch_of("honest", honest_vecs, honest_texts).to_msgpack(), now_ms=NOW)
    soup.submit(batch_of("liar", liar_vecs, liar_texts).to_msgpack(), now_ms=NOW)
    result = soup.round(now_ms=NOW)
    keep = {b.node_id: k for b, k in zip(result.batches, result.keep)}
    liar = batch_of("liar", liar_vecs, liar_texts).node_id
    assert not keep[liar].any() and keep[result.batches[0].node_id if result.batches[0].node_id != liar
                                          else result.batches[1].node_id].all()
    assert result.stats["rejected_by"]["reencode: vector does not encode its text"] == 10
    assert soup_for(DeltaSoupConfig()).round().stats["batches"] == 0


def test_one_lying_row_among_honest_ones_is_caught_when_the_sender_is_not_yet_trusted(batch_of, cloud):
    texts = [f"When case {i} appears, do step {i}." for i in range(20)]
    vecs = cloud(20, seed=1)
    table = dict(zip(texts, vecs))
    sent = vecs.copy()
    sent[7] = cloud(1, seed=8)[0]  # row 7 carries another text's vector
    checked = []
    for reputation in (0.5, 0.95):  # a new key, then a trusted one
        soup = soup_for(DeltaSoupConfig(seed=0, reencode_per_batch=2), encoder=_Encoder(table))
        sender = batch_of("mixed", sent, texts)
        soup.reputation.restore({sender.node_id: (reputation, 0, 0)})
        soup.submit(sender.to_msgpack(), now_ms=NOW)
        result = soup.round(now_ms=NOW)
        checked.append(not result.keep[0].any())
    assert checked[0]  # every row of an untrusted sender is re-encoded: the lie is found
    assert result.stats["defences"]["reencode"] == "on: every row under reputation 0.7, 10% (at least 2) per batch above"


def test_reference_rows_keep_an_honest_minority_that_the_round_alone_would_drop(batch_of, cloud):
    honest = cloud(200, seed=0)
    far = cloud(60, seed=9) - 3.0  # 60 rows of a far cloud outnumber the 20 honest ones
    far /= np.linalg.norm(far, axis=1, keepdims=True)  # unit vectors, as codes of a profile must be
    kept = []
    for reference in (None, honest[80:]):
        soup = soup_for(DeltaSoupConfig(seed=0), rule="median")
        soup.submit(batch_of("h", honest[:20]).to_msgpack(), now_ms=NOW)
        soup.submit(batch_of("x", far).to_msgpack(), now_ms=NOW)
        result = soup.round(now_ms=NOW, reference=reference)
        kept.append(result.keep[[b.node_id for b in result.batches].index(batch_of("h", honest[:20]).node_id)].mean())
    assert kept[0] < 0.5 and kept[1] == 1.0


def test_a_round_of_one_unrotated_batch_keeps_it_with_the_scale_floor_and_loses_it_without(cloud):
    from dsonet.codec.batch import Profile, make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    plain = Profile(64, 64, "test-encoder", rotation_seed=None)  # unrotated: every coordinate two-valued
    exps = [Experience(f"When alone {i}, do {i}.", "math.test") for i in range(40)]
    payload = make_batch(exps, cloud(40, seed=4), plain, NodeIdentity.from_seed(b"alone"), timestamp_ms=NOW).to_msgpack()
    ours, paper = soup_for(DeltaSoupConfig(seed=0), [plain]), soup_for(DeltaSoupConfig.paper(seed=0), [plain])
    ours.submit(payload, now_ms=NOW)
    paper.submit(payload, now_ms=NOW)
    assert ours.round(now_ms=NOW).keep[0].all()
    assert paper.round(now_ms=NOW).keep[0].mean() < 0.5  # the paper's σ = MAD collapses on two-valued coordinates


def test_a_round_takes_one_profile(batch_of, cloud):
    from dsonet.codec import default_profile, make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    wide = default_profile(128, "test-encoder")
    soup = soup_for(profiles=[PROFILE, wide])
    soup.submit(batch_of("a", cloud(3, 0)).to_msgpack(), now_ms=NOW)
    other = make_batch([Experience("When wide, do wide things.", "math.test")], cloud(1, 1, dim=128), wide,
                       NodeIdentity.from_seed(b"b"), timestamp_ms=NOW)
    with pytest.raises(AggregationError, match="one DeltaSoup per profile"):
        soup.submit(other.to_msgpack(), now_ms=NOW)


def test_keys_not_yet_trusted_have_a_smaller_rate_and_a_bounded_number_per_window(batch_of, cloud):
    soup = soup_for(DeltaSoupConfig(rate_limit=100, new_key_rate_limit=2, new_keys_per_window=3))
    for i in range(2):
        soup.submit(batch_of("new", cloud(2, i), ts=NOW + i).to_msgpack(), now_ms=NOW)
    with pytest.raises(AggregationError, match="limit is 2 until its reputation reaches 0.7"):
        soup.submit(batch_of("new", cloud(2, 5), ts=NOW + 5).to_msgpack(), now_ms=NOW)
    soup.submit(batch_of("b", cloud(2, 6)).to_msgpack(), now_ms=NOW)
    soup.submit(batch_of("c", cloud(2, 7)).to_msgpack(), now_ms=NOW)
    with pytest.raises(AggregationError, match="3 keys not yet trusted"):  # a fourth fresh key in the window
        soup.submit(batch_of("sybil", cloud(2, 8)).to_msgpack(), now_ms=NOW)
    trusted = batch_of("old", cloud(2, 9))
    soup.reputation.restore({trusted.node_id: (0.9, 0, 0)})
    soup.submit(trusted.to_msgpack(), now_ms=NOW)  # a trusted key is not a newcomer
