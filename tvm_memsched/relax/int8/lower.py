"""``IntegerLowering``: run a quantized (QDQ) Relax model with TFLite's integer kernels.

TVM imports an int8 TFLite model as dequantize -> float operator -> quantize;
compiled as is, every weight becomes a float32 constant (4x the flash) and
every kernel computes in float. This pass finds each quantized operator
(:mod:`.patterns`) and replaces the group by one ``call_tir`` of an integer
kernel (:mod:`.kernels`) that computes what TFLite's reference kernel computes,
bit for bit: int8 weights and int32 biases stay integer constants, per-channel
multipliers and shifts are int32 constants, element-wise one-input operators
are 256-entry tables computed by TFLite's own algorithm (:mod:`.params`).

Whatever is not recognised keeps its float form and is listed in the report
as a *float island*, by operator and variable name; nothing falls back
silently. Operators with an int16 tensor (16x8 models) get the kernels of
:mod:`.lower16` instead (int64 accumulators, per-element int16 arithmetic).

Example
-------
>>> from tvm_memsched.relax.int8.lower import IntegerLowering
>>> IntegerLowering().info.name
'IntegerLowering'
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..ir import KernelEmitter, op_name, replace_bindings
from . import extra_kernels as XK
from . import kernels as K
from . import params as P
from .lower16 import emit_int16, uses_int16
from .patterns import FunctionView, Match, match_binding

__all__ = ["IntegerLowering", "LoweringReport", "lower_int8", "has_qdq"]


@dataclass
class LoweringReport:
    """What :func:`lower_int8` did: TFLite operators lowered (by kind) and float islands left."""

    lowered: dict = field(default_factory=dict)
    islands: list = field(default_factory=list)
    kernels: int = 0
    constant_bytes: int = 0

    @property
    def total(self) -> int:
        return sum(self.lowered.values())

    def to_dict(self) -> dict:
        return {"lowered": dict(self.lowered), "islands": list(self.islands), "kernels": self.kernels,
                "constant_bytes": self.constant_bytes, "summary": self.summary()}

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.lowered.items()))
        text = f"int8 lowering: {self.total} operators ({kinds}) in {self.kernels} integer kernels"
        if self.islands:
            text += f"; float islands: {', '.join(self.islands)}"
        return text


def has_qdq(mod) -> bool:
    """True if a Relax function of ``mod`` has int8/uint8/int16 tensors (TFLite-style quantized structure)."""
    found = []

    def visit(e):
        ty = getattr(e, "ty", None)
        if isinstance(e, relax.Var) and isinstance(ty, relax.TensorType) and str(ty.dtype) in ("int8", "uint8",
                                                                                                "int16"):
            found.append(e)

    for _, f in mod.functions_items():
        if isinstance(f, relax.Function):
            for p in f.params:
                visit(p)
            relax.analysis.post_order_visit(f.body, visit)
            if found:
                return True
    return False


def _requant(mults, shifts, offset, act, bias=None) -> tuple[K.Requant, list]:
    """A per-tensor Requant if all channels share one multiplier, else per-channel; and the kernel's
    channel table (:func:`.kernels.channel_table`: bias, multipliers, shifts as rows) as constant arguments."""
    rows = [] if bias is None else [np.asarray(bias, np.int32)]
    if len(set(zip(mults, shifts))) == 1:
        rq = K.Requant(int(mults[0]), int(shifts[0]), offset, *act)
    else:
        rq = K.Requant(None, None, offset, *act)
        rows += [np.array(mults, np.int32), np.array(shifts, np.int32)]
    return rq, ([np.stack(rows)] if rows else [])


def _shape(e):
    from ..ir import static_shape

    return tuple(static_shape(e.ty))


def _emit(em: KernelEmitter, m: Match):
    """The ``call_tir`` replacing match ``m``, or None if its parameters are outside what TFLite supports."""
    if m.op == "BATCH_MATMUL":                # int8 and int16 alike (:func:`.kernels.batch_matmul`)
        return _emit_batch_matmul(em, m)
    if uses_int16(m):
        return emit_int16(em, m)              # the 16x8 kernels (:mod:`.lower16`)
    op, out = m.op, m.var
    oshape = _shape(out)
    qx = m.qin[0] if m.qin else None
    if op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = m.consts["weight"]
        mults, shifts = P.conv_multipliers(qx.s, m.consts["w_scales"], m.qout.s)
        has_bias = "bias" in m.consts
        rq, extra = _requant(mults, shifts, m.qout.zp, m.act, m.consts.get("bias"))
        dm = m.attrs.get("depth_multiplier", 0)
        f = K.conv2d(_shape(m.inputs[0]), w.shape, oshape, strides=m.attrs["strides"], padding=m.attrs["padding"],
                     dilation=m.attrs["dilation"], groups=1 if dm else m.attrs["groups"], depth_multiplier=dm,
                     in_offset=-qx.zp, requant=rq, has_bias=has_bias)
        return em.call(m, f, "dwconv_int8" if dm else "conv2d_int8",
                       [m.inputs[0], em.const(w)] + [em.const(a) for a in extra])
    if op == "TRANSPOSE_CONV":
        w = m.consts["weight"]
        mults, shifts = P.conv_multipliers(qx.s, m.consts["w_scales"], m.qout.s)
        rq, extra = _requant(mults, shifts, m.qout.zp, m.act, m.consts.get("bias"))
        f = K.transpose_conv2d(_shape(m.inputs[0]), w.shape, oshape, strides=m.attrs["strides"],
                               padding=m.attrs["padding"], in_offset=-qx.zp, requant=rq, has_bias="bias" in m.consts)
        return em.call(m, f, "transpose_conv_int8", [m.inputs[0], em.const(w)] + [em.const(a) for a in extra])
    if op == "FULLY_CONNECTED":
        w = m.consts["weight"]
        has_bias = "bias" in m.consts
        scales = m.consts["w_scales"]
        if m.attrs["per_channel"] or has_bias:
            mults, shifts = P.conv_multipliers(qx.s, scales, m.qout.s)
        else:
            mult, shift = P.quantize_multiplier(float(np.float32(qx.s) * np.float32(scales[0])) / P.f32(m.qout.s))
            mults, shifts = [mult] * w.shape[0], [shift] * w.shape[0]
        rq, extra = _requant(mults, shifts, m.qout.zp, m.act, m.consts.get("bias"))
        f = K.dense(_shape(m.inputs[0]), w.shape, in_offset=-qx.zp, w_offset=-m.consts["w_zero_point"],
                    requant=rq, has_bias=has_bias)
        return em.call(m, f, "dense_int8", [m.inputs[0], em.const(w)] + [em.const(a) for a in extra])
    if op in ("ADD", "SUB"):
        qa, qb = m.qin
        p = P.add_params(qa.s, qb.s, m.qout.s, sub=op == "SUB")
        rq = K.Requant(p["out_mult"], p["out_shift"], m.qout.zp, *m.act)
        f = K.binary_add(_shape(m.inputs[0]), _shape(m.inputs[1]), oshape, a_offset=-qa.zp, b_offset=-qb.zp,
                         left_shift=p["left_shift"], a_mult=p["a_mult"], a_shift=p["a_shift"], b_mult=p["b_mult"],
                         b_shift=p["b_shift"], out=rq, negate_b=op == "SUB")
        return em.call(m, f, op.lower() + "_int8", list(m.inputs))
    if op == "MUL":
        qa, qb = m.qin
        mult, shift = P.mul_params(qa.s, qb.s, m.qout.s)
        f = K.binary_mul(_shape(m.inputs[0]), _shape(m.inputs[1]), oshape, a_offset=-qa.zp, b_offset=-qb.zp,
                         out=K.Requant(mult, shift, m.qout.zp, *m.act))
        return em.call(m, f, "mul_int8", list(m.inputs))
    if op in ("MEAN", "SUM"):
        ishape = _shape(m.inputs[0])
        count = int(np.prod([ishape[a] for a in m.attrs["axes"]]))
        mult, shift = P.mean_params(qx.s, m.qout.s, count) if op == "MEAN" else \
            P.quantize_multiplier(P.f32(qx.s) / P.f32(m.qout.s))
        f = K.mean(ishape, m.attrs["axes"], oshape, m.attrs["keepdims"], in_offset=-qx.zp, mult=mult, shift=shift,
                   out_offset=m.qout.zp)
        return em.call(m, f, op.lower() + "_int8", [m.inputs[0]])
    if op == "AVERAGE_POOL_2D":
        f = K.avg_pool2d(_shape(m.inputs[0]), oshape, pool=m.attrs["pool"], strides=m.attrs["strides"],
                         padding=m.attrs["padding"], lo=m.act[0], hi=m.act[1])
        return em.call(m, f, "avg_pool_int8", [m.inputs[0]])
    if op == "MAX_POOL_2D":
        f = K.max_pool2d(_shape(m.inputs[0]), oshape, pool=m.attrs["pool"], strides=m.attrs["strides"],
                         padding=m.attrs["padding"], lo=m.act[0], hi=m.act[1])
        return em.call(m, f, "max_pool_int8", [m.inputs[0]])
    if op == "PRELU":
        qa = m.consts["alpha_q"]
        m1, s1, m2, s2 = P.prelu_params(qx.s, qa.s, m.qout.s)
        alpha = m.consts["alpha"]
        f = K.prelu(_shape(m.inputs[0]), alpha.shape, in_offset=-qx.zp, alpha_offset=-qa.zp, mult1=m1, shift1=s1,
                    mult2=m2, shift2=s2, out_offset=m.qout.zp)
        return em.call(m, f, "prelu_int8", [m.inputs[0], em.const(alpha)])
    if op == "CONCATENATION":
        if not all(q.same_as(m.qout) for q in m.qin):
            return None            # int8 TFLite requires equal quantization; leave other models float
        return relax.op.concat(relax.Tuple(list(m.inputs)), axis=m.attrs["axis"])
    if op == "SOFTMAX":
        if m.qout.zp != -128 or np.float32(m.qout.s) != np.float32(1 / 256):
            return None
        texp, tsum = P.softmax_tables(qx.s, m.attrs["beta"])
        f = K.softmax(_shape(m.inputs[0]), exp_table=texp, sum_table=tsum)
        return em.call(m, f, "softmax_int8", [m.inputs[0], em.const(texp), em.const(tsum)])
    if op == "QUANTIZE_FLOAT":
        f = K.quantize(_shape(m.inputs[0]), scale_f32=m.qout.s, zero_point=m.qout.zp,
                       out_dtype=str(out.ty.dtype))
        return em.call(m, f, "quantize_int8", [m.inputs[0]])
    if op == "DEQUANTIZE":
        table = P.dequantize_table(qx.s, qx.zp)
        f = K.lut(_shape(m.inputs[0]), "int8", "float32", name="dequantize_int8")
        return em.call(m, f, "dequantize_int8", [m.inputs[0], em.const(table)])
    if op in _EXTRA:
        return _EXTRA[op](em, m)
    table = _table(m)
    if table is None:
        return None
    lo, hi = m.act
    table = np.clip(table.astype(np.int32), lo, hi).astype(np.int8)
    f = K.lut(_shape(m.inputs[0]), "int8", name="lut_int8")
    return em.call(m, f, "lut_int8", [m.inputs[0], em.const(table)])


def _emit_batch_matmul(em, m: Match):
    """BATCH_MATMUL, int8 or int16: TFLite Micro's multiplier (the float product of the operands' scales over
    the output's), the operands as they are (constants as kernel constants)."""
    qa, qb = m.qin
    dt = m.attrs["dtype"]
    mult, shift = P.quantize_multiplier(float(np.float32(qa.s) * np.float32(qb.s)) / P.f32(m.qout.s))
    f = K.batch_matmul(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), adj_x=m.attrs["adj_x"],
                       adj_y=m.attrs["adj_y"], a_offset=-qa.zp, b_offset=-qb.zp,
                       requant=K.Requant(mult, shift, m.qout.zp, *m.act), dtype=dt, name=f"batch_matmul_{dt}")
    args = [em.const(x.value.numpy()) if isinstance(x, tvm.ir.Constant) else x for x in m.inputs]
    return em.call(m, f, f"batch_matmul_{dt}", args)


