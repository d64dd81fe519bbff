"""Graph interchange: the JSON format, order files, and networkx conversion.

JSON format (read and written exactly)::

    {"name": str,
     "tensors": [{"name": str, "bytes": int}],
     "ops": [{"name": str, "inputs": [str], "outputs": [str], "workspace_bytes": int,
              "inplace": [{"output": str, "input": str, "shift": int}]}],
     "inputs": [str],
     "outputs": [str]}

``workspace_bytes`` and ``inplace`` (outputs that may be written over a dying
input, see :class:`~tvm_memsched.core.graph.Graph`) are optional. Extra keys on ops (``attrs``) are
kept as free-form attributes.

Example
-------
>>> g = graph_from_dict({"name": "g", "tensors": [{"name": "x", "bytes": 4}, {"name": "y", "bytes": 4}],
...                      "ops": [{"name": "A", "inputs": ["x"], "outputs": ["y"]}],
...                      "inputs": ["x"], "outputs": ["y"]})
>>> graph_from_dict(graph_to_dict(g)) == g
True
>>> from_networkx(to_networkx(g)) == g
True
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from .errors import GraphError, InputFileError, OrderError
from .files import atomic_write
from .graph import Graph, Op

__all__ = ["graph_from_dict", "graph_to_dict", "load_graph", "save_graph", "load_order",
           "to_networkx", "from_networkx"]

_GRAPH_KEYS = {"name", "tensors", "ops", "inputs", "outputs"}
_OP_KEYS = {"name", "inputs", "outputs", "workspace_bytes", "attrs", "inplace"}


def _expect(obj, typ, what):
    if not isinstance(obj, typ):
        tname = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise GraphError(f"{what} must be a {tname}, got {type(obj).__name__}")
    return obj


def graph_from_dict(data: Mapping[str, Any]) -> Graph:
    """Build a :class:`Graph` from the JSON object described in the module docstring."""
    _expect(data, dict, "the graph JSON")
    for key in ("tensors", "ops"):
        if key not in data:
            raise GraphError(f"the graph JSON has no '{key}' list")
    unknown = set(data) - _GRAPH_KEYS
    if unknown:
        raise GraphError(f"the graph JSON has unknown key(s): {', '.join(sorted(unknown))}")
    tensors = []
    for i, t in enumerate(_expect(data["tensors"], list, "'tensors'")):
        _expect(t, dict, f"tensors[{i}]")
        extra = set(t) - {"name", "bytes"}
        if extra or "name" not in t or "bytes" not in t:
            raise GraphError(f"tensors[{i}] must have exactly the keys 'name' and 'bytes', got {sorted(t)}")
        tensors.append((t["name"], t["bytes"]))
    ops = []
    for i, o in enumerate(_expect(data["ops"], list, "'ops'")):
        _expect(o, dict, f"ops[{i}]")
        if "name" not in o:
            raise GraphError(f"ops[{i}] has no 'name'")
        extra = set(o) - _OP_KEYS
        if extra:
            raise GraphError(f"op '{o['name']}' has unknown key(s): {', '.join(sorted(extra))}")
        ins = _expect(o.get("inputs", []), list, f"inputs of op '{o['name']}'")
        outs = _expect(o.get("outputs", []), list, f"outputs of op '{o['name']}'")
        attrs = _expect(o.get("attrs", {}), dict, f"attrs of op '{o['name']}'")
        inplace = []
        for j, p in enumerate(_expect(o.get("inplace", []), list, f"inplace of op '{o['name']}'")):
            _expect(p, dict, f"inplace[{j}] of op '{o['name']}'")
            if set(p) - {"output", "input", "shift"} or "output" not in p or "input" not in p:
                raise GraphError(f"inplace[{j}] of op '{o['name']}' must have the keys 'output', 'input' "
                                 f"and optionally 'shift', got {sorted(p)}")
            inplace.append((p["output"], p["input"], p.get("shift", 0)))
        ops.append(Op(o["name"], ins, outs, o.get("workspace_bytes", 0), attrs, inplace=inplace))
    inputs = _expect(data.get("inputs", []), list, "'inputs'")
    outputs = _expect(data.get("outputs", []), list, "'outputs'")
    name = data.get("name", "graph")
    _expect(name, str, "'name'")
    return Graph(tensors, ops, inputs, outputs, name=name)


def graph_to_dict(graph: Graph) -> dict:
    """The JSON object of ``graph`` (inverse of :func:`graph_from_dict`)."""
    ops = []
    for op in graph.ops:
        d = {"name": op.name, "inputs": list(op.inputs), "outputs": list(op.outputs),
             "workspace_bytes": op.workspace_bytes}
        if op.attrs:
            d["attrs"] = dict(op.attrs)
        if op.inplace:
            d["inplace"] = [{"output": o, "input": i, "shift": s} for o, i, s in op.inplace]
        ops.append(d)
    return {
        "name": graph.name,
        "tensors": [{"name": t.name, "bytes": t.bytes} for t in graph.tensors],
        "ops": ops,
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
    }


def _read_json(path: str | os.PathLike, what: str):
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputFileError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputFileError(f"cannot read {what} file {path}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise InputFileError(f"{path}: the JSON is nested too deeply") from None
    except ValueError as e:          # e.g. an integer literal with thousands of digits
        raise InputFileError(f"{path} is not usable JSON: {e}") from None


def load_graph(path: str | os.PathLike) -> Graph:
    """Read a graph JSON file. Raises :class:`InputFileError` or :class:`GraphError`."""
    data = _read_json(path, "graph")
    try:
        return graph_from_dict(data)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as JSON to ``path`` atomically (complete or not at all)."""
    atomic_write(path, json.dumps(graph_to_dict(graph), indent=1) + "\n")


