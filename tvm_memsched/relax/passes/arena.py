"""One-arena static memory planning for Relax functions (replaces StaticPlanBlockMemory).

Runs where TVM runs ``StaticPlanBlockMemory``: after ``CallTIRRewrite``, when
every kernel output is an ``R.builtin.alloc_tensor``. For each function:

1. every static ``R.builtin.alloc_tensor`` is a buffer; its lifetime runs from
   its allocation to the last use of anything that aliases it (plain var
   aliases, ``R.reshape`` and other views, ``R.memory.view``,
   ``ensure_zero_offset``, tuples and get-items, match-casts, and, to be safe,
   the tensor results of unknown calls that take it as an argument);
2. buffers that reach the function's result are left unplanned, as TVM does
   (the caller owns them);
3. the branches of ``If`` nodes are planned on their own; their arenas share one
   region that is live only while the ``If`` runs;
4. *in-place* (``inplace=True``): a kernel output may share memory with a
   kernel input that dies at that call when the kernel's TIR proves it safe
   (:mod:`tvm_memsched.relax.analysis.inplace`); the output buffer then starts at the call
   and carries the alias (taken or not by the planner);
5. :func:`tvm_memsched.core.arena.plan_arena` packs the buffers of each storage
   scope into one arena with ``alignment``-byte offsets;
6. each allocation becomes ``R.memory.alloc_tensor(arena, offset, ...)`` followed
   by ``R.memory.ensure_zero_offset`` when the offset is not zero (generated
   kernels require ``byte_offset == 0``; with a 64-byte aligned offset this is a
   zero-copy re-base on CPU), and one ``R.memory.alloc_storage`` per scope is
   added at the top of the function.

Functions that cannot be planned statically (dynamic shapes) are left to TVM's
``StaticPlanBlockMemory``, and the report says so.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

import tvm
from tvm import relax

from ...core.arena import Buffer, check_plan, plan_arena
from ...core.errors import UnsupportedError
from ..analysis.workspace import WorkspaceMeter
from ..ir import VIEW_OPS, is_op, shape_values, tensor_bytes

__all__ = ["ArenaPlanMemory", "FunctionPlan", "plan_function", "plan_module", "collect_plans",
           "plannable_live_peak"]

log = logging.getLogger("tvm_memsched")

_BUILTIN_ALLOC = "relax.builtin.alloc_tensor"


@dataclass
class FunctionPlan:
    """The outcome of planning one function."""

    function: str
    status: str                                   # "planned", "no allocations", "fallback: <reason>"
    arena_bytes: dict = field(default_factory=dict)     # scope -> arena size
    lower_bound_bytes: dict = field(default_factory=dict)  # scope -> live peak (aligned)
    buffers: int = 0
    unplanned_outputs: int = 0
    method: str = ""
    optimal: bool = False
    layout: list = field(default_factory=list)    # (name, scope, offset, size, start, end)
    workspace: list = field(default_factory=list)  # (call ordinal, kernel name, offset, size) per kernel call
    inputs: list = field(default_factory=list)     # io=True: arena offset of each function input
    inplace: int = 0                               # kernel outputs placed over a dying input
    inplace_kernels: list = field(default_factory=list)  # kernels of those calls (buffers may alias)
    call_steps: list = field(default_factory=list)  # the step (binding index) of each kernel call, by ordinal

    @property
    def total_bytes(self) -> int:
        return sum(self.arena_bytes.values())

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("layout")
        d.pop("call_steps")
        d["total_bytes"] = self.total_bytes
        return d


def _vars_in(expr) -> list:
    return [v for v in relax.analysis.free_vars(expr) if isinstance(v, relax.Var)]


class _Seq:
    """Planning state of one SeqExpr (a function body or an If branch)."""

    def __init__(self, seq, step0: int, parent: "_Seq | None" = None):
        self.seq = seq
        self.parent = parent
        self.owners: dict = {}         # alloc var -> (binding, scope, device index, size, start)
        self.aliases: dict = {}        # var -> set of alloc vars it may point into
        self.last_use: dict = {}       # alloc var -> last step any alias is used
        self.subplans: dict = {}       # If binding var -> (list of branch _Seq, step)
        self.escaping: set = set()     # alloc vars reaching the SeqExpr's result
        self.kernels: list = []        # (step, ordinal, kernel name, workspace bytes) per kernel call
        self.inplace: list = []        # (step, input alloc, output alloc, kernel, shift) the kernel allows
        self.step0 = step0
        self.steps = 0

    def alias_of(self, var) -> set:
        """Alloc vars ``var`` may point into (looking through enclosing scopes)."""
        s = self
        while s is not None:
            if var in s.aliases:
                return s.aliases[var]
            s = s.parent
        return set()


def _inplace_candidates(st: _Seq, step: int, call, analyzer) -> None:
    """Record (step, input alloc, output alloc) pairs a kernel call may write in place."""
    args = list(call.args)
    n_out = 0
    for a in reversed(args):      # outputs: trailing allocations not used since they were made
        if isinstance(a, relax.Var) and a in st.owners and st.owners[a][0] is not None \
                and st.last_use.get(a) == st.owners[a][4]:
            n_out += 1
        else:
            break
    if not n_out:
        return
    for i, o, shift in analyzer.pairs(call.op, args, n_out):
        src, dst = args[i], args[o]
        if not isinstance(src, relax.Var):
            continue
        owners = st.alias_of(src)
        if len(owners) != 1:
            continue
        (a,) = owners
        if a not in st.owners or not isinstance(getattr(src, "ty", None), relax.TensorType):
            continue
        if tensor_bytes(src.ty, "kernel input") != st.owners[a][3]:
            continue                  # a partial view: its bytes are not the whole buffer
        if any(j != i and isinstance(x, relax.Var) and a in st.alias_of(x)
               for j, x in enumerate(args[:len(args) - n_out])):
            continue                  # the buffer is also read as another input (a view, or passed twice),
            #                           whose accesses the kernel's proof for input i does not cover
        st.inplace.append((step, a, dst, call.op.name_hint, shift))


def _analyze(seq, step0: int, parent: _Seq | None = None, workspace=None, params=(), inplace=None) -> _Seq:
    st = _Seq(seq, step0, parent)
    for p in params:                 # function inputs planned in the arena: resident from the start
        size = tensor_bytes(p.ty, f"input '{p.name}'")
        st.owners[p] = (None, "global", 0, size, step0)
        st.aliases[p] = {p}
        st.last_use[p] = step0
    step = step0
    for block in seq.blocks:
        for b in block.bindings:
            var, value = b.var, b.value
            used = _vars_in(value)
            if workspace is not None and isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.GlobalVar):
                size = workspace(value.op)
                st.kernels.append((step, len(st.kernels), value.op.name_hint, size))
            if inplace is not None and isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.GlobalVar):
                _inplace_candidates(st, step, value, inplace)
            for u in used:
                for o in st.alias_of(u):
                    st.last_use[o] = step
            if is_op(value, _BUILTIN_ALLOC):
                shape = shape_values(value.args[0])
                if shape is None:
                    raise UnsupportedError(f"allocation '{var.name}' has a dynamic shape")
                dtype = str(value.args[1].value) if hasattr(value.args[1], "value") else str(value.args[1])
                dev = int(value.args[2]) if isinstance(value.args[2], (int, tvm.tirx.IntImm)) else 0
                scope = str(value.args[3].value) if len(value.args) > 3 else "global"
                size = tensor_bytes(relax.TensorType(shape, dtype), f"allocation '{var.name}'")
                st.owners[var] = (b, scope, dev, size, step)
                st.aliases[var] = {var}
                st.last_use[var] = step
            elif isinstance(value, relax.If):
                branches = [_analyze(value.true_branch, step, st, workspace, inplace=inplace),
                            _analyze(value.false_branch, step, st, workspace, inplace=inplace)]
                st.subplans[var] = (branches, step)
                # the result may alias outer buffers (passed through) or branch ones (escaping, unplanned)
                result = set()
                for br in branches:
                    for u in _vars_in(br.seq.body):
                        result |= br.alias_of(u)
                if result:
                    st.aliases[var] = result
            else:
                alias = set()
                is_alias = (isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem))
                            or isinstance(b, relax.MatchCast)
                            or (isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op)
                                and value.op.name in VIEW_OPS))
                returns_tensor = isinstance(getattr(var, "ty", None), (relax.TensorType, relax.TupleType))
                if is_alias or (isinstance(value, tvm.ir.Call) and returns_tensor):
                    # views alias their input; unknown tensor-returning calls might too (be safe)
                    for u in used:
                        alias |= st.alias_of(u)
                if alias:
                    st.aliases[var] = alias
            step += 1
    for u in _vars_in(seq.body):
        for o in st.alias_of(u):
            st.escaping.add(o)
            st.last_use[o] = step
    st.steps = step - step0
    return st


def _collect_buffers(st: _Seq, alignment: int, io: bool = False):
    """Buffers of this SeqExpr per scope, with If regions as virtual buffers.

    ``io``: buffers reaching the result are planned too (live to the end).
    Returns (buffers by scope, region plans: If var -> [(branch _Seq, {scope: plan})]).
    """
    by_scope: dict = {}
    planned = {v for v in st.owners if io or v not in st.escaping}
    takes: dict = {}                  # output alloc -> (step, input alloc) it may take over
    taken: set = set()
    def saving(item):
        _step, a, o, _kernel, shift = item
        return -max(0, min(st.owners[o][3] - shift, st.owners[a][3]))

    for step, a, o, _kernel, shift in sorted(st.inplace, key=saving):   # the largest overlap first
        if a in planned and o in planned and a not in taken and o not in takes \
                and st.last_use.get(a) == step and st.owners[a][1] == st.owners[o][1]:
            takes[o] = (step, a, shift)
            taken.add(a)
    for var, (b, scope, dev, size, start) in st.owners.items():
        if var not in planned:
            continue
        end = max(start, st.last_use.get(var, start))
        alias = None
        if var in takes:              # born at the call that may write it over its dying input
            step, a, shift = takes[var]
            alias = (f"{st.owners[a][4]}:{a.name}", -shift)
            start_at = step
        else:
            start_at = start
        by_scope.setdefault(scope, []).append(Buffer(f"{start}:{var.name}", size, start_at, max(start_at, end),
                                                     alias))
    for step, ordinal, kernel, size in st.kernels:
        if size:
            by_scope.setdefault("global", []).append(Buffer(f"{step}:ws{ordinal}:{kernel}", size, step, step))
    regions: dict = {}
    for var, (branches, step) in st.subplans.items():
        sub = []
        for br in branches:
            bufs, inner = _collect_buffers(br, alignment)
            plans = {scope: plan_arena(bl, alignment) for scope, bl in bufs.items()}
            sub.append((br, plans, inner))
        regions[var] = sub
        scopes = {s for _, plans, _ in sub for s in plans}
        for scope in scopes:
            size = max((plans[scope].size for _, plans, _ in sub if scope in plans), default=0)
            if size:
                by_scope.setdefault(scope, []).append(Buffer(f"{step}:if:{var.name}", size, step, step))
    return by_scope, regions


def _offsets(st: _Seq, plans: dict, regions: dict, base: dict, out: dict, io: bool = False) -> None:
    """Absolute offset for every planned alloc var (into ``out``), recursively into branches."""
    for var, (b, scope, dev, size, start) in st.owners.items():
        if var in st.escaping and not io:
            continue
        out[var] = (scope, base.get(scope, 0) + plans[scope].offsets[f"{start}:{var.name}"], dev)
    for var, sub in regions.items():
        step = st.subplans[var][1]
        for br, bplans, inner in sub:
            bbase = {scope: base.get(scope, 0) + plans[scope].offsets[f"{step}:if:{var.name}"]
                     for scope in bplans}
            _offsets(br, bplans, inner, bbase, out)


def _rewrite_seq(seq, placed: dict, arenas: dict):
    blocks = []
    for block in seq.blocks:
        new = []
        for b in block.bindings:
            var, value = b.var, b.value
            if var in placed:
                scope, off, dev = placed[var]
                shape, dtype = value.args[0], value.args[1]
                alloc = relax.op.memory.alloc_tensor(arenas[scope], off, shape, dtype, dev)
                if off == 0:
                    new.append(relax.VarBinding(var, alloc))
                else:
                    raw = relax.Var(var.name + "_raw", var.ty)
                    new.append(relax.VarBinding(raw, alloc))
                    new.append(relax.VarBinding(var, relax.op.memory.ensure_zero_offset(raw)))
                continue
            if isinstance(value, relax.If):
                value = relax.If(value.cond, _rewrite_seq(value.true_branch, placed, arenas),
                                 _rewrite_seq(value.false_branch, placed, arenas), value.span)
                b = relax.VarBinding(var, value)
            new.append(b)
        blocks.append(type(block)(new, block.span) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(new, block.span))
    return relax.SeqExpr(blocks, seq.body, seq.span)


def plan_function(func, name: str = "main", *, alignment: int = 64, exact: bool = True,
                  time_limit: float | None = 2.0, workspace=None, io: bool = False, inplace=None):
    """Plan ``func`` into one arena per storage scope. Returns ``(new func, FunctionPlan)``.

    ``workspace``: optional callable GlobalVar -> bytes; each top-level kernel call
    then also gets its workspace planned in the global arena, live only during
    the call (``FunctionPlan.workspace`` gives the offsets, in call order). This is
    for targets whose runtime serves ``TVMBackendAllocWorkspace`` from the arena
    (the microcontroller export); the VM allocates workspace itself.

    ``io``: place the function's inputs (resident from the start to their last
    use) and its results (from their producer to the end) in the global arena
    too, as TFLite Micro does; ``FunctionPlan.inputs`` gives each input's offset.
    The planned function then returns arena memory: for exports that own the
    arena (the microcontroller C export), not for the VM.

    ``inplace``: an :class:`~tvm_memsched.relax.analysis.inplace.InplaceAnalyzer` of the module; kernel
    outputs may then share memory with inputs that die at the call (see the module docstring).

    Raises :class:`UnsupportedError` when the function cannot be planned statically.
    """
    params = [p for p in func.params if isinstance(p.ty, relax.TensorType)] if io else []
    st = _analyze(func.body, 0, workspace=workspace, params=params, inplace=inplace)
    by_scope, regions = _collect_buffers(st, alignment, io)
    plans = {scope: plan_arena(bufs, alignment, exact=exact, time_limit=time_limit)
             for scope, bufs in by_scope.items()}
    for scope, bufs in by_scope.items():     # never trust a plan: live buffers overlap only as declared
        check_plan(bufs, plans[scope].offsets, alignment)
    n_buffers = sum(len(v) for v in by_scope.values())
    if not n_buffers:
        return func, FunctionPlan(name, "no allocations", unplanned_outputs=len(st.escaping))
    placed: dict = {}
    _offsets(st, plans, regions, {}, placed, io)
    placed_all = dict(placed)
    inputs = [placed.pop(p)[1] for p in params]
    arenas = {scope: relax.Var(f"arena_{scope.replace('.', '_') or 'global'}", relax.AnyType())
              for scope in plans if plans[scope].size}
    body = _rewrite_seq(func.body, placed, arenas)
    storage = [relax.VarBinding(v, relax.op.memory.alloc_storage(relax.ShapeExpr([plans[s].size]), 0, s, "uint8"))
               for s, v in arenas.items()]
    blocks = list(body.blocks)
    if blocks and not isinstance(blocks[0], relax.DataflowBlock):
        blocks[0] = relax.BindingBlock(storage + list(blocks[0].bindings), blocks[0].span)
    else:
        blocks.insert(0, relax.BindingBlock(storage))
    new_body = relax.BlockBuilder().normalize(relax.SeqExpr(blocks, body.body, body.span))
    new_func = relax.Function(func.params, new_body, func.ret_ty, func.is_pure, func.attrs, func.span)
    layout = []
    for scope, bufs in by_scope.items():
        for bf in bufs:
            layout.append((bf.name, scope, plans[scope].offsets[bf.name], bf.size, bf.start, bf.end))
    ws = [(ordinal, kernel, plans["global"].offsets[f"{step}:ws{ordinal}:{kernel}"] if size else 0, size)
          for step, ordinal, kernel, size in st.kernels]
    fp = FunctionPlan(name, "planned", {s: p.size for s, p in plans.items()},
                      {s: p.lower_bound for s, p in plans.items()}, n_buffers, len(st.escaping),
                      ",".join(sorted({p.method for p in plans.values()})), all(p.optimal for p in plans.values()),
                      layout, ws, inputs, sum(p.stats.get("aliases_taken", 0) for p in plans.values()),
                      _taken_kernels(st, placed_all), [step for step, *_ in st.kernels])
    return new_func, fp


def _taken_kernels(st: _Seq, placed: dict) -> list:
    """Kernels of the calls whose output the plan put over (part of) its input, recursively into branches."""
    out = set()
    for _step, a, o, kernel, _shift in st.inplace:
        if a in placed and o in placed and placed[a][0] == placed[o][0] and placed[a][2] == placed[o][2]:
            (pa, pb), (sa, sb) = (placed[a][1], placed[o][1]), (st.owners[a][3], st.owners[o][3])
            if pa < pb + sb and pb < pa + sa:
                out.add(kernel)
    for branches, _ in st.subplans.values():
        for br in branches:
            out.update(_taken_kernels(br, placed))
    return sorted(out)


def plan_module(mod, *, alignment: int = 64, exact: bool = True, time_limit: float | None = 2.0,
                workspace=None, io: bool = False, inplace: bool = False, target=None):
    """Plan every Relax function of ``mod``; unplannable ones go to TVM's StaticPlanBlockMemory.

    ``workspace``, ``io``: see :func:`plan_function`; ``inplace``: let kernel outputs take over
    dying inputs where the kernels' TIR allows it
    (:class:`~tvm_memsched.relax.analysis.inplace.InplaceAnalyzer`); the kernels that alias lose ``tirx.noalias``
    (on a ``target``, default the current one, whose code generator does not honour it per kernel they are
    compiled apart, :func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`). Returns ``(new module,
    [FunctionPlan])``.
    """
    from ..analysis.inplace import InplaceAnalyzer

    analyzer = InplaceAnalyzer(mod) if inplace else None
    new_mod = mod.clone()
    reports = []
    fallback = False
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        try:
            new_func, fp = plan_function(func, gv.name_hint, alignment=alignment, exact=exact,
                                         time_limit=time_limit, workspace=workspace, io=io, inplace=analyzer)
        except UnsupportedError as e:
            log.warning("ArenaPlanMemory: %s falls back to StaticPlanBlockMemory: %s", gv.name_hint, e)
            reports.append(FunctionPlan(gv.name_hint, f"fallback: {e}"))
            fallback = True
            continue
        new_mod[gv] = new_func
        reports.append(fp)
    if analyzer is not None:
        from .aliasing import allow_aliasing

        new_mod = allow_aliasing(new_mod, {k for r in reports for k in r.inplace_kernels}, target)
    if fallback:
        new_mod = relax.transform.StaticPlanBlockMemory()(new_mod)
    return new_mod, reports


def collect_plans(mod) -> dict:
    """Planned storage per function of an already planned module: ``{function: [bytes of each alloc_storage]}``.

    Counts ``R.memory.alloc_storage`` bindings, i.e. what StaticPlanBlockMemory or
    ArenaPlanMemory planned (outputs are still ``R.builtin.alloc_tensor`` at that point).
    """
    out = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        sizes = []

        def visit(seq):
            for block in seq.blocks:
                for b in block.bindings:
                    if is_op(b.value, "relax.memory.alloc_storage"):
                        vals = shape_values(b.value.args[0])
                        sizes.append(vals[0] if vals else 0)
                    elif isinstance(b.value, relax.If):
                        visit(b.value.true_branch)
                        visit(b.value.false_branch)

        visit(func.body)
        out[gv.name_hint] = sizes
    return out


def plannable_live_peak(mod, alignment: int = 1, inplace: bool = False) -> int:
    """Sum over Relax functions of the live peak of the tensors a planner places.

    ``mod`` must be at the planner's input (after ``CallTIRRewrite``). This is the
    smallest storage any planner can reach for the given binding order (function
    outputs and dynamic allocations excluded), used to judge planners. ``inplace``: with
    the in-place overlaps kernels allow.
    """
    from ...core.arena import live_peak
    from ..analysis.inplace import InplaceAnalyzer

    analyzer = InplaceAnalyzer(mod) if inplace else None

    total = 0
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        try:
            st = _analyze(func.body, 0, inplace=analyzer)
        except UnsupportedError:
            continue
        by_scope, _ = _collect_buffers(st, alignment)
        total += sum(live_peak(bufs, alignment) for bufs in by_scope.values())
    return total


@tvm.transform.module_pass(opt_level=0, name="ArenaPlanMemory")
class ArenaPlanMemory:
    """Plan every intermediate tensor at a byte offset in one arena per function and scope.

    Parameters
    ----------
    alignment : int
        Offset alignment in bytes (64 keeps ``ensure_zero_offset`` zero-copy on CPU).
    exact : bool
        Also run CP-SAT on the placement when the greedy portfolio does not reach
        the live-peak lower bound (within ``time_limit``; skipped without OR-Tools).
    time_limit : float
        Seconds for the placement search per function and scope.
    workspace : {None, "lowered", "tir"}
        Also plan every kernel call's workspace into the arena (for runtimes that
        serve ``TVMBackendAllocWorkspace`` from it, like the microcontroller export);
        ``report[i].workspace`` then holds the offsets. The VM ignores them.
    target : Target, optional
        Target for measuring workspace (default: the current target).
    inplace : bool
        Let a kernel output share memory with a kernel input that dies at the call
        when the kernel's TIR proves it safe (:mod:`tvm_memsched.relax.analysis.inplace`). The kernels that
        alias lose ``tirx.noalias`` (on targets whose code generator does not honour it per kernel, LLVM,
        they are compiled apart: :func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`).
    """

    def __init__(self, alignment: int = 64, exact: bool = True, time_limit: float | None = 2.0,
                 workspace: str | None = None, target=None, inplace: bool = True):
        self.alignment, self.exact, self.time_limit = alignment, exact, time_limit
        self.workspace, self.target, self.inplace = workspace, target, inplace
        self.report = []

    def transform_module(self, mod, ctx):
        meter = None
        if self.workspace is not None:
            target = self.target if self.target is not None else tvm.target.Target.current(allow_none=True)
            meter = WorkspaceMeter(mod, target, self.workspace)
        new_mod, self.report = plan_module(mod, alignment=self.alignment, exact=self.exact,
                                           time_limit=self.time_limit, workspace=meter, inplace=self.inplace,
                                           target=self.target)
        return new_mod
