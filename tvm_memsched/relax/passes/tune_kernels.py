"""MetaSchedule-tuned kernels, where they cost no memory: the ``TuneKernels`` pass (run before ShrinkWorkspace).

A TVM user who cares about latency tunes the kernels with MetaSchedule. Our
pipeline changes the kernels before they are built (int8 lowering, producers
inlined into their consumers, channels-last convolutions, sums in TVM's order),
so a database tuned on TVM's default kernels does not match ours. This pass
tunes *the kernels our pipeline emits*: placed after ``InlineProducers`` and
``ChannelsFirstReduction``, it sees each kernel as the rest of the pipeline will
build it, before ``ShrinkWorkspace`` schedules it for memory, and for each one

1. looks the kernel up in the database (a MetaSchedule ``JSONDatabase`` in a
   directory the user keeps); kernels it has never seen are tuned, all of them in
   one MetaSchedule run (``trials`` measured candidates each, built and run on this
   machine), and committed to it, so a second build with the same database tunes
   nothing;
2. takes the best schedule found, to be weighed against the least-memory form ``ShrinkWorkspace`` makes
   of the same kernel:

   * ``tradeoff="memory"``: the tuned kernel carrying its unscheduled form
     (:data:`~tvm_memsched.relax.passes.shrink_workspace.UNSHRUNK`), so that
     :class:`~tvm_memsched.relax.passes.balance_kernels.BalanceKernels` (after the reorder, with no
     allowance) keeps it only where the live tensors plus its workspace stay within the peak of the
     least-memory build (with that build's in-place overlaps) and it is faster, and schedules the
     least-memory form elsewhere: the plan's peak is the same;
   * ``"balanced"``: the same with the pipeline's allowance;
   * ``"speed"``: the tuned kernel wherever there is one (kept out of in-place execution,
     :data:`~tvm_memsched.relax.analysis.inplace.KEEP_NOALIAS`);

   a tuned kernel is marked ``tirx.is_scheduled`` and left alone by ``ShrinkWorkspace``.

Rules: ``rules="unsplit"`` (default) is MetaSchedule's CPU rule set without ``AddRFactor`` and with one
reduction level in its multi-level tiling: the loops over output elements are tiled, vectorized,
parallelized and unrolled, a reduction is never split, so every sum adds its terms in one sequence as the
untuned kernel does (measured: the tuned kernels of the zoo's ResNet within 6e-7 of the untuned build,
not bit-identical: tiling regroups the loops of a convolution's reduction); ``rules="llvm"`` uses
MetaSchedule's CPU rules as they are (also splits and factors reductions). A kernel MetaSchedule cannot
schedule (one ``InlineProducers`` computed in bands is already scheduled) keeps its untuned form, with the
reason in ``report``.

The tuning runs MetaSchedule's local runner and a builder whose worker processes
serve the whole run (on this machine; kernels are built without importing
``tvm.s_tir.tensor_intrin``, which takes minutes to import and which CPU kernels
do not use).

Example
-------
>>> import tvm
>>> p = TuneKernels("/tmp/my_tuning_db", trials=0)      # trials=0: only what the database already has
>>> isinstance(tvm.transform.Sequential([p]), tvm.transform.Pass)
True
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from ...core.errors import MemschedError
from ..analysis.inplace import KEEP_NOALIAS
from ..analysis.workspace import compacted_workspace_bytes
from ..ir import strip_attrs
from .shrink_workspace import SCHEDULED, UNSHRUNK

__all__ = ["TuneKernels", "TunedKernel", "KernelTuner", "RULES", "SCHEDULED", "build_kernel", "tuned_funcs",
           "default_tuning_database", "tuning_target"]

#: rule sets: "unsplit" never splits a reduction, "llvm" is MetaSchedule's own
RULES = ("unsplit", "llvm")
#: attributes a tuning workload keeps (the rest are annotations of our passes)
_WORKLOAD_ATTRS = ("s_tir", "tirx.noalias")
#: the evolutionary search's candidates per measured one (its population is at most MetaSchedule's 512)
SEARCH_PER_TRIAL = 16
#: fewest trials per kernel for which the XGBoost cost model guides the search (below it, random)
XGB_MIN_TRIALS = 16


def search_effort(trials: int) -> dict:
    """The search MetaSchedule runs per kernel for a budget of ``trials`` measured candidates: ``population``
    (candidates each round of the evolutionary search keeps) and ``cost_model``.

    MetaSchedule's defaults (a population of 512, four genetic rounds over it, an XGBoost model retrained as
    results come in) are sized for budgets of hundreds of trials; for a few they are nearly all of the tuning
    time (4 trials per kernel: about 20 s a kernel on 2 cores, most of it the search over 512 candidates and
    XGBoost trained on four samples), while a model trained on a handful of measurements has little to go on. So the
    population scales with the budget, :data:`SEARCH_PER_TRIAL` per trial from 64 up to 512, and the model is
    XGBoost from :data:`XGB_MIN_TRIALS` trials on (random below). The same on both sides of ``compare --tune``.

    >>> search_effort(4)["population"], search_effort(64)["population"], search_effort(4)["cost_model"]
    (64, 512, 'random')
    """
    population = max(64, min(512, SEARCH_PER_TRIAL * trials))
    return {"population": population, "cost_model": "xgb" if trials >= XGB_MIN_TRIALS and _has_xgboost()
            else "random"}


@dataclass
class TunedKernel:
    """What the pass did with one kernel."""

    kernel: str
    tuned: bool                        # a tuned schedule was found (BalanceKernels may still choose the other)
    reason: str = ""                   # why not (or how it was decided)
    seconds: float | None = None       # the tuned kernel's time per run, as MetaSchedule measured it
    workspace_bytes: int | None = None   # the tuned kernel's


def build_kernel(mod, target, _params=None):
    """MetaSchedule's builder function for CPU kernels: ``default_build`` without importing
    ``tvm.s_tir.tensor_intrin`` (tensor intrinsics for GPUs and accelerators; importing them parses hundreds
    of TVMScript functions, minutes on a loaded machine, in every builder worker)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def _build_and_export(mod, target) -> str:
    """What a builder worker does with one candidate: :func:`build_kernel`, then MetaSchedule's default export
    (a shared library in a temporary directory, for the runner)."""
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export

    return default_export(build_kernel(mod, target))


