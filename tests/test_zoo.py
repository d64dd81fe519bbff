"""Benchmark zoo: network definitions, Graph / .tflite / Relax conversion, numerical agreement."""

import json
import math
import subprocess
import sys
from functools import lru_cache

import numpy as np
import pytest

from tvm_memsched import zoo
from tvm_memsched.core import Graph, graph_from_dict, rpo_order, simulate
from tvm_memsched.zoo import hrnet, nas, randwire
from tvm_memsched.zoo.netdef import NetBuilder, same_pads
from tvm_memsched.zoo.quant import activation_qparams, dequantize, quantize, shared_groups
from tvm_memsched.zoo.reference import forward
from tvm_memsched.zoo.to_tflite import nchw_to_nhwc

ALL = zoo.names()
SMALL = zoo.names("small")
REQUIRED = ["nasnet_a_cifar", "nasnet_a_imagenet", "amoebanet_a_cifar", "amoebanet_a_imagenet", "darts_v2_cifar",
            "darts_v2_imagenet", "randwire_ws_1", "randwire_ws_2", "randwire_ws_3", "hrnet_w18_small_v1",
            "hrnet_w18_small_v2", "swiftnet_like", "resnet", "mobilenet_v2", "densenet_like"]
# plausible layer-count ranges per family (ops of the Graph)
LAYER_RANGE = {"nasnet_a": (150, 1000), "amoebanet_a": (150, 1000), "darts_v2": (120, 1000),
               "randwire": (90, 500), "hrnet": (100, 400), "swiftnet": (55, 90), "resnet": (20, 80),
               "mobilenet": (50, 100), "densenet": (70, 150), "tinyml": (10, 40)}


# ------------------------------------------------------------------ helpers
@lru_cache(maxsize=None)
def weights(name):
    return zoo.get_net(name).weights(0)


def test_input(net, seed=7):
    return np.random.default_rng(seed).standard_normal(net.input_shape)


test_input.__test__ = False  # a helper, not a test


@lru_cache(maxsize=None)
def tflite_buf(name, dtype):
    return zoo.tflite(name, dtype)


def litert_run(buf, x):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=buf,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def tflm_run(buf, x):
    from tflite_micro.python.tflite_micro import runtime

    it = runtime.Interpreter.from_bytes(buf, arena_size=8 << 20)
    it.set_input(x, 0)
    it.invoke()
    return it.get_output(0)


# ----------------------------------------------------------------- registry
def test_registry():
    assert len(ALL) == len(set(ALL))
    for name in REQUIRED:
        assert name in ALL
    for size in ("small", "medium", "large"):
        assert zoo.names(size)
    assert set(SMALL) >= {"swiftnet_like", "resnet", "mobilenet_v2", "densenet_like", "nasnet_a_cifar_tiny",
                          "amoebanet_a_cifar_tiny", "darts_v2_cifar_tiny", "randwire_tiny", "hrnet_tiny"}
    assert zoo.default_model() in SMALL
    i = zoo.info("amoebanet_a_imagenet")
    assert i["size"] == "large" and i["input_shape"] == (1, 3, 224, 224)
    assert i["config"]["filters"] == 12.5 and "AmoebaNet-A" in i["description"]
    assert "like" in zoo.info("swiftnet_like")["description"]
    with pytest.raises(KeyError, match="unknown zoo model"):
        zoo.info("no_such_net")
    with pytest.raises(ValueError):
        zoo.names("huge")
    assert zoo.get_net("resnet") is zoo.get_net("resnet")


