"""Identity graph rewriting (tvm_memsched.relax.rewrite, IdentityRewrite): rules, skips, policies, numerics.

Every numerical check runs the rewritten and the unrewritten module on the Relax
VM with the same random inputs and compares all outputs (allclose with a
tolerance relative to the outputs' magnitude: the rewrites are exact up to float
reassociation).
"""

import json

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.dpl import PatternMatchingRewriter, rewrite_call

from tvm_memsched.relax.compare import compare, random_inputs, run_vm
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.rewrite import MERGE, RULES, available_rules, duplicate_groups, get_rules, identity_rewrite
from tvm_memsched.relax.testing import branchy_module
from tvm_memsched.transform import IdentityRewrite, MemoryAwareReorder
from tvm_memsched.zoo.netdef import NetBuilder
from tvm_memsched.zoo.to_relax import net_to_relax, relax_params
from tvm_memsched.zoo.to_tflite import net_to_tflite, nchw_to_nhwc

LLVM = tvm.target.Target({"kind": "llvm"})


def run(mod, inputs):
    return run_vm(tvm.compile(mod, LLVM, relax_pipeline=relax.get_default_pipeline(LLVM)), inputs)


def assert_close(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape
        scale = max(1.0, float(np.abs(x).max()))
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5 * scale)


def check_numerics(mod, new, inputs=None):
    inputs = random_inputs(mod["main"], seed=1) if inputs is None else inputs
    assert relax.analysis.check_well_formed(new)
    assert_close(run(mod, inputs), run(new, inputs))


def op_names(mod, fn="main"):
    return [b.value.op.name for blk in mod[fn].body.blocks for b in blk.bindings
            if isinstance(b.value, tvm.ir.Call) and isinstance(b.value.op, tvm.ir.Op)]


def rules_used(report):
    return {s.rule for s in report.sites}


# ----------------------------------------------------------------------------------------------------------
# builders
# ----------------------------------------------------------------------------------------------------------

class Weights:
    """Weights as constants or as parameters (a Var each, values kept for the call)."""

    def __init__(self, as_params, seed=0):
        self.as_params, self.rng = as_params, np.random.default_rng(seed)
        self.vars, self.values = [], []

    def __call__(self, *shape, scale=None, positive=False):
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        a = self.rng.standard_normal(shape) * (scale if scale is not None else 1 / np.sqrt(fan))
        a = (np.abs(a) + 0.5 if positive else a).astype("float32")
        if not self.as_params:
            return relax.const(a)
        v = relax.Var(f"w{len(self.vars)}", relax.TensorType(list(shape), "float32"))
        self.vars.append(v)
        self.values.append(a)
        return v


