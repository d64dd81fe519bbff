"""Explicit SIMD over each kernel's innermost output dimension: the ``VectorizeKernels`` pass (LLVM targets).

The kernels our pipeline leaves unscheduled (TVM's kernels after ``ShrinkWorkspace``, ``InlineProducers`` and
``ChannelsFirstReduction``) are loop nests that LLVM's loop vectoriser has to vectorise by itself, and often
cannot:

* a kernel that runs **in place** is compiled without ``noalias``
  (:func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`): LLVM then cannot prove the output's
  stores miss the input's loads and keeps the loop scalar (measured: swiftnet_like's 3x3 depthwise
  convolution, 48x48x16 channels-last, 0.107 ms without ``noalias``, 0.040 ms with it);
* a reduction whose initialisation sits inside its loops (``T.init()``, as legalization writes it) has a
  branch in the loop LLVM's vectoriser gives up on (the same convolution, explicitly vectorised: 0.018 ms
  with ``noalias``, 0.023 ms without);
* a matrix product written ``for i, j, k`` sums over ``k`` innermost: nothing is contiguous to vectorise, and
  any index arithmetic a fused reshape left in the loads is evaluated per multiply-accumulate.

:func:`vectorize_func` vectorises, in TIR, the loop over the last dimension of what each block writes
(output channels, columns), so the vector code does not depend on what LLVM can prove:

0. a lane loop that holds several statements (a reduction decomposed at it, its init, its sum over ``k`` and
   an epilogue computed there by ``ShrinkWorkspace``; a chain of element-wise blocks) is split into tiles
   (the whole loop when a power of two up to :data:`TILE`, else tiles of 32, 16, 8 or 4) and the tile loop
   into one loop per statement (loop fission), where every iteration touches only its own element of each
   buffer written in the loop (:func:`_lane_private`: then the order between iterations is free, and each
   iteration keeps its statements' order); a buffer then used inside one tile only moves to registers
   (``local``), so the workspace does not grow. Measured: DeiT-tiny's MLP as the ONNX exporter writes it
   (the first matrix product, GELU with ``erf``, the second product and the residual add merged by
   ``InlineProducers``, both products decomposed per column): 53.3 ms -> 6.1 ms per call, bit-identical;
1. a block whose innermost loop is that spatial loop is vectorised over it (whole when a power of two up to
   :data:`MAX_LANES`, else in vectors of 16, 8 or 4 lanes, the largest that divides it; the update half of a
   reduction ``ShrinkWorkspace`` decomposed too, whose lanes each read and write only their own element);
2. a reduction block whose loops inside that spatial loop are all reduction loops (``for i, j, k``) has the
   spatial loop split into tiles of up to :data:`TILE` lanes with the reduction loops between
   (``for i, j0, k, j1``), the tile summed in a local (register) accumulator and stored after its sum:
   each output element is still the same sum in the same order, so results are bit-identical (without
   such a tile, the whole row moved innermost). A row no vector width divides (DeiT's 197 tokens, a prime)
   is cut into whole tiles and a last tile of its own, a copy of the tile's loops (:func:`_split_tail`):
   the whole tiles are plain vector code, only the last one carries the ``j < n`` predicate (DeiT-tiny's
   attention scores, 3 x 197 x 197 over 64: 1.98 -> 0.41 ms per call);
3. a reduction's initialisation is taken out of its loops (``decompose_reduction``) and vectorised too.

A block is left alone when the loop is short (< 4), when the loop variable reaches any index but the last
(a gather), or a condition (``if_then_else``/``Select``: padding bounds tests depend on rows and columns, not
channels), when it calls a math function that vector code computes lane by lane (``exp``, ``tanh``, ...),
or when TVM refuses a primitive. Kernels already scheduled (MetaSchedule-tuned,
``tirx.is_scheduled``) are not touched. In-place safety is proven on the vectorised kernel itself: the
overlap analyses (:mod:`~tvm_memsched.relax.analysis.access_bounds`) treat a vectorised loop as one step
in which every lane reads before any lane writes.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def mm(a: T.Buffer((4, 8), "float32"), b: T.Buffer((8, 16), "float32"), c: T.Buffer((4, 16), "float32")):
...     for i, j, k in T.grid(4, 16, 8):
...         with T.sblock("c"):
...             vi, vj, vk = T.axis.remap("SSR", [i, j, k])
...             with T.init():
...                 c[vi, vj] = T.float32(0)
...             c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]
>>> g, steps = vectorize_func(mm)
>>> steps
['c: 16-lane tiles over j summed in registers']
>>> "T.vectorized" in g.script()
True
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import tvm
import tvm.script
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym.analyzer import Analyzer

from ..analysis.workspace import compact, compacted_workspace_bytes, internal_allocations, walk_stmts
from ..ir import per_body, strip_attrs
from ..schedule import Schedule
from .shrink_workspace import SCHEDULED

__all__ = ["VectorizeKernels", "vectorize_func", "vectorize_kernels", "vectorizes", "LANES", "MAX_LANES", "MIN_LANES",
           "MAX_ROW"]

#: a loop longer than MAX_LANES is split into vectors of LANES (or 8, or 4: the largest that divides it)
LANES = 16
MAX_LANES = 64
#: the accumulator tile of a reduction summed in registers (step 2): 32 floats, four 256-bit registers
TILE = 32
#: shorter loops are left to the compiler
MIN_LANES = 4
#: a reduction's spatial loop moved inside its reduction loops spans at most this many elements (its row of
#: the output is read and written once per reduction step: it has to stay in the first-level cache)
MAX_ROW = 4096
#: a buffer step 0 keeps inside one tile (moved to registers) may span at most this many bytes there
MAX_LOCAL = TILE * 8


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


#: math functions a vectorised loop computes lane by lane (a library call per lane: measured, MobileViT's
#: softmax 4.1 -> 5.6 ms vectorised over its exponentials); blocks calling them are left to LLVM
_LANE_BY_LANE = frozenset(("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1", "tanh", "sigmoid",
                           "erf", "pow", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
                           "asinh", "acosh", "atanh", "fmod"))
#: class names of a load from a buffer (TVM 0.27: ``TensorLoad``)
_LOADS = ("TensorLoad", "BufferLoad")
_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body")


def _visit(expr, fn) -> None:
    """Call ``fn`` on ``expr`` and every expression below it (children first)."""
    stack, order = [expr], []
    while stack:
        x = stack.pop()
        order.append(x)
        for f in _FIELDS:
            c = getattr(x, f, None)
            if isinstance(c, tvm.ir.expr.Expr):
                stack.append(c)
        for f in ("args", "indices"):
            stack.extend(getattr(x, f, None) or ())
    for x in reversed(order):
        fn(x)


def _lane_safe(block, var) -> bool:
    """Whether the body of ``block`` may be vectorised over block iterator ``var``: ``var`` only in the last
    index of every access (the store's exactly ``var``), never in a condition or in an index read from memory."""
    ok = [True]

    def expr_ok(e):
        def visit(x):
            if not ok[0]:
                return
            kind = type(x).__name__
            if kind in _LOADS:
                for idx in list(x.indices)[:-1]:
                    if _uses(idx, var):
                        ok[0] = False
                if x.indices and _has_load(x.indices[-1]) and _uses(x.indices[-1], var):
                    ok[0] = False
            elif kind == "Call" and str(getattr(x.op, "name", "")).endswith("if_then_else"):
                if _uses(x.args[0], var):
                    ok[0] = False
            elif kind == "Call" and str(getattr(x.op, "name", "")).rsplit(".", 1)[-1] in _LANE_BY_LANE:
                ok[0] = False
            elif kind == "Select":
                if _uses(x.condition, var):
                    ok[0] = False
        _visit(e, visit)

    def stmt_ok(s):
        if isinstance(s, tirx.BufferStore):
            if not s.indices or not (isinstance(s.indices[-1], tvm.ir.Var) and s.indices[-1].same_as(var)):
                ok[0] = False
                return
            if any(_uses(i, var) for i in list(s.indices)[:-1]):
                ok[0] = False
            expr_ok(s.value)
            for i in s.indices:
                expr_ok(i)
        elif isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                stmt_ok(x)
        elif isinstance(s, tirx.Evaluate):
            expr_ok(s.value)
        else:
            ok[0] = False                  # loops, conditions, allocations inside a block: not ours

    stmt_ok(block.body)
    if block.init is not None:
        stmt_ok(block.init)
    return ok[0]


def _load_buffer(load):
    """The buffer a load reads (TVM 0.27's ``TensorLoad.source``)."""
    return getattr(load, "buffer", None) or load.source


def _self_update(block) -> bool:
    """Whether ``block`` (a single store) reads the buffer it writes, and only at the element it writes."""
    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return False
    found, same = [], [True]

    def visit(x):
        if type(x).__name__ in _LOADS and _load_buffer(x).same_as(store.buffer):
            found.append(x)
            if len(x.indices) != len(store.indices) or not all(
                    tvm_ffi.structural_equal(a, b) for a, b in zip(x.indices, store.indices)):
                same[0] = False

    _visit(store.value, visit)
    return bool(found) and same[0]


def _has_load(expr) -> bool:
    found = []
    _visit(expr, lambda x: found.append(1) if type(x).__name__ in _LOADS else None)
    return bool(found)


def _find_realize(func, name):
    out = []
    walk_stmts(func.body, lambda x: out.append(x) if isinstance(x, s_tir.SBlockRealize)
               and x.block.name_hint == name else None)
    return out[0] if len(out) == 1 else None


def _lanes(n: int) -> int | None:
    """Vector width for a loop of ``n``: the whole loop when it is a power of two up to MAX_LANES, else the
    largest of 16/8/4 dividing it (LLVM splits other widths, such as 24 or 48 lanes, into poor code: measured
    5x slower than the scalar loop on MobileViT's 48-channel convolutions)."""
    if n < MIN_LANES:
        return None
    if n <= MAX_LANES and n & (n - 1) == 0:
        return n
    for w in (LANES, 8, 4):
        if n % w == 0:
            return w
    return None


# ---------------------------------------------------------------------------------------------------------------
# step 0: a lane loop holding several statements, split into one loop per statement


def _unit_step(loop) -> bool:
    """Whether ``loop`` counts one by one (no ``step``, or a step of 1)."""
    step = getattr(loop, "step", None)
    return step is None or (isinstance(step, tirx.IntImm) and int(step) == 1)


def _rebuild(stmt, old, new):
    """``stmt`` with statement ``old`` replaced by ``new`` (None when ``old`` is not below ``stmt``): the path
    from ``stmt`` down to ``old`` is rebuilt (loops, sequences, blocks), everything else is shared."""
    if stmt is None:
        return None
    if stmt.same_as(old):
        return new
    if isinstance(stmt, tirx.For):
        body = _rebuild(stmt.body, old, new)
        return None if body is None else tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                                                  stmt.thread_binding, stmt.annotations, stmt.step)
    if isinstance(stmt, tirx.SeqStmt):
        seq = list(stmt.seq)
        for k, child in enumerate(seq):
            body = _rebuild(child, old, new)
            if body is not None:
                seq[k] = body
                return tirx.SeqStmt(seq)
        return None
    if isinstance(stmt, s_tir.SBlockRealize):
        block = _rebuild(stmt.block, old, new)
        return None if block is None else s_tir.SBlockRealize(list(stmt.iter_values), stmt.predicate, block)
    if isinstance(stmt, s_tir.SBlock):
        body = _rebuild(stmt.body, old, new)
        return None if body is None else s_tir.SBlock(
            list(stmt.iter_vars), list(stmt.reads), list(stmt.writes), stmt.name_hint, body, stmt.init,
            list(stmt.alloc_buffers), list(stmt.match_buffers), stmt.annotations)
    return None


