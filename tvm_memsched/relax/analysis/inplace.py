"""Which kernel outputs may be written over a kernel input, read off the kernel's TIR.

A ``call_tir`` kernel may write output ``o`` over input ``i`` (the two share
memory when ``i`` dies at the call) when one of two access patterns is proven
from the PrimFunc's blocks (their ``reads``/``writes`` regions, which TVM keeps
exact through scheduling):

* **same index**: ``i`` and ``o`` have the same shape and dtype and are touched
  by one loop nest only, whose spatial blocks access ``i``, ``o`` and the
  kernel's own temporaries at one index made of distinct loop variables (every
  loop of the nest among them): each iteration reads its element of ``i`` and
  writes the same element of ``o`` after, and no iteration touches another's
  elements, in any loop order or parallelisation (element-wise ops,
  activations, residual adds, casts, the integer requantising chains);
* **consumed first**: every block that reads ``i`` sits in statements of the
  kernel's top-level sequence that run before the first statement writing
  ``o`` (a kernel that copies or pads its input into a temporary first), so any
  overlap is safe.

Anything else (a read of a neighbour element, a reduction over ``i``, ``i``
read after ``o`` is first written) is not same-index safe.
:func:`kernel_inplace_shifts` then bounds the kernel's loop nest
(:mod:`~tvm_memsched.relax.analysis.access_bounds`, in bounded memory) for a **shifted** overlap: the output
starts ``shift`` bytes below the input, far enough that no write lands on an
input byte a later iteration still reads (a depthwise convolution or a pooling
lags one input row and one pixel behind its writes). ``call_tir_inplace``
kernels and kernels whose TIR cannot be inspected are never aliased.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def relu(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
...     for i in range(8):
...         with T.sblock("b"):
...             v = T.axis.spatial(8, i)
...             b[v] = T.max(a[v], T.float32(0))
>>> kernel_inplace_pairs(relu, 1)
[(0, 1)]
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.s_tir import SBlock

from .access_bounds import access_spans, span_shift
from .workspace import walk_stmts

__all__ = ["kernel_inplace_pairs", "kernel_inplace_shifts", "InplaceAnalyzer", "candidate_kernels", "NOALIAS",
           "KEEP_NOALIAS", "write_only_params"]

#: the PrimFunc attribute that lets code generators assume kernel buffers never alias (C ``restrict``)
NOALIAS = "tirx.noalias"
#: PrimFunc attribute (``True``) of a kernel that must not run in place: the faster kernels of the ``speed`` and
#: ``balanced`` tradeoffs (:mod:`~tvm_memsched.relax.passes.balance_kernels`), which an overlap would make the
#: LLVM build compile without ``noalias`` (:func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`; measured,
#: MobileViT-xxs balanced, NHWC, 30 runs: 219 ms with its banded kernels in place, 154 ms with them out of place,
#: TVM's default build 225 ms in the same run)
KEEP_NOALIAS = "tvm_memsched.keep_noalias"


def _source(region):
    return getattr(region, "buffer", None) or region.source


def _buffer_key(buf):
    """The param a block region refers to (TVM 0.27: the buffer-typed param var itself)."""
    return buf


def _blocks_by_top_stmt(func) -> list[list]:
    """Blocks under each statement of the kernel's top-level sequence (execution order)."""
    body = func.body
    if hasattr(body, "block"):          # the root block realize
        body = body.block.body
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    out = []
    for s in stmts:
        found = []
        walk_stmts(s, lambda x: found.append(x) if isinstance(x, SBlock) else None)
        out.append(found)
    return out


def _same(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b, map_free_vars=False)


def _single_element(region) -> bool:
    return all(isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1 for r in region.region)


def _realizes(stmt, loops=()):
    """``(block realize, enclosing loops)`` for every block under ``stmt`` (not below nested blocks)."""
    from tvm.s_tir import SBlockRealize

    out = []
    if isinstance(stmt, SBlockRealize):
        out.append((stmt, loops))
    elif isinstance(stmt, tirx.For):
        out.extend(_realizes(stmt.body, loops + (stmt,)))
    elif isinstance(stmt, tirx.SeqStmt):
        for x in stmt.seq:
            out.extend(_realizes(x, loops))
    elif isinstance(stmt, tirx.IfThenElse):
        out.append((None, loops))      # conditional execution: not analysed
    elif stmt is not None and isinstance(getattr(stmt, "body", None), tirx.Stmt):
        out.extend(_realizes(stmt.body, loops))
    return out


