"""Integer kernels of TFLite's int8 operators as TIR PrimFuncs, free of full-size temporaries.

Every builder returns a scheduled ``PrimFunc`` that computes one TFLite
operator exactly as its reference kernel does (TFLite Micro / LiteRT
``reference_integer_ops``): int32 accumulation of offset-corrected int8
products, the bias, TFLite's ``MultiplyByQuantizedMultiplier`` (per tensor or
per channel), the output offset and the activation clamp. Padding is read
through index arithmetic (never copied); reductions are computed per output
element into a one-element local accumulator (``compute_at`` under the
output's innermost loop), so a kernel needs no workspace.

The builders take the activation dtype (int8, or int16 for TFLite's 16x8
kernels, whose convolutions and fully connected layers accumulate in int64:
``acc_dtype``, ``Requant.wide``); the int16-only operators are in
:mod:`.kernels16`.

Quantization parameters that are the same for the whole tensor are baked into
the kernel as immediates; per-channel multipliers and shifts are int32 input
buffers. The PrimFuncs carry ``op_pattern`` = opaque so that TVM's FuseOps
keeps each TFLite operator one kernel.

Example
-------
>>> f = lut((1, 4), "int8")
>>> [p.name for p in f.params]
['x', 'table', 'y']
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import te, tirx

from ..ir import model_macs, strip_attrs
from .fixedpoint import reduced_multiplier
from .tirmath import cast_i32, clamp, left_shift, mbqm64, rdbpot, right_shift_amount, srdhm

__all__ = ["Requant", "Chain", "DESCRIPTION", "description", "channel_table", "conv2d", "dense", "lut", "binary_add", "binary_mul", "avg_pool2d", "max_pool2d", "transpose_conv2d",
           "mean", "quantize", "prelu", "softmax", "batch_matmul", "schedule_reductions", "finish", "OPAQUE",
           "broadcast_index", "reduced_index", "leading_zeros"]

#: TVM's ``OpPatternKind::kOpaque``
OPAQUE = 8


@dataclass(frozen=True)
class Requant:
    """Output stage of an integer kernel: ``clamp(MBQM(acc, multiplier, shift) + offset, lo, hi)``.

    ``multiplier``/``shift`` are ints (per tensor) or ``None`` when the kernel
    takes them as per-channel int32 buffers.
    """

    multiplier: int | None
    shift: int | None
    offset: int
    lo: int = -128
    hi: int = 127
    wide: bool = False

    @property
    def per_channel(self) -> bool:
        return self.multiplier is None

    def output(self, chain: "Chain", acc, table=None, row: int = 0, out_dtype: str = "int8"):
        """The kernel's output tensor ``y`` from the int32 tensor ``acc``; per channel, the multipliers and
        shifts are rows ``row`` and ``row + 1`` of the channel ``table`` (indexed by the last axis).

        ``wide``: ``acc`` is int64 (TFLite's 16x8 kernels) and the multipliers are the reduced Q15 ones of
        TFLite's int64 ``MultiplyByQuantizedMultiplier`` (:func:`.fixedpoint.reduced_multiplier`)."""
        mult = self.multiplier if not self.per_channel else (lambda i: table[row, i[-1]])
        shift = self.shift if not self.per_channel else (lambda i: table[row + 1, i[-1]])
        scaled = chain.requant64(acc, mult, shift) if self.wide else chain.requant(acc, mult, shift)
        return te.compute(chain.shape, lambda *i: clamp(scaled[i] + _i8(self.offset), self.lo, self.hi)
                          .astype(out_dtype), name="y")


class Chain:
    """Element-wise int32 stages over one output shape.

    Each stage is a TE tensor that :func:`schedule_reductions` computes under the
    output's innermost loop into a one-element local buffer, so a long chain of
    integer steps costs registers, not memory, and no subexpression is
    duplicated (TVM 0.27's TIR passes reject expression-level ``Let``).
    """

    def __init__(self, shape, prefix: str = "t"):
        self.shape, self.prefix, self.n = tuple(shape), prefix, 0

    def __call__(self, fn):
        self.n += 1
        return te.compute(self.shape, fn, name=f"{self.prefix}{self.n}")

    def requant(self, x, mult, shift):
        """``MultiplyByQuantizedMultiplier(x, mult, shift)``; ``mult``/``shift`` ints or ``f(index) -> expr``."""
        m = mult if callable(mult) else (lambda i: mult)
        sh = shift if callable(shift) else (lambda i: shift)
        hi = self(lambda *i: srdhm(left_shift(x[i], sh(i)), m(i)))
        return self(lambda *i: rdbpot(hi[i], right_shift_amount(sh(i))))

    def requant64(self, x, mult, shift):
        """TFLite's int64 ``MultiplyByQuantizedMultiplier(x, mult, shift)`` of the int64 tensor ``x``; ``mult``
        the reduced Q15 multiplier (int or ``f(index) -> expr``)."""
        m = mult if callable(mult) else (lambda i: mult)
        sh = shift if callable(shift) else (lambda i: shift)
        return self(lambda *i: mbqm64(x[i], m(i), sh(i)))


#: PrimFunc attribute describing what an integer kernel computes (JSON; see :func:`finish`)
DESCRIPTION = "tvm_memsched.nn"


def description(func) -> dict | None:
    """The operator a kernel built here computes (``{"op": ..., parameters}``), or None if ``func`` was not
    built here or has been changed since (another body than the one described: e.g. fused with a producer)."""
    attrs = func.attrs
    if attrs is None or DESCRIPTION not in attrs:
        return None
    desc = json.loads(str(attrs[DESCRIPTION]))
    if str(tvm_ffi.structural_hash(strip_attrs(func))) != desc.get("hash"):
        return None
    return desc


def description_macs(desc: dict) -> int:
    """Multiply-accumulates of one call of a described kernel (0 for pools, element-wise operators and
    quantization).

    >>> description_macs({"op": "hybrid_dense", "x": [2, 8], "w": [3, 8], "y": [2, 3]})
    48
    """
    op = desc["op"].replace("_f32", "").replace("hybrid_", "")
    if "y" not in desc:
        return 0
    out = math.prod(desc["y"])
    if op == "conv2d":
        return out * math.prod(desc["w"][1:])
    if op == "depthwise_conv2d":
        return out * desc["w"][1] * desc["w"][2]
    if op == "dense":
        return out * desc["w"][1]
    if op == "batch_matmul":
        return out * desc["k"]
    return 0


def module_macs(mod) -> int:
    """Multiply-accumulates of ``mod["main"]``: Relax's convolutions and matmuls
    (:func:`~tvm_memsched.relax.ir.model_macs`) and the described kernels it calls (a dynamic-range quantized
    model's operators, say)."""
    from tvm import relax

    total = model_macs(mod["main"])

    def visit(e):
        nonlocal total
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.call_tir" \
                and isinstance(e.args[0], tvm.ir.GlobalVar):
            func = mod[e.args[0]]
            desc = description(func) if isinstance(func, tvm.tirx.PrimFunc) else None
            if desc is not None:
                total += description_macs(desc)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return total


def finish(tensors, name: str, *, reduce_into: str | None = None, describe: dict | None = None,
           schedule=None) -> tvm.tirx.PrimFunc:
    """PrimFunc of the TE ``tensors`` (inputs ..., output), reductions computed per output element.

    ``describe``: the operator and its parameters (JSON-serialisable), stored with the structural hash of
    the function in the :data:`DESCRIPTION` attribute, so code generators can recognise the kernel
    (:func:`description`) and replace it by an equivalent one. ``schedule``: a function of the PrimFunc
    giving the scheduled one, in place of ``reduce_into``.
    """
    func = te.create_prim_func(list(tensors))
    if reduce_into is not None:
        func = schedule_reductions(func, reduce_into)
    if schedule is not None:
        func = schedule(func)
    if describe is not None:
        desc = dict(describe, hash=str(tvm_ffi.structural_hash(strip_attrs(func))))
        func = func.with_attr(DESCRIPTION, json.dumps(desc, sort_keys=True, default=int))
    return func.with_attr("op_pattern", OPAQUE).with_attr("global_symbol", name).with_attr(
        "tvm_memsched.int8", name)


def _requant_desc(rq: "Requant") -> dict:
    desc = {"multiplier": rq.multiplier, "shift": rq.shift, "offset": rq.offset, "lo": rq.lo, "hi": rq.hi}
    return dict(desc, wide=True) if rq.wide else desc


def schedule_reductions(func, output_block: str) -> tvm.tirx.PrimFunc:
    """``compute_at`` every other block under the innermost loop of ``output_block``.

    The one-element buffers keep the default (global) scope: TVM places small global-scope buffers on the
    stack (C locals, registers once compiled), where ``local`` ones would each be a
    ``TVMBackendAllocWorkspace`` call on a microcontroller (its frame, and workspace in the arena)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    out = sch.get_sblock(output_block)
    root = sch.get_sblock("root")
    producers = [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint != output_block]
    for blk in reversed(producers):
        loops = sch.get_loops(out)
        if not loops:                   # a scalar: each block computes its one element already
            break
        sch.compute_at(blk, loops[-1], preserve_unit_loops=False)
    return sch.mod["main"]


def _i8(v: int):
    return tirx.const(int(v), "int32")


def conv2d(x_shape, w_shape, out_shape, *, strides, padding, dilation, groups: int, depth_multiplier: int = 0,
           in_offset: int, requant: Requant, has_bias: bool, in_dtype: str = "int8",
           w_dtype: str = "int8", out_dtype: str = "int8", name: str = "conv2d_int8",
           acc_dtype: str = "int32") -> tvm.tirx.PrimFunc:
    """NHWC int8 convolution (``w`` OHWI) or depthwise convolution (``depth_multiplier`` > 0, ``w`` 1HW(C*M)).

    Parameters
    ----------
    strides, dilation : (int, int)
    padding : (top, left, bottom, right)
        Zero padding in real values, i.e. padded inputs contribute nothing.
    in_offset : int
        ``-input_zero_point``.
    requant : Requant
        Output stage; per-channel multipliers/shifts are rows of the ``channel`` table
        (:func:`channel_table`), after the bias.
    acc_dtype : str
        ``"int64"`` for TFLite's 16x8 kernels: int64 sums, an int64 ``bias`` argument of its own (after the
        table) and a ``wide`` requant.
    """
    n_, h_, w_, c_ = x_shape
    _, oh_, ow_, oc_ = out_shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl = padding[0], padding[1]
    x = te.placeholder(x_shape, in_dtype, "x")
    w = te.placeholder(w_shape, w_dtype, "w")
    params, table, bias = _weights_and_channels(x, w, oc_, has_bias, requant, acc_dtype)
    off = _i8(in_offset)
    if depth_multiplier:
        kh_, kw_ = w_shape[1], w_shape[2]
        rh = te.reduce_axis((0, kh_), "rh")
        rw = te.reduce_axis((0, kw_), "rw")

        def body(n, oh, ow, oc):
            ih = oh * sh - pt + rh * dh
            iw = ow * sw - pl + rw * dw
            inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
            xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), oc // depth_multiplier]
            prod = _widen((cast_i32(xv) + off) * cast_i32(w[0, rh, rw, oc]), acc_dtype)
            return te.sum(tirx.if_then_else(inside, prod, tirx.const(0, acc_dtype)), axis=[rh, rw])
    else:
        kh_, kw_, icg = w_shape[1], w_shape[2], w_shape[3]
        ocg = oc_ // groups
        rh = te.reduce_axis((0, kh_), "rh")
        rw = te.reduce_axis((0, kw_), "rw")
        rc = te.reduce_axis((0, icg), "rc")

        def body(n, oh, ow, oc):
            ih = oh * sh - pt + rh * dh
            iw = ow * sw - pl + rw * dw
            inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
            ic = rc if groups == 1 else (oc // ocg) * icg + rc
            xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), ic]
            prod = _widen((cast_i32(xv) + off) * cast_i32(w[oc, rh, rw, rc]), acc_dtype)
            return te.sum(tirx.if_then_else(inside, prod, tirx.const(0, acc_dtype)), axis=[rh, rw, rc])

    acc = te.compute(out_shape, body, name="acc")
    chain = Chain(out_shape)
    total, row = _add_bias(chain, acc, table, bias, has_bias)
    y = requant.output(chain, total, table, row, out_dtype=out_dtype)
    desc = {"op": "depthwise_conv2d" if depth_multiplier else "conv2d", "x": list(x_shape), "w": list(w_shape),
            "y": list(out_shape), "strides": list(strides), "padding": list(padding), "dilation": list(dilation),
            "groups": groups, "depth_multiplier": depth_multiplier, "in_offset": in_offset,
            "requant": _requant_desc(requant), "has_bias": has_bias,
            "dtypes": [in_dtype, w_dtype, out_dtype]}
    if acc_dtype != "int32":
        desc["acc_dtype"] = acc_dtype
    return finish(params + [y], name, reduce_into="y", describe=desc)


def _widen(e, acc_dtype: str):
    return e if acc_dtype == "int32" else e.astype(acc_dtype)


def _weights_and_channels(x, w, channels: int, has_bias: bool, requant: Requant, acc_dtype: str):
    """``(params, channel table, int64 bias)`` of a weighted kernel: ``[x, w]``, then the channel table
    (:func:`channel_table`; the bias in its first row when the accumulator is int32), then an int64
    ``bias`` of its own when the accumulator is int64 (None otherwise)."""
    wide_bias = has_bias and acc_dtype != "int32"
    table = channel_table(channels, has_bias and not wide_bias, requant)
    bias = te.placeholder((channels,), acc_dtype, "bias") if wide_bias else None
    return [x, w] + [t for t in (table, bias) if t is not None], table, bias


def _add_bias(chain: "Chain", acc, table, bias, has_bias: bool):
    """``(acc + bias, first requant row of the channel table)``."""
    if not has_bias:
        return acc, 0
    if bias is not None:
        return chain(lambda *i: acc[i] + bias[i[-1]]), 0
    return chain(lambda *i: acc[i] + table[0, i[-1]]), 1


def transpose_conv2d(x_shape, w_shape, out_shape, *, strides, padding, in_offset: int, requant: Requant,
                     has_bias: bool, in_dtype: str = "int8", out_dtype: str = "int8",
                     name: str = "transpose_conv_int8", acc_dtype: str = "int32") -> tvm.tirx.PrimFunc:
    """TRANSPOSE_CONV, NHWC, ``w`` OHWI: each output element gathers the int32 products TFLite's kernel
    scatters into its scratch (integer sums: the order does not matter), then bias and requantization.
    ``acc_dtype="int64"``: the 16x8 kernel's int64 sums and bias (see :func:`conv2d`)."""
    from ..legalize.conv2d_transpose import conv2d_transpose_nhwc

    x = te.placeholder(x_shape, in_dtype, "x")
    w = te.placeholder(w_shape, "int8", "w")
    oc_ = out_shape[3]
    params, table, bias = _weights_and_channels(x, w, oc_, has_bias, requant, acc_dtype)
    shifted = _Offset(x, in_offset)
    pt, pl = padding[0], padding[1]
    pb = (x_shape[1] - 1) * strides[0] - pt + w_shape[1] - out_shape[1]
    pr = (x_shape[2] - 1) * strides[1] - pl + w_shape[2] - out_shape[2]
    acc = conv2d_transpose_nhwc(shifted, w, strides, (pt, pl, pb, pr), (0, 0), (1, 1), "OHWI", acc_dtype,
                                acc_dtype)
    chain = Chain(out_shape)
    total, row = _add_bias(chain, acc, table, bias, has_bias)
    y = requant.output(chain, total, table, row, out_dtype=out_dtype)
    desc = {"op": "transpose_conv2d", "x": list(x_shape), "w": list(w_shape), "y": list(out_shape),
            "strides": list(strides), "padding": list(padding), "in_offset": in_offset,
            "requant": _requant_desc(requant), "has_bias": has_bias, "dtypes": [in_dtype, "int8", out_dtype]}
    if acc_dtype != "int32":
        desc["acc_dtype"] = acc_dtype
    return finish(params + [y], name, reduce_into="y", describe=desc)


