"""A lesson's evidence (the episodes and distinct agents that gave it, `Provenance`) in the library file:
written with its row, grown on this library's own row and published again, taken at its largest from a
peer's re-delivery whatever the order, refused when it is no count, taken up by a file from before, and
shown by `dso show` and `dso search --json`."""

import hashlib
import json
import sqlite3

import msgpack
import pytest
from click.testing import CliRunner

import dsonet.encoders
from dsonet.cli.main import cli
from dsonet.codec import make_batch
from dsonet.errors import DsoError
from dsonet.experience import MAX_EVIDENCE, Experience, ExperienceError, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.library.store.file import StoredRow
from dsonet.library.transfer import import_file
from lib_helpers import HashEncoder

LESSON = "When your code would use np.trapz, use np.trapezoid(y, x) instead"
PEER = NodeIdentity.from_seed(b"evidence-peer")


def _learned(episodes: int, agents: int, confidence: float = 0.3) -> Experience:
    return Experience(LESSON, "code", confidence, Provenance(PEER.node_id, "proxy", 0, 0, episodes, agents))


def _evidence(exp: Experience) -> tuple[int, int]:
    return exp.provenance.episodes, exp.provenance.agents


def test_an_own_lessons_evidence_grows_and_the_lesson_waits_to_be_published_again_with_it(tmp_path, encoder):
    with Library(tmp_path / "lib.sqlite", encoder=encoder) as lib:
        exp = lib.add(LESSON, "code", 0.3)
        assert _evidence(exp) == (0, 0)
        lib.mark_published([exp])
        assert _evidence(lib.add_evidence(exp.id, 1, 1)) == (1, 1)
        grown = lib.add_evidence(exp.id)  # one more episode, of an agent counted already
        assert grown.id == exp.id and _evidence(grown) == _evidence(lib.get(exp.id)) == (2, 1)
        (waiting,), _ = lib.unpublished()  # what a node signs next
        assert waiting.id == exp.id and _evidence(waiting) == (2, 1)
        hit = lib.search_vector(encoder.encode([LESSON])[0], k=1, min_similarity=0.5)[0]
        assert _evidence(hit.experience) == (2, 1)
        assert (hit.to_json()["provenance"]["episodes"], hit.to_json()["provenance"]["agents"]) == (2, 1)
        assert "provenance" not in hit.summary()  # what an agent reads is unchanged
        lib.add(LESSON, "code", 0.3)  # the same lesson added again (a proxy started again): its evidence stays
        assert _evidence(lib.get(exp.id)) == (2, 1)
        assert lib.add_evidence("0" * 64) is None


def test_an_edited_lesson_keeps_the_evidence_that_taught_it(tmp_path, encoder):
    with Library(tmp_path / "lib.sqlite", encoder=encoder) as lib:
        exp = lib.add(LESSON, "code", 0.3)
        lib.add_evidence(exp.id, 3, 2)
        new = lib.update(exp.id, LESSON.replace("instead", "instead: np.trapz is gone in NumPy 2"))
        assert new.id != exp.id and _evidence(new) == _evidence(lib.get(new.id)) == (3, 2)
        assert new.provenance.node_id == exp.provenance.node_id and lib.get(exp.id) is None


def test_a_peers_redelivery_with_more_evidence_updates_its_row_whatever_the_order(tmp_path, encoder, profile):
    vector = encoder.encode([LESSON])
    batches = [make_batch([_learned(e, a, c)], vector, profile, PEER) for e, a, c in ((1, 1, 0.3), (4, 2, 0.3),
                                                                                     (2, 2, 0.9))]
    for n, order in enumerate(((0, 1, 2), (2, 1, 0), (1, 2, 0))):
        with Library(tmp_path / f"{n}.sqlite", encoder=encoder, profile=profile) as lib:
            results = [lib.ingest(batches[i]) for i in order]
            assert [(len(r.added), r.duplicates) for r in results] == [(1, 0), (0, 1), (0, 1)]
            got = lib.get(_learned(0, 0).id)
            # the better code's confidence, and the most evidence its signer published, in every order
            assert (got.confidence, _evidence(got)) == (0.9, (4, 2))
            assert lib.add_evidence(got.id) is None  # a peer's row: only its signer counts its evidence


def test_a_lesson_whose_evidence_grew_while_its_batch_was_on_its_way_is_published_again(tmp_path, encoder):
    with Library(tmp_path / "lib.sqlite", encoder=encoder) as lib:
        exp = lib.add(LESSON, "code", 0.3)
        lib.add_evidence(exp.id, 1, 1)
        sent, _ = lib.unpublished()  # a node signs and sends these ...
        lib.add_evidence(exp.id, 1, 1)  # ... while another agent's episode comes in
        lib.mark_published(sent)
        (again,), _ = lib.unpublished()
        assert again.id == exp.id and _evidence(again) == (2, 2)
        lib.mark_published([again])
        assert lib.count_unpublished() == 0