def _accesses(block):
    """``[(buffer, indices)]`` of every load and store in ``block`` (body and init), or None when its body is
    not a single store (a block holding loops or conditions)."""
    out = []
    for stmt in (block.body, block.init):
        if stmt is None:
            continue
        if not isinstance(stmt, tirx.BufferStore):
            return None
        out.append((stmt.buffer, list(stmt.indices)))
        for e in [stmt.value, *stmt.indices]:
            _visit(e, lambda x: out.append((_load_buffer(x), list(x.indices))) if type(x).__name__ in _LOADS
                   else None)
    return out


def _lane_private(loop) -> bool:
    """Whether every iteration of ``loop`` touches only its own element of each buffer written inside it, so
    that the statements of its body may run one after another, each over all iterations (loop fission).

    Every block below the loop binds exactly one spatial iterator to ``offset + loop variable`` (the same
    ``offset`` for all, inner loops of extent 1 counted as 0) and accesses each buffer written below the loop
    only at that iterator in the last index, which no other index uses; no statement but loops and blocks.
    Iteration ``j`` then reads and writes the elements ``offset + j`` of those buffers and nothing another
    iteration writes: the order between iterations is free, and within one the statements keep theirs."""
    lvar = loop.loop_var
    stmts = []
    walk_stmts(loop.body, stmts.append)
    analyzer = Analyzer()
    for st in stmts:
        if isinstance(st, tirx.For) and isinstance(st.extent, tirx.IntImm) and int(st.extent) == 1:
            analyzer.bind(st.loop_var, tvm.ir.Range.from_min_extent(st.min, st.extent))
        elif not isinstance(st, (tirx.For, tirx.SeqStmt, s_tir.SBlockRealize, s_tir.SBlock, tirx.BufferStore)):
            return False
    lanes, offsets, written = [], [], []
    for st in stmts:
        if not isinstance(st, s_tir.SBlockRealize):
            continue
        if not (isinstance(st.predicate, tirx.IntImm) and int(st.predicate) == 1) and _uses(st.predicate, lvar):
            return False
        hits = [k for k, v in enumerate(st.iter_values) if _uses(v, lvar)]
        if len(hits) != 1 or int(st.block.iter_vars[hits[0]].iter_type) != 0:
            return False
        offset = analyzer.simplify(st.iter_values[hits[0]] - lvar)
        if _uses(offset, lvar) or (offsets and not tvm_ffi.structural_equal(offset, offsets[0])):
            return False
        acc = _accesses(st.block)
        if acc is None:
            return False
        offsets.append(offset)
        lanes.append((st.block.iter_vars[hits[0]].var, acc))
        written.extend(r.source for r in st.block.writes)
    for var, acc in lanes:
        for buf, idx in acc:
            if not any(buf.same_as(w) for w in written):
                continue
            if not idx or not (isinstance(idx[-1], tvm.ir.Var) and idx[-1].same_as(var)) \
                    or any(_uses(i, var) for i in idx[:-1]):
                return False
    return True


