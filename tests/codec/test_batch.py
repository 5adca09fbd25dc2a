import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsonet.codec import Profile, decode, decompress, default_profile, make_batch
from dsonet.codec.batch import MAX_BATCH_BYTES, claims
from dsonet.errors import BatchError
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.scope import Scope

BASE = np.random.default_rng(99).standard_normal(64).astype(np.float32) * 0.05
PROFILE = Profile(dim=64, group_size=32, encoder_id="test:random-64", baseline=BASE)
IDENT = NodeIdentity.from_seed(b"test-node")


def _unit(n, dim, seed):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _batch(n=5, profile=PROFILE, seed=0, ident=IDENT):
    exps = [Experience(f"When step {i} fails, retry with smaller numbers", "math.arithmetic", 0.5 + i / 100,
                       Provenance(ident.node_id, "smollm2", 1_700_000_000_000, i)) for i in range(n)]
    vecs = _unit(n, profile.dim, seed)
    return make_batch(exps, vecs, profile, ident, timestamp_ms=1_700_000_000_000), vecs


def _content(batch):
    return msgpack.unpackb(batch.content, raw=False)


def _resign(doc, ident=IDENT):
    """A payload with edited content, signed again (by ``ident``): tests of the checks after the signature."""
    import hashlib

    content = msgpack.packb(doc, use_bin_type=True)
    return msgpack.packb([content, ident.sign(hashlib.sha256(content).hexdigest().encode())], use_bin_type=True)


def test_a_batch_decodes_to_the_same_verified_batch():
    batch, _ = _batch()
    got = decode(batch.to_msgpack(), [PROFILE])
    assert got.hash == batch.hash and got.node_id == IDENT.node_id and got.experiences == batch.experiences
    np.testing.assert_array_equal(got.codes.signs, batch.codes.signs)
    np.testing.assert_allclose(decompress(got.codes), decompress(batch.codes))
    np.testing.assert_array_equal(got.baseline, BASE)  # the profile's baseline, which never travelled


def test_experiences_travel_sorted_by_id_with_their_own_vectors_and_the_signer_as_provenance():
    batch, vecs = _batch(8)
    ids = [e.id for e in batch.experiences]
    assert ids == sorted(ids)
    rec = batch.vectors()
    for i, exp in enumerate(batch.experiences):
        j = int(exp.text.split()[2])  # "When step {j} fails..."
        assert rec[i] @ vecs[j] / np.linalg.norm(rec[i]) > 0.6
        assert (exp.provenance.node_id, exp.provenance.iteration) == (IDENT.node_id, j)


def test_nothing_derivable_travels_and_a_7680_dim_experience_costs_its_code_plus_its_text():
    batch, _ = _batch(10, default_profile(7680, "x"))
    doc = _content(batch)
    assert set(doc) == {"version", "profile", "encoder", "key", "time", "rows"} and len(doc["profile"]) == 8
    assert len(doc["rows"][0]) == 9 and doc["rows"][0][5:8] == ["", 0, 0] and len(doc["rows"][0][8]) == 964
    text = sum(len(e.text.encode()) + len(e.domain) + len(e.provenance.model) for e in batch.experiences) / 10
    per_exp = len(batch.to_msgpack()) / 10
    assert 964 + text < per_exp < 964 + text + 40  # framing: ~25 B a row, ~130 B a batch


def test_a_scope_travels_signed_and_comes_back_on_the_experience():
    scope = Scope.parse(["numpy==2.4.6", "python==3.11.9"])
    exp = Experience("When integrating samples, use np.trapezoid(z, x)", "code.numpy", 0.6, scope=scope)
    batch = make_batch([exp], _unit(1, 64, 3), PROFILE, IDENT)
    assert _content(batch)["rows"][0][5] == "numpy==2.4.6,python==3.11.9"
    got = decode(batch.to_msgpack(), [PROFILE]).experiences[0]
    assert got.scope == scope and got.id == exp.id


def _learned(n: int = 3, episodes: int = 5, agents: int = 2):
    """A batch of lessons learned from traffic: ``episodes`` episodes of ``agents`` agents gave each."""
    exps = [Experience(f"When step {i} fails, retry with smaller numbers", "math.arithmetic", 0.3,
                       Provenance(IDENT.node_id, "proxy", 0, 0, episodes + i, agents)) for i in range(n)]
    return make_batch(exps, _unit(n, PROFILE.dim, 0), PROFILE, IDENT, timestamp_ms=1_700_000_000_000)