def test_zoo_imports_are_light():
    code = ("import sys, tvm_memsched.zoo, tvm_memsched.tflite; from tvm_memsched import zoo; "
            "zoo.graph('swiftnet_like'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'ai_edge_litert', 'tflite_micro', "
            "'flatbuffers', 'torch')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------- every model: Net + Graph
@pytest.mark.parametrize("name", ALL)
def test_every_model_builds_net_and_graph(name):
    net = zoo.get_net(name)
    g = zoo.graph(name)
    assert isinstance(g, Graph) and g.name == name
    assert g.num_ops == net.count() == len(net.layers) - 1
    assert g.num_tensors == g.num_ops + 1
    assert g.inputs == (net.input,) and g.outputs == (net.output,)
    assert net.input_shape == zoo.info(name)["input_shape"]
    lo, hi = LAYER_RANGE[zoo.info(name)["family"]]
    assert lo <= g.num_ops <= hi, g.num_ops
    assert g.total_bytes == net.activation_bytes(4)
    assert zoo.graph(name, "int8").total_bytes * 4 == g.total_bytes
    for op in g.ops:
        a = op.attrs
        assert a["kind"] == net.layer(op.name).op and a["shape"] == list(net.layer(op.name).shape)
        assert a["macs"] >= 0 and a["param_bytes"] >= 0
        assert g.tensor_bytes(op.outputs[0]) == 4 * math.prod(a["shape"])
    assert sum(op.attrs["macs"] for op in g.ops) == net.total_macs() > 0
    assert sum(op.attrs["param_bytes"] for op in g.ops) == 4 * net.param_count()
    assert net.output_shape[0] == 1 and len(net.output_shape) == 2
    # JSON text round trip through the core reader
    g2 = graph_from_dict(json.loads(zoo.graph_json(name)))
    assert g2 == g and [o.attrs for o in g2.ops] == [o.attrs for o in g.ops]
    # program order is a valid schedule
    assert simulate(g, list(range(g.num_ops))).peak > 0
    assert g.is_topological(rpo_order(g))


def test_model_costs_match_published_figures():
    def close(a, b, tol):
        return abs(a - b) <= tol * b

    assert close(zoo.get_net("resnet").param_count(), 0.27e6, 0.03)
    assert close(zoo.get_net("resnet").total_macs(), 41e6, 0.05)
    assert close(zoo.get_net("darts_v2_cifar").param_count(), 3.3e6, 0.03)        # DARTS paper: 3.3M
    assert close(zoo.get_net("amoebanet_a_cifar").param_count(), 3.2e6, 0.05)     # DARTS table: 3.2M
    assert close(zoo.get_net("randwire_ws_1").total_macs(), 583e6, 0.05)          # Xie et al.: 583M
    assert close(zoo.get_net("randwire_ws_1").param_count(), 5.6e6, 0.05)
    assert close(zoo.get_net("hrnet_w18_small_v1").param_count(), 13.2e6, 0.03)
    assert close(zoo.get_net("hrnet_w18_small_v2").param_count(), 15.6e6, 0.03)
    assert close(zoo.get_net("mobilenet_v2").param_count(), 1.66e6, 0.03)
    net = zoo.get_net("resnet")
    conv = net.layer("stage1/block0/conv1")
    assert net.macs(conv) == 32 * 32 * 16 * 16 * 9
    assert net.param_bytes(conv) == 4 * (16 * 16 * 9 + 16)
    assert net.param_bytes(conv, "int8") == 16 * 16 * 9 + 4 * 16


def test_tinyml_models_have_their_reference_structure():
    """MLPerf Tiny's four models: multiply-accumulates counted from the published layer shapes."""
    # DS-CNN: 10x4/2 conv to 64 on 49x10 -> 25x5, 4 x (3x3 depthwise + 1x1 64->64), dense 64->12
    px = 25 * 5
    assert zoo.get_net("ds_cnn").total_macs() == px * 64 * 40 + 4 * (px * 64 * 9 + px * 64 * 64) + 64 * 12
    # ResNet-8: one basic block per stage, 1x1/2 projections into stages 2 and 3
    net = zoo.get_net("resnet8")
    assert net.count("add") == 3 and net.count("conv2d") == 9 and net.output_shape == (1, 10)
    # MobileNetV1 0.25 @ 96: 8-channel stem at 48x48, 256 channels at 3x3 before the pool
    net = zoo.get_net("mobilenet_v1_025")
    assert net.layer("stem").shape == (1, 8, 48, 48) and net.layer("block13/pw").shape == (1, 256, 3, 3)
    assert net.count("depthwise_conv2d") == 13
    # the autoencoder: ten dense layers, 640 -> 8 -> 640
    net = zoo.get_net("fc_autoencoder")
    assert net.input_shape == net.output_shape == (1, 640) and net.layer("bottleneck").shape == (1, 8)
    assert net.total_macs() == 640 * 128 + 3 * 128 * 128 + 128 * 8 + 8 * 128 + 3 * 128 * 128 + 128 * 640


# ---------------------------------------------------------------- structure
def _cells(net):
    return sorted({l.name.split("/")[0] for l in net.layers if l.name.startswith("cell")},
                  key=lambda s: int(s[4:]))


@pytest.mark.parametrize("name,cells,reductions", [
    ("nasnet_a_cifar", 20, (6, 13)), ("amoebanet_a_cifar", 20, (6, 13)), ("darts_v2_cifar", 20, (6, 13)),
    ("nasnet_a_imagenet", 14, (4, 9)), ("amoebanet_a_imagenet", 14, (4, 9)), ("darts_v2_imagenet", 14, (4, 9)),
    ("nasnet_a_cifar_tiny", 5, (1, 3))])
def test_nas_cells(name, cells, reductions):
    net = zoo.get_net(name)
    g = nas.load_genotypes()[net.config["genotype"]]
    assert len(_cells(net)) == cells and net.config["reduction_cells"] == list(reductions)
    res = [net.layer(f"cell{i}/concat").shape[2] for i in range(cells)]
    first = 32 if net.config["dataset"] == "cifar10" else 28
    for i in range(cells):
        stage = sum(r <= i for r in reductions)
        out = net.layer(f"cell{i}/concat")
        concat = g.reduce_concat if i in reductions else g.normal_concat
        # the cell output concatenates the genotype's states, C channels each
        assert len(out.inputs) == len(concat)
        assert out.shape[1] == len(concat) * nas.stage_channels(net.config["filters"], stage)
        assert res[i] == first >> stage
        # a factorized reduction preprocesses s0 exactly when it has twice the resolution of s1
        has_fr = f"cell{i}/pre0/shift" in net
        assert has_fr == (i - 1 in reductions or (i == 0 and net.config["dataset"] == "imagenet"))


def test_darts_cells_concat_four_nodes_and_nasnet_ops():
    net = zoo.get_net("darts_v2_cifar")
    for c in _cells(net):
        assert len(net.layer(f"{c}/concat").inputs) == 4
    # DARTS normal cell: 5 separable convs, 1 dilated conv, 2 skips, 4 node sums
    cell = [l for l in net.layers if l.name.startswith("cell0/")]
    assert sum(l.name.endswith("/dw1") for l in cell) == 5 and sum(l.name.endswith("/dw") for l in cell) == 1
    assert sum(l.op == "add" for l in cell) == 4
    # NASNet reduction cell: stride-2 ops on the cell inputs, factorized reduce for the skip
    nn_ = zoo.get_net("nasnet_a_cifar")
    assert nn_.layer("cell6/node2/op0_sep_conv_5x5/dw1").attrs["stride"] == (2, 2)
    assert nn_.layer("cell6/node5/op1_avg_pool_3x3/avgpool").attrs["stride"] == (1, 1)    # reads node 2
    amoeba = zoo.get_net("amoebanet_a_imagenet")
    assert amoeba.config["stage_channels"] == [13, 25, 50]
    assert amoeba.layer("cell4/node6/op0_conv_7x1_1x7/conv1x7").attrs["kernel"] == (1, 7)


@pytest.mark.parametrize("name", sorted(randwire.RANDWIRE_SEEDS))
def test_randwire_stages(name):
    net = zoo.get_net(name)
    assert net.config["seeds"] == list(randwire.RANDWIRE_SEEDS[name])
    for s in (1, 2, 3):
        nodes = {l.name.split("/")[1] for l in net.layers if l.name.startswith(f"stage{s}/node")}
        assert len(nodes) == 32
        pw = [l for l in net.layers if l.name.startswith(f"stage{s}/node") and l.name.endswith("/pw")]
        assert len(pw) == 32 and {l.shape[1] for l in pw} == {78 * 2 ** (s - 1)}
        assert {l.shape[2] for l in pw} == {56 >> s}
    assert net.config["edges_per_stage"] == [64, 64, 64]
    assert net.layer("conv1/conv").shape == (1, 39, 112, 112)


def test_randwire_graphs_are_fixed_and_distinct():
    e = randwire.ws_dag(32, 4, 0.75, 101)
    assert e == randwire.ws_dag(32, 4, 0.75, 101) and all(u < v for u, v in e) and len(e) == 64
    edge_sets = {tuple(randwire.ws_dag(32, 4, 0.75, s)) for seeds in randwire.RANDWIRE_SEEDS.values()
                 for s in seeds}
    assert len(edge_sets) == 9
    names = [[l.name for l in zoo.get_net(n).layers] for n in sorted(randwire.RANDWIRE_SEEDS)]
    assert names[0] != names[1] != names[2]


@pytest.mark.parametrize("name,widths,modules", [("hrnet_w18_small_v1", (16, 32, 64, 128), (1, 1, 1)),
                                                 ("hrnet_w18_small_v2", (18, 36, 72, 144), (1, 3, 2))])
def test_hrnet_branches(name, widths, modules):
    net = zoo.get_net(name)
    assert net.config["branches_per_stage"] == [2, 3, 4]
    for si, m in zip((2, 3, 4), modules):
        mods = {l.name.split("/")[1] for l in net.layers if l.name.startswith(f"stage{si}/")}
        assert len(mods) == m
    last = f"stage4/module{modules[-1] - 1}"
    fused = [net.layer(f"{last}/fuse{i}") for i in range(4)]
    assert [f.shape[1] for f in fused] == list(widths)
    assert [f.shape[2] for f in fused] == [56, 28, 14, 7]
    # branch 0 receives every other branch: 3 upsampled terms + itself -> 3 adds
    assert sum(l.name.startswith(f"{last}/fuse0") and l.op == "add" for l in net.layers) == 3
    # fusion: 1 upsampling per 2-branch module, 3 per 3-branch module, 6 per 4-branch module
    assert net.count("upsample_nearest") == 1 * modules[0] + 3 * modules[1] + 6 * modules[2]
    assert net.layer("head/final").shape == (1, 2048, 7, 7)


def test_swiftnet_like_cells():
    net = zoo.get_net("swiftnet_like")
    assert _cells(net) == ["cell0", "cell1", "cell2"]
    assert net.count("concat") == 9 and net.count("depthwise_conv2d") == 25
    assert net.input_shape == (1, 3, 96, 96) and net.output_shape == (1, 2)
    # nodes are listed breadth first, so the program order is not the memory-optimal one
    g = zoo.graph("swiftnet_like")
    assert simulate(g, rpo_order(g)).peak < simulate(g, list(range(g.num_ops))).peak


def test_builder_shapes_and_errors():
    assert same_pads(7, 3, 2) == (1, 1, 4) and same_pads(8, 1, 2) == (0, 0, 4)
    b = NetBuilder("t")
    x = b.input((1, 4, 9, 9))
    c = b.conv2d(x, 8, (1, 7), stride=(1, 2))
    assert b.shape(c) == (1, 8, 9, 5)
    assert b.shape(b.conv2d(x, 8, 3, padding=0)) == (1, 8, 7, 7)
    d = b.depthwise_conv2d(x, 3, dilation=2)
    assert b.shape(d) == (1, 4, 9, 9) and b.shape(b.upsample_nearest(d, 3)) == (1, 4, 27, 27)
    assert b.shape(b.strided_slice(x, (0, 0, 1, 1), (1, 4, 9, 9), (1, 1, 2, 2))) == (1, 4, 4, 4)
    assert b.add(x) == x and b.concat([x]) == x                     # identities create no layer
    s = b.add(x, d, x, name="s")
    assert s == "s" and "s_p1" in b._shapes
    with pytest.raises(ValueError, match="different shapes"):
        b.add(x, c)
    with pytest.raises(ValueError, match="spatial"):
        b.concat([x, c])
    with pytest.raises(ValueError, match="nobody reads"):
        b.build(s)
    with pytest.raises(ValueError, match="bad layer name"):
        b.relu(x, name="a b")


# ------------------------------------------------------------------ weights
def test_weights_deterministic_and_shaped():
    net = zoo.get_net("darts_v2_cifar_tiny")
    w1, w2 = net.weights(0), weights("darts_v2_cifar_tiny")
    from tvm_memsched.zoo.weights import make_weights
    w3 = make_weights(net, seed=0)
    assert sorted(w1) == sorted(w3) and all(np.array_equal(w1[k], w3[k]) for k in w1)
    assert all(np.array_equal(w1[k], w2[k]) for k in w1)
    w4 = make_weights(net, seed=1)
    assert not np.array_equal(w1["stem/conv.weight"], w4["stem/conv.weight"])
    assert all(a.dtype == np.float32 for a in w1.values())
    assert w1["stem/conv.weight"].shape == (24, 3, 3, 3)                              # OIHW
    assert w1["cell0/node2/op0_sep_conv_3x3/dw1.weight"].shape == (8, 1, 3, 3)         # depthwise
    assert "cell0/node2/op0_sep_conv_3x3/dw1.bias" not in w1
    assert w1["head/fc.weight"].shape == (10, 4 * 32)


@pytest.mark.parametrize("name", SMALL + [pytest.param("amoebanet_a_cifar", marks=pytest.mark.slow)])
def test_activations_stay_sane(name):
    """Batch-norm folding keeps every activation finite and of a few units, even through 20 cells."""
    net = zoo.get_net(name)
    acts = forward(net, test_input(net), weights(name), keep_all=True)
    peak = max(float(np.abs(a).max()) for a in acts.values())
    assert np.isfinite(peak) and peak < 100
    y = acts[net.output]
    assert 0.05 < float(np.abs(y).max()) < 50 and float(y.std()) > 1e-3


# ----------------------------------------------------------------- .tflite
@pytest.mark.parametrize("name", SMALL)
def test_tflite_float_matches_reference(name):
    from tvm_memsched.tflite import builder

    net = zoo.get_net(name)
    buf = tflite_buf(name, "float32")
    m = builder.load(buf)
    sg = m.subgraphs[0]
    assert buf[4:8] == b"TFL3" and m.version == 3 and len(sg.operators) == net.count()
    # operators in layer (program) order, each writing the tensor named like its layer
    outs = [sg.tensors[o.outputs[0]].name.decode() for o in sg.operators]
    assert outs == [l.name for l in net.layers if l.op != "input"]
    assert m.buffers[0].data is None
    x = test_input(net)
    y = litert_run(buf, nchw_to_nhwc(x).astype(np.float32))
    ref = forward(net, x.astype(np.float32).astype(np.float64), weights(name))
    assert np.isfinite(y).all() and y.shape == net.output_shape
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(ref).max()))