@pytest.mark.parametrize("episodes,agents,says", [
    (-1, 0, r"^episodes: -1 must be an integer in \[0, 1000000000\]"),
    (0.5, 0, "^episodes: 0.5 must be an integer"),
    (1, 2, "^agents: 2 agents but 1 episodes"),
    (MAX_EVIDENCE, 0, "provenance.episodes: 1000000001 must be"),  # past the bound once added to the row's
])
def test_evidence_that_is_no_count_is_refused_naming_the_field_and_nothing_is_stored(tmp_path, encoder, episodes,
                                                                                    agents, says):
    with Library(tmp_path / "lib.sqlite", encoder=encoder) as lib:
        exp = lib.add(LESSON, "code", 0.3)
        lib.add_evidence(exp.id, 1, 1)
        lib.mark_published(lib.unpublished()[0])
        with pytest.raises(ExperienceError, match=says):
            lib.add_evidence(exp.id, episodes, agents)
        assert _evidence(lib.get(exp.id)) == (1, 1) and lib.count_unpublished() == 0
        assert _evidence(lib.add_evidence(exp.id)) == (2, 1)  # the file is not left in a transaction


def test_a_batch_or_export_claiming_evidence_that_is_no_count_imports_nothing(tmp_path, encoder, profile):
    content = msgpack.unpackb(make_batch([_learned(3, 2)], encoder.encode([LESSON]), profile, PEER).content)
    content["rows"][0][6] = -3
    signed = msgpack.packb(content)
    (tmp_path / "batch.msgpack").write_bytes(
        msgpack.packb([signed, PEER.sign(hashlib.sha256(signed).hexdigest().encode())]))
    exported = {**_learned(3, 2).to_dict(), "provenance": {"node_id": "n1", "episodes": 2, "agents": 2**40}}
    (tmp_path / "lessons.jsonl").write_text(json.dumps(exported) + "\n")
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile) as lib:
        with pytest.raises(DsoError, match="rows.0.episodes: expected an integer in"):
            import_file(lib, tmp_path / "batch.msgpack")
        with pytest.raises(DsoError, match="line 1: provenance.agents: 1099511627776 must be an integer"):
            import_file(lib, tmp_path / "lessons.jsonl")
        assert lib.all() == []


def test_a_file_from_before_evidence_opens_with_none_and_keeps_what_it_is_given(tmp_path, encoder, profile):
    path = tmp_path / "old.sqlite"
    with Library(path, encoder=encoder, profile=profile) as lib:
        exp = lib.add(LESSON, "code", 0.3)
    db = sqlite3.connect(path)  # the table as it was before the columns: scope last
    for column in ("agents", "episodes"):
        db.execute(f"ALTER TABLE experiences DROP COLUMN {column}")
    db.commit()
    db.close()
    with Library(path, encoder=encoder, profile=profile) as lib:
        assert tuple(c for _, c, *_ in lib.db.execute("PRAGMA table_info(experiences)")) == StoredRow._fields
        assert _evidence(lib.get(exp.id)) == (0, 0)
        assert _evidence(lib.add_evidence(exp.id, 1, 1)) == (1, 1)
        lib.ingest(make_batch([_learned(3, 2)], encoder.encode([LESSON]), profile, PEER))
    with Library(path, encoder=encoder, profile=profile) as lib:
        _, (peers,) = lib.listing(signer=PEER.node_id)
        rows = {e.provenance.node_id: _evidence(e) for e in (lib.get(exp.id), peers)}
        assert rows == {"": (1, 1), PEER.node_id: (3, 2)} and len(lib.copies(exp.id)) == 2


def test_show_and_search_from_the_shell_give_a_lessons_evidence(tmp_path, monkeypatch):
    monkeypatch.setattr(dsonet.encoders, "default_encoder", HashEncoder)
    db = tmp_path / "lib.sqlite"

    def run(*args) -> str:
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    exp_id = run("add", LESSON, "--domain", "code", "--confidence", "0.3", "--db", db).strip()
    assert "evidence" not in run("show", exp_id[:12], "--db", db)  # a lesson written by hand has none
    with Library(db) as lib:
        lib.add_evidence(exp_id, 1, 1)
        lib.add_evidence(exp_id, 1, 1)
        lib.add_evidence(exp_id)
    assert f"{exp_id}  [code]  confidence 0.3  evidence: 3 episodes, 2 agents\n" in run("show", exp_id[:12], "--db", db)
    shown = json.loads(run("show", exp_id[:12], "--db", db, "--json"))
    (hit,) = map(json.loads, run("search", LESSON, "--min-similarity", "0.9", "--json", "--db", db).splitlines())
    assert shown["provenance"]["episodes"] == hit["provenance"]["episodes"] == 3
    assert shown["provenance"]["agents"] == hit["provenance"]["agents"] == 2
    with Library(db) as lib:  # a peer's proxies learned the same lesson from their own agents: the counts add up
        lib.ingest(make_batch([_learned(2, 2)], lib.encoder.encode([LESSON]), lib.profile, PEER))
    shown = run("show", exp_id[:12], "--db", db)
    assert "confidence 0.3  evidence: 5 episodes, 4 agents (from 2 signers)\n" in shown
    assert f"code from {PEER.node_id[:12]}: " in shown and "evidence 2 episodes, 2 agents" in shown
