"""Encoders sit below training (which trains their heads) and below the CLI: loading an encoder
never imports either, so it can never start a training run."""

import ast
import subprocess
import sys
from pathlib import Path

import dsonet

SRC = Path(dsonet.__file__).parent


def _imports(package: str) -> dict[str, set[str]]:
    found = {}
    for path in (SRC / package).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[str(path.relative_to(SRC))] = names
    return found


def test_no_encoder_module_imports_training_or_anything_above_it():
    above = ("dsonet.train", "dsonet.library", "dsonet.aggregate", "dsonet.network", "dsonet.learn", "dsonet.cli", "dsonet.bench")
    bad = {f: sorted(m for m in mods if m.startswith(above)) for f, mods in _imports("encoders").items()}
    assert not {f: m for f, m in bad.items() if m}


def test_training_never_imports_the_cli():
    bad = {f: sorted(m for m in mods if m.startswith("dsonet.cli")) for f, mods in _imports("train").items()}
    assert not {f: m for f, m in bad.items() if m}


def test_python_m_dsonet_train_takes_the_cli_options_without_loading_the_cli():
    code = ("import runpy, sys\nsys.argv = ['dsonet.train', '--help']\n"
            "try:\n    runpy.run_module('dsonet.train', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('CLI LOADED' if 'dsonet.cli' in sys.modules else 'no cli')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "--s3-steps" in out and "--max-steps" in out and "no cli" in out