def _canon(expr, unit):
    """An iterator binding as ``("v", loop var)`` or ``("c", constant)``; None when it is anything else.

    Loops of extent 1 (``unit``: loop var -> its value) count as constants.
    """
    terms, stack = [], [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, tirx.Add):
            stack.extend([e.a, e.b])
        else:
            terms.append(e)
    const, var = 0, None
    for t in terms:
        if isinstance(t, tirx.IntImm):
            const += int(t)
        elif isinstance(t, tvm.ir.Var) and any(t.same_as(u) for u in unit):
            const += next(int(v) for u, v in unit.items() if t.same_as(u))
        elif isinstance(t, tvm.ir.Var) and var is None:
            var = t
        else:
            return None
    if var is None:
        return ("c", const)
    return ("v", var) if const == 0 else None


def _unit_loops(loops) -> dict:
    return {lp.loop_var: lp.min for lp in loops
            if isinstance(lp.extent, tirx.IntImm) and int(lp.extent) == 1 and isinstance(lp.min, tirx.IntImm)}


def _index(realize, region, loops=()):
    """A block access as canonical loop-variable components, one per dimension (None if not simple)."""
    block = realize.block
    unit = _unit_loops(loops)
    bind = [(iv.var, _canon(val, unit)) for iv, val in zip(block.iter_vars, realize.iter_values)]
    out = []
    for r in region.region:
        if not (isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1):
            return None
        m = r.min
        if isinstance(m, tirx.IntImm):
            out.append(("c", int(m)))
            continue
        val = next((c for k, c in bind if k.same_as(m)), False)
        if val is False or val is None:
            return None
        out.append(val)
    return out


def _injective(index, loops) -> bool:
    """Distinct loop variables in ``index``, covering every loop of extent > 1."""
    comps = [c[1] for c in index if c[0] == "v"]
    for lp in loops:
        used = sum(1 for c in comps if c.same_as(lp.loop_var))
        if used > 1 or (used == 0 and not (isinstance(lp.extent, tirx.IntImm) and int(lp.extent) == 1)):
            return False
    return all(any(c.same_as(lp.loop_var) for lp in loops) for c in comps)


def _same_key(a, b) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and (x[1] == y[1] if x[0] == "c" else x[1].same_as(y[1]))
                                    for x, y in zip(a, b))


def _same_block(items, pin, pout) -> bool:
    """Every block instance that reads ``pin`` writes ``pout`` at that same element, and runs once."""
    readers = [(rz, lp) for rz, lp in items if rz is not None
               and any(_source(r).same_as(pin) for r in rz.block.reads)]
    writers = [rz for rz, _ in items if rz is not None and any(_source(r).same_as(pout) for r in rz.block.writes)]
    if not readers or len(writers) != len(readers) \
            or any(not any(w.same_as(rz) for rz, _ in readers) for w in writers):
        return False
    for rz, loops in readers:
        b = rz.block
        if b.init is not None or any(int(iv.iter_type) != 0 for iv in b.iter_vars):
            return False
        ws = [r for r in b.writes if _source(r).same_as(pout)]
        if len(ws) != 1:
            return False
        key = _index(rz, ws[0], loops)
        if key is None or not _injective(key, loops):
            return False
        for r in b.reads:
            if _source(r).same_as(pout):
                return False
            if _source(r).same_as(pin):
                k2 = _index(rz, r, loops)
                if k2 is None or not _same_key(k2, key):
                    return False
    return True


def _same_index(groups, pin, pout, top_stmts, internal) -> bool:
    """Every element of ``pout`` is written in the loop iteration that alone reads the same element of ``pin``
    (through the kernel's per-element temporaries).

    Within the one top-level loop nest that touches ``pin`` / ``pout``, all blocks are
    spatial and sit under the same loops; every access to ``pin``, ``pout`` and the
    kernel's own buffers uses one index, each component a distinct loop variable (or
    a constant), and every loop of extent > 1 appears in it: iterations touch
    disjoint elements, and inside one the reads come before the dependent write.
    """
    touching = [k for k, g in enumerate(groups)
                if any(_source(r).same_as(p) for b in g for r in list(b.reads) + list(b.writes)
                       for p in (pin, pout))]
    if len(touching) != 1:
        return False
    items = _realizes(top_stmts[touching[0]])
    if not items or any(rz is None for rz, _ in items):
        return False
    loops = items[0][1]
    if any(len(lp) != len(loops) or any(not a.same_as(b) for a, b in zip(lp, loops)) for _, lp in items):
        return False
    wrote = read = False
    index = None
    for rz, _ in items:
        b = rz.block
        if b.init is not None or any(int(iv.iter_type) != 0 for iv in b.iter_vars):
            return False
        for kind, regions in (("r", b.reads), ("w", b.writes)):
            for r in regions:
                src = _source(r)
                if not (src.same_as(pin) or src.same_as(pout) or any(src.same_as(x) for x in internal)):
                    continue
                if kind == "r" and src.same_as(pout):
                    return False
                idx = _index(rz, r, loops)
                if idx is None or (index is not None and not _same_key(idx, index)):
                    return False
                index = idx if index is None else index
                wrote |= kind == "w" and src.same_as(pout)
                read |= kind == "r" and src.same_as(pin)
    return wrote and read and _injective(index, loops)


