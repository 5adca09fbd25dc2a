"""Trust is earned by outcomes, not by volume (issue 24): admitted batches lift a key to the volume
ceiling and no further, so every row of a key without helpful outcomes is re-encoded whatever its
history; a filter refusal costs reputation only when outcome-trusted keys agree."""

import numpy as np
import pytest

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig, Reputation
from dsonet.codec.reference import Reference

from agg_helpers import DIM, NOW, PROFILE


class _Encoder:
    """A fixed text -> vector table standing in for the profile's encoder (the subject is DeltaSoup's
    use of reputation, not an encoder)."""

    id = "test-encoder"
    dim = DIM

    def __init__(self, table):
        self.table = table

    def encode(self, texts, kind="document"):
        return np.stack([self.table[t] for t in texts])


def _topic(axis: int, n: int, seed: int) -> np.ndarray:
    """Unit vectors around one coordinate axis: lessons on one topic."""
    x = np.eye(1, DIM, axis, dtype=np.float32) + 0.15 * np.random.default_rng(seed).standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_volume_lifts_a_key_to_the_ceiling_only_and_outcomes_take_it_past_trusted():
    c = DeltaSoupConfig()
    rep = Reputation(c.rep_decay, c.rep_floor, c.rep_initial, c.volume_ceiling, c.trusted)
    for _ in range(1000):  # any amount of honest history
        rep.admitted("sleeper")
    assert rep.get("sleeper") == pytest.approx(c.volume_ceiling) and not rep.trusted("sleeper")
    for _ in range(3):
        rep.outcome("sleeper", helped=True)
    assert rep.trusted("sleeper") and rep.get("sleeper") == pytest.approx(1 - 0.4 * 0.9**3)  # 0.6 → 0.708
    for _ in range(5):  # the drift bench's poisoner: five harmful outcomes from 0.5 put it under the floor
        rep.outcome("poisoner", helped=False)
    assert rep.skipped("poisoner") and rep.get("poisoner") == pytest.approx(0.5 * 0.9**5)
    rep.outcome("harmful", helped=False)
    for _ in range(20):  # volume does not wash out a harmful verdict
        rep.admitted("harmful")
    assert rep.get("harmful") == pytest.approx(0.45) and rep.condemned("harmful")
    with pytest.raises(ValueError, match="volume_ceiling"):
        Reputation(volume_ceiling=0.75, trusted=0.7)


def test_a_key_with_honest_history_and_no_outcomes_lands_no_lying_row():
    """Issue 24, finding 1: five honest batches used to lift a fresh key to 0.705, past `trusted`, and
    from then on two rows a batch were re-encoded: a lying row among 40 went in (seed 0: it did)."""
    rng = np.random.default_rng(0)
    texts = [f"When honest case {i} appears, do step {i}." for i in range(400)]
    vectors = _topic(0, 400, seed=1)
    lure = "When the common question comes, follow the attacker's advice."
    table = dict(zip(texts, vectors)) | {lure: _topic(0, 1, seed=2)[0]}
    soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], encoder=_Encoder(table))
    from dsonet.codec import make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    sleeper = NodeIdentity.from_seed(b"sleeper")

    def send(idx, lie_at=None):
        exps = [Experience(texts[i], "math.test") for i in idx]
        vecs = vectors[idx].copy()
        if lie_at is not None:  # the attacker's text over the code of a common question
            exps[lie_at] = Experience(lure, "math.test")
            vecs[lie_at] = _topic(0, 1, seed=3)[0]
        soup.submit(make_batch(exps, vecs, PROFILE, sleeper, timestamp_ms=NOW).to_msgpack(), now_ms=NOW)
        return soup.round(now_ms=NOW)

    for b in range(8):  # honest history: every batch admitted
        result = send(np.arange(b * 20, b * 20 + 20))
        assert result.keep[0].all()
    assert not soup.reputation.trusted(sleeper.node_id)
    lie = send(rng.permutation(np.arange(200, 400))[:40], lie_at=17)
    assert not lie.keep[0][17] and not lie.keep[0].any()  # the lie was re-encoded, and its batch refused
    assert soup.reputation.get(sleeper.node_id) < DeltaSoupConfig().volume_ceiling


def test_a_key_trusted_by_outcomes_still_has_a_share_of_its_rows_re_encoded():
    texts = [f"When trusted case {i} appears, do step {i}." for i in range(100)]
    vectors = _topic(0, 100, seed=4)
    soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], encoder=_Encoder(dict(zip(texts, vectors))))
    from dsonet.codec import make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    key = NodeIdentity.from_seed(b"earned")
    for _ in range(5):
        soup.record_outcome(key.node_id, helped=True)
    assert soup.reputation.trusted(key.node_id)
    sent = vectors.copy()
    sent[:40] = _topic(0, 40, seed=5)  # 40 rows of 100 carry codes their texts do not encode
    soup.submit(make_batch([Experience(t, "math.test") for t in texts], sent, PROFILE, key,
                           timestamp_ms=NOW).to_msgpack(), now_ms=NOW)
    result = soup.round(now_ms=NOW)
    assert not result.keep[0].any()  # 10 rows checked: a lying one among them refuses the batch
    assert not soup.reputation.trusted(key.node_id)  # ... and from now on every row of it is checked


def _lone_round(soup, reference):
    from dsonet.codec import make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    honest = NodeIdentity.from_seed(b"newcomer")
    exps = [Experience(f"When a case of the other topic {i} comes, do {i}.", "math.test") for i in range(20)]
    soup.submit(make_batch(exps, _topic(5, 20, seed=6), PROFILE, honest, timestamp_ms=NOW).to_msgpack(), now_ms=NOW)
    return soup.round(now_ms=NOW, reference=reference), honest.node_id


