"""WHILE loops with a static trip count unrolled at import (:mod:`tvm_memsched.relax.frontends.tflite_unroll`),
on loops TensorFlow's converter wrote: tf.while_loop (float, int8, float16, nested), Keras GRU, SimpleRNN and
stateful LSTM over their steps. The unrolled file runs in LiteRT exactly as the file does. A loop whose
condition reads the data runs to the bound its static part sets, each copy keeping its state once the condition
is false; one with no such bound stays a loop, and the C export refuses it naming why."""

import os

import numpy as np
import pytest

from test_cli import run
from tvm_memsched.relax.frontends import tflite_unroll
from tvm_memsched.relax.frontends.tflite_unroll import unroll_while
from tvm_memsched.tflite.builder import load, opcode_name

FOLDER = os.path.join(os.path.dirname(__file__), "data", "coverage")

#: file -> trip counts of the loops unrolled, outermost first (nested ones as their copies reach subgraph 0)
UNROLLED = {
    "while.float32.tflite": [3],
    "while.int8.tflite": [3],
    "while.float16.tflite": [3],
    "while_nested.float32.tflite": [3, 2, 2, 2],
    "while_nested.int8.tflite": [3, 2, 2, 2],
    "gru_loop.float32.tflite": [6],
    "simple_rnn.float32.tflite": [5],
    "unidirectional_sequence_lstm_stateful.float32.tflite": [3],
}


def _read(name):
    with open(os.path.join(FOLDER, name), "rb") as f:
        return f.read()


def _litert(buf, feeds, invocations=1):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=buf, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    outs = []
    for _ in range(invocations):
        for d, x in zip(it.get_input_details(), feeds):
            it.set_tensor(d["index"], x)
        it.invoke()
        outs.append([it.get_tensor(d["index"]).copy() for d in it.get_output_details()])
    return outs


def _feeds(buf, seed=0):
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(seed)
    it = Interpreter(model_content=buf)
    feeds = []
    for d in it.get_input_details():
        if np.issubdtype(d["dtype"], np.integer):
            info = np.iinfo(d["dtype"])
            feeds.append(rng.integers(info.min, info.max, d["shape"], endpoint=True).astype(d["dtype"]))
        else:
            feeds.append(rng.uniform(-2, 2, d["shape"]).astype(d["dtype"]))
    return feeds


def _ops(buf):
    m = load(buf)
    return [opcode_name(m.operatorCodes[o.opcodeIndex]) for o in m.subgraphs[0].operators]


@pytest.mark.parametrize("name", sorted(UNROLLED))
def test_unrolled_file_runs_in_litert_exactly_as_the_loop(name):
    buf = _read(name)
    out, done = unroll_while(buf)
    assert [u.trips for u in done] == UNROLLED[name], done
    assert "WHILE" in _ops(buf) and "WHILE" not in _ops(out)
    feeds = _feeds(buf)
    n = 3 if "stateful" in name else 1                 # a stateful model carries its state on
    for want, got in zip(_litert(buf, feeds, n), _litert(out, feeds, n)):
        assert len(want) == len(got)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_body_weights_are_shared_by_every_copy_not_repeated():
    buf = _read("gru_loop.float32.tflite")
    out, _ = unroll_while(buf)
    m = load(out)
    matrices = [t.name for t in m.subgraphs[0].tensors if t.buffer and m.buffers[t.buffer].data is not None
                and len(m.buffers[t.buffer].data) >= 60]
    # the GRU's two kernels and two biases once each, and the output tensor list's initial zeros
    assert sorted(matrices) == [b"TensorArrayV2_1", b"while/while/BiasAdd", b"while/while/BiasAdd_1",
                                b"while/while/MatMul", b"while/while/MatMul_1"]


@pytest.mark.parametrize("kind", ["float32", "int8", "float16"])
def test_a_loop_on_the_data_runs_to_its_static_bound_keeping_its_state(kind):
    """``tf.while_loop(max(v) < 4, v * 1.5 + 0.25, maximum_iterations=6)``: six predicated copies, each
    followed by a SELECT_V2 on that copy's condition; every trip count from 0 to 6 gives LiteRT's bytes."""
    buf = _read(f"while_data.{kind}.tflite")
    out, done = unroll_while(buf)
    assert [(u.trips, u.predicated) for u in done] == [(6, True)]
    assert "WHILE" not in _ops(out) and _ops(out).count("SELECT_V2") == 6
    from ai_edge_litert.interpreter import Interpreter

    d = Interpreter(model_content=buf).get_input_details()[0]
    trips = set()
    for top in (4.5, 3.9, 2.0, 1.0, 0.3, 0.01, -3.0):    # the largest element decides how often the body runs
        x = np.full(d["shape"], -1.0)
        x.flat[0] = top
        if d["dtype"] == np.int8:
            scale, zp = d["quantization"]
            x = np.clip(np.round(x / scale) + zp, -128, 127)
        x = x.astype(d["dtype"])
        want, got = _litert(buf, [x])[0][0], _litert(out, [x])[0][0]
        assert want.tobytes() == got.tobytes(), top
        v, n = max(float(top), -1.0), 0
        while v < 4.0 and n < 6:
            v, n = v * 1.5 + 0.25, n + 1
        trips.add(n)
    assert len(trips) >= 4 if kind != "int8" else len(trips) >= 2


