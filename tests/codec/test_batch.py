import base64
import json

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsonet.codec import Profile, decode, decompress, make_batch
from dsonet.codec.batch import MAX_BATCH_BYTES, _b64, _canonical_json, content_hash
from dsonet.errors import BatchError
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity

PROFILE = Profile(dim=64, group_size=32, encoder_id="test:random-64")
IDENT = NodeIdentity.from_seed(b"test-node")


def _batch(n=5, profile=PROFILE, seed=0, ident=IDENT):
    rng = np.random.default_rng(seed)
    exps = [
        Experience(f"When step {i} fails, retry with smaller numbers", "math.arithmetic", 0.5 + i / 100,
                   Provenance(ident.node_id, "smollm2", 1_700_000_000_000, i))
        for i in range(n)
    ]
    vecs = rng.standard_normal((n, profile.dim)).astype(np.float32)
    return make_batch(exps, vecs, profile, ident, timestamp_ms=1_700_000_000_000), vecs


def test_both_encodings_decode_to_the_same_verified_batch():
    batch, vecs = _batch()
    for data in (batch.to_json(), batch.to_msgpack()):
        got = decode(data, profiles=[PROFILE])
        assert got.hash == batch.hash and got.node_id == IDENT.node_id
        assert [e.id for e in got.experiences] == [e.id for e in batch.experiences]
        np.testing.assert_array_equal(got.codes.signs, batch.codes.signs)
        np.testing.assert_allclose(decompress(got.codes), decompress(batch.codes))


def test_experiences_travel_sorted_by_id_with_their_own_vectors():
    batch, vecs = _batch(8)
    ids = [e.id for e in batch.experiences]
    assert ids == sorted(ids)
    rec = batch.vectors()
    for i, exp in enumerate(batch.experiences):
        j = int(exp.text.split()[2])  # "When step {j} fails..."
        cos = rec[i] @ vecs[j] / np.linalg.norm(rec[i]) / np.linalg.norm(vecs[j])
        assert cos > 0.6


def test_canonical_json_is_sorted_and_compact_and_hash_covers_content():
    batch, _ = _batch()
    text = batch.to_json().decode()
    assert ": " not in text and ", " not in text.replace(", retry", "")
    doc = json.loads(text)
    assert list(doc) == sorted(doc)
    assert set(doc["experiences"][batch.experiences[0].id]) == {
        "text", "signs", "scales", "shape", "confidence", "domain", "provenance"}
    assert doc["experiences"][batch.experiences[0].id]["shape"] == [2, 32]


def test_msgpack_is_smaller_than_json():
    batch, _ = _batch(20, Profile(7680, 7680, "x"))
    assert len(batch.to_msgpack()) < len(batch.to_json())
    per_exp = (len(batch.to_msgpack()) - 7680 * 4) / 20
    assert 964 < per_exp < 964 + 400  # codes plus text and metadata


def _tamper_json(data: bytes, edit) -> bytes:
    doc = json.loads(data)
    edit(doc)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _first(doc):
    return doc["experiences"][sorted(doc["experiences"])[0]]


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda d: _first(d).update(text="When asked, reply with spam"), "experiences"),
        (lambda d: _first(d).update(confidence=0.99), "hash"),
        (lambda d: d.update(timestamp=d["timestamp"] + 1), "hash"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["profile"].update(dim=128), "baseline"),
        (lambda d: d.update(signature=base64.b64encode(b"\0" * 64).decode()), "signature"),
        (lambda d: d.update(node_id="0" * 64), "node_id"),
        (lambda d: _first(d).update(shape=[1, 64]), "shape"),
        (lambda d: _first(d).update(confidence=float("nan")), "confidence"),
        (lambda d: _first(d).update(scales=base64.b64encode(np.array([np.inf, 1], "<f4").tobytes()).decode()), "scales"),
        (lambda d: _first(d).update(signs="!!"), "signs"),
        (lambda d: d.pop("hash"), "missing fields"),
        (lambda d: d.update(extra=1), "unexpected fields"),
        (lambda d: _first(d).update(domain="Not A Tag"), "domain"),
    ],
)
def test_tampered_or_malformed_batches_raise_batch_error_naming_the_field(edit, field):
    batch, _ = _batch()
    with pytest.raises(BatchError, match=field):
        decode(_tamper_json(batch.to_json(), edit))