def _consumed_first(groups, pin, pout) -> bool:
    last_read = max((k for k, g in enumerate(groups)
                     if any(_buffer_key(_source(r)).same_as(pin) for b in g for r in b.reads)), default=None)
    first_write = min((k for k, g in enumerate(groups)
                       if any(_buffer_key(_source(r)).same_as(pout) for b in g for r in b.writes)), default=None)
    return last_read is not None and first_write is not None and last_read < first_write


def kernel_inplace_pairs(func, n_inputs: int, same_shape=None) -> list[tuple[int, int]]:
    """``[(input position, output position)]`` of ``func``'s params whose output may overwrite the input.

    ``n_inputs``: how many leading params are inputs (the rest are outputs).
    ``same_shape(i, o)``: whether input ``i`` and output ``o`` have the same
    shape and dtype (default: compare the params' buffers as far as visible);
    the *same index* pattern needs it, *consumed first* does not.
    """
    if not isinstance(func, tirx.PrimFunc):
        return []
    try:
        groups = _blocks_by_top_stmt(func)
        body = func.body.block.body if hasattr(func.body, "block") else func.body
        top = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        internal = []
        walk_stmts(func.body, lambda x: internal.extend(x.alloc_buffers) if isinstance(x, SBlock) else None)
        internal = [getattr(b, "data", b) for b in internal] + list(internal)
        items = _realizes(body)
    except Exception:  # noqa: BLE001 - an uninspectable kernel is never aliased
        return []
    params = list(func.params)
    pairs = []
    for o in range(n_inputs, len(params)):
        for i in range(n_inputs):
            pin, pout = params[i], params[o]
            if _consumed_first(groups, pin, pout):
                pairs.append((i, o))
            elif (same_shape is None or same_shape(i, o)) and (
                    _same_block(items, pin, pout) or _same_index(groups, pin, pout, top, internal)):
                pairs.append((i, o))
    return pairs


def kernel_inplace_shifts(func, n_inputs: int, same_shape=None) -> list[tuple[int, int, int]]:
    """``[(input position, output position, shift)]``: ``func``'s output may overwrite the input when
    it starts ``shift`` bytes below it (0: same-index or consumed-first, proven structurally; more:
    the smallest safe lag traced from the loop nest). Each output appears with every input it may
    take over; an input whose overlap would save nothing is left out.

    Example
    -------
    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def blur(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    ...     for i in range(8):
    ...         with T.sblock("b"):
    ...             v = T.axis.spatial(8, i)
    ...             b[v] = a[v] + T.if_then_else(v > 0, a[v - 1], T.float32(0))
    >>> kernel_inplace_pairs(blur, 1), kernel_inplace_shifts(blur, 1)   # b[i] must stay one element behind
    ([], [(0, 1, 4)])
    """
    return _shifts_over(func, n_inputs, set(kernel_inplace_pairs(func, n_inputs, same_shape)))


def _shifts_over(func, n_inputs: int, exact: set) -> list[tuple[int, int, int]]:
    """:func:`kernel_inplace_shifts` given its structural pairs ``exact``."""
    out = [(i, o, 0) for i, o in sorted(exact)]
    params = list(func.params) if isinstance(func, tirx.PrimFunc) else []
    rest = [(i, o) for o in range(n_inputs, len(params)) for i in range(n_inputs) if (i, o) not in exact]
    if not rest:
        return out
    spans = _spans(func)
    if spans is None:
        return out
    for i, o in rest:
        shift = span_shift(spans, i, o)
        if shift is not None:
            out.append((i, o, shift))
    return sorted(out)


#: access bounds per kernel body (structural hash), shared by every pass of a compile
_SPANS: dict = {}
_SPANS_LIMIT = 4096
#: kernel_inplace_shifts per (kernel body, inputs, same-shape pairs), likewise
_SHIFTS: dict = {}


