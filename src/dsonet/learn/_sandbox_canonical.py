"""Canonical forms of a run's result: what `same` compares (sandbox.py documents the format).

Beside the worker in the sandbox (bound read-only next to it, stdlib only: numpy, pandas, networkx
and scipy are read from `sys.modules`, where the worker's --preload put them).
"""

from __future__ import annotations

import json
import math
import re
import sys

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # "<bound method ... of <... object at 0x7f95480...>>"
MAX_ITEMS = 100_000  # elements in one array or frame turned into JSON; larger results are errors


def canonical(v: object, depth: int = 0) -> object:
    if depth > 32:
        return _opaque(v)
    if v is None or isinstance(v, (bool, str)):
        return v
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(v, np.ndarray):
            return {"ndarray": _array(v, depth)}
        if isinstance(v, np.generic):
            return {"npscalar": {"dtype": str(v.dtype), "value": canonical(v.item(), depth + 1)}}
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, complex):
        return {"complex": [_float(v.real), _float(v.imag)]}
    if isinstance(v, list):
        return [canonical(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [canonical(x, depth + 1) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"set": _sorted([canonical(x, depth + 1) for x in v])}
    if isinstance(v, dict):
        pairs = [[canonical(k, depth + 1), canonical(x, depth + 1)] for k, x in v.items()]
        return {"dict": sorted(pairs, key=lambda p: _key(p[0]))}
    for form in (_pandas, _graph, _sparse):
        found = form(v, depth)
        if found is not None:
            return found
    return _opaque(v)


def _float(x: float) -> object:
    return x if math.isfinite(x) else {"float": repr(x)}  # 'nan', 'inf', '-inf': JSON has no such numbers


def _array(a, depth: int) -> dict:
    if a.size > MAX_ITEMS:
        raise ValueError(f"the result has {a.size} elements (the sandbox returns at most {MAX_ITEMS})")
    values = [canonical(x, depth + 1) for x in a.ravel().tolist()]
    return {"dtype": str(a.dtype), "shape": list(a.shape), "values": values}


def _pandas(v: object, depth: int) -> object:
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    if isinstance(v, pd.DataFrame):
        if v.size > MAX_ITEMS:
            raise ValueError(f"the result has {v.size} cells (the sandbox returns at most {MAX_ITEMS})")
        return {"DataFrame": {
            "columns": _index(v.columns, depth), "index": _index(v.index, depth),
            "dtypes": [str(t) for t in v.dtypes],
            "values": [[canonical(x, depth + 1) for x in v.iloc[:, i].tolist()] for i in range(v.shape[1])],
        }}
    if isinstance(v, pd.Series):
        if v.size > MAX_ITEMS:
            raise ValueError(f"the result has {v.size} elements (the sandbox returns at most {MAX_ITEMS})")
        return {"Series": {"name": canonical(v.name, depth + 1), "dtype": str(v.dtype), "index": _index(v.index, depth),
                           "values": [canonical(x, depth + 1) for x in v.tolist()]}}
    if isinstance(v, pd.Index):
        return _index(v, depth)
    if v is pd.NA or v is pd.NaT:
        return {"na": repr(v)}
    return None


def _index(ix, depth: int) -> dict:
    if ix.size > MAX_ITEMS:
        raise ValueError(f"the result's index has {ix.size} labels (the sandbox returns at most {MAX_ITEMS})")
    return {"Index": {"dtype": str(ix.dtype), "names": [canonical(n, depth + 1) for n in ix.names],
                      "values": [canonical(x, depth + 1) for x in ix.tolist()]}}


def _graph(v: object, depth: int) -> object:
    nx = sys.modules.get("networkx")
    if nx is None or not isinstance(v, nx.Graph):
        return None
    directed = v.is_directed()
    nodes = _sorted([[canonical(n, depth + 1), canonical(d, depth + 1)] for n, d in v.nodes(data=True)])
    edges = []
    for edge in (v.edges(keys=True, data=True) if v.is_multigraph() else v.edges(data=True)):
        ends = [canonical(edge[0], depth + 1), canonical(edge[1], depth + 1)]
        if not directed:
            ends = _sorted(ends)  # an undirected edge has no first end
        edges.append(ends + [canonical(x, depth + 1) for x in edge[2:]])
    return {"graph": {"directed": directed, "multigraph": v.is_multigraph(), "attrs": canonical(v.graph, depth + 1),
                      "nodes": nodes, "edges": _sorted(edges)}}


def _sparse(v: object, depth: int) -> object:
    sparse = sys.modules.get("scipy.sparse")
    if sparse is None or not sparse.issparse(v):
        return None
    return {"sparse": _array(v.toarray(), depth)}


def _opaque(v: object) -> dict:
    return {"repr": stable(repr(v))[:200], "type": f"{type(v).__module__}.{type(v).__qualname__}"}


def _key(c: object) -> str:
    return json.dumps(c, sort_keys=True)


def _sorted(items: list) -> list:
    return sorted(items, key=_key)


def stable(text: str) -> str:
    """`text` without memory addresses: what a run shows goes into a reflector's prompt (and the answer
    cache's key), so the same answer must show the same text in every run."""
    return ADDRESS.sub("", text)
