"""Small helpers over TVM Relax IR: byte sizes of types, op names, call classification.

Kept in one place because TVM 0.27's IR API differs from older releases (types
are ``expr.ty``, ``relax.TensorType``; ``Var.name``; constants are
``tvm.ir.Constant``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..core.errors import UnsupportedError

__all__ = ["strip_attrs", "KernelEmitter", "replace_bindings", "drop_dead_bindings", "pure_binding", "model_macs", "dtype_bytes", "static_shape", "expr_shape", "var_occurrences", "static_nbytes", "tensor_bytes", "op_name", "is_op", "VIEW_OPS", "call_tir_op",
           "shape_values", "field_types", "build_in_parts"]

#: ops whose result is a view of (aliases) their tensor input: no new memory
VIEW_OPS = frozenset({
    "relax.reshape", "relax.memory.view", "relax.memory.ensure_zero_offset",
    "relax.flatten", "relax.expand_dims", "relax.squeeze",
})
CALL_TIR_OPS = frozenset({"relax.call_tir", "relax.call_tir_with_grad"})


def dtype_bytes(dtype) -> int:
    dt = tvm.DataType(str(dtype))
    return max(1, dt.bits * dt.lanes // 8) if dt.bits else 0


def shape_values(shape) -> list | None:
    """Integer dims of a ShapeExpr / shape list, or None if any dim is symbolic."""
    vals = getattr(shape, "values", shape)
    out = []
    for v in vals:
        if isinstance(v, int):
            out.append(v)
        elif isinstance(v, tvm.tirx.IntImm):
            out.append(int(v.value))
        else:
            return None
    return out


def static_shape(ty) -> list[int] | None:
    """Static shape of a TensorType, or None if unknown or symbolic."""
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    return shape_values(shape)


def expr_shape(expr) -> list[int] | None:
    """Static shape of a tensor-typed Relax expression, or None (not a tensor, unknown or symbolic)."""
    ty = getattr(expr, "ty", None)
    return static_shape(ty) if isinstance(ty, relax.TensorType) else None


def var_occurrences(expr) -> list:
    """Every occurrence of a Relax variable in ``expr`` (repeated as often as it is used)."""
    out = []
    relax.analysis.post_order_visit(expr, lambda e: out.append(e) if isinstance(e, relax.Var) else None)
    return out


def static_nbytes(ty) -> int | None:
    """Bytes of a statically shaped TensorType, None for anything else (see :func:`tensor_bytes`)."""
    shape = static_shape(ty) if isinstance(ty, relax.TensorType) else None
    if shape is None:
        return None
    n = 1
    for s in shape:
        n *= s
    return n * dtype_bytes(ty.dtype)


def tensor_bytes(ty, what: str = "tensor") -> int:
    """Bytes of a statically shaped TensorType; UnsupportedError for dynamic shapes."""
    shape = static_shape(ty)
    if shape is None:
        raise UnsupportedError(f"{what} has a dynamic or unknown shape ({ty}); "
                               "memory planning needs static shapes")
    n = 1
    for d in shape:
        n *= d
    return n * dtype_bytes(ty.dtype)


def field_types(ty) -> list:
    """The tensor leaves of a (possibly nested) tuple type, in order."""
    if isinstance(ty, relax.TupleType):
        out = []
        for f in ty.fields:
            out.extend(field_types(f))
        return out
    return [ty]


def op_name(call) -> str:
    """'relax.nn.conv2d' for an op call, the PrimFunc/function name for calls to global functions."""
    op = call.op
    if isinstance(op, tvm.ir.Op):
        if op.name in CALL_TIR_OPS or op.name == "relax.call_tir_inplace":
            gv = call.args[0]
            return getattr(gv, "name_hint", str(gv))
        return op.name
    if isinstance(op, tvm.ir.GlobalVar):
        return op.name_hint
    if isinstance(op, relax.ExternFunc):
        return str(op.global_symbol)
    return type(op).__name__


def is_op(expr, name: str) -> bool:
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def call_tir_op(call) -> bool:
    return isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in CALL_TIR_OPS


def model_macs(func) -> int:
    """Multiply-accumulates of the convolutions and matrix products in a Relax function (static shapes).

    ``conv2d``: output elements x input channels per group x kernel height x width (a depthwise
    convolution has one input channel per group); ``matmul``: output elements x the reduced axis.

    Example
    -------
    >>> from tvm.script import relax as R
    >>> @R.function
    ... def f(x: R.Tensor((1, 8), "float32"), w: R.Tensor((8, 4), "float32")):
    ...     return R.matmul(x, w)
    >>> model_macs(f)
    32
    """
    import math

    total = 0

    def visit(e):
        nonlocal total
        if not (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)):
            return
        if e.op.name == "relax.nn.conv2d":
            w, o = expr_shape(e.args[1]), expr_shape(e)
            if w is not None and o is not None:
                kl = str(e.attrs.kernel_layout)
                total += math.prod(o) * w[kl.index("I")] * w[kl.index("H")] * w[kl.index("W")]
        elif e.op.name == "relax.matmul":
            a, o = expr_shape(e.args[0]), expr_shape(e)
            if a is not None and o is not None:
                total += math.prod(o) * a[-1]

    relax.analysis.post_order_visit(func.body, visit)
    return total


class KernelEmitter:
    """Adds PrimFuncs to a module once each (structurally equal ones shared) and makes constants.

    ``call(match, func, name, args)`` is the ``call_tir`` of ``func`` producing ``match.var``'s type.
    """

    def __init__(self, mod):
        self.bb = relax.BlockBuilder(mod)
        self.funcs: dict = {}
        self.const_bytes = 0

    def gvar(self, func, name: str):
        key = tvm_ffi.structural_hash(func)
        for f, gv in self.funcs.get(key, []):
            if tvm_ffi.structural_equal(f, func):
                return gv
        gv = self.bb.add_func(func, name)
        self.bb.update_func(gv, func.with_attr("global_symbol", gv.name_hint))
        self.funcs.setdefault(key, []).append((func, gv))
        return gv

    def const(self, arr):
        arr = np.ascontiguousarray(arr)
        self.const_bytes += arr.nbytes
        return relax.const(arr)

    def call(self, m, func, name, args):
        gv = self.gvar(func, name)
        return relax.call_tir(gv, args, m.var.ty)


def replace_bindings(func: relax.Function, replaced: dict) -> relax.Function:
    """``func`` with the bindings of ``replaced`` given new values, then dead bindings removed."""
    if not replaced:
        return func
    blocks = []
    for block in func.body.blocks:
        bindings = [relax.VarBinding(b.var, replaced[b.var]) if isinstance(b, relax.VarBinding)
                    and b.var in replaced else b for b in block.bindings]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    new = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    return drop_dead_bindings(new)


def pure_binding(value) -> bool:
    """True if dropping a binding of ``value`` cannot change what the function does (TVM's ``FPurity``)."""
    if isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem, tvm.ir.Constant)):
        return True
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and bool(value.op.get_attr("FPurity")))


