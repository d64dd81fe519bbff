"""Coral Edge TPU pipelines: cost model, exact segmentation (DP, CP-SAT), segment files, LiteRT equality."""

import itertools
import json
import os
import random
from functools import lru_cache

import numpy as np
import pytest

from tvm_memsched import zoo
from tvm_memsched.app.cli import main
from tvm_memsched.core import Graph, Op, coral_dag, random_dag
from tvm_memsched.core.errors import MemschedError
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.coral import (PS_PER_MS, EdgeTpuCostModel, StageCosts, coral_export, dp_segment, evaluate,
                                       run_segments, segment, stage_io, window_dp)
from tvm_memsched.tflite.reader import load_model, read_tflite
from tvm_memsched.tflite.verify import compare_litert, litert_interpreter, random_inputs

BO, OP = tfl.BuiltinOperator, tfl.BuiltinOptions
# A cost model where every term matters on small graphs: slow compute, tiny SRAM, slow link.
TOY = EdgeTpuCostModel(peak_tops=2e-6, utilization=0.5, sram_bytes=40, host_bandwidth=4e6, link_bandwidth=2e6)


@lru_cache(maxsize=None)
def zoo_buf(name, dtype):
    return zoo.tflite(name, dtype)


def costed(g: Graph, seed: int) -> Graph:
    """``g`` with random MACs and parameter buffers (some shared between ops)."""
    rng = random.Random(seed)
    shared = [(1000 + i, rng.randint(8, 40)) for i in range(3)]
    ops = []
    for op in g.ops:
        params = {b: n for b, n in rng.sample(shared, rng.randint(0, 2))}
        if rng.random() < 0.5:
            params[op.name] = rng.randint(4, 30)
        attrs = {"macs": rng.choice([0, rng.randint(1, 50)]), "elements": rng.randint(1, 10),
                 "params": tuple(sorted(params.items(), key=str)), "param_bytes": sum(params.values())}
        ops.append(Op(op.name, op.inputs, op.outputs, op.workspace_bytes, attrs))
    return Graph(g.tensors, ops, g.inputs, g.outputs, name=g.name)


def brute_force_cuts(g, order, k, cm):
    n = len(order)
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0,) + cuts + (n,)
        stages = [order[b[i]:b[i + 1]] for i in range(k)]
        t = max(f.time_ps for f in evaluate(g, stages, cm))
        best = t if best is None else min(best, t)
    return best


def brute_force_free(g, k, cm):
    """Best bottleneck over all monotone stage assignments (= all topological orders and cuts)."""
    n = g.num_ops
    best = None
    for assign in itertools.product(range(k), repeat=n):
        if any(assign[p] > assign[v] for v in range(n) for p in g.preds[v]) or len(set(assign)) < k:
            continue
        stages = [[v for v in range(n) if assign[v] == s] for s in range(k)]
        t = max(f.time_ps for f in evaluate(g, stages, cm))
        best = t if best is None else min(best, t)
    return best


# ------------------------------------------------------------------ solvers
@pytest.mark.parametrize("seed", range(12))
def test_dp_is_optimal_over_cut_positions(seed):
    g = costed(random_dag(9 + seed % 4, seed=seed), seed)
    order = list(g.topo)
    for k in (2, 3, 4):
        s = segment(g, k, order=order, cost_model=TOY)
        assert s.optimal and s.method == "dp"
        assert round(s.bottleneck_ms * 1e9) == brute_force_cuts(g, order, k, TOY)
        # stages are contiguous in the given order and their evaluation matches the solver
        assert s.order == [g.ops[v].name for v in order]
        assert max(f.time_ps for f in evaluate(g, s.stages, TOY)) == round(s.bottleneck_ms * 1e9)


@pytest.mark.parametrize("seed", range(8))
def test_cpsat_free_order_never_worse_and_optimal_on_small_graphs(seed):
    g = costed(random_dag(7, seed=100 + seed), seed)
    for k in (2, 3):
        fixed = segment(g, k, cost_model=TOY)
        free = segment(g, k, free_order=True, cost_model=TOY, time_limit=20)
        assert free.bottleneck_ms <= fixed.bottleneck_ms
        assert free.optimal and free.lower_bound_ms == free.bottleneck_ms
        assert round(free.bottleneck_ms * 1e9) == brute_force_free(g, k, TOY)
        g.resolve_order(free.order)               # a valid schedule, stage by stage
        labels = free.labels()
        assert all(labels[g.ops[p].name] <= labels[op.name] for v, op in enumerate(g.ops) for p in g.preds[v])


@pytest.mark.parametrize("n,seed,k", [(30, 3, 5), (30, 19, 5), (40, 3, 4), (40, 6, 3)])
def test_cpsat_stopped_early_reports_the_true_bottleneck(n, seed, k):
    """Stopped before optimality, CP-SAT's objective may exceed the true slowest stage (its indicator
    variables are only bounded from below); these instances used to fail the internal consistency check."""
    g = coral_dag(n, seed)
    s = segment(g, k, free_order=True, deterministic_time=0.05, learned_start=False)
    assert not s.optimal and s.lower_bound_ms <= s.bottleneck_ms
    assert max(f.time_ps for f in evaluate(g, s.stages)) == round(s.bottleneck_ms * PS_PER_MS)
    assert s.bottleneck_ms <= segment(g, k).bottleneck_ms


