"""Kernel workspace: memory a TIR PrimFunc allocates internally (e.g. a conv2d's ``pad_temp``).

The graph planner never sees these buffers, but they are resident while the
kernel runs, so they are the op's ``workspace_bytes`` in our memory model.

Two measurements:

* ``"tir"``: the buffers the PrimFunc allocates as written after legalization /
  FuseTIR (``SBlock.alloc_buffers``), fast but pessimistic (the TIR pipeline's
  StorageRewrite later merges some of them);
* ``"lowered"``: the ``AllocBuffer`` statements left after TVM's default TIR
  pipeline for the target, which is what actually runs. A kernel whose compacted
  form (:func:`compact`) keeps at most one buffer is not lowered: StorageRewrite
  only merges several buffers, so its compacted size is what lowering leaves
  (equal on every kernel of the zoo, before and after ``ShrinkWorkspace``, checked
  by a test), at a third of the cost.

Example
-------
>>> import tvm
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def f(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
...     tmp = T.sblock_alloc_buffer((4,), "float32")
...     for i in range(4):
...         with T.sblock("t"):
...             tmp[i] = a[i] * T.float32(2)
...     for i in range(4):
...         with T.sblock("b"):
...             b[i] = tmp[i]
>>> internal_allocations(f)[0][1:]
('global', 16)
"""

from __future__ import annotations

import os

import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

__all__ = ["internal_allocations", "workspace_bytes", "lowered_workspace_bytes", "lower_func", "WorkspaceMeter",
           "walk_stmts", "compact", "compacted_workspace_bytes"]


def _buffer_bytes(buf) -> int:
    n = 1
    for s in buf.shape:
        if not isinstance(s, (int, tvm.tirx.IntImm)):
            return 0  # symbolic size: not statically known
        n *= int(s)
    dt = tvm.DataType(str(buf.dtype))
    return n * dt.bits * dt.lanes // 8


def walk_stmts(stmt, visit) -> None:
    """Call ``visit`` on ``stmt`` and every statement below it (blocks, loops, sequences, ifs)."""
    stack = [stmt]
    while stack:
        s = stack.pop()
        if s is None:
            continue
        visit(s)
        if isinstance(s, tirx.SeqStmt):
            stack.extend(reversed(list(s.seq)))
        elif isinstance(s, SBlockRealize):
            stack.append(s.block)
        elif isinstance(s, SBlock):
            stack.append(s.body)
            stack.append(s.init)
        elif isinstance(s, tirx.IfThenElse):
            stack.append(s.else_case)
            stack.append(s.then_case)
        else:
            body = getattr(s, "body", None)
            if isinstance(body, tirx.Stmt):
                stack.append(body)


def internal_allocations(prim_func) -> list[tuple[str, str, int]]:
    """``[(buffer name, scope, bytes)]`` of the buffers allocated inside ``prim_func``."""
    out = []

    def visit(s):
        if isinstance(s, SBlock):
            for b in s.alloc_buffers:
                out.append((b.name, b.scope(), _buffer_bytes(b)))
        elif isinstance(s, tirx.AllocBuffer):
            b = s.buffer
            out.append((b.name, b.scope(), _buffer_bytes(b)))

    walk_stmts(prim_func.body, visit)
    return out


def workspace_bytes(prim_func, scopes=("global", "")) -> int:
    """Total bytes of the internal allocations of ``prim_func`` in the given memory scopes."""
    return sum(n for _, scope, n in internal_allocations(prim_func) if scope in scopes)


def compact(func):
    """``func`` with every buffer moved to where it is used and shrunk to the region used there.

    The first passes of TVM's TIR pipeline (up to ``CompactBufferAllocation``):
    a quick measure of what scheduling saved, independent of a target.
    """
    mod = tvm.IRModule({"main": func})
    t = tvm.s_tir.transform
    seq = tvm.transform.Sequential([t.LowerInitBlock(), t.PlanAndUpdateBufferAllocationLocation(),
                                    t.ConvertBlocksToOpaque(), t.CompactBufferAllocation()])
    return seq(mod)["main"]


#: compacted internal allocations per kernel body
_COMPACTED: dict = {}
_COMPACTED_LIMIT = 8192


