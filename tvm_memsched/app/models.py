"""Model specs of the command line, resolved in one place: ``zoo:NAME[:DTYPE]`` and model files.

Each command names its model with a spec and gets what the library functions
take:

* :func:`load_graph_spec` - a core :class:`~tvm_memsched.core.Graph` (``info``,
  ``schedule``, ``simulate``): graph JSON, ``.tflite`` (its subgraph 0),
  ``.onnx`` / ``.pt2`` (the operator graph of the imported Relax ``main``) or zoo;
* :func:`load_relax_spec` - a Relax IRModule and a name (``compare``,
  ``micro``, ``bench``): ``.tflite``, ``.onnx``, ``.pt2``
  (:mod:`tvm_memsched.relax.frontends.frontend`) or zoo;
* :func:`load_tflite_spec` - a :class:`~tvm_memsched.tflite.reader.TFLiteGraph`
  (``tflite``, ``coral``): ``.tflite`` or zoo, written on the fly.

``zoo:NAME`` is a network of :mod:`tvm_memsched.zoo` (float32);
``zoo:NAME:int8`` its full-integer variant where the target takes one (graphs
and ``.tflite``), ``zoo:NAME:float16`` its ``.tflite`` with float16 weights
(widened by ``DEQUANTIZE``; float32 activations, so its graph is the float32 one), ``zoo:NAME:hybrid``
its dynamic-range quantized ``.tflite`` (int8 weights read by float operators). ``--input-shape NAME=1x3x224x224`` (:func:`parse_input_shapes`)
sets the symbolic input dimensions an ``.onnx`` or ``.pt2`` file leaves open;
``--input-value NAME=V`` freezes an input to a constant (:class:`InputShapes`, ``.onnx`` and ``.tflite``).
Bad specs raise a one-line :class:`~tvm_memsched.core.errors.MemschedError`.

Example
-------
>>> parse_zoo_spec("zoo:resnet:int8"), parse_zoo_spec("model.tflite")
(('resnet', 'int8'), None)
>>> load_graph_spec("zoo:swiftnet_like").name
'swiftnet_like'
>>> parse_input_shapes(["x=1x3x32x32"])
{'x': (1, 3, 32, 32)}
"""

from __future__ import annotations

import os
import re

from .. import zoo
from ..core.errors import InputFileError, MemschedError, UnsupportedError
from ..core.input_values import InputValueArg, parse_input_value

__all__ = ["ZOO_PREFIX", "MODEL_FILES", "parse_zoo_spec", "is_tflite_spec", "parse_input_shapes", "InputShapes",
           "as_input_shapes",
           "add_input_shape_argument",
           "add_verbose_argument", "is_model_file", "load_graph_spec", "load_relax_spec",
           "load_tflite_spec", "tflite_bytes"]

#: the prefix of zoo model specs
ZOO_PREFIX = "zoo:"
#: model file extensions (besides graph JSON) the commands take
MODEL_FILES = (".tflite", ".onnx", ".pt2")

_DTYPES = ("float32", "float16", "hybrid", "int8")


def parse_zoo_spec(spec: str) -> tuple[str, str] | None:
    """``(name, dtype)`` of a ``zoo:NAME[:DTYPE]`` spec (dtype float32 unless given), None for a file.

    Raises for a malformed spec or an unknown model name.
    """
    if not spec.startswith(ZOO_PREFIX):
        return None
    parts = spec[len(ZOO_PREFIX):].split(":")
    name, dtype = parts[0], (parts[1] if len(parts) > 1 else "float32")
    if len(parts) > 2 or dtype not in _DTYPES:
        raise InputFileError(f"bad zoo model spec '{spec}': use zoo:NAME, zoo:NAME:float16, zoo:NAME:hybrid or "
                             "zoo:NAME:int8")
    zoo.info(name)   # raises a clear error for unknown names
    return name, dtype


class InputShapes(dict):
    """``{name: shape}`` of ``--input-shape`` with the inputs ``--input-value`` freezes in :attr:`frozen`
    (``{name: values}``, :mod:`tvm_memsched.core.input_values`): what every loader of a model spec takes."""

    def __init__(self, shapes=(), frozen=None):
        super().__init__(shapes)
        self.frozen = dict(frozen or {})

    def __bool__(self):
        return bool(len(self) or self.frozen)

    def __repr__(self):
        return dict.__repr__(self) if not self.frozen else f"{dict.__repr__(self)} frozen {self.frozen}"