def kitchen_sink(layout="NCHW", as_params=False):
    """One block with a site for every rule (both layouts, constant or parameter weights)."""
    nchw = layout == "NCHW"
    W = Weights(as_params)
    kl = "OIHW" if nchw else "HWIO"
    dwl = "OIHW" if nchw else "HWOI"
    cax = 1 if nchw else 3

    def conv_w(o, i, k):  # weight in the kernel layout
        return W(o, i, k, k) if nchw else W(k, k, i, o)

    def dw_w(c, k):
        return W(c, 1, k, k) if nchw else W(k, k, c, 1)

    def vec(c, **kw):  # per-channel constant broadcast over N, H, W
        return W(1, c, 1, 1, **kw) if nchw else W(1, 1, 1, c, **kw)

    def conv(x, w, groups=1, depthwise=False, **kw):
        return relax.op.nn.conv2d(x, w, groups=groups, data_layout=layout, kernel_layout=dwl if depthwise else kl,
                                  **kw)

    def cat(xs):
        return relax.op.concat(xs, axis=cax)

    x = relax.Var("x", relax.TensorType([1, 3, 12, 12] if nchw else [1, 12, 12, 3], "float32"))
    ws = dict(wa=conv_w(4, 3, 3), wb=conv_w(6, 3, 3), wd=conv_w(4, 3, 1),
              w1=conv_w(8, 12, 3), b1=vec(8), wdw=dw_w(10, 3), wdw2=dw_w(20, 3), wg=conv_w(6, 4, 3),
              s4=vec(14, positive=True), t4=vec(14), w4=conv_w(5, 14, 1), wfc=W(8, 7), wsl=conv_w(3, 10, 3),
              w7=conv_w(4, 14, 1), g9=W(10, positive=True), be9=W(10), m9=W(10), v9=W(10, positive=True),
              w9=conv_w(4, 10, 1), w10=conv_w(3, 8, 1), w11=conv_w(5, 8, 3))
    kconst = relax.const(np.random.default_rng(7).standard_normal(
        (1, 2, 12, 12) if nchw else (1, 12, 12, 2)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x] + W.vars):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(conv(x, ws["wa"], padding=(1, 1))), "a")
            b = bb.emit(conv(x, ws["wb"], padding=(1, 1)), "b")
            d = bb.emit(conv(x, ws["wd"]), "d")
            outs = []
            # 1. channel-wise partition: 3 pieces (one constant), stride 2, padding, dilation, bias + relu after
            c1 = bb.emit(cat([a, b, kconst]), "c1")
            y = bb.emit(conv(c1, ws["w1"], strides=(2, 2), padding=(2, 2), dilation=(2, 2)), "y1_conv")
            outs.append(bb.emit(relax.op.nn.relu(relax.op.add(y, ws["b1"])), "y1"))
            # 2. depthwise (channel multiplier 2) on a concat
            c2 = bb.emit(cat([a, b]), "c2")
            outs.append(bb.emit(conv(c2, ws["wdw2"], groups=10, depthwise=True, padding=(1, 1)), "y2"))
            # 3. grouped convolution, groups aligned with the pieces
            c3 = bb.emit(cat([a, d]), "c3")
            outs.append(bb.emit(conv(c3, ws["wg"], groups=2, padding=(1, 1)), "y3"))
            # 4. relu -> max pool -> avg pool -> folded batch norm (scale, shift) -> clip -> 1x1 conv
            c4 = bb.emit(cat([a, b, d]), "c4")
            t = bb.emit(relax.op.nn.relu(c4), "t4_relu")
            t = bb.emit(relax.op.nn.max_pool2d(t, (2, 2), (2, 2), layout=layout), "t4_max")
            t = bb.emit(relax.op.nn.avg_pool2d(t, (3, 3), (1, 1), padding=(1, 1), layout=layout), "t4_avg")
            t = bb.emit(relax.op.multiply(t, ws["s4"]), "t4_scale")
            t = bb.emit(relax.op.add(ws["t4"], t), "t4_shift")
            t = bb.emit(relax.op.clip(t, -0.5, 1.5), "t4_clip")
            outs.append(bb.emit(conv(t, ws["w4"]), "y4"))
            # 5. global average pool (mean) -> flatten -> dense
            c5 = bb.emit(cat([a, d]), "c5")
            g = bb.emit(relax.op.mean(c5, axis=[2, 3] if nchw else [1, 2], keepdims=True), "g5")
            g = bb.emit(relax.op.reshape(g, (1, 8)), "f5")
            outs.append(bb.emit(relax.op.matmul(g, ws["wfc"]), "y5"))
            # 6. spatial strided slice (the factorized-reduce shift) -> conv
            c6 = bb.emit(cat([a, b]), "c6")
            sl = bb.emit(relax.op.strided_slice(c6, axes=[2, 3] if nchw else [1, 2], begin=[1, 1], end=[12, 12]),
                         "s6")
            outs.append(bb.emit(conv(sl, ws["wsl"], padding=(1, 1)), "y6"))
            # 7. nested concat -> conv (flatten, then partition)
            c7i = bb.emit(cat([a, b]), "c7i")
            c7 = bb.emit(cat([c7i, d]), "c7")
            outs.append(bb.emit(conv(c7, ws["w7"]), "y7"))
            # 8. SiLU as x * sigmoid(x): the concat has two users
            c8 = bb.emit(cat([a, b]), "c8")
            outs.append(bb.emit(relax.op.multiply(c8, relax.op.sigmoid(c8)), "y8"))
            # 9. inference batch norm -> relu -> conv
            c9 = bb.emit(cat([a, b]), "c9")
            bn = bb.emit(relax.op.nn.batch_norm(c9, ws["g9"], ws["be9"], ws["m9"], ws["v9"], axis=cax,
                                                        training=False), "bn9")
            r9 = bb.emit(relax.op.nn.relu(relax.TupleGetItem(bn, 0)), "r9")
            outs.append(bb.emit(conv(r9, ws["w9"]), "y9"))
            # 10. one concat, two users (like a NAS cell output feeding two cells)
            c10 = bb.emit(cat([a, d]), "c10")
            outs.append(bb.emit(conv(relax.op.nn.relu(c10), ws["w10"]), "y10"))
            outs.append(bb.emit(conv(c10, ws["w11"], padding=(1, 1)), "y11"))
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    mod = bb.finalize()
    inputs = [np.random.default_rng(3).standard_normal([int(v) for v in x.ty.shape.values]).astype("float32")]
    return mod, inputs + W.values


