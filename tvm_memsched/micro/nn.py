"""Fast integer kernels for the C export: tvm_memsched's microkernel library in place of TVM's C.

The integer kernels of :mod:`tvm_memsched.relax.int8` are TIR: exact, portable,
and slow on a Cortex-M once TVM's C code generator has written them (the
accumulator lives in a workspace buffer, the zero point is added per
multiply-accumulate, each loaded byte feeds one product). For the operators
that dominate inference time, CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and
the pools, the export calls a small C library instead (``runtime/tms_nn.c``;
its header says how it computes). This module decides which kernels it takes
and prepares their constants at compile time:

* :func:`select` recognises a kernel by the description the int8 lowering
  stored with it (:func:`tvm_memsched.relax.int8.kernels.description`, valid
  only while the kernel's body is the one described) and takes it when every
  call passes its weights and channel table as constants;
* :func:`wrapper_source` writes the kernel's C function (TVM's packed calling
  convention, so ``model.c`` calls it like any other) with its shapes and
  quantisation as a ``const`` parameter block, and its column buffer requested
  as workspace (planned in the arena like any other workspace);
* :func:`repack` rewrites each call's constant arguments: weights in the
  library's order (channel pairs interleaved every four reduction elements,
  rows padded to four: the same bytes, plus at most three per row), and a
  channel table with the input zero point folded into the bias
  (``bias - zp_in * sum(weights)``) and the fast-requantisation flag, set only
  where it is proven exact (``|accumulator| < 2**30``, no left shift, a right
  shift of at least 1);
* :func:`config_header` writes ``tms_nn_config.h``: the library's specialised
  variants (integer output modes, float kernels with or without fused
  multiply-add) that the calls reach, so the others cost no flash.

For a core with Helium (``select(..., mve=True)``: Cortex-M55/M85) the integer
convolutions, depthwise convolutions and fully connected layers get the
library's Helium layouts instead (``runtime/tms_nn_helium.inc``): each output
channel's weights contiguous, a convolution's padded to 16 bytes, a fully
connected layer's K apart with 3 channels more at most (:func:`pack_helium`;
depthwise weights as in the file), and a channel table whose parameters the
vector code loads directly, no larger than the DSP path's from 4 channels on
(:func:`helium_table`: int8 shifts; flagged ``TMS_PACK_HELIUM`` in its
header); their wrappers call the library's Helium
entry points (``tms_conv_s8_helium``, ...) with a larger workspace (four
windows instead of two).

For a core with the DSP extension and no Helium (``select(..., dsp=True)``:
Cortex-M4/M7/M33) integer convolutions call ``tms_conv_s8_wide`` (each pair of
windows gathered widened to int16: twice the column workspace, fewer
instructions; ``kernels="auto"`` narrows them back where that breaks the RAM
budget) and fully connected layers whose weights fit it take the pair16 layout
(:func:`pack_pair16`: two channels' weights as one int16 per input, the same
bytes, ``TMS_PACK_PAIR16`` in the table's header).

Besides these, the library computes the float kernels of
:class:`~tvm_memsched.relax.passes.float_kernels.FloatKernels` (float32 or
float16 weights) and the dynamic-range quantized ("hybrid") kernels of
:mod:`~tvm_memsched.relax.frontends.tflite_hybrid` (:data:`HYBRID_OPS`): the
input quantized on the fly, int32 sums with the integer kernels' dot products
(weights packed as theirs), a table of weight scales and biases
(:func:`hybrid_table`).

The library keeps every in-place overlap proven on the TIR kernel safe: it
reads all inputs of a block of outputs (two pixels, or four channels of one
pixel) before writing any of them, which never writes earlier relative to the
reads than the TIR loop nest does.

The constants' layouts themselves are :mod:`tvm_memsched.micro.nn_pack`'s.

Example
-------
>>> call_macs({"op": "dense", "x": [1, 8], "w": [4, 8], "y": [1, 4]})
32
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .nn_pack import (ACC_LIMIT, FAST_FLAG, channel_table, helium_table, hybrid_scratch_bytes, hybrid_table,
                      pack_depthwise, pack_helium, pack_pair16, pack_weights, pair16_fits)

__all__ = ["NnKernel", "FLOAT_OPS", "HYBRID_OPS", "select", "wrapper_source", "repack", "hybrid_table",
           "hybrid_scratch_bytes", "input_dies", "pack_weights", "pack_depthwise", "channel_table", "call_macs",
           "params_fit", "library_variants", "config_header", "MODES", "LIBRARY_FILES",
           "SUMS_MIN_POSITIONS", "pack_helium", "helium_table", "HELIUM_OPS", "pack_pair16",
           "pair16_fits"]

#: kernel choices of the C export: the microkernel library where it applies, or TVM's C everywhere
MODES = ("fast", "tvm")
#: the library's files in ``micro/runtime``
LIBRARY_FILES = ("tms_nn.c", "tms_nn.h", "tms_nn_float.inc", "tms_nn_helium.inc")
_PAIR16_FLAG = 8                # TMS_PACK_PAIR16: a fully connected layer's weights in the pair16 layout
#: integer kernels the library computes in its Helium layouts on cores with MVE
HELIUM_OPS = ("conv2d", "depthwise_conv2d", "dense")
_SUMS_FLAG = 128                # TMS_F_SUMS: a hybrid kernel's weight sums in its table
#: a hybrid convolution or fully connected layer with fewer output positions (pixels times batches, or rows)
#: keeps its weight sums in flash: computing them per call costs about 1 / (2 x positions) of its MACs' time
SUMS_MIN_POSITIONS = 16
#: float32 kernels of :mod:`tvm_memsched.relax.passes.float_kernels` the library computes
FLOAT_OPS = ("conv2d_f32", "depthwise_conv2d_f32", "dense_f32")
#: dynamic-range quantized operators of :mod:`tvm_memsched.relax.frontends.tflite_hybrid` it computes
HYBRID_OPS = ("hybrid_conv2d", "hybrid_depthwise_conv2d", "hybrid_dense")
#: most taps the library's depthwise convolution takes (TMS_DW_MAX_TAPS in tms_nn.h)
DW_MAX_TAPS = 64


@dataclass
class NnKernel:
    """A kernel the library computes: its PrimFunc name, the operator description and the column bytes."""

    name: str
    op: str
    desc: dict
    col_bytes: int = 0          # workspace: a convolution's column buffer, a depthwise convolution's scratch
    fma: bool = True            # float kernels: fused multiply-add (else TVM's floats exactly)
    sums_in_table: bool = False  # hybrid convolutions, fully connected: weight sums in flash (else per call)
    helium: bool = False        # integer kernels: the Helium layouts (:func:`select` with ``mve``)
    wide: bool = False          # a convolution's column widened to int16 (:func:`select` with ``dsp``)
    pair16: bool = False        # a fully connected layer's weights in the pair16 layout where they fit it

    def workspace_events(self) -> list[tuple[str, int]]:
        """The workspace requests of the wrapper as :func:`tvm_memsched.micro.kernels.workspace_requests`
        reads them from TVM's C: its scratch, taken whole from the call's region."""
        return [("alloc", self.col_bytes)] if self.col_bytes else []

    def narrowed(self) -> "NnKernel":
        """This kernel with a convolution's column kept int8 (``tms_conv_s8``: half the workspace of
        ``wide``)."""
        if not self.wide:
            return self
        return dataclasses.replace(self, wide=False, col_bytes=self.col_bytes // 2)

    @property
    def needs_weight_sums(self) -> bool:
        """A hybrid convolution or fully connected layer quantizing asymmetrically: its zero point's share
        ``zp * sum(w)`` needs each output channel's sum of weights (a symmetric one's zero point is 0)."""
        return self.op in ("hybrid_conv2d", "hybrid_dense") and bool(self.desc["asymmetric"])

    def put_sums_in_table(self) -> None:
        """A hybrid convolution's or fully connected layer's weight sums in its flash table (4 bytes a
        channel) instead of computed per call into scratch (as many bytes of RAM while it runs)."""
        self.sums_in_table = True
        self.col_bytes = hybrid_scratch_bytes(self.desc)

    @property
    def constant_args(self) -> tuple:
        """Argument positions that must be constants (weights, channel table; a table operator's table)."""
        if self.op in ("conv2d", "depthwise_conv2d", "dense"):
            return (1, 2) if self._has_table else (1,)
        if self.op in FLOAT_OPS:
            return (1, 2) if self.desc["has_bias"] else (1,)
        if self.op in HYBRID_OPS:                # weights, scales, bias
            return (1, 2, 3) if self.desc["has_bias"] else (1, 2)
        return (1,) if self.op == "lut" else ()

    def wrapper(self, symbol: str) -> str:
        """The kernel's C function ``__tvm_ffi_<symbol>`` (:func:`wrapper_source`)."""
        return wrapper_source(self, symbol)

    @property
    def repacked(self) -> bool:
        """Whether :func:`repack` rewrites this kernel's constant arguments (weights and channel table)."""
        return self.op in ("conv2d", "depthwise_conv2d", "dense")

    @property
    def _has_table(self) -> bool:
        rq = self.desc["requant"]
        return bool(self.desc["has_bias"]) or rq["multiplier"] is None


def _supported(desc: dict) -> str | None:
    """The library function for a kernel description, or None."""
    op = desc.get("op")
    if "int16" in desc.get("dtypes", ()):
        return None                      # the library's integer kernels are int8 (16x8 kernels stay TVM's C)
    if op in ("conv2d_f32", "depthwise_conv2d_f32"):
        return op if len(desc["x"]) == 4 else None
    if op in ("dense_f32", "hybrid_dense"):
        return op
    if op == "hybrid_conv2d":
        return op if len(desc["x"]) == 4 else None
    if op == "hybrid_depthwise_conv2d":       # depth multiplier 1
        return op if len(desc["x"]) == 4 and desc["w"][3] == desc["x"][3] else None
    if op in ("max_pool2d", "avg_pool2d"):
        return op if len(desc["x"]) == 4 else None
    if op == "lut":
        return op if list(desc["dtypes"]) == ["int8", "int8"] else None
    if op == "add":                      # same shapes only (broadcasting stays TVM's)
        return op if list(desc["a"]) == list(desc["b"]) == list(desc["y"]) else None
    if list(desc.get("dtypes", [])) != ["int8", "int8", "int8"]:
        return None
    if op == "conv2d":
        return op if desc["groups"] == 1 and len(desc["x"]) == 4 else None
    if op == "depthwise_conv2d":
        ok = desc["depth_multiplier"] == 1 and desc["w"][3] == desc["x"][3] and len(desc["x"]) == 4
        return op if ok and desc["w"][1] * desc["w"][2] <= DW_MAX_TAPS else None
    if op == "dense":
        return op if desc["w_offset"] == 0 else None
    return None


def select(mod, names, mve: bool = False, dsp: bool = False) -> dict:
    """``{PrimFunc name: NnKernel}`` for the kernels among ``names`` the library computes (see the module
    docstring); ``mod`` is the module whose ``main`` calls them (after ``CallTIRRewrite``); ``mve``: the
    target core has Helium, so the integer kernels of :data:`HELIUM_OPS` take the Helium layouts; ``dsp``: it
    has the DSP extension (and no Helium), so integer convolutions widen their column to int16 once per pair
    of windows (``tms_conv_s8_wide``: twice the column bytes, fewer instructions per multiply-accumulate) and
    fully connected layers take the pair16 layout where their weights fit it (:func:`pack_pair16`)."""
    import tvm

    from ..relax.int8.kernels import description

    found = {}
    for name in names:
        func = mod[name]
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        desc = description(func)
        if desc is None or _supported(desc) is None:
            continue
        k = NnKernel(name, desc["op"], desc)
        if k.op in HYBRID_OPS:
            k.col_bytes = hybrid_scratch_bytes(desc, sums=k.needs_weight_sums)
            if k.needs_weight_sums and math.prod(desc["y"][:-1]) < SUMS_MIN_POSITIONS:
                k.put_sums_in_table()       # computing the sums would take about as long as the call itself
        elif k.op == "conv2d":
            kh, kw, ic = desc["w"][1], desc["w"][2], desc["w"][3]
            k.col_bytes = 2 * (-(-(kh * kw * ic) // 4) * 4)
            if dsp and not mve:
                k.wide = True
                k.col_bytes *= 2                  # TMS_CONV_WIDE_COL_BYTES
        elif k.op == "depthwise_conv2d":      # tap offsets, a border pixel's gathered window, tap validity
            k.col_bytes = 9 * desc["w"][1] * desc["w"][2]
        elif k.op == "dense":
            k.pair16 = dsp and not mve
        if mve and k.op in HELIUM_OPS:
            _take_helium(k)
        found[name] = k
    if not found:
        return found
    # every call must pass the weights (and channel table) as constants
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.GlobalVar) and v.op.name_hint in found:
                k = found[v.op.name_hint]
                if not all(i < len(v.args) and isinstance(v.args[i], tvm.ir.Constant) for i in k.constant_args):
                    del found[v.op.name_hint]
    return found


def _take_helium(k: NnKernel) -> None:
    """Switch an integer kernel to the Helium layouts, with their workspace: a convolution's column buffer
    holds four windows of K rounded up to 16 bytes (TMS_HL_CONV_COL_BYTES); a depthwise convolution's
    scratch two offsets per tap and C rounded up to 16 bytes (TMS_HL_DW_SCRATCH_BYTES)."""
    k.helium = True
    d = k.desc
    if k.op == "conv2d":
        k.col_bytes = 4 * (-(-(d["w"][1] * d["w"][2] * d["w"][3]) // 16) * 16)
    elif k.op == "depthwise_conv2d":
        k.col_bytes = 8 * d["w"][1] * d["w"][2] + -(-d["x"][3] // 16) * 16


#: int8 output modes of the library (``out_mode`` in tms_nn.c): exact, fast with the full range, fast clamped
_MODE_NAMES = ("EXACT", "FULL", "CLAMP")


def library_variants(prog, kernels: dict) -> dict:
    """``{macro: 0 or 1}``: which specialised variants of the library ``prog``'s calls reach (after
    :func:`repack`), as ``tms_nn.c`` names them (``TMS_NN_MODE_EXACT``, ``_FULL``, ``_CLAMP``,
    ``TMS_NN_FMA_OFF``, ``TMS_NN_FMA_ON``, ``TMS_NN_HDW_TAPS``, ``TMS_NN_HDW_ONCE``, ``TMS_NN_HDW_REST``,
    ``TMS_NN_HYBRID_SYM``, ``TMS_NN_HYBRID_ASYM``, ``TMS_NN_FC_PAIRS``, ``TMS_NN_FC_PAIR16``). An integer
    call's output mode follows from the fast flag :func:`channel_table` wrote into its table and its activation
    range, as ``out_mode`` picks it; a float call's from its kernel's ``fma``; a hybrid depthwise convolution's
    from whether it may overwrite its input (:func:`input_dies`: quantized once, else tap by tap) and whether
    its channels leave some over after blocks of four; a hybrid call's quantization from its ``asymmetric``; a
    fully connected call's weight layout from its table's ``TMS_PACK_PAIR16`` flag. A kind of kernel no call
    uses keeps its default (1), which costs nothing: the functions are only linked where called."""
    modes, fmas, hdw, rest, asym, fc = set(), set(), set(), set(), set(), set()
    for call in prog.calls:
        k = kernels.get(call.kernel)
        if k is None:
            continue
        if k.repacked:
            table = np.asarray(prog.params[call.args[2].base[1]]).reshape(-1)
            rq = k.desc["requant"]
            fast = bool(int(table[0]) & FAST_FLAG)
            modes.add(0 if not fast else 1 if rq["lo"] <= -128 and rq["hi"] >= 127 else 2)
            if k.op == "dense" and not k.helium:
                fc.add(bool(int(table[0]) & _PAIR16_FLAG))
        elif k.op in FLOAT_OPS:
            fmas.add(bool(k.fma))
        if k.op == "hybrid_depthwise_conv2d":
            hdw.add(bool(call.args[-1][1]))
            rest.add(k.desc["x"][-1] % 4 != 0)
        if k.op in HYBRID_OPS:
            asym.add(bool(k.desc["asymmetric"]))
    out = {}
    if modes:
        out.update({f"TMS_NN_MODE_{n}": int(i in modes) for i, n in enumerate(_MODE_NAMES)})
    if fmas:
        out.update({"TMS_NN_FMA_OFF": int(False in fmas), "TMS_NN_FMA_ON": int(True in fmas)})
    if hdw:
        out.update({"TMS_NN_HDW_TAPS": int(False in hdw), "TMS_NN_HDW_ONCE": int(True in hdw),
                    "TMS_NN_HDW_REST": int(True in rest)})
    if asym:
        out.update({"TMS_NN_HYBRID_SYM": int(False in asym), "TMS_NN_HYBRID_ASYM": int(True in asym)})
    if fc:
        out.update({"TMS_NN_FC_PAIRS": int(False in fc), "TMS_NN_FC_PAIR16": int(True in fc)})
    return out


def config_header(prog, kernels: dict) -> str:
    """``tms_nn_config.h`` for ``prog``: the library variants its calls reach (:func:`library_variants`), so
    ``tms_nn.c`` compiles only those."""
    lines = ["/* tms_nn_config.h: the variants of tms_nn.c this model calls (written by tvm_memsched.micro); "
             "the others are not compiled */"]
    lines += [f"#define {k} {v}" for k, v in library_variants(prog, kernels).items()]
    return "\n".join(lines) + "\n"


def call_macs(desc: dict) -> int:
    """Multiply-accumulates of one call of a described kernel (0 for pools and element-wise operators)."""
    from ..relax.int8.kernels import description_macs

    return description_macs(desc)


# ------------------------------------------------------------------ C
def _conv_params(desc: dict) -> dict:
    n, h, w, c = desc["x"]
    _, oh, ow, oc = desc["y"]
    kh, kw = desc["w"][1], desc["w"][2]
    rq = desc["requant"]
    return {"batch": n, "in_h": h, "in_w": w, "in_c": c, "out_h": oh, "out_w": ow, "out_c": oc, "kh": kh, "kw": kw,
            "sh": desc["strides"][0], "sw": desc["strides"][1], "dh": desc["dilation"][0],
            "dw": desc["dilation"][1], "pad_t": desc["padding"][0], "pad_l": desc["padding"][1],
            "in_zp": -desc["in_offset"], "out_zp": rq["offset"], "act_min": rq["lo"], "act_max": rq["hi"]}


def _pool_params(desc: dict) -> dict:
    n, h, w, c = desc["x"]
    _, oh, ow, _ = desc["y"]
    return {"batch": n, "in_h": h, "in_w": w, "c": c, "out_h": oh, "out_w": ow, "kh": desc["pool"][0],
            "kw": desc["pool"][1], "sh": desc["strides"][0], "sw": desc["strides"][1],
            "pad_t": desc["padding"][0], "pad_l": desc["padding"][1], "act_min": desc["lo"], "act_max": desc["hi"]}


def _fc_params(desc: dict) -> dict:
    rq = desc["requant"]
    return {"rows": math.prod(desc["x"][:-1]), "in_n": desc["x"][-1], "out_n": desc["w"][0],
            "in_zp": -desc["in_offset"], "out_zp": rq["offset"], "act_min": rq["lo"], "act_max": rq["hi"]}


_LIMITS = {"batch": 65535, "in_h": 65535, "in_w": 65535, "in_c": 65535, "out_h": 65535, "out_w": 65535,
           "out_c": 65535, "c": 65535, "rows": 65535, "in_n": 65535, "out_n": 65535, "kh": 255, "kw": 255,
           "sh": 255, "sw": 255, "dh": 255, "dw": 255}


def _fits(params: dict) -> bool:
    return all(0 <= int(params[k]) <= lim for k, lim in _LIMITS.items() if k in params) and \
        all(-32768 <= int(params[k]) <= 32767 for k in ("pad_t", "pad_l") if k in params)


def _c_value(v) -> str:
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):      # an open activation range (math.h)
            return "NAN" if math.isnan(v) else "INFINITY" if v > 0 else "-INFINITY"
        return float(np.float32(v)).hex() + "f"     # exact: the float32 the model holds
    return str(int(v))


def _struct(ctype: str, var: str, params: dict) -> str:
    fields = ", ".join(f".{k} = {_c_value(v)}" for k, v in params.items())
    return f"static const {ctype} {var} = {{{fields}}};"


def _float_flags(desc: dict, fma: bool) -> dict:
    """TMS_F_* of tms_nn.h (a hybrid operator's rescale order too) and the activation range."""
    lo, hi = desc["lo"], desc["hi"]
    flags = (1 if desc["has_bias"] else 0) | (2 if desc.get("residual") else 0) | (4 if lo is not None else 0) | \
        (8 if hi is not None else 0) | (16 if fma else 0) | (32 if desc.get("w_first") else 0) | \
        (64 if desc.get("asymmetric") else 0)
    return {"flags": flags, "lo": float(lo if lo is not None else 0.0), "hi": float(hi if hi is not None else 0.0)}


def _convf_params(desc: dict, fma: bool) -> dict:
    n, h, w, c = desc["x"]
    _, oh, ow, oc = desc["y"]
    return {"batch": n, "in_h": h, "in_w": w, "in_c": c, "out_h": oh, "out_w": ow, "out_c": oc,
            "kh": desc["w"][1], "kw": desc["w"][2], "sh": desc["strides"][0], "sw": desc["strides"][1],
            "dh": desc["dilation"][0], "dw": desc["dilation"][1], "pad_t": desc["padding"][0],
            "pad_l": desc["padding"][1], **_float_flags(desc, fma)}


def _fcf_params(desc: dict, fma: bool) -> dict:
    return {"rows": math.prod(desc["x"][:-1]), "in_n": desc["x"][-1], "out_n": desc["w"][0],
            **_float_flags(desc, fma)}


def _hybrid_dense_params(desc: dict) -> dict:
    """A hybrid fully connected layer as ``tms_hconv_f32`` computes it: a 1 x 1 convolution of 1 x 1 images,
    one batch per row (each row has its own quantization parameters)."""
    one = dict.fromkeys(("in_h", "in_w", "out_h", "out_w", "kh", "kw", "sh", "sw", "dh", "dw"), 1)
    return {"batch": math.prod(desc["x"][:-1]), "in_c": desc["x"][-1], "out_c": desc["w"][0], **one, "pad_t": 0,
            "pad_l": 0, **_float_flags(desc, False)}


_SIGNATURE = "TVM_DLL int32_t __tvm_ffi_{sym}(void* self_handle, void* args, int32_t num_args, void* result) {{"


def _arg(i: int, ctype: str) -> str:
    return f"({ctype})tms_arg(args, {i})"


def _shift_info(shift: int) -> int:
    """A TFLite shift as the library stores it: right - 1 | left << 8 | right << 16."""
    left, right = max(shift, 0), max(-shift, 0)
    return (max(right - 1, 0) & 0xff) | (left << 8) | (right << 16)


def _add_params(desc: dict) -> dict:
    """ADD / SUB parameters, with the fast flag where every rescaling is proven exact in the fast form."""
    from ..relax.int8.fixedpoint import mbqm_array

    rq, ls = desc["requant"], int(desc["left_shift"])
    stages = [(desc["a_offset"], desc["a_mult"], desc["a_shift"]), (desc["b_offset"], desc["b_mult"], desc["b_shift"])]
    # input stages: no left shift (a right shift of 0 is SRDHM alone); output: right shift >= 1
    fast = 0 <= ls <= 21 and all(sh <= 0 and m >= 0 for _, m, sh in stages) and rq["shift"] <= -1 and \
        rq["multiplier"] >= 0
    if fast:   # |raw| bound: each input stage at its extreme (monotonic in the input)
        raw = 0
        for off, m, sh in stages:
            ext = np.array([(-128 + off) << ls, (127 + off) << ls], np.int64)
            raw += int(np.abs(mbqm_array(ext, m, sh)).max())
        fast = raw < ACC_LIMIT
    return {"n": math.prod(desc["y"]), "a_off": desc["a_offset"], "b_off": desc["b_offset"], "left_shift": ls,
            "a_mult": desc["a_mult"], "a_shift": _shift_info(desc["a_shift"]), "b_mult": desc["b_mult"],
            "b_shift": _shift_info(desc["b_shift"]), "out_mult": rq["multiplier"],
            "out_shift": _shift_info(rq["shift"]), "out_zp": rq["offset"], "act_min": rq["lo"],
            "act_max": rq["hi"], "flags": (FAST_FLAG if fast else 0) | (2 if desc["negate_b"] else 0)}


def params_fit(kernel: NnKernel) -> bool:
    """True if the kernel's shapes fit the library's parameter block (16-bit sizes, 8-bit windows)."""
    d = kernel.desc
    op = kernel.op
    if op in ("lut", "add"):
        return math.prod(d["y"]) < 1 << 32
    if op in FLOAT_OPS + HYBRID_OPS:
        params = _fcf_params(d, True) if op == "dense_f32" else _hybrid_dense_params(d) if op == "hybrid_dense" \
            else _convf_params(d, True)
        return _fits(params) and \
            4 * max(math.prod(d["x"]), math.prod(d["y"])) < 1 << 32
    params = _fc_params(d) if op == "dense" else _pool_params(d) if op.endswith("pool2d") else _conv_params(d)
    return _fits(params)


def _with_scratch(kernel: NnKernel, ctype: str, *statements: str) -> list[str]:
    """C lines that take the kernel's scratch (``col_bytes``, ``ctype* scratch``): the whole workspace region
    planned for the call (``NnKernel.workspace_events``), then run ``statements``, which use it."""
    return [f"  {ctype}* scratch = ({ctype}*)tvm_memsched_workspace({kernel.col_bytes}u);",
            "  if (scratch == NULL) return -1;", *(f"  {st}" for st in statements)]




def wrapper_source(kernel: NnKernel, sym: str) -> str:
    """The C function ``__tvm_ffi_<sym>`` computing ``kernel`` with the library (arguments as :func:`repack`
    leaves them: input, packed weights, channel table, output; pools: input, output)."""
    d, op = kernel.desc, kernel.op
    var = f"{sym}_params"
    head = [f"/* {kernel.name}: {op} by the tvm_memsched microkernel library (tms_nn.c) */"]
    body = [_SIGNATURE.format(sym=sym), "  (void)self_handle; (void)num_args; (void)result;"]
    hl = "_helium" if kernel.helium else ""       # the Helium layouts' entry points
    if op == "conv2d":
        head.append(_struct("tms_conv_t", var, _conv_params(d)))
        hl = "_wide" if kernel.wide else hl
        body += _with_scratch(kernel, "int8_t", f"tms_conv_s8{hl}(&{var}, {_arg(0, 'const int8_t*')}, "
                              f"{_arg(1, 'const int8_t*')}, {_arg(2, 'const tms_chan_t*')}, {_arg(3, 'int8_t*')}, "
                              "scratch);")
    elif op == "depthwise_conv2d":
        head.append(_struct("tms_conv_t", var, _conv_params(d)))
        body += _with_scratch(kernel, "void", f"tms_dwconv_s8{hl}(&{var}, {_arg(0, 'const int8_t*')}, "
                              f"{_arg(1, 'const int8_t*')}, {_arg(2, 'const tms_chan_t*')}, {_arg(3, 'int8_t*')}, "
                              "scratch);")
    elif op == "dense":
        head.append(_struct("tms_fc_t", var, _fc_params(d)))
        body.append(f"  tms_fc_s8{hl}(&{var}, {_arg(0, 'const int8_t*')}, {_arg(1, 'const int8_t*')}, "
                    f"{_arg(2, 'const tms_chan_t*')}, {_arg(3, 'int8_t*')});")
    elif op == "add":
        head.append(_struct("tms_add_t", var, _add_params(d)))
        body.append(f"  tms_add_s8(&{var}, {_arg(0, 'const int8_t*')}, {_arg(1, 'const int8_t*')}, "
                    f"{_arg(2, 'int8_t*')});")
    elif op in FLOAT_OPS:
        dense = op == "dense_f32"
        head.append(_struct("tms_fcf_t" if dense else "tms_convf_t", var,
                            _fcf_params(d, kernel.fma) if dense else _convf_params(d, kernel.fma)))
        # weights (and biases) kept float16: the f32h functions
        wt, bt, suffix = ("const uint16_t*", "const uint16_t*", "h") if d.get("weights") == "float16" else \
            ("const float*", "const float*", "")
        k = 2
        bias = _arg(k, bt) if d["has_bias"] else "NULL"
        k += int(d["has_bias"])
        res = _arg(k, "const float*") if d["residual"] else "NULL"
        k += int(d["residual"])
        fn = {"conv2d_f32": "tms_conv_f32", "depthwise_conv2d_f32": "tms_dwconv_f32", "dense_f32": "tms_fc_f32"}[op]
        body.append(f"  {fn}{suffix}(&{var}, {_arg(0, 'const float*')}, {_arg(1, wt)}, {bias}, {res}, "
                    f"{_arg(k, 'float*')});")
    elif op in HYBRID_OPS:               # (x, packed weights, table, y): see repack
        dense = op == "hybrid_dense"      # a 1 x 1 convolution, one batch per row
        params = _hybrid_dense_params(d) if dense else _convf_params(d, False)
        params["flags"] |= _SUMS_FLAG if kernel.sums_in_table else 0
        head.append(_struct("tms_convf_t", var, params))
        x = d["x"]
        batches, length = (math.prod(x[:-1]), x[-1]) if dense else (x[0], math.prod(x[1:]))
        fn = "tms_hdwconv_f32" if op == "hybrid_depthwise_conv2d" else "tms_hconv_f32"
        # a depthwise convolution's last argument says whether the call may overwrite its input (repack)
        col = ", (int32_t)(intptr_t)tms_arg(args, 4)" if op == "hybrid_depthwise_conv2d" else \
            f", (int8_t*)(scratch + {3 * batches})"
        # the batches' parameters first, by a call of their own (the stack holds it or the kernel, not both)
        body += _with_scratch(kernel, "float",
                              f"tms_quant_params_f32({batches}u, {length}u, {int(bool(d['asymmetric']))}, "
                              f"{_arg(0, 'const float*')}, scratch);",
                              f"{fn}(&{var}, {_arg(0, 'const float*')}, {_arg(1, 'const int8_t*')}, "
                              f"{_arg(2, 'const void*')}, {_arg(3, 'float*')}, scratch{col});")
    elif op == "lut":
        head = head[:1]
        body.append(f"  tms_lut_s8({math.prod(d['y'])}u, {_arg(0, 'const int8_t*')}, {_arg(1, 'const int8_t*')}, "
                    f"{_arg(2, 'int8_t*')});")
    else:
        head.append(_struct("tms_pool_t", var, _pool_params(d)))
        fn = "tms_maxpool_s8" if op == "max_pool2d" else "tms_avgpool_s8"
        body.append(f"  {fn}(&{var}, {_arg(0, 'const int8_t*')}, {_arg(1, 'int8_t*')});")
    body += ["  return 0;", "}"]
    return "\n".join(head + body) + "\n"


def repack(prog, kernels: dict) -> None:
    """Rewrite the constant arguments of ``prog``'s calls to library kernels (see the module docstring) and
    drop constants no call uses any more."""
    from .codegen import Tensor

    if not kernels:
        return
    cache = {}

    def param(t) -> np.ndarray:
        return prog.params[t.base[1]]

    def add(arr: np.ndarray) -> Tensor:
        import hashlib

        arr = np.ascontiguousarray(arr)
        key = (str(arr.dtype), arr.nbytes, hashlib.sha256(arr.tobytes()).digest())
        if key not in cache:
            cache[key] = len(prog.params)
            prog.params.append(arr)
        return Tensor(("param", cache[key]), 0, tuple(arr.shape), str(arr.dtype))

    for i, call in enumerate(prog.calls):
        k = kernels.get(call.kernel)
        if k is not None and k.op in HYBRID_OPS:
            x, w, scales = call.args[:3]
            bias = param(call.args[3]) if k.desc["has_bias"] else None
            weights = param(w).reshape(w.shape)
            packed = weights.reshape(-1) if k.op == "hybrid_depthwise_conv2d" else pack_weights(weights)
            table = hybrid_table(k.desc, param(scales), bias, weights if k.sums_in_table else None)
            call.args = [x, add(packed), add(table), call.args[-1]]
            if k.op == "hybrid_depthwise_conv2d":
                call.args.append(("int", int(input_dies(prog, i, kernels))))
            continue
        if k is None or not k.repacked:
            continue
        x, w = call.args[0], call.args[1]
        table = param(call.args[2]) if k._has_table else None
        y = call.args[-1]
        weights = param(w).reshape(w.shape)
        tab = channel_table(k.desc, weights, None if table is None else table.reshape(-1))
        if k.helium:                     # depthwise weights stay the file's taps x C
            packed = weights.reshape(-1) if k.op == "depthwise_conv2d" else pack_helium(weights, k.op)
            tab = helium_table(tab, k.op)
        elif k.pair16 and pair16_fits(weights):
            packed = pack_pair16(weights)
            tab[0, 0] |= _PAIR16_FLAG
        else:
            packed = pack_depthwise(weights) if k.op == "depthwise_conv2d" else pack_weights(weights)
        call.args = [x, add(packed), add(tab), y]
    _drop_unused_params(prog)


def _span(t) -> tuple[int, int] | None:
    """The arena bytes ``[start, end)`` of Tensor ``t``, or None when it is not in the arena."""
    return (t.base[1] + t.offset, t.base[1] + t.offset + t.nbytes) if t.base[0] == "arena" else None


def input_dies(prog, k: int, kernels: dict) -> bool:
    """True when no later step of ``prog`` reads a byte of call ``k``'s first argument (an arena tensor) before
    something writes it again, so the call may overwrite it: every later call's arguments count as reads
    except its outputs (a library call's last argument, the params a TVM kernel only writes:
    ``prog.kernels.outputs``), which count as writes, as does call ``k``'s own output; the program's
    outputs, new states and the tensors left in the arena for the caller are read at the end."""
    from .codegen import Tensor

    call = prog.calls[k]
    x = _span(call.args[0])
    if x is None:
        return False
    live = [x]                                         # bytes of x that something may still read

    def minus(span):
        nonlocal live
        if span is None:
            return
        a, b = span
        live = [piece for lo, hi in live for piece in ((lo, min(hi, a)), (max(lo, b), hi)) if piece[0] < piece[1]]

    def read(t) -> bool:
        span = _span(t) if isinstance(t, Tensor) else None
        return span is not None and any(lo < span[1] and span[0] < hi for lo, hi in live)

    minus(_span(call.args[-1]) if isinstance(call.args[-1], Tensor) else None)
    for later in prog.calls[k + 1:]:
        outs = {len(later.args) - 1} if later.kernel in kernels else prog.kernels.outputs.get(later.kernel, ())
        if any(read(a) for i, a in enumerate(later.args) if i not in outs):
            return False
        for i in outs:
            minus(_span(later.args[i]) if isinstance(later.args[i], Tensor) else None)
        if not live:
            return True
    final = [t for _, t in list(prog.output_copies) + list(prog.state_copies)] + list(prog.output_places)
    return not any(read(t) for t in final)


def _drop_unused_params(prog) -> None:
    """Renumber ``prog.params`` to the constants something still refers to."""
    from .codegen import Tensor

    used = set()

    def mark(t):
        if isinstance(t, Tensor) and t.base[0] == "param":
            used.add(t.base[1])

    for c in prog.calls:
        for a in c.args:
            mark(a)
    for _, t in list(prog.output_copies) + list(prog.state_copies):
        mark(t)
    for s in prog.states:
        used.add(s.init_param)
    for t in list(prog.input_places) + list(prog.output_places):
        mark(t)
    if len(used) == len(prog.params):
        return
    order = sorted(used)
    new_index = {old: i for i, old in enumerate(order)}

    def fix(t):
        if isinstance(t, Tensor) and t.base[0] == "param":
            return Tensor(("param", new_index[t.base[1]]), t.offset, t.shape, t.dtype)
        return t

    for c in prog.calls:
        c.args = [fix(a) for a in c.args]
    prog.output_copies = [(k, fix(t)) for k, t in prog.output_copies]
    prog.state_copies = [(k, fix(t)) for k, t in prog.state_copies]
    prog.output_places = [fix(t) for t in prog.output_places]
    for s in prog.states:
        s.init_param = new_index[s.init_param]
    prog.params = [prog.params[i] for i in order]
