"""``FloatKernels``: float32 convolutions and fully connected layers as described kernels a code generator can swap.

TVM legalizes ``relax.nn.conv2d`` into TOPI kernels and fuses the bias, the
residual add and the activation behind it into one PrimFunc whose only name for
what it computes is its body. For the microcontroller export, which runs such
kernels on tvm_memsched's microkernel library (:mod:`tvm_memsched.micro.nn`),
this pass replaces each chain

    conv2d (NHWC, constant weights) | matmul (constant weights)
      [-> add(constant bias)] [-> add(activation of the output's shape)] [-> relu | clip | max/min]

(every intermediate used once) by one ``call_tir`` of a TE kernel computing the
same thing, with a description (:func:`tvm_memsched.relax.int8.kernels.finish`)
of the operator: shapes, strides, padding, dilation, bias, residual, activation
range. Weights become constants in the kernel's layout (OHWI, depthwise
``1HWC``, dense ``(N, K)``). The reduction runs over (kernel row, kernel column,
input channel), as TVM's NHWC kernels and TFLite's reference kernels sum, so a
kernel without fused multiply-add computes their very floats.

In a model that widens float16 constants (``astype`` of a float16 constant: the
``DEQUANTIZE`` of TFLite's float16 quantization, MediaPipe's models), a kernel
whose weights and bias are all float16 values keeps them float16 (``uint16``
bits, half the flash) and widens each exactly as it reads it
(:func:`widen_half`): the products and sums are those of the float32 weights.

Convolutions other than NHWC (an NCHW model whose layout was kept), grouped
convolutions that are not depthwise, non-float32 or dynamic shapes are left to
TVM.

Example
-------
>>> FloatKernels().info.name
'FloatKernels'
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..int8.kernels import finish
from ..int8.patterns import FunctionView
from ..ir import KernelEmitter, op_name, replace_bindings, static_shape

__all__ = ["FloatKernels", "lower_float", "conv2d_f32", "dense_f32", "FloatReport", "widen_half", "widens_half",
           "widened_types", "WEIGHT_TYPES"]

#: how a float kernel may store its weights (:func:`_storage` gives the dtypes and readers of each)
WEIGHT_TYPES = ("float32", "float16")

_INF = float("inf")


def widen_half(h):
    """The float32 value of IEEE float16 bits ``h`` (a ``uint16`` TIR expression), exactly: zeros and
    subnormals as ``m * 2**-24``, infinities and NaNs kept (the C target prints no float constant here, so
    nothing is rounded on the way)."""
    u32 = "uint32"
    u = h.astype(u32)

    def c(v):
        return tirx.const(v, u32)

    e = (u >> c(10)) & c(31)
    m = u & c(1023)
    s = (u >> c(15)) << c(31)
    top = tirx.Select(e == c(31), c(0x7F800000), (e + c(112)) << c(23))
    normal = tirx.reinterpret("float32", s | top | (m << c(13)))
    sub = m.astype("float32") * tirx.reinterpret("float32", c(0x33800000))      # 2**-24
    return tirx.Select(e == c(0), tirx.Select(s == c(0), sub, -sub), normal)


def _storage(weights: str) -> tuple[str, str, object, object]:
    """``(weight dtype, bias dtype, weight reader, bias reader)`` of a kernel storing its weights as ``weights``."""
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"weights must be one of {WEIGHT_TYPES}, got {weights!r}")
    same = lambda v: v          # noqa: E731
    if weights == "float16":
        return "uint16", "uint16", widen_half, widen_half
    return "float32", "float32", same, same


def _epilogue(acc, out_shape, b, r, lo, hi, weights="float32"):
    """``y = clamp(acc + bias[channel] + residual)``: the fused tail of every float kernel."""
    wv = _storage(weights)[3]

    def body(*i):
        v = acc[i]
        if b is not None:
            v = v + wv(b[i[-1]])
        if r is not None:
            v = v + r[i]
        return _act(v, lo, hi)

    return te.compute(out_shape, body, name="y")


def _act(y_expr, lo, hi):
    if lo is not None and lo > -_INF:
        y_expr = tirx.max(y_expr, tirx.const(lo, "float32"))
    if hi is not None and hi < _INF:
        y_expr = tirx.min(y_expr, tirx.const(hi, "float32"))
    return y_expr


def conv2d_f32(x_shape, w_shape, out_shape, *, strides, padding, dilation, depthwise: bool, has_bias: bool,
               residual: bool, lo=None, hi=None, name: str = "conv2d_f32",
               weights: str = "float32") -> tvm.tirx.PrimFunc:
    """NHWC float32 convolution (``w`` OHWI) or depthwise convolution (``w`` ``(1, kh, kw, C)``), plus a
    per-channel bias, plus a residual of the output's shape, clamped to ``[lo, hi]`` (None: unbounded).

    ``weights`` (:data:`WEIGHT_TYPES`): ``"float16"``: weights and bias are float16 bits (``uint16``),
    widened exactly as read (:func:`widen_half`).
    Parameters: x, w, [bias], [residual], y."""
    n_, h_, w_, c_ = x_shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl = padding[0], padding[1]
    oc_ = out_shape[3]
    x = te.placeholder(x_shape, "float32", "x")
    wdt, bdt, wv, _ = _storage(weights)
    w = te.placeholder(w_shape, wdt, "w")
    params = [x, w]
    b = te.placeholder((oc_,), bdt, "bias") if has_bias else None
    r = te.placeholder(out_shape, "float32", "residual") if residual else None
    params += [t for t in (b, r) if t is not None]
    kh_, kw_ = w_shape[1], w_shape[2]
    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")
    zero = tirx.const(0.0, "float32")
    if depthwise:
        def body(n, oh, ow, oc):
            ih, iw = oh * sh - pt + rh * dh, ow * sw - pl + rw * dw
            inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
            xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), oc]
            return te.sum(tirx.if_then_else(inside, xv * wv(w[0, rh, rw, oc]), zero), axis=[rh, rw])
    else:
        rc = te.reduce_axis((0, w_shape[3]), "rc")

        def body(n, oh, ow, oc):
            ih, iw = oh * sh - pt + rh * dh, ow * sw - pl + rw * dw
            inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < w_)
            xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), rc]
            return te.sum(tirx.if_then_else(inside, xv * wv(w[oc, rh, rw, rc]), zero), axis=[rh, rw, rc])

    acc = te.compute(out_shape, body, name="acc")

    y = _epilogue(acc, out_shape, b, r, lo, hi, weights)
    desc = {"op": "depthwise_conv2d_f32" if depthwise else "conv2d_f32", "x": list(x_shape), "w": list(w_shape),
            "y": list(out_shape), "strides": list(strides), "padding": list(padding), "dilation": list(dilation),
            "has_bias": has_bias, "residual": residual, "lo": lo, "hi": hi}
    if weights != "float32":
        desc["weights"] = weights
    return finish(params + [y], name, reduce_into="y", describe=desc)


def dense_f32(x_shape, w_shape, *, has_bias: bool, residual: bool, lo=None, hi=None,
              name: str = "dense_f32", weights: str = "float32") -> tvm.tirx.PrimFunc:
    """``x`` (..., K) times ``w`` (N, K) transposed, plus bias and residual, clamped (``weights`` as
    :func:`conv2d_f32`). Parameters: x, w, [bias], [residual], y."""
    k_, n_ = x_shape[-1], w_shape[0]
    out_shape = tuple(x_shape[:-1]) + (n_,)
    wdt, bdt, wv, _ = _storage(weights)
    x = te.placeholder(x_shape, "float32", "x")
    w = te.placeholder(w_shape, wdt, "w")
    b = te.placeholder((n_,), bdt, "bias") if has_bias else None
    r = te.placeholder(out_shape, "float32", "residual") if residual else None
    rk = te.reduce_axis((0, k_), "rk")
    acc = te.compute(out_shape, lambda *i: te.sum(x[(*i[:-1], rk)] * wv(w[i[-1], rk]), axis=rk), name="acc")

    y = _epilogue(acc, out_shape, b, r, lo, hi, weights)
    desc = {"op": "dense_f32", "x": list(x_shape), "w": list(w_shape), "y": list(out_shape), "has_bias": has_bias,
            "residual": residual, "lo": lo, "hi": hi}
    if weights != "float32":
        desc["weights"] = weights
    params = [x, w] + [t for t in (b, r) if t is not None]
    return finish(params + [y], name, reduce_into="y", describe=desc)


# ------------------------------------------------------------------ matching
def _const(expr):
    return expr.value.numpy() if isinstance(expr, tvm.ir.Constant) else None


def _f32(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) == "float32" and \
        static_shape(expr.ty) is not None


def _weight_ohwi(arr: np.ndarray, layout: str) -> np.ndarray:
    """A conv2d kernel in ``layout`` (a permutation of O, I, H, W) as OHWI."""
    return np.ascontiguousarray(np.transpose(arr, [layout.index(c) for c in "OHWI"]))


class FloatReport:
    """What :func:`lower_float` replaced: operator counts."""

    def __init__(self):
        self.lowered: dict = {}
        self.half = 0            # kernels whose weights stay float16 (the model widened float16 constants)

    @property
    def total(self) -> int:
        return sum(self.lowered.values())

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.lowered.items()))
        kept = f"; {self.half} with float16 weights kept float16" if self.half else ""
        return f"float kernels: {self.total} ({kinds}{kept})" if self.total else "float kernels: none"


def _chain(view: FunctionView, var, taken: set):
    """The bias, residual and activation bound after ``var`` (each intermediate used once, none already part
    of another chain): (last var, bias array or None, residual expr or None, lo, hi)."""
    bias = residual = None
    lo = hi = None
    last = var
    out_shape = static_shape(var.ty)
    while view.users[last] == 1:
        nxt = next((v for v in view.order if _reads(view.value[v], last)), None)
        if nxt is None or nxt in taken:
            break
        c = view.value[nxt]
        name = op_name(c) if isinstance(c, relax.Call) else ""
        if name == "relax.add" and lo is None and hi is None:
            other = c.args[1] if c.args[0].same_as(last) else c.args[0]
            arr = _const(other)
            if arr is not None and bias is None and residual is None and arr.size == out_shape[-1] and \
                    arr.dtype == np.float32 and (arr.ndim == 1 or all(d == 1 for d in arr.shape[:-1])):
                bias = arr.reshape(-1)
            elif arr is None and residual is None and _f32(other) and static_shape(other.ty) == out_shape:
                residual = other
            else:
                break
        elif name == "relax.nn.relu":
            lo = max(lo if lo is not None else -_INF, 0.0)
        elif name == "relax.clip":
            a, b = (_scalar(v) for v in (c.args[1], c.args[2]))
            lo, hi = max(lo if lo is not None else -_INF, a), min(hi if hi is not None else _INF, b)
        elif name in ("relax.maximum", "relax.minimum"):
            other = c.args[1] if c.args[0].same_as(last) else c.args[0]
            arr = _const(other)
            if arr is None or arr.size != 1:
                break
            v = float(arr.reshape(-1)[0])
            if name == "relax.maximum":
                lo = max(lo if lo is not None else -_INF, v)
            else:
                hi = min(hi if hi is not None else _INF, v)
        else:
            break
        last = nxt
    return last, bias, residual, lo, hi


def _scalar(v) -> float:
    """A PrimValue / FloatImm / IntImm as a Python float."""
    while hasattr(v, "value") and not isinstance(v, (int, float)):
        v = v.value
    return float(v)


def _reads(value, var) -> bool:
    return isinstance(value, relax.Call) and any(a.same_as(var) for a in value.args)


def _match(view: FunctionView, var, taken: set):
    """``(last var, kernel builder kwargs, arguments)`` for a chain starting at ``var``, or None."""
    c = view.value.get(var)
    if not isinstance(c, relax.Call) or not _f32(var):
        return None
    name = op_name(c)
    if name == "relax.nn.conv2d":
        a = c.attrs
        w = _const(c.args[1])
        if w is None or str(a.data_layout) != "NHWC" or str(a.out_layout) != "NHWC" or not _f32(c.args[0]):
            return None
        x_shape = static_shape(c.args[0].ty)
        w = _weight_ohwi(w.astype(np.float32), str(a.kernel_layout))
        groups = int(a.groups)
        depthwise = groups > 1
        if depthwise:
            if not (groups == x_shape[3] == w.shape[0] and w.shape[3] == 1):
                return None
            w = np.ascontiguousarray(w.transpose(3, 1, 2, 0))          # (C,kh,kw,1) -> (1,kh,kw,C)
        elif groups != 1:
            return None
        last, bias, residual, lo, hi = _chain(view, var, taken)
        kw = dict(x_shape=tuple(x_shape), w_shape=w.shape, out_shape=tuple(static_shape(var.ty)),
                  strides=tuple(int(v) for v in a.strides), padding=tuple(int(v) for v in a.padding),
                  dilation=tuple(int(v) for v in a.dilation), depthwise=depthwise)
        return last, ("conv", kw), c.args[0], w, bias, residual, lo, hi
    if name == "relax.matmul":
        w = _const(c.args[1])
        x_shape = static_shape(c.args[0].ty) if _f32(c.args[0]) else None
        if w is None or w.ndim != 2 or x_shape is None or len(x_shape) < 1 or x_shape[-1] != w.shape[0]:
            return None
        last, bias, residual, lo, hi = _chain(view, var, taken)
        wt = np.ascontiguousarray(w.astype(np.float32).T)
        return last, ("dense", dict(x_shape=tuple(x_shape), w_shape=wt.shape)), c.args[0], wt, bias, residual, lo, hi
    return None


def widened_types(func) -> set:
    """The dtypes of the constants ``func`` widens to float32 (``astype``): float16 in a model with float16
    weights."""
    found = set()

    def visit(e):
        if isinstance(e, relax.Call) and op_name(e) == "relax.astype" and isinstance(e.args[0], tvm.ir.Constant) \
                and str(e.ty.dtype) == "float32":
            found.add(str(e.args[0].ty.dtype))

    relax.analysis.post_order_visit(func.body, visit)
    return found


def widens_half(func) -> bool:
    """True when ``func`` widens a float16 constant to float32 (a model with float16 weights)."""
    return "float16" in widened_types(func)


def _stored(a: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 values ``a`` as a kernel stores them (``uint16``: float16 bits, :func:`_as_half`)."""
    return _as_half(a) if dtype == "uint16" else np.asarray(a).astype(dtype)


