"""``PatchTiling``: compute a Relax model's first stage patch by patch (MCUNetV2-style), an exact rewrite.

The first blocks of MobileNet-like models hold the largest activations, and no
order or plan helps while a whole early feature map must exist at once. This
pass splits a prefix *stage* of the ``main`` dataflow block into an ``n x m``
grid of patches of its output tensor ``T``: each patch is computed from its
window of the model input (receptive field and halo,
:func:`~tvm_memsched.core.tiling.input_range`), so only one patch's
intermediates need to be alive; ``concat`` along W, then H, rebuilds ``T`` for
its readers.

**The stage** (:func:`split_points`): every binding ``T`` depends on reads only
the function's single 4-D input, constants and other stage values, and is one
of: ``nn.conv2d`` (any stride, dilation, padding, groups; NCHW or NHWC),
``nn.max_pool2d`` / ``nn.avg_pool2d`` (no ceil mode), ``nn.batch_norm`` and
its ``[0]``, element-wise unary operators (relu, clip, sigmoid, silu, ...)
and element-wise binary operators whose other operand is a stage value of the
same shape or a constant constant along H and W (biases, per-channel scales).
Quantized (dequantize/quantize) stages are not tiled here: the integer lowering
must see each operator whole; int8 ``.tflite`` models are tiled in builtin
operators instead (:mod:`tvm_memsched.tflite.tiling`, ``--tile`` on a .tflite).
No stage value but ``T`` may be read after the stage.

**The rewrite** (:func:`tile_function`): regions are propagated backwards
(bounding boxes over a value's readers); each patch crops its inputs with
``strided_slice`` and runs the same operator with the padding it crosses at a
true border as the operator's own (asymmetric) padding, so every output
element is the same arithmetic over the same inputs: outputs identical to the
untiled model. Operators are emitted layer by layer; the patch-by-patch order
is the scheduler's job (``MemoryAwareReorder``), not the rewrite's.

**Choosing where and how much** (:func:`search_tiling`): split points in program
order times grids; a candidate within the budget of extra multiply-accumulates
(default 15%) is rewritten and scored by our scheduler's peak, counting the
overlaps in-place execution will find (element-wise same index, channels-last
window lags); a grid over the
budget is not tried at deeper split points (their halos only grow). Every
candidate considered is reported.

Example
-------
>>> from tvm_memsched.relax.testing import conv_stack_module
>>> mod = conv_stack_module(layout="NCHW")
>>> res = search_tiling(mod)
>>> res.chosen is not None and res.candidates[0].grid is not None
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import tvm
from tvm import relax

from ...core.errors import UnsupportedError
from ...core.tiling import DEFAULT_BUDGET, DEFAULT_GRIDS, TilingCandidate, TilingResult, input_range, patch_ranges
from ..analysis.estimate import estimated_peak
from ..ir import expr_shape as _shape
from ..ir import var_occurrences as _vars_in
from ..ir import model_macs as ir_model_macs

__all__ = ["split_points", "tile_function", "tile_module", "search_tiling", "PatchTiling"]

_WINDOW = {"relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
_UNARY = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu",
          "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.negative", "relax.abs", "relax.astype",
          "relax.nn.batch_norm", "relax.exp", "relax.sqrt", "relax.rsqrt", "relax.square", "relax.erf"}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
           "relax.power", "relax.nn.prelu"}
_AXES = {"NCHW": (2, 3), "NHWC": (1, 2)}


def _op(value) -> str | None:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    if isinstance(value, relax.TupleGetItem):
        return "tuple_get_item"
    return None


@dataclass
class _Node:
    var: object
    value: object
    kind: str            # "window", "unary", "binary", "item"
    inputs: list         # stage vars read (the patch-tiled operands)
    layout: str


class _Stage:
    """The tileable bindings of ``main``'s dataflow block, from its 4-D input."""

    def __init__(self, func):
        if len(func.body.blocks) != 1 or not isinstance(func.body.blocks[0], relax.DataflowBlock):
            raise UnsupportedError("patch tiling needs a main function with exactly one dataflow block")
        self.func = func
        self.block = func.body.blocks[0]
        ins = [p for p in func.params if _shape(p) is not None and len(_shape(p)) == 4]
        if len(ins) != 1:
            raise UnsupportedError("patch tiling needs a single 4-D model input")
        self.x = ins[0]
        self.nodes: dict = {}                 # var -> _Node (stage bindings, in order)
        self.order: list = []
        self.layout: str | None = None
        for b in self.block.bindings:         # the stage's layout: its first window operator's
            name = _op(b.value)
            if name in _WINDOW:
                a = b.value.attrs
                self.layout = str(a.data_layout if name == "relax.nn.conv2d" else a.layout)
                break
        stage = {self.x}
        for b in self.block.bindings:
            node = self._node(b.var, b.value, stage)
            if node is not None:
                self.nodes[b.var] = node
                self.order.append(b.var)
                stage.add(b.var)
        self.users: dict = {}                  # var -> bindings reading it
        for b in self.block.bindings:
            for v in _vars_in(b.value):
                self.users.setdefault(v, []).append(b.var)
        for v in _vars_in(func.body.body):
            self.users.setdefault(v, []).append(None)

    def _node(self, var, value, stage) -> _Node | None:
        name = _op(value)
        if name is None:
            return None
        if name == "tuple_get_item":
            src = value.tuple_value
            if src in stage and self.nodes.get(src) is not None and value.index == 0:
                return _Node(var, value, "item", [src], self.nodes[src].layout)
            return None
        args = list(value.args)
        tensors = [a for a in args if isinstance(a, relax.Var)]
        staged = [a for a in tensors if a in stage]
        if not staged or any(isinstance(a, relax.Var) and a not in stage and _depends_on_x(a, self) for a in tensors):
            return None
        first = args[0]
        if name in _WINDOW:
            if first not in stage or len(staged) != 1:
                return None
            a = value.attrs
            layout = str(a.data_layout if name == "relax.nn.conv2d" else a.layout)
            out_layout = str(a.out_layout)
            if layout not in _AXES or out_layout != layout or (name != "relax.nn.conv2d" and bool(a.ceil_mode)):
                return None
            return self._check_layout(_Node(var, value, "window", [first], layout))
        if name == "relax.nn.batch_norm":      # inference: a per-channel affine map, as a tuple
            if first not in stage or len(staged) != 1 or self._inherit(first) is None \
                    or int(value.attrs.axis) % 4 != (1 if self._inherit(first) == "NCHW" else 3) \
                    or value.attrs.training:
                return None
            return self._check_layout(_Node(var, value, "unary", [first], self._inherit(first)))
        out_shape = _shape(var)
        if out_shape is None or len(out_shape) != 4:
            return None
        if name in _UNARY:
            if first not in stage or len(staged) != 1:
                return None
            return self._check_layout(_Node(var, value, "unary", [first], self._inherit(first)))
        if name in _BINARY:
            layout = self._inherit(staged[0])
            if layout is None:
                return None
            for a in args:
                if isinstance(a, relax.Var) and a in stage:
                    if _shape(a) != out_shape:
                        return None
                elif not self._constant_over_space(a, layout):
                    return None
            return self._check_layout(_Node(var, value, "binary", staged, layout))
        return None

    def _inherit(self, v) -> str | None:
        return self.nodes[v].layout if v in self.nodes else self.layout

    def _check_layout(self, node: _Node) -> _Node | None:
        return node if node.layout is not None and node.layout == self.layout else None

    @staticmethod
    def _constant_over_space(a, layout: str) -> bool:
        """A value that does not vary along H and W (broadcast): the same for every patch."""
        if not isinstance(getattr(a, "ty", None), relax.TensorType) and not isinstance(a, relax.Var):
            return True                               # a scalar (clip bounds, PrimValues, shapes)
        shape = _shape(a)
        if shape is None:
            return False
        padded = [1] * (4 - len(shape)) + shape if len(shape) <= 4 else None
        return padded is not None and all(padded[ax] == 1 for ax in _AXES[layout])