class _Offset:
    """``int32(x) + offset`` read element by element (no int32 copy of ``x``)."""

    def __init__(self, x, offset: int):
        self.x, self.offset, self.shape, self.dtype = x, offset, x.shape, "int32"

    def __getitem__(self, idx):
        return cast_i32(self.x[idx]) + _i8(self.offset)


def channel_table(channels: int, has_bias: bool, requant: Requant):
    """The int32 placeholder holding a kernel's per-output-channel constants, one row each: the bias
    (if any), then, for per-channel requantization, the multipliers and the shifts. None if empty.

    One table (one constant, one kernel argument) instead of three keeps the C export small."""
    rows = int(has_bias) + 2 * int(requant.per_channel)
    return te.placeholder((rows, channels), "int32", "channel") if rows else None


def dense(x_shape, w_shape, *, in_offset: int, w_offset: int, requant: Requant, has_bias: bool,
          out_dtype: str = "int8", name: str = "dense_int8", in_dtype: str = "int8",
          acc_dtype: str = "int32") -> tvm.tirx.PrimFunc:
    """FULLY_CONNECTED: ``x`` (..., K) int8 (or int16), ``w`` (N, K) int8 -> (..., N); ``acc_dtype`` as for
    :func:`conv2d`."""
    k_ = x_shape[-1]
    n_ = w_shape[0]
    out_shape = tuple(x_shape[:-1]) + (n_,)
    x = te.placeholder(x_shape, in_dtype, "x")
    w = te.placeholder(w_shape, "int8", "w")
    params, table, bias = _weights_and_channels(x, w, n_, has_bias, requant, acc_dtype)
    rk = te.reduce_axis((0, k_), "rk")

    def body(*idx):
        lead, j = idx[:-1], idx[-1]
        prod = (cast_i32(x[(*lead, rk)]) + _i8(in_offset)) * (cast_i32(w[j, rk]) + _i8(w_offset))
        return te.sum(_widen(prod, acc_dtype), axis=rk)

    acc = te.compute(out_shape, body, name="acc")
    chain = Chain(out_shape)
    total, row = _add_bias(chain, acc, table, bias, has_bias)
    y = requant.output(chain, total, table, row, out_dtype=out_dtype)
    desc = {"op": "dense", "x": list(x_shape), "w": list(w_shape), "y": list(out_shape), "in_offset": in_offset,
            "w_offset": w_offset, "requant": _requant_desc(requant), "has_bias": has_bias,
            "dtypes": [in_dtype, "int8", out_dtype]}
    if acc_dtype != "int32":
        desc["acc_dtype"] = acc_dtype
    return finish(params + [y], name, reduce_into="y", describe=desc)