def test_tflite_layout_alignment_and_roundtrip(tmp_path):
    from tvm_memsched.tflite import builder

    net = zoo.get_net("hrnet_tiny")
    buf = tflite_buf("hrnet_tiny", "float32")
    m = builder.tfl.Model.GetRootAs(buf, 0)
    base = np.frombuffer(buf, np.uint8).ctypes.data
    offs = [m.Buffers(i).DataAsNumpy().ctypes.data - base for i in range(1, m.BuffersLength())
            if m.Buffers(i).DataLength()]
    assert offs and all(o % 16 == 0 for o in offs)
    mt = builder.load(buf)
    assert builder.serialize(mt) == buf                       # byte-identical re-pack
    names = builder.operator_names(mt)
    assert names.count("RESIZE_NEAREST_NEIGHBOR") == net.count("upsample_nearest")
    sg = mt.subgraphs[0]
    conv = next(t for t in sg.tensors if t.name == b"stem/conv1/weight")
    assert list(conv.shape) == [8, 3, 3, 3]                   # OHWI
    np.testing.assert_array_equal(
        mt.buffers[conv.buffer].data.view(np.float32).reshape(8, 3, 3, 3),
        weights("hrnet_tiny")["stem/conv1.weight"].transpose(0, 2, 3, 1))
    # operators can be reordered and written back (the reordering tools rely on it)
    sg.operators = list(sg.operators)[::-1]
    again = builder.load(builder.serialize(mt))
    assert builder.operator_names(again) == names[::-1]
    p = tmp_path / "m.tflite"
    assert zoo.tflite("swiftnet_like", path=p) == p.read_bytes()