@pytest.mark.parametrize("seed", range(6))
def test_window_dp_is_exact_within_its_windows(seed):
    g = costed(random_dag(10, seed=200 + seed), seed)
    costs = StageCosts(g, TOY)
    order = list(g.topo)
    rng = random.Random(seed)
    for k in (2, 3, 4):
        full_cuts, full = dp_segment(costs, order, k)
        assert window_dp(costs, order, full_cuts, 1)[1] == full
        assert window_dp(costs, order, sorted(rng.sample(range(1, 10), k - 1)), 10)[1] == full
        cuts = sorted(rng.sample(range(1, 10), k - 1))
        wcuts, w = window_dp(costs, order, cuts, 1)
        # the optimum over every cut vector within one position of ``cuts`` (brute force)
        best = None
        for c in itertools.product(*[range(x - 1, x + 2) for x in cuts]):
            if list(c) == sorted(set(c)) and 0 < c[0] and c[-1] < 10:
                st = [order[a:b] for a, b in zip((0,) + c, c + (10,))]
                t = max(f.time_ps for f in evaluate(g, st, TOY))
                best = t if best is None else min(best, t)
        assert w == best and all(abs(a - b) <= 1 for a, b in zip(wcuts, cuts))


def test_cost_model_terms():
    cm = EdgeTpuCostModel()
    assert cm.macs_per_second == 4e12 / 2 * 0.15 and cm.link_ps_per_byte == 3125
    g = costed(random_dag(10, seed=5), 5)
    one = evaluate(g, [list(range(g.num_ops))], TOY)[0]
    assert one.stream_ms > 0 and one.compute_ms > 0 and one.transfer_ms > 0
    assert abs(one.time_ms - (one.compute_ms + one.stream_ms + one.transfer_ms)) < 1e-9
    # parameters within the SRAM are free; shared buffers are counted once per stage
    big = EdgeTpuCostModel(sram_bytes=10 ** 9)
    assert evaluate(g, [list(range(g.num_ops))], big)[0].stream_ms == 0
    assert one.param_bytes == sum(n for _, n in {k: n for op in g.ops for k, n in op.attrs["params"]}.items())
    with pytest.raises(MemschedError):
        EdgeTpuCostModel(utilization=0)
    with pytest.raises(MemschedError):
        segment(g, g.num_ops + 1)
    with pytest.raises(MemschedError):
        segment(g, 0)


def test_segment_is_pure_and_works_on_zoo_graphs():
    g = zoo.graph("nasnet_a_cifar_tiny", "int8")          # no files involved
    a = segment(g, 4, free_order=True, time_limit=20)
    b = segment(g, 4, free_order=True, time_limit=20)
    assert a.stages == b.stages and a.bottleneck_ms == b.bottleneck_ms
    fixed = segment(g, 4)
    assert a.bottleneck_ms <= fixed.bottleneck_ms and len(a.labels()) == g.num_ops
    assert a.to_dict()["cost_model"]["sram_bytes"] == 8 * 2 ** 20
    # a large model whose parameters exceed one Edge TPU's SRAM: pipelining pays off
    big = zoo.graph("hrnet_w18_small_v1", "int8")
    one = segment(big, 1)
    four = segment(big, 4)
    assert one.figures[0].stream_ms > 0 and all(f.stream_ms == 0 for f in four.figures)
    assert one.bottleneck_ms > 4 * four.bottleneck_ms


# ------------------------------------------------------------ segment files
def check_pipeline_contract(man, tg, out_dir):
    """What Coral's PipelinedModelRunner needs: model inputs first, model outputs last, every
    intermediate output consumed later, every input produced earlier; names unique and kept."""
    segs = man["segments"]
    model_in = [tg.unique_names[int(i)] for i in tg.model.subgraphs[0].inputs]
    model_out = [tg.unique_names[int(i)] for i in tg.model.subgraphs[0].outputs]
    seen = set(model_in)
    for k, s in enumerate(segs):
        it = litert_interpreter(open(os.path.join(out_dir, s["file"]), "rb").read())
        ins = [d["name"] for d in it.get_input_details()]
        outs = [d["name"] for d in it.get_output_details()]
        assert ins == [x["name"] for x in s["inputs"]] and outs == [x["name"] for x in s["outputs"]]
        assert set(ins) <= seen
        if k == 0:
            assert ins[:len(model_in)] == model_in
        if k < len(segs) - 1:
            later = {x["name"] for t in segs[k + 1:] for x in t["inputs"]}
            assert set(outs) <= later
        else:
            assert outs == model_out
        seen |= set(outs)
        names = [t.name for t in load_model(open(os.path.join(out_dir, s["file"]), "rb").read()).subgraphs[0].tensors]
        assert len(set(names)) == len(names)


