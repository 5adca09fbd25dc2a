import sqlite3

import numpy as np
import pytest

from dsonet.codec import Profile, decompress, make_batch
from dsonet.experience import Experience
from dsonet.library import Admitted, Library, LibraryError

from lib_helpers import DIM, experiences, unit


def open_lib(tmp_path, encoder, profile, name="lib.sqlite", **kw):
    return Library(tmp_path / name, encoder=encoder, profile=profile, **kw)


def test_add_then_search_finds_it_with_exact_float_score(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        exp = lib.add("When a ratio is given, write both parts as multiples of one unknown", "math.ratio", 0.8)
        lib.add("When a graph is sparse, store it as adjacency lists", "code.graphs", 0.6)
        hits = lib.search_vector(encoder.encode([exp.text])[0], k=5, min_similarity=0.5)
        assert [h.experience.id for h in hits] == [exp.id]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert lib.get(exp.id) == exp


def test_library_persists_and_reloads_index_and_floats(tmp_path, encoder, profile):
    exps, vecs = experiences(50), unit(50)
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.add_vectors(exps, vecs)
        before = lib.search_vector(vecs[7], k=3, min_similarity=-1)
    with open_lib(tmp_path, encoder, profile) as lib:
        assert len(lib) == 50
        after = lib.search_vector(vecs[7], k=3, min_similarity=-1)
        assert np.allclose(lib.vectors([exps[5].id])[0], vecs[5])  # the float itself, from the file
    assert [(h.experience.id, round(h.score, 5)) for h in after] == [(h.experience.id, round(h.score, 5)) for h in before]
    assert after[0].experience.id == exps[7].id


def test_opening_with_another_profile_is_a_clear_error(tmp_path, encoder, profile):
    open_lib(tmp_path, encoder, profile).close()
    with pytest.raises(LibraryError, match="profile: .* was created for"):
        open_lib(tmp_path, encoder, Profile(DIM, 128, "test:hash"))


def test_ingest_is_idempotent_and_one_transaction(tmp_path, encoder, profile, identity):
    batch = make_batch(experiences(20, seed=1), unit(20, 1), profile, identity)
    with open_lib(tmp_path, encoder, profile) as lib:
        first = lib.ingest(batch)
        again = lib.ingest(batch)
        assert len(first.added) == 20 and again.added == [] and again.duplicates == 20
        assert len(lib) == 20
        assert lib.stats()["baselines"] == 1  # the batch's baseline is stored once


def test_ingest_with_encode_texts_keeps_our_floats_and_ranks_peers_rows_exactly(tmp_path, encoder, profile, identity):
    exps = experiences(40, seed=4)
    vecs = encoder.encode([e.text for e in exps])
    keep = np.arange(40) != 3
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.ingest(Admitted(make_batch(exps, vecs, profile, identity), keep), encode_texts=True)
        assert lib.stats()["with_float_vector"] == 39  # the rejected row left nothing behind
        hits = lib.search_vector(vecs[7], k=3, min_similarity=-1)
        assert hits[0].experience.id == exps[7].id and hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert [h.score for h in hits[1:]] == pytest.approx([float(vecs[7] @ vecs[lib_index(exps, h)]) for h in hits[1:]], abs=1e-5)


def test_a_redelivered_batch_is_not_encoded_again(tmp_path, encoder, profile, identity):
    encoded = []

    class Counting(type(encoder)):
        def encode(self, texts, kind="document"):
            encoded.extend(texts)
            return super().encode(texts, kind)

    exps = experiences(12, seed=8)
    batch = make_batch(exps, encoder.encode([e.text for e in exps]), profile, identity)
    with open_lib(tmp_path, Counting(), profile) as lib:
        lib.ingest(batch, encode_texts=True)
        lib.delete(exps[0].id)
        again = lib.ingest(batch, encode_texts=True)  # a stream replay
        assert len(encoded) == 12 and again.added == [] and again.rejected == 1
        assert lib.stats()["with_float_vector"] == 11


def lib_index(exps, hit):
    return [e.id for e in exps].index(hit.experience.id)


def test_a_library_given_the_encoders_support_scores_peers_codes_closer_to_the_truth(tmp_path, encoder, profile, identity):
    lift = np.linalg.qr(np.random.default_rng(2).standard_normal((DIM, 24)))[0].T.astype(np.float32)
    vecs, queries = unit(300, 6, dim=24) @ lift, unit(40, 7, dim=24) @ lift
    exps = experiences(300, seed=6)
    row = {e.id: i for i, e in enumerate(exps)}
    errors = []
    for name, support in (("plain.sqlite", None), ("support.sqlite", lift)):
        with open_lib(tmp_path, encoder, profile, name=name, support=support) as lib:
            lib.ingest(make_batch(exps, vecs, profile, identity))  # codes only: no floats to rescore with
            errors.append(np.mean([abs(h.score - float(q @ vecs[row[h.experience.id]]))
                                   for q in queries for h in lib.search_vector(q, k=5, min_similarity=-1)]))
    assert errors[1] < 0.75 * errors[0]  # measured: 0.028 -> 0.017


def test_ingest_keep_mask_admits_only_kept_rows(tmp_path, encoder, profile, identity):
    batch = make_batch(experiences(10, seed=2), unit(10, 2), profile, identity)
    keep = np.arange(10) % 2 == 0
    with open_lib(tmp_path, encoder, profile) as lib:
        res = lib.ingest(Admitted(batch, keep))
        assert sorted(res.added) == sorted(batch.experiences[i].id for i in range(0, 10, 2))
        assert res.rejected == 5


def test_search_over_received_codes_ranks_the_source_vector_first(tmp_path, encoder, profile, identity):
    vecs = unit(300, 3)
    batch = make_batch(experiences(300, seed=3), vecs, profile, identity)
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.ingest(batch)
        recon = {e.id: v for e, v in zip(batch.experiences, batch.vectors())}
        for i in (0, 17, 299):
            hits = lib.search_vector(vecs[i], k=1, min_similarity=0.5)
            assert hits[0].experience.text == experiences(300, seed=3)[i].text
            e_hat = recon[hits[0].experience.id]
            cosine_with_e_hat = float(vecs[i] @ e_hat / np.linalg.norm(e_hat))
            # the score estimates q·e (here 1) from the code, closer than the cosine with ê does
            assert abs(hits[0].score - 1.0) < 0.5 * (1.0 - cosine_with_e_hat) and hits[0].score <= 1.0


def test_domain_filter_and_min_similarity(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.add_vectors(experiences(5, "math", 4) + experiences(5, "code", 5), unit(10, 4))
        hits = lib.search_vector(unit(10, 4)[0], k=10, min_similarity=-1, domain="code")
        assert {h.experience.domain for h in hits} == {"code"} and len(hits) == 5
        assert lib.search_vector(unit(1, 99)[0], k=5, min_similarity=0.9) == []


def test_delete_tombstones_and_blocks_redelivery(tmp_path, encoder, profile, identity):
    exps = experiences(5, seed=6)
    batch = make_batch(exps, unit(5, 6), profile, identity)
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.ingest(batch)
        assert lib.delete(exps[0].id) is True
        assert lib.delete(exps[0].id) is False
        assert lib.tombstones() == [exps[0].id]
        res = lib.ingest(batch)
        assert res.rejected == 1 and lib.get(exps[0].id) is None and len(lib) == 4


def test_update_reencodes_keeps_lineage_and_tombstones_old(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        old = lib.add("When stuck, draw a diagram", "math", 0.7)
        new = lib.update(old.id, "When stuck on geometry, draw a labelled diagram")
        assert lib.get(old.id) is None and old.id in lib.tombstones()
        assert lib.get(new.id).text == new.text and new.confidence == 0.7
        assert lib.rows.lineage(new.id) == old.id
        assert lib.search_vector(encoder.encode([new.text])[0], k=1)[0].experience.id == new.id


def test_unpublished_then_mark_published(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        ids = lib.add_vectors(experiences(3, seed=7), unit(3, 7))
        exps, codes = lib.unpublished()
        assert [e.id for e in exps] == ids and len(codes) == 3  # the codes stored, not a second compression
        stored = lib.search_index.index.reconstruct(np.concatenate([lib.search_index.rows_of(i) for i in ids]))
        np.testing.assert_allclose(decompress(codes), stored, atol=1e-6)
        lib.mark_published(exps[:2])
        assert [e.id for e in lib.unpublished()[0]] == ids[2:]


def test_capacity_evicts_lowest_quality_and_remembers(tmp_path, encoder, profile, identity):
    exps = [Experience(f"When case {i}, do thing {i}", "general", c) for i, c in enumerate([0.9, 0.2, 0.8, 0.1, 0.7])]
    batch = make_batch(exps, unit(5, 8), profile, identity)
    with open_lib(tmp_path, encoder, profile, capacity=3) as lib:
        res = lib.ingest(batch)
        assert sorted(res.evicted) == sorted([exps[1].id, exps[3].id])
        assert sorted(e.confidence for e in lib.all()) == [0.7, 0.8, 0.9]
        assert lib.ingest(batch).rejected == 2


def test_record_outcome_counts(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        exp = lib.add("When x, do y")
        lib.record_outcome(exp.id, True)
        lib.record_outcome(exp.id, False)
        assert lib.outcomes(exp.id) == (2, 1) and [(c.uses, c.helped) for c in lib.copies(exp.id)] == [(2, 1)]


def test_readers_read_while_a_writer_holds_a_transaction(tmp_path, encoder, profile, identity):
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.ingest(make_batch(experiences(4, seed=9), unit(4, 9), profile, identity))
        lib.db.execute("BEGIN IMMEDIATE")  # the file's locking itself: no call of the library holds a write open
        lib.db.execute("DELETE FROM experiences")
        reader = sqlite3.connect(str(tmp_path / "lib.sqlite"), timeout=0.1)
        assert reader.execute("SELECT COUNT(*) FROM experiences").fetchone() == (4,)
        lib.db.execute("ROLLBACK")
        reader.close()


def test_search_by_text_stops_at_max_tokens(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        texts = [f"When pattern {i} shows up, try approach {i} first" for i in range(4)]
        for t in texts:
            lib.add(t)
        hits = lib.search(texts[0], k=5, min_similarity=-1.0, max_tokens=2048)
        assert len(hits) == 4 and hits[0].experience.text == texts[0]
        assert len(lib.search(texts[0], k=5, min_similarity=-1.0, max_tokens=15)) == 1  # one 12-token line fits


def test_the_reference_pool_decodes_each_row_once_while_it_stays_in_the_pool(tmp_path, encoder, profile):
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.add_vectors(experiences(5, seed=1), unit(5, 1))
        first = lib.reference_vectors(8)
        read, vectors = [], lib.search_index.vectors

        def counted(rows):
            read.append(len(rows))
            return vectors(rows)

        lib.search_index.vectors = counted
        again = lib.reference_vectors(8)
        lib.add_vectors(experiences(1, seed=2), unit(1, 2))
        grown = lib.reference_vectors(8)
        assert read == [1]  # the next round's pool read nothing again; a new own row is read alone
        np.testing.assert_array_equal(again.vectors, first.vectors)
        np.testing.assert_array_equal(grown.vectors, vectors(lib.search_index.own_rows()))


def test_an_id_prefix_resolves_to_its_one_experience_or_says_what_to_give(tmp_path, encoder, profile):
    # two texts whose ids share their first 8 characters (found by search over "When twin {i} ...")
    twins = [Experience(f"When twin {i} shows up, do it", "general", 0.5) for i in (36731, 47744)]
    assert twins[0].id[:8] == twins[1].id[:8] and twins[0].id[:9] != twins[1].id[:9]
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.add_vectors(twins, unit(2))
        assert lib.resolve(twins[1].id[:9]) == twins[1].id
        with pytest.raises(LibraryError, match="ambiguous, more than one id begins with it; give more characters"):
            lib.resolve(twins[0].id[:8])
        with pytest.raises(LibraryError, match="exp_id: 'abc' is 3 characters; give at least 8"):
            lib.resolve("abc")
        with pytest.raises(LibraryError, match="no such experience"):
            lib.resolve("zzzzzzzz")


def test_copies_lists_each_signers_row_of_an_experience(tmp_path, encoder, profile, identity):
    exps, x = experiences(3, seed=6), unit(3, 6)
    with open_lib(tmp_path, encoder, profile) as lib:
        lib.add_vectors(exps, x)
        lib.ingest(make_batch(exps[:1], x[:1], profile, identity))
        lib.record_outcome(exps[0].id, True)
        copies = lib.copies(exps[0].id)
        assert [(c.received, c.float_held, c.uses, c.helped) for c in copies] == [(False, True, 1, 1), (True, False, 1, 1)]
        groups = DIM // profile.group_size
        assert {(c.sign_bytes, c.scale_bytes) for c in copies} == {(groups * (-(-profile.group_size // 32)) * 4, groups * 4)}
        assert lib.copies("0" * 64) == []