@pytest.mark.parametrize("name", SMALL)
def test_tflite_int8_runs_in_litert_and_tflm(name):
    net = zoo.get_net(name)
    buf = tflite_buf(name, "int8")
    qp = activation_qparams(net, weights(name))
    x = test_input(net)
    xq = quantize(nchw_to_nhwc(x), *qp[net.input])
    y_lite, y_tflm = litert_run(buf, xq), tflm_run(buf, xq)
    assert y_lite.dtype == y_tflm.dtype == np.int8 and y_lite.shape == net.output_shape
    ref = forward(net, x, weights(name))
    s, z = qp[net.output]
    for y in (y_lite, y_tflm):
        d = dequantize(y, s, z)
        assert np.corrcoef(d.ravel(), ref.ravel())[0, 1] > 0.9
        assert np.abs(d - ref).max() < 0.25 * (np.abs(ref).max() + 1)
    # the two runtimes round a few intermediate values differently; the outputs stay close
    assert np.abs(y_lite.astype(int) - y_tflm.astype(int)).max() <= 48


def test_int8_quantization_is_consistent():
    from tvm_memsched.tflite import builder

    name = "nasnet_a_cifar_tiny"
    net = zoo.get_net(name)
    m = builder.load(tflite_buf(name, "int8"))
    sg = m.subgraphs[0]
    q = {t.name.decode(): t.quantization for t in sg.tensors}
    groups = shared_groups(net)
    for o, opname in zip(sg.operators, builder.operator_names(m)):
        ts = [sg.tensors[i] for i in o.inputs if i >= 0]
        out = sg.tensors[o.outputs[0]]
        if opname in ("CONCATENATION", "MAX_POOL_2D", "AVERAGE_POOL_2D", "STRIDED_SLICE"):
            for t in ts[:1] if opname != "CONCATENATION" else ts:
                assert list(t.quantization.scale) == list(out.quantization.scale)
                assert list(t.quantization.zeroPoint) == list(out.quantization.zeroPoint)
        if opname == "CONV_2D":
            w, b = ts[1], ts[2]
            assert w.type == builder.tfl.TensorType.INT8 and b.type == builder.tfl.TensorType.INT32
            assert len(w.quantization.scale) == w.shape[0] and set(w.quantization.zeroPoint) == {0}
            np.testing.assert_allclose(b.quantization.scale,
                                       ts[0].quantization.scale[0] * np.asarray(w.quantization.scale), rtol=1e-6)
    assert len(set(groups.values())) < len(groups)
    assert q["input"].scale[0] > 0


