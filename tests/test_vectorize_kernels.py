"""VectorizeKernels: explicit SIMD in TIR, bit-identical results, and in-place overlaps still proven safe.

The windowed kernels of test_access_trace (depthwise convolutions and window sums, channels-last, with
padding, strides, dilations, accumulating or not) are vectorised over their channels; the overlap the
analyses find on the *vectorised* kernel is then run with input and output over one buffer, and must give
the separate-buffer result of the original kernel bit for bit.
"""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from test_access_trace import _compile, _func, _out, kernel_source
from tvm_memsched.relax.analysis.access_bounds import access_spans, span_shift
from tvm_memsched.relax.analysis.access_trace import access_times, overlap_shift
from tvm_memsched.relax.analysis.workspace import compacted_workspace_bytes
from tvm_memsched.relax.passes.vectorize_kernels import (MIN_LANES, VectorizeKernels, vectorize_func,
                                                         vectorize_kernels)


def _vector_configs(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        cfg = dict(c=int(rng.choice([MIN_LANES, 8, 12, 16])), h=int(rng.integers(3, 7)), w=int(rng.integers(3, 7)),
                   k=int(rng.choice([1, 2, 3])), s=int(rng.choice([1, 1, 2])), d=int(rng.choice([1, 1, 2])),
                   pad=int(rng.integers(0, 2)), nhwc=True, accumulate=bool(rng.integers(0, 2)))
        if _out(cfg["h"], cfg["k"], cfg["s"], cfg["d"], cfg["pad"]) >= 1 \
                and _out(cfg["w"], cfg["k"], cfg["s"], cfg["d"], cfg["pad"]) >= 1:
            out.append(cfg)
    return out


def _vectorized(func):
    g, steps = vectorize_func(func)
    assert steps, "the channel loop was not vectorised"
    assert "T.vectorized" in g.script()
    return g


def _aliased(vec, aliased_src):
    """The vectorised kernel ``vec`` with its params replaced by the views over one buffer of
    ``aliased_src`` (the same kernel's aliased source; vectorising that one directly would meet TVM's
    ``cache_write``, which does not handle an output declared inside the function)."""
    head = aliased_src.splitlines()[:4]               # decorator, def, the two decl_buffer views
    lines = vec.script().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("def "))
    body = [line for line in lines[start + 1:] if "T.func_attr" not in line]
    return _func("\n".join(head + body) + "\n")


def _run(func, *arrays):
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    _compile(func)(*tensors)
    return [t.numpy() for t in tensors]


@pytest.mark.parametrize("cfg", _vector_configs(24, 5), ids=lambda c: "-".join(f"{k}{int(v)}" for k, v in c.items()))
def test_vectorised_kernel_runs_in_place_at_the_shift_proven_on_it(cfg):
    src, ash, bsh = kernel_source(cfg)
    func = _func(src)
    vec = _vectorized(func)
    x = np.random.default_rng(11).standard_normal(ash).astype("float32")
    _, ref = _run(func, x, np.zeros(bsh, "float32"))
    _, got = _run(vec, x, np.zeros(bsh, "float32"))
    assert np.array_equal(got, ref)                      # vectorising changes no sum
    t = access_times(vec)
    assert t is not None
    exact = overlap_shift(t[0], t[1])
    bound = span_shift(access_spans(vec), 0, 1)
    assert bound is None or (exact is not None and bound >= exact)     # the bounds stay safe
    if exact is None:
        return
    na, nb, k = int(np.prod(ash)), int(np.prod(bsh)), exact // 4
    total = max(k + na, nb)
    aliased = _aliased(vec, kernel_source(cfg, (total, k, 0))[0])
    big = np.zeros(total, "float32")
    big[k:k + na] = x.reshape(-1)
    (out,) = _run(aliased, big)
    assert np.array_equal(out[:nb].reshape(bsh), ref)


@T.prim_func(s_tir=True)
def _matmul(a: T.Buffer((5, 24), "float32"), b: T.Buffer((24, 40), "float32"), c: T.Buffer((5, 40), "float32")):
    for i, j, k in T.grid(5, 40, 24):
        with T.sblock("c"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


@T.prim_func(s_tir=True)
def _gather(a: T.Buffer((8, 8), "float32"), c: T.Buffer((8, 8), "float32")):
    for i, j in T.grid(8, 8):
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = a[vj, vi]                           # the lane variable in a row index: a gather


@T.prim_func(s_tir=True)
def _lane_condition(a: T.Buffer((4, 16), "float32"), c: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = T.if_then_else(vj < 15, a[vi, vj + 1], T.float32(0))


def test_matrix_product_sums_over_k_outside_its_vectorised_columns_bit_identically():
    g, steps = vectorize_func(_matmul)
    assert steps == ["c: 8-lane tiles over j summed in registers"]     # 40 = 5 x 8
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 24)).astype("float32"), rng.standard_normal((24, 40)).astype("float32")
    ref = _run(_matmul, a, b, np.zeros((5, 40), "float32"))[2]
    got = _run(g, a, b, np.zeros((5, 40), "float32"))[2]
    assert np.array_equal(got, ref)
    assert np.allclose(ref, a @ b, rtol=1e-5, atol=1e-5)