def parse_input_shapes(items) -> InputShapes:
    """``{name: shape}`` from ``--input-shape`` values ``NAME=D1xD2x...`` (positive integers); empty for None.
    ``--input-value NAME=V`` items (:class:`~tvm_memsched.core.input_values.InputValueArg`) go to ``.frozen``."""
    shapes, frozen = {}, {}
    for item in items or []:
        if isinstance(item, InputValueArg):
            name, values = parse_input_value(item)
            if name in frozen:
                raise MemschedError(f"--input-value gives input '{name}' twice")
            frozen[name] = values
            continue
        name, _, dims = item.partition("=")
        if not name or not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)*", dims.strip()):
            raise MemschedError(f"bad --input-shape '{item}': use NAME=D1xD2x... with positive integers, "
                                "e.g. input=1x3x224x224")
        if name in shapes:
            raise MemschedError(f"--input-shape gives input '{name}' twice")
        shapes[name] = tuple(int(d) for d in dims.strip().split("x"))
    return InputShapes(shapes, frozen)


def as_input_shapes(input_shapes) -> InputShapes:
    """An :class:`InputShapes` of what a caller gives: command-line items, a dict (shapes), or one already.

    >>> as_input_shapes({"x": (1, 4)}), as_input_shapes(None).frozen
    ({'x': (1, 4)}, {})
    """
    if isinstance(input_shapes, InputShapes):
        return input_shapes
    if isinstance(input_shapes, dict):
        return InputShapes(input_shapes)
    return parse_input_shapes(input_shapes)


def add_input_shape_argument(parser) -> None:
    """Add ``--input-shape NAME=SHAPE`` (repeatable) and ``--trust-model-code`` to an argparse parser."""
    parser.add_argument("--input-shape", action="append", default=None, metavar="NAME=1x3x224x224",
                        help="static shape of an input an .onnx / .pt2 file leaves symbolic (repeat per input)")
    parser.add_argument("--input-value", action="append", dest="input_shape", type=InputValueArg,
                        metavar="NAME=VALUE",
                        help="freeze an input of an .onnx or .tflite file to a value (one number fills its shape, "
                             "or V1,V2,... in order), e.g. a sample rate a streaming model branches on "
                             "(--input-value sr=16000): it becomes a constant, and what it decides is folded away")
    parser.add_argument("--trust-model-code", action="store_true",
                        help="let a .pt2 file run its own code while loading (pickled objects, AOTInductor "
                             "libraries), as torch.export.load does; only for files from people you trust "
                             "(default: such files are refused)")


def _extension(spec: str) -> str:
    return os.path.splitext(spec)[1].lower()


def is_tflite_spec(spec: str) -> bool:
    """True if ``spec`` names a ``.tflite`` file or a zoo network as ``.tflite`` (``zoo:NAME[:int8|:float16|:hybrid]`` are both
    written as .tflite by the zoo; the float zoo networks only when a command asks for a .tflite)."""
    z = parse_zoo_spec(spec)
    return (z is not None and z[1] != "float32") or (z is None and _extension(spec) == ".tflite")


def is_model_file(spec: str) -> bool:
    """True if ``spec`` names a model file (``.tflite``, ``.onnx``, ``.pt2``) rather than a zoo network."""
    return parse_zoo_spec(spec) is None and _extension(spec) in MODEL_FILES


def load_graph_spec(spec: str, input_shapes=None):
    """The core Graph of a graph JSON, ``.tflite``, ``.onnx`` or ``.pt2`` file, or of ``zoo:NAME[:int8|:float16|:hybrid]``.

    ``input_shapes``: ``--input-shape`` values (or a dict) for ``.onnx`` / ``.pt2``.
    """
    z = parse_zoo_spec(spec)
    ext = _extension(spec)
    if input_shapes and (z is not None or ext not in MODEL_FILES):
        raise UnsupportedError(f"'{spec}': --input-shape and --input-value are for .tflite, .onnx and .pt2 files")
    if z is not None:
        return zoo.graph(z[0], "int8" if z[1] == "int8" else "float32")
    if ext == ".tflite":
        return load_tflite_spec(spec, input_shapes).graph
    if ext in MODEL_FILES:
        from ..relax.graph import function_graph
        from ..relax.passes.if_to_select import if_to_select

        mod, name = load_relax_spec(spec, input_shapes)
        return function_graph(if_to_select(mod)[0]["main"], name)   # the graph the C export plans
    from ..core.io import load_graph

    return load_graph(spec)