def batch_matmul(a_shape, b_shape, out_shape, *, adj_x: bool, adj_y: bool, a_offset: int, b_offset: int,
                 requant: Requant, dtype: str = "int8", name: str = "batch_matmul_int8") -> tvm.tirx.PrimFunc:
    """BATCH_MATMUL as TFLite Micro's ``batch_matmul.cc`` computes it, int8 or int16 (``dtype``).

    ``a`` is ``(..., M, K)`` (``adj_x``: ``(..., K, M)``), ``b`` ``(..., K, N)`` (``adj_y``: ``(..., N, K)``),
    their batch dimensions broadcast by numpy's rules into ``out_shape`` ``(..., M, N)``. Transposition and
    broadcasting are index arithmetic: no transposed or broadcast copy of either operand (TFLite Micro keeps
    one of ``b``, and one of ``a`` with ``adj_x``). Per output element: the sum over ``K`` of
    ``(a + a_offset) * (b + b_offset)``, in int32 for int8 (then ``MultiplyByQuantizedMultiplier``, the
    output offset and the clamp of ``requant``) or, for int16 (zero points 0), of int32 products in int64
    (then the int64 ``MultiplyByQuantizedMultiplier``, :func:`.tirmath.mbqm64`).
    """
    a = te.placeholder(a_shape, dtype, "a")
    b = te.placeholder(b_shape, dtype, "b")
    k_ = a_shape[-2] if adj_x else a_shape[-1]
    rk = te.reduce_axis((0, k_), "rk")
    wide = dtype == "int16"
    if wide and (a_offset or b_offset or requant.offset or requant.per_channel):
        raise ValueError("int16 BATCH_MATMUL takes zero points 0 and one multiplier")
    batch_out = tuple(out_shape[:-2])

    def body(*idx):
        batch, m, n = idx[:-2], idx[-2], idx[-1]
        ia = _broadcast_index(a_shape[:-2], batch_out, batch)
        ib = _broadcast_index(b_shape[:-2], batch_out, batch)
        av = cast_i32(a[(*ia, rk, m)] if adj_x else a[(*ia, m, rk)])
        bv = cast_i32(b[(*ib, n, rk)] if adj_y else b[(*ib, rk, n)])
        if wide:                       # |a * b| <= 2**30: the int32 product, summed in int64
            return te.sum((av * bv).astype("int64"), axis=rk)
        return te.sum((av + _i8(a_offset)) * (bv + _i8(b_offset)), axis=rk)

    acc = te.compute(out_shape, body, name="acc")
    chain = Chain(out_shape)
    if wide:
        scaled = chain(lambda *i: mbqm64(acc[i], reduced_multiplier(requant.multiplier), requant.shift))
        y = te.compute(out_shape, lambda *i: clamp(scaled[i] + _i8(requant.offset), requant.lo, requant.hi)
                       .astype(dtype), name="y")
    else:
        y = requant.output(chain, acc, out_dtype=dtype)
    desc = {"op": "batch_matmul", "a": list(a_shape), "b": list(b_shape), "y": list(out_shape), "k": k_,
            "adj_x": bool(adj_x), "adj_y": bool(adj_y), "a_offset": a_offset, "b_offset": b_offset,
            "requant": _requant_desc(requant), "dtypes": [dtype, dtype, dtype]}
    return finish([a, b, y], name, reduce_into="y", describe=desc)