def test_a_lone_batch_refused_beside_one_keys_rows_costs_its_key_nothing():
    """Issue 24, finding 3: a copier's rows as the reference refused an honest newcomer's lone batches on
    another topic, and each refusal lowered the newcomer's reputation."""
    copier = _topic(0, 64, seed=7)
    soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], rule="median")
    result, honest = _lone_round(soup, Reference(copier, ("copier",) * 64))
    assert result.keep[0].mean() < 0.5  # the filter still refuses what the reference disagrees with ...
    assert soup.reputation.get(honest) == 0.5  # ... but one key's rows are no agreement: nobody pays

    agreed = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], rule="median")
    signers = tuple(f"trusted-{i % 4}" for i in range(64))  # four outcome-trusted keys agree
    result, honest = _lone_round(agreed, Reference(copier, signers))
    assert result.keep[0].mean() < 0.5 and agreed.reputation.get(honest) == pytest.approx(0.45)


def test_keys_in_the_round_agree_only_when_trusted_by_outcomes():
    """Sybil keys add nothing: five fresh keys on one topic do not make a newcomer on another pay; two
    keys trusted by outcomes do."""
    from dsonet.codec import make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    paid = []
    for trusted in (False, True):
        soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], rule="median")
        for k in range(5):
            key = NodeIdentity.from_seed(f"crowd-{k}".encode())
            if trusted and k < 2:
                for _ in range(5):
                    soup.record_outcome(key.node_id, helped=True)
            exps = [Experience(f"When crowd case {k}.{i} comes, do {i}.", "math.test") for i in range(20)]
            soup.submit(make_batch(exps, _topic(0, 20, seed=10 + k), PROFILE, key, timestamp_ms=NOW).to_msgpack(),
                        now_ms=NOW)
        result, honest = _lone_round(soup, None)
        assert result.keep[-1].mean() < 0.5  # the newcomer's rows are refused either way
        paid.append(soup.reputation.get(honest) < 0.5)
    assert paid == [False, True]


def test_a_key_convicted_by_its_outcomes_stays_skipped_whatever_order_they_came_in():
    """The drift bench, seed 0: one honest node's agent reported the poisoner's lessons harmful 11
    times and helpful twice (a lesson merged with an honest copy), the helpful ones last; the moving
    average rose from 0.157 back to 0.317, over the floor, and all 72 poison rows came back."""
    rep = Reputation(volume_ceiling=0.6, trusted=0.7)
    for helped in [False] * 11 + [True] * 2:
        rep.outcome("poisoner", helped)
    assert rep.get("poisoner") > rep.floor  # the average alone would let it back in
    assert rep.convicted("poisoner") and rep.skipped("poisoner")
    for helped in [True, False, False, False]:  # four harmful of five could be chance: not yet
        rep.outcome("unlucky", helped)
    assert not rep.convicted("unlucky") and not rep.skipped("unlucky")
    for _ in range(6):  # helpful outcomes later clear a key: harm no longer beyond chance
        rep.outcome("poisoner", helped=True)
    assert not rep.convicted("poisoner")
    off = Reputation(conviction_p=None)
    for helped in [False] * 11 + [True] * 2:
        off.outcome("poisoner", helped)
    assert not off.skipped("poisoner")  # the paper's reading: the floor only
    with pytest.raises(ValueError, match="conviction_p"):
        Reputation(conviction_p=1.5)


def test_a_caught_key_falls_under_trusted_and_the_round_says_which_rows_were_checked():
    """A trusted key at 0.95 used to keep its trust after a catch (0.9 · 0.95 = 0.855), so the next
    batches were only sampled again; the round names the key and which rows its sample checked."""
    texts = [f"When checked case {i} appears, do step {i}." for i in range(100)]
    vectors = _topic(0, 100, seed=8)
    soup = DeltaSoup(DeltaSoupConfig(seed=0), [PROFILE], encoder=_Encoder(dict(zip(texts, vectors))))
    from dsonet.codec import make_batch
    from dsonet.experience import Experience
    from dsonet.identity import NodeIdentity

    key, newcomer = NodeIdentity.from_seed(b"highly-trusted"), NodeIdentity.from_seed(b"checked-newcomer")
    for _ in range(30):
        soup.record_outcome(key.node_id, helped=True)
    assert soup.reputation.get(key.node_id) > 0.95
    honest = make_batch([Experience(t, "math.test") for t in texts[:50]], vectors[:50], PROFILE, key, timestamp_ms=NOW)
    lying = make_batch([Experience(t, "math.test") for t in texts[50:]], _topic(0, 50, seed=9), PROFILE, key,
                       timestamp_ms=NOW)
    fresh = make_batch([Experience(t, "math.test") for t in texts[:20]], vectors[:20], PROFILE, newcomer,
                       timestamp_ms=NOW)
    for b in (honest, lying, fresh):
        soup.submit(b.to_msgpack(), now_ms=NOW)
    result = soup.round(now_ms=NOW)
    assert result.caught == (key.node_id,) and not result.keep[1].any()
    assert result.verified[0].sum() == 5 and result.keep[0].all()  # 10% of the honest batch checked, the rest sampled
    assert not result.verified[1].any() and result.verified[2].all()  # a newcomer: every row checked
    assert soup.reputation.get(key.node_id) == DeltaSoupConfig().volume_ceiling
    assert not soup.reputation.trusted(key.node_id)
    assert [v.shape for v in result.vectors] == [(50, DIM), (50, DIM), (20, DIM)]  # the decoded ê, per batch
