import msgpack
import numpy as np
import pytest

from dsonet.codec import decode as _decode
from dsonet.codec import default_profile, make_batch
from dsonet.errors import BatchError
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.sim.attacks import ATTACKS, SimNode, View
from dsonet.sim.texts import garbage_texts, harmful_texts

NOW = 1_750_000_000_000
DIM = 32
PROFILE = default_profile(DIM, "test-encoder")


def decode(payload):
    return _decode(payload, [PROFILE])


@pytest.fixture
def view():
    """Synthetic vectors: the subject here is what each attack sends, not the embeddings."""
    rng = np.random.default_rng(0)
    honest = 1.0 + rng.standard_normal((40, DIM)).astype(np.float32)
    honest /= np.linalg.norm(honest, axis=1, keepdims=True)
    profile = PROFILE
    ident = NodeIdentity.from_seed(b"honest")
    exps = [Experience(f"When honest {i}, do {i}.", "math.gsm8k") for i in range(10)]
    payload = make_batch(exps, honest[:10], profile, ident, timestamp_ms=NOW).to_msgpack()
    garbage = garbage_texts()
    return View(honest, [payload], [(ident.node_id, ident.public_key)], honest[:5], harmful_texts(), garbage,
                rng.standard_normal((len(garbage), DIM)).astype(np.float32), profile, NOW, rng)


@pytest.fixture
def node():
    return SimNode(NodeIdentity.from_seed(b"byz"), "byz", [NodeIdentity.from_seed(f"s{i}".encode()) for i in range(5)])


@pytest.mark.parametrize("name", ["random_signs", "scaled_noise", "sign_flip", "alie", "hijack", "quality_inflation", "sybil"])
def test_data_attacks_send_genuinely_signed_batches(name, view, node):
    payloads = ATTACKS[name]().payloads(node, view, 8)
    assert payloads
    for p in payloads:
        batch = decode(p)
        assert len(batch) >= 8 and batch.timestamp_ms == NOW


def test_random_signs_are_far_and_sign_flip_mirrors_honest_deltas(view, node):
    far = decode(ATTACKS["random_signs"]().payloads(node, view, 8)[0]).vectors()
    mu = view.honest_vectors.mean(axis=0)
    honest = decode(view.honest_payloads[0]).vectors()  # what any receiver decodes from honest codes
    assert np.linalg.norm(far - mu, axis=1).min() > 1.3 * np.linalg.norm(honest - mu, axis=1).max()
    flipped = decode(ATTACKS["sign_flip"]().payloads(node, view, 8)[0]).vectors()
    mirrored, deltas = mu - flipped, view.honest_vectors - mu  # a flipped row's mirror is an honest delta
    cos = (mirrored @ deltas.T) / np.outer(np.linalg.norm(mirrored, axis=1), np.linalg.norm(deltas, axis=1))
    assert cos.max(axis=1).min() > 0.5  # through a unit-length, 1-bit code: the direction survives, not all of it


def test_quality_inflation_claims_099_and_sybils_use_fresh_identities(view, node):
    assert {e.confidence for e in decode(ATTACKS["quality_inflation"]().payloads(node, view, 8)[0]).experiences} == {0.99}
    ids = {decode(p).node_id for p in ATTACKS["sybil"]().payloads(node, view, 8)}
    assert len(ids) == 5 and node.node_id not in ids


def test_forged_and_tampered_payloads_fail_verification(view, node):
    with pytest.raises(BatchError, match="signature"):
        decode(ATTACKS["forgery"]().payloads(node, view, 8)[0])
    with pytest.raises(BatchError, match="signature"):  # the signed content changed
        decode(ATTACKS["tampering"]().payloads(node, view, 8)[0])


def test_replay_resends_honest_bytes_and_withholding_sends_nothing(view, node):
    assert ATTACKS["replay"]().payloads(node, view, 8) == view.honest_payloads
    assert ATTACKS["withholding"]().payloads(node, view, 8) == []


def test_forgery_claims_the_victims_identity(view, node):
    content, _ = msgpack.unpackb(ATTACKS["forgery"]().payloads(node, view, 8)[0], raw=False)
    assert msgpack.unpackb(content, raw=False)["key"] == view.honest_ids[0][1]
