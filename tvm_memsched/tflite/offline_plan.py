"""TFLite Micro offline memory plans: our arena offsets as ``OfflineMemoryAllocation`` metadata.

TFLite Micro's ``GreedyMemoryPlanner`` accepts precomputed tensor offsets from
a metadata entry named ``OfflineMemoryAllocation`` whose buffer holds int32
``[version=1, subgraph=0, n, offset_0 ... offset_{n-1}]``:

* ``n`` must equal the total tensor count of *all* subgraphs (TFLM refuses the
  model otherwise);
* ``offset_i`` is a byte offset from the start of the arena's non-persistent
  ("head") section, or -1 to let TFLM plan tensor ``i`` itself; constants and
  variable tensors are never planned, whatever their entry says;
* offsets are used verbatim: TFLM checks neither alignment nor overlap, so a
  wrong plan silently corrupts results. We therefore keep every offset
  16-byte aligned (TFLM's own alignment) and verify the plan against the
  schedule's lifetimes with :func:`tvm_memsched.core.arena.check_plan`;
* kernel scratch buffers (``RequestScratchBufferInArena``) are still planned
  online, into the gaps around the offline buffers;
* only the greedy planner honours the plan (not ``kPreserveAllTensors``), and
  TFLM applies the offsets of subgraph 0 to the tensors of every further
  subgraph by local index, so plans are written only for models whose further
  subgraphs have nothing for the arena: single-subgraph models, and streaming
  models whose ``CALL_ONCE`` initialisation subgraph holds only constants and
  resource handles (:func:`check_plannable`). Their state lives in TFLM's
  persistent tail, not in the planned section.

The plan covers every activation of subgraph 0 (graph inputs and outputs
included, as TFLM allocates them in the arena) over its lifetime in the given
operator order, each buffer rounded up to 16 bytes. Offsets come from
:func:`tvm_memsched.core.arena.plan_arena`'s greedy portfolio or from a
replica of TFLM's own greedy planner (under every tensor numbering
:mod:`.optimize` may choose), whichever is smallest, so the plan is never
larger than what TFLM's planner computes for the same order; a deterministic
CP-SAT placement then tries to close the gap to the live lower bound.

Example
-------
>>> from tvm_memsched import zoo
>>> from tvm_memsched.tflite.reader import read_tflite
>>> tg = read_tflite(zoo.tflite("swiftnet_like", "int8"))
>>> plan = plan_offline(tg, tg.graph.topo)
>>> plan.arena_bytes <= plan.tflm_greedy_bytes, all(o % 16 == 0 for o in plan.offsets if o >= 0)
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..core.arena import Buffer, buffers_from_schedule, check_plan, live_peak, plan_arena
from ..core.errors import UnsupportedError
from . import builder
from .reader import TFLiteGraph
from .reorder import OFFLINE_PLAN_NAME

__all__ = ["OfflinePlan", "plan_offline", "tflm_greedy_plan", "tflm_tensor_order", "plan_buffers",
           "attach_offline_plan", "read_offline_plan", "check_plannable", "plannable", "arena_tensors", "TFLM_ALIGNMENT",
           "TIE_ORDERS"]

#: TFLM's ``MicroArenaBufferAlignment()``: every planned buffer is rounded up to this many bytes.
TFLM_ALIGNMENT = 16


def _align(n: int, a: int = TFLM_ALIGNMENT) -> int:
    return -(-int(n) // a) * a


@dataclass
class OfflinePlan:
    """Offsets for one operator order.

    ``offsets`` has one entry per tensor of subgraph 0 (-1: not planned);
    ``arena_bytes`` is the plan's extent (the TFLM head it implies, before
    scratch buffers); ``lower_bound_bytes`` the largest aligned live total of
    one step; ``tflm_greedy_bytes`` what a replica of TFLM's greedy planner
    gives for the same order (its head without a plan, scratch buffers aside).
    """

    offsets: list
    arena_bytes: int
    lower_bound_bytes: int
    tflm_greedy_bytes: int
    method: str
    optimal: bool
    by_name: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "tflm_greedy_bytes": self.tflm_greedy_bytes, "method": self.method, "optimal": self.optimal,
                "planned_tensors": sum(1 for o in self.offsets if o >= 0)}


def plan_buffers(tg: TFLiteGraph, order: Sequence, graph=None) -> list[Buffer]:
    """The buffers TFLM allocates for subgraph 0 in ``order``: every non-empty activation over its
    lifetime (graph inputs from step 0, graph outputs to the end), named like the graph tensors.

    ``graph``: ``tg.graph`` with in-place declarations (:mod:`.inplace`); outputs that take over a
    dying input in ``order`` then carry the alias.
    """
    g = tg.graph if graph is None else graph
    bufs = [b for b in buffers_from_schedule(g, order, include_workspace=False, include_inputs=True,
                                             inplace=graph is not None) if b.size > 0]
    kept = {b.name for b in bufs}
    return [b if b.alias is None or b.alias[0] in kept else Buffer(b.name, b.size, b.start, b.end)
            for b in bufs]


#: Orders among equally sized buffers that :func:`tflm_tensor_order` can impose on TFLM's greedy planner
#: by renumbering tensors (``None``: the file's tensor numbering). Keys of a buffer ``b`` with lifetime
#: ``[start, end]``.
TIE_ORDERS = {
    "start": lambda b: (b.start, b.end),
    "-start": lambda b: (-b.start, -b.end),
    "end": lambda b: (b.end, b.start),
    "-end": lambda b: (-b.end, -b.start),
    "length": lambda b: (b.end - b.start, b.start),
    "-length": lambda b: (b.start - b.end, b.start),
}


def _tflm_sequence(tg: TFLiteGraph, order: Sequence, tie: str | None) -> list[Buffer]:
    """The order in which TFLM's greedy planner places the buffers (see :func:`tflm_greedy_plan`)."""
    bufs = plan_buffers(tg, order)
    index = tg.tensor_ids
    if tie is None:   # TFLM: added in tensor-index order, taken from the back, stable-sorted by size
        seq = sorted(bufs, key=lambda b: -index[b.name])
    else:
        key = TIE_ORDERS[tie]
        seq = sorted(bufs, key=lambda b: (key(b), -index[b.name]))
    seq.sort(key=lambda b: -_align(b.size))
    return seq