def _pooled_builder(max_workers: int, timeout_sec: float):
    """A MetaSchedule builder whose worker processes serve the whole tuning run.

    MetaSchedule's ``LocalBuilder`` starts new workers for every batch of candidates (one batch per kernel
    and search round) and once more for a check when it is made; each worker imports TVM (and torch, which
    ``tvm_ffi`` imports): seconds of CPU per worker, more than building a small kernel. Here the pool is made
    once per :meth:`KernelTuner.tune` call; a worker is replaced after 64 builds (the leak the ``LocalBuilder``
    avoids by restarting its workers stays bounded)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    @derived_object
    class PooledBuilder(PyBuilder):
        def __init__(self):
            super().__init__()
            self.timeout_sec = timeout_sec
            self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_sec, maximum_process_uses=64)

        def build(self, build_inputs):
            results = []
            for r in self.pool.map_with_error_catching(lambda x: _build_and_export(*x),
                                                       [(b.mod, b.target) for b in build_inputs]):
                if r.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(r.value, None))
                elif r.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"builder: timeout, killed after {self.timeout_sec} s"))
                else:
                    results.append(BuilderResult(None, "builder: an exception occurred\n" + str(r.value)))
            return results

        def shutdown(self):
            self.pool.shutdown()

    return PooledBuilder()


def _schedule_rules(rules: str):
    from tvm.s_tir import meta_schedule as ms

    if rules == "llvm":
        return "llvm"
    return [
        ms.schedule_rule.AutoInline(into_producer=False, into_consumer=True, inline_const_tensor=True,
                                    disallow_if_then_else=True, require_injective=True, require_ordered=True),
        ms.schedule_rule.MultiLevelTiling(structure="SSRSS", max_innermost_factor=64,
                                          reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2],
                                                                                 scope="global")),
        ms.schedule_rule.ParallelizeVectorizeUnroll(max_jobs_per_core=16, max_vectorize_extent=64,
                                                    unroll_max_steps=[0, 16, 64, 512], unroll_explicit=True),
        ms.schedule_rule.RandomComputeLocation(),
    ]


def default_tuning_database() -> str:
    """Where the tuning database lives unless the user names a directory: ``~/.cache/tvm_memsched/tuning``
    (``$XDG_CACHE_HOME`` when set)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tvm_memsched", "tuning")