def lut(shape, dtype: str = "int8", out_dtype: str | None = None, name: str = "lut_int8") -> tvm.tirx.PrimFunc:
    """Element-wise table look-up ``y = table[x - min(dtype)]`` (any int8/uint8 unary operator)."""
    out_dtype = out_dtype or dtype
    x = te.placeholder(shape, dtype, "x")
    table = te.placeholder((256,), out_dtype, "table")
    base = 128 if dtype == "int8" else 0
    y = te.compute(shape, lambda *i: table[cast_i32(x[i]) + _i8(base)], name="y")
    desc = {"op": "lut", "x": list(shape), "y": list(shape), "dtypes": [dtype, out_dtype]}
    return finish([x, table, y], name, describe=desc)


def _broadcast_index(shape, out_shape, idx):
    """Index into an operand of ``shape`` broadcast (numpy rules) to ``out_shape``."""
    lead = len(out_shape) - len(shape)
    return tuple(0 if shape[k] == 1 and out_shape[k + lead] != 1 else idx[k + lead] for k in range(len(shape)))


broadcast_index = _broadcast_index


def binary_add(a_shape, b_shape, out_shape, *, a_offset: int, b_offset: int, left_shift: int, a_mult: int,
               a_shift: int, b_mult: int, b_shift: int, out: Requant, negate_b: bool = False,
               name: str = "add_int8", dtype: str = "int8") -> tvm.tirx.PrimFunc:
    """int8 (or int16, ``dtype``) ADD (and SUB with ``negate_b``): TFLite's ``AddFunc`` with ``left_shift``
    pre-scaling."""
    a = te.placeholder(a_shape, dtype, "a")
    b = te.placeholder(b_shape, dtype, "b")

    chain = Chain(out_shape)
    sa = chain.requant(chain(lambda *i: (cast_i32(a[_broadcast_index(a_shape, out_shape, i)]) + _i8(a_offset))
                             * _i8(1 << left_shift)), a_mult, a_shift)
    sb = chain.requant(chain(lambda *i: (cast_i32(b[_broadcast_index(b_shape, out_shape, i)]) + _i8(b_offset))
                             * _i8(1 << left_shift)), b_mult, b_shift)
    raw = chain(lambda *i: sa[i] - sb[i] if negate_b else sa[i] + sb[i])
    y = out.output(chain, raw, out_dtype=dtype)
    desc = {"op": "add", "a": list(a_shape), "b": list(b_shape), "y": list(out_shape), "a_offset": a_offset,
            "b_offset": b_offset, "left_shift": left_shift, "a_mult": a_mult, "a_shift": a_shift, "b_mult": b_mult,
            "b_shift": b_shift, "requant": _requant_desc(out), "negate_b": negate_b}
    if dtype != "int8":
        desc["dtypes"] = [dtype, dtype, dtype]
    return finish([a, b, y], name, reduce_into="y", describe=desc)


