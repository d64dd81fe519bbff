"""Stateful streaming .tflite models (CALL_ONCE + resource variables) and offset-buffer .tflite files."""

import numpy as np
import pytest

from test_cli import assert_clean_error, run
from test_frontends import assert_one_line_error, cli
from tvm_memsched.core.errors import InputFileError, UnsupportedError
from tvm_memsched.schedulers import available_methods, schedule
from tvm_memsched.tflite.builder import ModelBuilder, load, offset_buffer_count, serialize, tfl
from tvm_memsched.tflite.offline_plan import read_offline_plan
from tvm_memsched.tflite.optimize import STATEFUL_INVOCATIONS, optimize_tflite
from tvm_memsched.tflite.reader import load_model, read_tflite
from tvm_memsched.tflite.verify import (compare_litert, litert_run_sequence, random_input_sequence,
                                        tflm_run_sequence)
from tvm_memsched.zoo.streaming import SMALL, streaming_kws_tflite

B = tfl.BuiltinOperator


@pytest.fixture(scope="module")
def kws():
    return {layout: streaming_kws_tflite(SMALL, layout=layout) for layout in ("traced", "hoisted")}


def _first(outputs):
    return [int(np.asarray(list(o.values())[0] if isinstance(o, dict) else o[0]).ravel()[0]) for o in outputs]


# ------------------------------------------------------------------ the test models and the runtimes
def test_litert_and_tflm_carry_the_state(kws):
    buf = kws["traced"]
    seq = random_input_sequence(buf, 12, seed=3)
    stream = _first(litert_run_sequence(buf, seq))
    fresh = [_first(litert_run_sequence(buf, [x]))[0] for x in seq]
    assert stream[0] == fresh[0] and stream != fresh          # later outputs depend on earlier inputs
    assert _first(litert_run_sequence(buf, seq, reference_kernels=True)) == _first(tflm_run_sequence(buf, seq))
    assert len(set(stream)) > 3                               # not saturated


def stateful_float_model(init_subgraph_inputs: bool = False, handle_elsewhere: bool = False) -> bytes:
    """x -> y with one float variable v through two handles: r1 = v; v = r1 + x; r2 = v (the new value);
    r3 = v; y = r2 + r3; v = y. Outputs depend on all previous inputs."""
    mb = ModelBuilder("two_handles")
    opt = tfl.CallOnceOptionsT()
    opt.initSubgraphIndex = 1
    mb.op(B.CALL_ONCE, [], [], tfl.BuiltinOptions.CallOnceOptions, opt)

    def handle(name):
        h = mb.tensor(name, [], type_code=tfl.TensorType.RESOURCE)
        o = tfl.VarHandleOptionsT()
        o.container, o.sharedName = "", "v"
        mb.op(B.VAR_HANDLE, [], [h], tfl.BuiltinOptions.VarHandleOptions, o)
        return h

    h1, h2 = handle("h1"), handle("h2")
    x = mb.tensor("x", [1, 4])
    r1, a, r2, r3, y = (mb.tensor(n, [1, 4]) for n in ("r1", "a", "r2", "r3", "y"))
    mb.op(B.READ_VARIABLE, [h1], [r1])
    mb.op(B.ADD, [r1, x], [a])
    mb.op(B.ASSIGN_VARIABLE, [h2 if not handle_elsewhere else 99, a], [])
    mb.op(B.READ_VARIABLE, [h1], [r2])
    mb.op(B.READ_VARIABLE, [h2], [r3])
    mb.op(B.ADD, [r2, r3], [y])
    mb.op(B.ASSIGN_VARIABLE, [h1, y], [])
    mb.subgraph("init")
    h = handle("init_h")
    z = mb.tensor("zeros", [1, 4], data=np.full((1, 4), 0.5, np.float32))
    mb.op(B.ASSIGN_VARIABLE, [h, z], [])
    if init_subgraph_inputs:
        mb.set_io(1, [z], [])
    mb.use(0)
    return mb.finish([x], [y])


