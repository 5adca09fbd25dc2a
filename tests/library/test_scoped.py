"""A search in the asker's environment: contradicting lessons held back with why, fitting ones first."""

from dsonet.library import Library
from dsonet.scope import Scope

NEW = "When integrating samples, use np.trapezoid(z, x), not np.trapz"
OLD = "When integrating samples, use np.trapz(z, x); np.trapezoid is missing"
ANY = "When integrating samples, sort x first"
NUMPY_2 = Scope.parse(["numpy==2.4.6", "python==3.12.1"])
NUMPY_1 = Scope.parse(["numpy==1.26.4", "python==3.11.9"])


def _lib(tmp_path, encoder, profile):
    lib = Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile)
    lib.add(NEW, "code.numpy", scope=NUMPY_2)
    lib.add(OLD, "code.numpy", scope=NUMPY_1)
    lib.add(ANY, "code.numpy")
    return lib


def test_a_lesson_keeps_its_scope_in_the_file(tmp_path, encoder, profile):
    lib = _lib(tmp_path, encoder, profile)
    new = next(e for e in lib.all() if e.text == NEW)
    lib.close()
    again = Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile)
    assert again.get(new.id).scope == NUMPY_2 and again.scopes([new.id]) == {new.id: NUMPY_2}


def test_a_contradicting_lesson_is_held_back_with_why_and_the_fitting_one_ranks_first(tmp_path, encoder, profile):
    lib = _lib(tmp_path, encoder, profile)
    here = Scope.parse(["numpy==1.26.4", "pandas==2.0.3"], limit=2000)
    hits = lib.search(NEW, min_similarity=-1.0, environment=here)
    assert [h.experience.text for h in hits] == [OLD, ANY] and [h.fit for h in hits] == ["fits", "unknown"]
    assert [(b.text, b.reason) for b in hits.held_back] == [(NEW, "numpy 2.4.6 learned, 1.26.4 here")]
    assert hits.environment == here and hits.retrieval_id


def test_without_an_environment_every_lesson_is_returned_as_before(tmp_path, encoder, profile):
    hits = _lib(tmp_path, encoder, profile).search(NEW, min_similarity=-1.0)
    assert {h.experience.text for h in hits} == {NEW, OLD, ANY} and not hits.held_back and hits[0].fit == ""


def test_a_merged_cluster_shows_the_member_that_holds_here(tmp_path, encoder, profile):
    lib = Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile)
    new_copy = lib.add(NEW, "code.numpy", confidence=0.9, scope=NUMPY_2)  # the same words in two environments:
    old_copy = lib.add(NEW, "code.numpy", confidence=0.4, scope=NUMPY_1)  # one cluster, its representative new_copy
    hits = lib.search(NEW, min_similarity=-1.0, environment=NUMPY_1)
    assert len(hits) == 1 and hits[0].experience.id == old_copy.id and hits[0].experience.scope == NUMPY_1
    assert len(hits[0].members) == 2 and [b.id for b in hits.held_back] == [new_copy.id]  # that copy was not given


def test_k_counts_the_lessons_returned_not_those_held_back(tmp_path, encoder, profile):
    lib = Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile)
    for i in range(4):
        lib.add(f"When case {i} arises, call the new API number {i}", scope=NUMPY_2)
    lib.add("When case 9 arises, call the old API", scope=NUMPY_1)
    hits = lib.search("When case 0 arises, call the new API number 0", k=1, min_similarity=-1.0, environment=NUMPY_1)
    assert [h.experience.text for h in hits] == ["When case 9 arises, call the old API"]
    assert [b.text for b in hits.held_back] == ["When case 0 arises, call the new API number 0"]  # k = 1 of them


def test_export_and_import_keep_a_lessons_scope_in_jsonl_and_in_signed_batches(tmp_path, encoder, profile):
    from dsonet.identity import NodeIdentity
    from dsonet.library.transfer import export, import_file

    lib = _lib(tmp_path, encoder, profile)
    written = {fmt: export(lib, tmp_path / f"out.{fmt}", fmt, NodeIdentity.generate() if fmt == "msgpack" else None)
               for fmt in ("jsonl", "msgpack")}
    for fmt, paths in written.items():
        other = Library(tmp_path / f"{fmt}.sqlite", encoder=encoder, profile=profile)
        for p in paths:
            import_file(other, p)
        assert {(e.text, e.scope) for e in other.all()} == {(e.text, e.scope) for e in lib.all()}, fmt


def test_a_hand_written_jsonl_line_may_carry_a_scope_and_a_bad_one_names_its_line(tmp_path, encoder, profile):
    import json

    import pytest

    from dsonet.errors import DsoError
    from dsonet.library.transfer import import_file

    lib = Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": NEW, "domain": "code.numpy", "scope": ["numpy==2.4.6"]}) + "\n")
    assert import_file(lib, good) == 1 and lib.all()[0].scope == Scope.parse(["numpy==2.4.6"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": OLD}) + "\n" + json.dumps({"text": ANY, "scope": ["numpy>=2"]}) + "\n")
    with pytest.raises(DsoError, match="line 2.*name==version"):
        import_file(lib, bad)
    assert len(lib) == 1