def _squared_difference(em: KernelEmitter, m: Match):
    (qa, qb), qo = m.qin, m.qout
    a, b, out = P.squared_difference_params(qa.s, qb.s, qo.s)
    f = XK.squared_difference(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), a=(-qa.zp, *a),
                              b=(-qb.zp, *b), out=K.Requant(out[0], out[1], qo.zp, *m.act))
    return em.call(m, f, "squared_difference_int8", list(m.inputs))


def _comparison(em: KernelEmitter, m: Match):
    qa, qb = m.qin
    pa, pb = P.comparison_params(qa.s), P.comparison_params(qb.s)
    if pa is None or pb is None:
        return None                       # TFLite refuses scales of 1 or more
    f = XK.compare(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), m.attrs["op"], a=(-qa.zp, *pa),
                   b=(-qb.zp, *pb))
    return em.call(m, f, m.attrs["op"] + "_int8", list(m.inputs))


def _div(em: KernelEmitter, m: Match):
    (qa, qb), qo = m.qin, m.qout
    mult, shift = P.div_params(qa.s, qb.s, qo.s)
    f = XK.div(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), a_offset=-qa.zp, b_offset=-qb.zp,
               out=K.Requant(mult, shift, qo.zp, *m.act))
    return em.call(m, f, "div_int8", list(m.inputs) + [em.const(P.div_reciprocals(qb.zp))])