def tflm_greedy_plan(tg: TFLiteGraph, order: Sequence, tie: str | None = None) -> tuple[dict, int]:
    """Replica of TFLM's ``GreedyMemoryPlanner`` without offline offsets: ``(offsets by name, head)``.

    TFLM adds buffers in tensor-index order, sorts them by aligned size
    (descending; equal sizes end up in reverse index order) and puts each at
    the lowest offset where it fits between the already placed buffers whose
    lifetimes overlap its own (inclusive ranges). ``tie`` (a key of
    :data:`TIE_ORDERS`) predicts the plan after :func:`tflm_tensor_order`'s
    renumbering. Kernel scratch buffers are not modelled.
    """
    placed: list[tuple[int, int, int, int]] = []   # (offset, end, first, last)
    offsets: dict[str, int] = {}
    head = 0
    for b in _tflm_sequence(tg, order, tie):
        size = _align(b.size)
        active = sorted((o, e) for o, e, s, l in placed if s <= b.end and b.start <= l)
        cand = 0
        for o, e in active:
            if o - cand >= size:
                break
            cand = max(cand, e)
        offsets[b.name] = cand
        placed.append((cand, cand + size, b.start, b.end))
        head = max(head, cand + size)
    return offsets, head


def tflm_tensor_order(tg: TFLiteGraph, order: Sequence, tie: str) -> list[int]:
    """A tensor numbering of subgraph 0 (``new_order[i]`` = old index) that makes TFLM's greedy planner
    place equally sized activations in the ``tie`` order; constants keep their indices."""
    seq = _tflm_sequence(tg, order, tie)
    slots = sorted(tg.tensor_ids[b.name] for b in seq)      # the indices activations occupy now
    new_order = list(range(len(tg.tensor_names)))
    # TFLM takes equal sizes from the highest index down: give the first placed the highest slot
    for slot, b in zip(slots, reversed(seq)):
        new_order[slot] = tg.tensor_ids[b.name]
    return new_order


