"""Element-wise producers computed inside their only consumer: the ``InlineProducers`` pass (after FuseTIR).

TVM's FuseOps fuses element-wise operators *after* a convolution into it, never
*before*: in a pre-activation network (DenseNet's BN-ReLU-Conv, ResNet-v2) the
``relu`` of a tensor that stays alive for a later concatenation or residual
add is a whole second copy of it, and the live peak holds both. No order and
no in-place overlap removes it (the input is still needed, so the ``relu``
cannot overwrite it).

This pass computes such a producer inside its consumer's kernel instead:
for a ``call_tir`` of a kernel TVM classifies element-wise or broadcast
(``op_pattern`` <= 1) whose result has exactly one use, the argument of
another ``call_tir``, the two calls are grouped into one primitive function,
TVM's ``FuseTIR`` merges the kernels, and the producer's stage is inlined
(``compute_inline``) into the stages reading it, so the consumer reads
``max(x, 0)`` where it read the ``relu`` output. The tensor disappears from
the program. Only cheap producers qualify (arithmetic, ``max`` / ``min``,
casts and selects: no transcendental calls, which the consumer would repeat
for every read), and only when the producer's result is at least as large as
each of its tensor inputs (the inputs then live until the consumer, which
must not cost more than the result saved). A merged kernel whose producer
stage cannot be inlined is dropped and the two calls stay as they were; a pair whose kernels give the
shared tensor different buffer types (TVM's kernels index with int64, our integer kernels with int32),
which FuseTIR cannot merge, is not grouped.

Every element is computed by the same expression on the same values, so
results are bit-identical to TVM's build.

Example
-------
>>> from tvm_memsched.relax.testing import preactivation_module
>>> import tvm
>>> from tvm_memsched.relax.target import stages
>>> st = stages("llvm")
>>> with tvm.target.Target({"kind": "llvm"}):
...     fused = tvm.transform.Sequential(st["legalize"])(preactivation_module())
>>> new, merged = inline_producers(fused)
>>> merged
[('relu', 'fused_conv2d_add')]
"""

from __future__ import annotations

import logging
from collections import Counter

import tvm
import tvm_ffi
from tvm import relax, tirx

from ..analysis.workspace import compacted_workspace_bytes, walk_stmts
from ..ir import static_nbytes, var_occurrences
from .shrink_workspace import shrink_func

__all__ = ["InlineProducers", "inline_producers"]

log = logging.getLogger(__name__)

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CHEAP_CALLS = ("if_then_else", "likely", "reinterpret")
_BINARY = tuple(getattr(tirx, n) for n in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
                                           "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or") if hasattr(tirx, n))


def _is_call_tir(value) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR)


def _cheap_expr(e) -> bool:
    """Arithmetic, comparisons, casts, selects and loads only (anything else counts as expensive)."""
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, (tirx.IntImm, tirx.FloatImm, tvm.ir.Var, tvm.ir.StringImm)):
            continue
        if isinstance(e, tvm.ir.TensorLoad):
            stack.extend(e.indices)
        elif isinstance(e, tvm.ir.Call):
            if not str(getattr(e.op, "name", e.op)).endswith(_CHEAP_CALLS):
                return False
            stack.extend(e.args)
        elif isinstance(e, tirx.Select):
            stack.extend([e.condition, e.true_value, e.false_value])
        elif isinstance(e, (tirx.Cast, tirx.Not)):
            stack.append(e.value if isinstance(e, tirx.Cast) else e.a)
        elif isinstance(e, _BINARY):
            stack.extend([e.a, e.b])
        else:
            return False
    return True


def _cheap(func) -> bool:
    """Element-wise or broadcast (TVM's op pattern) and free of calls the consumer would repeat."""
    attrs = func.attrs
    if attrs is None or "op_pattern" not in attrs or int(attrs["op_pattern"]) > 1:
        return False
    stores = []
    walk_stmts(func.body, lambda st: stores.append(st) if isinstance(st, tirx.BufferStore) else None)
    return bool(stores) and all(_cheap_expr(st.value) for st in stores)