# ------------------------------------------------------------------- Relax
@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_relax_matches_litert(name):
    import tvm
    from tvm import relax

    net = zoo.get_net(name)
    mod = zoo.load(name)
    assert relax.analysis.check_well_formed(mod)
    assert [p.name for p in mod["main"].params] == ["input"]
    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = test_input(net).astype(np.float32)
    y = vm["main"](tvm.runtime.tensor(x)).numpy()
    y_lite = litert_run(tflite_buf(name, "float32"), nchw_to_nhwc(x))
    assert np.isfinite(y).all() and y.shape == net.output_shape
    np.testing.assert_allclose(y, y_lite, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(y_lite).max()))


@pytest.mark.slow
def test_relax_params_as_inputs():
    import tvm
    from tvm import relax
    from tvm_memsched.zoo.to_relax import relax_params

    name = "hrnet_tiny"
    net = zoo.get_net(name)
    mod = zoo.load(name, params_as_inputs=True)
    params = relax_params(net)
    assert [p.name for p in mod["main"].params] == ["input"] + [k for k, _ in params]
    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
    x = test_input(net).astype(np.float32)
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x),
                                                    *[tvm.runtime.tensor(a) for _, a in params]).numpy()
    np.testing.assert_allclose(y, forward(net, x.astype(np.float64), weights(name)), rtol=1e-3, atol=1e-4)


def test_zoo_command_line(tmp_path, capsys):
    from tvm_memsched.zoo.__main__ import main

    assert main(["list", "--size", "small"]) == 0
    out = capsys.readouterr().out
    assert "swiftnet_like" in out and "nasnet_a_cifar " not in out
    p = tmp_path / "g.json"
    assert main(["graph", "resnet", "--dtype", "int8", "-o", str(p)]) == 0
    g = graph_from_dict(json.loads(p.read_text()))
    assert g == zoo.graph("resnet", "int8")
    assert main(["tflite", "resnet", "-o", str(tmp_path / "r.tflite")]) == 0
    assert (tmp_path / "r.tflite").read_bytes() == tflite_buf("resnet", "float32")
    assert main(["graph", "nope"]) == 2
