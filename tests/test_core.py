"""Core graph model, simulator, lower bounds, baseline orders and JSON interchange."""

import json

import networkx as nx
import pytest
from hypothesis import given
from strategies import all_topological_orders, brute_force_optimum, dags, graph_and_order, reference_footprints

from tvm_memsched.core import (Graph, GraphError, Op, OrderError, example_graph, from_networkx, graph_from_dict,
                               graph_to_dict, kahn_order, lower_bound, lower_bound_details, program_order,
                               rpo_order, simulate, to_networkx)
from tvm_memsched.core.simulate import lifetimes


def diamond():
    return Graph([("x", 4), ("a", 8), ("b", 8), ("y", 4)],
                 [Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
                 inputs=["x"], outputs=["y"], name="diamond")


# ----------------------------------------------------------------- semantics
def test_semantics_by_hand():
    g = Graph([("x", 10), ("u", 7), ("a", 5), ("b", 3), ("y", 2), ("d", 100)],
              [Op("A", ["x"], ["a"], workspace_bytes=4),
               Op("B", ["a", "x"], ["b", "d"]),       # d: an output nobody reads
               Op("C", ["b", "a"], ["y"])],
              inputs=["x", "u"], outputs=["y", "a"])
    r = simulate(g, ["A", "B", "C"])
    # x and the unread input u resident from the start
    assert r.transient[0] == 17
    # A: x, u, a + workspace 4
    assert r.stable[0] == 10 + 7 + 5 + 4
    # after A: nothing freed (x still read by B)
    assert r.transient[1] == 22
    # B: x, u, a, b, d ; afterwards x (last read) and d (unread) are freed
    assert r.stable[1] == 10 + 7 + 5 + 3 + 100
    assert r.transient[2] == 7 + 5 + 3
    # C: u, a, b, y ; a is a graph output so stays; b freed
    assert r.stable[2] == 7 + 5 + 3 + 2
    assert r.transient[3] == 7 + 5 + 2
    assert r.peak == 125 and r.peak_op == "B"
    assert set(r.live_at_peak) == {"x", "u", "a", "b", "d"}
    assert r.intervals["u"] == (0, 2) and r.intervals["d"] == (1, 1)


def test_empty_graph_and_ops_without_outputs():
    g = Graph([("x", 5)], [], inputs=["x"], outputs=[])
    r = simulate(g, [])
    assert r.peak == 5 and r.peak_step == -1 and r.stable == ()
    assert lower_bound(g) == 5
    g2 = Graph([("x", 5)], [Op("sink", ["x"], [], workspace_bytes=3)], inputs=["x"])
    r2 = simulate(g2, ["sink"])
    assert r2.stable == (8,) and r2.transient == (5, 0)
    assert Graph([], []).num_ops == 0 and simulate(Graph([], []), []).peak == 0


def test_duplicate_reads_count_once():
    g = Graph([("x", 4), ("y", 4)], [Op("add", ["x", "x"], ["y"])], inputs=["x"], outputs=["y"])
    r = simulate(g, ["add"])
    assert r.stable == (8,) and r.transient == (4, 4)


@given(graph_and_order())
def test_simulate_matches_reference(go):
    g, order = go
    r = simulate(g, order)
    stable, transient, peak = reference_footprints(g, order)
    assert list(r.stable) == stable
    assert list(r.transient) == transient
    assert r.peak == peak
    if order:
        k = r.peak_step
        assert r.stable[k] == peak
        ws = g.op(order[k]).workspace_bytes
        assert sum(g.tensor_bytes(t) for t in r.live_at_peak) + ws == peak


@given(graph_and_order())
def test_lifetimes_consistent_with_footprints(go):
    g, order = go
    ids = g.resolve_order(order)
    spans = lifetimes(g, ids)
    for i, v in enumerate(ids):
        live = sum(g.size[t] for t in range(g.num_tensors) if spans[t][0] <= i <= spans[t][1])
        assert live + g.workspace[v] == simulate(g, order).stable[i]


# -------------------------------------------------------------------- orders
@given(dags(max_ops=15))
def test_baseline_orders_are_topological(g):
    for fn in (program_order, kahn_order, rpo_order):
        order = fn(g)
        assert sorted(order) == list(range(g.num_ops))
        pos = {v: i for i, v in enumerate(order)}
        for v in range(g.num_ops):
            assert all(pos[p] < pos[v] for p in g.preds[v])


def test_program_order_is_list_order_when_topological():
    g = example_graph()
    assert program_order(g) == list(range(g.num_ops))


def test_kahn_and_rpo_small():
    g = Graph([("x", 1), ("a", 1), ("b", 1), ("c", 1), ("y", 1)],
              [Op("A", ["x"], ["a"]), Op("B", ["a"], ["b"]), Op("C", ["x"], ["c"]), Op("D", ["b", "c"], ["y"])],
              inputs=["x"], outputs=["y"])
    assert g.op_names(kahn_order(g)) == ["A", "C", "B", "D"]
    assert g.op_names(rpo_order(g)) == ["C", "A", "B", "D"]


# -------------------------------------------------------------- lower bound
@given(graph_and_order())
def test_peak_at_least_lower_bound(go):
    g, order = go
    lb = lower_bound_details(g)
    assert simulate(g, order).peak >= lb.bytes >= lb.op_bound
    # the classic bound: every op's inputs + outputs + workspace
    for v in range(g.num_ops):
        assert lb.bytes >= sum(g.size[t] for t in g.op_inputs[v]) + g.output_bytes[v] + g.workspace[v]
    # and every pinned tensor is resident at the end
    assert lb.bytes >= sum(g.size[t] for t in range(g.num_tensors) if g.pinned[t])


@given(dags(max_ops=7))
def test_lower_bound_never_exceeds_brute_force(g):
    assert lower_bound(g) <= brute_force_optimum(g)


def test_brute_force_helper_agrees_with_enumeration():
    g = diamond()
    best = min(simulate(g, o).peak for o in all_topological_orders(g))
    assert brute_force_optimum(g) == best == 20


# ----------------------------------------------------------------- bad input
def test_cycle_names_ops():
    with pytest.raises(GraphError, match=r"cycle: .*B -> C -> D -> B|cycle: .*C -> D -> B -> C|D -> B -> C -> D"):
        Graph([("x", 1), ("b", 1), ("c", 1), ("d", 1)],
              [Op("A", ["x"], []), Op("B", ["x", "d"], ["b"]), Op("C", ["b"], ["c"]), Op("D", ["c"], ["d"])],
              inputs=["x"])


def test_self_loop_is_a_cycle():
    with pytest.raises(GraphError, match="cycle: op 'A' reads its own output"):
        Graph([("a", 1)], [Op("A", ["a"], ["a"])])


def test_unknown_tensor_read():
    with pytest.raises(GraphError, match="'q' is read by op 'A' but is neither produced"):
        Graph([("x", 1), ("q", 1), ("y", 1)], [Op("A", ["x", "q"], ["y"])], inputs=["x"])
    with pytest.raises(GraphError, match="unknown tensor 'zz'"):
        Graph([("x", 1)], [Op("A", ["zz"], [])], inputs=["x"])


def test_tensor_produced_twice():
    with pytest.raises(GraphError, match="'y' is produced twice, by ops 'A' and 'B'"):
        Graph([("x", 1), ("y", 1)], [Op("A", ["x"], ["y"]), Op("B", ["x"], ["y"])], inputs=["x"])


def test_graph_input_produced_by_op():
    with pytest.raises(GraphError, match="graph input 'x' is produced by op 'A'"):
        Graph([("x", 1)], [Op("A", [], ["x"])], inputs=["x"])


def test_duplicate_op_names():
    with pytest.raises(GraphError, match="op 'A' is defined twice"):
        Graph([("x", 1), ("y", 1), ("z", 1)], [Op("A", ["x"], ["y"]), Op("A", ["x"], ["z"])], inputs=["x"])


@pytest.mark.parametrize("size", [-1, 2.5, "4", None, True])
def test_bad_sizes(size):
    with pytest.raises(GraphError, match="non-negative integer"):
        Graph([("x", size)], [], inputs=["x"])
    with pytest.raises(GraphError, match="workspace of op 'A'"):
        Graph([("x", 1)], [Op("A", ["x"], [], workspace_bytes=size)], inputs=["x"])


def test_duplicate_tensor_and_listing():
    with pytest.raises(GraphError, match="declared twice"):
        Graph([("x", 1), ("x", 2)], [], inputs=["x"])
    with pytest.raises(GraphError, match="listed twice"):
        Graph([("x", 1)], [], inputs=["x", "x"])


def test_bad_orders():
    g = diamond()
    with pytest.raises(OrderError, match="unknown op 'Q'"):
        simulate(g, ["A", "Q", "C"])
    with pytest.raises(OrderError, match="missing 1 op"):
        simulate(g, ["A", "B"])
    with pytest.raises(OrderError, match="appears twice"):
        simulate(g, ["A", "A", "B", "C"])
    with pytest.raises(OrderError, match="'C' runs before op 'B', which produces its input 'b'"):
        simulate(g, ["A", "C", "B"])


# -------------------------------------------------------------------- JSON
@given(dags(max_ops=10))
def test_json_round_trip(g):
    data = json.loads(json.dumps(graph_to_dict(g)))
    assert graph_from_dict(data) == g


@given(dags(max_ops=10))
def test_networkx_round_trip(g):
    nxg = to_networkx(g)
    assert nx.is_directed_acyclic_graph(nxg)
    assert from_networkx(nxg) == g


def test_json_exact_format_and_default_workspace():
    data = {"name": "n", "tensors": [{"name": "x", "bytes": 3}, {"name": "y", "bytes": 5}],
            "ops": [{"name": "A", "inputs": ["x"], "outputs": ["y"]}], "inputs": ["x"], "outputs": ["y"]}
    g = graph_from_dict(data)
    assert g.ops[0].workspace_bytes == 0
    out = graph_to_dict(g)
    assert set(out) == {"name", "tensors", "ops", "inputs", "outputs"}
    assert out["ops"][0] == {"name": "A", "inputs": ["x"], "outputs": ["y"], "workspace_bytes": 0}


def test_json_structural_errors():
    with pytest.raises(GraphError, match="no 'ops' list"):
        graph_from_dict({"tensors": []})
    with pytest.raises(GraphError, match="unknown key"):
        graph_from_dict({"tensors": [], "ops": [], "output": ["y"]})
    with pytest.raises(GraphError, match="'name' and 'bytes'"):
        graph_from_dict({"tensors": [{"name": "x"}], "ops": []})


def test_plain_networkx_dag():
    d = nx.DiGraph()
    d.add_node("a", bytes=4)
    d.add_node("b", bytes=8)
    d.add_node("c", bytes=2)
    d.add_edges_from([("a", "b"), ("a", "c"), ("b", "c")])
    g = from_networkx(d)
    assert g.outputs == ("c",)
    assert simulate(g, ["a", "b", "c"]).peak == 14


def test_subgraph_keeps_boundary_tensors():
    g = diamond()
    sub = g.subgraph([g.op_index["A"], g.op_index["B"]])
    assert set(sub.inputs) == {"x"} and set(sub.outputs) == {"a", "b"}