def _uses(func) -> dict:
    return Counter(var_occurrences(func.body))


def _producers(mod, block, uses, exclude) -> dict:
    """consumer binding index -> [producer binding indices] for the block's eligible pairs."""
    index = {b.var: k for k, b in enumerate(block.bindings)}
    groups: dict = {}
    for k, b in enumerate(block.bindings):
        if not _is_call_tir(b.value) or any(b.var.same_as(e) for e in exclude):
            continue
        for a in b.value.args[1].fields:
            j = index.get(a) if isinstance(a, relax.Var) else None
            if j is None or uses.get(a) != 1 or j in groups or any(j in v for v in groups.values()):
                continue
            p = block.bindings[j].value
            if not _is_call_tir(p) or not isinstance(mod[p.args[0]], tirx.PrimFunc) \
                    or not _cheap(mod[p.args[0]]) or isinstance(p.ty, relax.TupleType):
                continue
            out = static_nbytes(p.ty)
            ins = [static_nbytes(x.ty) for x in p.args[1].fields if isinstance(x, relax.Var)]
            if out is None or any(n is None or n > out for n in ins):
                continue
            if not _same_buffers(mod, p, b.value, a):
                continue
            groups.setdefault(k, []).append(j)
    return groups


def _same_buffers(mod, producer, consumer, var) -> bool:
    """FuseTIR maps one Relax value to one TIR buffer: the producer's output buffer must have the same type
    (shape, index types, dtype) as every consumer parameter ``var`` is passed to, and an argument both calls
    take must have the same buffer type in both (TVM's kernels index with int64, ours with int32)."""
    pf, cf = mod[producer.args[0]], mod[consumer.args[0]]
    bufs: dict = {}
    p_args = list(producer.args[1].fields)
    c_args = list(consumer.args[1].fields)
    if len(pf.params) != len(p_args) + 1 or len(cf.params) < len(c_args):
        return False
    for a, q in list(zip(p_args, pf.params)) + [(var, pf.params[len(p_args)])] + list(zip(c_args, cf.params)):
        if isinstance(a, relax.Var):
            bufs.setdefault(a, []).append(q.ty)
    return all(tvm_ffi.structural_equal(t[0], u) for t in bufs.values() for u in t[1:])


def _group_function(block, consumer: int, producers: list):
    """A primitive Relax function computing the producers then the consumer, and the outer arguments."""
    params, outer = [], []

    def param(a):
        for o, q in zip(outer, params):
            if o.same_as(a):
                return q
        q = relax.Var(f"a{len(params)}", a.ty)
        params.append(q)
        outer.append(a)
        return q

    inner = []
    bindings = []
    for j in producers:
        b = block.bindings[j]
        v = relax.DataflowVar(f"p{j}", b.var.ty)
        bindings.append(relax.VarBinding(v, relax.call_tir(b.value.args[0], relax.Tuple(
            [param(a) for a in b.value.args[1].fields]), b.var.ty)))
        inner.append((b.var, v))
    c = block.bindings[consumer]
    args = []
    for a in c.value.args[1].fields:
        hit = next((v for var, v in inner if var.same_as(a)), None)
        args.append(hit if hit is not None else param(a))
    ret = relax.Var("ret", c.var.ty)
    bindings.append(relax.VarBinding(ret, relax.call_tir(c.value.args[0], relax.Tuple(args), c.var.ty)))
    fn = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(bindings)], ret), c.var.ty, True)
    return fn.with_attr("Primitive", True), outer


def _inlined(func) -> tuple:
    """(func with its non-reduction internal stages inlined, its workspace bytes after compaction)."""
    g, _ = shrink_func(func, epilogues=False)
    return g, compacted_workspace_bytes(g)