def _cpsat_place(bufs: list, hint: dict, upper: int, lower: int, det_time: float):
    """Exact placement (CP-SAT no-overlap-2D over time x address), single worker and a deterministic time
    limit so the result is reproducible; ``(offsets, size, optimal)`` or None. Sizes are 16-byte units."""
    from ..core.cpsat import cp_model as _cp_model

    cp_model = _cp_model()

    a = TFLM_ALIGNMENT
    m = cp_model.CpModel()
    top = m.NewIntVar(-(-lower // a), upper // a, "top")
    xs, ys, offs = [], [], {}
    for b in bufs:
        units = _align(b.size) // a
        o = m.NewIntVar(0, upper // a - units, f"o_{len(offs)}")
        m.AddHint(o, hint[b.name] // a)
        offs[b.name] = o
        xs.append(m.NewFixedSizeIntervalVar(b.start, b.end - b.start + 1, f"t_{len(xs)}"))
        ys.append(m.NewFixedSizeIntervalVar(o, units, f"m_{len(ys)}"))
        m.Add(o + units <= top)
    m.AddNoOverlap2D(xs, ys)
    m.Minimize(top)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = 1
    prm.random_seed = 0
    prm.max_deterministic_time = float(det_time)
    prm.max_time_in_seconds = 10.0 * float(det_time) + 10.0     # safety net only
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return ({n: solver.Value(o) * a for n, o in offs.items()}, solver.Value(top) * a, status == cp_model.OPTIMAL)


def plan_offline(tg: TFLiteGraph, order: Sequence, *, exact: bool = True, time_limit: float = 2.0,
                 graph=None) -> OfflinePlan:
    """An offline plan for ``tg`` executed in ``order`` (a schedule of ``tg.graph``).

    The smaller of :func:`~tvm_memsched.core.arena.plan_arena`'s greedy
    portfolio and the TFLM replica; with ``exact`` (and OR-Tools installed),
    CP-SAT then tries to close the gap to the live lower bound within
    ``time_limit`` *deterministic* seconds (CP-SAT's reproducible work
    measure, a few wall-clock seconds at most), so the same input always gives
    the same plan.

    ``graph`` (``tg.graph`` with in-place declarations, :func:`.inplace.with_inplace`): outputs
    are placed over the inputs they take over in ``order``; the plan is then found by
    :func:`~tvm_memsched.core.arena.plan_arena` with its own CP-SAT stage (aliased buffers move as
    rigid groups), and TFLM's replica stays a candidate (it aliases nothing, which is always valid).
    """
    bufs = plan_buffers(tg, order, graph)
    aliased = any(b.alias is not None for b in bufs)
    ours = plan_arena(bufs, alignment=TFLM_ALIGNMENT, exact=exact and aliased, time_limit=time_limit)
    by_name, size, method = dict(ours.offsets), ours.size, ours.method
    t_head = None
    for tie in [None, *TIE_ORDERS]:
        t_offs, head = tflm_greedy_plan(tg, order, tie)
        if tie is None:
            t_head = head
        if head < size:
            by_name, size, method = t_offs, head, f"tflm-greedy-replica{'' if tie is None else '-' + tie}"
    lower = max(live_peak(bufs, TFLM_ALIGNMENT), ours.lower_bound)
    proven = size <= lower
    if exact and not proven and bufs and not aliased:
        try:
            res = _cpsat_place(bufs, by_name, size, lower, time_limit)
        except ImportError:  # pragma: no cover - OR-Tools is optional here
            res = None
        if res is not None:
            offs, got, opt = res
            if got < size:
                by_name, size, method = offs, got, "cp-sat"
            if opt:
                lower, proven = size, True
    if check_plan(bufs, by_name, TFLM_ALIGNMENT) != size:   # raises if two live tensors overlap
        raise AssertionError("offline plan: inconsistent arena size (internal error)")
    offsets = [-1] * len(tg.tensor_names)
    for name, off in by_name.items():
        offsets[tg.tensor_ids[name]] = int(off)
    return OfflinePlan(offsets, size, lower, t_head, method, proven or size <= lower, dict(by_name))


def arena_tensors(model, subgraph: int) -> list[int]:
    """Tensors of ``subgraph`` TFLM places in the arena's planned section: not constants, not variables, not
    resource handles (``VAR_HANDLE`` points them at persistent memory), not empty."""
    from .reader import is_constant

    out = []
    for i, t in enumerate(model.subgraphs[subgraph].tensors or []):
        if is_constant(model, t) or t.isVariable or builder.type_name(t.type) == "RESOURCE":
            continue
        if builder.tensor_nbytes(t):
            out.append(i)
    return out


def check_plannable(model) -> None:
    """Raise :class:`UnsupportedError` unless an offline plan can be written for ``model`` (a ``ModelT``):
    TFLM applies the offsets of subgraph 0 to further subgraphs too, so they must have no arena tensors."""
    for k in range(1, len(model.subgraphs)):
        busy = arena_tensors(model, k)
        if busy:
            raise UnsupportedError(f"an offline memory plan needs the further subgraphs to keep nothing in the "
                                   f"arena (TFLM applies subgraph 0's offsets to them too), but subgraph {k} has "
                                   f"{len(busy)} activation tensor(s)")


def plannable(model) -> bool:
    """True if :func:`check_plannable` accepts ``model``."""
    try:
        check_plannable(model)
    except UnsupportedError:
        return False
    return True


#: the largest offset (and arena) TFLite Micro's int32 offline plan can express
INT32_MAX = 2 ** 31 - 1


def attach_offline_plan(model, plan: OfflinePlan):
    """Write ``plan`` into ``model`` (a ``ModelT``, modified and returned) as ``OfflineMemoryAllocation``.

    Raises :class:`UnsupportedError` for models with arena tensors in further
    subgraphs (see :func:`check_plannable`).
    """
    check_plannable(model)
    if len(plan.offsets) != len(model.subgraphs[0].tensors):
        raise ValueError(f"plan has {len(plan.offsets)} offsets for {len(model.subgraphs[0].tensors)} tensors")
    bad = [o for o in plan.offsets if o >= 0 and o % TFLM_ALIGNMENT]
    if bad:
        raise ValueError(f"offline offsets must be {TFLM_ALIGNMENT}-byte aligned, got {bad[:3]}")
    big = [(k, o) for k, o in enumerate(plan.offsets) if o > INT32_MAX]
    if big or plan.arena_bytes > INT32_MAX:
        k, o = big[0] if big else (None, plan.arena_bytes)
        t = model.subgraphs[0].tensors[k] if k is not None else None
        tn = t.name.decode(errors="replace") if t is not None and isinstance(t.name, bytes) else getattr(t, "name", "")
        what = f"tensor '{tn}' at offset {o:,}" if t is not None else f"an arena of {o:,} bytes"
        raise UnsupportedError(f"the offline plan needs {what}: TFLite Micro's offsets are int32 "
                               f"(at most {INT32_MAX:,} bytes)")
    rest = sum(len(sg.tensors or []) for sg in model.subgraphs[1:])      # never read by TFLM: -1
    return builder.set_offline_plan(model, [int(o) for o in plan.offsets] + [-1] * rest, name=OFFLINE_PLAN_NAME)


def read_offline_plan(model) -> list | None:
    """The offsets of an ``OfflineMemoryAllocation`` entry of ``model`` (a ``ModelT``), or None."""
    for m in model.metadata or []:
        name = m.name.decode(errors="replace") if isinstance(m.name, bytes) else m.name
        if name == OFFLINE_PLAN_NAME:
            data = model.buffers[int(m.buffer)].data
            arr = np.frombuffer(np.asarray(data, dtype=np.uint8).tobytes(), dtype="<i4")
            if len(arr) < 3 or len(arr) != 3 + int(arr[2]):
                raise ValueError(f"malformed {OFFLINE_PLAN_NAME} metadata ({len(arr)} int32 values)")
            return [int(v) for v in arr[3:]]
    return None
