"""In-place execution in the core: simulator, bounds, schedulers and arena plans against brute force."""

import itertools
import random

import pytest
from hypothesis import given, settings
from strategies import brute_force_optimum, dags, graph_and_order, reference_footprints

from tvm_memsched.core import Graph, Op, simulate
from tvm_memsched.core.arena import Buffer, buffers_from_schedule, check_plan, live_peak, plan_arena
from tvm_memsched.core.bounds import cut_lower_bound, lower_bound
from tvm_memsched.core.errors import GraphError
from tvm_memsched.core.io import graph_from_dict, graph_to_dict
from tvm_memsched.schedulers import available_methods, schedule
from tvm_memsched.schedulers.lower import windows_lower_bound

FAST_METHODS = [m for m in available_methods() if m not in ("ilp", "learned")]


def residual_block(size=256):
    """x -> conv -> a; relu(a) -> b (in place); add(b, x) -> y (in place over x)."""
    return Graph([("x", size), ("a", size), ("b", size), ("y", size)],
                 [Op("conv", ["x"], ["a"]), Op("relu", ["a"], ["b"], inplace=[("b", "a", 0)]),
                  Op("add", ["b", "x"], ["y"], inplace=[("y", "x", 0)])], ["x"], ["y"])


def test_residual_add_takes_over_a_dying_input():
    g = residual_block()
    r = simulate(g, ["conv", "relu", "add"])
    assert r.stable == (512, 512, 512)  # the add needs 2 tensors, not 3
    assert simulate(g.without_inplace(), ["conv", "relu", "add"]).peak == 768
    plan = plan_arena(buffers_from_schedule(g, ["conv", "relu", "add"], include_inputs=True), alignment=1)
    assert plan.size == 512 and plan.offsets["y"] == plan.offsets["x"] and plan.offsets["b"] == plan.offsets["a"]


def test_no_takeover_when_the_input_lives_on():
    g = Graph([("x", 8), ("a", 8), ("b", 8), ("c", 8)],
              [Op("A", ["x"], ["a"]), Op("B", ["a"], ["b"], inplace=[("b", "a", 0)]), Op("C", ["a", "b"], ["c"])],
              ["x"], ["c"])
    assert simulate(g, ["A", "B", "C"]).stable[1] == 16  # a is still read by C
    assert all(b.alias is None for b in buffers_from_schedule(g, ["A", "B", "C"]))


def test_shifted_overlap_saves_size_minus_shift():
    g = Graph([("x", 100), ("y", 100)], [Op("dw", ["x"], ["y"], inplace=[("y", "x", 30)])], ["x"], ["y"])
    assert simulate(g, ["dw"]).peak == 130
    plan = plan_arena(buffers_from_schedule(g, ["dw"], include_inputs=True), alignment=1)
    assert plan.size == 130 and plan.offsets["x"] - plan.offsets["y"] == 30


def test_bad_declarations_are_named():
    with pytest.raises(GraphError, match="not one of its inputs"):
        Graph([("x", 4), ("y", 4)], [Op("f", ["x"], ["y"], inplace=[("y", "z", 0)])], ["x"], ["y"])
    with pytest.raises(GraphError, match="not one of its outputs"):
        Graph([("x", 4), ("y", 4)], [Op("f", ["x"], ["y"], inplace=[("x", "x", 0)])], ["x"], ["y"])
    with pytest.raises(GraphError, match="shift"):
        Graph([("x", 4), ("y", 4)], [Op("f", ["x"], ["y"], inplace=[("y", "x", -1)])], ["x"], ["y"])