def binary_mul(a_shape, b_shape, out_shape, *, a_offset: int, b_offset: int, out: Requant,
               name: str = "mul_int8", dtype: str = "int8", out_dtype: str | None = None) -> tvm.tirx.PrimFunc:
    """int8 (or int16) MUL: ``clamp(MBQM((a + a_off) * (b + b_off)) + out_off)``."""
    a = te.placeholder(a_shape, dtype, "a")
    b = te.placeholder(b_shape, dtype, "b")

    chain = Chain(out_shape)
    prod = chain(lambda *i: (cast_i32(a[_broadcast_index(a_shape, out_shape, i)]) + _i8(a_offset))
                 * (cast_i32(b[_broadcast_index(b_shape, out_shape, i)]) + _i8(b_offset)))
    y = out.output(chain, prod, out_dtype=out_dtype or dtype)
    return finish([a, b, y], name, reduce_into="y")


def prelu(x_shape, alpha_shape, *, in_offset: int, alpha_offset: int, mult1: int, shift1: int, mult2: int,
          shift2: int, out_offset: int, name: str = "prelu_int8", dtype: str = "int8") -> tvm.tirx.PrimFunc:
    """int8 (or int16, ``dtype``; alpha int8) PRELU (TFLite ``BroadcastPrelu4DSlow``): two multipliers,
    identity and alpha."""
    x = te.placeholder(x_shape, dtype, "x")
    alpha = te.placeholder(alpha_shape, "int8", "alpha")

    chain = Chain(x_shape)
    v = chain(lambda *i: cast_i32(x[i]) + _i8(in_offset))
    al = chain(lambda *i: cast_i32(alpha[_broadcast_index(alpha_shape, x_shape, i)]) + _i8(alpha_offset))
    pos = chain.requant(v, mult1, shift1)
    neg = chain.requant(chain(lambda *i: v[i] * al[i]), mult2, shift2)
    lo, hi = (int(tvm.tirx.min_value(dtype).value), int(tvm.tirx.max_value(dtype).value))
    y = te.compute(x_shape, lambda *i: clamp(tirx.Select(v[i] >= _i8(0), pos[i], neg[i]) + _i8(out_offset),
                                             lo, hi).astype(dtype), name="y")
    return finish([x, alpha, y], name, reduce_into="y")