def _merge_once(mod, function: str, exclude: list):
    """One round: ``(module, merged pairs, consumer vars whose merged kernel kept the producer stage)``."""
    func = mod[function]
    uses = _uses(func)
    bb = relax.BlockBuilder(mod)
    new_blocks, pending = [], []
    for block in func.body.blocks:
        groups = _producers(mod, block, uses, exclude) if isinstance(block, relax.DataflowBlock) else {}
        if not groups:
            new_blocks.append(block)
            continue
        drop = {j for v in groups.values() for j in v}
        out = []
        for k, b in enumerate(block.bindings):
            if k in drop:
                continue
            if k in groups:
                fn, outer = _group_function(block, k, groups[k])
                names = [block.bindings[j].value.args[0].name_hint for j in groups[k]]
                consumer = b.value.args[0]
                gv = bb.add_func(fn, "fused_" + "_".join(names + [consumer.name_hint]))
                pending.append((b.var, "+".join(names), consumer))
                out.append(relax.VarBinding(b.var, relax.Call(gv, outer)))
            else:
                out.append(b)
        new_blocks.append(relax.DataflowBlock(out))
    if not pending:
        return mod, [], []
    staged = bb.get()
    staged[function] = relax.Function(func.params, relax.SeqExpr(new_blocks, func.body.body), func.ret_ty,
                                      func.is_pure, func.attrs, func.span)
    try:
        grouped = relax.transform.FuseTIR()(staged)
    except Exception as e:  # noqa: BLE001 - a merge TVM refuses: the program stays as it was
        log.warning("InlineProducers: FuseTIR refused the merged kernels; none merged (%s)",
                    str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__)
        return mod, [], []
    kernels = {}
    for blk in grouped[function].body.blocks:
        for b in blk.bindings:
            if _is_call_tir(b.value):
                kernels[b.var] = b.value.args[0]
    merged, refused = [], []
    for var, names, consumer in pending:
        kernel = next((gv for v, gv in kernels.items() if v.same_as(var)), None)
        if kernel is None:
            refused.append(var)
            continue
        g, ws = _inlined(grouped[kernel])
        if ws > _inlined(mod[consumer])[1]:          # the producer is still a stage of its own
            refused.append(var)
            continue
        attrs = grouped[kernel].attrs
        grouped[kernel] = g.with_attrs(attrs) if attrs is not None else g
        merged.append((names, consumer.name_hint))
    return relax.transform.DeadCodeElimination()(grouped), merged, refused


def inline_producers(mod, function: str = "main", rounds: int = 4) -> tuple["tvm.IRModule", list]:
    """``(module, [(producer kernels, consumer kernel)])`` with eligible element-wise producers merged into
    their only consumer (see the module docstring); ``mod`` is after FuseTIR. ``rounds`` bounds how many
    producers deep a chain is merged."""
    if function not in [gv.name_hint for gv in mod.get_global_vars()] \
            or not isinstance(mod[function], relax.Function) or not isinstance(mod[function].body, relax.SeqExpr):
        return mod, []
    merged_all, exclude = [], []
    for _ in range(rounds):
        new, merged, refused = _merge_once(mod, function, exclude)
        if refused:        # leave those consumers as they were and merge the others again
            log.info("InlineProducers: %d merged kernel(s) kept a producer stage; left unmerged", len(refused))
            exclude += refused
            new, merged, refused = _merge_once(mod, function, exclude)
            if refused:
                return mod, merged_all
        if not merged:
            break
        mod = new
        merged_all += merged
    return mod, merged_all


@tvm.transform.module_pass(opt_level=0, name="InlineProducers")
class InlineProducers:
    """Compute cheap element-wise producers inside their only consumer's kernel (see the module docstring).

    Runs after FuseTIR (before :class:`~tvm_memsched.transform.ShrinkWorkspace`). ``.merged`` holds the
    ``(producer, consumer)`` kernel pairs of the last run.

    Parameters
    ----------
    function : str
        The Relax function whose bindings are merged (default ``"main"``).
    """

    def __init__(self, function: str = "main"):
        self.function = function
        self.merged: list = []

    def transform_module(self, mod, ctx):
        new, self.merged = inline_producers(mod, self.function)
        return new