def _depends_on_x(var, st: _Stage) -> bool:
    return var.same_as(st.x) or var in st.nodes


def _ancestors(st: _Stage, t) -> list:
    """The stage bindings ``t`` depends on (``t`` included), in program order."""
    need, todo = set(), [t]
    while todo:
        v = todo.pop()
        if v in need or v not in st.nodes:
            continue
        need.add(v)
        todo.extend(st.nodes[v].inputs)
    return [v for v in st.order if v in need]


def _is_split(st: _Stage, t) -> bool:
    anc = set(_ancestors(st, t))
    if _shape(t) is None or len(_shape(t)) != 4:
        return False
    if not any(st.nodes[v].kind == "window" for v in anc):
        return False
    return all(u in anc for v in anc if not v.same_as(t) for u in st.users.get(v, []))


def _continued(st: _Stage, name: str) -> bool:
    """Whether the value ``name`` is read only by one element-wise stage op (batch norm, activation)."""
    v = next(x for x in st.order if x.name == name)
    users = st.users.get(v, [])
    return len(users) == 1 and users[0] in st.nodes and st.nodes[users[0]].kind in ("unary", "item")


def split_points(func) -> list[str]:
    """Names of the values of ``func`` (a Relax ``main``) a patch-tiled stage may end at, in program order."""
    st = _Stage(func)
    return [v.name for v in st.order if _is_split(st, v)]