def _resize_bilinear(em: KernelEmitter, m: Match):
    if m.act != (-128, 127):
        return None
    f = XK.resize_bilinear(_shape(m.inputs[0]), _shape(m.var), align_corners=m.attrs["align_corners"],
                           half_pixel=m.attrs["half_pixel"])
    return em.call(m, f, "resize_bilinear_int8", [m.inputs[0]])


def _l2_normalization(em: KernelEmitter, m: Match):
    shape = _shape(m.inputs[0])
    if shape[-1] > XK.L2_MAX_DEPTH or m.act != (-128, 127):
        return None
    f = XK.l2_normalization(shape, in_offset=-m.qin[0].zp)
    return em.call(m, f, "l2_normalization_int8", [m.inputs[0]])


def _log_softmax(em: KernelEmitter, m: Match):
    qx, qo = m.qin[0], m.qout
    if qo.zp != 127 or np.float32(qo.s) != np.float32(16 / 256) or m.act != (-128, 127):
        return None                       # TFLite's int8 kernel requires this output quantization
    p = P.log_softmax_params(qx.s)
    if p is None:
        return None
    _, table = P.softmax_tables(qx.s)
    f = XK.log_softmax(_shape(m.inputs[0]), **p)
    return em.call(m, f, "log_softmax_int8", [m.inputs[0], em.const(table)])


