"""TFLite export: reader, reorder, TFLM offline plan, verification in LiteRT and TFLite Micro, bad inputs, CLI."""

import os
from functools import lru_cache

import numpy as np
import pytest

from tvm_memsched import zoo
from tvm_memsched.app.cli import main
from tvm_memsched.core import simulate
from tvm_memsched.core.arena import check_plan
from tvm_memsched.core.errors import InputFileError, OrderError, UnsupportedError
from tvm_memsched.schedulers import schedule
from tvm_memsched.tflite import builder
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.offline_plan import (attach_offline_plan, plan_buffers, plan_offline, read_offline_plan,
                                              tflm_greedy_plan, tflm_tensor_order)
from tvm_memsched.tflite.optimize import optimize_tflite
from tvm_memsched.tflite.reader import load_model, read_tflite
from tvm_memsched.tflite.reorder import reorder_tflite
from tvm_memsched.tflite.verify import compare_litert, litert_run, random_inputs, tflm_arena, tflm_run

BO, OP = tfl.BuiltinOperator, tfl.BuiltinOptions
IRREGULAR = ("swiftnet_like", "nasnet_a_cifar_tiny", "amoebanet_a_cifar_tiny", "darts_v2_cifar_tiny")


@lru_cache(maxsize=None)
def zoo_buf(name, dtype="float32"):
    return zoo.tflite(name, dtype)


# ------------------------------------------------------------ hand-made models
def branchy_model(dtype=np.uint8):
    """Two branches, each with a large intermediate, listed breadth first (a bad order): quantized."""
    mb = ModelBuilder("branchy")
    zp = 128 if dtype == np.uint8 else 0
    q = dict(scale=0.05, zero_point=zp)
    x = mb.tensor("x", [1, 8, 8, 4], dtype, **q)
    pool = lambda: tfl.Pool2DOptionsT(padding=tfl.Padding.VALID, strideW=2, strideH=2,  # noqa: E731
                                      filterWidth=2, filterHeight=2)
    cat = lambda: tfl.ConcatenationOptionsT(axis=3)  # noqa: E731
    a1 = mb.tensor("a1", [1, 8, 8, 8], dtype, **q)
    b1 = mb.tensor("b1", [1, 8, 8, 8], dtype, **q)
    a2 = mb.tensor("a2", [1, 4, 4, 8], dtype, **q)
    b2 = mb.tensor("b2", [1, 4, 4, 8], dtype, **q)
    y = mb.tensor("y", [1, 4, 4, 8], dtype, scale=0.1, zero_point=zp)
    mb.op(BO.CONCATENATION, [x, x], [a1], OP.ConcatenationOptions, cat())
    mb.op(BO.CONCATENATION, [x, x], [b1], OP.ConcatenationOptions, cat())
    mb.op(BO.MAX_POOL_2D, [a1], [a2], OP.Pool2DOptions, pool())
    mb.op(BO.AVERAGE_POOL_2D, [b1], [b2], OP.Pool2DOptions, pool())
    mb.op(BO.ADD, [a2, b2], [y], OP.AddOptions, tfl.AddOptionsT())
    return mb.finish([x], [y])


def add_model(mutate=None, *, extra_subgraph=None):
    """x -> ADD(x, c) -> y, with an optional mutation of the ModelT and an extra subgraph."""
    mb = ModelBuilder("add")
    x, y = mb.tensor("x", [1, 4]), mb.tensor("y", [1, 4])
    c = mb.tensor("c", [1, 4], data=np.ones((1, 4), np.float32))
    mb.op(BO.ADD, [x, c], [y], OP.AddOptions, tfl.AddOptionsT())
    m = mb.model([x], [y])
    if extra_subgraph is not None:
        m.subgraphs.append(extra_subgraph)
    if mutate:
        mutate(m)
    return builder.serialize(m)


def while_model(body: int = 2):
    """Subgraph 0 runs a WHILE loop over subgraphs 1 (cond) and ``body`` (2)."""
    def sub(name):
        sg = tfl.SubGraphT()
        t = tfl.TensorT()
        t.name, t.shape, t.type, t.buffer = "v", [1], tfl.TensorType.FLOAT32, 0
        sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = [t], [0], [0], [], name
        return sg

    def mutate(m):
        m.subgraphs.extend([sub("cond"), sub("body")])
        oc = tfl.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = BO.WHILE, BO.WHILE, 1
        m.operatorCodes.append(oc)
        op = tfl.OperatorT()
        op.opcodeIndex = len(m.operatorCodes) - 1
        op.inputs, op.outputs = [2], [2]
        op.builtinOptionsType = OP.WhileOptions
        op.builtinOptions = tfl.WhileOptionsT(condSubgraphIndex=1, bodySubgraphIndex=body)
        m.subgraphs[0].operators.append(op)
    return add_model(mutate)


