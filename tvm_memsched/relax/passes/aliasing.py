"""In-place calls made safe for the code generator: the kernels whose buffers the arena plan lets overlap lose
``tirx.noalias``.

The C code generator honours the attribute kernel by kernel (``restrict``), so the aliased kernels just turn it
off. TVM 0.27's LLVM code generator does not (:data:`PER_KERNEL_NOALIAS`): there the aliased kernels are built now,
in a module of their own without ``noalias``, and linked as an external module (:func:`compile_apart`), so every
other kernel keeps it.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..analysis.inplace import NOALIAS
from ..analysis.workspace import walk_stmts
from ..ir import build_in_parts

__all__ = ["allow_aliasing", "compile_apart", "apart_target", "noalias_per_kernel", "PER_KERNEL_NOALIAS",
           "APART_LLVM_OPT_LEVEL"]

#: target kinds whose code generator honours :data:`NOALIAS` per kernel (C: ``restrict``). TVM 0.27's LLVM code
#: generator does not: it applies the attribute of the module's last kernel to every kernel (each body moved into
#: a ``<name>_compute_`` function whose pointers are all ``noalias``, or none of them; read off the LLVM IR of
#: two-kernel modules), and with it on, each buffer's accesses get a TBAA tag of their own, so even one pointer
#: shared by both buffers of a pair is miscompiled. A shifted overlap, correct in loop order, computed other
#: values once LLVM reordered loads and stores (MobileViT-xxs's reshape-transpose 52,736 B below its input; a
#: copy-first convolution whose input copy LLVM forwarded), so on other targets :func:`allow_aliasing` compiles
#: the aliased kernels apart.
PER_KERNEL_NOALIAS = frozenset({"c"})


def noalias_per_kernel(target=None) -> bool:
    """Whether ``target`` (or the current one) honours :data:`NOALIAS` kernel by kernel
    (:data:`PER_KERNEL_NOALIAS`); without a target, False (the safe answer).

    >>> noalias_per_kernel({"kind": "c"}), noalias_per_kernel("llvm")
    (True, False)
    """
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    elif not isinstance(target, tvm.target.Target):
        target = tvm.target.Target(target)
    return target is not None and target.kind.name in PER_KERNEL_NOALIAS


def allow_aliasing(mod, kernels, target=None) -> "tvm.IRModule":
    """``mod`` with :data:`NOALIAS` turned off on the named kernels (those whose buffers may now share memory).

    Code generators may otherwise reorder loads and stores across buffers they are told never alias. On a
    ``target`` (default: the current one) whose code generator does not honour the attribute kernel by kernel
    (:data:`PER_KERNEL_NOALIAS`; LLVM) the named kernels are compiled apart (:func:`compile_apart`), so the
    others keep ``noalias``.

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def k(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    ...     T.func_attr({"tirx.noalias": True})
    ...     for i in range(4):
    ...         b[i] = a[i]
    >>> mod = tvm.IRModule({"k": k, "other": k})
    >>> [bool(allow_aliasing(mod, {"k"}, {"kind": "c"})[n].attrs[NOALIAS]) for n in ("k", "other")]
    [False, True]
    """
    kernels = set(kernels)
    if not kernels:
        return mod
    if not noalias_per_kernel(target):
        return compile_apart(mod, kernels, target)
    new = mod.clone()
    for gv, f in mod.functions_items():
        if gv.name_hint in kernels and isinstance(f, tirx.PrimFunc):
            new[gv] = f.with_attr(NOALIAS, False)
    return new


#: LLVM's optimisation level for the chained kernels compiled apart (:func:`chained`), when the target sets none.
#: Without ``noalias``, -O3 spends seconds on such a kernel (one of the zoo's swiftnet_like: 2.05 s at -O3, 0.19 s
#: at -O2, the model's 12 other kernels compiled apart 0.05-0.2 s each at either level) for no faster run: an
#: in-place call fails the overlap checks its loops are versioned on. The other kernels keep the target's level
#: (at -O2 the model ran about 25% slower).
APART_LLVM_OPT_LEVEL = 2


def chained(func) -> bool:
    """Whether the PrimFunc ``func`` holds more than one reduction (a convolution computed in bands inside its
    consumer, :class:`~tvm_memsched.relax.passes.inline_producers.InlineProducers`).

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def s(a: T.Buffer((4, 4), "float32"), b: T.Buffer((4,), "float32")):
    ...     for i, k in T.grid(4, 4):
    ...         with T.sblock("sum"):
    ...             vi, vk = T.axis.remap("SR", [i, k])
    ...             with T.init():
    ...                 b[vi] = T.float32(0)
    ...             b[vi] = b[vi] + a[vi, vk]
    >>> chained(s)
    False
    """
    count = [0]

    def visit(stmt):
        if isinstance(stmt, s_tir.SBlock) and any(int(iv.iter_type) != 0 for iv in stmt.iter_vars):
            count[0] += 1

    walk_stmts(func.body, visit)
    return count[0] > 1


def apart_target(target, func=None) -> "tvm.target.Target":
    """The target :func:`compile_apart` builds ``func`` with: ``target``, for a :func:`chained` kernel on LLVM at
    :data:`APART_LLVM_OPT_LEVEL` unless the target sets its own ``opt-level``.

    >>> apart_target("llvm").attrs.get("opt-level") is None
    True
    """
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if target.kind.name != "llvm" or "opt-level" in target.attrs or func is None or not chained(func):
        return target
    return tvm.target.Target({**dict(target.export()), "opt-level": APART_LLVM_OPT_LEVEL})


def compile_apart(mod, kernels, target=None, others: bool = True) -> "tvm.IRModule":
    """``mod`` with the named kernels built now, by TVM's TIR pipeline and code generator for ``target`` (default:
    the current one, else LLVM) in modules of their own with :data:`NOALIAS` off, attached as external modules
    (``external_mods``, which the VM build links) and called by name. The other kernels keep ``noalias``: with
    ``others`` (default) they are built now too, in modules apart from the aliased ones and side by side with them
    on the machine's cores (:func:`~tvm_memsched.relax.ir.build_in_parts`; the one LLVM build left to TVM would
    otherwise run after this one, on one core); without it they stay in ``mod`` for TVM's build. For code
    generators that apply one module-wide ``noalias`` (see :data:`PER_KERNEL_NOALIAS`).
    """
    if target is None:
        target = tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    elif not isinstance(target, tvm.target.Target):
        target = tvm.target.Target(target)
    aliased = {gv: f for gv, f in mod.functions_items() if gv.name_hint in kernels and isinstance(f, tirx.PrimFunc)}
    if not aliased:
        return mod
    apart = dict(aliased)
    if others:
        movable = _called_only(mod)
        apart.update({gv: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc) and gv not in aliased
                      and gv in movable})
    built = {gv.name_hint: f.with_attr(NOALIAS, False) if gv in aliased else f for gv, f in apart.items()}
    targets = {gv.name_hint: apart_target(target, f) if gv in aliased else target for gv, f in apart.items()}
    libs = [lib for _names, lib in build_in_parts(built, targets)]
    new = tvm.IRModule({gv: f for gv, f in mod.functions_items() if gv not in apart}, attrs=mod.attrs,
                       global_infos=mod.global_infos)

    @mutator
    class _Extern(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.GlobalVar) and call.op in apart:
                return relax.Call(relax.ExternFunc(call.op.name_hint), call.args, call.attrs, call.ty_args,
                                  call.span)
            return call

    for gv, func in list(new.functions_items()):
        if isinstance(func, relax.Function):
            new[gv] = _Extern().visit_expr(func)
    attrs = dict(new.attrs) if new.attrs is not None else {}
    return new.with_attr("external_mods", list(attrs.get("external_mods", [])) + libs)


def _called_only(mod) -> set:
    """The GlobalVars of ``mod`` that its Relax functions use only as the operator of a call (which
    :func:`compile_apart` can turn into a call by name): not passed, stored or called from TIR."""
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    called, other = set(), set()

    @visitor
    class _Uses(PyExprVisitor):
        def visit_call_(self, call):
            if isinstance(call.op, tvm.ir.GlobalVar):
                called.add(call.op)
            else:
                self.visit_expr(call.op)
            for arg in call.args:
                self.visit_expr(arg)

        def visit_global_var_(self, gv):
            other.add(gv)

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            _Uses().visit_expr(func)
        elif isinstance(func, tirx.PrimFunc) and '"ir.GlobalVar"' in tvm.ir.save_json(func.body):
            other.update(mod.get_global_vars())          # a kernel calling another (no TIR visitor in Python)
    return called - other
