"""Build a model with TVM's default pipeline and with ours, and compare memory and numerics.

Both builds share the stages before the planner's inputs diverge (dispatch,
legalization, fusion), then:

* **default**: TVM's order and ``StaticPlanBlockMemory``;
* **memsched**: ``ShrinkConstants`` on the operators and ``ShrinkWorkspace`` on
  the kernels (unless turned off), ``MemoryAwareReorder`` and ``ArenaPlanMemory``
  (with ``rewrite=True``, on the module after
  :func:`~tvm_memsched.relax.rewrite.identity_rewrite`, so the numerical check
  covers the rewrites too).

Planned bytes are measured from the lowered modules (the ``alloc_storage``
sizes right after planning; function outputs are not planned by either). The
live-tensor peak of each order is simulated on the kernel-level graph, with and
without kernel workspace. Both executables run on the same random inputs.

Example
-------
>>> from tvm_memsched.relax.testing import branchy_module
>>> c = compare(branchy_module(branches=3), method="dp")
>>> c.numerics_ok, c.memsched_planned_bytes <= c.default_planned_bytes
(True, True)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..core.errors import MemschedError
from ..core.limits import check_available_memory
from ..core.numerics import random_array
from ..core.simulate import peak_bytes
from .passes.arena import collect_plans, plannable_live_peak
from .graph import block_to_graph, used_after_blocks
from .ir import static_nbytes
from .passes.layout import ChannelsFirstReduction, convolutions_to
from .options import OptionError, PipelineOptions, resolve_options
from .pipeline import pipeline, resolve_layout
from .analysis.profiling import PassTimer, peak_rss
from .passes.transform import ArenaPlanMemory
from .passes.shrink_constants import shrink_constants as shrink_constants_
from .passes.absorb_transposes import absorb_transposes
from .passes.affine_chains import fold_affine_chains
from .target import as_target, stages
from .analysis.workspace import WorkspaceMeter

__all__ = ["DYNAMIC_QUANTIZATION_SPREAD", "Comparison", "compare", "random_inputs", "block_peaks", "run_vm", "time_vm"]

#: a run-time quantized model's float outputs agree with its reference runtime within this fraction of their
#: range: a 1-ulp difference in a float operator (onnxruntime's Sigmoid is a polynomial approximation)
#: rounds a dynamically quantized value one step apart, and the step spreads through the layers after it
#: (ddddocr's dynamically quantized captcha recogniser: 0.6-1.0% of the logits' range after 21 convolutions,
#: depending on the input, the same class at every step)
DYNAMIC_QUANTIZATION_SPREAD = 0.05


@dataclass
class Comparison:
    """Default pipeline vs tvm_memsched on one model (all sizes in bytes)."""

    model: str
    target: str
    method: str
    default_planned_bytes: int
    memsched_planned_bytes: int
    default_plannable_peak_bytes: int
    memsched_plannable_peak_bytes: int
    default_live_peak_bytes: int
    memsched_live_peak_bytes: int
    default_live_peak_with_workspace_bytes: int
    memsched_live_peak_with_workspace_bytes: int
    lower_bound_bytes: int
    workspace_max_bytes: int
    workspace_total_bytes: int
    memsched_workspace_max_bytes: int
    numerics_ok: bool
    max_abs_diff: float
    default_compile_seconds: float
    memsched_compile_seconds: float
    scheduling_seconds: float
    optimal: bool
    functions: list = field(default_factory=list)
    reference: str = ""                                   # the runtime our outputs were also checked against
    reference_ok: bool | None = None
    reference_max_abs_diff: float | None = None
    reference_spread: float | None = None                 # largest difference / the output's range (run-time
    reference_spread_tolerance: float | None = None       # quantized models) and the fraction allowed
    blocks: list = field(default_factory=list)
    default_storages: dict = field(default_factory=dict)
    default_profile: list = field(default_factory=list)   # stable bytes per kernel step, TVM's order
    memsched_profile: list = field(default_factory=list)  # the same for our order
    layout: list = field(default_factory=list)            # our arena: (name, scope, offset, size, start, end)
    rewrites: list = field(default_factory=list)          # identity rewrites applied to our side (rule, var, ...)
    int8: dict | None = None                              # int8 lowering of our side (LoweringReport.to_dict())
    int8_max_lsb_vs_default: float | None = None          # TFLite integer arithmetic vs TVM's float emulation
    default_run_seconds: float | None = None              # median VM run time of each executable
    memsched_run_seconds: float | None = None
    memsched_planned_no_inplace_bytes: int | None = None  # our order and planner without in-place execution
    inplace_taken: int = 0                                # kernel outputs our plan put over a dying input
    largest_tensor_bytes: int = 0                         # our largest activation: no in-place plan goes below
    tiling: dict | None = None                            # compare(tile=...): the patch tiling search
    analysis_seconds: float = 0.0                         # the report's own analysis (not in the compile times)
    default_peak_rss_bytes: int = 0                       # the compiler's peak resident memory, each side
    memsched_peak_rss_bytes: int = 0
    default_rss_growth_bytes: int = 0                     # ... above what the process held when it started
    memsched_rss_growth_bytes: int = 0
    common_pass_seconds: dict = field(default_factory=dict)    # seconds per pass: the shared stages, then
    default_pass_seconds: dict = field(default_factory=dict)   # each side's own
    memsched_pass_seconds: dict = field(default_factory=dict)
    tradeoff: str = "memory"                              # kernel speed against workspace (pipeline's tradeoff)
    kernel_choices: list = field(default_factory=list)    # balanced: each kernel's variant and why (KernelChoice)
    tuning: dict | None = None                            # compare(tune=N): trials, database, each side's kernels

    @property
    def ratio(self) -> float:
        """How many times less planned memory than TVM's default (higher is better)."""
        return self.default_planned_bytes / self.memsched_planned_bytes if self.memsched_planned_bytes else 1.0

    def to_dict(self, details: bool = False) -> dict:
        """Plain JSON fields; ``details`` adds the per-step profiles and the arena layout."""
        d = asdict(self)
        d["ratio"] = round(self.ratio, 4)
        if not details:
            for k in ("default_profile", "memsched_profile", "layout"):
                d.pop(k)
        return d

    def profile(self, n: int = 12) -> str:
        """The slowest passes of each side (the shared dispatch and legalization counted on both)."""
        from .analysis.profiling import profile_table

        return profile_table({"TVM default": _merge(self.common_pass_seconds, self.default_pass_seconds),
                              "tvm_memsched": _merge(self.common_pass_seconds, self.memsched_pass_seconds)}, n)

    def _tuning_line(self) -> str:
        t = self.tuning
        ours, theirs = t["memsched"], t["default"]
        taken = [k for k in ours if k["tuned"]]
        why: dict = {}
        for k in ours:
            if not k["tuned"]:
                why.setdefault(k["reason"].split(" (")[0].split(":")[0], []).append(k["kernel"])
        line = (f"  tuned with MetaSchedule ({t['trials']} trials per kernel, database {t['database']}; "
                + (f"{t['kernels_tuned_now']} kernel(s) tuned now in {t['seconds']:.0f}s, not in the compile times"
                   if t["kernels_tuned_now"] else "every kernel from the database, nothing tuned")
                + f"): TVM default {sum(k['tuned'] for k in theirs)} of {len(theirs)} kernels ({t['default_rules']} "
                f"rules), ours {len(taken)} of {len(ours)} ({t['rules']} rules)")
        if why:
            line += "; untuned: " + "; ".join(f"{len(v)} because {r}" for r, v in why.items())
        return line

    def summary(self) -> str:
        if max(self.default_planned_bytes, self.memsched_live_peak_with_workspace_bytes or 0) >= 100_000:
            mb = lambda n: f"{n / 1e6:.3f} MB"  # noqa: E731
        else:                          # a small model: bytes, not 0.000 MB
            mb = lambda n: f"{n:,} B"  # noqa: E731
        ratio = f"{self.ratio:.2f}x less" if self.ratio >= 1 else f"{1 / self.ratio:.2f}x more" if self.ratio > 0 \
            else "TVM's default plans no activation memory here"
        lines = [
            f"model {self.model} on {self.target} (method {self.method})",
            f"  planned activation memory: TVM default {mb(self.default_planned_bytes)}, "
            f"tvm_memsched {mb(self.memsched_planned_bytes)}  ({ratio})",
            f"  in-place execution: {self.inplace_taken} kernel output(s) over a dying input; our plan without "
            f"in-place {mb(self.memsched_planned_no_inplace_bytes)} "
            f"({self.memsched_planned_no_inplace_bytes / max(1, self.memsched_planned_bytes):.2f}x)"
            if self.memsched_planned_no_inplace_bytes is not None else "  in-place execution: off",
            f"  live peak of the planned tensors: TVM order {mb(self.default_plannable_peak_bytes)}, "
            f"our order {mb(self.memsched_plannable_peak_bytes)}",
            f"  live peak incl. outputs: TVM order {mb(self.default_live_peak_bytes)}, our order "
            f"{mb(self.memsched_live_peak_bytes)}; lower bound {mb(self.lower_bound_bytes)}"
            f"{' (proven optimal order)' if self.optimal else ''}",
            f"  live peak incl. outputs and kernel workspace (the VM serves workspace from a separate pool): "
            f"TVM order {mb(self.default_live_peak_with_workspace_bytes)}, our order "
            f"{mb(self.memsched_live_peak_with_workspace_bytes)}",
            f"  kernel workspace: largest {mb(self.workspace_max_bytes)} (ours "
            f"{mb(self.memsched_workspace_max_bytes)}), all kernels {mb(self.workspace_total_bytes)}",
            f"  numerics: {'identical' if self.max_abs_diff == 0 else 'max abs diff %.3g' % self.max_abs_diff}"
            f" ({'ok' if self.numerics_ok else 'MISMATCH'})" + (
                f"; ours vs {self.reference}: max abs diff {self.reference_max_abs_diff:.3g} "
                f"({'ok' if self.reference_ok else 'MISMATCH'})" if self.reference else "") + (
                f"\n    the model quantizes activations at run time, so the last-bit differences of the two "
                f"runtimes' float operators (Sigmoid, ...) can round a quantized value apart: differences up to "
                f"{self.reference_spread_tolerance:.0%} of an output's range agree (largest here "
                f"{self.reference_spread:.2%})" if self.reference_spread is not None else ""),
            f"  compile: TVM {self.default_compile_seconds:.2f}s, ours {self.memsched_compile_seconds:.2f}s "
            f"({self.memsched_compile_seconds / max(1e-9, self.default_compile_seconds):.2f}x; scheduling "
            f"{self.scheduling_seconds:.2f}s; this report's analysis {self.analysis_seconds:.2f}s more)",
            f"  compiler peak resident memory: TVM {self.default_peak_rss_bytes / 1e6:.0f} MB, ours "
            f"{self.memsched_peak_rss_bytes / 1e6:.0f} MB (growth during the compile "
            f"{self.default_rss_growth_bytes / 1e6:.0f} MB / {self.memsched_rss_growth_bytes / 1e6:.0f} MB)",
        ]
        if self.default_run_seconds is not None:
            lines.append(f"  run time (VM, median): TVM {self.default_run_seconds * 1e3:.2f} ms, ours "
                         f"{self.memsched_run_seconds * 1e3:.2f} ms "
                         f"({self.memsched_run_seconds / max(1e-12, self.default_run_seconds):.2f}x)")
        if self.kernel_choices:
            fast = [c for c in self.kernel_choices if c["fast"]]
            least = [c for c in self.kernel_choices if not c["fast"]]
            line = (f"  kernels (tradeoff {self.tradeoff}): {len(fast)} of {len(self.kernel_choices)} convolutions "
                    f"pad in bands (largest workspace {max([c['workspace_bytes'] for c in fast] or [0]):,} B, "
                    "within 10% of the live peak)")
            slower = [c for c in least if c["reason"].startswith("not faster")]
            over = [c for c in least if c not in slower]
            if slower:
                line += f"; {len(slower)} timed no faster in bands here, so least memory"
            if over:
                line += "; least memory: " + ", ".join(f"{c['kernel']} ({c['reason']})" for c in over[:3]) \
                    + (f" and {len(over) - 3} more" if len(over) > 3 else "")
            lines.append(line)
        elif self.tradeoff != "balanced":
            lines.append(f"  kernels (tradeoff {self.tradeoff})")
        if self.tuning:
            lines.append(self._tuning_line())
        if self.int8:
            lines.insert(1, f"  {self.int8['summary']}; our integer outputs vs TVM's float emulation: "
                            f"max {self.int8_max_lsb_vs_default:g} LSB (numerics checked against TVM's default "
                            "build of the lowered module)")
        if self.rewrites:
            rules = sorted({r["rule"] for r in self.rewrites})
            lines.insert(1, f"  identity rewrites on our side: {len(self.rewrites)} ({', '.join(rules)})")
        return "\n".join(lines)