def test_access_order_edges_and_every_scheduler_keeps_them(kws):
    tg = read_tflite(stateful_float_model())
    # ops: 0 CALL_ONCE, 1-2 VAR_HANDLE, 3 READ, 4 ADD, 5 ASSIGN, 6 READ, 7 READ, 8 ADD, 9 ASSIGN
    assert set(tg.state.edges) == {(0, i) for i in range(1, 10)} | {(3, 5), (5, 6), (5, 7), (5, 9), (6, 9), (7, 9)}
    assert tg.state.bytes == 16 and len(tg.state.variables) == 1
    for buf in [kws["hoisted"], stateful_float_model()]:
        tg = read_tflite(buf)
        for method in available_methods():
            order = tg.operator_order(schedule(tg.graph, method, time_limit=2).order)
            pos = {op: k for k, op in enumerate(order)}
            assert all(pos[a] < pos[b] for a, b in tg.state.edges), method


def test_tokens_are_zero_bytes_and_the_plan_ignores_them(kws):
    tg = read_tflite(kws["hoisted"])
    tokens = [t for t in tg.graph.tensors if t.name.startswith("order#")]
    handles = [t for t in tg.graph.tensors if t.name.endswith(tuple(f"handle_{k}" for k in range(1, 5)))]
    assert tokens and all(t.bytes == 0 for t in tokens + handles)
    assert "resource variable" in " ".join(tg.notes)


def planned_stream(buf: bytes, time_limit: float):
    """``tflite --offline-plan --report`` of a stateful model, asserting that OUT and OUT + plan are used and
    identical to the input in LiteRT and TFLM over :data:`STATEFUL_INVOCATIONS` invocations."""
    res = optimize_tflite(buf, offline_plan=True, measure=True, verify=True, time_limit=time_limit)
    assert res.used_plan and res.identical
    for key in ("out", "out_plan"):
        assert res.litert[key]["identical"] and res.litert[key]["invocations"] == STATEFUL_INVOCATIONS
        assert res.tflm[key]["identical"] and res.tflm[key]["invocations"] == STATEFUL_INVOCATIONS
    return res


@pytest.mark.parametrize("layout", ["traced", "hoisted"])
def test_offline_plan_on_streaming_models(kws, layout):
    buf = kws[layout]
    res = planned_stream(buf, time_limit=2)
    arena = {k: v["min_arena"] for k, v in res.measured.items()}
    assert arena["out_plan"] <= arena["out"] <= arena["in"]
    if layout == "hoisted":
        assert res.peaks["out"] < res.peaks["in"] and res.measured["out_plan"]["head"] < res.measured["in"]["head"]
    src, out = load_model(buf), load_model(res.output)
    assert len(read_offline_plan(out)) == sum(len(sg.tensors) for sg in out.subgraphs)
    sg_in, sg_out = src.subgraphs[1], out.subgraphs[1]                # the initialisation subgraph is unchanged
    assert [list(o.inputs) for o in sg_in.operators] == [list(o.inputs) for o in sg_out.operators]
    assert [t.name for t in sg_in.tensors] == [t.name for t in sg_out.tensors]


def test_tflite_command_reports_state(kws, tmp_path):
    (tmp_path / "kws.tflite").write_bytes(kws["hoisted"])
    p = run("tflite", str(tmp_path / "kws.tflite"), "-o", str(tmp_path / "out.tflite"), "--offline-plan", "-q")
    assert p.returncode == 0, p.stderr
    assert "state: 4 resource variable(s), 104 bytes" in p.stdout and "with offline plan" in p.stdout