def _split_lanes(sch, loop_rv):
    """Step 0 on one loop: ``(schedule, width)`` with the loop split into tiles of ``width`` and the tile loop's
    statements each in a tile loop of its own, or None. A buffer the loop's statements then use only
    inside one tile is moved to registers (``local``), so the workspace does not grow."""
    loop = sch.get(loop_rv)
    if not isinstance(loop.body, tirx.SeqStmt) or not isinstance(loop.extent, tirx.IntImm) \
            or int(loop.kind) != 0 or not _unit_step(loop) or not _lane_private(loop):
        return None
    n = int(loop.extent)
    width = n if n <= TILE and n & (n - 1) == 0 else next((w for w in (TILE, LANES, 8, 4) if n % w == 0), None)
    if width is None or width < MIN_LANES:
        return None
    trial = sch.copy()
    try:
        if width != n:
            loop_rv = trial.split(loop_rv, [None, width])[1]
        tile = trial.get(loop_rv)
        func = trial.mod["main"]
        loops = tirx.SeqStmt([tirx.For(tile.loop_var, tile.min, tile.extent, tile.kind, child)
                              for child in tile.body.seq])
        func = func.with_body(_rebuild(func.body, tile, loops))
        # each new loop reuses the tile's variable: ConvertSSA gives each its own
        func = tirx.transform.ConvertSSA()(tvm.IRModule({"main": func}))["main"]
        trial = Schedule(func)
        _keep_in_registers(trial, tile.body.seq)
    except Exception:  # ScheduleError, or IR an analysis cannot handle
        return None
    return trial, width