def _reduce_prod(em: KernelEmitter, m: Match):
    ishape = _shape(m.inputs[0])
    count = int(np.prod([ishape[a] for a in m.attrs["axes"]]))
    mult, shift = P.reduce_prod_params(m.qin[0].s, m.qout.s, count)
    if m.act != (-128, 127) or not -31 <= shift < 8:
        return None
    f = XK.reduce_prod(ishape, m.attrs["axes"], _shape(m.var), m.attrs["keepdims"], in_offset=-m.qin[0].zp,
                       mult=mult, shift=shift, out_offset=m.qout.zp)
    return em.call(m, f, "reduce_prod_int8", [m.inputs[0]])


def _cumsum(em: KernelEmitter, m: Match):
    p = P.cumsum_params(m.qin[0].s, m.qout.s)
    if p is None or m.act != (-128, 127):
        return None
    (im, ish), (om, osh) = p
    f = XK.cumsum(_shape(m.inputs[0]), m.attrs["axis"], exclusive=m.attrs["exclusive"], reverse=m.attrs["reverse"],
                  in_offset=-m.qin[0].zp, in_mult=im, in_shift=ish, out=K.Requant(om, osh, m.qout.zp))
    return em.call(m, f, "cumsum_int8", [m.inputs[0]])


def _arg_min_max(em: KernelEmitter, m: Match):
    f = XK.arg_min_max(_shape(m.inputs[0]), m.attrs["axis"], is_min=m.op == "ARG_MIN", out_dtype=str(m.var.ty.dtype))
    return em.call(m, f, m.op.lower() + "_int8", [m.inputs[0]])


#: lowering of the operators of :mod:`.extra_kernels`, by TFLite name
_EXTRA = {"SQUARED_DIFFERENCE": _squared_difference, "DIV": _div, "RESIZE_BILINEAR": _resize_bilinear,
          "L2_NORMALIZATION": _l2_normalization, "LOG_SOFTMAX": _log_softmax, "REDUCE_PROD": _reduce_prod,
          "CUMSUM": _cumsum, "ARG_MAX": _arg_min_max, "ARG_MIN": _arg_min_max}
_EXTRA.update({name: _comparison for name in XK.COMPARISONS.values()})


def _table(m: Match):
    """The 256-entry table of a one-input int8 operator, or None if TFLite's kernel would refuse it."""
    qx, qo = m.qin[0], m.qout
    if m.op == "QUANTIZE":
        return P.requantize_table(qx.s, qx.zp, qo.s, qo.zp)
    if m.op == "RELU":
        return P.relu_table(qx.s, qx.zp, qo.s, qo.zp)
    if m.op == "RELU_N1_TO_1":
        return P.relu_table(qx.s, qx.zp, qo.s, qo.zp, act_min=-1.0, act_max=1.0)
    if m.op == "RELU6":
        return P.relu_table(qx.s, qx.zp, qo.s, qo.zp, act_max=6.0)
    if m.op == "LEAKY_RELU":
        return P.leaky_relu_table(qx.s, qx.zp, qo.s, qo.zp, m.attrs["alpha"])
    if m.op == "HARD_SWISH":
        return P.hard_swish_table(qx.s, qx.zp, qo.s, qo.zp)
    if m.op == "LOGISTIC":
        if qo.zp != -128 or np.float32(qo.s) != np.float32(1 / 256):
            return None
        return P.logistic_table(qx.s, qx.zp)
    if m.op == "TANH":
        if qo.zp != 0 or np.float32(qo.s) != np.float32(1 / 128):
            return None
        return P.tanh_table(qx.s, qx.zp)
    tables = {"ABS": P.abs_table, "RSQRT": P.rsqrt_table, "SQRT": P.sqrt_table, "EXP": P.exp_table,
              "LOG": P.log_table, "ELU": P.elu_table}
    if m.op in tables:
        return tables[m.op](qx.s, qx.zp, qo.s, qo.zp)
    return None