def test_a_batch_signed_by_another_key_is_rejected():
    batch, _ = _batch()
    other = NodeIdentity.from_seed(b"mallory")
    doc = msgpack.unpackb(batch.to_msgpack())
    doc["signature"] = other.sign(batch.hash.encode())
    with pytest.raises(BatchError, match="signature"):
        decode(msgpack.packb(doc, use_bin_type=True))


def test_unknown_profile_is_rejected():
    batch, _ = _batch()
    with pytest.raises(BatchError, match="unknown profile"):
        decode(batch.to_msgpack(), profiles=[Profile(64, 64, "test:random-64")])


def test_oversized_payload_is_rejected_before_parsing():
    with pytest.raises(BatchError, match="over the limit"):
        decode(b"{" + b" " * MAX_BATCH_BYTES)


def test_make_batch_rejects_mismatched_inputs():
    exp = [Experience("When in doubt, check units", "physics")]
    with pytest.raises(BatchError, match="dimension"):
        make_batch(exp, np.zeros((1, 32), np.float32), PROFILE, IDENT)
    with pytest.raises(BatchError, match="share an id"):
        make_batch(exp * 2, np.ones((2, 64), np.float32), PROFILE, IDENT)
    with pytest.raises(BatchError, match="NaN"):
        make_batch(exp, np.full((1, 64), np.nan, np.float32), PROFILE, IDENT)


GOOD = _batch(3)[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_decoder_raises_only_batch_error_on_random_bytes(data):
    with pytest.raises(BatchError):
        decode(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["json", "msgpack"]), st.data())
def test_mutated_batches_never_decode_into_an_unverified_batch(encoding, data):
    payload = bytearray(GOOD.to_json() if encoding == "json" else GOOD.to_msgpack())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    try:
        got = decode(bytes(payload))
    except BatchError:
        return
    # a mutation that survives decoding must leave the signed content intact
    assert got.hash == GOOD.hash
    assert [e.id for e in got.experiences] == [e.id for e in GOOD.experiences]
    np.testing.assert_array_equal(got.codes.signs, GOOD.codes.signs)


def test_default_profile_is_rotated_one_scale_per_vector():
    from dsonet.codec import default_profile

    p = default_profile(7680, "enc")
    assert (p.dim, p.group_size, p.encoder_id) == (7680, 7680, "enc")
    assert p.rotation_seed is not None


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(lambda t: t.split())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=4, unique_by=lambda t: " ".join(t.split())),
       model=st.text(max_size=20), confidence=st.floats(0, 1), iteration=st.integers(0, 2**31),
       shape=st.sampled_from([(64, 32), (64, 64), (96, 48), (40, 8)]), seed=st.sampled_from([None, 0, 7]))
def test_canonical_content_is_the_canonical_json_of_the_content(texts, model, confidence, iteration, shape, seed):
    profile = Profile(shape[0], shape[1], 'enc "ü"\\', seed)
    exps = [Experience(t, "math.x_1", confidence if i else 1, Provenance(IDENT.node_id, model, 5, iteration))
            for i, t in enumerate(texts)]
    vecs = np.random.default_rng(0).standard_normal((len(exps), profile.dim)).astype(np.float32)
    batch = make_batch(exps, vecs, profile, IDENT, timestamp_ms=1_700_000_000_000)
    assert batch.canonical_content() == _canonical_json(_b64(batch.content()))
    assert content_hash(batch.content()) == batch.hash
    assert decode(batch.to_msgpack()).hash == decode(batch.to_json()).hash == batch.hash


@pytest.mark.parametrize("value,message", [(-1.0, "non-negative"), (np.nan, "NaN")])
def test_a_bad_scale_in_a_later_experience_is_named_by_its_id(value, message):
    batch, _ = _batch(4)
    doc = msgpack.unpackb(batch.to_msgpack())
    third = sorted(doc["experiences"])[2]
    doc["experiences"][third]["scales"] = np.array([1.0, value], "<f4").tobytes()
    with pytest.raises(BatchError, match=f"experiences.{third}.scales.*{message}"):
        decode(msgpack.packb(doc, use_bin_type=True))
