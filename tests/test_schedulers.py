"""Schedulers: validity, exactness against brute force, fusion / divide-and-conquer optimality."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import all_topological_orders, brute_force_optimum, chainify, dags, stacked_blocks

from tvm_memsched.core import cell_network, example_graph, random_dag, rpo_order, simulate
from tvm_memsched.schedulers import available_methods, schedule
from tvm_memsched.schedulers.dp import split_points
from tvm_memsched.schedulers.fusion import chain_segments, chains, fusable
from tvm_memsched.schedulers.search import Problem, best_first, level_dp
from tvm_memsched.schedulers.window import improve_windows

FAST_METHODS = [m for m in available_methods() if m not in ("ilp", "learned")]


def check_result(g, r):
    sim = simulate(g, r.order)  # validates the order
    assert r.peak_bytes == sim.peak
    assert r.peak_bytes >= r.lower_bound_bytes
    assert len(r.order) == g.num_ops
    if r.optimal and g.num_ops <= 12:
        assert r.peak_bytes == brute_force_optimum(g)


@given(dags(max_ops=10))
def test_every_method_returns_a_valid_order(g):
    for m in FAST_METHODS:
        check_result(g, schedule(g, m))


@given(dags(max_ops=12))
def test_dp_and_auto_reach_brute_force_optimum(g):
    opt = brute_force_optimum(g)
    for m in ("dp", "auto"):
        r = schedule(g, m)
        assert r.peak_bytes == opt and r.optimal, (m, r.peak_bytes, opt)


@pytest.mark.parametrize("seed", range(12))
def test_dp_optimal_on_larger_random_dags(seed):
    rng = random.Random(seed)
    g = chainify(random_dag(rng.randint(10, 13), seed=seed, max_inputs=3), seed, prob=0.3, max_len=3)
    opt = brute_force_optimum(g)
    for m in ("dp", "auto"):
        r = schedule(g, m)
        assert r.peak_bytes == opt and r.optimal


def test_brute_force_agrees_with_exhaustive_enumeration():
    for seed in range(30):
        g = random_dag(random.Random(seed).randint(1, 7), seed=seed)
        best = min(simulate(g, o).peak for o in all_topological_orders(g))
        assert brute_force_optimum(g) == best


@given(dags(max_ops=12))
def test_hmcos_never_worse_than_rpo(g):
    assert schedule(g, "hmcos").peak_bytes <= schedule(g, "rpo").peak_bytes


def test_hmcos_on_cells_builds_groups_and_improves():
    g = cell_network(4, seed=0)
    r = schedule(g, "hmcos")
    assert r.stats["groups"] >= 4 and len(r.stats["iterations"]) >= 2
    assert r.peak_bytes < r.stats["rpo_peak"]
    check_result(g, r)


@given(dags(max_ops=10), st.integers(0, 10_000))
def test_chain_fusion_preserves_optimum(g, seed):
    g = chainify(g, seed)
    fused = schedule(g, "dp")
    unfused = schedule(g, "dp", fuse=False)
    assert fused.peak_bytes == unfused.peak_bytes
    assert fused.optimal and unfused.optimal


@given(dags(max_ops=10), st.integers(0, 10_000))
def test_chain_segments_partition_and_satisfy_conditions(g, seed):
    g = chainify(g, seed)
    segs = chain_segments(g)
    assert sorted(v for s in segs for v in s) == list(range(g.num_ops))
    for s in segs:
        assert fusable(g, list(s))
    for c in chains(g):
        for u, v in zip(c, c[1:]):
            assert g.succs[u] == (v,) and g.preds[v] == (u,)


@pytest.mark.parametrize("seed", range(25))
def test_divide_and_conquer_equals_full_dp(seed):
    g = stacked_blocks(random.Random(seed).randint(2, 4), seed, block_ops=4)
    assert split_points(g)
    split = schedule(g, "dp")
    full = schedule(g, "dp", divide=False)
    assert split.peak_bytes == full.peak_bytes
    assert split.optimal and full.optimal
    assert split.stats["parts"] > 1
    if g.num_ops <= 14:
        assert split.peak_bytes == brute_force_optimum(g)


@given(dags(max_ops=8))
@settings(max_examples=40)
def test_split_points_are_forced_in_every_order(g):
    cuts = split_points(g)
    orders = list(all_topological_orders(g))[:400]
    for k in cuts:
        prefix = set(g.topo[:k])
        for o in orders:
            assert set(o[:k]) == prefix


@pytest.mark.parametrize("strategy", ["serenity", "adaptive", "best-first"])
def test_budget_strategies_agree(strategy):
    for seed in range(20):
        g = chainify(random_dag(10, seed=seed), seed)
        r = schedule(g, "dp", strategy=strategy)
        assert r.optimal and r.peak_bytes == brute_force_optimum(g)


def test_level_dp_flags():
    g = chainify(random_dag(9, seed=4), 4)
    opt = brute_force_optimum(g)
    prob = Problem(g)
    assert level_dp(prob, opt - 1)[0] == "no solution"
    flag, order, peak, _ = level_dp(prob, opt)
    assert flag == "solution" and peak == opt and simulate(g, [g.ops[v].name for v in order]).peak == opt
    assert level_dp(prob, 10 ** 9, step_limit=1)[0] == "timeout"


def test_limits_return_best_valid_order_not_proven():
    g = cell_network(3, seed=1, blocks=6)
    r = schedule(g, "dp", state_limit=10, divide=False)
    check_result(g, r)
    assert r.peak_bytes <= schedule(g, "program").peak_bytes
    assert not r.optimal or r.peak_bytes == r.stats["proven_lower_bound"]
    res = best_first(Problem(g), state_limit=1)
    assert res.status == "state-limit" and not res.proven and res.lower <= res.peak


def test_time_limit_is_respected():
    import time

    g = random_dag(300, seed=1, max_inputs=4)
    t = time.perf_counter()
    r = schedule(g, "auto", time_limit=1.0)
    assert time.perf_counter() - t < 10
    check_result(g, r)
    assert r.peak_bytes <= schedule(g, "program").peak_bytes


@given(dags(max_ops=12))
def test_auto_never_worse_than_program(g):
    assert schedule(g, "auto", time_limit=2).peak_bytes <= schedule(g, "program").peak_bytes


def test_window_improvement_keeps_order_valid_and_never_worse():
    for seed in range(5):
        g = cell_network(2, seed=seed)
        order = rpo_order(g)
        new = improve_windows(g, order, time_limit=5, width=12)
        assert sorted(new) == sorted(order)
        assert simulate(g, new).peak <= simulate(g, order).peak


def test_example_graph_numbers():
    g = example_graph()
    r = schedule(g, "auto")
    assert r.optimal
    assert r.peak_bytes == schedule(g, "dp").peak_bytes < schedule(g, "program").peak_bytes


def test_unknown_method():
    from tvm_memsched.core import MemschedError

    with pytest.raises(MemschedError, match="unknown scheduling method 'nope'"):
        schedule(example_graph(), "nope")


@pytest.mark.parametrize("seed", range(4))
def test_dp_and_auto_optimal_on_20_op_graphs(seed):
    """Up to ~20 ops with branches, multi-consumer and multi-output tensors and workspace."""
    g = random_dag(17 + seed, seed=300 + seed, max_inputs=3, locality=4, multi_output_prob=0.2)
    opt = brute_force_optimum(g)
    for m in ("dp", "auto"):
        r = schedule(g, m, time_limit=60)
        assert r.peak_bytes == opt and r.optimal
    assert schedule(g, "hmcos").peak_bytes <= schedule(g, "rpo").peak_bytes


@pytest.mark.slow
def test_deterministic_budgets_give_identical_orders():
    from tvm_memsched.schedulers.base import Deadline

    g = cell_network(4, seed=5, blocks=6)
    for method in ("auto", "dp", "hmcos"):
        a = schedule(g, method, time_limit=0.5, deterministic=True)
        b = schedule(g, method, time_limit=0.5, deterministic=True)
        assert a.order == b.order and a.peak_bytes == b.peak_bytes
    # child budgets charge their parents; a work budget never looks at the clock
    d = Deadline.deterministic(1.0)
    assert d.is_deterministic and d.remaining() is None
    child = d.share(0.5)
    while not child.expired():
        pass
    assert d.remaining_work() <= Deadline.WORK_PER_SECOND / 2 + 1
    assert d.sub(0.1).work == int(0.1 * Deadline.WORK_PER_SECOND)


@settings(max_examples=150, deadline=None)
@given(dags(max_ops=14, allow_inplace=True), st.booleans(), st.integers(0, 6))
def test_greedy_heap_picks_what_the_scan_of_every_ready_macro_picks(g, fuse, head):
    """The greedy completion keeps footprints in a heap and recomputes only the macros whose inputs the
    last step read: from any partial schedule it must choose exactly as a scan of every ready macro."""
    p = Problem(g, fuse=fuse)
    done, live, ready, peak = p.start, p.t0, p.ready0, 0
    for _ in range(head):            # a partial schedule to complete from
        if not ready:
            break
        i = (ready & -ready).bit_length() - 1
        done, live, high = p.run_macro(done, live, i)
        peak = max(peak, high)
        ready = p.newly_ready(done, ready, i)
    assert p.greedy_completion(done, live, ready, peak) == p._greedy_scan(done, live, ready, peak, None, None)
