"""The core install encodes text: `pip install .` into a fresh venv brings no torch, and the
README's shell example (`dso add`, then `dso search`) finds the lesson with the default encoder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
LESSON = "When a ratio is asked, simplify the fraction by the greatest common divisor."


@pytest.mark.slow
def test_the_core_install_adds_and_searches_text_without_torch(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, dso = venv / "bin" / "python", venv / "bin" / "dso"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True, text=True,
                             timeout=1200)
    assert install.returncode == 0, install.stderr[-2000:]
    no_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    db = str(tmp_path / "library.sqlite")
    added = subprocess.run([str(dso), "add", LESSON, "--domain", "math.ratios", "--db", db], capture_output=True,
                           text=True, timeout=300)
    assert added.returncode == 0, added.stderr
    found = subprocess.run([str(dso), "search", "Simplify the ratio 12:18.", "--min-similarity", "0.3", "--json",
                            "--db", db], capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    best = json.loads(found.stdout.splitlines()[0])  # one JSON object a hit, best first
    assert best["text"] == LESSON and best["id"] == added.stdout.strip() and best["domain"] == "math.ratios"