ALL_SINK_RULES = {"conv_channel_partition", "grouped_conv_partition", "matmul_partition", "concat_flatten",
                  "unary_commute", "broadcast_binary_commute", "concat_pair_binary", "pool_commute",
                  "reduce_commute", "batch_norm_commute", "strided_slice_commute", "reshape_commute"}


# ----------------------------------------------------------------------------------------------------------
# the rules
# ----------------------------------------------------------------------------------------------------------

def test_registry_lists_every_rule_with_its_identity():
    assert set(RULES) == ALL_SINK_RULES and available_rules() == list(RULES) + [MERGE]
    for rule in RULES.values():
        assert rule.kind in ("absorb", "commute")
        assert "Identity" in rule.fn.__doc__ and "Preconditions" in rule.fn.__doc__, rule.name
        assert rule.identity
    assert [r.name for r in get_rules(["unary_commute"])] == ["unary_commute"]
    with pytest.raises(ValueError, match="unknown rewrite rule"):
        get_rules(["no_such_rule"])
    with pytest.raises(ValueError, match="unknown rewrite policy"):
        identity_rewrite(branchy_module(), policy="sometimes")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("as_params", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["const", "params"])
def test_every_rule_is_exact(layout, as_params):
    mod, inputs = kitchen_sink(layout, as_params)
    new, report = identity_rewrite(mod, rules=list(RULES), policy="always")  # each concat on its own: no merging
    assert rules_used(report) == ALL_SINK_RULES
    # the concats feeding convolutions are gone, the only ones left are final results of commuted chains
    names = {b.var.name: b.value for b in new["main"].body.blocks[0].bindings}
    for v in ("c1", "c4", "c5", "c6", "c7", "c7i", "c9", "c10"):
        assert v not in names
    ops = op_names(new)
    if as_params:
        assert "relax.strided_slice" in ops  # parameter weights are sliced at run time ...
    else:
        assert ops.count("relax.strided_slice") == 2  # ... constants at compile time (left: the two of site 6)
    check_numerics(mod, new, inputs)


