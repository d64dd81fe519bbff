"""The learned Coral segmenter: decoding is valid and exact where it claims, the shipped model is near-optimal."""

import itertools
import json
import os
import random
import statistics

import numpy as np
import pytest

from tvm_memsched import zoo
from tvm_memsched.app.cli import main
from tvm_memsched.core import coral_dag, random_dag
from tvm_memsched.core.errors import MemschedError
from tvm_memsched.tflite.coral import learned as CL
from tvm_memsched.tflite.coral import PS_PER_MS, StageCosts, coral_export, evaluate, segment
from tvm_memsched.tflite.reader import read_tflite

from test_coral import TOY, brute_force_free, costed


def random_model(seed=0, hidden=16):
    cfg = {"layers": 2, "hidden": hidden}
    rng = np.random.default_rng(seed)
    p = {k: rng.normal(0, 0.5, size=s) for k, s in CL.param_shapes(cfg).items()}
    p["in_mean"], p["in_std"] = np.zeros(CL.N_IN), np.ones(CL.N_IN)
    return CL.SegmenterModel(p, cfg)


def check_valid(g, s, k):
    assert s.k == k and all(s.stages)
    assert sorted(sum(s.stages, [])) == sorted(op.name for op in g.ops)
    g.resolve_order(s.order)                       # the stages' concatenation is a valid schedule
    lab = s.labels()
    assert all(lab[g.ops[p].name] <= lab[op.name] for v, op in enumerate(g.ops) for p in g.preds[v])
    # the reported bottleneck is the reference evaluation of the reported stages
    assert max(f.time_ps for f in evaluate(g, s.stages, s.cost_model)) == round(s.bottleneck_ms * PS_PER_MS)
    assert s.lower_bound_ms <= s.bottleneck_ms


# ------------------------------------------------------------------ decoding
def brute_viterbi(logits, order, k):
    n = len(order)
    best, arg = -np.inf, None
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0,) + cuts + (n,)
        sc = 0.0
        for s in range(k):
            for q in range(b[s], b[s + 1]):
                lo = logits[order[q]]
                sc += sum(-np.logaddexp(0, -lo[j]) for j in range(s)) + \
                    sum(-np.logaddexp(0, lo[j]) for j in range(s, k - 1))
        if sc > best + 1e-9:
            best, arg = sc, list(cuts)
    return arg


@pytest.mark.parametrize("seed", range(10))
def test_viterbi_is_the_most_likely_contiguous_cut(seed):
    rng = np.random.default_rng(seed)
    n = 5 + seed % 4
    for k in (2, 3, 4):
        logits = rng.normal(0, 3, size=(n, k - 1))
        order = list(rng.permutation(n))
        assert CL.viterbi_cuts(logits, order, k) == brute_viterbi(logits, order, k)


@pytest.mark.parametrize("seed", range(5))
def test_priority_order_is_topological_and_follows_the_key(seed):
    g = random_dag(25, seed=seed)
    key = np.random.default_rng(seed).random(g.num_ops)
    order = CL.priority_order(g, key)
    g.resolve_order(order)
    # every op is the smallest-key op among those ready when it ran
    done = set()
    for v in order:
        ready = [u for u in range(g.num_ops) if u not in done and all(p in done for p in g.preds[u])]
        assert key[v] == min(key[u] for u in ready)
        done.add(v)


@pytest.mark.parametrize("seed", range(8))
def test_random_model_gives_valid_segmentations_never_below_the_optimum(seed):
    g = costed(random_dag(7, seed=300 + seed), seed)
    model = random_model(seed)
    for k in (1, 2, 3):
        s = CL.segment_learned(g, k, cost_model=TOY, model=model, samples=2, seed=seed)
        check_valid(g, s, k)
        opt = brute_force_free(g, k, TOY)
        assert round(s.bottleneck_ms * PS_PER_MS) >= opt
        assert s.optimal == (k == 1 or round(s.bottleneck_ms * PS_PER_MS) == CL.trivial_lower_bound_ps(
            StageCosts(g, TOY), k))
        assert CL.trivial_lower_bound_ps(StageCosts(g, TOY), k) <= opt
        assert s.stats["raw_bottleneck_ms"] >= s.bottleneck_ms
        raw = CL.segment_learned(g, k, cost_model=TOY, model=model, samples=0, window=0, final_dp=False,
                                 refine_moves=0)
        assert raw.bottleneck_ms == raw.stats["raw_bottleneck_ms"]
        assert raw.bottleneck_ms >= CL.segment_learned(g, k, cost_model=TOY, model=model, samples=0,
                                                       window=0).bottleneck_ms
        # with an order, never slower than that order's exact optimal cut
        order = CL.priority_order(g, -np.arange(g.num_ops))    # prefers high op ids
        wo = CL.segment_learned(g, k, cost_model=TOY, model=model, samples=0, window=0, order=order,
                                final_dp=False, refine_moves=0)
        check_valid(g, wo, k)
        assert wo.bottleneck_ms <= min(raw.bottleneck_ms, segment(g, k, order=order, cost_model=TOY).bottleneck_ms)


