"""MetaSchedule tuning of the kernels our pipeline emits (relax/passes/tune_kernels.py, ``--tune``).

Quick: the options are checked by name, a non-host target is refused, ShrinkWorkspace leaves a tuned
kernel as it is. Slow (MetaSchedule builds and runs candidates in worker processes), one test in one process: a small
network tuned with a handful of trials computes what the untuned build computes, with the same plan under
the memory tradeoff; a second build from the same database tunes nothing and builds the same kernels;
``compare --tune`` reports both sides' tuning.
"""

import numpy as np
import pytest
import tvm

from tvm_memsched.core.errors import MemschedError
from tvm_memsched.relax.compare import random_inputs, run_vm
from tvm_memsched.relax.options import OptionError, PipelineOptions
from tvm_memsched.relax.passes.shrink_workspace import SCHEDULED, shrink_workspace
from tvm_memsched.relax.passes.tune_kernels import RULES, KernelTuner, TuneKernels, tuning_target
from tvm_memsched.relax.pipeline import MemschedPipeline
from tvm_memsched.relax.testing import branchy_module

TARGET = {"kind": "llvm", "num-cores": 2}


def test_tuning_options_are_checked_by_name():
    assert PipelineOptions(tune=8, tune_database="/tmp/x").to_cli_args() == ["--tune", "8", "--tune-database",
                                                                             "/tmp/x"]
    for bad, name in ((dict(tune=-1), "tune"), (dict(tune=True), "tune"), (dict(tune_rules="fast"), "tune_rules"),
                      (dict(tune_database=3), "tune_database")):
        with pytest.raises(OptionError, match=name):
            PipelineOptions(**bad)
    assert set(RULES) == {"unsplit", "llvm"}
    with pytest.raises(ValueError, match="rules"):
        TuneKernels("/tmp/x", 4, rules="fast")
    with pytest.raises(ValueError, match="trials"):
        TuneKernels("/tmp/x", -2)


def test_tuning_needs_a_target_that_runs_here(tmp_path):
    with pytest.raises(MemschedError, match="llvm"):
        tuning_target(tvm.target.Target({"kind": "c"}))
    assert int(tuning_target(tvm.target.Target({"kind": "llvm"})).attrs["num-cores"]) >= 1
    assert int(tuning_target(tvm.target.Target(TARGET)).attrs["num-cores"]) == 2
    # no tuning asked: the pipeline has no TuneKernels pass and no BalanceKernels under the memory tradeoff
    names = MemschedPipeline(TARGET).pass_names()
    assert "TuneKernels" not in names and "BalanceKernels" not in names
    names = MemschedPipeline(TARGET, PipelineOptions(tune=2, tune_database=str(tmp_path))).pass_names()
    assert names.index("InlineProducers") < names.index("TuneKernels") < names.index("ShrinkWorkspace")
    assert names.index("MemoryAwareReorder") < names.index("BalanceKernels")


