"""Kernel speed against workspace: ShrinkWorkspace's bands, BalanceKernels, channels-innermost convolutions."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_memsched.relax.analysis.inplace import KEEP_NOALIAS, InplaceAnalyzer
from tvm_memsched.relax.passes import shrink_workspace as sw
from tvm_memsched.relax.passes.balance_kernels import BalanceKernels, balance_kernels
from tvm_memsched.relax.compare import compare
from tvm_memsched.relax.pipeline import pipeline, stages
from tvm_memsched.relax.testing import conv_stack_module
from tvm_memsched.relax.analysis.workspace import workspace_bytes
from tvm_memsched.transform import ShrinkWorkspace

from test_shrink_workspace import assert_bit_identical, run_kernel

LLVM = tvm.target.Target({"kind": "llvm"})


def conv_kernels(shape, out_c, k, stride, groups, layout):
    """The fused PrimFuncs of one convolution (+ bias, relu) in ``layout`` (HWIO weights when NHWC)."""
    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    in_c = shape[3] if layout == "NHWC" else shape[1]
    w_oihw = rng.standard_normal((out_c, in_c // groups, k, k)).astype("float32")
    w = w_oihw.transpose(2, 3, 1, 0) if layout == "NHWC" else w_oihw
    with bb.function("main", [x]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, relax.const(np.ascontiguousarray(w)), strides=stride, padding=k // 2,
                                   groups=groups, data_layout=layout,
                                   kernel_layout="HWIO" if layout == "NHWC" else "OIHW")
            b = relax.const(rng.standard_normal(out_c).astype("float32"))
            y = relax.op.nn.relu(relax.op.add(y, b if layout == "NHWC" else relax.op.reshape(b, (1, out_c, 1, 1))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    st = stages(LLVM)
    with LLVM:
        mod = tvm.transform.Sequential(st["dispatch"] + st["legalize"])(bb.finalize())
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


CONVS = [((1, 12, 12, 8), 8, 3, 1, 8, "NHWC"),      # depthwise
         ((1, 12, 12, 8), 8, 5, 2, 8, "NHWC"),      # depthwise, strided
         ((1, 10, 10, 6), 12, 3, 1, 1, "NHWC"),
         ((1, 9, 9, 4), 8, 3, 2, 1, "NHWC"),
         ((1, 8, 12, 12), 8, 3, 1, 1, "NCHW"),
         ((1, 8, 12, 12), 8, 3, 1, 8, "NCHW")]


@pytest.mark.parametrize("cfg", CONVS, ids=[f"{c[5]}-k{c[2]}s{c[3]}g{c[4]}" for c in CONVS])
def test_band_kernels_are_bit_identical_and_smaller_than_tvms(cfg):
    for func in conv_kernels(*cfg).values():
        band, steps = sw.shrink_func(func, reuse="band")
        least, _ = sw.shrink_func(func, reuse="inline")
        if not steps:
            continue
        assert any("read several times" in s for s in steps)
        ref = run_kernel(func, 1.0)
        assert_bit_identical(ref, run_kernel(band, -1.0))
        assert_bit_identical(ref, run_kernel(least, -1.0))
        whole = workspace_bytes(sw.compact(func))
        assert workspace_bytes(sw.compact(least)) <= workspace_bytes(sw.compact(band)) < whole


def test_bands_cost_at_most_half_a_read_per_multiply_accumulate():
    """A 3x3 depthwise convolution pads one band of rows at a time (a third of a copy per MAC), not a window
    per pixel (one copy per MAC)."""
    (func,) = [f for n, f in conv_kernels((1, 16, 16, 8), 8, 3, 1, 8, "NHWC").items() if "conv" in n]
    band, steps = sw.shrink_func(func, reuse="band")
    (step,) = [s for s in steps if "in bands" in s]
    share = float(step.split("(")[1].split(" per")[0])
    assert 0 < share <= sw.MAX_SHARE
    band_bytes = workspace_bytes(sw.compact(band))
    assert band_bytes < workspace_bytes(sw.compact(func)) / 3     # a few rows of 18, not the whole padded input


def banded_module(layout="NHWC"):
    """A conv stack after fusion and ShrinkWorkspace(mode="balanced"), before the reorder."""
    p = pipeline(LLVM, method="rpo", layout=layout, tradeoff="balanced")
    k = p.passes.index(p.balance)
    with LLVM:
        return tvm.transform.Sequential(p.passes[:k])(conv_stack_module(layout="NCHW", size=16, channels=8))


def test_balance_keeps_bands_within_the_allowance_and_least_memory_beyond_it():
    mod = banded_module()
    banded = [gv.name_hint for gv, f in mod.functions_items()
              if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and sw.UNSHRUNK in f.attrs]
    assert banded
    with LLVM:
        fast, r_fast, peak, _ = balance_kernels(mod, LLVM, allowance=float("inf"), measure=False)
        tight, r_tight, peak2, budget = balance_kernels(mod, LLVM, allowance=0.0, measure=False)
    assert peak == peak2 > 0 and budget == peak
    assert all(c.fast for c in r_fast) and sorted(c.kernel for c in r_fast) == sorted(banded)
    for c in r_tight:                                  # allowance 0: a band is kept only where it adds nothing
        assert c.fast == (c.peak_bytes <= budget)
        if not c.fast:
            assert c.memory_workspace_bytes is not None and c.memory_workspace_bytes < c.workspace_bytes
            assert workspace_bytes(sw.compact(tight[c.kernel])) == c.memory_workspace_bytes
    for m in (fast, tight):                            # the attribute is gone everywhere
        assert not any(f.attrs is not None and sw.UNSHRUNK in f.attrs
                       for _gv, f in m.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    for c in r_tight:                                  # fast kernels stay out of in-place execution, the others not
        assert bool(tight[c.kernel].attrs.get(KEEP_NOALIAS, False)) == c.fast


def test_balance_keeps_bands_only_where_they_are_measured_faster():
    mod = banded_module()
    with LLVM:
        new, report, _peak, _ = balance_kernels(mod, LLVM, allowance=float("inf"), min_gain=0.03, min_work=0)
    timed = [c for c in report if c.seconds is not None]
    assert len(timed) >= 2 and all(c.memory_seconds is not None for c in timed)
    for c in report:
        if c.seconds is not None:
            assert c.fast == (c.seconds <= 0.97 * c.memory_seconds)
            assert c.fast or "not faster here" in c.reason
        else:                          # no least-memory form to time against: the bands stay
            assert c.fast and c.memory_workspace_bytes is None
        assert bool(new[c.kernel].attrs.get(KEEP_NOALIAS, False)) == c.fast
    with LLVM:       # the times are cached per body: a second run decides the same
        _new, again, _peak, _ = balance_kernels(mod, LLVM, allowance=float("inf"), min_gain=0.03, min_work=0)
    assert [(c.kernel, c.fast, c.seconds) for c in again] == [(c.kernel, c.fast, c.seconds) for c in report]
    with tvm.target.Target("c"):  # code that does not run here is not timed: memory decides alone
        _new, untimed, _peak, _ = balance_kernels(mod, tvm.target.Target("c"), allowance=float("inf"), min_work=0)
    assert all(c.fast and c.seconds is None for c in untimed)
    with LLVM:       # kernels below min_work are not timed
        _new, small, _peak, _ = balance_kernels(mod, LLVM, allowance=float("inf"), min_work=1 << 40)
    assert all(c.fast and c.seconds is None for c in small)


@pytest.mark.parametrize("tradeoff", ["memory", "balanced", "speed"])
def test_every_tradeoff_is_bit_identical_to_tvms_default_build(tradeoff):
    c = compare(conv_stack_module(layout="NCHW", size=16, channels=8), method="rpo", tradeoff=tradeoff, repeat=0)
    assert c.numerics_ok and c.max_abs_diff == 0.0
    assert c.tradeoff == tradeoff and (bool(c.kernel_choices) == (tradeoff == "balanced"))
    if tradeoff == "balanced":        # within 10% of the live-tensor peak, workspace included
        assert c.memsched_live_peak_with_workspace_bytes <= 1.1 * c.memsched_live_peak_bytes


def test_tradeoff_is_checked_and_places_the_passes():
    with pytest.raises(ValueError, match="tradeoff"):
        pipeline(LLVM, tradeoff="fast")
    with pytest.raises(ValueError, match="mode"):
        ShrinkWorkspace(mode="quick")
    with pytest.raises(ValueError, match="allowance"):
        BalanceKernels(allowance=-1)
    names = pipeline(LLVM, tradeoff="balanced").pass_names()
    assert names.index("ChannelsFirstReduction") < names.index("ShrinkWorkspace") \
        < names.index("MemoryAwareReorder") < names.index("BalanceKernels")
    for t in ("memory", "speed"):
        assert "BalanceKernels" not in pipeline(LLVM, tradeoff=t).pass_names()


def test_channels_innermost_convolutions_sum_in_nchw_order():
    """ChannelsFirstReduction: reduction (rc, ry, rx) with the output channel innermost (the NCHW sums of
    TVM's default build, loads contiguous in the output channel); bit-identity is checked end to end above."""
    from tvm_memsched.relax.passes.layout import CONVERTED_ATTR, channels_first_reduction
    from tvm_memsched.relax.analysis.workspace import walk_stmts

    mod = tvm.IRModule(conv_kernels((1, 10, 10, 6), 12, 3, 1, 1, "NHWC")).with_attr(CONVERTED_ATTR, True)
    new, changed = channels_first_reduction(mod)
    assert len(changed) == 1
    loops = []
    walk_stmts(new[changed[0]].body, lambda s: loops.append(s.loop_var.name) if isinstance(s, tvm.tirx.For) else None)
    k = loops.index("rc")
    assert loops[k:k + 3] == ["rc", "ry", "rx"] and loops[k + 3].startswith("ff")
    assert channels_first_reduction(mod.without_attr(CONVERTED_ATTR))[1] == []   # only converted models


def test_fast_kernels_stay_out_of_in_place_execution():
    """The banded kernels of ``speed`` (and those ``balanced`` keeps) are marked KEEP_NOALIAS: no in-place overlap
    for them (on LLVM an aliased kernel is built without noalias); the least-memory kernels take every proven one,
    and the faster tradeoffs still plan within 10% of the least-memory build and compute the same numbers."""
    st = stages(LLVM)
    with LLVM:
        fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(tvm.transform.Sequential(
            st["dispatch"] + st["legalize"])(conv_stack_module(layout="NHWC", size=16, channels=8))))
        marked = {mode: {gv.name_hint for gv, f in sw.shrink_workspace(fused, mode=mode)[0].functions_items()
                         if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and f.attrs.get(KEEP_NOALIAS)}
                  for mode in sw.MODES}
    assert marked["memory"] == set() == marked["balanced"] and marked["speed"]
    speed, _ = sw.shrink_workspace(fused, mode="speed")
    analyzer = InplaceAnalyzer(speed)
    for name in marked["speed"]:
        gv = speed.get_global_var(name)
        args = [relax.Var(f"a{k}", relax.TensorType([int(d) for d in p.shape], p.dtype))
                for k, p in enumerate(speed[gv].params)]
        assert analyzer.pairs(gv, args, 1) == []
    mod = conv_stack_module(layout="NCHW", size=16, channels=8)
    memory = compare(mod, method="rpo", repeat=0)
    for t in ("balanced", "speed"):
        c = compare(mod, method="rpo", tradeoff=t, repeat=0)
        assert c.numerics_ok and c.max_abs_diff == 0.0
        if t == "balanced":
            assert c.memsched_planned_bytes <= 1.1 * memory.memsched_planned_bytes