def random_inputs(func, seed: int = 0) -> list[np.ndarray]:
    """Random arrays for every parameter of a Relax function (static shapes only)."""
    from .ir import static_shape

    rng = np.random.default_rng(seed)
    out = []
    for p in func.params:
        ty = p.ty
        shape = static_shape(ty)
        if shape is None:
            raise MemschedError(f"parameter '{p.name}' has a dynamic shape; pass inputs explicitly")
        out.append(random_array(rng, shape, str(ty.dtype)))
    return out


def block_peaks(mod, meter, inplace: bool = False) -> tuple[int, int, list]:
    """Largest program-order peak over the Relax functions' blocks: (without, with workspace, graphs).

    ``inplace``: count kernel outputs that may take over a dying input (as our planner does,
    :class:`~tvm_memsched.relax.analysis.inplace.InplaceAnalyzer`).
    """
    from .analysis.inplace import InplaceAnalyzer

    analyzer = InplaceAnalyzer(mod) if inplace else None
    total = total_ws = 0
    graphs = []
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        after = used_after_blocks(func)
        for k, block in enumerate(func.body.blocks):
            if not isinstance(block, relax.DataflowBlock):
                continue
            try:
                g_ws = block_to_graph(func, k, workspace=meter, used_after=after[k], inplace=analyzer).graph
                g = block_to_graph(func, k, used_after=after[k], inplace=analyzer).graph
            except MemschedError:
                continue
            total = max(total, peak_bytes(g, [op.name for op in g.ops]))
            total_ws = max(total_ws, peak_bytes(g_ws, [op.name for op in g_ws.ops]))
            graphs.append(g_ws)
    return total, total_ws, graphs