def test_shrink_workspace_leaves_a_tuned_kernel_alone():
    mod = branchy_module(branches=1, channels=4, size=8)
    fused = _fused(mod)
    kernels = [gv for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    marked = fused.clone()
    for gv in kernels:
        marked[gv] = fused[gv].with_attr(SCHEDULED, True)
    shrunk, report = shrink_workspace(fused)
    assert any(r.steps for r in report)                # the padding of the 3x3 convolution
    kept, report = shrink_workspace(marked)
    assert not any(r.steps for r in report)
    for gv in kernels:
        assert kept[gv].same_as(marked[gv])


def _build(mod, options):
    p = MemschedPipeline(TARGET, options)
    return tvm.compile(mod, tvm.target.Target(TARGET), relax_pipeline=p), p


def test_the_quick_frame_list_reads_what_inspect_stack_reads():
    """The stand-in for ``inspect.stack`` while ``tvm.s_tir.tensor_intrin`` imports gives TVMScript's parser the
    same frames, files, lines, function names and current source lines as the real one."""
    import inspect

    from tvm_memsched.relax.passes.tune_kernels import _frames

    def nested():
        return _frames(), inspect.stack()

    quick, real = nested()
    assert len(quick) == len(real) > 3
    for q, r in zip(quick, real):
        assert q.frame is r.frame and (q.lineno, q.function) == (r.lineno, r.function)
        assert q.filename == r.filename
        assert (q.code_context or [None])[0] == (r.code_context or [None])[0]


@pytest.mark.slow
def test_tuned_build_computes_the_same_with_the_same_plan_and_reuses_its_database(tmp_path, capsys):
    """One test, one process and one database for the whole story (MetaSchedule's first tuning in a process
    imports TVM's tensor intrinsics, a minute and more; the second half finds our kernels tuned by the first):
    builds, then ``compare --tune``."""
    mod = branchy_module(branches=1, channels=4, size=8)
    inputs = random_inputs(mod["main"], 0)
    ex0, p0 = _build(mod, PipelineOptions())
    expected = run_vm(ex0, inputs)
    db = str(tmp_path / "db")
    ex1, p1 = _build(mod, PipelineOptions(tune=2, tune_database=db))
    assert p1.tune.tuner.tuned_kernels >= 2                    # the two convolutions at least
    found = [r for r in p1.tune.report if r.tuned]
    assert found and all(r.seconds and r.seconds > 0 for r in found)
    for a, b in zip(run_vm(ex1, inputs), expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # memory: a tuned kernel only where the peak stays the least-memory build's
    assert p1.arena.report[0].arena_bytes == p0.arena.report[0].arena_bytes
    assert {c.kernel for c in p1.balance.report} == {r.kernel for r in found}
    # the same database again: nothing tuned, the same kernels chosen and built
    ex2, p2 = _build(mod, PipelineOptions(tune=2, tune_database=db))
    assert p2.tune.tuner.tuned_kernels == 0
    assert [(r.kernel, r.tuned) for r in p2.tune.report] == [(r.kernel, r.tuned) for r in p1.tune.report]
    for a, b in zip(run_vm(ex2, inputs), expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # speed: every tuned kernel is built (out of in-place execution), outputs still agree
    ex3, p3 = _build(mod, PipelineOptions(tune=2, tune_database=db, tradeoff="speed"))
    assert p3.tune.tuner.tuned_kernels == 0 and p3.balance is None
    for a, b in zip(run_vm(ex3, inputs), expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # trials=0 looks up only: a fresh database has nothing, so nothing is tuned
    kernel = next(f for _, f in mod_kernels(mod))
    tuner = KernelTuner(str(tmp_path / "empty"), TARGET, trials=0)
    assert tuner.tune({"k": kernel}) == {} and tuner.tuned_kernels == 0 and tuner.best(kernel) == (None, None)
    assert p1.tune.tuner.known(kernel) is False or p1.tune.tuner.best(kernel)[0] is not None
    _compare_tune_reports_both_sides(mod, db, capsys)


def _fused(mod):
    with tvm.target.Target(TARGET):
        return tvm.transform.Sequential([tvm.relax.transform.LegalizeOps(), tvm.relax.transform.FuseOps(),
                                         tvm.relax.transform.FuseTIR()])(mod)


def mod_kernels(mod):
    return [(gv, f) for gv, f in _fused(mod).functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _compare_tune_reports_both_sides(mod, db, capsys):
    """``compare --tune`` reports both sides' tuning; our side's kernels are in ``db`` already, TVM's default
    kernels are tuned now; a second compare tunes nothing."""
    from tvm_memsched.app.cli import main as cli_main
    from tvm_memsched.relax.compare import compare

    c = compare(mod, TARGET, PipelineOptions(tune=2, tune_database=db), repeat=0)
    assert c.numerics_ok and c.tuning["database"] == db and c.tuning["kernels_tuned_now"] >= 1
    assert c.tuning["default"] and c.tuning["memsched"]
    assert "tuned with MetaSchedule" in c.summary()
    again = compare(mod, TARGET, PipelineOptions(tune=2, tune_database=db), repeat=0)
    assert again.tuning["kernels_tuned_now"] == 0 and again.memsched_planned_bytes == c.memsched_planned_bytes
    assert "nothing tuned" in again.summary()
    # the command: one line of error for a bad value (tests/test_cli.py runs `compare` in a process of its own)
    capsys.readouterr()
    try:
        rc = cli_main(["compare", "zoo:swiftnet_like", "--tune", "-3"])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and "tune" in err and "Traceback" not in err, err
