"""ONNX files -> Relax, with one-line errors (used by :mod:`.frontend`).

The model is parsed with the ``onnx`` package (the optional extra ``onnx``),
checked for a graph and an opset list (a file cut short either fails to parse
or, cut between two fields, parses without what follows the graph), its
stored tensors checked and external data read from the model's folder only
(:mod:`.onnx_data`), constant shape arithmetic folded (:mod:`.onnx_fold`),
inferred tensor sizes checked against a limit, and imported with
``tvm.relax.frontend.onnx.from_onnx``, weights as constants. Input shapes come
from the file; ``input_shapes`` sets symbolic ones (and may restate static
ones); its ``frozen`` inputs become constants (:func:`freeze_inputs`). Errors: :class:`InputFileError` for unreadable or invalid files,
:class:`UnsupportedError` naming the operators TVM cannot import, unknown
inputs, and shapes that stay symbolic or depend on the data.

Example
-------
>>> import onnx
>>> from onnx import TensorProto, helper
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
>>> buf = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
>>> mod = from_onnx_bytes(buf, {"x": (1, 3, 8, 8)})
>>> mod["main"].params[0].ty
R.Tensor((1, 3, 8, 8), dtype="float32")
"""

from __future__ import annotations

import contextlib
import re
import warnings

from ...core.errors import InputFileError, UnsupportedError, last_line
from .input_shapes import ANY_DIM, check_static
from .native_log import quiet_import
from .onnx_data import check_activation_sizes, resolve_tensors
from .onnx_fold import fold_shapes

__all__ = ["from_onnx_bytes", "quantizes_at_run_time", "RUN_TIME_QUANTIZERS", "frozen_inputs", "freeze_inputs", "branch_inputs", "unknown_dims_to_symbols", "upgrade_opset", "MIN_OPSET"]


@contextlib.contextmanager
def _our_converters():
    """TVM's ONNX operator table with the operators it lacks (:mod:`.onnx_recurrent`, :mod:`.onnx_integer`),
    for the block."""
    from tvm.relax.frontend.onnx import onnx_frontend

    from .onnx_integer import integer_converters
    from .onnx_recurrent import recurrent_converters

    original = onnx_frontend._get_convert_map
    ours = {**recurrent_converters(), **integer_converters()}

    def convert_map():
        return {**original(), **ours}

    onnx_frontend._get_convert_map = convert_map
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


#: operators that quantize an activation at run time (onnxruntime's ``quantize_dynamic`` writes them)
RUN_TIME_QUANTIZERS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul",
                                 "MatMulIntegerToFloat"})


def quantizes_at_run_time(model) -> bool:
    """True if an ONNX ``model`` (or a graph nested in it) holds a :data:`RUN_TIME_QUANTIZERS` operator.

    >>> from onnx import TensorProto, helper
    >>> g = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])], "g",
    ...                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
    ...                       [helper.make_tensor_value_info("q", TensorProto.UINT8, [4])])
    >>> quantizes_at_run_time(helper.make_model(g))
    True
    """
    def walk(graph):
        for n in graph.node:
            if n.op_type in RUN_TIME_QUANTIZERS:
                return True
            for a in n.attribute:
                if a.g is not None and a.g.node and walk(a.g):
                    return True
                if any(walk(g) for g in a.graphs):
                    return True
        return False

    return walk(model.graph)


#: the oldest default-domain opset TVM's ONNX frontend is written for (most converters have only ``_impl_v13``)
MIN_OPSET = 13


def upgrade_opset(model):
    """``model`` in opset :data:`MIN_OPSET` if it is older (ONNX's version converter: a Slice of opset 9 reads
    its bounds from attributes, which TVM's converter takes from inputs), else as it is. A model the version
    converter cannot carry over is returned unchanged: TVM then imports what it can, and says what it cannot.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    >>> node = helper.make_node("Slice", ["x"], ["y"], axes=[0], starts=[0], ends=[2])
    >>> m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 9)])
    >>> up = upgrade_opset(m)
    >>> up.opset_import[0].version, [(n.op_type, len(n.input)) for n in up.graph.node][-1]
    (13, ('Slice', 4))
    """
    from onnx import version_converter

    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [MIN_OPSET])
    if opset >= MIN_OPSET:
        return model
    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception:   # the converter's adapters refuse some operators and attributes: keep the file's opset
        return model