@T.prim_func(s_tir=True)
def _prime_mm(a: T.Buffer((3, 24), "float32"), b: T.Buffer((24, 37), "float32"), c: T.Buffer((3, 37), "float32")):
    for i, j, k in T.grid(3, 37, 24):                     # DeiT's attention scores: 197 columns
        with T.sblock("c"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


def _prime_mm_result(func):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 24)).astype("float32"), rng.standard_normal((24, 37)).astype("float32")
    return a, b, _run(func, a, b, np.zeros((3, 37), "float32"))[2]


def test_a_prime_number_of_columns_is_tiled_with_its_last_columns_in_a_tile_of_their_own():
    mm = _prime_mm
    g, steps = vectorize_func(mm)
    assert steps == ["c: 16-lane tiles over j summed in registers, its last 5 in a tile of their own"]
    assert g.script().count("T.vectorized") == 6 and 'T.sblock("c_update_tail")' in g.script()
    assert access_spans(g) is not None                  # the in-place analysis still reads it
    _, report = vectorize_kernels(tvm.IRModule({"mm": mm.with_attr("global_symbol", "mm")}),
                                  tvm.target.Target("llvm"))
    assert report == {"mm": steps}                      # as the pass runs it (on the kernel without attributes)
    a, b, ref = _prime_mm_result(mm)
    assert np.array_equal(_prime_mm_result(g)[2], ref)
    assert np.allclose(ref, a @ b, rtol=1e-5, atol=1e-5)


def test_names_carrying_code_pass_the_tail_tiles_round_trip_as_text(tmp_path):
    """The last tile's copy goes through TVMScript (printed, then parsed, which evaluates expressions); names
    come from model files (untrusted): a block name is printed as an escaped string, a variable name as a
    sanitised identifier, so neither runs."""
    from tvm import s_tir, tirx

    marker = tmp_path / "ran"
    code = f'__import__("pathlib").Path("{marker}").touch()'
    loop_i = _prime_mm.body.block.body
    loop_j = loop_i.body
    realize = loop_j.body.body
    blk = realize.block
    block = s_tir.SBlock(list(blk.iter_vars), list(blk.reads), list(blk.writes), f'c"); {code}; ("', blk.body,
                         blk.init, [], [], blk.annotations)
    j = tirx.Var(f"j={code}", "int32")
    values = [j if v.same_as(loop_j.loop_var) else v for v in realize.iter_values]
    inner = tirx.For(loop_j.body.loop_var, loop_j.body.min, loop_j.body.extent, loop_j.body.kind,
                     s_tir.SBlockRealize(values, realize.predicate, block))
    loops = tirx.For(loop_i.loop_var, loop_i.min, loop_i.extent, loop_i.kind,
                     tirx.For(j, loop_j.min, loop_j.extent, loop_j.kind, inner))
    root = _prime_mm.body
    hostile = _prime_mm.with_body(s_tir.SBlockRealize(
        list(root.iter_values), root.predicate,
        s_tir.SBlock(list(root.block.iter_vars), [], [], "root", loops)))
    g, steps = vectorize_func(hostile)
    assert steps and steps[0].endswith("its last 5 in a tile of their own")
    assert not marker.exists()
    assert np.array_equal(_prime_mm_result(g)[2], _prime_mm_result(_prime_mm)[2])


def test_long_rows_are_split_into_vectors():
    @T.prim_func(s_tir=True)
    def add(a: T.Buffer((2, 192), "float32"), c: T.Buffer((2, 192), "float32")):
        for i, j in T.grid(2, 192):
            with T.sblock("c"):
                vi, vj = T.axis.remap("SS", [i, j])
                c[vi, vj] = a[vi, vj] + T.float32(1)

    g, steps = vectorize_func(add)
    assert steps == ["c: 16 lanes over j"]
    x = np.arange(384, dtype="float32").reshape(2, 192)
    assert np.array_equal(_run(g, x, np.zeros_like(x))[1], x + 1)