def load_relax_spec(spec: str, input_shapes=None):
    """``(IRModule, name)`` of a ``.tflite``, ``.onnx`` or ``.pt2`` file or of ``zoo:NAME[:int8|:float16|:hybrid]``.

    ``input_shapes``: ``--input-shape`` values (or a dict) for ``.onnx`` / ``.pt2``.
    """
    z = parse_zoo_spec(spec)
    shapes = as_input_shapes(input_shapes)
    if z is not None:
        name, dtype = z
        if shapes:
            raise UnsupportedError(f"'{spec}': zoo networks have static shapes; --input-shape and --input-value "
                                   "are for model files")
        if dtype != "float32":        # the zoo's int8 .tflite, imported (then int8-lowered by our pipeline)
            from ..relax.frontends.frontend import from_tflite_bytes

            return from_tflite_bytes(zoo.tflite(name, dtype), spec), f"{name}_{dtype}"
        return zoo.load(name), name
    ext = _extension(spec)
    if ext == ".json":
        raise UnsupportedError(f"{spec} is a graph JSON: it has no operators TVM can compile. "
                               "Give a .tflite, .onnx or .pt2 file or zoo:NAME, or schedule the graph with "
                               "'tvm-memsched schedule'")
    if ext not in MODEL_FILES:
        raise UnsupportedError(f"unsupported model file '{spec}': expected a .tflite, .onnx or .pt2 file or "
                               "zoo:NAME")
    name = os.path.splitext(os.path.basename(spec))[0]
    if ext == ".tflite":
        from ..relax.frontends.frontend import from_tflite_bytes

        return from_tflite_bytes(tflite_bytes(spec, shapes), spec), name
    if ext == ".pt2" and shapes.frozen:
        raise UnsupportedError(f"{spec}: --input-value freezes inputs of .onnx and .tflite files; a .pt2 program "
                               "takes every input it was exported with")
    from ..relax.frontends.frontend import from_file

    return from_file(spec, shapes or None), name


def load_tflite_spec(spec: str, input_shapes=None):
    """The :class:`~tvm_memsched.tflite.reader.TFLiteGraph` of a ``.tflite`` file or ``zoo:NAME[:int8|:float16|:hybrid]``
    (``input_shapes``: of the inputs a file leaves open, :func:`tflite_bytes`)."""
    from ..tflite.reader import read_tflite

    z = parse_zoo_spec(spec)
    if z is not None:
        name, dtype = z
        return read_tflite(zoo.tflite(name, dtype), name=name + ("" if dtype == "float32" else "_" + dtype),
                           label=spec)
    if _extension(spec) in (".onnx", ".pt2"):
        raise UnsupportedError(f"{spec}: this command rewrites .tflite files; give a .tflite file or zoo:NAME")
    return read_tflite(tflite_bytes(spec, input_shapes), label=spec,
                       name=os.path.splitext(os.path.basename(spec))[0])


def tflite_bytes(spec: str, input_shapes=None) -> bytes | None:
    """The ``.tflite`` bytes behind a spec (a ``.tflite`` file or ``zoo:NAME:int8``; the reference for checks),
    None for other specs (``zoo:NAME`` is built as a Relax module directly).

    A file whose inputs leave dimensions open (``-1`` in their shape signature) comes back with them set
    from ``input_shapes`` and every shape the runtimes would resolve written in
    (:func:`~tvm_memsched.relax.frontends.tflite_fold.bind_inputs`): what is imported, planned and checked
    against LiteRT and TFLite Micro is then one static model."""
    z = parse_zoo_spec(spec)
    if z is not None:
        return zoo.tflite(*z) if z[1] != "float32" else None
    if _extension(spec) != ".tflite":
        return None
    from ..tflite.reader import read_bytes

    buf = read_bytes(spec)[0]
    shapes = as_input_shapes(input_shapes)
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        return buf                          # the importer names what is wrong with it
    try:
        import tflite  # noqa: F401 - the flatbuffer accessors bind_inputs reads with
    except ImportError:
        tflite = None
    if tflite is not None:
        from ..relax.frontends.tflite_fold import bind_inputs

        try:
            buf = bind_inputs(buf, dict(shapes), spec)
        except MemschedError:
            raise
        except Exception:  # noqa: BLE001 - a corrupt file: the reader and the importer say what is wrong with it
            if not shapes.frozen:
                return buf
    if shapes.frozen:           # never dropped: a corrupt file is refused by name here (the object API reader)
        from ..tflite.freeze import freeze_inputs

        buf = freeze_inputs(buf, shapes.frozen, spec)
    if tflite is None:
        return buf
    from ..relax.frontends.tflite_fold import static_shapes

    try:
        return static_shapes(buf, tflite.Model.GetRootAsModel(buf, 0))
    except MemschedError:
        raise
    except Exception:  # noqa: BLE001 - as above
        return buf


def add_verbose_argument(parser) -> None:
    """``--verbose``: show TVM's own (C++) log lines, which otherwise go to a log file."""
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show TVM's own log lines (otherwise kept in a log file, named if the command fails)")


