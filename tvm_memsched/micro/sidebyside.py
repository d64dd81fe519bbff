"""Our microcontroller export side by side with TFLite Micro and with TVM's default build.

* :func:`tflm_reference` measures TFLite Micro's smallest arena for the same
  ``.tflite`` file (its Python interpreter, bisected in child processes);
* :func:`default_export` exports the model as TVM alone would build it (TVM's
  import arithmetic, kernels, order and ``StaticPlanBlockMemory`` plan) to the
  same C runtime, so RAM, flash and instructions compare like for like;
* :func:`check_against_tflite` runs the file in TFLite Micro and in LiteRT's
  reference kernels on the inputs a QEMU/host run used and compares outputs
  (integer outputs bit for bit);
* :func:`side_by_side` formats the table ``tvm-memsched micro`` prints;
* :func:`tflite_inputs` adapts the run's seeded inputs to the file: int16
  (16x8) activations over their whole range, non-negative values for the
  operators the runtimes refuse negative ones for.

Example
-------
>>> print(side_by_side("b", {"min_arena": 1000}, None, {"ram": 800, "flash": 500, "instructions": 9}))
  side by side on b     RAM total  flash  instructions
  TFLite Micro (arena)    1,000 B      -             -
  tvm_memsched              800 B  500 B             9
  RAM total 0.80x TFLite Micro's smallest arena (at most TFLM's)
"""

from __future__ import annotations

import numpy as np

from ..core.errors import MemschedError
from ..core.numerics import difference

__all__ = ["tflm_refuses", "tflm_reference", "default_export", "check_against_tflite", "side_by_side", "tflite_available",
           "tflite_inputs", "tflm_undefined", "NON_NEGATIVE_OPS", "TFLM_UNDEFINED"]

#: operators TFLite Micro and LiteRT refuse to run on a negative (quantized) value
NON_NEGATIVE_OPS = ("RSQRT", "SQRT")

#: operator -> why TFLite Micro's output is undefined, so LiteRT's reference kernels decide: its
#: SPACE_TO_BATCH_ND allocates ``SpaceToBatchParams`` as a persistent buffer and never writes
#: ``output_offset``, whose low byte it ``memset``s into every padded element, of any dtype (an int8 file was
#: 1 LSB off on one machine and 33 on another; a float32 one 9.6e30 off). Without padding the output is defined.
TFLM_UNDEFINED = {"SPACE_TO_BATCH_ND": "TFLite Micro pads SPACE_TO_BATCH_ND with an uninitialised output_offset"}


def _pads(m, sg, op) -> bool:
    """False only if the operator's paddings operand (input 2) is a constant of zeros."""
    ins = list(op.inputs) if op.inputs is not None else []
    if len(ins) < 3 or int(ins[2]) < 0:
        return True
    t = sg.tensors[int(ins[2])]
    data = m.buffers[t.buffer].data if 0 < t.buffer < len(m.buffers or []) else None
    if data is None or not len(data):
        return True
    return bool(np.any(np.frombuffer(bytes(bytearray(data)), dtype=np.uint8)))


def tflm_undefined(buf: bytes) -> str | None:
    """Why TFLite Micro's outputs for ``buf`` are undefined (:data:`TFLM_UNDEFINED`), or None.

    >>> tflm_undefined(b"") is None
    True
    """
    if not buf:
        return None
    from ..tflite.builder import load, opcode_name

    m = load(bytes(buf))
    for sg in m.subgraphs or []:
        for op in sg.operators or []:
            name = opcode_name(m.operatorCodes[op.opcodeIndex])
            if name in TFLM_UNDEFINED and _pads(m, sg, op):
                return TFLM_UNDEFINED[name]
            if name == "WHILE" and op.builtinOptions is not None:
                body = op.builtinOptions.bodySubgraphIndex
                if 0 < body < len(m.subgraphs) and any(
                        t.shapeSignature is not None and any(int(d) < 0 for d in t.shapeSignature)
                        for t in m.subgraphs[body].tensors or []):
                    return ("the loop body's tensors change shape between iterations (a tensor list sliced at "
                            "the counter), which TFLite Micro does not resize")
    return None


def tflite_available() -> bool:
    """True if TFLite Micro's Python interpreter can be imported."""
    try:
        from tflite_micro.python.tflite_micro import runtime  # noqa: F401
    except ImportError:
        return False
    return True


def tflm_reference(buf: bytes) -> dict:
    """TFLite Micro's memory for ``buf``: ``min_arena`` (smallest arena that allocates), ``head``, ``tail``."""
    from ..tflite.verify import tflm_arena

    a = tflm_arena(bytes(buf))
    return {"min_arena": a.min_arena, "head": a.head, "tail": a.tail}