@pytest.mark.parametrize("seed", range(6))
def test_stage_times_and_local_search_agree_with_the_reference_evaluation(seed):
    g = costed(random_dag(12, seed=400 + seed), seed)
    costs = StageCosts(g, TOY)
    rng = random.Random(seed)
    for k in (2, 3, 4):
        # a random stage-monotone assignment with every stage non-empty: cut a random topological order
        order = CL.priority_order(g, np.array([rng.random() for _ in range(g.num_ops)]))
        cuts = sorted(rng.sample(range(1, g.num_ops), k - 1))
        so = [0] * g.num_ops
        for q, v in enumerate(order):
            so[v] = sum(q >= c for c in cuts)
        members = [[v for v in range(g.num_ops) if so[v] == s] for s in range(k)]
        ref = [f.time_ps for f in evaluate(g, members, TOY)]
        assert CL.stage_times(costs, so, members, range(k)) == dict(enumerate(ref))
        new, ps, moves = CL.local_search(costs, so, k, 50)
        stages = [[v for v in range(g.num_ops) if new[v] == s] for s in range(k)]
        assert all(stages) and all(new[p] <= new[v] for v in range(g.num_ops) for p in g.preds[v])
        assert ps == max(f.time_ps for f in evaluate(g, stages, TOY)) <= max(ref)
        assert moves > 0 or new == so


def test_window_polish_is_never_worse_and_samples_are_seeded():
    g = coral_dag(80, seed=11)
    model = random_model(1)
    a = CL.segment_learned(g, 4, model=model, samples=0, window=0)
    b = CL.segment_learned(g, 4, model=model, samples=0, window=8)
    c = CL.segment_learned(g, 4, model=model, samples=6, window=8, seed=3)
    assert a.bottleneck_ms >= b.bottleneck_ms >= c.bottleneck_ms
    assert CL.segment_learned(g, 4, model=model, samples=6, window=8, seed=3).stages == c.stages
    check_valid(g, c, 4)