def _pool_window(x_shape, out_shape, pool, strides, padding):
    _, h_, w_, _ = x_shape
    sh, sw = strides
    pt, pl = padding[0], padding[1]
    kh_, kw_ = pool

    def window(oh, ow):
        hs = oh * sh - pt
        ws = ow * sw - pl
        return hs, ws

    return h_, w_, kh_, kw_, window


def avg_pool2d(x_shape, out_shape, *, pool, strides, padding, lo: int = -128, hi: int = 127,
               name: str = "avg_pool_int8", dtype: str = "int8") -> tvm.tirx.PrimFunc:
    """int8 (or int16) AVERAGE_POOL_2D: sum over the valid window, divided with rounding half away from zero."""
    h_, w_, kh_, kw_, window = _pool_window(x_shape, out_shape, pool, strides, padding)
    x = te.placeholder(x_shape, dtype, "x")
    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")

    def body(n, oh, ow, c):
        hs, ws = window(oh, ow)
        ih, iw = hs + rh, ws + rw
        inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
        xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), c]
        return te.sum(tirx.if_then_else(inside, cast_i32(xv), _i8(0)), axis=[rh, rw])

    acc = te.compute(out_shape, body, name="acc")

    def epilogue(n, oh, ow, c):
        hs, ws = window(oh, ow)
        h0, h1 = tirx.max(hs, 0), tirx.min(hs + kh_, h_)
        w0, w1 = tirx.max(ws, 0), tirx.min(ws + kw_, w_)
        count = ((h1 - h0) * (w1 - w0)).astype("int32")
        s = acc[n, oh, ow, c]
        half = tirx.truncdiv(count, _i8(2))
        avg = tirx.Select(s > _i8(0), tirx.truncdiv(s + half, count), tirx.truncdiv(s - half, count))
        return clamp(avg, lo, hi).astype(dtype)

    y = te.compute(out_shape, epilogue, name="y")
    desc = {"op": "avg_pool2d", "x": list(x_shape), "y": list(out_shape), "pool": list(pool),
            "strides": list(strides), "padding": list(padding), "lo": lo, "hi": hi}
    if dtype != "int8":
        desc["dtypes"] = [dtype, dtype]
    return finish([x, y], name, reduce_into="y", describe=desc)