def _lower_function(func: relax.Function, em: KernelEmitter, report: LoweringReport) -> relax.Function:
    view = FunctionView(func)
    replaced: dict = {}
    clipped = {view.value[v].args[0] for v in view.order
               if view.call(v, "clip") is not None and view.dtype(v) in ("int8", "uint8", "int16")}
    for var in view.order:
        if var in clipped and view.users[var] == 1:
            continue                      # matched at its clip, with the activation range
        m = match_binding(view, var)
        if m is None or m.op == "DEQUANTIZE":
            continue
        new = _emit(em, m)
        if new is not None:
            replaced[var] = new
            report.lowered[m.op] = report.lowered.get(m.op, 0) + 1
    func = replace_bindings(func, replaced)
    # dequantize bindings still used after the rewrite: DEQUANTIZE kernels (model outputs, float islands)
    view = FunctionView(func)
    deq = {}
    for var in view.order:
        if isinstance(view.value[var], relax.Call) and op_name(view.value[var]) == "relax.dequantize":
            m = match_binding(view, var)
            if m is not None and not _feeds_only_constants(view, var):
                new = _emit(em, m)
                if new is not None:
                    deq[var] = new
                    report.lowered["DEQUANTIZE"] = report.lowered.get("DEQUANTIZE", 0) + 1
    func = replace_bindings(func, deq)
    report.islands += _islands(func)
    return func


def _feeds_only_constants(view, var) -> bool:
    return isinstance(view.value[var].args[0], tvm.ir.Constant)


def _islands(func: relax.Function) -> list[str]:
    """Float operators left between int8 tensors: ``"op (var)"`` for each."""
    out = []
    view = FunctionView(func)
    for var in view.order:
        v = view.value[var]
        if not isinstance(v, relax.Call) or not isinstance(v.op, tvm.ir.Op):
            continue
        name = v.op.name
        floats = view.dtype(var) == "float32" or any(
            isinstance(getattr(a, "ty", None), relax.TensorType) and str(a.ty.dtype) == "float32" for a in v.args)
        if name in ("relax.call_tir", "relax.dequantize", "relax.quantize") or not floats:
            continue          # (a comparison of float values has a bool result: reported too)
        if any(isinstance(a, tvm.ir.Constant) for a in v.args) and all(
                isinstance(a, tvm.ir.Constant) or view.call(a, "dequantize") is not None
                and isinstance(view.value[a].args[0], tvm.ir.Constant) for a in v.args):
            continue   # weight preprocessing (folded away by FoldConstant)
        out.append(f"{name.replace('relax.', '')} ({var.name})")
    return out


def lower_int8(mod) -> tuple[tvm.IRModule, LoweringReport]:
    """Lower every QDQ operator group of every Relax function in ``mod`` to integer kernels.

    Returns the new module and a :class:`LoweringReport`. Modules without
    dequantize/quantize come back unchanged.
    """
    report = LoweringReport()
    if not has_qdq(mod):
        return mod, report
    em = KernelEmitter(mod)
    lowered = {gv: _lower_function(func, em, report) for gv, func in mod.functions_items()
               if isinstance(func, relax.Function)}
    for gv, func in lowered.items():
        em.bb.update_func(gv, func)
    mod = em.bb.get()
    report.kernels = sum(len(v) for v in em.funcs.values())
    report.constant_bytes = em.const_bytes
    return mod, report


@tvm.transform.module_pass(opt_level=0, name="IntegerLowering")
class IntegerLowering:
    """Relax pass: TFLite int8 operators in QDQ form -> exact integer kernels (see the module docstring).

    Parameters
    ----------
    strict : bool
        Raise :class:`~tvm_memsched.core.errors.UnsupportedError` naming the
        float islands instead of leaving them float.

    After running, ``.report`` is a :class:`LoweringReport`.
    """

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.report = None

    def transform_module(self, mod, ctx):
        new, self.report = lower_int8(mod)
        if self.strict and self.report.islands:
            from ...core.errors import UnsupportedError

            raise UnsupportedError("int8 lowering left float operators: " + ", ".join(self.report.islands))
        return new