def test_bad_stateful_models(kws, tmp_path, capsys):
    with pytest.raises(UnsupportedError, match="initialisation subgraph 1 has inputs"):
        read_tflite(stateful_float_model(init_subgraph_inputs=True))
    with pytest.raises(InputFileError):
        read_tflite(stateful_float_model(handle_elsewhere=True))
    m = load(kws["traced"])
    m.subgraphs[0].operators[0].builtinOptions.initSubgraphIndex = 7
    with pytest.raises(UnsupportedError, match="calls subgraph 7, which does not exist"):
        read_tflite(serialize(m))
    buf = kws["traced"]
    (tmp_path / "trunc.tflite").write_bytes(buf[: len(buf) * 2 // 3])
    (tmp_path / "corrupt.tflite").write_bytes(buf[:8] + bytes(np.random.default_rng(1).integers(0, 256, 3000,
                                                                                                dtype=np.uint8))
                                              + buf[3008:])
    for name in ("trunc.tflite", "corrupt.tflite"):
        path = tmp_path / name
        assert_one_line_error(cli(capsys, "tflite", path, "-o", tmp_path / "o.tflite"), name)
        assert_one_line_error(cli(capsys, "info", path), name)
        assert_one_line_error(cli(capsys, "compare", path), name)
        assert_one_line_error(cli(capsys, "micro", path, "--board", "mps2-an386", "--out", tmp_path / "m"), name)
    (tmp_path / "kws.tflite").write_bytes(buf)
    assert_one_line_error(cli(capsys, "coral", tmp_path / "kws.tflite", "--stages", "2", "--out", tmp_path / "c"),
                          "cannot be split into pipeline segments")


# ------------------------------------------------------------------ Relax and the microcontroller export
def test_relax_import_carries_state_like_litert():
    import tvm
    from tvm import relax

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.relax.frontends.tflite_state import run_sequence, states

    buf = stateful_float_model()
    mod = from_tflite_bytes(buf)
    (st,) = states(mod)
    assert (st.name, st.param, st.output, st.shape) == ("v", 1, 1, (1, 4)) and np.all(st.init == 0.5)
    seq = [[x["x"]] for x in random_input_sequence(buf, 6)]
    target = tvm.target.Target({"kind": "llvm"})
    ours = run_sequence(tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target)), mod, seq)
    want = litert_run_sequence(buf, seq)
    for got, ref in zip(ours, want):
        np.testing.assert_allclose(got[0], ref["y"], rtol=1e-6)


def test_relax_import_of_the_streaming_model(kws):
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.relax.frontends.tflite_state import states

    mod = from_tflite_bytes(kws["hoisted"])
    sts = states(mod)
    assert [s.name for s in sts] == ["stream_input", "block0/stream", "block1/stream", "pool/stream"]
    assert sum(s.init.nbytes for s in sts) == read_tflite(kws["hoisted"]).state.bytes
    assert len(mod["main"].params) == 1 + len(sts) and all(s.dtype == "int8" for s in sts)


@pytest.mark.slow
def test_compare_streaming_model(kws):
    import tvm

    import tvm_memsched
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    c = tvm_memsched.compare(from_tflite_bytes(kws["hoisted"]), tvm.target.Target({"kind": "llvm"}))
    assert c.numerics_ok


@pytest.mark.slow
def test_micro_host_runs_the_stream_like_litert(kws, tmp_path):
    from tvm_memsched import micro
    from tvm_memsched.micro.run import default_sequence, litert_reference, run_host
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = kws["hoisted"]
    exp = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path / "m"), measure=False)
    assert exp.state_bytes >= 104 and len(exp.states) == 4
    src = open(exp.files["source"]).read()
    header = open(exp.files["header"]).read()
    assert "void model_init(void) {" in src and "if (!model_initialised) model_init();" in src
    assert "#define MODEL_NUM_STATES 4" in header and "void model_init(void);" in header
    seq = default_sequence(exp, 20, seed=1)
    r = run_host(exp, sequence=seq, reference=litert_reference(buf, seq), reference_name="LiteRT")
    assert r.ok and r.invocations == 20 and r.max_abs_err == 0, r.summary()
    assert len({int(o[0].ravel()[0]) for o in r.sequence}) > 3


