"""Data flows one way through the layers: a lower layer never imports a higher one.

Checked twice: statically, every import statement of every module (lazy ones inside functions
included); and live, importing each layer in a fresh interpreter and looking at what came in.
"""

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dsonet
from dsonet.library import Library

SRC = Path(dsonet.__file__).parent
# lowest first; one number a layer, equal numbers are siblings that must not import each other
LAYERS = {"errors": 0, "experience": 1, "identity": 1, "data": 1, "asgi": 1, "codec": 2, "encoders": 3, "library": 4, "train": 4,
          "aggregate": 5, "network": 6, "learn": 7, "sim": 8, "memory": 8, "mcp": 9, "proxy": 9, "integrations": 9,
          "bench": 10, "demo": 11, "cli": 12}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "dsonet" and len(parts) > 1 else None


def _modules():
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        yield (rel.parts[0] if len(rel.parts) > 1 else rel.stem), path


def test_every_module_belongs_to_a_layer():
    assert not sorted({layer for layer, _ in _modules() if layer not in LAYERS and layer != "__init__"})


def test_no_module_imports_a_higher_or_sibling_layer():
    bad = []
    for layer, path in _modules():
        if layer == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                other = _layer(name)
                if other in LAYERS and other != layer and LAYERS[other] >= LAYERS[layer]:
                    bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad


@pytest.mark.parametrize("layer", ["codec", "encoders", "library", "aggregate", "network", "learn"])
def test_importing_a_layer_in_a_fresh_interpreter_brings_no_higher_layer(layer):
    code = f"import json, sys, dsonet.{layer}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    higher = sorted({_layer(m) for m in loaded if _layer(m) in LAYERS and LAYERS[_layer(m)] > LAYERS[layer]})
    assert not higher


def test_only_the_codec_reaches_its_compiled_kernels():
    users = [str(path.relative_to(SRC)) for layer, path in _modules()
             if layer != "codec" and "_kernels" in path.read_text()]
    assert not users


# A node's rooms, lowest first (see `dsonet.network.node`): ingest and publish keep their state in the
# ledger and never import each other; the node builds them all.
NODE_ROOMS = {"ledger": 0, "ingest": 1, "publish": 1, "node": 2}


def test_a_nodes_rooms_import_only_rooms_below_them():
    bad = []
    for room, rank in NODE_ROOMS.items():
        path = SRC / "network" / f"{room}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dsonet.network."):
                other = node.module.split(".")[2]
                if other in NODE_ROOMS and other != room and NODE_ROOMS[other] >= rank:
                    bad.append(f"network/{room}.py imports {node.module}")
    assert not bad


def test_the_library_takes_no_lock_from_its_caller():
    """The node's turns on its lock are the node's (`dsonet.network.ingest`): the library offers steps."""
    takes_lock = [name for name, fn in inspect.getmembers(Library, inspect.isfunction)
                  if "lock" in inspect.signature(fn).parameters]
    assert not takes_lock