def max_pool2d(x_shape, out_shape, *, pool, strides, padding, lo: int = -128, hi: int = 127,
               name: str = "max_pool_int8", dtype: str = "int8") -> tvm.tirx.PrimFunc:
    """int8 (or int16) MAX_POOL_2D over the valid window, clamped to the activation range."""
    h_, w_, kh_, kw_, window = _pool_window(x_shape, out_shape, pool, strides, padding)
    x = te.placeholder(x_shape, dtype, "x")
    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")

    def body(n, oh, ow, c):
        hs, ws = window(oh, ow)
        ih, iw = hs + rh, ws + rw
        inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
        xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), c]
        return te.max(tirx.if_then_else(inside, cast_i32(xv), _i8(int(tvm.tirx.min_value(dtype).value))),
                      axis=[rh, rw])

    acc = te.compute(out_shape, body, name="acc")
    y = te.compute(out_shape, lambda *i: clamp(acc[i], lo, hi).astype(dtype), name="y")
    desc = {"op": "max_pool2d", "x": list(x_shape), "y": list(out_shape), "pool": list(pool),
            "strides": list(strides), "padding": list(padding), "lo": lo, "hi": hi}
    if dtype != "int8":
        desc["dtypes"] = [dtype, dtype]
    return finish([x, y], name, reduce_into="y", describe=desc)


def mean(x_shape, axes, out_shape, keepdims: bool, *, in_offset: int, mult: int, shift: int, out_offset: int,
         name: str = "mean_int8", dtype: str = "int8") -> tvm.tirx.PrimFunc:
    """int8 MEAN (TFLite ``QuantizedMeanOrSum`` / integer ``Mean``): sum of ``x - zp_in`` over ``axes``,
    ``MBQM(sum, mult, shift)`` (the scale ratio divided by the element count folded into the multiplier),
    plus the output zero point, saturated. SUM is the same with the plain scale ratio's multiplier; ``dtype``
    int16 for the 16x8 kernels (their int32 sums too)."""
    x = te.placeholder(x_shape, dtype, "x")
    axes = sorted(a % len(x_shape) for a in axes)
    red = [te.reduce_axis((0, x_shape[a]), f"r{a}") for a in axes]

    def full_index(out_idx):
        out_idx = list(out_idx)
        idx, ri, oi = [], 0, 0
        for k in range(len(x_shape)):
            if k in axes:
                idx.append(red[ri])
                ri += 1
                if keepdims:
                    oi += 1
            else:
                idx.append(out_idx[oi])
                oi += 1
        return tuple(idx)

    acc = te.compute(out_shape, lambda *i: te.sum(cast_i32(x[full_index(i)]) + _i8(in_offset), axis=red),
                     name="acc")
    lo, hi = (int(tvm.tirx.min_value(dtype).value), int(tvm.tirx.max_value(dtype).value))
    y = Requant(mult, shift, out_offset, lo, hi).output(Chain(out_shape), acc, out_dtype=dtype)
    return finish([x, y], name, reduce_into="y")


def quantize(shape, *, scale_f32: float, zero_point: int, out_dtype: str = "int8",
             name: str = "quantize_int8", scale_arg: bool = False) -> tvm.tirx.PrimFunc:
    """float32 -> int8 QUANTIZE: ``clamp(round_half_away(x / scale) + zp)`` in float32 (TFLite ``AffineQuantize``).

    ``scale_arg``: the scale is a one-element float32 argument after ``x`` instead of an immediate (TVM's C
    code generator prints float immediates with 7 digits, not always the float's value)."""
    x = te.placeholder(shape, "float32", "x")
    lo, hi = {"int8": (-128, 127), "int16": (-32768, 32767)}.get(out_dtype, (0, 255))
    scale_buf = te.placeholder((1,), "float32", "scale") if scale_arg else None

    def body(*i):
        v = x[i] / (scale_buf[0] if scale_arg else tirx.const(scale_f32, "float32"))
        t = tirx.trunc(v)
        frac = v - t
        half = tirx.const(0.5, "float32")
        r = tirx.Select(frac >= half, t + tirx.const(1.0, "float32"),
                        tirx.Select(frac <= -half, t - tirx.const(1.0, "float32"), t))
        r = tirx.max(tirx.min(r, tirx.const(2.0e9, "float32")), tirx.const(-2.0e9, "float32"))
        return clamp(r.astype("int32") + _i8(zero_point), lo, hi).astype(out_dtype)

    y = te.compute(shape, body, name="y")
    return finish([x] + ([scale_buf] if scale_arg else []) + [y], name)