def unused_subgraph():
    sg = tfl.SubGraphT()
    t = tfl.TensorT()
    t.name, t.shape, t.type, t.buffer = "unused", [1, 2], tfl.TensorType.FLOAT32, 0
    sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = [t], [0], [0], [], "spare"
    return sg


# ------------------------------------------------------------------ reader
@pytest.mark.parametrize("name,dtype", [("swiftnet_like", "int8"), ("hrnet_tiny", "float32")])
def test_reader_matches_zoo_graph(name, dtype):
    tg = read_tflite(zoo_buf(name, dtype))
    g, z = tg.graph, zoo.graph(name, dtype)
    assert [o.name for o in g.ops] == [o.name for o in z.ops]
    assert g.tensors == z.tensors and g.inputs == z.inputs and g.outputs == z.outputs
    for op in z.ops:
        a = g.op(op.name).attrs
        assert a["macs"] == op.attrs["macs"] and a["param_bytes"] >= op.attrs["param_bytes"]
        assert a["index"] == tg.op_ids[op.name] and sum(n for _, n in a["params"]) == a["param_bytes"]
    # constants are not activations; the mappings are inverse
    sg = tg.model.subgraphs[0]
    for i, n in enumerate(tg.tensor_names):
        assert (n is None) == (sg.tensors[i].buffer > 0 and tg.model.buffers[sg.tensors[i].buffer].data is not None)
        if n is not None:
            assert tg.tensor_ids[n] == i
    assert tg.num_tensors_all_subgraphs == len(sg.tensors)


def test_dynamic_batch_is_planned_at_the_stored_shape():
    """The TFLite converter writes shape_signature [-1, ...] for Keras models; TFLM uses the stored shape."""
    def batch(m):
        for t in m.subgraphs[0].tensors:
            t.shapeSignature = [-1, 4]
    tg = read_tflite(add_model(batch))
    assert tg.graph.tensor_bytes("x") == 16 and any("dynamic batch" in n for n in tg.notes)
    import tflite_micro

    # a file written by the TFLite converter (dynamic batch, signatures, metadata), shipped in the TFLM wheel
    sine = os.path.join(os.path.dirname(tflite_micro.__file__), "python", "tflite_micro", "sine_float.tflite")
    r = optimize_tflite(sine, offline_plan=True, measure=True, verify=True)
    assert r.litert["out_plan"]["identical"] and load_model(r.output).signatureDefs
    assert r.measured["out_plan"]["min_arena"] <= r.measured["in"]["min_arena"]


def test_reader_unique_names_and_quantized_sizes():
    def dup(m):
        for t in m.subgraphs[0].tensors:
            t.name = "same"
    tg = read_tflite(add_model(dup))
    assert sorted(t.name for t in tg.graph.tensors) == ["same#0", "same#1"]
    assert len(set(tg.unique_names)) == len(tg.unique_names) == 3
    tg = read_tflite(branchy_model(np.uint8))
    assert tg.graph.tensor_bytes("a1") == 8 * 8 * 8 and tg.dtype == "uint8"


# ------------------------------------------------------------ reorder + plan
@pytest.mark.parametrize("name,dtype", [("swiftnet_like", "float32"), ("swiftnet_like", "int8"),
                                        pytest.param("nasnet_a_cifar_tiny", "int8", marks=pytest.mark.slow),
                                        ("darts_v2_cifar_tiny", "float32"),
                                        pytest.param("amoebanet_a_cifar_tiny", "int8", marks=pytest.mark.slow),
                                        ("resnet", "int8"), ("randwire_tiny", "float32")])
