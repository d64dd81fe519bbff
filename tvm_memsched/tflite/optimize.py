"""End to end: a ``.tflite`` in, a reordered ``.tflite`` (optionally with an offline plan) out, with evidence.

:func:`optimize_tflite` reads the model (:mod:`.reader`), schedules its graph
(``schedule(graph, method)``, ``auto`` by default), and builds two files:

* **OUT**: the operators in the best order for TFLite Micro's *own* greedy
  planner. Candidates are the schedule and the file's order, each with the
  file's tensor numbering or with the activations renumbered so that the
  planner (which breaks ties between equally sized tensors by index) takes
  them in one of :data:`.offline_plan.TIE_ORDERS`; each is scored with a
  replica of TFLM's planner (:func:`.offline_plan.tflm_greedy_plan`, which
  reproduces TFLM's measured head exactly on the zoo). A lower peak does not
  always give TFLM's greedy packing a smaller arena (fragmentation), and the
  file order with the file numbering is a candidate, so OUT is never larger
  than IN by construction.
* **OUT + plan**: the candidate order with the smallest offline plan
  (:mod:`.offline_plan`; greedy portfolio + CP-SAT, 16-byte aligned), written
  as ``OfflineMemoryAllocation`` metadata, tensors not renumbered. A plan is
  never larger than TFLM's own plan for the same order under any of the
  numberings (they are among its candidates), so OUT + plan <= OUT <= IN.

Stateful models (resource variables, :mod:`.state`) keep the order of their
variable accesses and their ``CALL_ONCE`` initialisation subgraph; an input
with constants stored after the flatbuffer (``Buffer.offset``) is written in
that layout again.

In-place execution (``inplace``, :mod:`.inplace`): the plan may put an
output over an input that dies at its operator, for the ops whose TFLM kernels
never read an input element after writing over it. The order for such a plan
is scheduled with those declarations (another candidate), and the plan without
in-place is kept for the report (``out_plan_no_inplace``).

With ``measure=True`` the three files are measured in TFLM (head and bisected
minimum arena, :func:`.verify.tflm_arena`) and the measured numbers decide:
the plan is used only if TFLM needs no more memory with it than without, and
OUT falls back to the original file if TFLM needs more for it. With
``verify=True`` LiteRT and TFLM must give bit-identical outputs for IN, OUT
and OUT + plan on random inputs (stateful models: over
:data:`STATEFUL_INVOCATIONS` invocations, state carried). TFLM cannot read
offset-buffer files, so they are checked in LiteRT only.

Example
-------
>>> from tvm_memsched import zoo
>>> r = optimize_tflite(zoo.tflite("nasnet_a_cifar_tiny", "int8"), offline_plan=True, time_limit=2)
>>> r.predicted["out_plan"] < r.predicted["in"], r.used_plan
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import MemschedError
from ..core.orders import program_order
from ..core.simulate import inplace_taken, peak_of_ids
from . import builder
from .offline_plan import (TIE_ORDERS, OfflinePlan, attach_offline_plan, check_plannable, plan_offline,
                           plannable, tflm_greedy_plan, tflm_tensor_order)
from .inplace import WINDOWED, with_inplace
from .reader import TFLiteGraph, load_model, read_tflite
from .reorder import reorder_tflite

__all__ = ["TFLiteExport", "optimize_tflite", "STATEFUL_INVOCATIONS"]

#: invocations per trial when checking a stateful model's outputs (its state carried from one to the next)
STATEFUL_INVOCATIONS = 24


@dataclass
class TFLiteExport:
    """What :func:`optimize_tflite` produced and measured.

    ``predicted``/``measured`` are keyed ``"in"``, ``"out"``, ``"out_plan"``:
    predicted TFLM heads (replica planner; the plan's extent for
    ``out_plan``) and measured :class:`~.verify.TflmArena` dicts. ``output`` is
    the file to write: OUT + plan when a plan was asked for and used, else OUT.
    """

    tg: TFLiteGraph
    method: str
    schedule: object
    peaks: dict
    orders: dict
    predicted: dict
    plan: OfflinePlan | None
    out: bytes
    out_plan: bytes | None
    used_plan: bool
    output: bytes
    measured: dict = field(default_factory=dict)
    litert: dict = field(default_factory=dict)
    tflm: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    plan_inplace: int = 0
    plan_inplace_windowed: bool = False

    @property
    def identical(self) -> bool:
        """True unless a LiteRT or TFLM check found outputs that differ from the original's."""
        return all(v["identical"] for v in list(self.litert.values()) + list(self.tflm.values()))

    @property
    def name(self) -> str:
        return self.tg.graph.name

    def to_dict(self) -> dict:
        s = self.schedule
        return {"model": self.name, "dtype": self.tg.dtype, "ops": self.tg.graph.num_ops, "method": self.method,
                "schedule": {"peak_bytes": s.peak_bytes, "lower_bound_bytes": s.lower_bound_bytes,
                             "optimal": s.optimal, "seconds": round(s.seconds, 3)},
                "peaks": self.peaks, "orders": self.orders, "predicted_tflm_head": self.predicted,
                "plan": None if self.plan is None else self.plan.to_dict(), "used_plan": self.used_plan,
                "measured_tflm": self.measured, "litert": self.litert, "tflm_outputs": self.tflm,
                "state": self.tg.state.to_dict() if self.tg.stateful else None, "notes": list(self.notes),
                "output_bytes": len(self.output)}

    def table(self) -> str:
        """A text table: IN / OUT / OUT + plan side by side."""
        rows = [("IN (file order)", "in"), ("OUT (reordered)", "out")]
        if "out_plan_no_inplace" in self.measured:
            rows.append(("OUT + plan, no in-place", "out_plan_no_inplace"))
        if self.out_plan is not None:
            rows.append(("OUT + offline plan", "out_plan"))
        head = ["file", "order", "peak", "TFLM head (pred.)", "TFLM head", "TFLM min arena", "vs IN", "LiteRT",
                "TFLM outputs"]
        body = []
        base = self.measured.get("in", {}).get("min_arena")

        def verdict(res):
            return "-" if not res else ("bit-identical" if res["identical"] else "DIFFERENT")

        for label, key in rows:
            m = self.measured.get(key, {})
            arena = m.get("min_arena")
            order = self.orders.get(key, "file")
            if key == "out" and self.orders.get("out_tensor_numbering", "file") != "file":
                order += ", renumbered"
            body.append([label, order, str(self.peaks.get(key, "")) if key in self.peaks else "-",
                         str(self.predicted.get(key, "")), str(m.get("head", "-")),
                         str(arena if arena is not None else "-"),
                         f"{arena / base:.3f}x" if arena and base else "-",
                         verdict(self.litert.get(key)), verdict(self.tflm.get(key))])
        widths = [max(len(r[i]) for r in body + [head]) for i in range(len(head))]
        fmt = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(r, widths)))
        return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