def _keep_in_registers(sch, children) -> None:
    """Move to the ``local`` scope each buffer the function allocates whose every access is in one of
    ``children`` (the statements of one tile) and which then spans at most MAX_LOCAL bytes."""
    inside = set()
    for child in children:
        walk_stmts(child, lambda x: inside.add(x.name_hint) if isinstance(x, s_tir.SBlock) else None)
    blocks = []
    walk_stmts(sch.mod["main"].body, lambda x: blocks.append(x) if isinstance(x, s_tir.SBlock)
               and x.name_hint != "root" else None)
    for buf in list(sch.get(sch.get_sblock("root")).alloc_buffers):
        if buf.scope() not in ("global", ""):
            continue
        users = [b for b in blocks if any(r.source.same_as(buf) for r in list(b.reads) + list(b.writes))]
        writer = next((b for b in users if any(w.source.same_as(buf) for w in b.writes)), None)
        if writer is None or any(b.name_hint not in inside for b in users):
            continue
        index = next(k for k, w in enumerate(writer.writes) if w.source.same_as(buf))
        trial = sch.copy()
        trial.set_scope(trial.get_sblock(writer.name_hint), index, "local")
        if _local_bytes(trial.mod["main"]) - _local_bytes(sch.mod["main"]) <= MAX_LOCAL:
            sch.set_scope(sch.get_sblock(writer.name_hint), index, "local")


