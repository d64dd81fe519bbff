"""Recognise TFLite's int8 (and 16x8: int16 activation) operators in a quantize/dequantize (QDQ) Relax function.

TVM's TFLite frontend (and our extension of it, :mod:`..frontend`) imports a
quantized operator as ``dequantize`` of its int8 inputs, the float operator,
and ``quantize`` of the result (a fused activation becomes a ``clip`` after the
``quantize``, or a float ``relu``/``clip`` before it). :func:`match_binding`
reads such a group backwards from its last binding and returns a
:class:`Match`: which TFLite operator it is, its int8 inputs, the
quantization parameters of every tensor (constants of the function), its
constant operands and attributes. Anything it does not recognise stays float
(a *float island*, reported by the lowering pass). Activations may be int8 or
int16 (:data:`INT_TYPES`); the operators only 16x8 models have kernels for are
recognised by :mod:`.patterns16`; the function view and :class:`Match` are
in :mod:`.qdq`.

Example
-------
>>> QParams(np.array([0.5], np.float32), np.array([3]), 0).zp
3
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ..ir import op_name
from .patterns16 import match_int16
from .qdq import INT_TYPES, FunctionView, Match, QParams, const_value, prim_value

__all__ = ["QParams", "Match", "FunctionView", "match_binding", "INT_TYPES"]


def _act_from_clip(view: FunctionView, expr):
    """``(inner, lo, hi)`` if ``expr`` is an int ``clip(inner, lo, hi)``, else ``(expr, -inf, inf)``."""
    c = view.call(expr, "clip")
    if c is not None and view.dtype(expr) in INT_TYPES:
        lo, hi = prim_value(c.args[1]), prim_value(c.args[2])
        if lo is not None and hi is not None:
            return c.args[0], int(np.ceil(lo)), int(np.floor(hi))
    return expr, None, None


def _float_activation(view: FunctionView, expr):
    """Strip a float fused activation before the quantize: ``(inner, name)``."""
    if view.call(expr, "nn.relu") is not None:
        return view.value[expr].args[0], "relu"
    c = view.call(expr, "clip")
    if c is not None:
        lo, hi = prim_value(c.args[1]), prim_value(c.args[2])
        if (lo, hi) == (0, 6) or (lo, hi) == (0.0, 6.0):
            return c.args[0], "relu6"
        if (lo, hi) == (-1, 1) or (lo, hi) == (-1.0, 1.0):
            return c.args[0], "relu_n1_to_1"
    return expr, "none"


def _int_range(dtype: str) -> tuple[int, int]:
    return {"int8": (-128, 127), "int16": (-32768, 32767)}.get(dtype, (0, 255))


def _bias_ok(bias, x_dtype: str, op: str) -> bool:
    """TFLite's bias types: int32 for int8 inputs; int64 (or int32, int32 accumulators) for int16 inputs,
    TRANSPOSE_CONV also int16 (widened to int64); DEPTHWISE_CONV_2D and TRANSPOSE_CONV read int64 only."""
    dt = bias.dtype.name
    if x_dtype != "int16":
        return dt == "int32"
    if op == "TRANSPOSE_CONV":
        return dt in ("int64", "int16")
    return dt == "int64" or (dt == "int32" and op != "DEPTHWISE_CONV_2D")


def match_binding(view: FunctionView, var) -> Match | None:
    """The TFLite int8 operator whose result ``var`` is, or None."""
    value = view.value.get(var)
    if not isinstance(value, relax.Call):
        return None
    name = op_name(value)
    out_dtype = view.dtype(var)
    if out_dtype in INT_TYPES:
        inner, lo, hi = _act_from_clip(view, var)
        qmin, qmax = _int_range(out_dtype)
        q = view.call(inner, "quantize")
        if q is not None:
            m = _match_quantize(view, var, q)
        elif view.call(inner, "astype") is not None:
            m = _match_avg_pool(view, var, inner)
        elif view.call(inner, "nn.max_pool2d") is not None:
            m = _match_max_pool(view, var, inner)
        else:
            m = None
        if m is None:
            return None
        if lo is not None:
            m.act = (max(m.act[0], lo, qmin), min(m.act[1], hi, qmax))
        return m
    if out_dtype == "int16":
        return _match_int16(view, var)
    if name == "relax.dequantize":
        d = view.dequantized(var)
        if d is not None:
            return Match("DEQUANTIZE", var, [d[0]], [d[1]], None)
    if out_dtype == "bool":
        return _match_comparison(view, var, value)
    if name == "relax.astype":
        return _match_arg_min_max(view, var, value)
    return None


def _match_quantize(view: FunctionView, var, q) -> Match | None:
    qout = view.qparams(q.args[1], q.args[2], q.attrs.axis)
    if qout is None or not qout.per_tensor:
        return None
    out_dtype = str(q.attrs.out_dtype)
    qmin, qmax = _int_range(out_dtype)
    body = q.args[0]
    if view.dtype(body) != "float32":
        return None
    # a plain requantize (QUANTIZE int8 -> int8) or a one-input activation
    d = view.dequantized(body)
    if d is not None:
        return Match("QUANTIZE", var, [d[0]], [d[1]], qout, act=(qmin, qmax))
    unary = _match_unary(view, var, body, qout, (qmin, qmax))
    if unary is not None:
        return unary
    if out_dtype == "int16":
        found = match_int16(view, body)
        if found is not None:
            op, inputs, qin, attrs = found
            return Match(op, var, inputs, qin, qout, attrs=attrs, act=(qmin, qmax))
    inner, act = _float_activation(view, body)
    from .params import act_range

    rng = act_range(act, qout.s, qout.zp, qmin, qmax)
    for matcher in (_match_conv, _match_transpose_conv, _match_dense, _match_binary, _match_mean, _match_softmax,
                    _match_concat, _match_prelu, _match_batch_matmul, _match_squared_difference, _match_div,
                    _match_resize_bilinear, _match_l2_normalization, _match_log_softmax, _match_reduce_prod,
                    _match_cumsum):
        m = matcher(view, var, inner, qout)
        if m is not None:
            base = m.act if out_dtype == "int8" else (qmin, qmax)     # Match's default is int8's range
            m.act = (max(base[0], rng[0]), min(base[1], rng[1]))
            return m
    # QUANTIZE of a float tensor: a float input of the model, or the end of a float island
    if act == "none" and view.call(body, "dequantize") is None:
        return Match("QUANTIZE_FLOAT", var, [body], [], qout, act=(qmin, qmax))
    return None


def _match_unary(view: FunctionView, var, body, qout, rng) -> Match | None:
    """One-input int8 operators: RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH, LEAKY_RELU, HARD_SWISH, ABS, RSQRT,
    SQRT, EXP, LOG, ELU."""
    c = body if not isinstance(body, relax.Var) else view.value.get(body)
    if not isinstance(c, relax.Call):
        return None
    name = op_name(c)
    simple = {"relax.nn.relu": "RELU", "relax.sigmoid": "LOGISTIC", "relax.tanh": "TANH",
              "relax.nn.leakyrelu": "LEAKY_RELU", "relax.abs": "ABS", "relax.rsqrt": "RSQRT", "relax.sqrt": "SQRT",
              "relax.exp": "EXP", "relax.log": "LOG"}
    if name in simple:
        d = view.dequantized(c.args[0])
        if d is None:
            return None
        attrs = {"alpha": float(c.attrs.alpha)} if name == "relax.nn.leakyrelu" else {}
        return Match(simple[name], var, [d[0]], [d[1]], qout, attrs=attrs, act=rng)
    if name == "relax.where":
        return _match_elu(view, var, c, qout, rng)
    if name == "relax.clip":
        d = view.dequantized(c.args[0])
        lo, hi = prim_value(c.args[1]), prim_value(c.args[2])
        if d is None:
            return None
        kinds = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}
        kind = kinds.get((float(lo), float(hi)))
        return None if kind is None else Match(kind, var, [d[0]], [d[1]], qout, act=rng)
    if name == "relax.divide":
        # hard swish: x * clip(x + 3, 0, 6) / 6
        six = const_value(c.args[1])
        mul = view.call(c.args[0], "multiply")
        if six is None or float(np.asarray(six).reshape(-1)[0]) != 6.0 or mul is None:
            return None
        x, clipped = mul.args
        cl = view.call(clipped, "clip")
        if cl is None or (float(prim_value(cl.args[1])), float(prim_value(cl.args[2]))) != (0.0, 6.0):
            return None
        add = view.call(cl.args[0], "add")
        if add is None or not add.args[0].same_as(x):
            return None
        three = const_value(add.args[1])
        d = view.dequantized(x)
        if d is None or three is None or float(np.asarray(three).reshape(-1)[0]) != 3.0:
            return None
        return Match("HARD_SWISH", var, [d[0]], [d[1]], qout, act=rng)
    return None


def _match_conv(view: FunctionView, var, body, qout) -> Match | None:
    bias = None
    conv_expr = body
    add = view.call(body, "add")
    if add is not None:
        conv_expr = add.args[0]
        b = view.bias(add.args[1])
        if b is None or b[0].dtype.name not in ("int32", "int64"):
            return None
        bias = b[0].reshape(-1)
    c = view.call(conv_expr, "nn.conv2d")
    if c is None:
        return None
    a = c.attrs
    if str(a.data_layout) != "NHWC" or str(a.out_layout) != "NHWC":
        return None
    d = view.dequantized(c.args[0])
    wt = view.const_weight(c.args[1])
    if d is None or wt is None or str(wt[0].dtype) not in INT_TYPES:
        return None
    x, qx = d
    w, qw = wt
    if not qx.per_tensor or np.any(qw.zero_point != 0) and str(w.dtype) == "int8":
        return None
    layout = str(a.kernel_layout)
    groups = int(a.groups)
    xs, ys = view.shape(x), view.shape(var)
    if xs is None or ys is None:
        return None
    cin, cout = xs[3], ys[3]
    # weight in HWIO or HWOI (Relax) -> TFLite OHWI / depthwise 1HW(C*M)
    if layout == "HWIO":
        w_hwio = w
        qaxis = {3: 0}.get(qw.axis, None) if not qw.per_tensor else 0
    elif layout == "HWOI":
        w_hwio = np.transpose(w, (0, 1, 3, 2))
        qaxis = 0 if qw.per_tensor else ({2: 0}.get(qw.axis))
    else:
        return None
    if qaxis is None:
        return None
    kh, kw, icg, oc = w_hwio.shape
    if oc != cout or bias is not None and bias.size != cout:
        return None
    scales = qw.scale if not qw.per_tensor else np.repeat(qw.scale, cout)
    if scales.size != cout:
        return None
    attrs = {"strides": tuple(int(s) for s in a.strides), "dilation": tuple(int(s) for s in a.dilation),
             "padding": tuple(int(p) for p in a.padding), "groups": groups}
    if groups == cin and groups > 1 and icg == 1:
        attrs["depth_multiplier"] = cout // cin
        weight = np.transpose(w_hwio, (2, 0, 1, 3)).reshape(1, kh, kw, cout)   # 1 H W (C*M)
        op = "DEPTHWISE_CONV_2D"
    else:
        if cin != icg * groups:
            return None
        weight = np.ascontiguousarray(np.transpose(w_hwio, (3, 0, 1, 2)))       # O H W I
        op = "CONV_2D"
    if bias is not None and not _bias_ok(bias, view.dtype(x), op):
        return None
    consts = {"weight": np.ascontiguousarray(weight), "w_scales": scales.astype(np.float32),
              "w_zero_point": int(qw.zp)}
    if bias is not None:
        consts["bias"] = bias.astype(np.int32) if bias.dtype == np.int32 else bias
    return Match(op, var, [x], [qx], qout, consts=consts, attrs=attrs)


def _match_transpose_conv(view: FunctionView, var, body, qout) -> Match | None:
    """TRANSPOSE_CONV: ``conv2d_transpose`` (NHWC, IOHW weights dequantized along O) [+ int32 bias]."""
    bias = None
    expr = body
    add = view.call(body, "add")
    if add is not None:
        expr = add.args[0]
        b = view.bias(add.args[1])
        if b is None or b[0].dtype.name not in ("int16", "int32", "int64"):
            return None
        bias = b[0].reshape(-1)
    c = view.call(expr, "nn.conv2d_transpose")
    if c is None:
        return None
    a = c.attrs
    if str(a.data_layout) != "NHWC" or str(a.out_layout) != "NHWC" or str(a.kernel_layout) != "IOHW" or \
            int(a.groups) != 1 or any(int(d) != 1 for d in a.dilation) or any(int(p) for p in a.output_padding):
        return None
    d = view.dequantized(c.args[0])
    wt = view.const_weight(c.args[1])
    if d is None or wt is None or str(wt[0].dtype) not in INT_TYPES:
        return None
    x, qx = d
    w, qw = wt                                        # I O H W
    if np.any(qw.zero_point != 0) or (not qw.per_tensor and qw.axis != 1):
        return None
    oc = w.shape[1]
    if bias is not None and (bias.size != oc or not _bias_ok(bias, view.dtype(x), "TRANSPOSE_CONV")):
        return None
    scales = qw.scale if not qw.per_tensor else np.repeat(qw.scale, oc)
    if scales.size != oc:
        return None
    consts = {"weight": np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0))),      # O H W I, as TFLite stores it
              "w_scales": scales.astype(np.float32)}
    if bias is not None:
        consts["bias"] = bias.astype(np.int64) if view.dtype(x) == "int16" else bias.astype(np.int32)
    attrs = {"strides": tuple(int(s) for s in a.strides), "padding": tuple(int(p) for p in a.padding)}
    return Match("TRANSPOSE_CONV", var, [x], [qx], qout, consts=consts, attrs=attrs)


def _match_dense(view: FunctionView, var, body, qout) -> Match | None:
    bias = None
    mm_expr = body
    add = view.call(body, "add")
    if add is not None:
        mm_expr = add.args[0]
        b = view.bias(add.args[1])
        if b is None or b[0].dtype.name not in ("int32", "int64"):
            return None
        bias = b[0].reshape(-1)
    mm = view.call(mm_expr, "matmul")
    if mm is None:
        return None
    d = view.dequantized(mm.args[0])
    wt = view.const_weight(mm.args[1])
    if d is None or wt is None or str(wt[0].dtype) not in INT_TYPES:
        return None
    x, qx = d
    w, qw = wt
    if w.ndim != 2 or not qx.per_tensor:
        return None
    k, n = w.shape                                    # (K, N) after the frontend's transpose
    if not qw.per_tensor and qw.axis != 1:
        return None
    if bias is not None and (bias.size != n or not _bias_ok(bias, view.dtype(x), "FULLY_CONNECTED")):
        return None
    scales = qw.scale if not qw.per_tensor else np.repeat(qw.scale, n)
    consts = {"weight": np.ascontiguousarray(w.T), "w_scales": scales.astype(np.float32),
              "w_zero_point": int(qw.zp)}
    if bias is not None:
        consts["bias"] = bias.astype(np.int32) if bias.dtype == np.int32 else bias
    return Match("FULLY_CONNECTED", var, [x], [qx], qout, consts=consts, attrs={"per_channel": not qw.per_tensor})


def _swaps_last_two(call, rank: int) -> bool:
    """True if the ``permute_dims`` ``call`` of a rank-``rank`` tensor swaps its last two axes only."""
    axes = call.attrs.axes
    want = list(range(rank - 2)) + [rank - 1, rank - 2]
    return rank == 2 if axes is None else [int(a) for a in axes] == want


def _bmm_operand(view: FunctionView, expr, dtype: str):
    """``(tensor, QParams, transposed)`` of a BATCH_MATMUL operand: ``dequantize`` of a ``dtype`` activation or
    constant with one scale and zero point, seen through a ``permute_dims`` swapping its last two axes (an
    ``adj_x`` / ``adj_y`` operand) before or after the dequantize; else None."""
    shape = view.shape(expr)
    if shape is None or len(shape) < 2:
        return None
    transposed, e = False, expr
    p = view.call(e, "permute_dims")
    if p is not None:
        if not _swaps_last_two(p, len(shape)):
            return None
        transposed, e = True, p.args[0]
    d = view.call(e, "dequantize")
    if d is None:
        return None
    x = d.args[0]
    p = view.call(x, "permute_dims")
    if p is not None and not transposed and _swaps_last_two(p, len(shape)):
        transposed, x = True, p.args[0]
    q = view.qparams(d.args[1], d.args[2], d.attrs.axis)
    if q is None or not q.per_tensor or view.dtype(x) != dtype:
        return None
    return x, q, transposed


def _match_batch_matmul(view: FunctionView, var, body, qout) -> Match | None:
    """BATCH_MATMUL: ``matmul`` of two dequantized operands (activations or constants, each possibly
    transposed: ``adj_x`` / ``adj_y``) of the output's type (int8, or int16 for 16x8 models), batch
    dimensions broadcast."""
    mm = view.call(body, "matmul")
    dtype = view.dtype(var)
    if mm is None or view.shape(var) is None or dtype not in ("int8", "int16"):
        return None
    ops = [_bmm_operand(view, e, dtype) for e in mm.args[:2]]
    if None in ops:
        return None
    (a, qa, adj_x), (b, qb, adj_y) = ops
    return Match("BATCH_MATMUL", var, [a, b], [qa, qb], qout, attrs={"adj_x": adj_x, "adj_y": adj_y,
                                                                       "dtype": dtype})


def _match_int16(view: FunctionView, var) -> Match | None:
    """The int16 operators lowered to integer kernels (16-bit activations, TFLite's int16x8): BATCH_MATMUL."""
    q = view.call(var, "quantize")
    if q is None or str(q.attrs.out_dtype) != "int16" or view.dtype(q.args[0]) != "float32":
        return None
    qout = view.qparams(q.args[1], q.args[2], q.attrs.axis)
    if qout is None or not qout.per_tensor:
        return None
    m = _match_batch_matmul(view, var, q.args[0], qout)
    if m is not None:
        m.act = (-32768, 32767)
    return m


def _match_binary(view: FunctionView, var, body, qout) -> Match | None:
    for name, op in (("add", "ADD"), ("subtract", "SUB"), ("multiply", "MUL")):
        c = view.call(body, name)
        if c is None:
            continue
        da, db = view.dequantized(c.args[0]), view.dequantized(c.args[1])
        if da is None or db is None or not (da[1].per_tensor and db[1].per_tensor):
            return None
        return Match(op, var, [da[0], db[0]], [da[1], db[1]], qout)
    return None


def _match_mean(view: FunctionView, var, body, qout) -> Match | None:
    """MEAN, and SUM (the same kernel without the division by the element count)."""
    c = view.call(body, "mean", "sum")
    if c is None:
        return None
    d = view.dequantized(c.args[0])
    if d is None or not d[1].per_tensor:
        return None
    axes = [int(a) for a in c.attrs.axis] if c.attrs.axis is not None else list(range(len(view.shape(d[0]))))
    return Match("MEAN" if op_name(c) == "relax.mean" else "SUM", var, [d[0]], [d[1]], qout,
                 attrs={"axes": axes, "keepdims": bool(c.attrs.keepdims)})


def _match_softmax(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "nn.softmax")
    if c is None:
        return None
    d = view.dequantized(c.args[0])
    shape = view.shape(var)
    if d is None or shape is None or int(c.attrs.axis) not in (-1, len(shape) - 1):
        return None
    return Match("SOFTMAX", var, [d[0]], [d[1]], qout, attrs={"beta": 1.0})


def _match_concat(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "concat")
    if c is None or not isinstance(c.args[0], relax.Tuple):
        return None
    parts = [view.dequantized(f) for f in c.args[0].fields]
    if any(p is None or not p[1].per_tensor for p in parts):
        return None
    return Match("CONCATENATION", var, [p[0] for p in parts], [p[1] for p in parts], qout,
                 attrs={"axis": int(c.attrs.axis)})


def _match_prelu(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "nn.prelu")
    if c is None:
        return None
    d = view.dequantized(c.args[0])
    al = view.const_weight(c.args[1])
    shape = view.shape(var)
    if d is None or al is None or shape is None or int(c.attrs.axis) not in (-1, len(shape) - 1):
        return None
    alpha, qa = al
    if not qa.per_tensor:
        return None
    return Match("PRELU", var, [d[0]], [d[1]], qout, consts={"alpha": alpha.reshape(-1), "alpha_q": qa})


def _match_avg_pool(view: FunctionView, var, inner) -> Match | None:
    cast = view.call(inner, "astype")
    pool = view.call(cast.args[0], "nn.avg_pool2d") if cast is not None else None
    if pool is None or view.dtype(inner) not in INT_TYPES:
        return None
    src = view.call(pool.args[0], "astype")
    if src is None or view.dtype(src.args[0]) != view.dtype(inner) or view.dtype(pool.args[0]) != "int32":
        return None
    a = pool.attrs
    if str(a.layout) != "NHWC" or bool(a.ceil_mode) or any(int(d) != 1 for d in a.dilation):
        return None
    attrs = {"pool": tuple(int(p) for p in a.pool_size), "strides": tuple(int(s) for s in a.strides),
             "padding": tuple(int(p) for p in a.padding)}
    return Match("AVERAGE_POOL_2D", var, [src.args[0]], [None], None, attrs=attrs,
                 act=_int_range(view.dtype(inner)))


def _match_max_pool(view: FunctionView, var, inner) -> Match | None:
    pool = view.call(inner, "nn.max_pool2d")
    if pool is None or view.dtype(pool.args[0]) not in INT_TYPES:
        return None
    a = pool.attrs
    if str(a.layout) != "NHWC" or bool(a.ceil_mode) or any(int(d) != 1 for d in a.dilation):
        return None
    attrs = {"pool": tuple(int(p) for p in a.pool_size), "strides": tuple(int(s) for s in a.strides),
             "padding": tuple(int(p) for p in a.padding)}
    return Match("MAX_POOL_2D", var, [pool.args[0]], [None], None, attrs=attrs,
                 act=_int_range(view.dtype(pool.args[0])))


def _two_dequantized(view: FunctionView, c):
    """``(inputs, qparams)`` if both arguments of the call ``c`` are dequantized int8 tensors, else None."""
    da, db = view.dequantized(c.args[0]), view.dequantized(c.args[1])
    if da is None or db is None:
        return None
    return [da[0], db[0]], [da[1], db[1]]


def _match_squared_difference(view: FunctionView, var, body, qout) -> Match | None:
    """SQUARED_DIFFERENCE: ``(a - b) * (a - b)`` of two dequantized inputs."""
    mul = view.call(body, "multiply")
    if mul is None or not mul.args[0].same_as(mul.args[1]):
        return None
    sub = view.call(mul.args[0], "subtract")
    both = _two_dequantized(view, sub) if sub is not None else None
    return None if both is None else Match("SQUARED_DIFFERENCE", var, both[0], both[1], qout)


def _match_div(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "divide")
    both = _two_dequantized(view, c) if c is not None else None
    return None if both is None else Match("DIV", var, both[0], both[1], qout)


def _match_comparison(view: FunctionView, var, value) -> Match | None:
    """EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL of two dequantized int8 tensors (bool)."""
    from .extra_kernels import COMPARISONS

    name = op_name(value).replace("relax.", "")
    if name not in COMPARISONS:
        return None
    both = _two_dequantized(view, value)
    return None if both is None else Match(COMPARISONS[name], var, both[0], both[1], None, attrs={"op": name})


def _match_resize_bilinear(view: FunctionView, var, body, qout) -> Match | None:
    """RESIZE_BILINEAR (NHWC, TFLite's three coordinate modes) with equal input and output quantization."""
    c = view.call(body, "image.resize2d")
    if c is None:
        return None
    a = c.attrs
    mode = str(a.coordinate_transformation_mode)
    d = view.dequantized(c.args[0])
    if d is None or str(a.method) != "linear" or str(a.layout) != "NHWC" or \
            mode not in ("asymmetric", "align_corners", "half_pixel") or not d[1].same_as(qout):
        return None
    return Match("RESIZE_BILINEAR", var, [d[0]], [d[1]], qout,
                 attrs={"align_corners": mode == "align_corners", "half_pixel": mode == "half_pixel"})


def _match_l2_normalization(view: FunctionView, var, body, qout) -> Match | None:
    """L2_NORMALIZATION as the frontend writes it: ``x / max(sqrt(sum(x * x, -1)), eps)``."""
    c = view.call(body, "divide")
    mx = view.call(c.args[1], "maximum") if c is not None else None
    sq = view.call(mx.args[0], "sqrt") if mx is not None else None
    sm = view.call(sq.args[0], "sum") if sq is not None else None
    mul = view.call(sm.args[0], "multiply") if sm is not None else None
    d = view.dequantized(c.args[0]) if mul is not None else None
    shape = view.shape(var)
    if d is None or not all(a.same_as(c.args[0]) for a in mul.args) or shape is None or \
            [int(x) % len(shape) for x in sm.attrs.axis] != [len(shape) - 1]:
        return None
    return Match("L2_NORMALIZATION", var, [d[0]], [d[1]], qout)


def _match_log_softmax(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "nn.log_softmax")
    d = view.dequantized(c.args[0]) if c is not None else None
    shape = view.shape(var)
    if d is None or shape is None or int(c.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    return Match("LOG_SOFTMAX", var, [d[0]], [d[1]], qout)


def _match_reduce_prod(view: FunctionView, var, body, qout) -> Match | None:
    c = view.call(body, "prod")
    d = view.dequantized(c.args[0]) if c is not None else None
    if d is None:
        return None
    rank = len(view.shape(d[0]))
    axes = [int(a) % rank for a in c.attrs.axis] if c.attrs.axis is not None else list(range(rank))
    return Match("REDUCE_PROD", var, [d[0]], [d[1]], qout, attrs={"axes": axes, "keepdims": bool(c.attrs.keepdims)})


def _scalar(expr) -> float | None:
    v = const_value(expr)
    return None if v is None or np.asarray(v).size != 1 else float(np.asarray(v).reshape(-1)[0])


def _match_elu(view: FunctionView, var, c, qout, rng) -> Match | None:
    """ELU as the frontend writes it: ``where(x < 0, exp(x) - 1, x)``."""
    less = view.call(c.args[0], "less")
    sub = view.call(c.args[1], "subtract")
    exp = view.call(sub.args[0], "exp") if sub is not None else None
    d = view.dequantized(c.args[2])
    if d is None or less is None or exp is None or not (less.args[0].same_as(c.args[2]) and
                                                        exp.args[0].same_as(c.args[2])) or \
            _scalar(less.args[1]) != 0.0 or _scalar(sub.args[1]) != 1.0:
        return None
    return Match("ELU", var, [d[0]], [d[1]], qout, act=rng)


def _match_cumsum(view: FunctionView, var, body, qout) -> Match | None:
    """CUMSUM as the frontend writes an int8 one: ``cumsum(x)`` without a dtype, reversed as
    ``flip(cumsum(flip(x)))``."""
    outer = view.call(body, "flip")
    c = view.call(outer.args[0] if outer is not None else body, "cumsum")
    if c is None or (c.attrs.dtype is not None and str(c.attrs.dtype) not in ("", "void")):
        return None     # a dtype: a file's own float CUMSUM (the int8 converter writes none), kept float
    src = c.args[0]
    inner = view.call(src, "flip")
    if (outer is None) != (inner is None):
        return None
    if inner is not None:
        if int(inner.attrs.axis) != int(outer.attrs.axis) or int(inner.attrs.axis) != int(c.attrs.axis):
            return None
        src = inner.args[0]
    d = view.dequantized(src)
    if d is None:
        return None
    rank = len(view.shape(d[0]))
    return Match("CUMSUM", var, [d[0]], [d[1]], qout,
                 attrs={"axis": int(c.attrs.axis) % rank, "exclusive": bool(c.attrs.exclusive),
                        "reverse": outer is not None})


def _match_arg_min_max(view: FunctionView, var, cast) -> Match | None:
    """ARG_MAX / ARG_MIN of an int8 tensor imported as ``astype(argmax(x), int32)`` (TVM's indexes are int64)."""
    c = view.call(cast.args[0], "argmax", "argmin")
    if c is None or view.dtype(c.args[0]) not in INT_TYPES or c.attrs.axis is None or bool(c.attrs.keepdims) or \
            view.dtype(var) not in ("int32", "int64") or view.users[cast.args[0]] != 1:
        return None
    rank = len(view.shape(c.args[0]))
    return Match("ARG_MIN" if op_name(c) == "relax.argmin" else "ARG_MAX", var, [c.args[0]], [None], None,
                 attrs={"axis": int(c.attrs.axis) % rank})