def _required(node: _Node, r, in_shape, axes):
    """(input region, per-axis (zero before, zero after)) a window op needs for output region ``r``."""
    a = node.value.attrs
    if node.value.op.name == "relax.nn.conv2d":
        w = _shape(node.value.args[1])
        kl = str(a.kernel_layout)
        kernel = (w[kl.index("H")], w[kl.index("W")])
    else:
        kernel = tuple(int(k) for k in a.pool_size)
    stride = tuple(int(s) for s in a.strides)
    dil = tuple(int(d) for d in a.dilation)
    pad = [int(p) for p in a.padding]                 # top, left, bottom, right
    out, zeros = [], []
    for k, (lo_o, hi_o) in enumerate(((r[0], r[1]), (r[2], r[3]))):
        lo, hi, zb, za = input_range(lo_o, hi_o, stride=stride[k], kernel=kernel[k], dilation=dil[k],
                                     pad_before=pad[k], size=in_shape[axes[k]])
        if hi <= lo:
            raise UnsupportedError(f"a patch of '{node.var.name}' lies entirely in its padding; use fewer patches")
        out.append((lo, hi))
        zeros.append((zb, za))
    return (out[0][0], out[0][1], out[1][0], out[1][1]), zeros


def _macs(node: _Node, out_shape) -> int:
    if node.kind != "window" or node.value.op.name != "relax.nn.conv2d":
        return 0
    w = _shape(node.value.args[1])
    a = node.value.attrs
    kl = str(a.kernel_layout)
    return math.prod(out_shape) * w[kl.index("I")] * w[kl.index("H")] * w[kl.index("W")]


def _with_padding(call, zeros):
    """``call`` (a window op) on a patch: its padding is the true-border zeros this patch crosses."""
    (zt, zb), (zl, zr) = zeros
    a = call.attrs
    pad = (zt, zl, zb, zr)
    if call.op.name == "relax.nn.conv2d":
        return relax.op.nn.conv2d(call.args[0], call.args[1], a.strides, pad, a.dilation, int(a.groups),
                                  str(a.data_layout), str(a.kernel_layout), str(a.out_layout),
                                  None if str(a.out_dtype) in ("", "void", "None") else str(a.out_dtype))
    fn = relax.op.nn.max_pool2d if call.op.name == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
    return fn(call.args[0], a.pool_size, a.strides, pad, a.dilation, bool(a.ceil_mode),
              bool(a.count_include_pad), str(a.layout), str(a.out_layout))


class _Emitter:
    def __init__(self):
        self.bb = relax.BlockBuilder()
        self.bindings: list = []

    def emit(self, expr, name: str):
        expr = self.bb.normalize(expr)
        var = relax.DataflowVar(name, expr.ty)
        self.bindings.append(relax.VarBinding(var, expr))
        return var

    def crop(self, src, want, have, axes, name):
        """``src`` (holding region ``have``) cut to region ``want``."""
        if want == have:
            return src
        begin = [want[0] - have[0], want[2] - have[2]]
        end = [want[1] - have[0], want[3] - have[2]]
        return self.emit(relax.op.strided_slice(src, list(axes), begin, end), name)