def load_order(path: str | os.PathLike) -> list:
    """Read an order file: a JSON list of op names, or an object with an ``"order"`` list."""
    data = _read_json(path, "order")
    if isinstance(data, dict):
        if "order" not in data:
            raise OrderError(f"{path}: an order object needs an 'order' list")
        data = data["order"]
    if not isinstance(data, list):
        raise OrderError(f"{path}: an order must be a JSON list of op names or {{\"order\": [...]}}")
    return data


def to_networkx(graph: Graph):
    """An op-level ``networkx.DiGraph``.

    Nodes are op names with attributes ``inputs``, ``outputs``, ``workspace_bytes``
    and ``attrs``; an edge ``u -> v`` carries ``tensors`` (names ``u`` writes and
    ``v`` reads) and their total ``bytes``. Graph-level attributes ``name``,
    ``tensors`` (name -> bytes), ``inputs`` and ``outputs`` make the conversion
    lossless, so :func:`from_networkx` restores the same graph.
    """
    import networkx as nx

    g = nx.DiGraph(name=graph.name, tensors={t.name: t.bytes for t in graph.tensors},
                   inputs=list(graph.inputs), outputs=list(graph.outputs))
    for op in graph.ops:
        g.add_node(op.name, inputs=list(op.inputs), outputs=list(op.outputs),
                   workspace_bytes=op.workspace_bytes, attrs=dict(op.attrs))
    for v, op in enumerate(graph.ops):
        for t in graph.op_inputs[v]:
            p = graph.producer[t]
            if p < 0:
                continue
            u = graph.ops[p].name
            if g.has_edge(u, op.name):
                g[u][op.name]["tensors"].append(graph.tensors[t].name)
                g[u][op.name]["bytes"] += graph.size[t]
            else:
                g.add_edge(u, op.name, tensors=[graph.tensors[t].name], bytes=graph.size[t])
    return g


def from_networkx(g) -> Graph:
    """Build a :class:`Graph` from a ``networkx.DiGraph``.

    Accepts the lossless form written by :func:`to_networkx`. A plain DAG whose
    nodes carry a ``bytes`` attribute is also accepted: every node becomes an op
    writing one tensor (named after the node, of that size) and reading its
    predecessors' tensors; sinks are the graph outputs and there are no graph inputs.
    """
    if "tensors" in g.graph:
        tensors = list(g.graph["tensors"].items())
        ops = [Op(str(n), d.get("inputs", []), d.get("outputs", []), d.get("workspace_bytes", 0),
                  d.get("attrs", {})) for n, d in g.nodes(data=True)]
        return Graph(tensors, ops, g.graph.get("inputs", []), g.graph.get("outputs", []),
                     name=g.graph.get("name", "graph"))
    tensors, ops, outputs = [], [], []
    for n, d in g.nodes(data=True):
        if "bytes" not in d:
            raise GraphError(f"node {n!r} has no 'bytes' attribute (size of the tensor it writes)")
        name = str(n)
        tensors.append((name, d["bytes"]))
        ops.append(Op(name, [str(p) for p in g.predecessors(n)], [name], d.get("workspace_bytes", 0)))
        if g.out_degree(n) == 0:
            outputs.append(name)
    return Graph(tensors, ops, [], outputs, name=g.graph.get("name", "graph"))