def tuning_target(target) -> tvm.target.Target:
    """``target`` with ``num-cores`` set (MetaSchedule's parallelization needs it): this machine's cores."""
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    if target.kind.name != "llvm":
        raise MemschedError(f"tuning needs a target whose kernels run on this machine (llvm), not "
                            f"'{target.kind.name}'")
    if int(target.attrs.get("num-cores", 0) or 0) > 0:
        return target
    cfg = dict(target.export())
    cfg["num-cores"] = os.cpu_count() or 1
    return tvm.target.Target(cfg)


def _frames(context: int = 1) -> list:
    """``inspect.stack(context)`` without its per-frame module lookups: each frame's file as its code names it
    and, with ``context``, its current line (the fields TVMScript's parser reads)."""
    import inspect
    import linecache
    import sys

    frame, out = sys._getframe(1), []
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno) if context > 0 else ""
        out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name,
                                     [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return out


def import_tensor_intrin() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (MetaSchedule's ``TuneContext`` does, once per process) in seconds.

    The module parses hundreds of TVMScript functions at import, and TVMScript's parser calls ``inspect.stack()``
    for each; ``inspect`` looks every frame's module up by scanning ``sys.modules``, thousands of entries once
    ``tvm_ffi`` has imported torch: 21 s of CPU at the top of a script, about 90 s under pytest (measured on 2
    cores). While the import runs, ``inspect.stack`` is :func:`_frames`; the parsed functions are the same.

    >>> import_tensor_intrin(); import sys; "tvm.s_tir.tensor_intrin" in sys.modules
    True
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    with _IMPORT_LOCK:
        original = inspect.stack
        inspect.stack = _frames
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401
        finally:
            inspect.stack = original


_IMPORT_LOCK = threading.Lock()


class KernelTuner:
    """A MetaSchedule database in ``directory`` for ``target``: look kernels up, tune the missing ones.

    ``trials``: measured candidates per kernel (0: look up only). ``rules``: one of :data:`RULES`.
    ``progress``: a callable taking a message, or None.
    """

    def __init__(self, directory: str, target, trials: int = 64, rules: str = "unsplit", progress=None,
                 seed: int | None = 0):
        if rules not in RULES:
            raise ValueError(f"unknown tuning rules {rules!r}; use one of {', '.join(RULES)}")
        if trials < 0:
            raise ValueError(f"tuning trials must be >= 0, got {trials}")
        from tvm.s_tir import meta_schedule as ms

        self.ms, self.directory, self.trials, self.rules = ms, directory, trials, rules
        self.target = tuning_target(target)
        self.progress, self.seed = progress, seed
        os.makedirs(directory, exist_ok=True)
        self.database = ms.database.JSONDatabase(work_dir=directory, module_equality="structural")
        self.tuned_kernels = 0      # how many kernels the last tune() call tuned
        self.tuning_seconds = 0.0

    @staticmethod
    def workload(func) -> tvm.IRModule:
        """The tuning workload of a kernel: its body with only the attributes that change its code."""
        keep = {k: func.attrs[k] for k in _WORKLOAD_ATTRS if func.attrs is not None and k in func.attrs}
        return tvm.IRModule({"main": strip_attrs(func).with_attrs({**keep, "global_symbol": "main"})})

    def known(self, func) -> bool:
        """Whether the database has this kernel (tuned, successfully or not)."""
        return bool(self.database.has_workload(self.workload(func)))

    def best(self, func):
        """``(tuned PrimFunc with func's attributes, seconds)``, or ``(None, None)`` if the database has no
        valid schedule for it."""
        mod = self.workload(func)
        if not self.database.has_workload(mod):
            return None, None
        rec = self.database.query_tuning_record(mod, self.target, "main")
        if rec is None:
            return None, None
        sch = self.database.query_schedule(mod, self.target, "main")
        if sch is None:
            return None, None
        new = strip_attrs(sch.mod["main"])
        attrs = dict(func.attrs) if func.attrs is not None else {}
        secs = [float(x) for x in rec.run_secs] if rec.run_secs is not None else []
        return new.with_attrs({**attrs, SCHEDULED: True}), (sum(secs) / len(secs) if secs else None)

    def tune(self, funcs: dict) -> dict:
        """Tune every kernel of ``{name: PrimFunc}`` the database lacks; returns ``{name: reason}`` for those
        MetaSchedule cannot schedule (they are not tuned)."""
        ms = self.ms
        self.tuned_kernels, refused = 0, {}
        if self.trials == 0:
            return refused
        todo: dict = {}                       # structural workload -> [names]
        for name, func in funcs.items():
            if self.known(func):
                continue
            mod = self.workload(func)
            for other in todo:
                if tvm_ffi.structural_equal(other, mod):
                    todo[other].append(name)
                    break
            else:
                todo[mod] = [name]
        if not todo:
            return refused
        import_tensor_intrin()                # what TuneContext imports, in seconds instead of minutes
        tasks, weights = [], []
        effort = search_effort(self.trials)
        for i, (mod, names) in enumerate(todo.items()):
            space = ms.space_generator.PostOrderApply(sch_rules=_schedule_rules(self.rules), postprocs="llvm",
                                                      mutator_probs="llvm")
            search = ms.search_strategy.EvolutionarySearch(population_size=effort["population"],
                                                           init_min_unmeasured=min(50, effort["population"] // 2))
            ctx = ms.TuneContext(mod=mod, target=self.target, space_generator=space, search_strategy=search,
                                 task_name=names[0], num_threads=os.cpu_count() or 1,
                                 rand_state=-1 if self.seed is None else self.seed + i)
            try:
                if not ctx.generate_design_space():
                    raise MemschedError("no design space")
            except Exception as e:  # noqa: BLE001 - already scheduled, or a form MetaSchedule's rules refuse
                msg = str(e).strip().splitlines()
                for name in names:
                    refused[name] = "MetaSchedule cannot schedule it: " + (msg[0] if msg else type(e).__name__)[:200]
                continue
            tasks.append(ctx)
            weights.append(float(len(names)))
        if not tasks:
            return refused
        if self.progress:
            self.progress(f"tuning {len(tasks)} kernel(s) with MetaSchedule, {self.trials} trials each")
        start = time.perf_counter()
        builder = _pooled_builder(max(1, min(os.cpu_count() or 1, self.trials)), 120)
        try:
            ms.tune_tasks(tasks=tasks, task_weights=weights, work_dir=self.directory,
                          max_trials_global=self.trials * len(tasks), max_trials_per_task=self.trials,
                          num_trials_per_iter=min(64, self.trials), builder=builder,
                          runner=ms.runner.LocalRunner(timeout_sec=60), database=self.database,
                          cost_model=effort["cost_model"])
        finally:
            builder.shutdown()
        self.tuning_seconds += time.perf_counter() - start
        self.tuned_kernels = len(tasks)
        # a workload whose every candidate failed has no record; commit it so the next build does not retune
        for mod in todo:
            if not self.database.has_workload(mod):
                self.database.commit_workload(mod)
        return refused


def _has_xgboost() -> bool:
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return False
    return True


def _kernel_inputs(mod) -> dict:
    """``{kernel name: number of input params}`` from the call_tir sites of ``mod``'s Relax functions."""
    from tvm import relax

    from ..ir import call_tir_op

    counts: dict = {}

    def visit(e):
        if call_tir_op(e) and isinstance(e.args[0], tvm.ir.GlobalVar):
            counts[e.args[0].name_hint] = len(e.args[1].fields) if isinstance(e.args[1], relax.Tuple) else 1

    for _, f in mod.functions_items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f, visit)
    return counts


def tuned_funcs(mod, tuner: KernelTuner, tradeoff: str = "memory"):
    """``(module, [TunedKernel])``: ``mod``'s kernels replaced by their tuned schedules where ``tradeoff`` takes
    them (see the module docstring); kernels the database lacks are tuned first."""
    inputs = _kernel_inputs(mod)
    kernels = {gv.name_hint: f for gv, f in mod.functions_items()
               if isinstance(f, tirx.PrimFunc) and gv.name_hint in inputs
               and not (f.attrs is not None and f.attrs.get(SCHEDULED, False))}
    refused = tuner.tune(kernels)
    report, new_mod = [], mod
    for gv, func in mod.functions_items():
        name = gv.name_hint
        if name not in kernels:
            continue
        if name in refused:
            report.append(TunedKernel(name, False, refused[name]))
            continue
        tuned, secs = tuner.best(func)
        if tuned is None:
            report.append(TunedKernel(name, False, "no valid schedule in the database"))
            continue
        rec = TunedKernel(name, True, "", secs, compacted_workspace_bytes(tuned))
        if tradeoff == "speed":
            tuned = tuned.with_attr(KEEP_NOALIAS, True)
        else:       # BalanceKernels keeps it where the peak allows (memory: not above the least-memory peak)
            tuned = tuned.with_attr(UNSHRUNK, func)
            rec.reason = "BalanceKernels decides after the reorder"
        if new_mod is mod:
            new_mod = mod.clone()
        new_mod[gv] = tuned
        report.append(rec)
    return new_mod, report


@tvm.transform.module_pass(opt_level=0, name="TuneKernels")
class TuneKernels:
    """Kernels as MetaSchedule tuned them, where the tradeoff takes them (see the module docstring).

    Parameters
    ----------
    database : str
        Directory of the MetaSchedule database (created if missing; reused across builds).
    trials : int
        Measured candidates per kernel the database lacks (0: use only what it has).
    target : Target, optional
        The build's target (default: the current one); must be ``llvm``.
    tradeoff : {"memory", "balanced", "speed"}
        As the pipeline's.
    rules : {"unsplit", "llvm"}
        ``"unsplit"`` (default): no reduction is split (see the module docstring).

    ``report`` lists every kernel; ``tuner`` is the :class:`KernelTuner` (``tuned_kernels``: how many kernels
    the last run tuned, 0 when the database had them all).
    """

    def __init__(self, database: str, trials: int = 64, target=None, tradeoff: str = "memory",
                 rules: str = "unsplit", progress=None):
        if rules not in RULES:
            raise ValueError(f"unknown tuning rules {rules!r}; use one of {', '.join(RULES)}")
        if trials < 0:
            raise ValueError(f"tuning trials must be >= 0, got {trials}")
        self.database, self.trials, self.target, self.tradeoff = database, trials, target, tradeoff
        self.rules, self.progress = rules, progress
        self.report: list[TunedKernel] = []
        self.tuner: KernelTuner | None = None
        self.seconds = 0.0           # the last run, tuning included (tuner.tuning_seconds: the tuning alone)

    def transform_module(self, mod, ctx):
        target = self.target or tvm.target.Target.current()
        if target is None:
            raise MemschedError("TuneKernels needs a target: pass target= or run it under `with target:`")
        start = time.perf_counter()
        self.tuner = KernelTuner(self.database, target, self.trials, self.rules, self.progress)
        new_mod, self.report = tuned_funcs(mod, self.tuner, self.tradeoff)
        self.seconds = time.perf_counter() - start
        return new_mod