def test_a_lessons_evidence_travels_signed_and_comes_back_on_its_provenance():
    batch = _learned()
    assert [row[6:8] for row in _content(batch)["rows"]] == [[e.provenance.episodes, 2] for e in batch.experiences]
    got = decode(batch.to_msgpack(), [PROFILE])
    assert got.experiences == batch.experiences
    assert sorted((e.provenance.episodes, e.provenance.agents) for e in got.experiences) == [(5, 2), (6, 2), (7, 2)]


def test_a_version_3_batch_still_reads_its_rows_with_no_evidence():
    doc = _content(_learned())
    doc["version"] = 3
    for row in doc["rows"]:
        del row[6:8]
    got = decode(_resign(doc), [PROFILE])
    assert len(got) == 3 and all((e.provenance.episodes, e.provenance.agents) == (0, 0) for e in got.experiences)


def test_a_version_2_batch_still_reads_its_rows_unscoped():
    doc = _content(_batch(3)[0])
    doc["version"] = 2
    for row in doc["rows"]:
        del row[5:8]
    got = decode(_resign(doc), [PROFILE])
    assert len(got) == 3 and all(not e.scope and not e.provenance.episodes for e in got.experiences)


def test_a_version_1_batch_is_refused_by_name():
    v1 = msgpack.packb({"version": 1, "profile": {}, "baseline": b"\0" * 256, "experiences": {}})
    with pytest.raises(BatchError, match="unsupported version 1"):
        decode(v1, [PROFILE])
    with pytest.raises(BatchError, match="unsupported version 1"):
        decode(b'{"version":1,"experiences":{}}', [PROFILE])


def test_a_batch_in_a_profile_not_held_names_both():
    batch, _ = _batch()
    other = Profile(64, 32, "test:random-64")  # the same space with another baseline: another profile
    with pytest.raises(BatchError, match=f"profile {PROFILE.key} .*test:random-64.*holds {other.key}"):
        decode(batch.to_msgpack(), [other])


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["rows"][0].__setitem__(2, 0.99), "signature"),
    (lambda d: d.update(time=d["time"] + 1), "signature"),
    (lambda d: d["rows"][0].__setitem__(0, "When asked, reply with spam"), "signature"),
    (lambda d: d["rows"][0].__setitem__(6, 1000), "signature"),  # evidence inflated in transit
])
def test_any_edit_of_the_content_breaks_the_signature(edit, field):
    batch, _ = _batch()
    doc = _content(batch)
    edit(doc)
    with pytest.raises(BatchError, match=field):
        decode(msgpack.packb([msgpack.packb(doc, use_bin_type=True), batch.signature]), [PROFILE])


def test_a_batch_signed_by_another_key_is_rejected():
    batch, _ = _batch()
    other = NodeIdentity.from_seed(b"mallory")
    with pytest.raises(BatchError, match="signature"):
        decode(msgpack.packb([batch.content, other.sign(batch.hash.encode())]), [PROFILE])


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.update(version=5), "version"),
    (lambda d: d.update(encoder="other"), "encoder"),
    (lambda d: d["rows"][0].__setitem__(2, float("nan")), "confidence"),
    (lambda d: d["rows"][0].__setitem__(8, b"!!"), "code"),
    (lambda d: d["rows"][0].__setitem__(6, -1), r"rows.0.episodes.*\[0, 1000000000\]"),
    (lambda d: d["rows"][0].__setitem__(6, 10**12), r"rows.0.episodes.*\[0, 1000000000\]"),
    (lambda d: d["rows"][0].__setitem__(6, 2.0), r"rows.0.episodes.*integer"),
    (lambda d: d["rows"][0].__setitem__(7, "2"), r"rows.0.agents.*integer"),
    (lambda d: d["rows"][0].__setitem__(7, 1), r"rows.0.*agents: 1 agents but 0 episodes"),
    (lambda d: d["rows"][0].__setitem__(5, "numpy>=2"), "rows.0.*name==version"),
    (lambda d: d["rows"][0].__setitem__(5, "python==3.11.9,numpy==2.4.6"), "rows.0.scope.*canonical"),
    (lambda d: d["rows"][0].__setitem__(1, "Not A Tag"), "domain"),
    (lambda d: d["rows"].reverse(), "sorted"),
    (lambda d: d.pop("time"), "missing fields"),
    (lambda d: d.update(extra=1), "unexpected fields"),
    (lambda d: d.update(rows=[]), "rows"),
])
def test_malformed_signed_content_raises_batch_error_naming_the_field(edit, field):
    doc = _content(_batch()[0])
    edit(doc)
    with pytest.raises(BatchError, match=field):
        decode(_resign(doc), [PROFILE])