def test_rules_work_through_rewrite_call_and_pattern_matching_rewriter():
    x = relax.Var("x", relax.TensorType([1, 4, 8, 8], "float32"))
    w = relax.const(np.random.default_rng(0).standard_normal((3, 8, 1, 1)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a, b = bb.emit(relax.op.nn.relu(x), "a"), bb.emit(relax.op.negative(x), "b")
            c1 = bb.emit(relax.op.concat([a, b], axis=1), "c1")
            r1 = bb.emit(relax.op.nn.relu(c1), "r1")                 # c1: one user
            c2 = bb.emit(relax.op.concat([b, a], axis=1), "c2")
            r2 = bb.emit(relax.op.nn.relu(c2), "r2")                 # c2: two users
            y = bb.emit(relax.op.nn.conv2d(c2, w), "y")
            out = bb.emit_output(relax.Tuple([r1, r2, y]))
        bb.emit_func_output(out)
    mod = bb.finalize()
    func = mod["main"]
    rule = RULES["unary_commute"]
    f1 = rewrite_call(rule.pattern, rule.rewriter_for(func), func)
    values = {b.var.name: b.value for b in f1.body.blocks[0].bindings}
    assert values["r1"].op.name == "relax.concat" and "c1" not in values
    assert values["r2"].op.name == "relax.nn.relu"  # a concat with another user is left alone
    f2 = PatternMatchingRewriter.from_pattern(rule.pattern, rule.rewriter_for(func))(func)
    tvm.ir.assert_structural_equal(f1, f2)
    f3 = rule.apply(func, single_use=False)  # without the single-use check both are rewritten
    values = {b.var.name: b.value for b in f3.body.blocks[0].bindings}
    assert values["r1"].op.name == values["r2"].op.name == "relax.concat"
    inputs = random_inputs(func)
    for f in (f1, f3):
        assert_close(run(mod, inputs), run(tvm.IRModule({"main": f}), inputs))


# ----------------------------------------------------------------------------------------------------------
# imported models: PyTorch (NCHW/OIHW, bias as reshape + add) and TFLite (NHWC/HWIO, depthwise HWOI)
# ----------------------------------------------------------------------------------------------------------

class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.b = torch.nn.Conv2d(3, 10, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c = torch.nn.Conv2d(16, 8, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 8, 1)
        self.fc = torch.nn.Linear(16, 5)
        with torch.no_grad():
            for m in (self.bn,):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        a, b = torch.relu(self.a(x)), self.b(x)
        y1 = self.c(torch.relu(self.bn(torch.cat([a, b], dim=1))))
        y2 = self.pw(torch.nn.functional.max_pool2d(self.dw(torch.cat([b, a], dim=1)), 2))
        y3 = torch.nn.functional.silu(torch.cat([a, b], dim=1))
        y4 = self.fc(torch.nn.functional.adaptive_avg_pool2d(torch.cat([a, b], dim=1), 1).flatten(1))
        return y1, y2, y3, y4


@pytest.mark.slow
@pytest.mark.parametrize("keep_params", [False, True], ids=["const", "params"])
def test_torch_imported_graph(keep_params):
    from tvm.relax.frontend.torch import from_exported_program

    torch.manual_seed(0)
    net = TorchNet().eval()
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        ep = torch.export.export(net, (x,))
        ref = [t.numpy() for t in net(x)]
    mod = from_exported_program(ep, keep_params_as_input=keep_params)
    inputs = [x.numpy()]
    if keep_params:
        mod, params = relax.frontend.detach_params(mod)
        inputs += [p.numpy() for p in params["main"]]
    new, report = identity_rewrite(mod, policy="always")
    used = rules_used(report)
    assert {"conv_channel_partition", "grouped_conv_partition", "batch_norm_commute", "unary_commute",
            "pool_commute", "matmul_partition", "concat_pair_binary"} <= used
    assert op_names(new).count("relax.concat") < op_names(mod).count("relax.concat")
    got = run(new, inputs)
    assert_close(run(mod, inputs), got)
    assert_close(ref, got)


def small_net():
    """Concats feeding a depthwise conv, a pool chain, a 3x3 conv and a global pool + dense."""
    b = NetBuilder("rewrite_small")
    x = b.input((1, 3, 16, 16))
    a = b.conv2d(x, 8, 3, act="relu", name="a")
    c = b.conv2d(x, 8, 3, name="b")
    e = b.conv2d(x, 4, 1, act="relu", name="e")
    cat1 = b.concat([a, c], name="cat1")
    p = b.conv2d(b.depthwise_conv2d(cat1, 3, name="dw"), 8, 1, act="relu", name="pw")
    cat2 = b.concat([p, e], name="cat2")
    q = b.conv2d(b.relu(b.max_pool2d(cat2, 2, 2, name="mp"), name="r"), 8, 3, name="q")
    cat3 = b.concat([q, b.avg_pool2d(e, 2, 2, name="pe")], name="cat3")
    return b.build(b.dense(b.global_avg_pool(cat3, name="gap"), 10, name="fc"))


def test_tflite_imported_graph_nhwc():
    net = small_net()
    mod = from_tflite_bytes(net_to_tflite(net))
    new, report = identity_rewrite(mod, policy="always")
    used = rules_used(report)
    assert {"grouped_conv_partition", "broadcast_binary_commute", "conv_channel_partition", "pool_commute",
            "unary_commute", "reduce_commute"} <= used
    assert "relax.concat" not in op_names(new)
    x = np.random.default_rng(0).standard_normal((1, 16, 16, 3)).astype("float32")
    check_numerics(mod, new, [x])


@pytest.mark.slow
def test_zoo_tflite_swiftnet_like():
    """The SwiftNet-like zoo network through the TFLite frontend (concat -> depthwise -> bias -> pointwise)."""
    from tvm_memsched import zoo

    mod = from_tflite_bytes(zoo.tflite("swiftnet_like"))
    new, report = identity_rewrite(mod, policy="if-better", level="operator")
    assert report.peak_after <= report.peak_before
    new_all, report_all = identity_rewrite(mod, policy="always")
    assert {"grouped_conv_partition", "conv_channel_partition", "broadcast_binary_commute"} <= rules_used(report_all)
    x = np.random.default_rng(0).standard_normal((1, 96, 96, 3)).astype("float32")
    check_numerics(mod, new_all, [x])


@pytest.mark.slow
@pytest.mark.parametrize("as_params", [False, True], ids=["const", "params"])
def test_nchw_zoo_builder_graph(as_params):
    net = small_net()
    mod = net_to_relax(net, params_as_inputs=as_params)
    inputs = [np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")]
    if as_params:
        inputs += [a for _, a in relax_params(net)]
    new, report = identity_rewrite(mod, policy="always")
    assert {"grouped_conv_partition", "conv_channel_partition", "pool_commute", "unary_commute",
            "reduce_commute", "matmul_partition"} <= rules_used(report)
    assert "relax.concat" not in op_names(new)
    got = run(new, inputs)
    assert_close(run(mod, inputs), got)
    # and the NCHW module computes what the NHWC TFLite file computes
    tfl = from_tflite_bytes(net_to_tflite(net))
    assert_close(run(tfl, [nchw_to_nhwc(inputs[0])]), got)


# ----------------------------------------------------------------------------------------------------------
# skips
# ----------------------------------------------------------------------------------------------------------

def _concat_conv_module(axis=1, dynamic=False, concat_is_output=False, other_user=False, groups=1, pieces=(4, 4)):
    rng = np.random.default_rng(0)
    n = tvm.tirx.Var("n", "int64") if dynamic else 1
    xs = [relax.Var(f"x{i}", relax.TensorType([n, c, 8, 8], "float32")) for i, c in enumerate(pieces)]
    cin = sum(pieces) if axis == 1 else pieces[0]
    w = relax.const(rng.standard_normal((8, cin // groups, 3, 3)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", xs):
        with bb.dataflow():
            r = [bb.emit(relax.op.nn.relu(x)) for x in xs]
            cat = relax.op.concat(r, axis=axis)
            c = bb.emit_output(cat, "c") if concat_is_output else bb.emit(cat, "c")
            y = relax.op.nn.conv2d(c, w, padding=(1, 1), groups=groups)
            if other_user:
                y = relax.op.add(relax.op.sum(y), relax.op.sum(relax.op.nn.softmax(c, axis=1)))
            y = bb.emit_output(y, "y")
        bb.emit_func_output(relax.Tuple([y, c]) if concat_is_output else y)
    return bb.finalize()


@pytest.mark.parametrize("case, reason", [
    (dict(concat_is_output=True), "block output"),
    (dict(other_user=True), "users without a matching rule"),
    (dict(axis=2, pieces=(4, 4)), "users without a matching rule"),
    (dict(dynamic=True), "dynamic"),
    (dict(groups=4, pieces=(3, 5)), "users without a matching rule"),
])
def test_skips(case, reason):
    mod = _concat_conv_module(**case)
    for policy in ("always", "if-better"):
        new, report = identity_rewrite(mod, policy=policy)
        assert new.same_as(mod) and not report.sites
        reasons = [r for b in report.blocks for _, r in b.skipped] + [b.status for b in report.blocks]
        assert any(reason in r for r in reasons), reasons


def test_groups_aligned_with_pieces_are_partitioned():
    mod = _concat_conv_module(groups=4, pieces=(6, 2))  # 2 channels per group: both pieces are whole groups
    new, report = identity_rewrite(mod, policy="always")
    assert [s.rule for s in report.sites] == ["grouped_conv_partition"]
    check_numerics(mod, new)


def test_concat_with_constant_operand():
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType([1, 4, 8, 8], "float32"))
    k = relax.const(rng.standard_normal((1, 3, 8, 8)).astype("float32"))
    w = relax.const(rng.standard_normal((5, 7, 1, 1)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.concat([relax.op.nn.relu(x), k], axis=1))
            y = bb.emit_output(relax.op.nn.conv2d(c, w))
        bb.emit_func_output(y)
    mod = bb.finalize()
    new, report = identity_rewrite(mod, policy="always")
    assert report.sites[0].inputs[1] == "const"
    check_numerics(mod, new)


def test_merge_duplicates():
    """relu(x) emitted once per consumer (as frontends do) is computed once when that lowers the peak."""
    rng = np.random.default_rng(0)
    x0 = relax.Var("x", relax.TensorType([1, 8, 16, 16], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x0]):
        with bb.dataflow():
            x = bb.emit(relax.op.negative(x0), "x")   # an activation: recomputing relu(x) keeps x alive longer
            outs = []
            for i in range(3):
                r = bb.emit(relax.op.nn.relu(x), f"r{i}")
                outs.append(bb.emit(relax.op.nn.conv2d(r, relax.const(rng.standard_normal((4, 8, 3, 3))
                                                                      .astype("float32")), padding=(1, 1))))
            out = bb.emit_output(relax.op.add(relax.op.add(outs[0], outs[1]), outs[2]))
        bb.emit_func_output(out)
    mod = bb.finalize()
    assert [[v.name for v in g] for g in duplicate_groups(mod["main"], 0)] == [["r0", "r1", "r2"]]
    for policy in ("if-better", "always"):
        new, rep = identity_rewrite(mod, rules=[MERGE], policy=policy, method="dp")
        assert [(s.rule, s.var, s.inputs) for s in rep.sites] == [(MERGE, "r1", ("r0",)), (MERGE, "r2", ("r0",))]
        assert op_names(new).count("relax.nn.relu") == 1
        assert rep.peak_after < rep.peak_before
    check_numerics(mod, new)


# ----------------------------------------------------------------------------------------------------------
# policies
# ----------------------------------------------------------------------------------------------------------

def _widening_module():
    """concat of two small maps -> 1x1 conv to many channels: partial sums cost more than the concat."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType([1, 4, 16, 16], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(x))
            b = bb.emit(relax.op.sigmoid(x))
            c = bb.emit(relax.op.concat([a, b], axis=1))
            y = bb.emit_output(relax.op.nn.conv2d(c, relax.const(rng.standard_normal((64, 8, 1, 1))
                                                                 .astype("float32"))))
        bb.emit_func_output(y)
    return bb.finalize()


def test_if_better_applies_only_what_lowers_the_peak():
    wide = _widening_module()
    kept, rep = identity_rewrite(wide, policy="if-better", method="dp")
    assert kept.same_as(wide) and not rep.sites
    assert rep.blocks[0].candidates and not rep.blocks[0].candidates[0].accepted
    forced, rep_all = identity_rewrite(wide, policy="always", method="dp")
    assert rep_all.sites and rep_all.peak_after > rep_all.peak_before
    check_numerics(wide, forced)

    mod = branchy_module(branches=4)
    new, rep = identity_rewrite(mod, policy="if-better", method="dp")  # level "best": scored both ways
    assert rep.peak_after < rep.peak_before
    assert rep.chosen["main"] in rep.scores["main"] and rep.chosen["main"] != "original"
    assert rep.scores["main"]["original"]["kernel_peak"] == rep.peak_before
    assert rep.scores["main"][rep.chosen["main"]]["kernel_peak"] == rep.peak_after
    for level in ("operator", "kernel"):
        _, r = identity_rewrite(mod, method="dp", level=level)
        assert r.sites and r.blocks[0].level == level and r.peak_after < r.peak_before
    site = rep.sites[0]
    assert (site.function, site.block, site.rule, site.level) == ("main", 0, "conv_channel_partition", 1)
    assert len(site.inputs) == 4
    assert rep.blocks[0].candidates[0].accepted and rep.blocks[0].status == "rewritten"
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["peak_before"] == rep.peak_before and d["blocks"][0]["sites"][0]["rule"] == "conv_channel_partition"
    assert "conv_channel_partition" in rep.summary()
    check_numerics(mod, new)


@pytest.mark.slow
def test_if_better_on_every_rule():
    """Plans are cut at the best depth; an accepted plan never raises the peak."""
    mod, inputs = kitchen_sink("NCHW")
    new, rep = identity_rewrite(mod, policy="if-better", method="greedy", level="operator")
    assert rep.peak_after <= rep.peak_before
    cands = rep.blocks[0].candidates
    assert cands and any(c.accepted for c in cands)
    for c in cands:
        assert 1 <= c.depth <= c.steps
        if c.accepted:
            assert c.peak_after <= c.peak_before
    check_numerics(mod, new, inputs)


def test_identical_cells_are_all_rewritten():
    """Several cells with the same peak: no single rewrite lowers the block peak, all of them together do."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType([1, 8, 16, 16], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for cell in range(3):
                br = [bb.emit(relax.op.nn.conv2d(h, relax.const(rng.standard_normal((8, 8, 3, 3)).astype("float32")
                                                                 * 0.1), padding=(1, 1))) for _ in range(4)]
                c = bb.emit(relax.op.concat(br, axis=1), f"cell{cell}")
                h = bb.emit(relax.op.nn.conv2d(c, relax.const(rng.standard_normal((8, 32, 1, 1)).astype("float32")
                                                              * 0.1)))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    mod = bb.finalize()
    new, rep = identity_rewrite(mod, method="dp")
    assert len(rep.sites) == 3 and rep.peak_after < rep.peak_before
    check_numerics(mod, new)


# ----------------------------------------------------------------------------------------------------------
# the pass, in pipelines
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_pass_in_sequential_before_memory_aware_reorder():
    net = small_net()
    mod = net_to_relax(net, params_as_inputs=True)
    inputs = [np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")]
    inputs += [a for _, a in relax_params(net)]
    rewrite, reorder = IdentityRewrite(method="dp"), MemoryAwareReorder(method="dp")
    with LLVM:
        new = tvm.transform.Sequential([rewrite, reorder])(mod)
    assert rewrite.report is not None and rewrite.report.sites
    assert rewrite.report.peak_after < rewrite.report.peak_before
    assert reorder.report
    check_numerics(mod, new, inputs)


@pytest.mark.slow
def test_compare_after_rewriting():
    """compare(rewrite=...) rewrites our side before legalization; numerics are checked against TVM's default
    build of the original module; the result equals rewriting the module by hand first."""
    mod = branchy_module(branches=4, channels=8, size=16)
    c = compare(mod, LLVM, method="dp", rewrite={"method": "dp"})
    assert c.numerics_ok and c.rewrites
    assert {r["rule"] for r in c.rewrites} == {"conv_channel_partition"}
    assert "identity rewrites on our side" in c.summary()
    by_hand = compare(IdentityRewrite(method="dp")(mod), LLVM, method="dp", run=False)
    assert c.memsched_planned_bytes == by_hand.memsched_planned_bytes
    base = compare(mod, LLVM, method="dp", run=False)
    assert not base.rewrites and c.memsched_planned_bytes < base.memsched_planned_bytes


@pytest.mark.slow
def test_cli_compare_rewrite(tmp_path):
    """tvm-memsched compare --rewrite always: rewrites reported, numerics checked against TVM's default build."""
    import os
    import subprocess
    import sys

    model = tmp_path / "small.tflite"
    model.write_bytes(net_to_tflite(small_net()))
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, "-m", "tvm_memsched", "compare", str(model), "--method", "dp",
                           "--rewrite", "always", "--json", str(out), "-q"], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, CI="true"))
    assert proc.returncode == 0, proc.stderr
    assert "identity rewrites on our side" in proc.stdout
    d = json.loads(out.read_text())
    assert d["numerics_ok"]
    assert {"conv_channel_partition", "grouped_conv_partition"} <= {r["rule"] for r in d["rewrites"]}


@pytest.mark.slow
def test_cli_micro_rewrite_runs_and_matches_original(tmp_path, capsys):
    """tvm-memsched micro --rewrite: the rewritten model's C build gives the original model's outputs."""
    from tvm_memsched.app.cli import main as cli_main

    model = tmp_path / "small.tflite"
    model.write_bytes(net_to_tflite(small_net()))
    code = cli_main(["micro", str(model), "--board", "mps2-an386", "--out", str(tmp_path / "c"), "--method", "dp",
                     "--rewrite", "always", "--run", "--host", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "identity rewrites: " in out and "conv_channel_partition" in out
    assert "host: 1 output(s)" in out and "(ok)" in out


@pytest.mark.slow
def test_pipeline_with_rewrite_first():
    """pipeline(rewrite=...) runs IdentityRewrite on the imported operators, before legalization."""
    from tvm_memsched.relax.pipeline import build, pipeline

    mod = branchy_module(branches=4, channels=8, size=16)
    p = pipeline(LLVM, method="dp", rewrite={"method": "dp"})
    names = p.pass_names()       # after the int8 lowering (no effect on float models), before legalization
    assert names[:2] == ["IntegerLowering", "IdentityRewrite"] and names.index("LegalizeOps") > 1
    assert "IdentityRewrite" not in pipeline(LLVM).pass_names()
    ex = tvm.compile(mod, LLVM, relax_pipeline=p)
    assert [s.rule for s in p.rewrite.report.sites] == ["conv_channel_partition"]
    inputs = random_inputs(mod["main"], 0)
    ref = run_vm(tvm.compile(mod, LLVM), inputs)
    for ours in (run_vm(ex, inputs), run_vm(build(mod, LLVM, method="dp", rewrite=True), inputs)):
        assert all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(ref, ours))
