"""Relax module -> a C project for a microcontroller with one static arena (:func:`export`).

Steps:

1. TVM's default Relax pipeline for the board's C target
   (``Target({"kind": "c", "mcpu": ...})``) with tvm_memsched's
   ``MemoryAwareReorder`` (:func:`tvm_memsched.relax.pipeline.pipeline`), up to
   the memory planner;
2. the kernels ``main`` calls are built into one C file with TVM's C code
   generator (:mod:`.kernels`), which also tells exactly how much workspace
   each kernel will request;
3. ``ArenaPlanMemory``'s planner (:func:`tvm_memsched.relax.passes.arena.plan_module`)
   places every intermediate tensor *and every kernel call's workspace* in one
   arena;
4. the planned ``main`` becomes ``<name>.c``/``<name>.h``/``<name>_params.c``
   (:mod:`.codegen`); the runtime shim and TVM's C headers are copied next to them;
5. a CMake library of those files, with an example firmware (:mod:`.cmake`);
6. optionally (``measure=True``) everything is cross-compiled for the board to
   measure flash, static RAM and stack (:mod:`.firmware`), and checked against
   the board's SRAM and flash.

``planner="tvm"`` exports TVM's own order and ``StaticPlanBlockMemory`` plan
instead (its storages one after the other, plus one workspace region as large
as the largest kernel's), which is what a static export of TVM's default
would need; ``compare_default=True`` computes those sizes next to ours.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

from ..core.errors import BudgetError, MemschedError, UnsupportedError
from ..core.files import atomic_write
from .boards import Board, get_board
from .project import write_project
from .timeline import arena_timeline

__all__ = ["MicroExport", "PlanSizes", "DoesNotFitError", "export", "fit_report", "RAM_BUDGET", "RAM_BUDGET_FLOOR",
           "MICRO_ALIGNMENT"]

#: arena alignment (bytes) when the options leave it to the target (``alignment=None``)
MICRO_ALIGNMENT = 16



class DoesNotFitError(BudgetError):
    """The model needs more RAM or flash than the board has (``.result`` holds the export)."""

    def __init__(self, message: str, result=None):
        super().__init__(message)
        self.result = result


@dataclass
class PlanSizes:
    """Arena of one memory plan: tensor storage plus kernel workspace (bytes)."""

    planner: str
    arena_bytes: int
    storage_bytes: int
    workspace_bytes: int
    kernel_calls: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _kib(n) -> str:
    return "?" if n is None else f"{n:,} B ({n / 1024:.1f} KiB)"


@dataclass
class MicroExport:
    """The outcome of :func:`export`; sizes in bytes.

    RAM needed on the board = ``static_ram_bytes`` (the arena, the state buffers
    of a stateful model and the runtime's few statics; the arena and the state
    buffers until measured) + ``stack_bytes`` (estimated from GCC's
    ``-fstack-usage``) + ``io_bytes`` (the caller's input and output buffers).
    ``state_bytes`` is the persistent state of a stateful model (its
    ``states``), outside the arena.
    """

    name: str
    board: Board
    out_dir: str
    planner: str
    method: str
    files: dict
    arena_bytes: int
    storage_bytes: int
    workspace_bytes: int
    io_bytes: int
    params_bytes: int
    kernel_calls: int
    kernels: int
    lower_bound_bytes: int = 0
    shrunk_kernels: list = field(default_factory=list)
    shrunk_constants: list = field(default_factory=list)
    tvm_kernels_workspace_bytes: int | None = None
    flash_bytes: int | None = None
    static_ram_bytes: int | None = None
    stack_bytes: int | None = None
    default: PlanSizes | None = None
    ours: PlanSizes | None = None
    seconds: dict = field(default_factory=dict)
    int8: dict | None = None
    state_bytes: int = 0
    inplace_ops: int = 0                      # kernel outputs placed over an input dying at the call
    arena_no_inplace_bytes: int | None = None  # our plan of the same program without in-place execution
    kernel_mode: str = "tvm"                  # "fast": the microkernel library where it applies; "tvm": TVM's C
    kernel_choice: dict = field(default_factory=dict)     # kernels="auto": both builds' sizes and the choice
    library_kernels: dict = field(default_factory=dict)   # kernel name -> operator, computed by the library
    macs: int = 0                             # multiply-accumulates of one inference (convolutions, matmuls)
    branches: int = 0                         # run-time If run as both branches and a select (IfToSelect)
    call_macs: list = field(default_factory=list)         # per kernel call, where known (library kernels)
    states: list = field(default_factory=list, repr=False)
    timeline: list = field(default_factory=list, repr=False)   # (buffer, offset, size, first call, last call)
    mod: object = field(default=None, repr=False)
    program: object = field(default=None, repr=False)

    @property
    def measured(self) -> bool:
        return self.flash_bytes is not None

    @property
    def ram_bytes(self) -> int:
        """RAM the model needs on the board (see the class docstring)."""
        static = self.static_ram_bytes if self.static_ram_bytes is not None else \
            self.arena_bytes + self.state_bytes
        return static + (self.stack_bytes or 0) + self.io_bytes

    def ram_bytes_with_arena(self, arena_bytes: int) -> int:
        """:attr:`ram_bytes` with another arena (e.g. TVM's default plan) in place of this one."""
        return self.ram_bytes - self.arena_bytes + arena_bytes

    @property
    def fits(self) -> bool:
        ok = self.ram_bytes <= self.board.sram_bytes
        return ok and (self.flash_bytes is None or self.flash_bytes <= self.board.flash_bytes)

    def check_fit(self) -> None:
        """Raise :class:`DoesNotFitError` (what is over, and by how much) unless the model fits the board."""
        if not self.fits:
            raise DoesNotFitError(_does_not_fit_message(self), self)

    @property
    def default_fits(self) -> bool | None:
        if self.default is None:
            return None
        return self.ram_bytes_with_arena(self.default.arena_bytes) <= self.board.sram_bytes

    def summary(self) -> str:
        b = self.board
        lines = [f"model {self.name} for {b.name} ({b.core}, {b.sram_bytes // 1024} KiB SRAM, "
                 f"{b.flash_bytes // 1024} KiB flash), plan: {self.planner}"
                 + (f" (method {self.method})" if self.planner == "tvm_memsched" else ""),
                 f"  arena          {_kib(self.arena_bytes)}: " + (
                     f"tensors and each kernel call's workspace planned together (largest workspace "
                     f"{self.workspace_bytes:,} B; live-peak bound {self.lower_bound_bytes:,} B)"
                     if self.planner == "tvm_memsched" else
                     f"TVM's storages {self.storage_bytes:,} B + shared kernel workspace {self.workspace_bytes:,} B"),
                 f"  I/O buffers    {_kib(self.io_bytes)}"
                 + (" (inputs and outputs live in the arena)" if self.program is not None
                    and self.program.io_in_arena else ""),
                 *([f"  state          {_kib(self.state_bytes)}: {len(self.states)} resource variable(s) in static "
                    f"buffers outside the arena, set by {self.name}_init()"] if self.states else []),
                 f"  stack          {_kib(self.stack_bytes)}" + (" (estimate)" if self.stack_bytes else ""),
                 f"  RAM total      {_kib(self.ram_bytes)} of {_kib(b.sram_bytes)}: "
                 f"{'fits' if self.ram_bytes <= b.sram_bytes else 'does not fit'}",
                 f"  flash          {_kib(self.flash_bytes)} of {_kib(b.flash_bytes)}"
                 + ("" if self.flash_bytes is None else
                    (": fits" if self.flash_bytes <= b.flash_bytes else ": does not fit"))
                 + f" (constants {self.params_bytes:,} B)",
                 f"  {self.kernel_calls} kernel calls, {self.kernels} kernels; files in {self.out_dir}"]
        if self.planner == "tvm_memsched":
            line = (f"  kernels        {len(self.shrunk_kernels)} scheduled without full-size temporaries "
                    f"(ShrinkWorkspace); largest workspace {self.workspace_bytes:,} B")
            if self.tvm_kernels_workspace_bytes is not None:
                line += f" (TVM's kernels: {self.tvm_kernels_workspace_bytes:,} B)"
            lines.insert(-1, line)
        if self.planner == "tvm_memsched" and self.arena_no_inplace_bytes is not None:
            lines.insert(-1, f"  in-place       {self.inplace_ops} kernel output(s) written over an input that dies "
                             f"at the call (arena without in-place {self.arena_no_inplace_bytes:,} B)")
        if self.shrunk_constants:
            saved = sum(c["before_bytes"] - c["after_bytes"] for c in self.shrunk_constants)
            lines.insert(-1, f"  constants      {len(self.shrunk_constants)} broadcast constants kept at their small "
                             f"shape (ShrinkConstants): {saved:,} B less flash")
        if self.branches:
            lines.insert(-1, f"  branches       {self.branches} run-time If run as both branches and a select (the C "
                             "export has no control flow; same outputs, the branch not taken costs its work)")
        if self.int8:
            lines.insert(-1, "  " + self.int8["summary"])
        if self.planner == "tvm_memsched":
            lines.insert(-1, "  " + self.kernels_line())
        if self.default is not None and self.ours is not None:
            lines.append(fit_report(self))
        return "\n".join(lines)

    def kernels_line(self) -> str:
        """Which kernels the microkernel library computes, and (``kernels="auto"``) why this build."""
        c = self.kernel_choice
        why = ""
        if c:
            f, t = c["fast"], c["tvm"]
            why = (f"; RAM total {f['ram_bytes']:,} B with the library vs {t['ram_bytes']:,} B with TVM's kernels "
                   f"({f['ram_bytes'] - t['ram_bytes']:+,} B, {f['ram_bytes'] / max(1, t['ram_bytes']):.3f}x; budget "
                   f"{RAM_BUDGET:.0%} or {RAM_BUDGET_FLOOR} B): {c['reason']}")
        if self.kernel_mode != "fast":
            return "kernel code   TVM's C code generator for every kernel" + (why or " (--kernels tvm)")
        ops: dict = {}
        for op in self.library_kernels.values():
            ops[op] = ops.get(op, 0) + 1
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
        return (f"kernel code   {len(self.library_kernels)} of {self.kernels} kernels by the microkernel library "
                f"tms_nn ({kinds}), the rest by TVM's C code generator" + why)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("mod", "program", "board", "default", "ours", "states")}
        d["states"] = [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in self.states]
        d["board"] = self.board.to_dict()
        d["ram_bytes"] = self.ram_bytes
        d["fits"] = self.fits
        d["default"] = self.default.to_dict() if self.default else None
        d["ours"] = self.ours.to_dict() if self.ours else None
        d["default_fits"] = self.default_fits
        return d


def fit_report(exp: MicroExport) -> str:
    """TVM's default plan vs ours against the board's SRAM (needs ``compare_default=True``)."""
    b = exp.board
    rows = [("", "arena", "RAM total", f"{b.name} SRAM {b.sram_bytes:,} B")]
    for label, plan in (("TVM default", exp.default), ("tvm_memsched", exp.ours)):
        ram = exp.ram_bytes_with_arena(plan.arena_bytes)
        rows.append((label, f"{plan.arena_bytes:,} B", f"{ram:,} B",
                     "fits" if ram <= b.sram_bytes else f"does not fit (over by {ram - b.sram_bytes:,} B)"))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    text = ["  " + "  ".join(c.ljust(w[i]) if i in (0, 3) else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()
            for r in rows]
    saved = exp.default.arena_bytes - exp.ours.arena_bytes
    text.append(f"  arena saved: {saved:,} B ({exp.default.arena_bytes / max(1, exp.ours.arena_bytes):.2f}x smaller)"
                "; RAM total = arena + runtime statics" + (" and state buffers" if exp.states else "")
                + " + stack estimate + I/O buffers")
    return "\n".join(text)


# ---------------------------------------------------------------- pipeline
def _refuse_loops(mod) -> None:
    """A loop the importer could not unroll (a TFLite WHILE whose trip count depends on the data, imported as
    a recursive Relax function) has no C export: refused by name, with the importer's reason."""
    from ..relax.frontends.frontend import LOOPS_ATTR

    loops = sorted(gv.name_hint for gv in mod.get_global_vars() if gv.name_hint.startswith("tflite_while"))
    if not loops:
        return
    why = mod.attrs.get(LOOPS_ATTR) if mod.attrs is not None else None
    raise UnsupportedError(f"control flow (TFLite WHILE, imported as Relax function '{loops[0]}') is not "
                           "supported by the C export" + (f": {why}" if why else "") + "; a loop is unrolled when "
                           "its trip count, or a bound on it, follows from constants")


def _tvm_call(fn, what: str):
    """Run a TVM step; TVM's own errors become UnsupportedError with their last line."""
    try:
        return fn()
    except MemschedError:
        raise
    except Exception as e:  # TVM raises TVMError / ValueError / InternalError subclasses
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        raise UnsupportedError(f"{what} failed: {lines[-1] if lines else type(e).__name__}") from None


def _called_kernels(func, prims: set) -> list[str]:
    """Names of the PrimFuncs ``func`` calls, in first-call order."""
    import tvm

    names = []
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.GlobalVar) and v.op.name_hint in prims:
                if v.op.name_hint not in names:
                    names.append(v.op.name_hint)
    return names


def _split_pipeline(target, options):
    """TVM's passes up to FuseTIR, from there to the reorder, the reorder, to the planner; TVM's planner."""
    from ..relax.pipeline import pipeline
    from ..relax.target import stages

    # the export runs the operator- and kernel-level passes itself: the pipeline's reorder with the kernel
    # workspace in the arena
    p = pipeline(target, options.replace(workspace="lowered", workspace_shared=True, int8=False,
                                         shrink_workspace=False, shrink_constants=False, layout="keep",
                                         inline_producers=False, affine_chains=False, absorb_transposes=False))
    names = p.pass_names()
    f, i, k = names.index("FuseTIR"), names.index("MemoryAwareReorder"), names.index("ArenaPlanMemory")
    tvm_planner = [q for q in stages(target)["finalize"] if q.info.name == "StaticPlanBlockMemory"][0]
    return p.passes[:f + 1], p.passes[f + 1:i], p.reorder, p.passes[i + 1:k], tvm_planner


#: the pipeline options :func:`export` applies; any other one changed from its default is refused by name
APPLIED_OPTIONS = {"method", "time_limit", "alignment", "progress", "int8", "inplace", "shrink_workspace",
                   "shrink_constants", "exact_arena", "layout", "inline_producers", "affine_chains",
                   "absorb_transposes", "workspace_shared", "scheduler_options", "allowance"}


def _refuse_options(o: PipelineOptions) -> None:
    """The options :func:`export` does not apply (``reorder=False``, ``rewrite``, ``tile``, a ``tradeoff``
    other than memory, ...): an error naming them, never silently ignored."""
    refused = [f"{k}={v!r}" for k, v in o.changed().items() if k not in APPLIED_OPTIONS]
    if refused:
        raise UnsupportedError(f"micro export: {', '.join(refused)} not supported (the export keeps our order and "
                               "plan and the least-workspace kernels; rewrite or tile the module before exporting)")


def _place_weight_sums(library: dict, plan_ours, first):
    """Where each hybrid convolution's (and fully connected layer's) weight sums live: computed per call into
    its scratch (no flash), unless that makes the arena larger than with every sum in flash (4 bytes a
    channel); then in flash for the kernels whose calls' scratch reaches above that arena, until the arena is
    no larger. ``first``: ``plan_ours(library)`` with every sum in scratch. Returns the chosen plan."""
    movable = [k for k in library.values() if k.needs_weight_sums]
    kmod, planned, rep, ws = first
    before = {n: dict(vars(k)) for n, k in library.items()}
    for k in movable:
        k.put_sums_in_table()
    flash_plan = plan_ours(library)
    floor = flash_plan[2].total_bytes
    for n, k in library.items():            # back to every sum in scratch
        vars(k).update(before[n])
    if rep.total_bytes <= floor:
        return kmod, planned, rep, ws
    for _ in range(len(movable)):
        above = {name for _, name, off, size in rep.workspace if off + size > floor}
        moved = [k for k in movable if k.name in above and not k.sums_in_table]
        if not moved:
            break
        for k in moved:
            k.put_sums_in_table()
        kmod, planned, rep, ws = plan_ours(library)
        if rep.total_bytes <= floor:
            return kmod, planned, rep, ws
    for k in movable:                       # the arena still larger: every sum in flash
        k.put_sums_in_table()
    return flash_plan


def export(mod, board, out_dir: str, options: PipelineOptions | None = None, *, name: str = "model",
           planner: str = "tvm_memsched", inline_padding: bool = False, compare_default: bool = False,
           measure: bool = True, check_fit: bool = True, io_in_arena: bool = True, kernels: str = "auto",
           float_fma: bool = True, keep_float16: bool = True, **overrides) -> MicroExport:
    """Export the Relax module ``mod`` (its ``main``) as C for ``board`` into ``out_dir``.

    Parameters
    ----------
    mod : IRModule
        A Relax module whose ``main`` has static shapes.
    board : str or Board
        A name from :mod:`.boards` (``tvm-memsched micro --list-boards`` lists them).
    options : PipelineOptions
        The pipeline's options (:class:`~tvm_memsched.relax.options.PipelineOptions`; keyword ``overrides`` of
        the same names change them, e.g. ``method="dp"``; a string here is the method). Those the export acts
        on are described below (``method``: the scheduler of ``MemoryAwareReorder``; ``time_limit``,
        ``progress``: its search's; ``layout``, ``inline_producers``, ``affine_chains``, ``absorb_transposes``
        as in the pipeline). It refuses ``reorder=False``, ``plan=False``, ``rewrite``, ``tile``,
        ``extra_passes``, a ``tradeoff`` other than ``"memory"`` and a ``workspace`` other than
        ``"lowered"`` (rewrite or tile the module before exporting it).
    name : str
        C prefix: ``<name>_run``, ``<NAME>_ARENA_BYTES``, files ``<name>.c`` ...
    planner : {"tvm_memsched", "tvm"}
        Our order and arena plan, or TVM's order and ``StaticPlanBlockMemory``.
    alignment : int
        Alignment of every tensor and workspace region in the arena (None: :data:`MICRO_ALIGNMENT`).
    shrink_workspace : bool
        Schedule our plan's kernels without full-size temporaries
        (:class:`~tvm_memsched.transform.ShrinkWorkspace` after fusion: padding
        read through index arithmetic, epilogues per output element). False
        keeps the kernels as TVM's fusion writes them. TVM's plan
        (``planner="tvm"`` and ``compare_default``) always uses TVM's kernels.
    shrink_constants : bool
        Keep broadcast constants at their small stored shape in our plan
        (:class:`~tvm_memsched.transform.ShrinkConstants` before legalization:
        e.g. PReLU slopes). Identical constants are stored once either way.
    inline_padding : bool
        With ``shrink_workspace=False``: only inline padding and other
        element-wise stages (the former ``InlinePadding``).
    exact_arena : bool
        Place the tensors with CP-SAT (needs OR-Tools) when the greedy placement
        misses the live-peak bound: often a much smaller arena. The search is
        deterministic (same model, same offsets); False keeps the greedy plan.
    compare_default : bool
        Also compute TVM's default plan (``.default``) to compare with ours (``.ours``).
    measure : bool
        Cross-compile for the board to measure flash, static RAM and stack (needs
        ``arm-none-eabi-gcc``; without it only the arena and I/O sizes are known).
    check_fit : bool
        Raise :class:`DoesNotFitError` (with the numbers) when the model does not
        fit the board. The files are written either way.
    io_in_arena : bool
        Place the inputs and outputs in the arena (planned with the other tensors:
        an input's memory is reused after its last reader, as TFLite Micro does);
        the C API then has ``<name>_input(i)``, ``<name>_invoke()`` and
        ``<name>_output(k)`` besides ``<name>_run``. False: the caller's buffers.
    int8 : bool
        Lower quantized (dequantize/quantize) operator groups of our side to
        TFLite's exact integer kernels first
        (:func:`tvm_memsched.relax.int8.lower.lower_int8`); no effect on float
        models, nor on TVM's side. ``.mod`` of the result is the module our
        export computes (the lowered one), the reference for checking runs;
        ``.int8`` says what was lowered.
    inplace : bool
        Let a kernel output share arena memory with an input that dies at the call
        where the kernel's TIR proves it safe (:mod:`tvm_memsched.relax.analysis.inplace`);
        those kernels are compiled without ``restrict`` buffers. False: never.
    kernels : {"auto", "fast", "tvm"}
        ``"fast"``: integer convolutions, fully connected layers, pools, ADD and
        table operators run on tvm_memsched's microkernel library (:mod:`.nn`:
        register accumulators, zero points folded into the bias, SMLAD on cores
        with the DSP extension), bit-identical to the TIR kernels; its column
        buffers are workspace planned in the arena. ``"tvm"``: TVM's C code
        generator for every kernel (the smallest RAM). ``"auto"`` (default):
        builds both and keeps the library's unless its RAM total exceeds the
        other's by more than :data:`RAM_BUDGET` (5%) and more than
        :data:`RAM_BUDGET_FLOOR` bytes; ``.kernel_choice`` holds both builds' sizes. TVM's plan (``planner="tvm"``) always uses TVM's C.
        With the library, float32 convolutions and fully connected layers (and the
        bias, residual add and activation behind them) first become described
        kernels (:mod:`tvm_memsched.relax.passes.float_kernels`, TVM's very floats) that
        run on the library's float kernels.
    float_fma : bool
        The library's float kernels fuse multiply and add (VFMA on cores with an
        FPU: faster; outputs differ from TVM's in the last bits). False: the
        same floats as TVM's kernels.
    keep_float16 : bool
        A model with float16 weights (float16 constants widened by ``DEQUANTIZE``) keeps its convolution and
        fully connected weights float16 in flash, widened as each is read (default). False: stored float32
        (twice their flash; the kernels skip the widening, about 1.4x fewer instructions on a Cortex-M4F).
        The same holds for the int8 weights of a dynamic-range (hybrid) model: kept int8, or stored float32.

    Raises :class:`UnsupportedError` for models the C export cannot handle.
    """
    import tvm
    from tvm import relax

    from ..relax.passes.arena import plan_module
    from ..relax.passes.shrink_constants import shrink_constants as shrink_constants_
    from ..relax.passes.inline_producers import InlineProducers
    from ..relax.passes.shrink_workspace import ShrinkWorkspace
    from ..relax.passes.if_to_select import if_to_select
    from ..relax.frontends.tflite_state import states as model_states
    from .codegen import tensor_nbytes, translate
    from .kernels import compile_kernels

    from ..relax.int8.kernels import module_macs
    from ..relax.frontends.names import c_safe_names
    from ..relax.options import resolve_options

    o = resolve_options(options, overrides)
    _refuse_options(o)
    method, time_limit, progress, int8, inplace = o.method, o.time_limit, o.progress, o.int8, o.inplace
    shrink_workspace, shrink_constants, exact_arena = o.shrink_workspace, o.shrink_constants, o.exact_arena
    alignment = MICRO_ALIGNMENT if o.alignment is None else o.alignment
    board = get_board(board)
    if kernels not in ("auto", "fast", "tvm"):
        raise UnsupportedError(f"unknown kernel choice '{kernels}': use 'auto', 'fast' or 'tvm'")
    mod, _ = c_safe_names(mod)    # names from the model file never reach generated C as written
    mod, branches = if_to_select(mod)
    _refuse_loops(mod)
    states = model_states(mod)
    io = io_in_arena and not states          # a stateful model's inputs and outputs stay the caller's
    if planner not in ("tvm_memsched", "tvm"):
        raise UnsupportedError(f"unknown planner '{planner}': use 'tvm_memsched' or 'tvm'")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise UnsupportedError(f"model name '{name}' is not a valid C identifier")
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()] or not isinstance(mod["main"], relax.Function):
        raise UnsupportedError("the module has no Relax function 'main'")
    _check_signature(mod["main"])
    target = tvm.target.Target(board.tvm_target())
    seconds = {}
    t0 = time.perf_counter()
    inline = o.inline_producers
    common, lower, reorder, middle, tvm_planner = _split_pipeline(target, o.replace(alignment=alignment))
    shrink = ShrinkWorkspace(epilogues=shrink_workspace, target=target) \
        if (shrink_workspace or inline_padding) else None
    ours, tvms = planner == "tvm_memsched" or compare_default, planner == "tvm" or compare_default
    mod_ours, int8_report = mod, None
    if ours and int8:
        from ..relax.int8.lower import lower_int8

        t_int8 = time.perf_counter()
        mod_ours, int8_report = _tvm_call(lambda: lower_int8(mod), "int8 lowering")
        seconds["int8"] = time.perf_counter() - t_int8
    reference = mod_ours if planner == "tvm_memsched" else mod
    mod_ours, constant_sites = shrink_constants_(mod_ours) if (ours and shrink_constants) else (mod_ours, [])
    if ours:          # what exporters write differently in one form (as compare's side of ours)
        from ..relax.passes.absorb_transposes import absorb_transposes
        from ..relax.passes.affine_chains import fold_affine_chains

        if o.absorb_transposes:
            mod_ours = _tvm_call(lambda: absorb_transposes(mod_ours)[0], "the transposed convolutions")
        affine = o.affine_chains
        if affine:
            kw = affine if isinstance(affine, dict) else {}
            mod_ours = _tvm_call(lambda: fold_affine_chains(mod_ours, **kw)[0], "the affine chains")
    from ..relax.passes.layout import ChannelsFirstReduction, convolutions_to
    from ..relax.pipeline import resolve_layout

    conv_layout = resolve_layout(o.layout, inplace) if ours else None
    if conv_layout:
        mod_ours = _tvm_call(lambda: convolutions_to(mod_ours, conv_layout.rstrip("?"),
                                                     boundary_only=conv_layout.endswith("?"))[0],
                             "the convolution layout")
    from ..relax.passes.float_kernels import lower_float, widened_types

    # float convolutions as described kernels (TVM's floats); with float16 or int8 weights also for TVM's
    # kernels, which then read the weights narrow too
    narrow = keep_float16 and "main" in [g.name_hint for g in mod_ours.get_global_vars()] \
        and widened_types(mod_ours["main"]) & {"float16", "int8"}
    if ours and (kernels != "tvm" or narrow):
        t_f = time.perf_counter()
        mod_ours = _tvm_call(lambda: lower_float(mod_ours, keep_half=keep_float16)[0], "float kernels")
        seconds["float"] = time.perf_counter() - t_f
    with target:
        fused = _tvm_call(lambda: tvm.transform.Sequential(common)(mod), "TVM's Relax lowering") \
            if (tvms or mod_ours is mod) else None
        fused_ours = fused if mod_ours is mod else \
            _tvm_call(lambda: tvm.transform.Sequential(common)(mod_ours), "TVM's Relax lowering")
        kernel_passes = ([InlineProducers(bands=False)] if inline else []) + ([shrink] if shrink is not None else [])
        if ours:        # acts only on convolutions ConvolutionLayout or absorb_transposes converted from NCHW
            kernel_passes.append(ChannelsFirstReduction())
        pre_ours = _tvm_call(lambda: tvm.transform.Sequential(kernel_passes + lower + [reorder] + middle)(fused_ours),
                             "the Relax pipeline") if ours else None
        pre_tvm = _tvm_call(lambda: tvm.transform.Sequential(lower + middle)(fused), "the Relax pipeline") \
            if tvms else None
    if pre_ours is not None and inplace:     # kernels that may run in place must not assume unaliased buffers
        from ..relax.analysis.inplace import candidate_kernels
        from ..relax.passes.aliasing import allow_aliasing

        pre_ours = allow_aliasing(pre_ours, candidate_kernels(pre_ours), target)
    seconds["relax"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernel_mode = kernels
    libraries = {"tvm": {}}
    called_ours = []
    if pre_ours is not None:
        prims = {gv.name_hint for gv, f in pre_ours.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
        called_ours = _called_kernels(pre_ours["main"], prims)
        if kernel_mode in ("fast", "auto"):
            from .nn import params_fit, select

            found = {n: k for n, k in select(pre_ours, called_ours, mve=board.mve, dsp=board.dsp).items()
                     if params_fit(k)}
            for k in found.values():
                k.fma = float_fma
            if found:
                libraries = {"fast": found} if kernel_mode == "fast" else {"fast": found, "tvm": {}}
    kernels_tvm = None
    if pre_tvm is not None:
        prims = {gv.name_hint for gv, f in pre_tvm.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
        kernels_tvm = compile_kernels(pre_tvm, _called_kernels(pre_tvm["main"], prims), target, prefix=name)
    seconds["kernels"] = time.perf_counter() - t0

    def plan_ours(library):
        """The kernels of ``library`` compiled and ``main`` planned with their workspace: (kernel module,
        planned module, main's planner report, workspace function)."""
        kmod = compile_kernels(pre_ours, called_ours, target, prefix=name, library=library)

        def ws(gv):
            return kmod.workspace.get(gv.name_hint, 0)

        planned, reports = plan_module(pre_ours, alignment=alignment, workspace=ws, exact=exact_arena,
                                       time_limit=10.0 if exact_arena else 2.0, io=io, inplace=inplace,
                                       target=target)
        rep = [r for r in reports if r.function == "main"][0]
        if rep.status not in ("planned", "no allocations"):
            raise UnsupportedError(f"main cannot be planned statically ({rep.status})")
        return kmod, planned, rep, ws

    def build_ours(library):
        """Our program with the kernels of ``library`` by the microkernel library: (program, kernel module,
        planner report, live-peak bound, workspace function)."""
        kmod, planned, rep, ws = plan_ours(library)
        if any(k.needs_weight_sums and not k.sums_in_table for k in library.values()):
            kmod, planned, rep, ws = _place_weight_sums(library, plan_ours, (kmod, planned, rep, ws))
        ncalls = sum(1 for c in _iter_calls(planned["main"]))
        workspace = [(off, size) for _, _, off, size in rep.workspace] if rep.workspace else [(0, 0)] * ncalls
        prog = translate(planned["main"], kmod, workspace=workspace, alignment=alignment, prefix=name,
                         states=states, input_offsets=rep.inputs if io else None)
        if library:
            from .nn import repack

            repack(prog, library)
        return prog, kmod, rep, sum(rep.lower_bound_bytes.values()), ws

    t0 = time.perf_counter()
    programs, plans, lower_bound = {}, {}, 0
    rep = no_inplace = None
    choice = {}
    if pre_ours is not None:
        built = {mode: build_ours(lib) for mode, lib in libraries.items()}
        mode = next(iter(built))                 # "fast" when the library computes anything, else "tvm"
        if len(built) > 1:                       # "auto": both, measured, the faster one within 5% of RAM
            choice = _choose_kernels(built, board, name, states, io, alignment, measure)
            if choice["chosen"] == "tvm" and any(k.wide for k in libraries["fast"].values()):
                # over the RAM budget with widened convolution columns: the library with int8 columns
                libraries["fast"] = {n: k.narrowed() for n, k in libraries["fast"].items()}
                built["fast"] = build_ours(libraries["fast"])
                choice = _choose_kernels(built, board, name, states, io, alignment, measure)
                choice["reason"] += " (convolution columns not widened: within the budget only so)" \
                    if choice["chosen"] == "fast" else ""
            mode = choice["chosen"]
        prog, kmod, rep, lower_bound, ws = built[mode]
        library = libraries[mode]
        if inplace and rep.inplace:          # for the report: the gain of in-place execution alone
            _, plain = plan_module(pre_ours, alignment=alignment, workspace=ws, exact=exact_arena,
                                   time_limit=2.0, io=io, inplace=False, target=target)
            no_inplace = sum(r.total_bytes for r in plain if r.function == "main")
        elif inplace:
            no_inplace = rep.total_bytes
        programs["tvm_memsched"] = prog
        plans["tvm_memsched"] = PlanSizes("tvm_memsched", prog.arena_bytes, prog.storage_bytes, prog.max_workspace,
                                          len(prog.calls))
    else:
        mode, library, kmod = "tvm", {}, None
    if pre_tvm is not None:
        with target:
            planned_tvm = _tvm_call(lambda: tvm_planner(pre_tvm), "StaticPlanBlockMemory")
        prog = translate(planned_tvm["main"], kernels_tvm, workspace=None, alignment=alignment, prefix=name,
                         states=states)
        programs["tvm"] = prog
        plans["tvm"] = PlanSizes("tvm default", prog.arena_bytes, prog.storage_bytes, prog.workspace_bytes,
                                 len(prog.calls))
    seconds["plan"] = time.perf_counter() - t0
    prog = programs[planner]
    ours_side = planner == "tvm_memsched"
    prog.comment = _comment(board, planner, method, prog, lower_bound if ours_side else 0)
    files = write_project(out_dir, name, prog, kmod if ours_side else kernels_tvm, library=bool(library) and ours_side)
    io_bytes = 0 if prog.io_in_arena else sum(tensor_nbytes(s, d) for _, s, d in prog.inputs) + \
        sum(tensor_nbytes(s, d) for s, d in prog.outputs)
    exp = MicroExport(
        name=name, board=board, out_dir=os.path.abspath(out_dir), planner=planner, method=method, files=files,
        arena_bytes=prog.arena_bytes,
        storage_bytes=prog.storage_bytes,
        workspace_bytes=prog.max_workspace, io_bytes=io_bytes,
        params_bytes=sum(int(a.nbytes) for a in prog.params), kernel_calls=len(prog.calls),
        kernels=len({c.kernel for c in prog.calls}), lower_bound_bytes=lower_bound,
        default=plans.get("tvm"), ours=plans.get("tvm_memsched"), seconds=seconds, mod=reference, program=prog,
        int8=int8_report.to_dict() if int8_report is not None and int8_report.total else None,
        shrunk_kernels=[r.to_dict() for r in shrink.report if r.steps] if (shrink and ours) else [],
        shrunk_constants=[c.to_dict() for c in constant_sites] if ours_side else [],
        tvm_kernels_workspace_bytes=max(kernels_tvm.workspace.values(), default=0) if kernels_tvm else None,
        state_bytes=prog.state_bytes, states=list(states), branches=branches,
        inplace_ops=rep.inplace if rep is not None and ours_side else 0,
        arena_no_inplace_bytes=no_inplace if ours_side else None,
        kernel_mode=("fast" if library else "tvm") if ours_side else "tvm",
        kernel_choice=choice if ours_side else {},
        library_kernels={n: k.op for n, k in library.items()} if ours_side else {},
        macs=module_macs(mod), call_macs=_call_macs(prog, library if ours_side else {}),
        timeline=arena_timeline(rep.layout, rep.call_steps) if rep is not None and ours_side else [])
    if measure:
        from .firmware import measure as _measure

        t0 = time.perf_counter()
        m = choice.get("measured", {}).get(mode) if ours_side else None
        if m is None:
            m = _measure(exp)
        exp.flash_bytes, exp.static_ram_bytes, exp.stack_bytes = m.flash_bytes, m.static_ram_bytes, m.stack_bytes
        seconds["measure"] = time.perf_counter() - t0
    choice.pop("measured", None)
    from .cmake import write_cmake

    files.update(write_cmake(exp))
    atomic_write(os.path.join(out_dir, f"{name}_report.json"), json.dumps(exp.to_dict(), indent=1, default=str) + "\n")
    files["report"] = os.path.join(exp.out_dir, f"{name}_report.json")
    if check_fit:
        exp.check_fit()
    return exp


#: kernels="auto" takes the microkernel library unless its RAM total exceeds TVM's kernels' by more than this
#: fraction, and by more than RAM_BUDGET_FLOOR bytes (a couple of stack frames: noise on the smallest models)
RAM_BUDGET = 0.05
RAM_BUDGET_FLOOR = 256


def _choose_kernels(built: dict, board, name: str, states, io: bool, alignment: int, measure: bool) -> dict:
    """``kernels="auto"``: the library's build unless its RAM total exceeds TVM's kernels' by more than
    :data:`RAM_BUDGET` (measured by cross-compiling both, or from the arenas when ``measure`` is off)."""
    import tempfile

    from .codegen import tensor_nbytes

    sizes, measured = {}, {}
    for mode, (prog, kmod, rep, bound, _) in built.items():
        io_bytes = 0 if prog.io_in_arena else sum(tensor_nbytes(s, d) for _, s, d in prog.inputs) + \
            sum(tensor_nbytes(s, d) for s, d in prog.outputs)
        row = {"arena_bytes": prog.arena_bytes, "workspace_bytes": prog.max_workspace}
        if measure:
            from .firmware import measure as _measure

            with tempfile.TemporaryDirectory(prefix="tvm-memsched-kernels-") as tmp:
                files = write_project(tmp, name, prog, kmod, library=mode == "fast")
                probe = MicroExport(name=name, board=board, out_dir=tmp, planner="tvm_memsched", method="",
                                    files=files, arena_bytes=prog.arena_bytes, storage_bytes=prog.storage_bytes,
                                    workspace_bytes=prog.max_workspace, io_bytes=io_bytes, params_bytes=0,
                                    kernel_calls=len(prog.calls), kernels=0, program=prog)
                m = _measure(probe, os.path.join(tmp, "build"))
            measured[mode] = m
            row.update(ram_bytes=m.static_ram_bytes + m.stack_bytes + io_bytes, flash_bytes=m.flash_bytes,
                       stack_bytes=m.stack_bytes)
        else:
            row.update(ram_bytes=prog.arena_bytes + prog.state_bytes + io_bytes, flash_bytes=None)
        sizes[mode] = row
    budget = max(RAM_BUDGET * sizes["tvm"]["ram_bytes"], RAM_BUDGET_FLOOR)
    ok = sizes["fast"]["ram_bytes"] <= sizes["tvm"]["ram_bytes"] + budget
    reason = "the library (faster, within the RAM budget)" if ok else \
        "TVM's kernels (the library's build would exceed the RAM budget; --kernels fast forces it)"
    return dict(sizes, chosen="fast" if ok else "tvm", reason=reason, measured=measured,
                basis="measured RAM totals" if measure else "arenas (not cross-compiled)")


def _call_macs(prog, library) -> list:
    """Multiply-accumulates of each kernel call where the kernel's operator is known (None elsewhere)."""
    from .nn import call_macs

    return [call_macs(library[c.kernel].desc) if c.kernel in library else None for c in prog.calls]


def _check_signature(func) -> None:
    """Refuse early what the C export cannot take: non-tensor, dynamic or unsupported-dtype I/O."""
    from tvm import relax

    from .codegen import check_dtype, check_shape

    for p in func.params:
        if not isinstance(p.ty, relax.TensorType):
            raise UnsupportedError(f"parameter '{p.name}' is not a tensor ({p.ty}); the C export takes tensors")
        check_shape(p.ty, f"parameter '{p.name}'")
        check_dtype(p.ty, f"parameter '{p.name}'")

    def leaves(ty, what):
        if isinstance(ty, relax.TupleType):
            for i, f in enumerate(ty.fields):
                leaves(f, f"{what}[{i}]")
        elif isinstance(ty, relax.TensorType):
            check_shape(ty, what)
            check_dtype(ty, what)
        else:
            raise UnsupportedError(f"{what} is not a tensor ({ty}); the C export returns tensors")

    leaves(func.ret_ty, "the result of main")


def _iter_calls(func):
    import tvm

    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, tvm.ir.Call) and isinstance(b.value.op, tvm.ir.GlobalVar):
                yield b.value


def _does_not_fit_message(exp: MicroExport) -> str:
    b = exp.board
    parts = []
    if exp.ram_bytes > b.sram_bytes:
        static = exp.static_ram_bytes if exp.static_ram_bytes is not None else exp.arena_bytes
        parts.append(f"needs {exp.ram_bytes:,} B of RAM (arena {exp.arena_bytes:,} B + runtime "
                     f"{static - exp.arena_bytes:,} B + stack {exp.stack_bytes or 0:,} B + I/O buffers "
                     f"{exp.io_bytes:,} B) but {b.name} has {b.sram_bytes:,} B of SRAM "
                     f"(over by {exp.ram_bytes - b.sram_bytes:,} B)")
    if exp.flash_bytes is not None and exp.flash_bytes > b.flash_bytes:
        parts.append(f"needs {exp.flash_bytes:,} B of flash (constants {exp.params_bytes:,} B) but {b.name} has "
                     f"{b.flash_bytes:,} B")
    msg = f"model '{exp.name}' does not fit {b.name}: " + "; ".join(parts)
    if exp.default is not None and exp.planner == "tvm_memsched":
        msg += f" (TVM's default plan would need an arena of {exp.default.arena_bytes:,} B)"
    return msg + f"; files were written to {exp.out_dir}"


def _comment(board, planner, method, prog, lower_bound) -> str:
    if planner == "tvm_memsched":
        lines = [f"Board {board.name} ({board.core}); tvm_memsched order (method {method}) and arena plan.",
                 f"Arena {prog.arena_bytes} bytes: every intermediate tensor and each kernel call's workspace "
                 f"(largest {prog.max_workspace} bytes);",
                 f"live-peak lower bound {lower_bound} bytes."]
    else:
        lines = [f"Board {board.name} ({board.core}); TVM's order and StaticPlanBlockMemory plan.",
                 f"Arena {prog.arena_bytes} bytes: TVM's storages {prog.storage_bytes} bytes back to back, then one "
                 f"workspace region of {prog.workspace_bytes} bytes."]
    return "\n".join(lines + [f"{len(prog.calls)} kernel calls in the scheduled order."])
