"""``ConvolutionLayout``: run 2-D convolutions channels-last (NHWC) so they can be computed in place.

A channels-first (NCHW) convolution writes output channel ``k`` for every pixel
before channel ``k + 1``, and every channel plane reads *all* input channels: a
1x1 expansion or projection can overwrite at most one input plane. Channels
last, each output pixel is finished before the next one starts and only reads
input pixels around it, so the output can trail the input through memory
(:func:`~tvm_memsched.relax.analysis.access_trace.overlap_shift` finds how closely) and
an expansion's input, or a depthwise convolution's, nearly vanishes from the
peak. The pass is TVM's ``ConvertLayout`` for ``relax.nn.conv2d`` (data NHWC,
weights HWIO; layout transposes only where the layout changes). Models that
already are NHWC (TFLite imports) are left as they are; a module TVM cannot
convert is returned unchanged with a warning.

TVM's NHWC kernels sum over (kernel row, kernel column, input channel), its
NCHW kernels over (input channel, row, column): float results would differ in
the last bits. :class:`ChannelsFirstReduction` (after fusion, before
``ShrinkWorkspace``) reorders the loops of the NHWC convolution kernels to
(input channel, row, column, output channel): every output element is the same
float sum as in TVM's default (NCHW) build, bit-identical outputs, and with the
output channels innermost and the weights HWIO the loads are contiguous and the
kernels vectorise (2-6x faster than TVM's NCHW kernels on the zoo's convolutions,
the same speed on depthwise ones).

Example
-------
>>> ConvolutionLayout().info.name, ChannelsFirstReduction().info.name
('ConvolutionLayout', 'ChannelsFirstReduction')
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax, s_tir, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.workspace import walk_stmts
from ..ir import static_shape
from ..schedule import Schedule

__all__ = ["ConvolutionLayout", "ChannelsFirstReduction", "convolutions_to", "channels_first_reduction", "LAYOUTS"]

#: module attribute ConvolutionLayout sets when it turned NCHW convolutions into NHWC ones
CONVERTED_ATTR = "tvm_memsched.nhwc_from_nchw"
#: TVM's names of the NHWC convolution blocks (topi) whose reduction is (ry, rx, rc)
NHWC_BLOCKS = ("conv2d_nhwc", "group_conv2d_nhwc", "depthwise_conv2d_nhwc")

log = logging.getLogger(__name__)

#: with ``boundary_only`` (layout "auto"), networks with more convolutions keep their layout: TVM's
#: ConvertLayout grows faster than quadratically with the function's size (measured: 1,000 convolutions
#: 4.3 s, 2,000 21 s; 6,700 would take minutes), more than the layout can win back in a compile
MAX_AUTO_CONVOLUTIONS = 1500

#: with ``boundary_only``, transposes inside the network are accepted up to this many per converted
#: convolution (and only when the estimated peak does not grow): MobileViT-xxs's attention blocks add 6 for 35
#: convolutions (0.17; NHWC: the same 5.18 MB plan and 0.69x TVM's run time against 1.14x kept NCHW), a
#: ShuffleNet channel shuffle 11-30 for 20 (0.55-1.5; NHWC plans 1.5x more there)
MAX_INTERIOR_TRANSFORMS = 0.25

#: with ``boundary_only``, the conversion is kept unless the converted network's estimated peak (in reverse
#: post-order, with the in-place overlaps) is more than this fraction above the model's own: channels-last convolutions
#: overlap their input, so they usually lower it (DenseNet-121 at 224: 6.42 against 7.23 MB), but not always
#: (a DenseNet at 64x64 from ONNX: 50,744 against 40,960 B, planned 50,752 against 39,936 B)
ESTIMATE_MARGIN = 0.05
#: the scheduler's time for each estimate (a good order, not a proven one, is what the comparison needs)
ESTIMATE_SECONDS = 0.5

#: data layout -> kernel layout ConvertLayout is asked for
LAYOUTS = {"NHWC": "HWIO", "NCHW": "OIHW"}


def _conv_layouts(mod) -> list[str]:
    found = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d":
            found.append(str(e.attrs.data_layout))

    for _, f in mod.functions_items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
    return found


_TRANSFORMS = ("relax.permute_dims", "relax.layout_transform")


@mutator
class _ClipRewriter(PyExprMutator):
    """``clip(x, lo, hi)`` -> ``maximum(minimum(x, hi), lo)``: what TVM's clip kernel computes, element for
    element, with operators ConvertLayout knows (it has no layout rule for ``clip`` and would transpose
    around every ReLU6)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.clip" and len(call.args) == 3:
            x, lo, hi = call.args
            dtype = str(x.ty.dtype) if isinstance(getattr(x, "ty", None), relax.TensorType) else None
            if dtype and all(isinstance(b, (tirx.IntImm, tirx.FloatImm)) for b in (lo, hi)):
                lo_c = relax.const(float(lo.value), dtype)
                hi_c = relax.const(float(hi.value), dtype)
                return relax.op.maximum(relax.op.minimum(x, hi_c), lo_c)
        return call


