"""``relax.nn.conv2d_transpose`` in channels-last layout (NHWC data, any kernel layout), lowered to one kernel.

TVM's legalization takes only NCHW data with IOHW weights; TFLite's ``TRANSPOSE_CONV`` imports as NHWC, which
TVM then cannot build at all. :func:`legalize` lowers the NHWC forms to :func:`conv2d_transpose_nhwc`, a
*gather* formulation: every output element sums the input pixels whose stride-spaced footprint covers it,

    y[n, oh, ow, o] = sum over kh, kw, i with (oh + pad_top - kh * dh) = ih * sh, 0 <= ih < H (same for w)
                      of x[n, ih, iw, i] * w[i, o, kh, kw]

so the kernel needs no zero-stuffed, padded copy of the input (TVM's NCHW kernel builds one, TFLite Micro's
integer kernel a full-size int32 scratch of the output). Every other case goes to TVM's function.

Example
-------
>>> import numpy as np
>>> from tvm import te
>>> x, w = te.placeholder((1, 2, 2, 1)), te.placeholder((1, 1, 2, 2))
>>> y = conv2d_transpose_nhwc(x, w, (2, 2), (0, 0, 0, 0), (0, 0), (1, 1), "IOHW")
>>> [int(d) for d in y.shape]
[1, 4, 4, 1]
"""

from __future__ import annotations

import tvm
from tvm import te, tirx

__all__ = ["conv2d_transpose_nhwc", "legalize", "output_size"]

_OP = "relax.nn.conv2d_transpose"


def output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                output_padding: int) -> int:
    """Output extent of a transposed convolution along one axis (Relax's definition).

    >>> output_size(6, 3, 2, 0, 1, 1, 0)
    12
    """
    return (size - 1) * stride - pad_begin - pad_end + dilation * (kernel - 1) + output_padding + 1


def conv2d_transpose_nhwc(x, w, strides, padding, output_padding, dilation, kernel_layout: str,
                          out_dtype: str | None = None, acc_dtype: str | None = None):
    """The TE compute of an NHWC transposed convolution (``padding``: top, left, bottom, right), weights in
    ``kernel_layout`` (a permutation of ``I``, ``O``, ``H``, ``W``)."""
    n_, h_, w_, c_ = (int(d) for d in x.shape)
    dims = dict(zip(kernel_layout, (int(d) for d in w.shape)))
    kh_, kw_, oc_ = dims["H"], dims["W"], dims["O"]
    if dims["I"] != c_:
        raise ValueError(f"conv2d_transpose: weights for {dims['I']} input channels, input has {c_}")
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh_ = output_size(h_, kh_, sh, pt, pb, dh, output_padding[0])
    ow_ = output_size(w_, kw_, sw, pl, pr, dw, output_padding[1])
    out_dtype = out_dtype or x.dtype
    acc_dtype = acc_dtype or out_dtype
    rh = te.reduce_axis((0, kh_), "rh")
    rw = te.reduce_axis((0, kw_), "rw")
    rc = te.reduce_axis((0, c_), "rc")

    def weight(i, o, kh, kw):
        return w[tuple({"I": i, "O": o, "H": kh, "W": kw}[a] for a in kernel_layout)]

    def body(n, oh, ow, o):
        th = oh + pt - rh * dh
        tw = ow + pl - rw * dw
        ih, iw = tirx.floordiv(th, sh), tirx.floordiv(tw, sw)
        inside = tirx.all(th >= 0, tw >= 0, tirx.floormod(th, sh) == 0, tirx.floormod(tw, sw) == 0,
                          ih < h_, iw < w_)
        xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), rc]
        prod = xv.astype(acc_dtype) * weight(rc, o, rh, rw).astype(acc_dtype)
        return te.sum(tirx.if_then_else(inside, prod, tirx.const(0, acc_dtype)), axis=[rh, rw, rc])

    return te.compute((n_, oh_, ow_, oc_), body, name="conv2d_transpose_nhwc")


def _tvm_legalize():
    return tvm.ir.Op.get(_OP).get_attr("FLegalize")


_TVM = _tvm_legalize()


def legalize(bb, call):
    """TVM's ``FLegalize`` for ``relax.nn.conv2d_transpose``: NHWC (in and out, one group) here, the rest
    TVM's."""
    a = call.attrs
    layout = str(a.kernel_layout)
    if str(a.data_layout) != "NHWC" or str(a.out_layout) != "NHWC" or int(a.groups) != 1 or \
            sorted(layout) != sorted("IOHW"):
        return _TVM(bb, call) if _TVM is not None else call
    strides = [int(s) for s in a.strides]
    padding = [int(p) for p in a.padding]
    output_padding = [int(p) for p in a.output_padding]
    dilation = [int(d) for d in a.dilation]
    out_dtype = str(call.ty.dtype)

    def compute(x, w):
        return conv2d_transpose_nhwc(x, w, strides, padding, output_padding, dilation, layout, out_dtype)

    return bb.call_te(compute, call.args[0], call.args[1], primfunc_name_hint="conv2d_transpose_nhwc")


if _TVM is not legalize:
    tvm.ir.register_op_attr(_OP, "FLegalize", legalize, level=11)
