"""Data flows one way through the layers: a lower layer never imports a higher one.

Checked twice: statically, every import statement of every module (lazy ones inside functions
included); and live, importing each layer in a fresh interpreter and looking at what came in.
Also checked: no module imports itself back through others (an import circle), and a function
imports lazily only what `dsonet`'s docstring allows (heavy optional dependencies, the CLI) and scipy
(SLOW_CORE: slow to import).
"""

import ast
import importlib.machinery
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dsonet
from dsonet.cli.main import EXTRAS
from dsonet.library import Library

SRC = Path(dsonet.__file__).parent
# lowest first; one number a layer, equal numbers are siblings that must not import each other (scope sits
# between errors and experience, which hashes it into an id)
LAYERS = {"errors": 0, "scope": 0.5, "experience": 1, "identity": 1, "data": 1, "asgi": 1, "codec": 2, "encoders": 3, "library": 4, "train": 4,
          "aggregate": 5, "network": 6, "learn": 7, "sim": 8, "memory": 8, "mcp": 9, "proxy": 9, "serve": 9, "integrations": 9,
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


# The library's rooms, lowest first (see `dsonet.library.library`): a room imports only rooms below it. Its
# top-level modules are the words every room speaks (errors, the retrieval policy, the hit types, a received
# batch as admitted: below the rooms, importing none) or the façade over them.
LIBRARY_ROOMS = {"words": 0, "store": 1, "index": 2, "view": 3, "facade": 4}
LIBRARY_WORDS = {"errors", "policy", "hits", "admitted"}
LIBRARY_FACADE = {"library", "writes", "contract", "retrievals", "transfer"}


def _library_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["dsonet", "library"] or len(parts) < 3:
        return None
    if parts[2] in ("store", "index", "view"):
        return parts[2]
    return "words" if parts[2] in LIBRARY_WORDS else "facade"


def test_the_librarys_rooms_import_only_rooms_below_them():
    graph = import_graph(SRC, "dsonet")
    bad = sorted(f"{module} imports {other}" for module, edges in graph.items() for other in edges
                 if (room := _library_room(module)) and (theirs := _library_room(other)) and theirs != room
                 and LIBRARY_ROOMS[theirs] > LIBRARY_ROOMS[room])
    assert not bad


def test_every_library_module_sits_in_a_room_or_is_named_a_word_or_the_facade():
    top = {path.stem for path in (SRC / "library").glob("*.py")} - {"__init__"}
    rooms = {path.name for path in (SRC / "library").iterdir() if (path / "__init__.py").exists()}
    assert (rooms, top) == ({"store", "index", "view"}, LIBRARY_WORDS | LIBRARY_FACADE)


def test_the_library_takes_no_lock_from_its_caller():
    """The node's turns on its lock are the node's (`dsonet.network.ingest`): the library offers steps."""
    takes_lock = [name for name, fn in inspect.getmembers(Library, inspect.isfunction)
                  if "lock" in inspect.signature(fn).parameters]
    assert not takes_lock


# -- import circles ----------------------------------------------------------------------------------
# The graph is static: every import statement (inside functions and `if TYPE_CHECKING:` too) and every
# `import_module("dsonet...")` with a literal name is an edge. A package's own `__init__` is not an edge of
# its submodules' imports (Python runs it first, whatever the order), so `from dsonet.codec import kernels`
# leads to `dsonet.codec.kernels` and `from dsonet.library import Library` to `dsonet.library`.

def _module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (rooted at ``root``) by dotted name, compiled extensions included, built or
    not (a C source is the extension it builds: an install without the kernels must not show a circle)."""
    names = {}
    for path in root.rglob("*"):
        suffix = next((s for s in (".py", *importlib.machinery.EXTENSION_SUFFIXES, ".c") if path.name.endswith(s)),
                      None)
        if suffix is None:
            continue
        parts = [package, *path.relative_to(root).parts[:-1], path.name[:-len(suffix)]]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _import_nodes(tree: ast.Module, top_only: bool = False):
    """(node, inside a function) for every node of a module that may import; ``top_only``: only what
    runs when the module is imported (no function bodies, no `if TYPE_CHECKING:` blocks)."""
    def visit(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if top_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            deeper = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if top_only and deeper:
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom, ast.Call)):
                yield child, in_function
            yield from visit(child, deeper)
    yield from visit(tree, False)


def _imported(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """What one AST node imports: a module of ``modules`` where the name is one, else the dotted name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = module.split(".") if is_package else module.split(".")[:-1]
        origin = ".".join(base[:len(base) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
            else node.module
        submodules = [f"{origin}.{a.name}" for a in node.names if f"{origin}.{a.name}" in modules]
        return submodules + ([origin] if len(submodules) < len(node.names) else [])
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func
        if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) == "import_module":
            return [node.args[0].value]
    return []


def import_graph(root: Path, package: str, top_only: bool = False) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (``top_only``: when it is itself imported)."""
    modules = _module_names(root, package)
    graph = {}
    for name, path in modules.items():
        nodes = _import_nodes(ast.parse(path.read_text()), top_only) if path.suffix == ".py" else ()
        graph[name] = {n for node, _ in nodes for n in _imported(node, name, path.name == "__init__.py", modules)
                       if n in modules and n != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # recursion depth is the longest import chain, a few dozen
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def _as_path(circle: list[str], graph: dict[str, set[str]]) -> str:
    """One shortest way round a circle, as a → b → a (breadth first from its first module)."""
    start, inside = circle[0], set(circle)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    way = [v]
                    while way[-1] != start:
                        way.append(came_from[way[-1]])
                    return " → ".join([*reversed(way), start])
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    return " → ".join(circle)


def test_no_module_imports_itself_back_through_others():
    graph = import_graph(SRC, "dsonet")
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n".join(_as_path(c, graph) for c in circles)


def test_the_circle_check_sees_lazy_imports_import_module_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("import importlib\n\ndef g():\n    return importlib.import_module('pkg.a')\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # into the circle, not part of it
    graph = import_graph(pkg, "pkg")
    assert import_circles(graph) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]
    assert _as_path(["pkg.a", "pkg.sub.b", "pkg.sub.c"], graph) == "pkg.a → pkg.sub.b → pkg.sub.c → pkg.a"
    assert import_circles(import_graph(pkg, "pkg", top_only=True)) == []  # the circle runs through functions


# -- imports at the top --------------------------------------------------------------------------------
# Where a function may import (`dsonet`'s docstring says it): a heavy optional dependency, a dsonet module that
# imports one when it loads, and in the CLI any module `dso --help` does not load already (its start-up time).
HEAVY = {*EXTRAS, "uvicorn", "langchain_core", "huggingface_hub"}
# A core dependency slow to import: scipy.sparse takes 0.1-0.4 s, and `dso node --help`, `dso search --help`...
# load the library (their option defaults live there), so the library's duplicate clusters import it when run.
SLOW_CORE = {"scipy"}
# a framework's adapter exists to drive its optional package (`dso bench agents --framework smolagents` imports it
# only when asked, and says how to install it when it is missing)
FRAMEWORK_ADAPTERS = {"agent_smolagents"}
CLEAN_BENCHES = tuple(sorted(path.stem for path in (SRC / "bench").glob("*.py")
                             if path.stem != "__init__" and path.stem not in FRAMEWORK_ADAPTERS))


def _heavy_modules() -> set[str]:
    """The dsonet modules whose import (parent packages included) loads a heavy dependency."""
    modules = _module_names(SRC, "dsonet")
    direct = {name for name, path in modules.items() if path.suffix == ".py" and any(
        n.split(".")[0] in HEAVY for node, _ in _import_nodes(ast.parse(path.read_text()), top_only=True)
        for n in _imported(node, name, path.name == "__init__.py", modules))}
    graph = import_graph(SRC, "dsonet", top_only=True)
    for name in graph:  # importing a.b.c runs a and a.b first
        graph[name] |= {".".join(name.split(".")[:i]) for i in range(2, name.count(".") + 1)}
    heavy, grew = set(direct), True
    while grew:
        more = {name for name, edges in graph.items() if edges & heavy} - heavy
        heavy, grew = heavy | more, bool(more)
    return heavy


def _lazy_imports() -> list[tuple[str, int, str]]:
    """(file, line, imported module) for every import inside a function of the package."""
    modules = _module_names(SRC, "dsonet")
    by_path = {path: name for name, path in modules.items()}
    return [(str(path.relative_to(SRC)), node.lineno, target) for path in sorted(SRC.rglob("*.py"))
            for node, in_function in _import_nodes(ast.parse(path.read_text()))
            if in_function and not isinstance(node, ast.Call)
            for target in _imported(node, by_path[path], path.name == "__init__.py", modules)]


def test_functions_import_lazily_only_heavy_dependencies_or_for_the_clis_start_up():
    heavy = _heavy_modules()
    code = "import json, sys, dsonet.cli.main; print(json.dumps(sorted(sys.modules)))"
    at_start = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                             check=True).stdout))
    needless = [f"{file}:{line} imports {target}" for file, line, target in _lazy_imports()
                if target.split(".")[0] not in HEAVY | SLOW_CORE and target not in heavy
                and not (file.startswith("cli/") and target not in at_start)]
    assert not needless, "imports that belong at the top of their module:\n" + "\n".join(needless)


def test_a_module_that_loads_torch_when_imported_counts_as_heavy():
    heavy = _heavy_modules()
    assert {"dsonet.encoders.zen", "dsonet.train.run", "dsonet.train.stages"} <= heavy
    assert not {"dsonet.encoders.registry", "dsonet.learn.llm", "dsonet.codec"} & heavy


def test_the_commands_that_load_the_library_for_their_help_load_no_slow_core_dependency():
    # what keeps SLOW_CORE's imports in functions worth it; dsonet.cli.network is `dso node`'s module
    code = "import json, sys, dsonet.cli.library, dsonet.cli.network; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert "dsonet.library" in loaded and not sorted({m.split(".")[0] for m in loaded} & SLOW_CORE)


def test_the_clean_benches_load_no_optional_dependency_when_imported():
    # `dso bench NAME --help` imports the bench, with the core install too; the static check above cannot see
    # a package's lazy `__getattr__` (`from dsonet.train import train` loads torch), a fresh interpreter does
    names = ", ".join(f"dsonet.bench.{name}" for name in CLEAN_BENCHES)
    code = f"import json, sys, {names}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert not sorted({m.split(".")[0] for m in loaded} & HEAVY)


def test_the_aggregation_maths_does_not_know_the_storage():
    """DeltaSoup's rules read arrays and `dsonet.codec.reference.Reference`; none reaches into the library."""
    bad = [f"{path.relative_to(SRC)} imports {name}" for layer, path in _modules() if layer == "aggregate"
           for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))
           for name in ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                        [a.name for a in node.names] if isinstance(node, ast.Import) else [])
           if _layer(name) == "library"]
    assert not bad
