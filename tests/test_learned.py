"""The learned (RESPECT-style) scheduler: valid orders, determinism, numpy == torch, quality, weights."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import chainify, dags

from tvm_memsched.core import Graph, MemschedError, Op, cell_network, layered_dag, random_dag, simulate
from tvm_memsched.core.simulate import footprints
from tvm_memsched.schedulers import schedule
from tvm_memsched.schedulers import learned as L
from tvm_memsched.schedulers.base import Deadline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check(g, r):
    sim = simulate(g, r.order)  # validates the order
    assert r.peak_bytes == sim.peak and len(r.order) == g.num_ops
    assert r.method == "learned"


# ----------------------------------------------------------------------------- weights
def test_weights_file_loads_and_is_small():
    path = L.default_weights_path()
    assert os.path.getsize(path) < 5_000_000
    m = L.load_model()
    meta = m.meta
    assert meta["feature_version"] == L.FEATURE_VERSION
    assert meta["params_sha256"] == L.params_digest(m.p)
    assert meta["static_features"] == list(L.STATIC_FEATURES)
    assert set(m.p) == set(L.param_shapes(meta["config"]))
    for name, shape in L.param_shapes(meta["config"]).items():
        assert m.p[name].shape == tuple(shape)
    tr = meta["training"]
    assert tr["seconds"]["total"] < 3600 and tr["threads"] <= 2 and tr["graphs"]["train"] > 0


def test_corrupted_weights_are_rejected(tmp_path):
    m = L.load_model()
    params = {k: v.copy() for k, v in m.p.items()}
    path = tmp_path / "w.npz"
    L.save_weights(str(path), params, m.config)
    assert L.load_model(str(path)).meta["params_sha256"] == m.meta["params_sha256"]
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["p:p_v"] = arrays["p:p_v"] + 1
    bad = tmp_path / "bad.npz"
    np.savez_compressed(bad, **arrays)
    with pytest.raises(MemschedError, match="hash mismatch"):
        L.load_model(str(bad))


# ----------------------------------------------------------------------------- validity
@settings(max_examples=40)
@given(dags(max_ops=14), st.integers(0, 1000))
def test_valid_orders_on_random_graphs(g, seed):
    g = chainify(g, seed, prob=0.3)
    for kw in ({"beam": 1}, {"beam": 1, "samples": 2, "seed": seed}, {"beam": 3}, {}):
        check(g, schedule(g, "learned", **kw))


def test_valid_orders_multi_output_workspace_unread_inputs():
    g = Graph([("x", 8), ("unused", 100), ("a", 16), ("b", 4), ("c", 32), ("dead", 64), ("y", 8)],
              [Op("A", ["x"], ["a", "dead"], workspace_bytes=50), Op("B", ["x", "a"], ["b"]),
               Op("C", ["a"], ["c"], workspace_bytes=7), Op("D", ["b", "c", "b"], ["y"])],
              inputs=["x", "unused"], outputs=["y", "a"])
    for kw in ({}, {"samples": 3}, {"beam": 4}):
        r = schedule(g, "learned", **kw)
        check(g, r)
        assert r.peak_bytes >= r.lower_bound_bytes


def test_trivial_graphs():
    empty = Graph([("x", 4)], [], inputs=["x"], outputs=["x"])
    r = schedule(empty, "learned")
    assert r.order == () and r.peak_bytes == 4
    one = Graph([("x", 4), ("y", 4)], [Op("A", ["x"], ["y"])], inputs=["x"], outputs=["y"])
    assert schedule(one, "learned", beam=2, samples=2).order == ("A",)


def test_decode_state_matches_definitions():
    """The incremental live-set features equal a from-scratch recomputation at every step."""
    rng = np.random.default_rng(0)
    for seed in range(6):
        g = chainify(random_dag(25, seed=seed, max_inputs=3), seed) if seed % 2 else layered_dag(30, seed)
        gd = L.GraphData(g)
        st_ = L.DecodeState(gd)
        order = []
        done = set()
        for _ in range(g.num_ops):
            R, dyn, glob = st_.features()
            ready = sorted(int(gd.ops[k]) for k in R)
            assert ready == sorted(v for v in range(g.num_ops) if v not in done
                                   and all(p in done for p in g.preds[v]))
            stable, transient = footprints(g, order) if order else ([], [gd.live0])
            assert st_.live == transient[-1] and st_.peak == (max(stable) if stable else 0)
            for k, row in zip(R, dyn):
                v = int(gd.ops[k])
                freed = sum(g.size[t] for t in g.op_inputs[v] if not g.pinned[t]
                            and all(c in done or c == v for c in g.consumers[t]))
                freed += sum(g.size[t] for t in g.op_outputs[v] if not g.consumers[t] and not g.pinned[t])
                assert row[5] * gd.scale == pytest.approx(freed)
                assert row[0] * gd.scale == pytest.approx(st_.live + g.output_bytes[v] + g.workspace[v])
                unlock = sum(1 for s in g.succs[v] if all(p in done or p == v for p in g.preds[s]))
                assert row[8] == pytest.approx(np.log1p(unlock))
            k = int(R[rng.integers(len(R))])
            st_.step(k)
            order.append(int(gd.ops[k]))
            done.add(int(gd.ops[k]))
        assert st_.peak == simulate(g, order).peak


# ----------------------------------------------------------------------------- determinism
def test_deterministic():
    g = layered_dag(50, seed=424242)
    for kw in ({}, {"samples": 4, "seed": 3}, {"beam": 4}):
        a, b = schedule(g, "learned", **kw), schedule(g, "learned", **kw)
        assert a.order == b.order and a.peak_bytes == b.peak_bytes


def test_numpy_inference_equals_torch_forward():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import train_learned as T

    for config in ({"d": 16, "mp_rounds": 2, "enc_lstm": True, "glimpse": True, "clip": 10.0},
                   {"d": 8, "mp_rounds": 1, "enc_lstm": False, "glimpse": False, "clip": 5.0}):
        params = L.random_params(config, seed=7)
        model = L.LearnedModel(params, config)
        items, recs_all = [], []
        graphs = [layered_dag(25, seed=1), chainify(random_dag(18, seed=2), 2), T.layered_extra(30, 5),
                  cell_network(1, seed=3, blocks=3)]
        for i, g in enumerate(graphs):
            gd = L.GraphData(g)
            rng = None if i % 2 else np.random.default_rng(i)
            _, _, _, recs = model.decode(gd, record=True, rng=rng)
            items.append(T.Item.from_records(gd, recs, dtype=np.float64))
            recs_all.append(recs)
        net = T.torch_model_class()(config, params).double()
        net.load_numpy(params)
        with torch.no_grad():
            out = net(T.collate(items, dtype=torch.float64)).numpy()
        for b, recs in enumerate(recs_all):
            for t, rec in enumerate(recs):
                lp = rec[5]
                np.testing.assert_allclose(out[b, t, :len(lp)], lp, atol=1e-9)
        # and the exported parameters round-trip
        back = net.numpy_params()
        assert all(np.allclose(back[k], params[k]) for k in params)


def test_package_works_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from tvm_memsched.core import layered_dag\n"
            "from tvm_memsched.schedulers import schedule, learned\n"
            "r = schedule(layered_dag(40, seed=1), 'learned', samples=2)\n"
            "assert len(r.order) == 40\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ----------------------------------------------------------------------------- quality
HELD_OUT = [layered_dag(n, seed=990_000 + i) for i, n in enumerate((30, 36, 42, 48, 54, 60, 40, 50))]


@pytest.fixture(scope="module")
def optima():
    out = []
    for g in HELD_OUT:
        r = schedule(g, "dp", time_limit=30)
        assert r.optimal
        out.append(r.peak_bytes)
    return out


def test_gap_on_held_out_graphs(optima):
    greedy = [schedule(g, "learned", beam=1).peak_bytes / o - 1 for g, o in zip(HELD_OUT, optima)]
    beam = [schedule(g, "learned").peak_bytes / o - 1 for g, o in zip(HELD_OUT, optima)]
    sampled = [schedule(g, "learned", beam=1, samples=8).peak_bytes / o - 1 for g, o in zip(HELD_OUT, optima)]
    baseline = [schedule(g, "greedy").peak_bytes / o - 1 for g, o in zip(HELD_OUT, optima)]
    assert min(greedy) >= 0
    assert np.mean(greedy) < 0.08, greedy
    assert np.mean(sampled) < 0.05, sampled
    assert np.mean(beam) < 0.03, beam
    assert np.mean(greedy) < np.mean(baseline)  # better than the memory-greedy heuristic


def test_sampling_and_beam_never_worse_than_greedy(optima):
    for g in HELD_OUT[:5]:
        greedy = schedule(g, "learned", beam=1).peak_bytes
        assert schedule(g, "learned", beam=1, samples=4, seed=1).peak_bytes <= greedy
        assert schedule(g, "learned", beam=4).peak_bytes <= greedy
        assert schedule(g, "learned", beam=8, samples=2).peak_bytes <= greedy


def test_fast_on_large_graphs():
    g = layered_dag(1000, seed=77)
    L.load_model()
    t = time.perf_counter()
    r = schedule(g, "learned", beam=1)
    assert time.perf_counter() - t < 5.0
    check(g, r)


def test_time_limit_bounds_sampling():
    g = layered_dag(400, seed=5)
    t = time.perf_counter()
    r = schedule(g, "learned", beam=1, samples=10_000, time_limit=0.5)
    assert time.perf_counter() - t < 5.0
    check(g, r)
    assert r.stats["decodes"] < 10_000


def test_auto_phase():
    g = layered_dag(120, seed=3)
    incumbent = list(g.topo)
    order, low = L.auto_phase(g, Deadline(5.0), incumbent, 123, None)
    assert low == 123 and g.is_topological(order)


def test_rejects_bad_options():
    g = layered_dag(10, seed=1)
    with pytest.raises(MemschedError, match="beam >= 1"):
        schedule(g, "learned", beam=0)
    with pytest.raises(MemschedError, match="samples must be >= 0"):
        schedule(g, "learned", samples=-1)


def test_auto_extra_phase_hook(monkeypatch):
    """The phase fits ``auto.EXTRA_PHASES`` (the lead wires it in auto.py)."""
    from tvm_memsched.schedulers import auto

    monkeypatch.setitem(auto.EXTRA_PHASES, "learned", L.auto_phase)
    g = layered_dag(300, seed=11)
    r = schedule(g, "auto", time_limit=3.0)
    assert g.is_topological(list(r.order)) and r.peak_bytes <= schedule(g, "greedy").peak_bytes
