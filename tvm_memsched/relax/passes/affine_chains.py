"""Per-channel affine chains in one spelling: the ``FoldAffineChains`` pass (operator level, before legalization).

Exporters spell a batch norm in inference in many ways: ``relax.nn.batch_norm``
(ONNX ``BatchNormalization``, ``torch.export``), a batch norm with scale 1 and
shift 0 followed by a ``multiply`` and an ``add`` (Caffe2), ``multiply`` +
``add`` of folded statistics, ``subtract`` mean / ``divide`` by ``sqrt(var +
eps)`` / ``multiply`` / ``add`` (Paddle, hand-written), on channels first or
last. TVM fuses each spelling into one element-wise kernel, but what that
kernel computes decides what the memory passes can do with it: a batch norm
takes a square root per element, a ``sqrt`` of a constant as well, so
:class:`~tvm_memsched.relax.passes.inline_producers.InlineProducers` cannot
compute a pre-activation batch norm inside the next convolution wherever a
cheap one would be; the same network then plans differently from each file.

A *chain* is a sequence of bindings, each the only use of the one before, of

* ``add`` / ``subtract`` / ``multiply`` / ``divide`` (``x / c``; ``c - x`` too)
  of the chain's tensor and a constant that varies along at most one axis and
  does not enlarge the tensor (a per-channel ``[1, C, 1, 1]`` or ``[C]``, or a
  scalar), the constant possibly computed from constants (``sqrt(var + eps)``,
  reshapes, broadcasts);
* ``relax.nn.batch_norm`` in inference (``training=False``) with constant
  statistics, only its normalised output used.

Every chain is rewritten in one of two forms (``mode``):

* ``"exact"`` (default) - every step as ``subtract`` / ``divide`` / ``multiply``
  / ``add`` of a plain constant: a batch norm becomes ``(x - mean) / std * gamma
  + beta`` with ``std = sqrt(var + eps)`` computed here, in the tensor's type, as
  TVM's batch norm kernel computes it per element (IEEE square root, sum and
  quotient are correctly rounded in numpy and in the kernel alike); constant
  expressions are evaluated the same way; multiplications and divisions by 1,
  additions and subtractions of 0 are dropped. Outputs are bit-identical (up to
  the sign of a zero: ``-0 + 0`` is ``+0``).
* ``"scale_shift"`` - the chain as one ``x * scale + shift`` (scale and shift
  composed in float64, rounded once; a step that is the identity dropped), and
  with ``into_conv`` a chain that follows a convolution (its only use) folded
  into the convolution's weights and a bias ``add``, as PyTorch's ONNX exporter
  folds a batch norm. Not bit-identical: each output element differs from the
  unfolded chain by rounding, a few units in the last place of ``|x * scale| +
  |shift|`` (of the sum over the convolution's terms when folded into it).

Chains already in the canonical form (plain constants, no identity step, and
for ``scale_shift`` at most one ``multiply`` then one ``add``, none after a
convolution with ``into_conv``) are left as they are; so is anything else:
a tensor used twice inside a chain ends it, a constant varying along two axes
or along another axis than the chain's, integer tensors, a batch norm in
training mode or with statistics that are not constants.

Example
-------
>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([1, 3, 4, 4], "float32"))
>>> stats = [relax.const(np.float32([1, 2, 3])) for _ in range(4)]
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         bn = bb.emit(relax.op.nn.batch_norm(x, *stats, axis=1, training=False))
...         y = bb.emit_output(relax.op.nn.relu(bb.emit(relax.TupleGetItem(bn, 0))))
...     gv = bb.emit_func_output(y)
>>> new, report = fold_affine_chains(bb.finalize())
>>> [(s.steps, s.form) for s in report]
[(['batch_norm'], ['subtract', 'divide', 'multiply', 'add'])]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax

from ..ir import static_shape, var_occurrences
from ..rewrite import replace_bindings
from .shrink_constants import constant_value, smallest_broadcast

__all__ = ["FoldAffineChains", "AffineChain", "fold_affine_chains", "MODES"]

#: the forms a chain is rewritten in (see the module docstring)
MODES = ("exact", "scale_shift")

_BINARY = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
           "relax.divide": "divide"}
#: element-wise operators evaluated on constants (correctly rounded in IEEE arithmetic: numpy = the kernel)
_CONSTANT_OPS = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
                 "relax.divide": np.divide, "relax.sqrt": np.sqrt, "relax.negative": np.negative}


@dataclass
class AffineChain:
    """One rewritten chain: its last variable, its steps as written, and the operators it became."""

    var: str
    steps: list
    form: list
    channels: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Step:
    """``kind`` of ``src`` with per-channel ``values`` (numpy, at the chain's rank); ``plain``: the
    operand was a constant as is."""

    var: object
    src: object
    kind: str                # add, subtract, rsubtract, multiply, divide, batch_norm
    values: tuple
    axis: int | None
    plain: bool = True


def _constant(expr, var2val, depth: int = 8):
    """``(value, plain)`` of a constant operand, or None: a constant, a reshape / broadcast / exact cast of
    one (``plain``: a :class:`tvm.ir.Constant` itself), or an element-wise IEEE operation of such."""
    if isinstance(expr, tvm.ir.Constant):
        value = constant_value(expr, var2val)
        return (value, True) if value is not None else None
    value = constant_value(expr, var2val)
    if value is not None:
        return value, False
    if depth == 0 or not isinstance(expr, relax.Var) or expr not in var2val:
        return None
    call = var2val[expr]
    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in _CONSTANT_OPS):
        return None
    args = [_constant(a, var2val, depth - 1) for a in call.args]
    dtype = str(getattr(expr.ty, "dtype", ""))
    if any(a is None for a in args) or not dtype.startswith("float"):
        return None
    with np.errstate(all="ignore"):
        out = _CONSTANT_OPS[call.op.name](*[np.asarray(a[0], dtype) for a in args]).astype(dtype)
    shape = static_shape(expr.ty)
    return (np.broadcast_to(out, shape) if shape is not None else out), False


def _per_channel(value, shape):
    """``(values at the tensor's rank, channel axis or None)`` when ``value`` broadcasts to ``shape`` without
    enlarging it and varies along at most one axis; else None."""
    if value.ndim > len(shape) or value.dtype.kind != "f":
        return None
    try:
        if list(np.broadcast_shapes(value.shape, tuple(shape))) != list(shape):
            return None
    except ValueError:
        return None
    small = smallest_broadcast(value.reshape((1,) * (len(shape) - value.ndim) + value.shape))
    varying = [a for a, n in enumerate(small.shape) if n > 1]
    if len(varying) > 1:
        return None
    return small, (varying[0] if varying else None)


def _tensor(expr):
    return isinstance(expr, relax.Var) and isinstance(expr.ty, relax.TensorType) \
        and str(expr.ty.dtype).startswith("float") and static_shape(expr.ty) is not None


def _binary_step(b, var2val):
    v = b.value
    kind = _BINARY.get(v.op.name) if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) else None
    if kind is None or len(v.args) != 2:
        return None
    lhs, rhs = v.args
    for src, other, flipped in ((lhs, rhs, False), (rhs, lhs, True)):
        if not _tensor(src) or _constant(src, var2val) is not None:
            continue
        if flipped and kind == "divide":
            return None                               # c / x is not affine in x
        c = _constant(other, var2val)
        if c is None or static_shape(b.var.ty) != static_shape(src.ty) or c[0].dtype != np.dtype(str(src.ty.dtype)):
            return None
        pc = _per_channel(c[0], static_shape(src.ty))
        if pc is None:
            return None
        step_kind = "rsubtract" if flipped and kind == "subtract" else kind
        return _Step(b.var, src, step_kind, (pc[0],), pc[1], c[1])
    return None


def _batch_norm_step(b, var2val, uses, getitems):
    """A ``TupleGetItem(batch_norm(...), 0)`` binding whose tuple's other items are unused."""
    v = b.value
    if not (isinstance(v, relax.TupleGetItem) and v.index == 0 and isinstance(v.tuple_value, relax.Var)):
        return None
    bn = var2val.get(v.tuple_value)
    if not (isinstance(bn, relax.Call) and isinstance(bn.op, tvm.ir.Op) and bn.op.name == "relax.nn.batch_norm"):
        return None
    x, a = bn.args[0], bn.attrs
    if bool(a.training) or not _tensor(x):
        return None
    others = getitems.get(v.tuple_value, [])
    if uses[v.tuple_value] != len(others) or any(uses[o] for o in others if not o.same_as(b.var)):
        return None
    shape = static_shape(x.ty)
    axis = int(a.axis) % len(shape)
    stats = []
    for arg in bn.args[1:]:
        c = _constant(arg, var2val)
        if c is None or c[0].size != shape[axis]:
            return None
        stats.append(c[0].astype(str(x.ty.dtype)).reshape([-1 if k == axis else 1 for k in range(len(shape))]))
    gamma, beta, mean, var = stats
    if not a.scale:
        gamma = np.ones_like(gamma)
    if not a.center:
        beta = np.zeros_like(beta)
    return _Step(b.var, x, "batch_norm", (gamma, beta, mean, var, np.asarray(a.epsilon, str(x.ty.dtype))), axis)


def _steps(func, block) -> tuple[dict, Counter]:
    """``{var: _Step}`` for the affine bindings of ``block``, and the use counts of ``func``'s variables."""
    var2val = relax.analysis.get_var2val(func)
    uses = Counter(var_occurrences(func.body))
    getitems: dict = {}
    for b in block.bindings:
        if isinstance(b.value, relax.TupleGetItem) and isinstance(b.value.tuple_value, relax.Var):
            getitems.setdefault(b.value.tuple_value, []).append(b.var)
    out = {}
    for b in block.bindings:
        if not isinstance(b, relax.VarBinding):
            continue
        step = _binary_step(b, var2val) or _batch_norm_step(b, var2val, uses, getitems)
        if step is not None:
            out[b.var] = step
    return out, uses


def _chains(block, steps: dict, uses: Counter) -> list:
    """Maximal chains (lists of steps in order): each step reads the one before, its only use, on one axis."""
    succ = {}
    for s in steps.values():
        prev = steps.get(s.src)
        if prev is not None and uses[prev.var] == 1 and (prev.axis is None or s.axis is None
                                                          or prev.axis == s.axis):
            succ[prev.var] = s
    heads = [s for s in steps.values() if not any(n is s for n in succ.values())]
    chains = []
    for head in heads:
        chain, axis = [head], head.axis
        while chain[-1].var in succ:
            nxt = succ[chain[-1].var]
            if axis is not None and nxt.axis is not None and nxt.axis != axis:
                break
            axis = axis if axis is not None else nxt.axis
            chain.append(nxt)
        chains.append(chain)
    return chains


def _identity(step) -> bool:
    (c,) = step.values if len(step.values) == 1 else (None,)
    if c is None:
        return False
    return bool(np.all(c == 1)) if step.kind in ("multiply", "divide") else \
        bool(np.all(c == 0)) and step.kind in ("add", "subtract")


def _exact_ops(chain) -> list:
    """``[(op, constant)]`` computing ``chain`` bit for bit, each constant plain."""
    ops = []
    for s in chain:
        if s.kind == "batch_norm":
            gamma, beta, mean, var, eps = s.values
            with np.errstate(all="ignore"):
                std = np.sqrt(var + eps).astype(var.dtype)
            ops += [("subtract", mean), ("divide", std), ("multiply", gamma), ("add", beta)]
        else:
            ops.append((s.kind, s.values[0]))
    return [(op, c) for op, c in ops if not (op in ("multiply", "divide") and np.all(c == 1)
                                              or op in ("add", "subtract") and np.all(c == 0))]


def _scale_shift(chain, dtype) -> tuple:
    """``(scale, shift)`` of the chain, composed in float64, at the chain's rank."""
    scale, shift = np.float64(1), np.float64(0)
    for s in chain:
        v = [np.asarray(a, np.float64) for a in s.values]
        if s.kind == "add":
            shift = shift + v[0]
        elif s.kind == "subtract":
            shift = shift - v[0]
        elif s.kind == "rsubtract":
            scale, shift = -scale, v[0] - shift
        elif s.kind == "multiply":
            scale, shift = scale * v[0], shift * v[0]
        elif s.kind == "divide":
            scale, shift = scale / v[0], shift / v[0]
        else:
            gamma, beta, mean, var, eps = v
            inv = gamma / np.sqrt(var + eps)
            scale, shift = scale * inv, (shift - mean) * inv + beta
    return np.asarray(scale).astype(dtype), np.asarray(shift).astype(dtype)


def _conv_before(chain, var2val, uses):
    """The ``conv2d`` call the chain's first step reads, when the chain is its only use, its weights are a
    constant and the chain's axis is its output channel axis; else None."""
    src = chain[0].src
    conv = var2val.get(src)
    if uses[src] != 1 or not (isinstance(conv, relax.Call) and isinstance(conv.op, tvm.ir.Op)
                              and conv.op.name == "relax.nn.conv2d"):
        return None
    w = _constant(conv.args[1], var2val)
    out_layout = str(conv.attrs.out_layout or conv.attrs.data_layout)
    axis = next((s.axis for s in chain if s.axis is not None), None)
    dtype = np.dtype(str(src.ty.dtype))
    if w is None or axis is None or out_layout.find("C") != axis or w[0].dtype != dtype \
            or getattr(conv.args[0].ty, "dtype", None) is None or np.dtype(str(conv.args[0].ty.dtype)) != dtype:
        return None                         # a mixed-precision convolution keeps its weights
    return conv, w[0]


def _rewrite(chain, mode: str, into_conv: bool, var2val, uses):
    """``(expr, form)`` replacing the chain's last binding, or None to keep it."""
    x = chain[0].src
    shape, dtype = static_shape(x.ty), str(x.ty.dtype)
    if mode == "exact":
        ops = _exact_ops(chain)
        if all(s.plain and s.kind != "batch_norm" and not _identity(s) for s in chain):
            return None
        expr = x
        for op, c in ops:
            const = relax.const(np.ascontiguousarray(c), dtype)
            expr = relax.op.subtract(const, expr) if op == "rsubtract" else getattr(relax.op, op)(expr, const)
        return expr, [op for op, _ in ops]
    scale, shift = _scale_shift(chain, dtype)
    full = [shape[k] if k == next((s.axis for s in chain if s.axis is not None), -1) else 1
            for k in range(len(shape))]
    scale, shift = smallest_broadcast(np.broadcast_to(scale, full)), smallest_broadcast(np.broadcast_to(shift, full))
    conv = _conv_before(chain, var2val, uses) if into_conv else None
    form = []
    if conv is not None:
        call, w = conv
        o = str(call.attrs.kernel_layout).index("O")
        w_scaled = (w.astype(np.float64) * np.asarray(scale, np.float64).reshape(
            [-1 if k == o else 1 for k in range(w.ndim)])).astype(dtype)
        expr = relax.Call(call.op, [call.args[0], relax.const(np.ascontiguousarray(w_scaled), dtype)],
                          call.attrs)
        form.append("conv2d")
    else:
        if [s.kind for s in chain] in (["multiply", "add"], ["multiply"], ["add"]) and all(s.plain for s in chain):
            return None
        expr = x
        if not np.all(scale == 1):
            expr = relax.op.multiply(expr, relax.const(np.ascontiguousarray(scale), dtype))
            form.append("multiply")
    if not np.all(shift == 0):
        expr = relax.op.add(expr, relax.const(np.ascontiguousarray(shift), dtype))
        form.append("add")
    if conv is not None and [s.kind for s in chain] == ["add"] and chain[0].plain:
        return None                                   # a convolution's bias as it is
    return expr, form


def fold_affine_chains(mod, mode: str = "exact", into_conv: bool = False):
    """Rewrite every per-channel affine chain of every Relax function (see the module docstring); returns
    ``(module, [AffineChain])``."""
    if mode not in MODES:
        raise ValueError(f"unknown affine chain form {mode!r}; use one of {', '.join(MODES)}")
    report, new_mod = [], mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        new_func = func
        for k, block in enumerate(func.body.blocks):
            if not isinstance(block, relax.DataflowBlock):
                continue
            block = new_func.body.blocks[k]
            steps, uses = _steps(new_func, block)
            var2val = relax.analysis.get_var2val(new_func)
            exprs, sites = {}, []
            for chain in _chains(block, steps, uses):
                found = _rewrite(chain, mode, into_conv, var2val, uses)
                if found is None:
                    continue
                last = chain[-1].var
                exprs[last] = found[0]
                shape = static_shape(last.ty)
                axis = next((s.axis for s in chain if s.axis is not None), None)
                sites.append(AffineChain(last.name, [s.kind for s in chain], found[1],
                                         shape[axis] if axis is not None else 1))
            if not exprs:
                continue
            replaced = replace_bindings(new_func, k, exprs)
            if replaced is None:        # a type would change: keep the block
                continue
            new_func, report = replaced, report + sites
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    return new_mod, report


@tvm.transform.module_pass(opt_level=0, name="FoldAffineChains")
class FoldAffineChains:
    """Write every per-channel affine chain (a batch norm in any spelling) in one form (see
    :mod:`tvm_memsched.relax.passes.affine_chains`); run at operator level, before legalization.

    Parameters
    ----------
    mode : {"exact", "scale_shift"}
        ``"exact"`` (default): subtract / divide / multiply / add of plain constants, bit-identical;
        ``"scale_shift"``: one ``x * scale + shift`` per chain (rounding differences).
    into_conv : bool
        With ``"scale_shift"``: fold a chain that follows a convolution into its weights and a bias.

    ``.report`` lists the rewritten chains (:class:`AffineChain`) of the last run.

    Example
    -------
    >>> FoldAffineChains().info.name
    'FoldAffineChains'
    """

    def __init__(self, mode: str = "exact", into_conv: bool = False):
        if mode not in MODES:
            raise ValueError(f"unknown affine chain form {mode!r}; use one of {', '.join(MODES)}")
        if into_conv and mode != "scale_shift":
            raise ValueError("into_conv folds into the convolution's weights: it needs mode='scale_shift'")
        self.mode, self.into_conv = mode, into_conv
        self.report: list[AffineChain] = []

    def transform_module(self, mod, ctx):
        new, self.report = fold_affine_chains(mod, self.mode, self.into_conv)
        return new