def _plan(st: _Stage, split: str, grid: tuple[int, int]):
    """``(T, stage, patches, regions per patch, stage MACs, tiled MACs)`` without building anything."""
    t = next((v for v in st.order if v.name == split), None)
    if t is None or not _is_split(st, t):
        raise UnsupportedError(f"'{split}' is not a split point for patch tiling: it must depend only on "
                               "spatially local operators of the single 4-D input, and be the only value of "
                               "that stage read later")
    n_rows, n_cols = grid
    if n_rows < 1 or n_cols < 1:
        raise UnsupportedError(f"tile grid must be at least 1x1, got {n_rows}x{n_cols}")
    axes = _AXES[st.layout]
    stage = _ancestors(st, t)
    ts = _shape(t)
    patches = [(ry, rx) for ry in patch_ranges(ts[axes[0]], n_rows) for rx in patch_ranges(ts[axes[1]], n_cols)]
    need = []
    for (y0, y1), (x0, x1) in patches:
        reg = {t: (y0, y1, x0, x1)}
        for v in reversed(stage):
            node = st.nodes[v]
            r = reg.get(v)
            if r is None:
                continue
            for i in node.inputs:
                req = _required(node, r, _shape(i), axes)[0] if node.kind == "window" else r
                old = reg.get(i)
                reg[i] = req if old is None else (min(old[0], req[0]), max(old[1], req[1]),
                                                  min(old[2], req[2]), max(old[3], req[3]))
        need.append(reg)
    stage_macs = sum(_macs(st.nodes[v], _shape(v)) for v in stage)
    tiled_macs = 0
    for reg in need:
        for v in stage:
            r = reg.get(v)
            if r is not None and st.nodes[v].kind == "window":
                shape = list(_shape(v))
                shape[axes[0]], shape[axes[1]] = r[1] - r[0], r[3] - r[2]
                tiled_macs += _macs(st.nodes[v], shape)
    return t, stage, patches, need, stage_macs, tiled_macs


def tile_function(func, split: str, grid: tuple[int, int]) -> tuple["relax.Function", dict]:
    """``func`` with the stage ending at value ``split`` computed in a ``grid`` of patches.

    Returns ``(new function, info)`` with ``stage_ops``, ``tiled_ops``,
    ``stage_macs`` and ``tiled_macs``. Raises UnsupportedError when ``split`` is
    not a split point or the grid is empty.
    """
    st = _Stage(func)
    t, stage, patches, need, stage_macs, tiled_macs = _plan(st, split, grid)
    n_rows, n_cols = grid
    axes = _AXES[st.layout]
    ts = _shape(t)
    xs = _shape(st.x)
    full = (0, xs[axes[0]], 0, xs[axes[1]])
    em = _Emitter()
    have = [{st.x: (st.x, full)} for _ in patches]
    for v in stage:
        node = st.nodes[v]
        for p, reg in enumerate(need):
            r = reg.get(v)
            if r is None:
                continue
            tag = f"{v.name}_p{p}"
            if node.kind == "item":
                src, _ = have[p][node.inputs[0]]
                have[p][v] = (em.emit(relax.TupleGetItem(src, node.value.index), tag), r)
                continue
            if node.kind == "window":
                i = node.inputs[0]
                src, got = have[p][i]
                want, zeros = _required(node, r, _shape(i), axes)
                crop = em.crop(src, want, got, axes, f"{tag}_in")
                call = _with_padding(node.value, zeros)
                out = em.emit(relax.Call(call.op, [crop] + list(node.value.args[1:]), call.attrs,
                                         call.ty_args), tag)
            else:
                args = []
                for k, a in enumerate(node.value.args):
                    if isinstance(a, relax.Var) and a in have[p]:
                        src, got = have[p][a]
                        args.append(em.crop(src, r, got, axes, f"{tag}_in{k}"))
                    else:
                        args.append(a)
                out = em.emit(relax.Call(node.value.op, args, node.value.attrs, node.value.ty_args), tag)
            have[p][v] = (out, r)
    # T again: each row of patches along W, then the rows along H
    k, bands = 0, []
    n_r = len(patch_ranges(ts[axes[0]], n_rows))
    n_c = len(patch_ranges(ts[axes[1]], n_cols))
    for ry in range(n_r):
        row = [have[k + c][t][0] for c in range(n_c)]
        k += n_c
        bands.append(row[0] if len(row) == 1 else em.emit(relax.op.concat(row, axis=axes[1]), f"{t.name}_row{ry}"))
    whole = bands[0] if len(bands) == 1 else em.bb.normalize(relax.op.concat(bands, axis=axes[0]))
    if isinstance(whole, relax.Var):
        whole = em.bb.normalize(relax.op.concat([whole], axis=axes[0]))
    em.bindings.append(relax.VarBinding(t, whole))       # T keeps its var: its readers are unchanged
    stage_set = set(stage)
    new_bindings = []
    for b in st.block.bindings:
        if b.var.same_as(t):
            new_bindings.extend(em.bindings)
        elif b.var not in stage_set:
            new_bindings.append(b)
    block = relax.DataflowBlock(new_bindings, st.block.span)
    body = relax.SeqExpr([block], func.body.body, func.body.span)
    new = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    n_tiled = len(em.bindings)
    return new, {"stage_ops": len(stage), "tiled_ops": n_tiled, "stage_macs": stage_macs, "tiled_macs": tiled_macs}


