import msgpack
import numpy as np
import pytest

from dsonet.codec import decode as _decode
from dsonet.codec import default_profile, make_batch
from dsonet.errors import BatchError
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.sim.adversary import byzantine_nodes, classic_plan
from dsonet.sim.attacks import SimNode, View, attack, names
from dsonet.sim.node_attacks import NodeView
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


def sent(name: str, view: View, node: SimNode) -> list[bytes]:
    """What the fleet attack ``name`` publishes from ``node`` when honest batches hold 8 experiences."""
    return attack(name).plan(view.at(node, 8)).hostile


@pytest.fixture
def node():
    return SimNode(NodeIdentity.from_seed(b"byz"), "byz", [NodeIdentity.from_seed(f"s{i}".encode()) for i in range(5)])


@pytest.mark.parametrize("name", ["random_signs", "scaled_noise", "sign_flip", "alie", "hijack", "quality_inflation", "sybil"])
def test_data_attacks_send_genuinely_signed_batches(name, view, node):
    payloads = sent(name, view, node)
    assert payloads
    for p in payloads:
        batch = decode(p)
        assert len(batch) >= 8 and batch.timestamp_ms == NOW


def test_random_signs_are_far_and_sign_flip_mirrors_honest_deltas(view, node):
    far = decode(sent("random_signs", view, node)[0]).vectors()
    mu = view.honest_vectors.mean(axis=0)
    honest = decode(view.honest_payloads[0]).vectors()  # what any receiver decodes from honest codes
    assert np.linalg.norm(far - mu, axis=1).min() > 1.3 * np.linalg.norm(honest - mu, axis=1).max()
    flipped = decode(sent("sign_flip", view, node)[0]).vectors()
    mirrored, deltas = mu - flipped, view.honest_vectors - mu  # a flipped row's mirror is an honest delta
    cos = (mirrored @ deltas.T) / np.outer(np.linalg.norm(mirrored, axis=1), np.linalg.norm(deltas, axis=1))
    assert cos.max(axis=1).min() > 0.5  # through a unit-length, 1-bit code: the direction survives, not all of it


def test_quality_inflation_claims_099_and_sybils_use_fresh_identities(view, node):
    assert {e.confidence for e in decode(sent("quality_inflation", view, node)[0]).experiences} == {0.99}
    ids = {decode(p).node_id for p in sent("sybil", view, node)}
    assert len(ids) == 5 and node.node_id not in ids


def test_forged_and_tampered_payloads_fail_verification(view, node):
    with pytest.raises(BatchError, match="signature"):
        decode(sent("forgery", view, node)[0])
    with pytest.raises(BatchError, match="signature"):  # the signed content changed
        decode(sent("tampering", view, node)[0])


def test_replay_resends_honest_bytes_and_withholding_sends_nothing(view, node):
    assert sent("replay", view, node) == view.honest_payloads
    assert sent("withholding", view, node) == []


def test_forgery_claims_the_victims_identity(view, node):
    content, _ = msgpack.unpackb(sent("forgery", view, node)[0], raw=False)
    assert msgpack.unpackb(content, raw=False)["key"] == view.honest_ids[0][1]


def test_one_registry_names_every_attack_by_level_in_the_benches_order():
    assert names("fleet") == ("random_signs", "scaled_noise", "sign_flip", "alie", "hijack", "quality_inflation",
                              "replay", "forgery", "tampering", "sybil", "withholding")
    assert names("node") == ("volume", "sybil", "poisoned batch", "takeover", "deferred fill", "sleeper",
                             "eviction (untrusted)", "eviction (volume-trusted)", "reference shift")
    assert attack("sybil").name == attack("sybil", "node").name == "sybil"  # a name is unique within its level
    assert type(attack("sybil")) is not type(attack("sybil", "node"))


def test_an_unknown_attack_or_level_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"attack: 'volume' is not an attack at the fleet level; choose from random"):
        attack("volume")
    with pytest.raises(ValueError, match=r"level: 'wire' is not a level of attack; choose from fleet, node"):
        attack("hijack", "wire")


def test_a_fleet_attack_plan_names_who_sends_it(view, node):
    assert attack("hijack").plan(view.at(node, 8)).attackers == [node.identity]
    assert attack("sybil").plan(view.at(node, 8)).attackers == node.sybils  # it speaks through its fresh keys


def test_a_node_attack_plan_is_what_its_name_says(view):
    """The takeover, given a stand-in for the bench's material: the subject is the plan, not the node."""
    class Material:
        docs, honest = ("When a sum carries, write the carry above the next column.",), [NodeIdentity.from_seed(b"h")]

        def batch(self, identity, pairs, texts, confidence):
            return make_batch([Experience(t, "math.gsm8k", confidence) for t in texts], view.honest_vectors[:1],
                              PROFILE, identity, timestamp_ms=NOW).to_msgpack()

    plan = attack("takeover", "node").plan(NodeView(Material(), None, np.array([0]), 1, 1))
    copy = decode(plan.hostile[0])
    assert [e.text for e in copy.experiences] == list(Material.docs) and copy.node_id == plan.attackers[0].node_id
    assert copy.experiences[0].confidence == 1.0 and len(plan.tombstones) == 1
    assert plan.victim_key == (copy.experiences[0].id, Material.honest[0].node_id)


def test_the_demos_classic_wave_deals_the_registrys_attacks_by_name_among_the_byzantine_nodes():
    byz = byzantine_nodes(2)
    plan = classic_plan(byz)
    assert [(node.name, chosen.name) for node, chosen in plan] == [
        ("byz0", "hijack"), ("byz0", "forgery"), ("byz0", "replay"), ("byz1", "random_signs"), ("byz1", "tampering")]
    assert all(type(chosen) is type(attack(chosen.name)) for _, chosen in plan)


def test_the_attackers_guess_at_the_queries_is_encoded_once_across_runs(tmp_path, monkeypatch):
    """`adversary.view` encodes the fleet's expected questions (a minute of MiniLM at d = 7680 on 2 busy
    cores in the demo): a rerun reads them from the embeddings cache, the same vectors."""
    from dsonet.sim import adversary

    monkeypatch.setenv("DSONET_CACHE", str(tmp_path))
    calls = []

    class Encoder:
        id = "counting-encoder"

        def encode(self, texts, kind="document"):
            calls.append((tuple(texts), kind))
            return np.stack([np.full(DIM, len(t), np.float32) for t in texts])

    questions = ["What is 2 + 3?", "Integrate y over x."]
    first = adversary.view([], {}, Encoder(), PROFILE, questions, seed=0)
    again = adversary.view([], {}, Encoder(), PROFILE, questions, seed=0)
    assert calls == [(tuple(questions), "query")]
    assert np.array_equal(first.query_vectors, again.query_vectors) and first.query_vectors[1, 0] == len(questions[1])