def _local_bytes(func) -> int:
    """Bytes of the ``local`` buffers of ``func`` once compacted."""
    return sum(n for _name, scope, n in internal_allocations(compact(func)) if scope == "local")


def _separate_lanes(sch, names):
    """Step 0 for every block of ``names`` whose lane loop holds other statements: ``(schedule, steps)``."""
    steps = []
    for name in names:
        found = _lane_loop(sch, name)
        if found is None:
            continue
        _realize, _iv, loops, pos = found
        if not isinstance(sch.get(loops[pos]).body, tirx.SeqStmt):
            continue
        loop = sch.get(loops[pos])
        done = _split_lanes(sch, loops[pos])
        if done is not None:
            sch, width = done
            inside = []
            walk_stmts(loop.body, lambda x: inside.append(x.name_hint) if isinstance(x, s_tir.SBlock) else None)
            steps.append(f"{loop.loop_var.name}: {width}-lane tiles, a loop each for {', '.join(inside)}")
    return sch, steps


def _lane_loop(sch, name: str):
    """``(realize, lane iterator index, loops, position)`` for block ``name``: the block iterator it stores at
    in the last index, and the loop driving it (bound to ``offset + loop variable``, the innermost such loop
    longer than 1; a split loop's inner half), or None."""
    realize = _find_realize(sch.mod["main"], name)
    if realize is None or len(realize.block.writes) != 1:
        return None
    block = realize.block
    store = block.body if isinstance(block.body, tirx.BufferStore) else None
    if store is None or not store.indices or not isinstance(store.indices[-1], tvm.ir.Var):
        return None
    lane_iv = next((k for k, iv in enumerate(block.iter_vars) if iv.var.same_as(store.indices[-1])), None)
    if lane_iv is None or int(block.iter_vars[lane_iv].iter_type) != 0:
        return None
    value = realize.iter_values[lane_iv]
    loops = list(sch.get_loops(sch.get_sblock(name)))
    analyzer = Analyzer()
    for pos in reversed(range(len(loops))):
        loop = sch.get(loops[pos])
        if not _uses(value, loop.loop_var) or (isinstance(loop.extent, tirx.IntImm) and int(loop.extent) == 1):
            continue
        if _uses(analyzer.simplify(value - loop.loop_var), loop.loop_var):
            return None
        return realize, lane_iv, loops, pos
    return None