def _half_exact(a: np.ndarray) -> bool:
    """Every value of float32 ``a`` is a float16 value (so storing it as float16 loses nothing)."""
    a = np.asarray(a, np.float32)
    with np.errstate(over="ignore"):
        back = a.astype(np.float16).astype(np.float32)
    return bool(np.array_equal(back.view(np.uint32), a.view(np.uint32)))


def _as_half(a: np.ndarray) -> np.ndarray:
    """float16 bits of ``a`` (``uint16``; :func:`_half_exact` holds)."""
    return np.ascontiguousarray(np.asarray(a, np.float32).astype(np.float16).view(np.uint16))


def lower_float(mod, keep_half: bool = True) -> tuple["tvm.IRModule", FloatReport]:
    """Replace the float32 convolution / matmul chains of ``mod["main"]`` (see the module docstring);
    ``keep_half=False`` stores float16 weights as float32 too."""
    report = FloatReport()
    main = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    if not isinstance(main, relax.Function):
        return mod, report
    widened = widened_types(main) if keep_half else set()
    mod = relax.transform.FoldConstant()(mod)
    main = mod["main"]
    view = FunctionView(main)
    em = KernelEmitter(mod)
    replaced, taken = {}, set()
    for var in view.order:
        if var in taken:
            continue
        m = _match(view, var, taken)
        if m is None:
            continue
        last, (kind, kw), x, w, bias, residual, lo, hi = m
        if "float16" in widened and _half_exact(w) and (bias is None or _half_exact(bias)):
            weights = "float16"
            report.half += 1
        else:
            weights = "float32"
        common = dict(has_bias=bias is not None, residual=residual is not None, lo=lo, hi=hi, weights=weights)
        if kind == "conv":
            f = conv2d_f32(**kw, **common, name="dwconv_f32" if kw["depthwise"] else "conv2d_f32")
            op = "DEPTHWISE_CONV_2D" if kw["depthwise"] else "CONV_2D"
        else:
            f = dense_f32(**kw, **common)
            op = "FULLY_CONNECTED"
        wdt, bdt, _, _ = _storage(weights)
        args = [x, em.const(_stored(w, wdt))] + ([em.const(_stored(bias, bdt))] if bias is not None else []) + \
            ([residual] if residual is not None else [])
        gv = em.gvar(f, f.attrs["global_symbol"])
        replaced[last] = relax.call_tir(gv, args, last.ty)
        report.lowered[op] = report.lowered.get(op, 0) + 1
        # the chain's intermediates are dead once the last binding computes everything
        v = var
        while not v.same_as(last):
            taken.add(v)
            v = next(u for u in view.order if _reads(view.value[u], v))
        taken.add(last)
    if not replaced:
        return mod, report
    em.bb.update_func(mod.get_global_var("main"), replace_bindings(main, replaced))
    return em.bb.get(), report


@tvm.transform.module_pass(opt_level=0, name="FloatKernels")
class FloatKernels:
    """Relax pass: float32 conv2d / matmul chains -> described TE kernels (see the module docstring).

    After running, ``.report`` is a :class:`FloatReport`.
    """

    def __init__(self):
        self.report = None

    def transform_module(self, mod, ctx):
        new, self.report = lower_float(mod)
        return new
