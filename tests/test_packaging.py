"""The package installs anywhere: the core needs no torch, and the C kernels build only where they can.

`make test` also runs these (with the codec, identity and relay-node tests) in fresh Python 3.12
and 3.13 venvs holding only the core; 3.13 builds without the kernels (DSONET_NO_KERNELS=1).
"""

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "llama_cpp", "cyllama", "openai", "matplotlib", "mcp")


def _extras_loaded_by(code: str) -> str:
    """Run ``code`` in a fresh interpreter; the extras' modules it left imported, comma-separated."""
    probe = f"{code}\nimport sys; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_the_core_imports_without_torch_or_any_extra():
    assert _extras_loaded_by("import dsonet.cli.main, dsonet.codec, dsonet.library, dsonet.network.node, "
                             "dsonet.network.api, dsonet.network.client, dsonet.identity, dsonet.memory, "
                             "dsonet.proxy.app") == ""


def test_dso_help_lists_every_command_without_importing_an_extra():
    assert _extras_loaded_by("from click.testing import CliRunner; from dsonet.cli.main import cli; "
                             "r = CliRunner().invoke(cli, ['--help']); "
                             "assert r.exit_code == 0 and 'proxy' in r.output, r.output") == ""


@pytest.mark.skipif(os.environ.get("DSONET_NO_KERNELS") != "1", reason="only where the package was built without them")
def test_a_build_without_kernels_has_none():
    assert importlib.util.find_spec("dsonet.codec._kernels") is None


@pytest.mark.slow
@pytest.mark.parametrize("disabled", ["1", "0"])
def test_the_build_guard_leaves_the_kernels_out_when_disabled(tmp_path, disabled):
    """The wheel from this tree: with DSONET_NO_KERNELS=1 no compiled module, else one (on x86-64)."""
    env = {**os.environ, "DSONET_NO_KERNELS": disabled}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, env=env, capture_output=True)
    (wheel,) = tmp_path.glob("dsonet-*.whl")
    compiled = [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("dsonet/codec/_kernels") and
                n.endswith((".so", ".pyd"))]
    assert len(compiled) == (0 if disabled == "1" else 1)