def default_export(mod, board, out_dir: str, *, name: str = "model", measure: bool = True, progress=None):
    """Export ``mod`` as TVM's default build would run it: no int8 lowering, TVM's order and plan."""
    from .builder import export

    return export(mod, board, out_dir, name=name, planner="tvm", int8=False, measure=measure, check_fit=False,
                  progress=progress)


def _names(buf: bytes) -> list[str]:
    from ..tflite.builder import load

    m = load(bytes(buf))
    sg = m.subgraphs[0]
    return [sg.tensors[i].name.decode("utf-8", "replace") for i in sg.inputs]


def _diff(outputs, reference) -> tuple[float, bool]:
    """(max abs difference, identical) of two output lists compared in order."""
    if len(outputs) != len(reference):
        return float("inf"), False
    worst, same = 0.0, True
    for a, b in zip(outputs, reference):
        a, b = np.asarray(a), np.asarray(b)
        if a.size != b.size:
            return float("inf"), False
        b = b.reshape(a.shape)
        d = difference(a, b)
        worst = max(worst, float(d.max()) if d.size else 0.0)
        same = same and a.tobytes() == b.astype(a.dtype).tobytes()
    return worst, same


def tflite_inputs(buf: bytes, sequence, seed: int = 0) -> list:
    """``sequence`` (input lists in the file's input order, seeded random values) with every int16 input
    redrawn over the whole int16 range (the seeded default, -100..99, would test a 16x8 activation on 0.3% of
    its range) and the inputs read by :data:`NON_NEGATIVE_OPS` made non-negative; others unchanged.

    >>> from tvm_memsched.tflite.builder import ModelBuilder, tfl
    >>> mb = ModelBuilder()
    >>> x = mb.tensor("x", [4], np.int16, scale=1e-3, zero_point=0)
    >>> y = mb.tensor("y", [4], np.int16, scale=1e-3, zero_point=0)
    >>> _ = mb.op(tfl.BuiltinOperator.RSQRT, [x], [y])
    >>> int(tflite_inputs(mb.finish([x], [y]), [[np.zeros(4, np.int16)]])[0][0].min()) >= 0
    True
    """
    from ..tflite.builder import load, opcode_name

    model = load(bytes(buf))
    sg = model.subgraphs[0]
    ops = sg.operators or []
    out = []
    for k, inputs in enumerate(sequence):
        rng = np.random.default_rng(seed + k)
        new = []
        for pos, x in enumerate(inputs):
            x = np.asarray(x)
            if pos < len(sg.inputs):
                t = int(sg.inputs[pos])
                if x.dtype == np.int16:
                    x = rng.integers(-32768, 32768, x.shape).astype(np.int16)
                readers = [opcode_name(model.operatorCodes[op.opcodeIndex]) for op in ops
                           if op.inputs is not None and t in [int(i) for i in op.inputs]]
                if readers and all(r in NON_NEGATIVE_OPS for r in readers) and x.dtype.kind == "i":
                    zp = sg.tensors[t].quantization.zeroPoint if sg.tensors[t].quantization is not None else None
                    low = int(zp[0]) if zp is not None and len(zp) else 0
                    info = np.iinfo(x.dtype)
                    x = (low + np.abs(x.astype(np.int64) - low) % (info.max - low + 1)).astype(x.dtype)
            new.append(x)
        out.append(new)
    return out


def tflm_refuses(buf: bytes) -> str | None:
    """Why TFLite Micro cannot run ``buf`` whatever its arena (its kernels refuse the quantization scheme, it
    lacks an operator, a kernel refuses a type), or None."""
    from ..tflite.builder import load
    from ..tflite.quantization import quantization_scheme
    from ..tflite.verify import tflm_refusal

    scheme = quantization_scheme(load(bytes(buf)))
    if scheme in ("dynamic-range (hybrid)", "float16 weights"):
        return f"TFLite Micro does not run {scheme} models"
    if not tflite_available():
        return None
    why = tflm_refusal(bytes(buf))
    return f"TFLite Micro refuses the file ({why})" if why else None


def _agree(outputs, reference, rtol: float, atol: float) -> bool:
    """Integer outputs bit-identical to ``reference``, float outputs within ``atol + rtol * |ref|``."""
    if len(reference) != len(outputs):
        return False
    if all(np.issubdtype(np.asarray(o).dtype, np.integer) for o in outputs):
        return _diff(outputs, reference)[1]
    return all(np.all(difference(a, b) <= atol + rtol * np.nan_to_num(np.abs(np.asarray(b, np.float64)).reshape(
        np.shape(a)))) for a, b in zip(outputs, reference))