def _vectorize_block(sch, name: str):
    """``(schedule, step)`` with block ``name`` vectorised, or None (see the module docstring)."""
    found = _lane_loop(sch, name)
    if found is None:
        return None
    realize, lane_iv, loops, pos = found
    block = realize.block
    loop_vars = [sch.get(lp).loop_var for lp in loops]
    lvar = loop_vars[pos]
    if int(sch.get(loops[pos]).kind) != 0:
        return None
    if not _lane_safe(block, block.iter_vars[lane_iv].var):
        return None
    n = int(sch.get(loops[pos]).extent) if isinstance(sch.get(loops[pos]).extent, tirx.IntImm) else 0
    width = _lanes(n)
    # no vector width divides the loop (DeiT's 197 tokens): only a matrix product's register tiles (step 2),
    # whole tiles and then the last columns in a tile of their own
    tail = width is None and n >= 2 * LANES
    if width is None and not tail:
        return None
    # which block iterators each loop inside the lane loop drives: must be reductions only (step 2)
    inner = loops[pos + 1:]
    reduce_vars = [v for iv, val in zip(block.iter_vars, realize.iter_values) if int(iv.iter_type) == 2
                   for v in tirx.analysis.undefined_vars(val)]
    moved = False
    body = sch.get(loops[pos]).body
    while isinstance(body, tirx.For) and isinstance(body.extent, tirx.IntImm) and int(body.extent) == 1:
        body = body.body
    if isinstance(body, s_tir.SBlockRealize):
        inner = []           # loops of one iteration between the lane loop and the block: nothing to move
    if not inner and not isinstance(body, s_tir.SBlockRealize):
        return None          # the lane loop holds other statements too (blocks computed at it)
    if inner:
        inner_vars = loop_vars[pos + 1:]
        if not all(any(v.same_as(r) for r in reduce_vars) for v in inner_vars) or n > MAX_ROW:
            return None
        # a perfect nest: the lane loop holds only this block
        body = sch.get(loops[pos]).body
        while isinstance(body, tirx.For):
            body = body.body
        if not isinstance(body, s_tir.SBlockRealize):
            return None
        moved = True
    first_red = next((k for k, v in enumerate(loop_vars) if any(v.same_as(r) for r in reduce_vars)), None)
    if (block.init is not None and first_red is None) or (moved and first_red != pos + 1):
        return None          # a moved lane loop: every reduction loop is inside it
    if moved:
        if tail:
            tile = TILE if n >= 2 * TILE else LANES
        else:
            tile = width if width == n else next((w for w in (TILE, LANES, 8, 4) if n % w == 0), None)
        done = _register_tile(sch, name, pos, tile, first_red) if tile else None
        trial = done and (_split_tail(done[0], done[1], n // tile) if n % tile else done[0])
        if trial is not None:
            return trial, f"{name}: {tile}-lane tiles over {lvar.name} summed in registers" + (
                f", its last {n % tile} in a tile of their own" if n % tile else "")
    if tail:
        return None
    if block.init is None and _self_update(block):
        # the update half of a decomposed reduction (ShrinkWorkspace's): TVM's vectorize refuses a block that
        # reads what it writes without an init; each lane reads and writes only its own element
        # (_self_update), so the lanes are independent (in any order against the reduction loops), and the
        # check is skipped for this one loop
        try:
            trial = Schedule(sch.mod["main"], enable_check=False)
            loops = list(trial.get_loops(trial.get_sblock(name)))
            lane = loops[pos]
            if moved:
                trial.reorder(*loops[pos + 1:], lane)
                lane = trial.get_loops(trial.get_sblock(name))[-1]
            if width != n:
                lane = trial.split(lane, [None, width])[1]
            trial.vectorize(lane)
            return Schedule(trial.mod["main"]), f"{name}: {width} lanes over {lvar.name}" + (
                ", reduction loops outside" if moved else "")
        except Exception:  # ScheduleError
            return None
    trial = sch.copy()
    try:
        blk = trial.get_sblock(name)
        loops = list(trial.get_loops(blk))
        lane = loops[pos]
        if moved:
            trial.reorder(*loops[pos + 1:], lane)
            lane = trial.get_loops(blk)[-1]
        if width != n:
            lane = trial.split(lane, [None, width])[1]
        trial.vectorize(lane)
        if block.init is not None:
            init = trial.decompose_reduction(blk, trial.get_loops(blk)[pos if moved else first_red])
            _vectorize_last(trial, init)
    except Exception:  # ScheduleError: TVM refuses (dependences, non-affine bindings, ...)
        return None
    return trial, f"{name}: {width} lanes over {lvar.name}" + (", reduction loops outside" if moved else "")


def _vectorize_last(sch, blk) -> None:
    loops = sch.get_loops(blk)
    if loops and int(sch.get(loops[-1]).kind) == 0:
        sch.vectorize(loops[-1])


def _register_tile(sch, name: str, pos: int, tile: int, first_red: int):
    """Step 2 with an accumulator in registers: the lane loop split into tiles of ``tile``, the reduction
    loops between the tile loop and the lanes, the tile summed in a local buffer and stored after the
    reduction (``for i, j0, k, j1``: each output element the same sum in the same order). ``(schedule, tile
    loop)``, or None if TVM refuses. A ``tile`` that does not divide the loop leaves a predicate on the
    lanes (``j0 * tile + j1 < n``), which :func:`_split_tail` confines to the last tile."""
    trial = sch.copy()
    try:
        blk = trial.get_sblock(name)
        cache = trial.cache_write(blk, 0, "local")
        loops = list(trial.get_loops(blk))
        outer, lanes = trial.split(loops[pos], [None, tile])
        trial.reorder(outer, *loops[pos + 1:], lanes)
        trial.reverse_compute_at(cache, outer)
        trial.vectorize(lanes)
        loops = list(trial.get_loops(blk))
        init = trial.decompose_reduction(blk, loops[first_red])   # the tile loop took the lane loop's place
        _vectorize_last(trial, init)
        _vectorize_last(trial, cache)
    except Exception:  # ScheduleError
        return None
    return trial, outer


def _renamed(stmt, suffix: str):
    """A copy of ``stmt`` (loops and blocks) with every block named ``<name><suffix>``."""
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, _renamed(stmt.body, suffix),
                        stmt.thread_binding, stmt.annotations, stmt.step)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_renamed(x, suffix) for x in stmt.seq])
    if isinstance(stmt, s_tir.SBlockRealize):
        b = stmt.block
        block = s_tir.SBlock(list(b.iter_vars), list(b.reads), list(b.writes), b.name_hint + suffix,
                             _renamed(b.body, suffix), b.init, list(b.alloc_buffers), list(b.match_buffers),
                             b.annotations)
        return s_tir.SBlockRealize(list(stmt.iter_values), stmt.predicate, block)
    if isinstance(stmt, (tirx.BufferStore, tirx.Evaluate)):
        return stmt
    raise ValueError(f"cannot copy a {type(stmt).__name__}")