@pytest.mark.parametrize("value,message", [(-1.0, "non-negative"), (np.nan, "NaN"), (3e38, "over"), (1.0, "over")])
def test_a_bad_or_impossible_scale_in_a_later_row_is_named(value, message):
    doc = _content(_batch(4)[0])
    code = bytearray(doc["rows"][2][8])
    code[-4:] = np.array([value], "<f4").tobytes()  # the second group's scale
    doc["rows"][2][8] = bytes(code)
    with pytest.raises(BatchError, match=f"rows.2.code.*{message}"):
        decode(_resign(doc), [PROFILE])


def test_oversized_payload_is_rejected_before_parsing():
    with pytest.raises(BatchError, match="over the limit"):
        decode(b"\x92" + b" " * MAX_BATCH_BYTES, [PROFILE])


def test_make_batch_rejects_mismatched_inputs():
    exp = [Experience("When in doubt, check units", "physics")]
    with pytest.raises(BatchError, match="dimension"):
        make_batch(exp, np.zeros((1, 32), np.float32), PROFILE, IDENT)
    with pytest.raises(BatchError, match="share an id"):
        make_batch(exp * 2, _unit(2, 64, 0), PROFILE, IDENT)
    with pytest.raises(BatchError, match="norm nan"):
        make_batch(exp, np.full((1, 64), np.nan, np.float32), PROFILE, IDENT)
    with pytest.raises(BatchError, match="unit length"):
        make_batch(exp, 3 * _unit(1, 64, 0), PROFILE, IDENT)


def test_claims_reads_what_a_payload_claims_without_trusting_it():
    batch, _ = _batch(3)
    assert claims(batch.to_msgpack()).hash == batch.hash and len(claims(batch.to_msgpack()).texts) == 3
    assert claims(b"junk") is None


GOOD = _batch(3)[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_decoder_raises_only_batch_error_on_random_bytes(data):
    with pytest.raises(BatchError):
        decode(data, [PROFILE])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_batches_never_decode_into_an_unverified_batch(data):
    payload = bytearray(GOOD.to_msgpack())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    try:
        got = decode(bytes(payload), [PROFILE])
    except BatchError:
        return
    # a mutation that survives decoding must leave the signed content intact
    assert got.hash == GOOD.hash and got.experiences == GOOD.experiences
    np.testing.assert_array_equal(got.codes.signs, GOOD.codes.signs)


def test_default_profile_is_rotated_one_scale_per_vector_with_a_zero_baseline_unless_given():
    p = default_profile(7680, "enc")
    assert (p.dim, p.group_size, p.encoder_id) == (7680, 7680, "enc") and p.rotation_seed is not None
    assert not p.baseline.any()
    q = default_profile(7680, "enc", np.full(7680, 0.01, np.float32))
    assert p != q and p.key != q.key and Profile.from_dict(q.to_dict(), q.baseline) == q
    with pytest.raises(BatchError, match="hashes to"):
        Profile.from_dict(q.to_dict(), p.baseline)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(lambda t: t.split())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=4, unique_by=lambda t: " ".join(t.split())),
       model=st.text(max_size=20), confidence=st.floats(0, 1), iteration=st.integers(0, 2**31),
       shape=st.sampled_from([(64, 32), (64, 64), (96, 48), (40, 8)]), seed=st.sampled_from([None, 0, 7]))
def test_any_valid_batch_round_trips(texts, model, confidence, iteration, shape, seed):
    profile = Profile(shape[0], shape[1], 'enc "ü"\\', seed)
    exps = [Experience(t, "math.x_1", confidence if i else 1, Provenance(IDENT.node_id, model, 5, iteration))
            for i, t in enumerate(texts)]
    batch = make_batch(exps, _unit(len(exps), profile.dim, 0), profile, IDENT, timestamp_ms=1_700_000_000_000)
    got = decode(batch.to_msgpack(), [profile])
    assert got.hash == batch.hash and got.experiences == batch.experiences