def run_vm(ex, inputs, func: str = "main") -> list[np.ndarray]:
    """Run a compiled Relax executable on the VM; the outputs as a flat list of arrays."""
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm[func](*[tvm.runtime.tensor(a) for a in inputs])
    flat = []

    def walk(o):
        if hasattr(o, "numpy"):
            flat.append(o.numpy())
        else:
            for x in o:
                walk(x)

    walk(out)
    return flat


def _magnitude(y) -> float:
    """The largest finite magnitude of a float array (0 for others and empty ones).

    >>> _magnitude(np.array([1.0, -3.0, np.inf])), _magnitude(np.array([1, 2]))
    (3.0, 0.0)
    """
    y = np.asarray(y)
    if y.dtype.kind != "f" or not y.size:
        return 0.0
    return float(np.max(np.abs(y[np.isfinite(y)]), initial=0.0))


def time_vm(ex, inputs, func: str = "main", repeat: int = 5, budget: float = 10.0) -> float:
    """Median wall time (seconds) of up to ``repeat`` runs of ``func`` on the VM after one warm-up run, as many
    as fit in ``budget`` seconds: a model whose inference takes longer than the budget is timed by the
    warm-up run alone (the first call's setup is negligible beside it), one taking a second by ten runs at most."""
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in inputs]
    t0 = time.perf_counter()
    vm[func](*args)
    warm = time.perf_counter() - t0
    if warm >= budget:
        return warm
    times = []
    for _ in range(max(1, min(repeat, int(budget / max(warm, 1e-9))))):
        t0 = time.perf_counter()
        vm[func](*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def compare(mod, target=None, options: PipelineOptions | None = None, *, inputs=None, seed: int = 0,
            rtol: float = 1e-4, atol: float = 1e-5, name: str = "model", run: bool = True, repeat: int = 5,
            reference=None, **overrides) -> Comparison:
    """Build ``mod`` with TVM's default pipeline and with ours; compare (see module docs).

    Our side is built with ``options`` (a :class:`~tvm_memsched.relax.options.PipelineOptions`, changed by
    keyword ``overrides`` of the same names, as :func:`~tvm_memsched.relax.pipeline.pipeline` takes them;
    ``reorder`` and ``plan`` stay on: they are what is compared). Of those: ``rewrite``: apply
    :func:`~tvm_memsched.relax.rewrite.identity_rewrite` to our side first (``True``, a policy, or a dict of
    its options such as ``{"policy": "always"}``).
    ``int8`` (default True): lower quantized operator groups of our side to
    TFLite's integer kernels first (:func:`~tvm_memsched.relax.int8.lower.lower_int8`);
    TVM's default side keeps its float emulation. Our outputs are then checked
    against TVM's default build of the lowered module (same arithmetic), and
    the integer difference to TVM's float emulation is reported. ``repeat``:
    runs of each executable for the median run time (0 skips timing).
    ``shrink_workspace=False`` keeps TVM's kernels on our side too,
    ``shrink_constants=False`` the constants as imported. ``tile``: patch-tile our side's first
    stage first (:class:`~tvm_memsched.relax.passes.tiling.PatchTiling`; ``True`` or a dict of its
    options); the outputs are still checked against TVM's default build of the untiled model.
    ``reference``: ``(name, run)``, ``(name, run, n)`` or ``(name, run, n, spread)``, ``run(inputs) ->
    outputs`` in the model's order (compared with our first ``n`` outputs, all when None: a stateful model's are
    followed by its states) (e.g. LiteRT's reference kernels for a ``.tflite``): our outputs are also checked
    against it, so a wrong import, which both builds share, shows (floats within ``10 * rtol`` of the largest
    output, integers within 1: TFLite's integer arithmetic after int8 lowering; TVM's float emulation of it
    drifts further on deep networks). ``spread``: a float output also agrees within that fraction of its range
    (a model quantized at run time, whose quantizers round the last-bit differences of two runtimes' float
    operators apart: :data:`DYNAMIC_QUANTIZATION_SPREAD`). With ``tune`` the two builds' kernels sum their
    reductions in different orders (each side's tuned schedule), so a float output agrees within ``rtol`` of
    its largest magnitude (an element near zero may end a long sum whose terms are not) plus ``atol``.
    """
    o = resolve_options(options, overrides)
    if not (o.reorder and o.plan):
        raise OptionError("compare: reorder=False and plan=False apply to pipeline() and build() only (compare "
                          "compares our order and plan with TVM's)")
    target = as_target(target)
    st = stages(target)
    names = [p.info.name for p in st["finalize"]]
    k = names.index("StaticPlanBlockMemory")
    extra = list(o.extra_passes)
    ws_mode = o.workspace
    timers = {side: PassTimer() for side in ("common", "default", "memsched")}

    def passes(side):
        return tvm.transform.PassContext(opt_level=3, instruments=[timers[side]])

    with target:
        t0 = time.perf_counter()
        with peak_rss() as rss_common, passes("common"):
            fused = tvm.transform.Sequential(st["dispatch"] + st["legalize"])(mod)
        t_common = time.perf_counter() - t0
        # ---- TVM default (timed: what building it costs; the analysis for the report comes after), tuned as a
        # TVM user tunes it (MetaSchedule's own CPU rules) when ours is
        d_tune, t_tuning = None, 0.0
        if o.tune:
            from .passes.tune_kernels import TuneKernels, default_tuning_database

            d_tune = TuneKernels(o.tune_database or default_tuning_database(), o.tune, target, "speed", "llvm",
                                 o.progress)
            tuned_fused = d_tune(fused)
            t_tuning += d_tune.tuner.tuning_seconds
        t0 = time.perf_counter()
        with peak_rss() as rss_default, passes("default"):
            d_lowered = tvm.transform.Sequential(st["dataflow_lower"][:1])(tuned_fused if d_tune else fused)
            d_pre = tvm.transform.Sequential(st["dataflow_lower"][1:] + st["finalize"][:k])(d_lowered)
            d_planned_mod = tvm.transform.Sequential(st["finalize"][k:k + 1])(d_pre)
            d_final = tvm.transform.Sequential(st["finalize"][k + 1:])(d_planned_mod)
            d_ex = tvm.compile(d_final, target, relax_pipeline=None)
        t_default = time.perf_counter() - t0 + t_common + (d_tune.seconds - d_tune.tuner.tuning_seconds
                                                            if d_tune else 0.0)
        # ---- ours (ShrinkWorkspace and extra passes run after FuseTIR, as in pipeline())
        t0 = time.perf_counter()
        with peak_rss() as rss_ours, passes("memsched"):
            ours_mod, int8_report, tiling = mod, None, None
            if o.tile:
                from .passes.tiling import PatchTiling

                tiling = PatchTiling(**(dict(o.tile) if isinstance(o.tile, dict) else {}))
                ours_mod = tiling(mod)
            untiled = ours_mod is mod
            if o.int8:
                from .int8.lower import lower_int8

                base = ours_mod
                ours_mod, int8_report = lower_int8(base)
                if not int8_report.total:
                    ours_mod, int8_report = base, None
            rewrites = []
            if o.rewrite:
                from .rewrite import identity_rewrite

                kw = dict(o.rewrite) if isinstance(o.rewrite, dict) else {"policy": o.rewrite}
                kw.setdefault("target", target)
                r_mod, r_report = identity_rewrite(ours_mod, **kw)
                rewrites = [asdict(site) for site in r_report.sites]
                ours_mod = r_mod if rewrites else ours_mod
            if o.shrink_constants:
                ours_mod = shrink_constants_(ours_mod)[0]
            if o.absorb_transposes:
                ours_mod = absorb_transposes(ours_mod)[0]
            affine = o.affine_chains
            if affine:
                ours_mod = fold_affine_chains(ours_mod, **(affine if isinstance(affine, dict) else {}))[0]
            conv_layout = resolve_layout(o.layout, o.inplace)
            if conv_layout:
                ours_mod = convolutions_to(ours_mod, conv_layout.rstrip("?"),
                                           boundary_only=conv_layout.endswith("?"))[0]
            m_base = fused if ours_mod is mod else \
                tvm.transform.Sequential(st["dispatch"] + st["legalize"])(ours_mod)
            # the passes above already ran on the operators: the pipeline's kernel-level passes only
            p = pipeline(target, o.replace(int8=False, shrink_constants=False, rewrite=False, tile=False,
                                           extra_passes=()))
            reorder, arena = p.reorder, p.arena
            # only convolutions ConvolutionLayout or AbsorbTransposes converted from NCHW
            reduction = ChannelsFirstReduction() if conv_layout or o.absorb_transposes else None
            kernel_passes = [q for q in (p.inline, reduction, p.tune, p.shrink, p.vectorize) if q is not None] + extra
            m_fused = tvm.transform.Sequential(kernel_passes)(m_base) if kernel_passes else m_base
            after_reorder = [reorder] + ([p.balance] if p.balance is not None else [])
            m_lowered = tvm.transform.Sequential(st["dataflow_lower"][:1] + after_reorder)(m_fused)
            m_pre = tvm.transform.Sequential(st["dataflow_lower"][1:] + st["finalize"][:k])(m_lowered)
            m_planned_mod = arena(m_pre)
            m_final = tvm.transform.Sequential(st["finalize"][k + 1:])(m_planned_mod)
            m_ex = tvm.compile(m_final, target, relax_pipeline=None)
        t_ours = time.perf_counter() - t0 + (t_common if m_base is fused else 0.0)
        if p.tune is not None:        # tuning is not compiling: a second build from the same database skips it
            t_ours -= p.tune.tuner.tuning_seconds
            t_tuning += p.tune.tuner.tuning_seconds
        # ---- what the report adds: live peaks of both orders, the plans, our plan without in-place
        t0 = time.perf_counter()
        meter = WorkspaceMeter(fused, target, ws_mode)
        d_live, d_live_ws, d_graphs = block_peaks(d_lowered, meter)
        d_plannable = plannable_live_peak(d_pre)
        d_storages = collect_plans(d_planned_mod)
        m_meter = WorkspaceMeter(m_lowered, target, ws_mode) if (kernel_passes or m_base is not fused) else meter
        m_live, m_live_ws, m_graphs = block_peaks(m_lowered, m_meter, inplace=arena.inplace)
        m_plannable = plannable_live_peak(m_pre, inplace=arena.inplace)
        m_storages = collect_plans(m_planned_mod)
        no_inplace = None
        if arena.inplace:              # the same order planned without in-place, for the report
            plain = ArenaPlanMemory(alignment=arena.alignment, exact=arena.exact, inplace=False)
            no_inplace = sum(sum(v) for v in collect_plans(plain(m_pre)).values())
        t_analysis = time.perf_counter() - t0
    ws = [meter(gv) for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    m_ws = [m_meter(gv) for gv, f in m_lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    numerics_ok, diff, lsb, t_d, t_m, spread, ref_spread = True, 0.0, None, None, None, None, None
    if run:
        check_available_memory(2 * sum(static_nbytes(p.ty) or 0 for p in mod["main"].params)
                               + sum(sum(v) for v in d_storages.values())
                               + sum(sum(v) for v in m_storages.values()) + 2 * max(ws + m_ws + [0]),
                               f"running {name} for the numeric check", "give --no-run (compare(run=False)) "
                               "to compare memory only")
        inputs = random_inputs(mod["main"], seed) if inputs is None else inputs
        a, b = run_vm(d_ex, inputs), run_vm(m_ex, inputs)
        if int8_report is not None:
            # same arithmetic on both sides: TVM's default build of the lowered module is the reference
            lsb = _max_abs_diff(a, b)
            ref = ours_mod if untiled else lower_int8(mod)[0]
            a = run_vm(tvm.compile(ref, target), inputs)
        numerics_ok = len(a) == len(b) and all(x.shape == y.shape and np.allclose(
            x, y, rtol=rtol, atol=atol + (rtol * _magnitude(y) if o.tune else 0.0), equal_nan=True)
            for x, y in zip(a, b))
        diff = _max_abs_diff(a, b)
        if reference is not None:
            ref_name, ref_run = reference[:2]
            n_compared = reference[2] if len(reference) > 2 else None
            spread = reference[3] if len(reference) > 3 else None
            r = [np.asarray(x) for x in ref_run(inputs)]   # against our build: int8 lowering is TFLite's
            if n_compared is not None:
                b = b[:n_compared]      # a stateful model: its outputs, not the states it passes on
            same = len(b) == len(r) and all(x.shape == y.shape for x, y in zip(b, r))   # TVM's emulation isn't
            ref_diff = _max_abs_diff(b, r) if same else float("inf")
            ref_ok = same and all(_max_abs_diff([x], [y]) <= (1.0 if y.dtype.kind in "iub" else max(
                10 * rtol * max(1.0, float(np.max(np.abs(y), initial=0.0))),
                (spread or 0.0) * float(np.ptp(np.nan_to_num(y))) if y.size else 0.0)) for x, y in zip(b, r))
            if spread and same:
                ref_spread = max((_max_abs_diff([x], [y]) / max(float(np.ptp(np.nan_to_num(y))), 1e-30)
                                  for x, y in zip(b, r) if y.dtype.kind == "f" and y.size), default=0.0)
        if repeat:
            t_d, t_m = time_vm(d_ex, inputs, repeat=repeat), time_vm(m_ex, inputs, repeat=repeat)
    blocks = [r.to_dict() for r in reorder.report]
    return Comparison(
        model=name, target=str(target.kind.name), method=o.method,
        default_planned_bytes=sum(sum(v) for v in d_storages.values()),
        memsched_planned_bytes=sum(sum(v) for v in m_storages.values()),
        memsched_planned_no_inplace_bytes=no_inplace,
        inplace_taken=sum(f.inplace for f in arena.report),
        default_plannable_peak_bytes=d_plannable, memsched_plannable_peak_bytes=m_plannable,
        default_live_peak_bytes=d_live, memsched_live_peak_bytes=m_live,
        default_live_peak_with_workspace_bytes=d_live_ws, memsched_live_peak_with_workspace_bytes=m_live_ws,
        lower_bound_bytes=max([r.lower_bound for r in reorder.report] or [0]),
        workspace_max_bytes=max(ws or [0]), workspace_total_bytes=sum(ws),
        memsched_workspace_max_bytes=max(m_ws or [0]),
        numerics_ok=numerics_ok, max_abs_diff=diff,
        **({"reference": ref_name, "reference_ok": bool(ref_ok), "reference_max_abs_diff": ref_diff,
            "reference_spread": ref_spread, "reference_spread_tolerance": spread}
           if run and reference is not None else {}),
        default_compile_seconds=round(t_default, 3), memsched_compile_seconds=round(t_ours, 3),
        analysis_seconds=round(t_analysis, 3),
        default_peak_rss_bytes=max(rss_common.peak_bytes, rss_default.peak_bytes),
        memsched_peak_rss_bytes=max(rss_common.peak_bytes if m_base is fused else 0, rss_ours.peak_bytes),
        default_rss_growth_bytes=rss_common.growth_bytes + rss_default.growth_bytes,
        memsched_rss_growth_bytes=(rss_common.growth_bytes if m_base is fused else 0) + rss_ours.growth_bytes,
        common_pass_seconds=_rounded(timers["common"].seconds) if m_base is fused else {},
        default_pass_seconds=_rounded(timers["default"].seconds if m_base is fused else
                                      _merge(timers["common"].seconds, timers["default"].seconds)),
        memsched_pass_seconds=_rounded(timers["memsched"].seconds),
        scheduling_seconds=round(sum(r.seconds for r in reorder.report), 3),
        optimal=all(r.optimal for r in reorder.report if not r.status.startswith("skipped")),
        functions=[f.to_dict() for f in arena.report], blocks=blocks,
        default_storages={k2: list(v) for k2, v in d_storages.items()},
        default_profile=_profile(d_graphs), memsched_profile=_profile(m_graphs),
        layout=[list(x) for f in arena.report for x in f.layout], rewrites=rewrites,
        int8=int8_report.to_dict() if int8_report is not None else None, int8_max_lsb_vs_default=lsb,
        default_run_seconds=t_d, memsched_run_seconds=t_m,
        largest_tensor_bytes=max((size for g in m_graphs for size in g.size), default=0),
        tiling=tiling.result.to_dict() if tiling is not None and tiling.result is not None else None,
        tradeoff=o.tradeoff,
        kernel_choices=[c.to_dict() for c in p.balance.report] if p.balance is not None else [],
        tuning=_tuning_report(o, d_tune, p.tune, t_tuning) if o.tune else None)


def _tuning_report(o, d_tune, m_tune, seconds: float) -> dict:
    """What ``compare(tune=N)`` tuned on each side (:class:`~tvm_memsched.relax.passes.tune_kernels.TunedKernel`)."""
    return {"trials": o.tune, "database": d_tune.database, "rules": o.tune_rules, "default_rules": "llvm",
            "seconds": round(seconds, 3),
            "kernels_tuned_now": d_tune.tuner.tuned_kernels + m_tune.tuner.tuned_kernels,
            "default": [asdict(r) for r in d_tune.report], "memsched": [asdict(r) for r in m_tune.report]}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _rounded(seconds: dict) -> dict:
    return {k: round(v, 4) for k, v in seconds.items()}


def _max_abs_diff(a, b) -> float:
    """Largest element difference of two output lists; NaN against NaN and an infinity against the same
    infinity count as equal (a logarithm of a negative input is NaN in every runtime), NaN against a
    number as infinitely far."""
    from ..core.numerics import difference

    def diff(x, y):
        return float(np.max(difference(np.atleast_1d(x), np.atleast_1d(y))))

    return max((diff(x, y) for x, y in zip(a, b) if x.size and x.shape == y.shape), default=0.0)


def _profile(graphs) -> list[int]:
    """Stable footprints (with workspace) of the largest block, in binding order."""
    if not graphs:
        return []
    from ..core.simulate import footprints

    g = max(graphs, key=lambda g: g.num_ops)
    stable, _ = footprints(g, list(range(g.num_ops)))
    return stable