def unknown_dims_to_symbols(model) -> int:
    """Give every dimension an exporter wrote as ``-1`` or ``0`` ("any size", as Paddle and some TensorFlow
    exporters write it; onnxruntime takes any size there) a symbolic name, in place, on the graph's inputs,
    outputs and value infos: ``--input-shape`` then binds it like a named dimension. Returns how many.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 0, 8])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    >>> m = helper.make_model(g)
    >>> unknown_dims_to_symbols(m), [d.dim_param for d in m.graph.input[0].type.tensor_type.shape.dim]
    (2, ['x_0__any', '', 'x_2__any', ''])
    """
    n = 0
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None or not t.HasField("shape"):
            continue
        for i, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.dim_param = f"{vi.name}_{i}{ANY_DIM}"        # clears dim_value (a oneof)
                n += 1
    return n


def frozen_inputs(model, values: dict, shapes: dict | None = None, what: str = "model") -> dict:
    """``{name: array}`` for each graph input named in ``values`` (name -> numbers, as ``--input-value`` gives
    them), in the input's element type and shape (``shapes`` gives the dimensions the file leaves open: symbolic,
    ``-1`` or ``0``); what :func:`freeze_inputs` writes into the model, and onnxruntime is fed beside it.

    >>> from onnx import TensorProto, helper
    >>> sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    >>> g = helper.make_graph([helper.make_node("Identity", ["sr"], ["y"])], "g", [sr],
    ...                       [helper.make_tensor_value_info("y", TensorProto.INT64, [])])
    >>> frozen_inputs(helper.make_model(g), {"sr": (16000,)})
    {'sr': array(16000)}
    """
    from onnx import helper

    from ...core.input_values import frozen_array

    out = {}
    for vi in model.graph.input:
        if vi.name not in values:
            continue
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            raise UnsupportedError(f"{what}: input '{vi.name}' has no tensor shape; --input-value needs one")
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        given = (shapes or {}).get(vi.name)
        if given is None and None in dims:
            raise UnsupportedError(f"{what}: input '{vi.name}' has open dimensions "
                                   f"({'x'.join('?' if d is None else str(d) for d in dims)}); give them with "
                                   "--input-shape as well as its value")
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        except Exception:  # noqa: BLE001 - strings, float8 and other types no number is written in
            dtype = None
        if dtype is None or dtype.kind not in "biufc":
            raise UnsupportedError(f"{what}: input '{vi.name}' has element type {t.elem_type}; --input-value "
                                   "writes numbers")
        out[vi.name] = frozen_array(vi.name, values[vi.name], dtype.name, given if given is not None else dims, what)
    return out


def freeze_inputs(model, values: dict, shapes: dict | None = None, what: str = "model") -> None:
    """Make each graph input named in ``values`` an initializer of its value (:func:`frozen_inputs`), in place;
    :func:`.onnx_fold.fold_shapes` then folds what it decides (an ``If`` on it is inlined).

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    >>> g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, sr],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> m = helper.make_model(g)
    >>> freeze_inputs(m, {"sr": (16000,)})
    >>> from onnx import numpy_helper
    >>> [i.name for i in m.graph.input], [(t.name, int(numpy_helper.to_array(t))) for t in m.graph.initializer]
    (['x'], [('sr', 16000)])
    """
    if not values:
        return
    from onnx import numpy_helper

    arrays = frozen_inputs(model, values, shapes, what)
    for vi in list(model.graph.input):
        if vi.name in arrays:
            model.graph.initializer.append(numpy_helper.from_array(arrays[vi.name], vi.name))
            model.graph.input.remove(vi)