def _split_tail(sch, loop_rv, full: int):
    """``sch`` with the tile loop ``loop_rv`` cut after its first ``full`` iterations (index set splitting: the
    same iterations in the same order) and the rest a copy of its body with the blocks renamed ``*_tail``:
    in the whole tiles the lanes' predicate is provably true and lowering drops it, so they are plain vector
    code (a predicated vector is computed lane by lane). The function goes through TVMScript once, which gives
    the copy variables of its own. None if that fails."""
    loop = sch.get(loop_rv)
    if not _unit_step(loop):
        return None
    func = sch.mod["main"]
    names = set()
    walk_stmts(func.body, lambda x: names.add(x.name_hint) if isinstance(x, s_tir.SBlock) else None)
    try:
        copy = _renamed(loop.body, "_tail")
        added = []
        walk_stmts(copy, lambda x: added.append(x.name_hint) if isinstance(x, s_tir.SBlock) else None)
        if names & set(added):
            return None
        dtype, start, end = str(loop.extent.ty), int(loop.min), int(loop.min) + int(loop.extent)
        whole = tirx.For(loop.loop_var, loop.min, tirx.IntImm(dtype, full), loop.kind, loop.body)
        rest = tirx.For(loop.loop_var, tirx.IntImm(dtype, start + full), tirx.IntImm(dtype, end - start - full),
                        loop.kind, copy)
        func = func.with_body(_rebuild(func.body, loop, tirx.SeqStmt([whole, rest])))
        parsed = tvm.script.from_source(func.with_attr("s_tir", True).script())   # printed as an s_tir function
        parsed = strip_attrs(parsed["main"] if isinstance(parsed, tvm.IRModule) else parsed)
        return Schedule(parsed.with_attrs(dict(func.attrs)) if func.attrs is not None else parsed)
    except Exception:  # IR this copy or TVMScript cannot handle
        return None