def _compacted_allocations(func) -> list:
    """:func:`internal_allocations` of :func:`compact` ``(func)`` in the global scope, once per kernel body."""
    from ..ir import per_body

    def measure(_stripped):
        if not workspace_bytes(func):          # compaction only shrinks buffers
            return []
        return [a for a in internal_allocations(compact(func)) if a[1] in ("global", "")]

    return per_body(_COMPACTED, func, None, measure, _COMPACTED_LIMIT)


def compacted_workspace_bytes(func) -> int:
    """:func:`workspace_bytes` of :func:`compact` ``(func)`` (once per distinct kernel body).

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def g(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    ...     tmp = T.sblock_alloc_buffer((4,), "float32")
    ...     for i in range(4):
    ...         with T.sblock("t"):
    ...             tmp[i] = a[i] * T.float32(2)
    ...         with T.sblock("b"):
    ...             b[i] = tmp[i]
    >>> workspace_bytes(g), compacted_workspace_bytes(g)
    (16, 4)
    """
    return sum(n for _name, _scope, n in _compacted_allocations(func))


class WorkspaceMeter:
    """Measures (and caches) the workspace of the PrimFuncs of a module.

    ``mode="lowered"`` runs TVM's default TIR pipeline for ``target`` on each
    PrimFunc once; ``mode="tir"`` reads the unlowered buffers; ``mode=None``
    reports zero.
    """

    def __init__(self, mod, target=None, mode: str | None = "lowered"):
        self.mod = mod
        self.mode = mode if (mode != "lowered" or target is not None) else "tir"
        self.target = target
        self.cache: dict[str, int] = {}

    def __call__(self, gv) -> int:
        name = gv.name_hint if hasattr(gv, "name_hint") else str(gv)
        if self.mode is None:
            return 0
        if name in self.cache:
            return self.cache[name]
        func = self.mod[gv]
        if not isinstance(func, tirx.PrimFunc):
            self.cache[name] = 0
            return 0
        self.cache[name] = lowered_workspace_bytes(func, self.target, name) if self.mode == "lowered" \
            else workspace_bytes(func)
        return self.cache[name]

    def prefetch(self, gvs) -> None:
        """Measure the kernels ``gvs`` not measured yet, side by side on the machine's cores (TVM's TIR passes
        run outside the interpreter lock), so that the calls that follow find them cached."""
        if self.mode != "lowered":
            return
        todo = list({gv.name_hint: gv for gv in gvs if getattr(gv, "name_hint", None) not in self.cache}.values())
        cores = os.cpu_count() or 1
        if len(todo) < 2 or cores < 2:
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(cores, len(todo))) as pool:
            list(pool.map(self, todo))


def lower_func(func, target, name: str = "main"):
    """``func`` after TVM's default TIR pipeline for ``target`` (what runs on the device)."""
    if isinstance(target, dict):
        target = tvm.target.Target(target)
    if func.attrs is None or "global_symbol" not in func.attrs:
        func = func.with_attr("global_symbol", name)
    mod = tvm.IRModule({name: func})
    pipeline = tirx.get_default_tir_pipeline(target)
    if isinstance(pipeline, tuple):
        pipeline = pipeline[0]
    with target:
        lowered = pipeline(tirx.transform.BindTarget(target.with_host(target))(mod))
    return lowered[name]


#: lowered workspace per (kernel body, target): every pass and report of a compile asks about the same kernels
_LOWERED: dict = {}
_LOWERED_LIMIT = 8192


def lowered_workspace_bytes(func, target, name: str = "main") -> int:
    """:func:`workspace_bytes` of ``func`` lowered for ``target`` (unlowered if lowering fails); computed once per
    distinct kernel body and target."""
    from ..ir import per_body

    def measure(_stripped):
        try:
            allocations = _compacted_allocations(func)
            if len(allocations) <= 1:          # nothing for StorageRewrite to merge (module docstring)
                return sum(n for _name, _scope, n in allocations)
        except Exception:
            pass
        try:
            lowered = lower_func(func, target, name)
        except Exception:  # lowering a lone kernel can fail on exotic functions: fall back
            lowered = func
        return workspace_bytes(lowered)

    return per_body(_LOWERED, func, str(target), measure, _LOWERED_LIMIT)