def test_reorder_and_offline_plan_litert_and_tflm(name, dtype):
    buf = zoo_buf(name, dtype)
    r = optimize_tflite(buf, offline_plan=True, measure=True, verify=True, time_limit=2)
    m = r.measured
    # LiteRT: bit-identical outputs for the reordered file and the planned one
    assert r.litert["out"]["identical"] and r.litert["out_plan"]["identical"], r.litert
    # TFLM: never larger than the original, and the plan never larger than TFLM's own planning
    assert m["out"]["min_arena"] <= m["in"]["min_arena"]
    assert m["out_plan"]["min_arena"] <= m["out"]["min_arena"] and r.used_plan
    assert m["out_plan"]["head"] <= m["out"]["head"] <= m["in"]["head"]
    # the TFLM planner replica predicts the measured heads exactly; the plan is what TFLM uses
    assert (m["in"]["head"], m["out"]["head"], m["out_plan"]["head"]) == \
        (r.predicted["in"], r.predicted["out"], r.predicted["out_plan"])
    if name in IRREGULAR:     # clearly smaller on irregular networks
        assert m["out_plan"]["head"] <= 0.97 * m["in"]["head"]
        assert m["out_plan"]["min_arena"] < m["in"]["min_arena"]
    if name == "resnet":      # renumbering tensors steers TFLM's own planner: smaller even without metadata
        assert r.orders["out_tensor_numbering"] != "file" and m["out"]["head"] < 0.8 * m["in"]["head"]
    assert r.output == r.out_plan and read_offline_plan(load_model(r.output)) == r.plan.offsets
    # TFLM computes the same outputs with our plan as with its own (a bad plan would corrupt them)
    feeds = random_inputs(buf, seed=3)
    for a, b in zip(tflm_run(buf, feeds), tflm_run(r.out_plan, feeds)):
        assert a.tobytes() == b.tobytes()


def test_reorder_changes_only_the_operator_order():
    buf = zoo_buf("nasnet_a_cifar_tiny", "int8")
    tg = read_tflite(buf)
    order = schedule(tg.graph, "greedy").order
    out = reorder_tflite(tg, order)
    a, b = load_model(buf), load_model(out)
    sa, sb = a.subgraphs[0], b.subgraphs[0]
    assert [t.name for t in sa.tensors] == [t.name for t in sb.tensors]
    assert list(sa.inputs) == list(sb.inputs) and list(sa.outputs) == list(sb.outputs)
    assert all(np.array_equal(x.data, y.data) for x, y in zip(a.buffers, b.buffers) if x.data is not None)
    assert [op.name for op in read_tflite(out).graph.ops] == list(order)
    assert reorder_tflite(tg, range(tg.graph.num_ops)) == buf       # identity: byte-identical
    with pytest.raises(OrderError):
        reorder_tflite(tg, list(reversed(order)))
    assert compare_litert(buf, out).identical


def test_renumber_tensors_keeps_the_model():
    buf = zoo_buf("densenet_like", "int8")
    tg = read_tflite(buf)
    order = schedule(tg.graph, "auto", time_limit=1).order
    perm = tflm_tensor_order(tg, order, "-end")
    assert sorted(perm) == list(range(len(tg.unique_names))) and perm != list(range(len(perm)))
    assert all(perm[i] == i for i, n in enumerate(tg.tensor_names) if n is None)      # constants stay
    out = reorder_tflite(tg, order, tensor_order=perm)
    g2 = read_tflite(out).graph
    assert [op.name for op in g2.ops] == list(order) and set(g2.tensors) == set(tg.graph.tensors)
    assert compare_litert(buf, out).identical
    # the replica predicts TFLM's head on the renumbered file
    assert tflm_greedy_plan(tg, order, "-end")[1] == tflm_arena(out, bisect=False).head


def test_offline_plan_format_alignment_and_lifetimes():
    tg = read_tflite(zoo_buf("swiftnet_like", "int8"))
    order = schedule(tg.graph, "auto", time_limit=2).order
    plan = plan_offline(tg, order)
    n = len(tg.model.subgraphs[0].tensors)
    assert len(plan.offsets) == n
    for i, name in enumerate(tg.tensor_names):
        assert (plan.offsets[i] >= 0) == (name is not None and tg.graph.tensor_bytes(name) > 0)
    assert all(o % 16 == 0 for o in plan.offsets if o >= 0)
    bufs = plan_buffers(tg, order)
    assert check_plan(bufs, plan.by_name, 16) == plan.arena_bytes
    assert plan.arena_bytes == plan.lower_bound_bytes and plan.optimal           # CP-SAT closes the gap
    assert plan.arena_bytes <= plan.tflm_greedy_bytes
    m = attach_offline_plan(load_model(reorder_tflite(tg, order)), plan)
    data = np.frombuffer(np.asarray(next(m.buffers[x.buffer].data for x in m.metadata
                                         if x.name == "OfflineMemoryAllocation"), np.uint8).tobytes(), "<i4")
    assert list(data[:3]) == [1, 0, n] and list(data[3:]) == plan.offsets
    # deterministic: same input, same bytes
    assert builder.serialize(m) == builder.serialize(
        attach_offline_plan(load_model(reorder_tflite(tg, order)), plan_offline(tg, order)))


