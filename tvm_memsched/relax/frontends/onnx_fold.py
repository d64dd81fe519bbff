"""Fold the shape arithmetic of an ONNX graph into constants before TVM imports it.

Exporters compute shapes at run time: ``x.chunk(2, 1)`` becomes ``Shape ->
Gather -> Add -> Div -> Mul -> Slice``, ``x.view(x.size(0), -1)`` becomes
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, padding sizes come from
``ConstantOfShape``. With static input shapes all of it is constant, but TVM's
ONNX importer turns some of these chains into tensors of unknown shape, which
no static plan can hold. :func:`fold_shapes` replaces them by constants:

* shapes are inferred with ``onnx.shape_inference`` (after the given input
  shapes are written into the graph), so ``Shape`` of a tensor with a fully
  known shape is a constant;
* any node of :data:`FOLDABLE` whose inputs are all constants and whose integer
  result is small (at most :data:`MAX_ELEMENTS` values) is evaluated with
  ``onnx.reference`` and becomes an initializer.

Small float results are folded too: a padding computed as timm's "same"
padding is, ``ceil(size / stride)`` in floats, ``Clip`` to at least 0, cast
back to integers (NASNet-A, EfficientNet-TF ports: TVM's importer refuses a
``Pad`` whose pads are not constant). Large tensors are left to TVM (they are
data, not shapes). An ``If`` whose condition folds to a constant is replaced by the branch
it takes (exporters write ``if x.shape[1] > 1:`` as one). The subgraphs of
``If``, ``Loop`` and ``Scan`` nodes are folded too, with the enclosing graph's
constants in scope, and a constant only a subgraph reads is kept. The model computes
exactly what it did; only the graph is simpler.

Example
-------
>>> from onnx import TensorProto, helper, numpy_helper
>>> import numpy as np
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> nodes = [helper.make_node("Shape", ["x"], ["s"]),
...          helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
...          helper.make_node("Concat", ["b", "minus1"], ["shape"], axis=0),
...          helper.make_node("Reshape", ["x", "shape"], ["y"])]
>>> inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
...          numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
>>> m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
...                       opset_imports=[helper.make_opsetid("", 17)])
>>> [n.op_type for n in fold_shapes(m).graph.node]
['Reshape']
"""

from __future__ import annotations

import numpy as np

__all__ = ["fold_shapes", "FOLDABLE", "MAX_ELEMENTS"]

#: operators evaluated at import time when all their inputs are constant (shape arithmetic)
FOLDABLE = frozenset({"Shape", "Size", "Gather", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil",
                      "Concat", "Unsqueeze", "Squeeze", "Cast", "Slice", "Range", "Equal", "Less", "Greater",
                      "Not", "And", "Or", "Where", "Min", "Max", "ReduceProd", "ReduceSum", "Identity",
                      "ConstantOfShape", "Expand", "Reshape", "Flatten", "Tile", "Constant", "Transpose", "Clip"})
#: largest result folded
MAX_ELEMENTS = 64


def _with_input_shapes(model, shapes: dict):
    for vi in model.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[vi.name]):
                d.Clear()
                d.dim_value = int(v)


def _static_shapes(model) -> dict:
    """Tensor name -> static shape, from shape inference (unknown or symbolic dimensions left out)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is best effort: without it only Constants and initializers fold
        return {}
    out = {}
    infos = []

    def collect(g):
        infos.extend(list(g.input) + list(g.value_info) + list(g.output))
        for n in g.node:
            for sub in _subgraphs(n):
                collect(sub)

    collect(inferred.graph)
    for vi in infos:
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = [int(d.dim_value) for d in t.shape.dim]
    return out


def _evaluate(node, values: dict, opset: int):
    """The outputs of ``node`` on constant inputs, with ONNX's reference implementation."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [i for i in node.input if i]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(values[n].dtype), values[n].shape)
              for n in names]
    outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.output]
    g = helper.make_graph([node], "fold", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    res = ReferenceEvaluator(m).run(None, {n: values[n] for n in names})
    return [np.asarray(r) for r in res]


def _too_big(node, values: dict, shapes: dict) -> bool:
    """Whether ``node``'s result would exceed :data:`MAX_ELEMENTS` (from shape inference, or from its constant
    inputs for the operators whose result size they set), so it is not evaluated.

    >>> from onnx import helper
    >>> big = helper.make_node("ConstantOfShape", ["s"], ["y"])
    >>> _too_big(big, {"s": np.array([1, 2 ** 19, 2 ** 10])}, {}), _too_big(big, {"s": np.array([3])}, {})
    (True, False)
    """
    if any(o in shapes and int(np.prod(shapes[o], dtype=object)) > MAX_ELEMENTS for o in node.output):
        return True
    ins = [values[i] for i in node.input if i]
    try:
        if node.op_type == "ConstantOfShape":
            n = int(np.prod([int(d) for d in ins[0].reshape(-1)], dtype=object))
        elif node.op_type == "Expand":
            n = int(np.prod(np.broadcast_shapes(ins[0].shape, tuple(int(d) for d in ins[1].reshape(-1))),
                            dtype=object))
        elif node.op_type == "Tile":
            n = int(np.prod([a * int(r) for a, r in zip(ins[0].shape, ins[1].reshape(-1))], dtype=object))
        elif node.op_type == "Range":
            start, limit, delta = (float(a.reshape(-1)[0]) for a in ins[:3])
            n = int(np.ceil((limit - start) / delta)) if delta else MAX_ELEMENTS + 1
        else:
            return False
    except (ValueError, TypeError, IndexError, OverflowError):
        return True
    return n > MAX_ELEMENTS


def fold_shapes(model, input_shapes: dict | None = None, rounds: int = 8):
    """A copy of the ONNX ``model`` with its constant shape arithmetic folded (see the module docstring).

    Folding a ``Shape`` can let shape inference see further (a ``ConstantOfShape``
    of it has a known shape), so inference and folding repeat, at most ``rounds``
    times, until nothing more folds.
    """
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    if input_shapes:
        _with_input_shapes(model, input_shapes)
    for _ in range(rounds):
        if not _fold_round(model):
            break
    return model


def _taken_branch(node, cond: bool, graph) -> list:
    """The nodes of the branch an ``If`` with a constant condition takes, inlined: its tensors renamed apart
    (``<if output>/<name>``), its initializers added to ``graph``, its outputs bound to the ``If``'s outputs
    by ``Identity`` nodes. The branch's references to the enclosing graph's tensors stay as they are."""
    from onnx import helper

    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if cond else "else_branch"))
    prefix = f"{node.output[0]}/{'then' if cond else 'else'}/"
    local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output}

    def rename(name):
        return prefix + name if name in local else name

    for t in branch.initializer:
        c = type(t)()
        c.CopyFrom(t)
        c.name = rename(t.name)
        graph.initializer.append(c)
    out = []
    for n in branch.node:
        c = type(n)()
        c.CopyFrom(n)
        c.name = prefix + (n.name or n.op_type)
        del c.input[:]
        c.input.extend(rename(i) if i else i for i in n.input)
        del c.output[:]
        c.output.extend(rename(o) for o in n.output)
        for sub in _subgraphs(c):       # nested branches and loop bodies read the branch's tensors by name
            _rename_reads(sub, rename)
        out.append(c)
    for res, o in zip(branch.output, node.output):
        out.append(helper.make_node("Identity", [rename(res.name)], [o], name=f"{prefix}{o}"))
    return out