def drop_dead_bindings(func: relax.Function) -> relax.Function:
    """Drop pure bindings whose variables nothing uses (the float groups a kernel replaced)."""
    used = set()

    def mark(expr):
        def visit(e):
            if isinstance(e, relax.Var):
                used.add(e)

        relax.analysis.post_order_visit(expr, visit)

    mark(func.body.body)
    kept_blocks = []
    for block in reversed(list(func.body.blocks)):
        kept = []
        for b in reversed(list(block.bindings)):
            if b.var in used or not isinstance(b, relax.VarBinding) or not pure_binding(b.value):
                kept.append(b)
                mark(b.value)
        kept.reverse()
        kept_blocks.append(relax.DataflowBlock(kept) if isinstance(block, relax.DataflowBlock)
                           else relax.BindingBlock(kept))
    kept_blocks.reverse()
    return relax.Function(func.params, relax.SeqExpr(kept_blocks, func.body.body), func.ret_ty, func.is_pure,
                          func.attrs, func.span)


def strip_attrs(func):
    """A PrimFunc without any attribute: what is left to compare when passes rename or annotate it."""
    for key in list(func.attrs.keys()) if func.attrs is not None else []:
        func = func.without_attr(key)
    return func


def per_body(cache: dict, func, extra, compute, limit: int = 4096):
    """``compute(stripped func)``, once per kernel body (:func:`strip_attrs`, structural hash and equality)
    and ``extra`` key; ``cache`` (a dict the caller keeps) is emptied when it holds ``limit`` results.

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def f(a: T.Buffer((4,), "float32")):
    ...     a[0] = T.float32(1)
    >>> store, calls = {}, []
    >>> [per_body(store, g, None, lambda s: calls.append(1) or 7) for g in (f, f.with_attr("x", 1))], len(calls)
    ([7, 7], 1)
    """
    import tvm_ffi

    stripped = strip_attrs(func)
    key = (tvm_ffi.structural_hash(stripped), extra)
    for f, value in cache.get(key, ()):
        if tvm_ffi.structural_equal(f, stripped):
            return value
    value = compute(stripped)
    if sum(len(v) for v in cache.values()) >= limit:
        cache.clear()
    cache.setdefault(key, []).append((stripped, value))
    return value


def build_in_parts(kernels: dict, target) -> list:
    """``[(names, runtime module)]``: the PrimFuncs ``kernels`` (``{name: PrimFunc}``) built for ``target`` (one
    target, or ``{name: target}``) in as many modules per target as this machine has cores, all side by side
    (TVM's code generator and the JIT that loads a module run outside the interpreter lock, so a serial build
    leaves cores idle). Kernels that differ in ``tirx.noalias`` never share a module: TVM 0.27's LLVM code
    generator applies one module-wide ``noalias`` (see :mod:`tvm_memsched.relax.passes.aliasing`).

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def k(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    ...     for i in range(4):
    ...         b[i] = a[i]
    >>> sorted(n for names, _ in build_in_parts({"k1": k, "k2": k}, "llvm") for n in names)
    ['k1', 'k2']
    """
    cores = os.cpu_count() or 1
    groups: dict = {}
    for n in sorted(kernels):
        t = target[n] if isinstance(target, dict) else target
        attrs = kernels[n].attrs
        noalias = bool(attrs.get("tirx.noalias", False)) if attrs is not None else False
        groups.setdefault((str(t), noalias), (t, []))[1].append(n)
    jobs = []
    for t, names in groups.values():
        parts = max(1, min(len(names), cores))
        jobs += [(t, names[i::parts]) for i in range(parts)]
    jobs.sort(key=lambda job: -len(job[1]))        # the longest first: the pool's cores finish together

    def build(job):
        t, group = job
        mod = tvm.IRModule({n: kernels[n].with_attr("global_symbol", n) for n in group})
        return group, tvm.tirx.build(mod, target=t)

    if len(jobs) == 1 or cores == 1:
        return [build(job) for job in jobs]
    with ThreadPoolExecutor(min(cores, len(jobs))) as pool:
        return list(pool.map(build, jobs))
