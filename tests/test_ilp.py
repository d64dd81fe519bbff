"""ILP scheduler, region fusion and the min-cut lower bound."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import brute_force_optimum, chainify, dags, stacked_blocks

from tvm_memsched.core import MemschedError, cell_network, random_dag, simulate
from tvm_memsched.core.bounds import cut_lower_bound, lower_bound
from tvm_memsched.schedulers import schedule
from tvm_memsched.schedulers.fusion import chain_segments
from tvm_memsched.schedulers.regions import fuse_regions
from tvm_memsched.schedulers.ilp import ilp_atoms, solve_ilp
from tvm_memsched.schedulers.search import Problem, best_first


@settings(max_examples=40, deadline=None)
@given(dags(min_ops=1, max_ops=10))
def test_ilp_equals_brute_force(g):
    r = schedule(g, "ilp", time_limit=60)
    assert r.optimal
    assert r.peak_bytes == brute_force_optimum(g) == simulate(g, r.order).peak


@pytest.mark.parametrize("seed", range(10))
def test_ilp_equals_brute_force_up_to_16_ops(seed):
    rng = random.Random(seed)
    g = random_dag(rng.randint(13, 16), seed=100 + seed, max_inputs=2, locality=5)
    opt = brute_force_optimum(g)
    for fuse in (True, False):
        r = schedule(g, "ilp", fuse=fuse, time_limit=120)
        assert r.optimal and r.peak_bytes == opt


@settings(max_examples=120, deadline=None)
@given(dags(min_ops=1, max_ops=10), st.integers(0, 10_000), st.booleans())
def test_ilp_objective_equals_simulated_peak(g, seed, chains):
    """At the optimum, the solver's objective is the simulated peak of the order it returns,
    with unread outputs, unread and pinned inputs, workspace and fused atoms."""
    if chains:
        g = chainify(g, seed)
    res = solve_ilp(g, ilp_atoms(g), time_limit=60)
    assert res.optimal
    assert res.bound == res.peak == simulate(g, [g.ops[v].name for v in res.order]).peak
    if g.num_ops <= 12:
        assert res.peak == brute_force_optimum(g)


@settings(max_examples=60, deadline=None)
@given(dags(min_ops=1, max_ops=10), st.integers(0, 10_000))
def test_fused_and_unfused_optimum_equal(g, seed):
    g = chainify(g, seed)
    fused = schedule(g, "ilp", time_limit=60)
    unfused = schedule(g, "ilp", fuse=False, time_limit=60)
    assert fused.optimal and unfused.optimal and fused.peak_bytes == unfused.peak_bytes


@pytest.mark.parametrize("seed", range(40))
def test_region_fusion_keeps_the_optimum(seed):
    rng = random.Random(seed)
    g = (chainify(random_dag(rng.randint(3, 9), seed=seed, max_inputs=2), seed) if seed % 2
         else stacked_blocks(rng.randint(1, 3), seed, block_ops=3))
    atoms = fuse_regions(g, chain_segments(g))
    assert sorted(v for a in atoms for v in a) == list(range(g.num_ops))
    assert best_first(Problem(g, macros=atoms)).peak == brute_force_optimum(g)


def test_region_fusion_fuses_residual_blocks():
    from tvm_memsched import zoo

    g = zoo.graph("hrnet_tiny")
    atoms = ilp_atoms(g)
    assert len(atoms) < g.num_ops
    # some fused atom holds a whole residual block (conv, conv, add)
    kinds = [[g.ops[v].attrs["kind"] for v in a] for a in atoms]
    assert any(k[-1] == "add" and k.count("conv2d") >= 2 for k in kinds)


def test_pruning_reduces_variables_and_limit_falls_back():
    g = cell_network(2, seed=3)
    r = schedule(g, "ilp", time_limit=60)
    assert r.stats["variables_after_pruning"] < r.stats["variables_before_pruning"]
    # a tiny variable limit forces memory-aware partitioning, with a message in the stats
    p = schedule(g, "ilp", time_limit=60, max_variables=200, part_size=12)
    assert "partitioned_because" in p.stats and p.stats["parts"] > 1
    assert p.peak_bytes <= schedule(g, "program").peak_bytes
    with pytest.raises(MemschedError, match="variables"):
        schedule(g, "ilp", max_variables=10, partition=False)


def test_ilp_rejects_empty_graph():
    from tvm_memsched.core import Graph

    with pytest.raises(MemschedError, match="no ops"):
        schedule(Graph([], []), "ilp")


def test_ilp_time_limit_returns_valid_unproven_order():
    g = random_dag(120, seed=4, max_inputs=3, locality=12)
    r = schedule(g, "ilp", time_limit=2)
    assert simulate(g, r.order).peak == r.peak_bytes
    assert r.peak_bytes <= schedule(g, "program").peak_bytes
    assert "gap" in r.stats


@settings(max_examples=60, deadline=None)
@given(dags(max_ops=8))
def test_cut_bound_is_valid_and_at_least_the_cheap_bound(g):
    cut = cut_lower_bound(g, list(range(g.num_ops)))
    assert lower_bound(g) <= cut <= brute_force_optimum(g)


@settings(max_examples=120, deadline=None)
@given(st.integers(2, 9), st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 20)), max_size=30))
def test_max_flow_equals_networkx(n, raw):
    import networkx as nx

    from tvm_memsched.core.maxflow import max_flow

    edges = [(u % n, v % n, c) for u, v, c in raw if u % n != v % n]
    net = nx.DiGraph()
    net.add_nodes_from(range(n))
    for u, v, c in edges:                      # parallel edges add up
        net.add_edge(u, v, capacity=net[u][v]["capacity"] + c if net.has_edge(u, v) else c)
    assert max_flow(n, edges, 0, n - 1) == nx.maximum_flow_value(net, 0, n - 1)


def test_cut_bound_proves_hrnet_head():
    from tvm_memsched import zoo

    g = zoo.graph("hrnet_w18_small_v1")
    r = schedule(g, "auto", time_limit=30)
    assert r.optimal and r.lower_bound_bytes == r.peak_bytes > lower_bound(g)


@settings(max_examples=150, deadline=None)
@given(dags(min_ops=1, max_ops=9, max_inputs=2), st.integers(0, 10_000))
def test_region_fusion_keeps_the_optimum_on_random_graphs(g, seed):
    g = chainify(g, seed)
    if g.num_ops > 14:
        return
    atoms = fuse_regions(g, chain_segments(g))
    assert best_first(Problem(g, macros=atoms)).peak == brute_force_optimum(g)