def vectorize_func(func):
    """``(func with its blocks vectorised, [steps])``; ``(func, [])`` when nothing was (see the module docstring).

    A kernel whose workspace would grow, or that is already scheduled, is returned unchanged."""
    if func.attrs is not None and func.attrs.get(SCHEDULED, False):
        return func, []
    try:
        sch = Schedule(func)
        sch.get_sblock("root")
    except Exception:  # not a schedulable (s_tir) function
        return func, []
    names = []
    walk_stmts(func.body, lambda x: names.append(x.name_hint) if isinstance(x, s_tir.SBlock)
               and x.name_hint != "root" else None)
    if len(set(names)) != len(names):
        return func, []
    try:
        split, separated = _separate_lanes(sch, names)
    except Exception:  # an analysis that cannot handle this IR: no loop split
        split, separated = sch, []
    sch, steps = split, []
    for name in names:
        try:
            done = _vectorize_block(sch, name)
        except Exception:  # an analysis that cannot handle this IR: leave the block alone
            done = None
        if done is not None:
            sch, step = done
            steps.append(step)
    if not steps:           # loops split for nothing: the kernel as it was
        return func, []
    steps = separated + steps
    new = sch.mod["main"]
    try:
        if compacted_workspace_bytes(new) > compacted_workspace_bytes(func):
            return func, []
    except Exception:
        return func, []
    if func.attrs is not None:
        new = new.with_attr(dict(func.attrs))
    return new, steps


def vectorizes(target) -> bool:
    """Whether kernels for ``target`` (default: the current one) are vectorised: LLVM targets only (other code
    generators, such as C for microcontrollers, do not emit vector types)."""
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    return target is not None and target.kind.name == "llvm"


def vectorize_kernels(mod, target=None):
    """``(module, {kernel: steps})``: :func:`vectorize_func` on every PrimFunc of ``mod`` when
    :func:`vectorizes` ``target``."""
    if not vectorizes(target):
        return mod, {}
    new_mod, report, cache = mod, {}, {}
    kernels = [(gv, func) for gv, func in mod.functions_items() if isinstance(func, tirx.PrimFunc)
               and not (func.attrs is not None and func.attrs.get(SCHEDULED, False))]
    cores = min(os.cpu_count() or 1, len(kernels))

    def one(func):                     # a body seen before (another kernel's): its result
        return per_body(cache, func, None, vectorize_func)

    if cores > 1:          # side by side: TVM's schedule primitives run outside the interpreter lock
        with ThreadPoolExecutor(cores) as pool:
            done = list(pool.map(lambda kf: one(kf[1]), kernels))
    else:
        done = [one(func) for _gv, func in kernels]
    for (gv, func), (new, steps) in zip(kernels, done):
        if steps:
            new = strip_attrs(new).with_attrs(dict(func.attrs)) if func.attrs is not None else new
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new
            report[gv.name_hint] = steps
    return new_mod, report


@tvm.transform.module_pass(opt_level=0, name="VectorizeKernels")
class VectorizeKernels:
    """Vectorise every unscheduled kernel over its innermost output dimension (see the module docstring).

    ``target``: the build's (default: the current one); the pass does nothing for non-LLVM targets.
    After it has run, ``report`` maps each kernel it changed to its steps.
    """

    def __init__(self, target=None):
        self.target = target
        self.report: dict = {}

    def transform_module(self, mod, ctx):
        new, self.report = vectorize_kernels(mod, self.target)
        return new