def _rename_reads(g, rename) -> None:
    """Rename, in place, what graph ``g`` (and the graphs nested in it) reads from enclosing scopes."""
    own = {t.name for t in g.initializer} | {i.name for i in g.input} | {o for n in g.node for o in n.output}

    def outer(name):
        return name if not name or name in own else rename(name)

    for n in g.node:
        ins = [outer(i) for i in n.input]
        del n.input[:]
        n.input.extend(ins)
        for sub in _subgraphs(n):
            _rename_reads(sub, outer)
    for o in g.output:
        o.name = outer(o.name)


def _fold_round(model) -> bool:
    """One round of shape inference and folding, in place, in the main graph and in the subgraphs of its
    ``If`` / ``Loop`` / ``Scan`` nodes; True if a node was folded."""
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [17])
    return _fold_graph(model.graph, {}, _static_shapes(model), opset)


def _subgraphs(node) -> list:
    """The graphs held by ``node``'s attributes (an ``If``'s branches, a ``Loop``'s or ``Scan``'s body)."""
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


def _outer_reads(node) -> set:
    """Every tensor name the subgraphs of ``node`` read (their own tensors included: over-counting only keeps
    an initializer that is not needed)."""
    names = set()
    for g in _subgraphs(node):
        for n in g.node:
            names.update(i for i in n.input if i)
            names |= _outer_reads(n)
        names.update(o.name for o in g.output)
    return names


def _fold_graph(g, outer: dict, shapes: dict, opset: int) -> bool:
    """Fold the nodes of graph ``g`` (``outer``: the constants of the enclosing scopes, which a subgraph
    reads), then of the subgraphs of the nodes it keeps; True if anything changed."""
    from onnx import numpy_helper

    values = dict(outer)
    values.update({t.name: numpy_helper.to_array(t) for t in g.initializer})
    keep, folded = [], []
    graph_outputs = {o.name for o in g.output}
    inlined = False
    for node in g.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input and node.input[0] in values \
                and values[node.input[0]].size == 1:
            keep.extend(_taken_branch(node, bool(values[node.input[0]].reshape(-1)[0]), g))
            inlined = True
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type not in FOLDABLE or graph_outputs & set(node.output):
            keep.append(node)
            continue
        ins = [i for i in node.input if i]
        if node.op_type in ("Shape", "Size") and ins and ins[0] not in shapes and ins[0] in values:
            shape = list(values[ins[0]].shape)          # of a constant: its own shape
        else:
            shape = shapes.get(ins[0]) if ins else None
        if node.op_type == "Shape" and shape is not None and not node.attribute:
            outs = [np.array(shape, np.int64)]
        elif node.op_type == "Size" and shape is not None:
            outs = [np.array(int(np.prod(shape)), np.int64)]
        elif all(i in values for i in ins) and node.op_type not in ("Shape", "Size"):
            if _too_big(node, values, shapes):   # never evaluate a size bomb to find out
                keep.append(node)
                continue
            try:
                outs = _evaluate(node, values, opset)
            except Exception:   # leave anything the reference cannot evaluate to TVM
                keep.append(node)
                continue
        else:
            keep.append(node)
            continue
        if any(o.dtype.kind not in "iubf" or o.size > MAX_ELEMENTS for o in outs):
            keep.append(node)
            continue
        for name, arr in zip(node.output, outs):
            values[name] = arr
            folded.append(numpy_helper.from_array(arr, name))
    changed = bool(folded) or inlined
    if changed:
        used = {i for n in keep for i in n.input} | graph_outputs
        for n in keep:
            used |= _outer_reads(n)     # constants only a branch or a loop body reads stay
        del g.node[:]
        g.node.extend(keep)
        g.initializer.extend(t for t in folded if t.name in used)
    for n in g.node:
        for sub in _subgraphs(n):
            changed |= _fold_graph(sub, values, shapes, opset)
    return changed