def check_against_tflite(buf: bytes, inputs, outputs, *, rtol: float = 1e-4, atol: float = 1e-4,
                         tflm: bool = True, sequence=None, outputs_sequence=None) -> dict:
    """Compare ``outputs`` (ours, for ``inputs`` in the file's input order) with TFLite Micro and LiteRT.

    Integer outputs must be bit-identical to TFLite Micro's (``ok``); float
    outputs must be within ``atol + rtol * |ref|``. LiteRT's reference kernels
    are reported alongside (they differ from TFLite Micro's in a few places,
    e.g. FULLY_CONNECTED rescales in double there). ``tflm=False`` (a file TFLite
    Micro refuses, :func:`tflm_refuses`), TFLite Micro failing to invoke the file
    (``tflm["error"]``) or computing undefined values (:func:`tflm_undefined`, ``tflm["undefined"]``):
    LiteRT's reference kernels decide ``ok``.
    ``sequence`` / ``outputs_sequence``: several invocations of a stateful model (its inputs and our
    outputs per invocation, ``inputs``/``outputs`` ignored), each runtime invoked on one interpreter in turn
    so that its state carries over; every invocation is compared.
    """
    from ..tflite.verify import litert_run_sequence, tflm_run_sequence

    names = _names(buf)
    if sequence is None:
        sequence, outputs_sequence = [inputs], [outputs]
    feeds = [dict(zip(names, x)) for x in sequence]
    ours = [np.asarray(o) for outs in outputs_sequence for o in outs]
    out = {}
    try:
        lite = [v for r in litert_run_sequence(bytes(buf), feeds, reference_kernels=True) for v in r.values()]
    except (MemschedError, RuntimeError) as e:  # LiteRT lacks a few builtins TFLite Micro has (CEIL), or a
        # kernel refuses the type when invoked (int16 SQUARED_DIFFERENCE)
        if not tflm:
            raise MemschedError(f"neither TFLite Micro nor LiteRT runs the file to check it against: {e}") \
                from None
        lite = None
        out["litert_ref"] = {"error": str(e), "max_abs_diff": None, "identical": None}
    if lite is not None:
        d2, same2 = _diff(ours, lite)
        out["litert_ref"] = {"max_abs_diff": d2, "identical": same2}
    if tflm:
        try:
            ref = [np.asarray(o) for r in tflm_run_sequence(bytes(buf), feeds) for o in r]
        except MemschedError as e:      # allocated, but a kernel refuses to run (FILL of int16): LiteRT decides
            if lite is None:
                raise
            ref, out["tflm"] = None, {"error": str(e), "max_abs_diff": None, "identical": None, "ok": None}
    undefined = tflm_undefined(buf) if tflm and ref is not None and lite is not None else None
    if tflm and ref is not None:
        d, same = _diff(ours, ref)
        ok = _agree(ours, ref, rtol, atol)
        out["tflm"] = {"max_abs_diff": d, "identical": same, "ok": bool(ok)}
    if undefined:               # LiteRT decides; TFLite Micro's outputs are reported, not judged
        out["tflm"].update(undefined=undefined, ok=None)
    if undefined or not (tflm and ref is not None):
        ok = _agree(ours, lite, rtol, atol)
        out["litert_ref"]["ok"] = bool(ok)
    out["ok"] = bool(ok)
    out["invocations"] = len(feeds)
    return out


def side_by_side(board_name: str, tflm: dict | None, default: dict | None, ours: dict) -> str:
    """The comparison table: TFLite Micro's arena, TVM's default and ours (RAM total, flash, instructions).

    ``default``/``ours`` hold ``ram``, ``flash`` and ``instructions`` (None: not measured / not run).
    """
    def cell(v, unit=" B"):
        return "-" if v is None else (f"{v:,}{unit}" if isinstance(v, int) else str(v))

    rows = [(f"side by side on {board_name}", "RAM total", "flash", "instructions")]
    if tflm is not None:
        rows.append(("TFLite Micro (arena)", cell(tflm.get("min_arena")), "-", "-"))
    if default is not None:
        rows.append(("TVM default", cell(default.get("ram")), cell(default.get("flash")),
                     cell(default.get("instructions"), "")))
    rows.append(("tvm_memsched", cell(ours.get("ram")), cell(ours.get("flash")), cell(ours.get("instructions"), "")))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    table = "\n".join("  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()
                      for r in rows)
    arena, ram = (tflm or {}).get("min_arena"), ours.get("ram")
    if isinstance(arena, int) and isinstance(ram, int):
        table += (f"\n  RAM total {ram / max(1, arena):.2f}x TFLite Micro's smallest arena "
                  f"({'at most' if ram <= arena else 'MORE than'} TFLM's)")
    return table