def _saturating_shl(x, k: int):
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<k>`` for k > 0 on int32 (``x`` used three times)."""
    threshold = (1 << (31 - k)) - 1
    return tirx.Select(x > _i8(threshold), _i8((1 << 31) - 1),
                       tirx.Select(x < _i8(-threshold), _i8(-(1 << 31)), x << _i8(k)))


def softmax(shape, *, exp_table, sum_table, name: str = "softmax_int8") -> tvm.tirx.PrimFunc:
    """int8 SOFTMAX over the last axis (TFLite ``reference_ops::Softmax``, int8 -> int8, scale 1/256, zp -128).

    ``exp_table[d + 255]`` is ``exp_on_negative_values`` of the rescaled difference
    ``d = x - max(row)`` as a Q0.31 raw value (0 below ``diff_min``) and
    ``sum_table`` the same rounded to the Q12 accumulator; both are computed by
    :func:`.params.softmax_tables` with TFLite's fixed-point algorithm, so the
    kernel only sums, takes TFLite's ``GetReciprocal`` and scales.
    """
    outer, depth = tuple(shape[:-1]), shape[-1]
    x = te.placeholder(shape, "int8", "x")
    texp = te.placeholder((256,), "int32", "exp_table")
    tsum = te.placeholder((256,), "int32", "sum_table")
    k1 = te.reduce_axis((0, depth), "k1")
    k2 = te.reduce_axis((0, depth), "k2")
    mx = te.compute(outer, lambda *r: te.max(cast_i32(x[(*r, k1)]), axis=k1), name="row_max")
    total = te.compute(outer, lambda *r: te.sum(tsum[cast_i32(x[(*r, k2)]) - mx[r] + _i8(255)], axis=k2),
                       name="row_sum")
    rows = Chain(outer, prefix="row_t")
    clz = leading_zeros(rows, total)     # GetReciprocal(total, 12)
    # shifted_sum_minus_one = (x << clz) - 2**31 as uint32 arithmetic
    ssm1 = rows(lambda *r: ((total[r].astype("int64") << clz[r].astype("int64"))
                            - tirx.const(1 << 31, "int64")).astype("int32"))
    # one_over_one_plus_x_for_x_in_0_1 (gemmlowp): RoundingHalfSum(a, One), then Newton-Raphson in Q2.29
    s64 = rows(lambda *r: ssm1[r].astype("int64") + tirx.const((1 << 31) - 1, "int64"))
    half = rows(lambda *r: tirx.truncdiv(s64[r] + tirx.Select(s64[r] >= tirx.const(0, "int64"),
                                                              tirx.const(1, "int64"), tirx.const(-1, "int64")),
                                         tirx.const(2, "int64")).astype("int32"))
    xk = rows(lambda *r: _i8(1515870810) + srdhm(half[r], _i8(-1010580540)))

    def newton_step(prev):
        hdx = rows(lambda *r: srdhm(half[r], prev[r]))
        prod = rows(lambda *r: srdhm(prev[r], _i8(1 << 29) - hdx[r]))
        return rows(lambda *r: prev[r] + _saturating_shl(prod[r], 2))

    for _ in range(3):
        xk = newton_step(xk)
    scale = rows(lambda *r: _saturating_shl(xk[r], 1))
    exponent = rows(lambda *r: _i8(12) - clz[r] + _i8(31 - 8))
    elems = Chain(shape, prefix="t")
    e = elems(lambda *i: srdhm(scale[i[:-1]], texp[cast_i32(x[i]) - mx[i[:-1]] + _i8(255)]))
    u = elems(lambda *i: rdbpot(e[i], exponent[i[:-1]]))
    y = te.compute(shape, lambda *i: clamp(u[i] - _i8(128), -128, 127).astype("int8"), name="y")
    func = te.create_prim_func([x, texp, tsum, y])
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    out = sch.get_sblock("y")
    root = sch.get_sblock("root")
    others = [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint != "y"]
    for blk in reversed(others):
        loops = sch.get_loops(out)
        at = loops[-1] if sch.get(blk).name_hint.startswith("t") else loops[len(outer) - 1]
        sch.compute_at(blk, at, preserve_unit_loops=False)     # (default scope: see schedule_reductions)
    return sch.mod["main"].with_attr("op_pattern", OPAQUE).with_attr("global_symbol", name).with_attr(
        "tvm_memsched.int8", name)


def reduced_index(x_shape, axes, keepdims: bool, red, out_idx) -> tuple:
    """The input index a reduction over ``axes`` reads for output index ``out_idx`` (``red``: the reduce axes;
    ``keepdims``: the output keeps the reduced axes as 1s)."""
    idx, ri, oi = [], 0, 0
    for k in range(len(x_shape)):
        if k in axes:
            idx.append(red[ri])
            ri += 1
            oi += int(keepdims)
        else:
            idx.append(out_idx[oi])
            oi += 1
    return tuple(idx)


def leading_zeros(rows: Chain, value):
    """Leading zero bits of a positive int32 tensor, by binary search on int64 values in ``[1, 2**32)``: a
    tensor of the chain ``rows``."""
    def step(pn, pv, bits):
        limit = tirx.const((1 << (32 - bits)) - 1, "int64")
        n = rows(lambda *r: tirx.Select(pv[r] <= limit, pn[r] + _i8(bits), pn[r]))
        v = rows(lambda *r: tirx.Select(pv[r] <= limit, pv[r] << tirx.const(bits, "int64"), pv[r]))
        return n, v

    n, v = rows(lambda *r: _i8(0)), rows(lambda *r: value[r].astype("int64"))
    for bits in (16, 8, 4, 2, 1):
        n, v = step(n, v, bits)
    return n