@T.prim_func(s_tir=True)
def _shared_loop(a: T.Buffer((4, 16), "float32"), c: T.Buffer((4, 16), "float32")):
    t = T.sblock_alloc_buffer((4, 16), "float32")
    for i, j in T.grid(4, 16):
        for k in range(3):
            with T.sblock("t"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    t[vi, vj] = T.float32(0)
                t[vi, vj] = t[vi, vj] + a[vi, (vj + vk) % 16]
        with T.sblock("c"):                                # innermost loop j also runs block t's loop nest
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = t[vi, vj] * T.float32(2)


@T.prim_func(s_tir=True)
def _recurrence(a: T.Buffer((4, 16), "float32"), c: T.Buffer((4, 16), "float32")):
    t = T.sblock_alloc_buffer((4, 16), "float32")
    for i, j in T.grid(4, 16):
        with T.sblock("t"):                               # reads what block c wrote one column before
            vi, vj = T.axis.remap("SS", [i, j])
            t[vi, vj] = c[vi, (vj + 15) % 16] * T.float32(2)
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = t[vi, vj] + a[vi, vj]


@T.prim_func(s_tir=True)
def _decomposed_chain(a: T.Buffer((3, 24), "float32"), b: T.Buffer((24, 40), "float32"),
                      r: T.Buffer((3, 40), "float32"), c: T.Buffer((3, 40), "float32")):
    acc = T.sblock_alloc_buffer((3, 40), "float32")
    for i, j in T.grid(3, 40):                          # a matrix product's init, sum and epilogue at column j
        with T.sblock("acc_init"):
            vi, vj = T.axis.remap("SS", [i, j])
            acc[vi, vj] = T.float32(0)
        for k in range(24):
            with T.sblock("acc_update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                acc[vi, vj] = acc[vi, vj] + a[vi, vk] * b[vk, vj]
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = acc[vi, vj] + r[vi, vj]


@pytest.mark.parametrize("func", [_gather, _lane_condition, _recurrence],
                         ids=["gather", "lane-condition", "cross-column-recurrence"])
def test_blocks_it_cannot_vectorise_safely_are_left_alone(func):
    g, steps = vectorize_func(func)
    assert steps == [] and g.same_as(func)


def test_a_loop_shared_by_several_blocks_is_split_one_loop_each_bit_identically():
    g, steps = vectorize_func(_shared_loop)              # (vectorised whole, it gave wrong results once)
    assert steps[0] == "j: 16-lane tiles, a loop each for t, c"
    a = np.random.default_rng(3).standard_normal((4, 16)).astype("float32")
    ref = _run(_shared_loop, a, np.zeros((4, 16), "float32"))[1]
    assert np.array_equal(_run(g, a, np.zeros((4, 16), "float32"))[1], ref)
    assert np.allclose(ref, sum(np.roll(a, -k, axis=1) for k in range(3)) * 2, rtol=1e-6)


def test_a_decomposed_matrix_product_with_its_epilogue_is_tiled_with_the_sum_in_registers():
    g, steps = vectorize_func(_decomposed_chain)
    assert steps == ["j: 8-lane tiles, a loop each for acc_init, acc_update, c", "acc_init: 8 lanes over j_1",
                     "acc_update: 8 lanes over j_1, reduction loops outside", "c: 8 lanes over j_1"]
    assert 'scope="local"' in g.script()                # the column tile of sums: no workspace
    assert compacted_workspace_bytes(g) == 0 < compacted_workspace_bytes(_decomposed_chain)
    rng = np.random.default_rng(4)
    a, b, r = (rng.standard_normal(s).astype("float32") for s in ((3, 24), (24, 40), (3, 40)))
    ref = _run(_decomposed_chain, a, b, r, np.zeros((3, 40), "float32"))[3]
    assert np.array_equal(_run(g, a, b, r, np.zeros((3, 40), "float32"))[3], ref)
    assert np.allclose(ref, a @ b + r, rtol=1e-5, atol=1e-5)


def test_scheduled_kernels_and_other_targets_are_untouched():
    tuned = _matmul.with_attr("tirx.is_scheduled", True)
    assert vectorize_func(tuned) == (tuned, [])
    mod = tvm.IRModule({"mm": _matmul.with_attr("global_symbol", "mm")})
    new, report = vectorize_kernels(mod, tvm.target.Target("c"))
    assert new.same_as(mod) and report == {}
    p = VectorizeKernels(tvm.target.Target("llvm"))
    out = p(mod)
    assert p.report == {"mm": ["c: 8-lane tiles over j summed in registers"]}
    assert out["mm"].attrs["global_symbol"] == "mm"


def test_pipeline_option_turns_it_off():
    from tvm_memsched.relax.pipeline import pipeline

    assert "VectorizeKernels" in pipeline("llvm").pass_names()
    assert "VectorizeKernels" not in pipeline("llvm", vectorize=False).pass_names()