@pytest.mark.parametrize("name,dtype,k", [("swiftnet_like", "int8", 3), ("nasnet_a_cifar_tiny", "int8", 4),
                                          ("darts_v2_cifar_tiny", "float32", 3), ("resnet", "float32", 4)])
def test_segments_chain_bit_identical(name, dtype, k, tmp_path):
    buf = zoo_buf(name, dtype)
    tg = read_tflite(buf, name=name)
    man, seg = coral_export(tg, k, str(tmp_path), schedule_time_limit=1, time_limit=20)
    assert man["validation"]["identical"], man["validation"]
    assert len(man["segments"]) == k == seg.k and json.loads((tmp_path / "manifest.json").read_text()) == man
    assert man["predicted"]["bottleneck_ms"] == round(max(man["predicted"]["stage_ms"]), 6)
    assert sum(s["ops"] for s in man["segments"]) == tg.graph.num_ops
    check_pipeline_contract(man, tg, str(tmp_path))
    if dtype == "int8":       # quantized segments stay quantized: int8 in and out, Edge TPU compilable
        assert man["edgetpu_compatible"] and len(man["edgetpu_compiler"]) == k
        for s in man["segments"]:
            for t in s["inputs"] + s["outputs"]:
                assert t["dtype"] == "int8" and "quantization" in t
    else:
        assert not man["edgetpu_compatible"]
    # fixed order never beats the free order
    fixed = segment(tg.graph, k, order=seg.order)
    assert seg.bottleneck_ms <= fixed.bottleneck_ms


def passthrough_model():
    """x -> a = RELU(x) (a model output, early) -> b = ADD(a, x) -> c = RELU(b) (output); x read late."""
    mb = ModelBuilder("passthrough")
    x, a, b, c = (mb.tensor(n, [1, 4]) for n in ("x", "a", "b", "c"))
    mb.op(BO.RELU, [x], [a])
    mb.op(BO.ADD, [a, x], [b], OP.AddOptions, tfl.AddOptionsT())
    mb.op(BO.RELU, [b], [c])
    return mb.finish([x], [a, c])


def test_early_model_output_and_late_input(tmp_path):
    buf = passthrough_model()
    tg = read_tflite(buf)
    g = tg.graph
    man, seg = coral_export(tg, 3, str(tmp_path))
    assert man["validation"]["identical"] and seg.stages == [["a"], ["b"], ["c"]]
    ins, outs = stage_io(g, [0, 1, 2], 3)
    names = lambda ts: [g.tensors[t].name for t in ts]  # noqa: E731
    assert [names(s) for s in ins] == [["x"], ["x", "a"], ["a", "b"]]
    assert [names(s) for s in outs] == [["a"], ["a", "b"], ["a", "c"]]
    check_pipeline_contract(man, tg, str(tmp_path))
    out = run_segments([(tmp_path / s["file"]).read_bytes() for s in man["segments"]], {"x": -np.ones((1, 4),
                                                                                                    np.float32)})
    assert list(out) == ["a", "c"] and np.array_equal(out["c"], np.zeros((1, 4), np.float32))
    assert compare_litert(buf, None, run_b=lambda f: run_segments(
        [(tmp_path / s["file"]).read_bytes() for s in man["segments"]], f)).identical
    assert random_inputs(buf)["x"].dtype == np.float32


# --------------------------------------------------------------------- CLI
def test_cli_coral(tmp_path, capsys):
    src = tmp_path / "m.tflite"
    src.write_bytes(zoo_buf("swiftnet_like", "int8"))
    out = tmp_path / "segs"
    rc = main(["coral", str(src), "--stages", "3", "--out", str(out), "--time-limit", "10", "-q"])
    text = capsys.readouterr().out
    assert rc == 0 and "bit-identical" in text and "edgetpu_compiler -s -o edgetpu m_seg0.tflite" in text
    assert sorted(os.listdir(out)) == ["m_seg0.tflite", "m_seg1.tflite", "m_seg2.tflite", "manifest.json"]
    man = json.loads((out / "manifest.json").read_text())
    assert man["source"] == str(src) and man["solver"]["free_order"]
    rc = main(["coral", "zoo:resnet", "-k", "2", "-o", str(tmp_path / "r"), "--fixed-order", "--sram-mib", "0.01",
               "--no-verify", "-q"])
    text = capsys.readouterr().out
    assert rc == 0 and "not a full-integer model" in text
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["solver"]["method"] == "dp" and man["cost_model"]["sram_bytes"] == int(0.01 * 2 ** 20)
    assert any(s["stream_ms"] > 0 for s in man["segments"]) and "validation" not in man
    # bad input: one-line errors, exit code 2
    for argv in (["coral", str(src), "-k", "0", "-o", str(tmp_path / "x")],
                 ["coral", str(src), "-k", "1000", "-o", str(tmp_path / "x")]):
        assert main(argv) == 2
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(src.read_bytes()[:1000])
    assert main(["coral", str(bad), "-k", "2", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("tvm-memsched: error:") for e in err)