@mutator
class _ConstantTransposes(PyExprMutator):
    """``permute_dims`` and ``reshape`` of a constant (the weights ConvertLayout re-lays; a convolution bias an
    importer reshapes to ``(1, C, 1, 1)``, as TVM's ONNX frontend does) as the constant they compute, by numpy:
    ``FoldConstant`` would compile and run a kernel for each. Without it a reshaped bias counts as a layout
    change inside the network (ONNX DenseNet-121 stayed channels-first, 1.28x the plan of its .pt2)."""

    def _constant(self, e):
        if isinstance(e, tvm.ir.Constant):
            return e
        if isinstance(e, relax.Var):
            bound = self.lookup_binding(e)
            if isinstance(bound, tvm.ir.Constant):
                return bound
        return None

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in ("relax.permute_dims", "relax.reshape")):
            return call
        c = self._constant(call.args[0])
        if c is None:
            return call
        import numpy as np

        arr = c.value.numpy()
        if call.op.name == "relax.reshape":
            shape = static_shape(call.ty)
            return relax.const(np.ascontiguousarray(arr.reshape(shape)), str(arr.dtype)) \
                if shape is not None and int(np.prod(shape)) == arr.size else call
        axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None else None
        return relax.const(np.ascontiguousarray(np.transpose(arr, axes)), str(arr.dtype))


def _fold_constant_transposes(mod):
    new = mod.clone()
    for gv, f in mod.functions_items():
        if isinstance(f, relax.Function):
            new[gv] = _ConstantTransposes().visit_expr(f)
    return new


def _clip_as_min_max(mod):
    new = mod.clone()
    for gv, f in mod.functions_items():
        if isinstance(f, relax.Function):
            new[gv] = _ClipRewriter(mod).visit_expr(f)
    return new


def _transforms(mod) -> int:
    """Layout transforms (transposes) of activations in ``mod``'s Relax functions (a weight's is a constant)."""
    n = [0]

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name in _TRANSFORMS \
                and not isinstance(e.args[0], tvm.ir.Constant):
            n[0] += 1

    for _, f in mod.functions_items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
    return n[0]


def _boundaries(mod) -> int:
    return sum(len(f.params) + 1 for _, f in mod.functions_items() if isinstance(f, relax.Function))


def _result_copy_bytes(mod) -> int:
    """The largest transpose producing a function's result: both layouts of the result are alive there."""
    from ..ir import static_nbytes

    worst = 0
    for _, f in mod.functions_items():
        if not isinstance(f, relax.Function) or not isinstance(f.body, relax.SeqExpr):
            continue
        values = {b.var: b.value for blk in f.body.blocks for b in blk.bindings}
        ret = f.body.body
        todo = list(ret.fields) if isinstance(ret, relax.Tuple) else [ret]
        while todo:
            v = values.get(todo.pop())
            if isinstance(v, relax.Var):
                todo.append(v)
            elif isinstance(v, relax.Tuple):
                todo.extend(v.fields)
            elif isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name in _TRANSFORMS:
                worst = max(worst, (static_nbytes(v.args[0].ty) or 0) + (static_nbytes(v.ty) or 0))
    return worst