def _edited(name, edit):
    from tvm_memsched.tflite.builder import serialize

    m = load(_read(name))
    edit(m)
    return serialize(m)


def test_a_loop_on_the_data_with_no_static_bound_stays_a_loop_and_says_why():
    """The same loop with its condition cut down to ``max(v) < 4`` (no trip limit): nothing bounds it."""
    def data_only(m):
        cond = m.subgraphs[1]
        and_op = cond.operators[-1]              # LOGICAL_AND(counter < 6, max(v) < 4)
        cond.outputs = [int(and_op.inputs[1])]
        cond.operators = cond.operators[:-1]
    buf = _edited("while_data.float32.tflite", data_only)
    out, done = unroll_while(buf)
    assert out is buf
    assert [(u.trips, u.reason) for u in done] == [
        (None, "its condition depends on the data and nothing static bounds its trips")]


def test_a_loop_whose_state_changes_type_stays_a_loop():
    def retype(m):
        body = m.subgraphs[2]
        body.tensors[int(body.outputs[1])].type = 1          # FLOAT16 where the loop hands on FLOAT32
    buf = _edited("while.float32.tflite", retype)
    out, done = unroll_while(buf)
    assert out is buf and "changes its type or quantization" in done[0].reason


def test_a_loop_over_the_trip_limit_stays_a_loop(monkeypatch):
    monkeypatch.setattr(tflite_unroll, "MAX_TRIPS", 2)
    buf = _read("while.float32.tflite")
    out, done = unroll_while(buf)
    assert out is buf and done[0].trips is None and "more than 2 times" in done[0].reason


def test_a_loop_over_the_operator_limit_stays_a_loop():
    buf = _read("gru_loop.float32.tflite")
    out, done = unroll_while(buf, max_ops=20)
    assert out is buf and done[0].trips is None and "would exceed 20 operators" in done[0].reason


def test_files_without_loops_and_other_bytes_are_returned_as_they_are():
    buf = _read("add.float32.tflite")
    assert unroll_while(buf) == (buf, [])
    assert unroll_while(b"not a model") == (b"not a model", [])


@pytest.mark.slow
def test_micro_runs_unrolled_loops_and_refuses_an_unbounded_one_by_name(tmp_path):
    """The Keras GRU loop runs on the board like LiteRT; TFLite Micro's outputs for it are undefined (its
    body slices tensor lists whose shape changes from step to step, which TFLM does not resize). The int8 loop
    on the data runs bit for bit as TFLite Micro runs the WHILE; with no bound it is refused by name."""
    proc = run("micro", os.path.join(FOLDER, "gru_loop.float32.tflite"), "-b", "mps2-an386", "--out",
               str(tmp_path / "gru"), "--run", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vs LiteRT reference kernels: max abs diff" in proc.stdout and "e-08 (ok)" in proc.stdout
    assert "TFLite Micro's outputs are undefined (the loop body's tensors change shape" in proc.stdout
    proc = run("micro", os.path.join(FOLDER, "while_data.int8.tflite"), "-b", "mps2-an386", "--out",
               str(tmp_path / "data"), "--run", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vs TFLite Micro: bit-identical (ok)" in proc.stdout

    def data_only(m):
        cond = m.subgraphs[1]
        cond.outputs = [int(cond.operators[-1].inputs[1])]
        cond.operators = cond.operators[:-1]
    path = tmp_path / "unbounded.tflite"
    path.write_bytes(_edited("while_data.int8.tflite", data_only))
    proc = run("micro", str(path), "-b", "mps2-an386", "--out", str(tmp_path / "unbounded"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert ("WHILE 'while;Identity' stays a loop: its condition depends on the data and nothing static bounds "
            "its trips") in proc.stderr


def test_compare_on_an_unrolled_int8_loop(capsys):
    """The nested int8 loop through compare: TVM's default build keeps it one kernel with no planned activation
    (the report says so rather than dividing by zero); ours lowers it to integer kernels, same numbers."""
    from tvm_memsched.app.cli import main as cli_main

    rc = cli_main(["compare", os.path.join(FOLDER, "while_nested.int8.tflite"), "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "planned activation memory: TVM default 0 B" in text and "plans no activation memory" in text
    assert "(ok)" in text and "MISMATCH" not in text


def test_a_loop_naming_a_missing_subgraph_stays_a_loop_and_says_why():
    """A hostile file: the WHILE's body index points past the subgraphs."""
    from tvm_memsched.tflite.builder import serialize

    m = load(_read("while.float32.tflite"))
    op = m.subgraphs[0].operators[0]
    op.builtinOptions.bodySubgraphIndex = 99
    buf = serialize(m)
    out, done = unroll_while(buf)
    assert out is buf and done[0].trips is None and "subgraph (1, 99) does not exist" in done[0].reason


def test_a_static_loop_value_past_the_size_limit_stays_a_loop(monkeypatch):
    monkeypatch.setattr(tflite_unroll, "MAX_STATIC_ELEMENTS", 2)     # the LSTM's slice positions have 3
    buf = _read("unidirectional_sequence_lstm_stateful.float32.tflite")
    out, done = unroll_while(buf)
    assert out is buf and done[0].trips is None and "grows past 2" in done[0].reason
