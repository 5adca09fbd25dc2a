"""Past capacity, fair shares (issue 24, finding 2): peers' rows are cut per signer, the largest
holders first, keys not trusted by outcomes sharing one share, the library's own rows last, whatever
confidence each claims; within a signer, lowest quality first. No key's volume evicts another
author's row while it holds more than that author."""

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from lib_helpers import experiences, unit

TRUSTED, NEW = NodeIdentity.from_seed(b"evict-trusted"), NodeIdentity.from_seed(b"evict-new")
LATE, NEWCOMER = NodeIdentity.from_seed(b"evict-late"), NodeIdentity.from_seed(b"evict-newcomer")
TRUST = {TRUSTED.node_id: 0.9, NEW.node_id: 0.5, LATE.node_id: 0.9, NEWCOMER.node_id: 0.5}


def _batch(profile, identity, n, seed, confidence):
    exps = [Experience(f"When case {seed}-{i} comes up, do step {i}", "math", confidence) for i in range(n)]
    return make_batch(exps, unit(n, seed), profile, identity)


def _held(lib):
    """(signer, confidence) of every row: the texts differ per signer here, so each id has one row."""
    held = sorted((e.provenance.node_id, e.confidence) for e in lib.all())
    assert len(held) == lib.stats()["rows"]
    return held


def _signers(lib):
    return [s for s, _ in _held(lib)]


def test_a_confident_flood_from_a_new_key_evicts_itself_not_a_newcomers_trusted_or_own_rows(
        tmp_path, encoder, profile):
    """Before: the rows of every key not yet trusted went first, lowest confidence first, so the flood
    at 1.0 evicted the honest newcomer's row at 0.5."""
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=9,
                 trust=lambda s: TRUST.get(s, 1.0), trusted=0.7) as lib:
        own = lib.add_vectors(experiences(2, seed=1), unit(2, 1))  # confidence 0.3–0.9, drawn
        lib.ingest(_batch(profile, TRUSTED, 3, 2, 0.7))
        lib.ingest(_batch(profile, NEWCOMER, 1, 5, 0.5))
        flood = lib.ingest(_batch(profile, NEW, 6, 3, 1.0))
        assert len(flood.evicted) == 3  # the flood's own rows, at confidence 1.0
        held = _signers(lib)
        assert held.count(TRUSTED.node_id) == 3 and held.count(NEWCOMER.node_id) == 1 and all(lib.get(i) for i in own)
        assert held.count(NEW.node_id) == 3  # strangers' one share: as much as the trusted key holds


def test_a_flood_from_a_trusted_key_cuts_it_down_to_the_other_authors_not_them(tmp_path, encoder, profile):
    """Before: only keys not yet trusted went first, then peers by quality: a key trusted by volume
    flooding at 1.0 evicted the newcomer's row, then the trusted author's rows at 0.7."""
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=10,
                 trust=lambda s: TRUST.get(s, 1.0), trusted=0.7) as lib:
        own = lib.add_vectors(experiences(2, seed=1), unit(2, 1))
        lib.ingest(_batch(profile, TRUSTED, 3, 2, 0.7))
        lib.ingest(_batch(profile, NEWCOMER, 1, 5, 0.5))
        flood = lib.ingest(_batch(profile, LATE, 8, 4, 1.0))
        assert len(flood.evicted) == 4 and all(lib.get(i) for i in own)
        held = _signers(lib)
        assert (held.count(TRUSTED.node_id), held.count(NEWCOMER.node_id), held.count(LATE.node_id)) == (3, 1, 4)


def test_a_banned_or_floored_keys_rows_go_first_and_shares_then_even_out(tmp_path, encoder, profile):
    trust = TRUST | {NEW.node_id: 0.0}  # under the floor: hidden, first out
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=6,
                 trust=lambda s: trust.get(s, 1.0), trusted=0.7) as lib:
        lib.ingest(_batch(profile, NEW, 2, 3, 1.0))
        lib.ingest(_batch(profile, TRUSTED, 3, 2, 0.7))
        lib.ingest(_batch(profile, LATE, 3, 4, 0.9))  # 8 rows, 2 over: the hidden key's
        assert NEW.node_id not in _signers(lib) and len(_signers(lib)) == 6
        lib.ingest(_batch(profile, NEWCOMER, 2, 5, 0.5))  # 2 over: one each from the two largest holders
        held = _signers(lib)
        assert (held.count(TRUSTED.node_id), held.count(LATE.node_id), held.count(NEWCOMER.node_id)) == (2, 2, 2)
        assert sorted(c for s, c in _held(lib) if s == TRUSTED.node_id) == [0.7, 0.7]


def test_without_trust_the_own_rows_still_go_last(tmp_path, encoder, profile):
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=3) as lib:
        own = lib.add_vectors([Experience(f"When own case {i}, do own step", "math", 0.1) for i in range(2)],
                              unit(2, 5))
        assert lib.ingest(_batch(profile, TRUSTED, 3, 6, 0.9)).evicted and all(lib.get(i) for i in own)
        assert sum(c.received for e in lib.all() for c in lib.copies(e.id)) == 1