def tile_module(mod, split: str, grid: tuple[int, int]) -> tuple["tvm.IRModule", dict]:
    """``mod`` with ``main`` tiled by :func:`tile_function`."""
    new_func, info = tile_function(mod["main"], split, grid)
    new = mod.clone()
    new["main"] = new_func
    return relax.transform.Normalize()(new), info


def search_tiling(mod, *, budget: float = DEFAULT_BUDGET, grids=DEFAULT_GRIDS, split: str | None = None,
                  grid=None, time_limit: float = 2.0, progress=None) -> TilingResult:
    """Try split points x grids of ``mod["main"]``; the smallest scheduled peak within the MAC ``budget`` wins.

    ``split`` / ``grid`` fix one of them. ``res.buf`` is the tiled module (constants folded
    first, as TVM's pipeline does; None when no candidate beats the untiled model); every
    candidate is in ``res.candidates``.
    """
    mod = relax.transform.FoldConstant()(mod)     # weight transposes etc. are constants, not activations
    func = mod["main"]
    points = split_points(func)
    if split is not None:
        if split not in points:
            tile_function(func, split, (1, 1))           # raises the explanatory error
        points = [split]
    if not points:
        raise UnsupportedError("no split point for patch tiling (the model needs a single 4-D input followed "
                               "by spatially local operators)")
    model_macs = ir_model_macs(func)
    base = estimated_peak(mod, time_limit)
    res = TilingResult(None, None, [], base, base, model_macs)
    best = None
    st = _Stage(func)
    if split is None:               # a value only an element-wise op reads: ending after that op is as good
        points = [t for t in points if not _continued(st, t)] or points
    over_at: dict = {}                    # grid -> split point where it first exceeded the budget
    for t in points:
        for gr in ([tuple(grid)] if grid is not None else [tuple(g) for g in grids]):
            if gr in over_at and split is None:
                continue                  # deeper stages only add halo work: over budget there too
            t0 = time.perf_counter()
            try:
                _, stage, _, _, stage_macs, tiled_macs = _plan(st, t, gr)
            except UnsupportedError:
                continue
            extra = tiled_macs - stage_macs
            over = extra / model_macs if model_macs else 0.0
            cand = TilingCandidate(t, gr, len(stage), 0, extra, over, None, None, over <= budget)
            if cand.within_budget:
                new, info = tile_module(mod, t, gr)
                cand.tiled_ops = info["tiled_ops"]
                cand.peak_bytes = cand.plan_bytes = estimated_peak(new, time_limit)
                if best is None or cand.peak_bytes < best[0].peak_bytes:
                    best = (cand, new)
            else:
                over_at[gr] = t
            cand.seconds = round(time.perf_counter() - t0, 3)
            res.candidates.append(cand)
            if progress:
                progress(f"tile at {t} {gr[0]}x{gr[1]}: overhead {100 * over:.1f}%, peak "
                         f"{cand.peak_bytes if cand.peak_bytes is not None else '-'} B")
        if grid is None and split is None and len(over_at) == len(grids):
            break                         # every grid is over budget from here on
    if best is not None and best[0].peak_bytes < base:
        res.chosen, res.buf = best
    return res


@tvm.transform.module_pass(opt_level=0, name="PatchTiling")
class PatchTiling:
    """Patch-tile the first stage of ``main`` (see the module docstring); run on the imported operators.

    Parameters
    ----------
    budget : float
        Largest extra multiply-accumulates, as a fraction of the model's (default 0.15).
    split : str, optional
        The value the tiled stage ends at (default: searched).
    grid : (int, int), optional
        Patch rows x columns (default: searched).
    time_limit : float
        Seconds our scheduler may spend on each candidate's estimated peak (default 2).

    ``.result`` holds the last :class:`~tvm_memsched.core.tiling.TilingResult`;
    a model without a split point, or where no tiling lowers the peak, is left
    as it is.
    """

    def __init__(self, budget: float = DEFAULT_BUDGET, split: str | None = None, grid=None,
                 time_limit: float = 2.0):
        self.budget, self.split, self.grid, self.time_limit = budget, split, grid, time_limit
        self.result: TilingResult | None = None

    def transform_module(self, mod, ctx):
        if self.split is not None and self.grid is not None:
            new, info = tile_module(mod, self.split, tuple(self.grid))
            return new
        try:
            self.result = search_tiling(mod, budget=self.budget, split=self.split, grid=self.grid,
                                        time_limit=self.time_limit)
        except UnsupportedError:
            if self.split is not None:
                raise
            return mod
        return self.result.buf if self.result.buf is not None else mod