def test_tflm_replica_and_plan_peak():
    """The replica reproduces TFLM's greedy planner; the exact plan meets the schedule's aligned peak."""
    buf = zoo_buf("darts_v2_cifar_tiny", "int8")
    tg = read_tflite(buf)
    assert tflm_greedy_plan(tg, range(tg.graph.num_ops))[1] == tflm_arena(buf, bisect=False).head
    order = schedule(tg.graph, "auto", time_limit=2).order
    plan = plan_offline(tg, order)
    assert plan.arena_bytes == simulate(tg.graph, order).peak     # all sizes are multiples of 16 here


def test_quantized_uint8_model():
    buf = branchy_model(np.uint8)
    r = optimize_tflite(buf, offline_plan=True, measure=True, verify=True)
    assert r.peaks["out"] < r.peaks["in"] and r.predicted["out_plan"] < r.predicted["in"]
    assert r.litert["out"]["identical"] and r.litert["out_plan"]["identical"]
    # TFLM has no uint8 pooling kernels: the report says so instead of failing
    assert "error" in r.measured["in"] and any("TFLM could not measure" in n for n in r.notes)
    assert read_offline_plan(load_model(r.output)) is not None
    # the int8 twin runs in TFLM, and gets smaller
    r8 = optimize_tflite(branchy_model(np.int8), offline_plan=True, measure=True, verify=True)
    assert r8.measured["out_plan"]["min_arena"] < r8.measured["in"]["min_arena"]
    assert r8.litert["out_plan"]["identical"]


def test_unused_subgraph_is_kept_but_no_plan():
    buf = add_model(extra_subgraph=unused_subgraph())
    tg = read_tflite(buf)
    assert tg.num_subgraphs == 2 and tg.notes
    out = optimize_tflite(tg).output
    assert len(load_model(out).subgraphs) == 2 and compare_litert(buf, out).identical
    with pytest.raises(UnsupportedError, match="further subgraphs to keep nothing in the arena"):
        optimize_tflite(tg, offline_plan=True)