def add_tile_arguments(parser, what: str) -> None:
    """The ``--tile`` options (patch tiling of the first stage, :mod:`tvm_memsched.tflite.tiling`)."""
    parser.add_argument("--tile", action="store_true",
                        help=f"run the memory-heavy first stage patch by patch ({what}): every split point and "
                             "grid is scored by our schedule and plan, within --tile-budget extra MACs")
    parser.add_argument("--tile-budget", type=float, default=None, metavar="FRACTION",
                        help="extra multiply-accumulates allowed for tiling, as a fraction of the model's "
                             "(default 0.15)")
    parser.add_argument("--tile-grid", default=None, metavar="RxC", help="fix the patch grid, e.g. 4x4")
    parser.add_argument("--tile-at", default=None, metavar="TENSOR", help="fix the split point (a tensor name)")


def wants_tiling(args) -> bool:
    return bool(args.tile or args.tile_grid or args.tile_at or args.tile_budget is not None)


def parse_grid(text: str) -> tuple[int, int]:
    """``"4x4"`` -> ``(4, 4)``."""
    try:
        r, c = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UnsupportedError(f"--tile-grid must look like 4x4, got {text!r}") from None
    if r < 1 or c < 1:
        raise UnsupportedError(f"--tile-grid must be at least 1x1, got {text!r}")
    return r, c


def search_tiling_for(tg, args, *, inplace: str = "off", tflm: bool | None = False, progress=None):
    """Run :func:`~tvm_memsched.tflite.tiling.search_tiling` (``tg`` a TFLiteGraph) or
    :func:`~tvm_memsched.relax.passes.tiling.search_tiling` (``tg`` a Relax module) with the command's ``--tile*``
    options and print every candidate; returns the TilingResult."""
    from ..core.tiling import DEFAULT_BUDGET

    budget = DEFAULT_BUDGET if args.tile_budget is None else args.tile_budget
    if not budget >= 0:
        raise UnsupportedError(f"--tile-budget must be a non-negative fraction, got {budget}")
    grid = parse_grid(args.tile_grid) if args.tile_grid else None
    if hasattr(tg, "functions_items"):          # a Relax module
        from ..relax.passes.tiling import search_tiling as relax_search

        res = relax_search(tg, budget=budget, split=args.tile_at, grid=grid, progress=progress)
    else:
        from ..tflite.tiling import search_tiling

        res = search_tiling(tg, budget=budget, split=args.tile_at, grid=grid, progress=progress,
                            inplace=inplace, tflm=tflm)
    print(f"patch tiling (extra MACs within {100 * budget:.0f}% of the model's {res.model_macs:,}); untiled: "
          f"scheduled peak {res.untiled_peak_bytes:,} B, plan {res.untiled_plan_bytes:,} B"
          + ("" if res.untiled_tflm_tail_bytes is None else
             f", TFLite Micro tail {res.untiled_tflm_tail_bytes:,} B (candidates are ranked by plan + tail)"))
    print(res.table())
    if res.chosen is None:
        print("note: no tiling within the budget plans less than the untiled model; the model is not tiled")
    else:
        c = res.chosen
        print(f"tiled at {c.split} in {c.grid[0]}x{c.grid[1]} patches: plan {res.untiled_plan_bytes:,} -> "
              f"{c.plan_bytes:,} B, {100 * c.mac_overhead:.1f}% extra MACs")
    return res


def tiled_relax_spec(spec: str, args, progress=None, imported=None):
    """``(tiled Relax module or None, TilingResult, untiled module, .tflite bytes)`` for ``--tile`` in
    ``compare`` and ``micro``: the model's ``.tflite`` is tiled (builtin ops), then imported; the untiled module
    is imported from the same file (the reference). Other models (ONNX, .pt2) are tiled by the Relax rewrite
    (:mod:`tvm_memsched.relax.passes.tiling`); the .tflite bytes are then None. ``imported``: what
    ``load_relax_spec(spec, args.input_shape)`` returned already (an ONNX or .pt2 file is then not imported
    a second time)."""
    from ..relax.frontends.frontend import from_tflite_bytes
    from ..tflite.reader import read_tflite

    z = parse_zoo_spec(spec)
    buf = zoo.tflite(*z) if z is not None else tflite_bytes(spec, getattr(args, "input_shape", None))
    if buf is None:                       # ONNX, .pt2, Relax: the Relax rewrite (tvm_memsched.relax.passes.tiling)
        untiled = imported if imported is not None else \
            load_relax_spec(spec, input_shapes=getattr(args, "input_shape", None))[0]
        res = search_tiling_for(untiled, args, progress=progress)
        return res.buf, res, untiled, None
    # scored with the overlaps our Relax in-place execution finds (traced windows, like TFLM's "windowed")
    inplace = "windowed" if getattr(args, "inplace", True) else "off"
    res = search_tiling_for(read_tflite(buf, label=spec), args, progress=progress, inplace=inplace)
    untiled = from_tflite_bytes(buf, spec)
    if res.chosen is None:
        return None, res, untiled, buf
    return from_tflite_bytes(res.buf, spec), res, untiled, buf
