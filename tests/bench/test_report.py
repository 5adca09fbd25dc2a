import json

from dsonet.bench.report import write_results


def test_quick_runs_never_replace_the_full_results(tmp_path):
    full = write_results("codec", {"rows": [1]}, tmp_path)
    quick = write_results("codec", {"rows": [2]}, tmp_path, quick=True)
    assert (full.name, quick.name) == ("codec.json", "codec-quick.json")
    assert json.loads(full.read_text())["rows"] == [1]
    assert "machine" in json.loads(quick.read_text())
