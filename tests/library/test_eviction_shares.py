"""Fair shares as pure arithmetic (`dsonet.library.store.eviction`): the largest holders lose rows first,
down to one level; strangers share one share."""

from dsonet.library.store.eviction import HIDDEN, STRANGER, TRUSTED, fair_cuts, standing_of, water_fill


def test_water_filling_takes_from_the_largest_holders_down_to_one_level():
    assert water_fill({"flood": 1000, "a": 10, "b": 10}, 950) == {"flood": 950}
    cuts = water_fill({"a": 5, "b": 5, "c": 5}, 4)
    assert sum(cuts.values()) == 4 and sorted(5 - cuts.get(k, 0) for k in "abc") == [3, 4, 4]
    assert water_fill({"a": 3, "b": 2}, 10) == {"a": 3, "b": 2} and water_fill({"a": 3}, 0) == {}


def test_strangers_share_one_share_and_a_sybil_crowd_cannot_outweigh_one_trusted_key():
    held = {"trusted": 100} | {f"sybil{i}": 100 for i in range(9)} | {"newcomer": 5}
    standing = {k: STRANGER for k in held} | {"trusted": TRUSTED}
    cuts = fair_cuts(held, standing, 800)  # 200 peers' rows stay
    assert cuts.get("trusted", 0) == 0 and cuts.get("newcomer", 0) == 0  # the crowd is one share: it pays
    assert sum(cuts.values()) == 800 and all(cuts[f"sybil{i}"] >= 88 for i in range(9))


def test_hidden_keys_go_first_and_standing_reads_the_trust_weight():
    assert fair_cuts({"banned": 4, "a": 4}, {"banned": HIDDEN, "a": TRUSTED}, 3) == {"banned": 3}
    assert [standing_of(t, 0.7) for t in (0.0, 0.5, 0.69, 0.7, 1.0)] == [HIDDEN, STRANGER, STRANGER, TRUSTED, TRUSTED]
