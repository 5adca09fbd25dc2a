"""A lesson's scope and an asker's environment: parsing, the fit rule, the id it changes."""

import pytest

from dsonet.experience import Experience, experience_id
from dsonet.scope import Scope, ScopeError


def test_parse_normalises_names_sorts_and_splits_one_string():
    s = Scope.parse(["Scikit_Learn==1.3.2", "numpy==2.4.6, python==3.11.9"])
    assert s.strings() == ["numpy==2.4.6", "python==3.11.9", "scikit-learn==1.3.2"]
    assert str(s) == "numpy==2.4.6,python==3.11.9,scikit-learn==1.3.2" and s.get("scikit.learn") == "1.3.2"


@pytest.mark.parametrize("bad", ["numpy>=2", "numpy", "==2.4", "numpy==two", "numpy==2.4 numpy==2.5"])
def test_a_malformed_pin_is_refused_naming_it(bad):
    with pytest.raises(ScopeError, match="scope:"):
        Scope.parse([bad])


def test_too_many_pins_for_a_lesson_are_refused():
    with pytest.raises(ScopeError, match="at most 16"):
        Scope.parse([f"p{i}==1.0" for i in range(17)])
    assert len(Scope.parse([f"p{i}==1.0" for i in range(17)], limit=2000).pins) == 17


def test_same_major_minor_fits_and_another_contradicts():
    lesson = Scope.parse(["numpy==2.4.6", "python==3.12.1"])
    assert lesson.fit(Scope.parse(["numpy==2.4.0", "python==3.11.9"])).verdict == "fits"  # python not compared
    bad = lesson.fit(Scope.parse(["numpy==1.26.4", "pandas==2.0.3"]))
    assert bad.verdict == "contradicts" and bad.reason == "numpy 2.4.6 learned, 1.26.4 here"


def test_nothing_in_common_is_unknown():
    assert Scope().fit(Scope.parse(["numpy==1.26.4"])).verdict == "unknown"
    assert Scope.parse(["numpy==2.4.6"]).fit(Scope()).verdict == "unknown"
    assert Scope.parse(["numpy==2.4.6"]).fit(Scope.parse(["pandas==2.0.3"])).verdict == "unknown"


def test_python_decides_a_lesson_that_pins_nothing_else():
    stdlib = Scope.parse(["python==3.12.1"])
    assert stdlib.fit(Scope.parse(["python==3.11.9"])).verdict == "contradicts"
    assert stdlib.fit(Scope.parse(["python==3.12.7"])).verdict == "fits"


def test_used_in_keeps_the_askers_major_minor_of_the_lessons_pins():
    lesson = Scope.parse(["numpy==2.4.6"])
    assert lesson.used_in(Scope.parse(["numpy==1.26.4", "pandas==2.0.3", "python==3.11.9"])) == "numpy==1.26"
    assert lesson.used_in(Scope()) == ""


def test_an_unscoped_lesson_keeps_its_old_id_and_a_scope_makes_another():
    text = "When integrating samples, use np.trapezoid(z, x), not np.trapz."
    plain = Experience(text, "code.numpy")
    scoped = Experience(text, "code.numpy", scope=Scope.parse(["numpy==2.4.6"]))
    assert plain.id == experience_id(text, "code.numpy") and scoped.id != plain.id
    assert Experience.from_dict(scoped.to_dict()) == scoped and scoped.to_dict()["scope"] == ["numpy==2.4.6"]


def test_probe_reads_an_interpreters_distributions_and_a_lesson_names_its_own(tmp_path):
    import sys

    from dsonet.scope import probe

    here = probe(sys.executable)
    assert here.environment.get("python") == ".".join(map(str, sys.version_info[:3]))
    assert here.environment.get("numpy") is not None and "numpy" in here.modules["numpy"]
    scope = here.lesson_scope("When integrating samples, use np.trapezoid(z, x)", "import numpy as np\n")
    assert [n for n, _ in scope.pins] == ["numpy", "python"]


def test_probe_of_a_path_that_is_no_python_says_so(tmp_path):
    from dsonet.scope import probe

    with pytest.raises(ScopeError, match="--python: .*Python 3.10"):
        probe(str(tmp_path / "nope"))