def test_state_update_falls_back_to_a_copy_when_kernels_read_after_the_write():
    """A fused kernel reading the old state and writing the new one cannot work in place."""
    from tvm_memsched.micro.codegen import KernelCall, Tensor, _Translator
    from tvm_memsched.relax.frontends.tflite_state import StateVar

    tr = _Translator(None, None, 16, [StateVar("v", 1, 1, (4,), "int8", np.zeros(4, np.int8))])
    old, new = Tensor(("state", 0), 0, (4,), "int8"), Tensor(("result", 0), 0, (4,), "int8")
    tr.calls = [KernelCall("k", [old, new])]
    assert not tr._writes_after_reads(0, 0)
    tr.calls = [KernelCall("a", [old, Tensor(("arena", 0), 0, (4,), "int8")]), KernelCall("b", [new])]
    assert tr._writes_after_reads(0, 0)


@pytest.mark.slow
def test_micro_cli_runs_the_stream_on_qemu_within_tflm_arena(kws, tmp_path):
    (tmp_path / "kws.tflite").write_bytes(kws["hoisted"])
    p = run("micro", str(tmp_path / "kws.tflite"), "--board", "mps2-an386", "--out", str(tmp_path / "m"), "--run",
            "--compare-tflm")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "x 20 invocations, max abs error vs LiteRT (reference kernels) 0 (ok)" in p.stdout
    assert "at most TFLM's" in p.stdout and "set by model_init()" in p.stdout


# ------------------------------------------------------------------ offset-buffer files
def offset_layout(buf: bytes) -> bytes:
    return serialize(load_model(buf), offset_buffers=True)


def test_offset_buffer_files_round_trip(kws, tmp_path):
    from tvm_memsched import zoo

    for buf in (zoo.tflite("swiftnet_like", "int8"), kws["traced"]):
        off = offset_layout(buf)
        assert offset_buffer_count(off) > 10 and offset_buffer_count(buf) == 0
        assert read_tflite(off).graph == read_tflite(buf).graph and read_tflite(off).offset_buffers
        calls = 6 if read_tflite(buf).stateful else 1
        assert compare_litert(buf, off, invocations=calls).identical
        res = optimize_tflite(off, offline_plan=True, verify=True, time_limit=2)
        assert offset_buffer_count(res.output) > 10 and res.identical and res.litert["out"]["identical"]
        assert compare_litert(buf, res.output, invocations=calls).identical
        assert read_offline_plan(load_model(res.output)) is not None
        assert any("Buffer.offset" in n for n in res.notes)       # TFLM cannot read the layout: not measured


def test_offset_buffer_files_in_relax_and_truncated(kws, tmp_path, capsys):
    import tvm

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    off = offset_layout(kws["traced"])
    tvm.ir.assert_structural_equal(from_tflite_bytes(off), from_tflite_bytes(kws["traced"]))
    cut = off[: len(off) - 200]
    with pytest.raises(InputFileError, match="buffer .* but the file has"):
        read_tflite(cut)
    with pytest.raises(InputFileError, match="truncated"):
        from_tflite_bytes(cut)
    (tmp_path / "cut.tflite").write_bytes(cut)
    for cmd in (["tflite", "-o", tmp_path / "o.tflite"], ["compare"], ["info"]):
        assert_one_line_error(cli(capsys, cmd[0], tmp_path / "cut.tflite", *cmd[1:]), "cut.tflite", "truncated")
    assert_clean_error(run("info", str(tmp_path / "cut.tflite")), "truncated")
    (tmp_path / "off.tflite").write_bytes(off)
    assert_one_line_error(cli(capsys, "micro", tmp_path / "off.tflite", "--board", "mps2-an386", "--out",
                              tmp_path / "m", "--compare-tflm"), "TFLite Micro cannot read")