def test_features_are_scale_free():
    """Scaling every MAC and byte count together changes no feature except through the cost model's constants;
    with all constants scaled too, the features are identical."""
    from tvm_memsched.core import Graph, Op
    from tvm_memsched.tflite.coral import EdgeTpuCostModel

    g = coral_dag(40, seed=5)
    f = 4
    ops = [Op(op.name, op.inputs, op.outputs, 0, {k: (v * f if k in ("macs", "param_bytes", "elements") else v)
                                                   for k, v in op.attrs.items() if k != "shape"})
           for op in g.ops]
    g2 = Graph([(t.name, t.bytes * f) for t in g.tensors], ops, g.inputs, g.outputs)
    g1 = Graph(g.tensors, [Op(op.name, op.inputs, op.outputs, 0, {k: v for k, v in op.attrs.items()
                                                                  if k != "shape"}) for op in g.ops],
               g.inputs, g.outputs)
    cm = EdgeTpuCostModel(sram_bytes=8 * 2 ** 20)
    cm2 = EdgeTpuCostModel(sram_bytes=8 * 2 ** 20 * f)
    x1, x2 = CL.segmenter_features(g1, 4, cm), CL.segmenter_features(g2, 4, cm2)
    np.testing.assert_allclose(x1, x2, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ shipped model
def test_shipped_weights_load_and_record_their_training():
    m = CL.load_segmenter()
    meta = m.meta
    assert meta["feature_version"] == CL.FEATURE_VERSION and meta["op_features"] == list(CL.OP_FEATURES)
    assert meta["training"]["train_graphs"] >= 1000
    assert os.path.getsize(CL.default_segmenter_path()) < 1_000_000


@pytest.mark.slow
def test_shipped_model_is_near_optimal_on_held_out_graphs():
    """Held-out coral_dag graphs (seeds far from training), against CP-SAT's exact free-order segmentation."""
    gaps, dps = [], []
    for i in range(10):
        g = coral_dag(40, seed=7_000_000 + i)
        for k in (2, 4):
            ex = segment(g, k, free_order=True, deterministic_time=5.0)
            s = CL.segment_learned(g, k)
            check_valid(g, s, k)
            assert s.bottleneck_ms >= ex.lower_bound_ms - 1e-9
            gaps.append(s.bottleneck_ms / ex.bottleneck_ms - 1)
            dps.append(segment(g, k).bottleneck_ms / ex.bottleneck_ms - 1)
    print(f"learned {statistics.mean(gaps):.4f}, program-order dp {statistics.mean(dps):.4f}")
    # measured with the shipped weights: learned 4.8% mean, the exact cut of the program order 14.6%
    assert statistics.mean(gaps) < 0.08, gaps
    assert statistics.mean(gaps) < 0.5 * statistics.mean(dps), (gaps, dps)


def test_bad_input_and_bad_weights(tmp_path):
    g = coral_dag(10, seed=1)
    for k in (0, 11, True, 2.0):
        with pytest.raises(MemschedError, match="stages"):
            CL.segment_learned(g, k)
    with pytest.raises(MemschedError, match="window"):
        CL.segment_learned(g, 2, window=-1)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(MemschedError, match="not a Coral segmenter weights file"):
        CL.load_segmenter(str(bad))
    with pytest.raises(MemschedError, match="not found"):
        CL.load_segmenter(str(tmp_path / "missing.npz"))
    m = CL.load_segmenter()
    p = dict(m.p)
    p["bout"] = np.asarray(p["bout"]) + 1
    path = tmp_path / "tampered.npz"
    CL.save_segmenter(str(path), p, m.config)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta_json"]))
    meta["params_sha256"] = "0" * 64
    arrays["meta_json"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)
    with pytest.raises(MemschedError, match="hash mismatch"):
        CL.load_segmenter(str(path))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_exact_segmentation_starts_from_the_learned_one(seed):
    """CP-SAT (stopped early here) is never worse than the learned segmenter or the DP, and says where it
    started; without the learned start it is never worse than the DP."""
    g = coral_dag(120, seed=8_000_000 + seed)
    for k in (4, 6):
        learned = CL.segment_learned(g, k)
        dp = segment(g, k)
        s = segment(g, k, free_order=True, deterministic_time=0.2)
        check_valid(g, s, k)
        assert s.bottleneck_ms <= min(learned.bottleneck_ms, dp.bottleneck_ms)
        assert s.stats["start"] == ("learned" if learned.bottleneck_ms < dp.bottleneck_ms else "dp")
        assert s.stats["learned_ms"] == learned.bottleneck_ms
        plain = segment(g, k, free_order=True, deterministic_time=0.2, learned_start=False)
        assert plain.stats["start"] == "dp" and "learned_ms" not in plain.stats
        assert plain.bottleneck_ms <= dp.bottleneck_ms


# ------------------------------------------------------------------ export
def test_learned_segments_chain_bit_identical(tmp_path):
    tg = read_tflite(zoo.tflite("swiftnet_like", "int8"))
    man, seg = coral_export(tg, 3, str(tmp_path), segmenter="learned")
    assert seg.method == "learned" and man["solver"]["method"] == "learned"
    assert man["validation"]["identical"]
    check_valid(tg.graph, seg, 3)
    with pytest.raises(MemschedError, match="segmenter"):
        coral_export(tg, 3, str(tmp_path / "x"), segmenter="magic")


@pytest.mark.slow
def test_cli_coral_learned(tmp_path, capsys):
    rc = main(["coral", "zoo:hrnet_w18_small_v1:int8", "-k", "4", "-o", str(tmp_path / "h"), "--segmenter",
               "learned", "--no-verify", "-q"])
    text = capsys.readouterr().out
    assert rc == 0 and "learned segmenter (best candidate: " in text and "not proven optimal" in text
    man = json.loads((tmp_path / "h" / "manifest.json").read_text())
    assert man["solver"]["method"] == "learned" and len(man["segments"]) == 4
    with pytest.raises(SystemExit) as e:           # argparse: usage message, exit code 2
        main(["coral", "zoo:resnet", "-k", "2", "-o", str(tmp_path / "r"), "--segmenter", "best"])
    assert e.value.code == 2 and "invalid choice: 'best'" in capsys.readouterr().err