def branch_inputs(model) -> list[str]:
    """The graph inputs the conditions of the main graph's ``If`` nodes depend on (what ``--input-value`` could
    freeze to import one branch), in input order.

    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> vi = helper.make_tensor_value_info
    >>> one = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "one", [],
    ...                         [vi("b", TensorProto.FLOAT, [2])])
    >>> nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
    ...          helper.make_node("If", ["c"], ["y"], then_branch=one, else_branch=one)]
    >>> g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2]), vi("sr", TensorProto.INT64, [])],
    ...                       [vi("y", TensorProto.FLOAT, [2])],
    ...                       [helper.make_tensor("k", TensorProto.INT64, [], [16000])])
    >>> branch_inputs(helper.make_model(g))
    ['sr']
    """
    producer = {o: n for n in model.graph.node for o in n.output}
    inputs = [i.name for i in model.graph.input]
    seen, stack = set(), [n.input[0] for n in model.graph.node if n.op_type == "If" and n.input]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in producer:
            stack.extend(i for i in producer[name].input if i)
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in inputs if i in seen and i not in initializers]


def from_onnx_bytes(buf: bytes, input_shapes: dict | None = None, what: str = "model", base_dir: str | None = None):
    """Import the ONNX model ``buf`` (bytes of a ``.onnx`` file) into Relax (see the module docstring).

    ``base_dir``: the model file's folder, where its external data is read (:func:`.onnx_data.resolve_tensors`);
    ``None`` refuses external data."""
    try:
        import onnx
    except ImportError:
        raise UnsupportedError("importing .onnx needs the 'onnx' package (pip install 'tvm_memsched[onnx]')") \
            from None
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load_model_from_string(bytes(buf))
    except Exception as e:  # protobuf's DecodeError and friends
        raise InputFileError(f"{what} is not an ONNX model ({type(e).__name__}: {last_line(e, 160)})") from None
    # a file cut at a field boundary still parses, as a shorter model: what follows the graph is the opset list
    if not len(model.graph.node):
        raise InputFileError(f"{what} is not an ONNX model (no graph nodes; empty or truncated file?)")
    if not len(model.opset_import):
        raise InputFileError(f"{what} is not a complete ONNX model (no opset_import; truncated file?)")
    resolve_tensors(model, base_dir, what)
    model = upgrade_opset(model)
    unknown_dims_to_symbols(model)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    frozen = dict(getattr(input_shapes, "frozen", None) or {})
    for flag, names in (("--input-shape", input_shapes or {}), ("--input-value", frozen)):
        unknown = sorted(set(names) - set(inputs))
        if unknown:
            raise UnsupportedError(f"{what}: {flag} names unknown input(s) {', '.join(unknown)}; the inputs are "
                                   f"{', '.join(inputs) or 'none'}")
    shape_dict = {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    for vi in model.graph.input:
        if vi.name in shape_dict:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            given = shape_dict[vi.name]
            if len(dims) != len(given) or any(d is not None and d != v for d, v in zip(dims, given)):
                raise UnsupportedError(f"{what}: input '{vi.name}' has shape "
                                       f"{'x'.join('?' if d is None else str(d) for d in dims)} (rank {len(dims)}); "
                                       f"--input-shape gives {'x'.join(map(str, given))}")
    freeze_inputs(model, frozen, shape_dict, what)
    shape_dict = {k: v for k, v in shape_dict.items() if k not in frozen}
    model = fold_shapes(model, shape_dict)
    check_activation_sizes(model, what)

    def run():
        with warnings.catch_warnings(), _our_converters():  # TVM re-warns what onnx's checker says
            warnings.simplefilter("ignore")
            return from_onnx(model, shape_dict=shape_dict or None)

    branch = branch_inputs(model)
    hint = (f" (the model branches at run time with If on input(s) {', '.join(branch)}: if a deployment fixes "
            f"them, freeze them with --input-value, e.g. --input-value {branch[0]}=VALUE)") if branch else ""

    def failure(e):  # TVM raises OpNotImplemented, TVMError, ValueError, AssertionError...
        m = re.search(r"operators are not supported for frontend ONNX: (.*)", str(e))
        if m:
            return UnsupportedError(f"{what}: unsupported ONNX operator(s): {m.group(1).strip()}{hint}")
        return UnsupportedError(f"{what} could not be imported by TVM's ONNX frontend: {last_line(e)}{hint}")

    mod = quiet_import(run, failure)
    check_static(mod, what)
    return mod