def optimize_tflite(source, *, method: str = "auto", time_limit: float | None = None, offline_plan: bool = False,
                    plan_exact: bool = True, plan_time_limit: float = 2.0, measure: bool = False,
                    verify: bool = False, trials: int = 2, seed: int = 0, progress=None,
                    inplace: str = "elementwise") -> TFLiteExport:
    """Reorder a ``.tflite`` (path or bytes) for less activation memory (see the module docstring).

    ``offline_plan`` asks for OUT + plan as the output (it is also computed,
    for the report, when ``measure`` is set and the model allows a plan).
    ``inplace`` (:data:`.inplace.MODES`): which outputs the plan may place over
    a dying input (:mod:`.inplace`); the order for the plan is then scheduled
    with those declarations, and the plan without them is reported as
    ``predicted["out_plan_no_inplace"]``.
    """
    from ..schedulers import schedule

    def say(msg):
        if progress:
            progress(msg)

    tg = source if isinstance(source, TFLiteGraph) else read_tflite(source)
    g = tg.graph
    notes = list(tg.notes)
    res = schedule(g, method, time_limit=time_limit, progress=progress)
    file_order = program_order(g)
    if file_order != list(range(g.num_ops)):
        notes.append("the file's operator order is not topological; its nearest topological order stands for IN")
    cands = [("schedule", list(res.order_ids))]
    if list(res.order_ids) != file_order:
        cands.append(("file", file_order))
    in_head = tflm_greedy_plan(tg, file_order)[1]
    # OUT: the (order, tensor numbering) TFLM's own planner packs tightest; the first of equals wins, so the
    # schedule beats the file order and the file's numbering beats a renumbering
    layouts = [(tflm_greedy_plan(tg, o, tie)[1], name, o, tie) for name, o in cands for tie in [None, *TIE_ORDERS]]
    out_head, plain_name, plain_order, tie = min(layouts, key=lambda x: x[0])
    if plain_name == "file" and len(cands) > 1:
        sched_head = min(h for h, n, _, _ in layouts if n == "schedule")
        notes.append(f"TFLM's greedy planner packs the file order tighter ({out_head} B) than the schedule "
                     f"({sched_head} B): OUT keeps the file order")
    if tie is not None:
        notes.append(f"OUT renumbers the activation tensors ({tie} order among equal sizes) so that TFLM's greedy "
                     f"planner packs them tighter ({out_head} B instead of "
                     f"{tflm_greedy_plan(tg, plain_order)[1]} B)")
    say(f"schedule ({method}): peak {peak_of_ids(g, file_order)} -> {res.peak_bytes} bytes; TFLM head "
        f"(predicted) {in_head} -> {out_head}")
    out = reorder_tflite(tg, plain_order,
                         tensor_order=None if tie is None else tflm_tensor_order(tg, plain_order, tie))

    plan = out_plan = None
    plan_name = None
    if offline_plan:
        check_plannable(tg.model)
    plain_plan = out_plan_plain = None
    plan_graph = g
    if offline_plan or (measure and plannable(tg.model)):
        plans = {name: plan_offline(tg, o, exact=plan_exact, time_limit=plan_time_limit) for name, o in cands}
        plan_name, plan_order = min(cands, key=lambda c: plans[c[0]].arena_bytes)
        plain_plan, plain_plan_order = plans[plan_name], plan_order
        gi = with_inplace(tg, inplace)
        if gi is not g:
            res_i = schedule(gi, method, time_limit=time_limit, progress=progress)
            icands = [("schedule-inplace", list(res_i.order_ids))] + cands
            iplans = {name: plan_offline(tg, o, exact=plan_exact, time_limit=plan_time_limit, graph=gi)
                      for name, o in icands}
            iname, iorder = min(icands, key=lambda c: iplans[c[0]].arena_bytes)
            if iplans[iname].arena_bytes < plain_plan.arena_bytes:
                plans[iname] = iplans[iname]
                plan_name, plan_order, plan_graph = iname, iorder, gi
                say(f"in-place ({inplace}): {sum(1 for op in gi.ops if op.inplace)} op(s) may write over a dying "
                    f"input; plan {plain_plan.arena_bytes} -> {iplans[iname].arena_bytes} bytes")
        plan = plans[plan_name]
        m = load_model(reorder_tflite(tg, plan_order))
        out_plan = builder.serialize(attach_offline_plan(m, plan), offset_buffers=tg.offset_buffers)
        if plan is not plain_plan:      # for the report: the gain of in-place execution alone
            m = load_model(reorder_tflite(tg, plain_plan_order))
            out_plan_plain = builder.serialize(attach_offline_plan(m, plain_plan), offset_buffers=tg.offset_buffers)
        say(f"offline plan ({plan.method}, {plan_name} order): {plan.arena_bytes} bytes "
            f"(lower bound {plan.lower_bound_bytes}; TFLM's own plan for this order {plan.tflm_greedy_bytes})")
    used_plan = bool(offline_plan and plan is not None and plan.arena_bytes <= out_head)

    measured: dict = {}
    tflm_reads = not tg.offset_buffers
    if not tflm_reads and (measure or verify):
        notes.append("TFLite Micro does not read constants stored after the flatbuffer (Buffer.offset/size): its "
                     "arena and outputs are not measured; the output keeps that layout, for LiteRT")
    if measure and tflm_reads:
        from .verify import tflm_arena

        files = {"in": tg.buf, "out": out}
        if out_plan is not None:
            files["out_plan"] = out_plan
        if out_plan_plain is not None:
            files["out_plan_no_inplace"] = out_plan_plain
        for key, buf in files.items():
            try:
                measured[key] = tflm_arena(buf).to_dict()
                say(f"TFLM {key}: head {measured[key]['head']}, min arena {measured[key]['min_arena']}")
            except MemschedError as e:
                measured[key] = {"error": str(e)}
                notes.append(f"TFLM could not measure {key}: {e}")
        arena = {k: v.get("min_arena") for k, v in measured.items()}
        if arena.get("out") is not None and arena.get("in") is not None and arena["out"] > arena["in"]:
            notes.append(f"TFLM needs more for the reordered file ({arena['out']} B) than for the original "
                         f"({arena['in']} B): OUT is the original file")
            out, plain_name, tie, out_head = tg.buf, "file", None, in_head
            plain_order = file_order
            measured["out"] = dict(measured["in"])
        if used_plan and arena.get("out_plan") is not None and arena.get("out") is not None \
                and arena["out_plan"] > arena["out"]:
            notes.append(f"TFLM needs more with the offline plan ({arena['out_plan']} B) than without "
                         f"({arena['out']} B): the plan is not used")
            used_plan = False
    litert: dict = {}
    tflm: dict = {}
    if verify:
        from .verify import compare_litert, compare_tflm

        calls = STATEFUL_INVOCATIONS if tg.stateful else 1
        for key, buf in (("out", out), ("out_plan", out_plan)):
            if buf is None:
                continue
            litert[key] = compare_litert(tg.buf, buf, trials=trials, seed=seed, invocations=calls).to_dict()
            say(f"LiteRT {key}: {'bit-identical' if litert[key]['identical'] else 'DIFFERENT'}"
                + (f" over {calls} invocations" if calls > 1 else ""))
            if not tflm_reads:
                continue
            try:
                tflm[key] = compare_tflm(tg.buf, buf, trials=trials, seed=seed, invocations=calls).to_dict()
                say(f"TFLM {key}: {'bit-identical' if tflm[key]['identical'] else 'DIFFERENT'}")
            except MemschedError as e:
                notes.append(f"TFLM could not run {key}: {e}")
    orders = {"in": "file", "out": plain_name, "out_tensor_numbering": tie or "file"}
    peaks = {"in": peak_of_ids(g, file_order), "out": peak_of_ids(g, plain_order)}
    predicted = {"in": in_head, "out": out_head}
    if plan is not None:
        orders["out_plan"] = plan_name
        peaks["out_plan"] = peak_of_ids(plan_graph, plan_order)
        predicted["out_plan"] = plan.arena_bytes
        predicted["out_plan_no_inplace"] = plain_plan.arena_bytes
    output = out_plan if used_plan else out
    taken = _overlaps(plan_graph, plan_order, plan) if plan is not None else []
    return TFLiteExport(tg=tg, method=method, schedule=res, peaks=peaks, orders=orders, predicted=predicted,
                        plan=plan, out=out, out_plan=out_plan, used_plan=used_plan, output=output,
                        measured=measured, litert=litert, tflm=tflm, notes=notes, plan_inplace=len(taken),
                        plan_inplace_windowed=any(plan_graph.op(o).attrs.get("kind") in WINDOWED for o in taken))


def _overlaps(graph, order, plan) -> list[str]:
    """Ops whose output the plan really placed over a dying input."""
    ids = graph.resolve_order(order)
    offs = plan.by_name
    names = []
    for o, (i, _shift) in inplace_taken(graph, ids).items():
        a, b = graph.tensors[o].name, graph.tensors[i].name
        if a in offs and b in offs and offs[a] < offs[b] + graph.size[i] and offs[b] < offs[a] + graph.size[o]:
            names.append(graph.ops[graph.producer[o]].name)
    return names