# -------------------------------------------------------------- bad inputs
def bad_inputs():
    good = zoo_buf("swiftnet_like", "int8")
    corrupt = bytearray(good)
    corrupt[8:2000] = np.random.default_rng(0).integers(0, 256, 1992, dtype=np.uint8).tobytes()

    def dynamic(m):
        m.subgraphs[0].tensors[0].shapeSignature = [1, -1]

    def bad_index(m):
        m.subgraphs[0].operators[0].inputs = [0, 99]

    return {
        "truncated": (good[: len(good) // 2], InputFileError, "corrupt or truncated|corrupt TFLite"),
        "corrupt": (bytes(corrupt), InputFileError, "corrupt"),
        "not a flatbuffer": (b"this is a text file, not a model\n" * 4, InputFileError, "not a TFLite flatbuffer"),
        "empty": (b"", InputFileError, "too short"),
        "bad tensor index": (add_model(bad_index), InputFileError, "refers to tensor 99"),
        "control flow to a missing subgraph": (while_model(body=9), UnsupportedError,
                                               r"WHILE at index \d+ calls subgraph\(s\) \[1, 9\], which the file"),
        "dynamic shape": (add_model(dynamic), UnsupportedError, "dynamic shape"),
    }


@pytest.mark.parametrize("case", list(bad_inputs()))
def test_bad_inputs_give_clear_errors(case, tmp_path, capsys):
    data, exc, msg = bad_inputs()[case]
    with pytest.raises(exc, match=msg):
        read_tflite(data)
    p = tmp_path / "in.tflite"
    p.write_bytes(data)
    assert main(["tflite", str(p), "--output", str(tmp_path / "out.tflite"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm-memsched: error:") and len(err.splitlines()) == 1
    assert not (tmp_path / "out.tflite").exists()


def test_cli_missing_file_and_unknown_zoo_model(tmp_path, capsys):
    assert main(["tflite", str(tmp_path / "nope.tflite"), "-o", str(tmp_path / "o.tflite")]) == 2
    assert main(["tflite", "zoo:no_such_model", "-o", str(tmp_path / "o.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("tvm-memsched: error:") for e in err)


# --------------------------------------------------------------------- CLI
def test_cli_tflite_report_and_json(tmp_path, capsys):
    src = tmp_path / "sw.tflite"
    src.write_bytes(zoo_buf("swiftnet_like", "int8"))
    out, js = tmp_path / "out.tflite", tmp_path / "r.json"
    rc = main(["tflite", str(src), "--output", str(out), "--offline-plan", "--report", "--json", str(js),
               "--time-limit", "2", "-q"])
    text = capsys.readouterr().out
    assert rc == 0 and "OUT + offline plan" in text and "bit-identical" in text and "with offline plan" in text
    import json

    rep = json.loads(js.read_text())
    assert rep["used_plan"] and rep["measured_tflm"]["out_plan"]["min_arena"] < rep["measured_tflm"]["in"]["min_arena"]
    assert read_offline_plan(load_model(out.read_bytes())) is not None
    y = litert_run(out.read_bytes(), random_inputs(src.read_bytes()))
    assert list(y) == ["head/fc"]
    # without --offline-plan: a plain reordered file, no metadata
    rc = main(["tflite", "zoo:swiftnet_like", "-o", str(tmp_path / "plain.tflite"), "--method", "rpo", "-q"])
    assert rc == 0 and read_offline_plan(load_model((tmp_path / "plain.tflite").read_bytes())) is None
    assert os.path.getsize(tmp_path / "plain.tflite") > 0


# ------------------------------------------------------------ corrupt but readable files
def _mutated(mutate):
    import copy

    from tvm_memsched import zoo
    from tvm_memsched.tflite import builder
    from tvm_memsched.tflite.reader import load_model

    m = copy.deepcopy(load_model(zoo.tflite("resnet", "int8")))
    mutate(m)
    return builder.serialize(m)


def test_constant_whose_shape_does_not_fit_its_buffer_is_refused():
    from tvm_memsched.core.errors import InputFileError
    from tvm_memsched.tflite.reader import read_tflite

    def grow(m):
        t = next(t for t in m.subgraphs[0].tensors
                 if int(t.buffer) > 0 and m.buffers[t.buffer].data is not None and len(m.buffers[t.buffer].data))
        t.shape = [1, 3, 3, 1912602640]
    with pytest.raises(InputFileError, match=r"constant tensor '.*' has shape \[1, 3, 3, 1912602640\].*buffer holds"):
        read_tflite(_mutated(grow))


def test_activation_with_a_zero_dimension_is_planned_with_no_bytes():
    from tvm_memsched.tflite.reader import read_tflite

    def zero(m):
        sg = m.subgraphs[0]
        op = sg.operators[2]
        sg.tensors[int(op.outputs[0])].shape = [1, 0, 4, 4]
        return sg.tensors[int(op.outputs[0])].name.decode()
    name = {}
    tg = read_tflite(_mutated(lambda m: name.setdefault("t", zero(m))))
    assert tg.graph.tensor_bytes(name["t"]) == 0


def test_control_flow_and_variable_tensors_as_the_converter_writes_them():
    """WHILE and IF (TensorFlow's converter) are ops whose workspace is their subgraphs' activations; an
    LSTM's variable state tensors are persistent, not planned."""
    import os

    from tvm_memsched.tflite.builder import tensor_nbytes
    from tvm_memsched.tflite.reader import read_tflite

    data = os.path.join(os.path.dirname(__file__), "data", "coverage")
    for case, kind in (("while", "WHILE"), ("if", "IF")):
        tg = read_tflite(os.path.join(data, f"{case}.float32.tflite"))
        sub = sum(tensor_nbytes(t) for sg in tg.model.subgraphs[1:] for t in sg.tensors
                  if not (t.buffer and tg.model.buffers[t.buffer].data is not None))
        (op,) = [o for o in tg.graph.ops if o.attrs["kind"] == kind]
        assert op.workspace_bytes == sub > 0
    tg = read_tflite(os.path.join(data, "unidirectional_sequence_lstm.float32.tflite"))
    sg = tg.model.subgraphs[0]
    variables = {t.name.decode() for t in sg.tensors if t.isVariable}
    assert len(variables) == 2 and not variables & set(tg.graph.tensor_index)


def test_offline_offsets_beyond_int32_are_refused():
    import dataclasses

    from tvm_memsched import zoo
    from tvm_memsched.core.errors import UnsupportedError
    from tvm_memsched.tflite.offline_plan import attach_offline_plan, plan_offline
    from tvm_memsched.tflite.reader import load_model, read_tflite

    tg = read_tflite(zoo.tflite("resnet", "int8"))
    plan = plan_offline(tg, [op.name for op in tg.graph.ops])
    k = next(i for i, o in enumerate(plan.offsets) if o >= 0)
    offsets = list(plan.offsets)
    offsets[k] = 2 ** 31 + 16
    huge = dataclasses.replace(plan, offsets=offsets, arena_bytes=2 ** 31 + 4096)
    with pytest.raises(UnsupportedError, match="int32"):
        attach_offline_plan(load_model(zoo.tflite("resnet", "int8")), huge)