def _peak_estimate(mod, method: str = "auto") -> int:
    from ..analysis.estimate import estimated_peak

    try:
        return estimated_peak(mod, time_limit=ESTIMATE_SECONDS, method=method)
    except Exception:  # noqa: BLE001 - no estimate: keep the model's layout
        return 0


def convolutions_to(mod, layout: str = "NHWC", *, boundary_only: bool = False) -> tuple["tvm.IRModule", int]:
    """``(module, convolutions converted)`` with every ``relax.nn.conv2d`` in data layout ``layout``.

    ``boundary_only``: keep the conversion only when it adds no more layout transforms than the
    functions have boundaries (inputs and results), or a few more (:data:`MAX_INTERIOR_TRANSFORMS` per
    convolution) that do not raise the estimated peak; operators without a layout rule, such as
    ShuffleNet's channel shuffle by reshape and transpose, or the crops of a patch-tiled stage, get a
    transpose before and after, and those copies cost more than channels-last overlaps save.
    Nor when the converted network's estimated peak exceeds the model's own (dead code removed) by more
    than :data:`ESTIMATE_MARGIN`, or at all when transposes land inside or the result is transposed back
    (both layouts of it alive together: in a small network whose result is its largest tensor, that copy
    is the peak). Nor above :data:`MAX_AUTO_CONVOLUTIONS`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown convolution layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    n = sum(1 for x in _conv_layouts(mod) if x != layout)
    if not n:
        return mod, 0
    if boundary_only and n > MAX_AUTO_CONVOLUTIONS:
        log.info("ConvolutionLayout: %d convolutions, more than %d: layout kept (TVM's ConvertLayout is "
                 "superlinear in the function's size)", n, MAX_AUTO_CONVOLUTIONS)
        return mod, 0
    try:
        new = relax.transform.ConvertLayout({"relax.nn.conv2d": [layout, LAYOUTS[layout]]})(_clip_as_min_max(mod))
        new = relax.transform.DeadCodeElimination()(_fold_constant_transposes(new))
        if boundary_only:
            interior = _transforms(new) - _transforms(mod) - _boundaries(mod)
            if interior > MAX_INTERIOR_TRANSFORMS * n:
                log.info("ConvolutionLayout: %s would add %d transposes inside the network; layout kept", layout,
                         interior)
                return mod, 0
            strict = interior > 0 or _result_copy_bytes(new)
            method = "auto" if strict else "rpo"      # the screen: a reverse post-order costs little
            est_new = _peak_estimate(new, method)
            est_old = _peak_estimate(relax.transform.DeadCodeElimination()(mod), method)
            if est_new > (1 if strict else 1 + ESTIMATE_MARGIN) * est_old:
                log.info("ConvolutionLayout: %s would raise the estimated peak (%d B against %d B); layout kept",
                         layout, est_new, est_old)
                return mod, 0
        if layout == "NHWC":                       # ChannelsFirstReduction restores the NCHW summation order
            new = new.with_attr(CONVERTED_ATTR, True)
    except Exception as e:  # noqa: BLE001 - TVM's own checks: keep the module as imported
        log.warning("ConvolutionLayout: %s kept as imported (%s)", layout, str(e).strip().splitlines()[-1:])
        return mod, 0
    return new, n


@tvm.transform.module_pass(opt_level=0, name="ConvolutionLayout")
class ConvolutionLayout:
    """Convert every ``relax.nn.conv2d`` to data layout ``layout`` (see the module docstring).

    Parameters
    ----------
    layout : {"NHWC", "NCHW", "NHWC?", "NCHW?"}
        The data layout; weights follow (HWIO / OIHW). With ``?``: only when no layout transforms
        land inside the network (see :func:`convolutions_to`).

    ``.converted`` holds how many convolutions the last run converted.
    """

    def __init__(self, layout: str = "NHWC"):
        self.boundary_only = layout.endswith("?")
        layout = layout.rstrip("?")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown convolution layout {layout!r}; use one of {', '.join(LAYOUTS)}")
        self.layout = layout
        self.converted = 0

    def transform_module(self, mod, ctx):
        new, self.converted = convolutions_to(mod, self.layout, boundary_only=self.boundary_only)
        return new


def _reorder_block(func, name: str):
    """``func`` with the loops of block ``name`` turned from (..., f, ry, rx, rc), TVM's NHWC order with the
    output channel ``f`` innermost of the spatial loops, into (..., rc, ry, rx, f): every output element
    summed in NCHW order, and the output channels innermost (with HWIO weights, loads contiguous in ``f``
    that vectorise). None when the loops are not exactly those."""
    sch = Schedule(func)
    blk = sch.get_sblock(name)
    loops = list(sch.get_loops(blk))
    realize = [None]
    walk_stmts(sch.mod["main"].body, lambda x: realize.__setitem__(0, x)
               if isinstance(x, s_tir.SBlockRealize) and x.block.name_hint == name else None)
    rz = realize[0]
    if rz is None or len(loops) < 4:
        return None
    pairs = list(zip(rz.block.iter_vars, rz.iter_values))
    red = [val for iv, val in pairs if int(iv.iter_type) == 2]  # CommReduce
    spatial = [val for iv, val in pairs if int(iv.iter_type) == 0]
    inner = [sch.get(lp).loop_var for lp in loops[-4:]]
    if len(red) != 3 or not spatial or any(not (isinstance(v, tvm.ir.Var) and v.same_as(lv))
                                           for v, lv in zip([spatial[-1]] + red, inner)):
        return None
    ff, ry, rx, rc = loops[-4:]
    sch.reorder(rc, ry, rx, ff)
    return sch.mod["main"]


def channels_first_reduction(mod) -> tuple["tvm.IRModule", list[str]]:
    """``(module, kernels changed)``: NHWC convolution reductions reordered to TVM's NCHW order (rc, ry, rx).

    Only in a module whose convolutions :func:`convolutions_to` converted from NCHW (a model written
    NHWC keeps TVM's NHWC order, which its default build uses too)."""
    attrs = mod.attrs
    if attrs is None or CONVERTED_ATTR not in attrs:
        return mod, []
    new = mod
    changed = []
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        f = _channels_first(func)
        if f is not func:
            if new is mod:
                new = mod.clone()
            new[gv] = f
            changed.append(gv.name_hint)
    return new, changed


def _channels_first(func):
    """``func`` with each of its NHWC convolution blocks reduced in (rc, ry, rx) order (``func`` itself when
    none can be)."""
    names = []
    walk_stmts(func.body, lambda s: names.append(s.name_hint)
               if isinstance(s, s_tir.SBlock) and s.name_hint.startswith(NHWC_BLOCKS) else None)
    f = func
    for name in names:
        try:
            g = _reorder_block(f.with_attr("global_symbol", "main"), name)
        except Exception:  # noqa: BLE001 - a kernel the schedule cannot reorder keeps its order
            g = None
        if g is not None:
            f = g.with_attrs(func.attrs) if func.attrs is not None else g
    return f


@tvm.transform.module_pass(opt_level=0, name="ChannelsFirstReduction")
class ChannelsFirstReduction:
    """Reorder the reduction of TVM's NHWC convolution kernels to its NCHW order (see the module docstring).

    Runs after ``FuseTIR``, before ``ShrinkWorkspace``; ``.changed`` lists the kernels of the last run.
    """

    def __init__(self):
        self.changed: list[str] = []

    def transform_module(self, mod, ctx):
        new, self.changed = channels_first_reduction(mod)
        return new