def test_bad_buffer_aliases_are_named():
    from tvm_memsched.core.errors import MemschedError

    cases = [([Buffer("a", 8, 0, 1, alias=("z", 0))], "unknown buffer z"),
             ([Buffer("a", 8, 0, 1), Buffer("b", 8, 1, 2, alias=("a", 4))], "offset 4 above"),
             ([Buffer("a", 8, 0, 1), Buffer("b", 8, 1, 2, alias=("a", 0)), Buffer("c", 8, 1, 2, alias=("a", 0))],
              "taken over by two"),
             ([Buffer("a", 8, 0, 2), Buffer("b", 8, 1, 2, alias=("a", 0))], "does not die at step 1"),
             ([Buffer("a", 8, 0, 1), Buffer("b", 8, 1, 1, alias=("a", 0)), Buffer("c", 8, 1, 2, alias=("b", 0))],
              "b lives only at step 1, where it takes over a and is taken over by c")]
    for bufs, message in cases:
        for f in (plan_arena, live_peak):
            with pytest.raises(MemschedError, match=message):
                f(bufs)


def test_json_round_trip_keeps_declarations():
    g = residual_block()
    d = graph_to_dict(g)
    assert d["ops"][2]["inplace"] == [{"output": "y", "input": "x", "shift": 0}]
    assert graph_from_dict(d).ops[2].inplace == (("y", "x", 0),)


@settings(max_examples=150, deadline=None)
@given(graph_and_order(max_ops=9, allow_inplace=True))
def test_simulator_matches_reference_with_inplace(go):
    g, order = go
    stable, transient, peak = reference_footprints(g, order)
    r = simulate(g, order)
    assert list(r.stable) == stable and list(r.transient) == transient and r.peak == peak


@settings(max_examples=120, deadline=None)
@given(dags(max_ops=10, allow_inplace=True))
def test_exact_schedulers_and_bounds_with_inplace(g):
    opt = brute_force_optimum(g)
    assert lower_bound(g) <= opt and cut_lower_bound(g) <= opt
    if g.num_ops:
        assert windows_lower_bound(g, list(g.topo), width=5) <= opt
    for m in ("dp", "auto"):
        r = schedule(g, m)
        assert r.peak_bytes == opt and r.optimal, (m, r.peak_bytes, opt)
    for m in FAST_METHODS:
        r = schedule(g, m)
        assert r.peak_bytes == simulate(g, r.order).peak >= opt
        assert not r.optimal or r.peak_bytes == opt


@pytest.mark.parametrize("seed", range(6))
def test_ilp_optimal_with_inplace(seed):
    pytest.importorskip("ortools")
    from strategies import chainify

    from tvm_memsched.core.generators import random_dag
    g = with_random_inplace(chainify(random_dag(9, seed=seed), seed, prob=0.4), seed)
    r = schedule(g, "ilp")
    assert r.peak_bytes == brute_force_optimum(g) and r.optimal


def with_random_inplace(g: Graph, seed: int) -> Graph:
    rng = random.Random(seed)
    ops = []
    for op in g.ops:
        if op.inputs and op.outputs and rng.random() < 0.6:
            op = op.replace(inplace=[(op.outputs[0], rng.choice(op.inputs), rng.choice([0, 0, 2]))])
        ops.append(op)
    return Graph(g.tensors, ops, g.inputs, g.outputs, g.name + "-inplace")


def overlaps_only_where_declared(g, order, plan, bufs):
    """Independent check: two tensors live at the same step share bytes only as a declared,
    realised in-place pair (the output born at the op where the input dies)."""
    by_name = {b.name: b for b in bufs}
    for a, b in itertools.combinations(bufs, 2):
        if not a.size or not b.size or a.end < b.start or b.end < a.start:
            continue
        oa, ob = plan.offsets[a.name], plan.offsets[b.name]
        if oa < ob + b.size and ob < oa + a.size:
            child, parent = (a, b) if a.alias and a.alias[0] == b.name else (b, a)
            assert child.alias and child.alias[0] == parent.name, (a, b)
            producer = next(op for op in g.ops if child.name in op.outputs)
            assert any(o == child.name and i == parent.name for o, i, _ in producer.inplace)
            assert order.index(producer.name) == child.start == parent.end
            assert by_name[parent.name].end == child.start