def _shifts_cached(func, n_in: int, same: tuple) -> list:
    """:func:`kernel_inplace_shifts` with ``same_shape`` given as the pairs that match, once per kernel body."""
    from ..ir import per_body

    def analyse(_stripped):
        return _shifts_over(func, n_in, set(kernel_inplace_pairs(func, n_in, lambda i, o: (i, o) in same)))

    return per_body(_SHIFTS, func, (n_in, same), analyse, _SPANS_LIMIT)


def _spans(func):
    """:func:`~tvm_memsched.relax.analysis.access_bounds.access_spans` of ``func``, computed once per distinct body."""
    from ..ir import per_body

    return per_body(_SPANS, func, None, access_spans, _SPANS_LIMIT)


def _same_type(a, b) -> bool:
    ta, tb = getattr(a, "ty", None), getattr(b, "ty", None)
    if not isinstance(ta, relax.TensorType) or not isinstance(tb, relax.TensorType):
        return False
    return str(ta.dtype) == str(tb.dtype) and ta.shape is not None and tb.shape is not None \
        and _same(ta.shape, tb.shape)


class InplaceAnalyzer:
    """Cached :func:`kernel_inplace_pairs` for the kernels of a module, by call site.

    ``pairs(gvar, args, n_outputs)`` takes a kernel call's argument list (inputs, then
    ``n_outputs`` outputs, as CallTIRRewrite passes them) and returns
    ``[(input arg index, output arg index, shift)]`` (see :func:`kernel_inplace_shifts`).
    Every overlap the loop order allows, which is correct wherever the code generator may not assume the
    buffers apart (:func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`); none for a kernel marked
    :data:`KEEP_NOALIAS`.
    """

    def __init__(self, mod):
        self.mod = mod
        self._cache: dict = {}

    def pairs(self, gvar, args, n_outputs: int) -> list[tuple[int, int, int]]:
        try:
            func = self.mod[gvar]
        except (KeyError, ValueError, tvm.TVMError):
            return []
        if not isinstance(func, tirx.PrimFunc) or (func.attrs is not None and func.attrs.get(KEEP_NOALIAS, False)):
            return []
        key = (gvar.name_hint, len(args) - n_outputs, tuple((str(a.ty) if hasattr(a, "ty") else "") for a in args))
        if key not in self._cache:
            self._cache[key] = _call_site(func, args, n_outputs)
        return self._cache[key]

    @staticmethod
    def func_pairs(func, args, n_outputs: int) -> list[tuple[int, int, int]]:
        """:meth:`pairs` for a kernel ``func`` that is not (or not yet) in the module, at a call with ``args``."""
        return _call_site(func, args, n_outputs)


def _call_site(func, args, n_outputs: int) -> list:
    """The shifts of kernel ``func`` called with ``args`` (:func:`_shifts_cached`)."""
    if len(func.params) != len(args):
        return []
    n_in = len(args) - n_outputs
    same = tuple((i, o) for i in range(n_in) for o in range(n_in, len(args)) if _same_type(args[i], args[o]))
    return _shifts_cached(func, n_in, same)


def write_only_params(func) -> frozenset:
    """Positions of the params of PrimFunc ``func`` that its blocks write and never read (pure outputs); empty
    when ``func`` has no blocks to tell (its accesses are then unknown).

    Example
    -------
    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def acc(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32"), c: T.Buffer((4,), "float32")):
    ...     for i in range(4):
    ...         with T.sblock("b"):
    ...             v = T.axis.spatial(4, i)
    ...             b[v] = a[v]
    ...             c[v] = c[v] + a[v]
    >>> sorted(write_only_params(acc))
    [1]
    """
    if not isinstance(func, tirx.PrimFunc):
        return frozenset()
    read, written, blocks = set(), set(), []
    walk_stmts(func.body, lambda st: blocks.append(st) if isinstance(st, SBlock) else None)
    params = list(func.params)
    for b in blocks:
        for regions, into in ((b.reads, read), (b.writes, written)):
            for r in regions:
                src = _source(r)
                into.update(k for k, p in enumerate(params) if src.same_as(p))
    return frozenset(written - read) if blocks else frozenset()


def candidate_kernels(mod, function: str = "main") -> set:
    """Kernels of ``mod[function]`` (after CallTIRRewrite) that some call could run in place."""
    analyzer = InplaceAnalyzer(mod)
    out = set()

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.GlobalVar) and e.op.name_hint not in out:
            for n_out in range(1, len(e.args)):
                if analyzer.pairs(e.op, list(e.args), n_out):
                    out.add(e.op.name_hint)
                    break

    relax.analysis.post_order_visit(mod[function].body, visit)
    return out