@settings(max_examples=100, deadline=None)
@given(graph_and_order(max_ops=10, allow_inplace=True))
def test_plans_overlap_only_declared_pairs(go):
    g, order = go
    bufs = buffers_from_schedule(g, order, include_inputs=True)
    for exact in (False, True):
        plan = plan_arena(bufs, alignment=1, exact=exact, time_limit=1.0)
        assert check_plan(bufs, plan.offsets) == plan.size
        overlaps_only_where_declared(g, order, plan, bufs)
        # the arena is never below the simulated peak without workspace and with everything planned
        assert plan.size >= live_peak(bufs) >= 0
    assert live_peak(bufs) == simulate(g, order).peak or not g.num_ops


def brute_force_arena(bufs):
    """Smallest arena over every assignment of offsets that check_plan accepts (tiny cases only)."""
    total = sum(b.size for b in bufs) + max([-b.alias[1] for b in bufs if b.alias] + [0])
    best = None
    for offs in itertools.product(range(total + 1), repeat=len(bufs)):
        offsets = {b.name: o for b, o in zip(bufs, offs)}
        try:
            size = check_plan(bufs, offsets)
        except ValueError:
            continue
        best = size if best is None else min(best, size)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_exact_plans_equal_the_exhaustive_optimum(seed):
    pytest.importorskip("ortools")
    rng = random.Random(seed)
    bufs = [Buffer("a", rng.randint(1, 3), 0, 1), Buffer("b", rng.randint(1, 3), 1, 2),
            Buffer("c", rng.randint(1, 3), 2, 3, alias=("b", -rng.choice([0, 1]))),
            Buffer("d", rng.randint(1, 3), rng.randint(0, 2), 3)]
    plan = plan_arena(bufs, alignment=1, exact=True, time_limit=5.0)
    assert plan.optimal and plan.size == brute_force_arena(bufs)


@settings(max_examples=60, deadline=None)
@given(graph_and_order(max_ops=9, allow_inplace=True))
def test_exact_plans_are_aligned(go):
    g, order = go
    bufs = buffers_from_schedule(g, order, include_inputs=True)
    plan = plan_arena(bufs, alignment=16, exact=True, time_limit=0.5)
    assert all(o % 16 == 0 for o in plan.offsets.values())
    assert check_plan(bufs, plan.offsets, 16) == plan.size


def random_lifetimes(rng, n, steps):
    """``n`` buffers over ``steps`` steps, a few living to the end, some taking over a parent that dies."""
    bufs, dying = [], {}
    for i in range(n):
        s = rng.randrange(steps)
        e = steps - 1 if rng.random() < 0.05 else min(steps - 1, s + int(rng.expovariate(0.2)))
        alias = None
        parent = dying.get(s)
        if parent is not None and rng.random() < 0.5:
            alias = (parent, -rng.choice([0, 64, 128]))
            del dying[s]
        bufs.append(Buffer(f"b{i}", rng.choice([0, 64, 100, 1000, 4096]), s, e, alias))
        if e > s or alias is None:      # a one-step buffer that takes over cannot be taken over
            dying.setdefault(e, f"b{i}")
    return bufs


@pytest.mark.parametrize("aliased", [False, True])
def test_large_plans_scan_in_numpy_and_place_as_the_python_scan(monkeypatch, aliased):
    """Above ``_FEW`` buffers the greedies scan their placed buffers in numpy; the plans are the same."""
    import tvm_memsched.core.arena as arena

    rng = random.Random(5)
    bufs = random_lifetimes(rng, 700, 40)
    if not aliased:
        bufs = [Buffer(b.name, b.size, b.start, b.end) for b in bufs]
    assert any(b.alias for b in bufs) == aliased and len(bufs) > arena._FEW
    plan = plan_arena(bufs, alignment=64, time_limit=None)
    assert check_plan(bufs, plan.offsets, 64) == plan.size >= live_peak(bufs, 64)
    monkeypatch.setattr(arena, "_FEW", len(bufs))
    again = plan_arena(bufs, alignment=64, time_limit=None)
    assert (again.offsets, again.size, again.method) == (plan.offsets, plan.size, plan.method)
