"""The runtimes users deploy, side by side with compare: ONNX Runtime and LiteRT timed on the same file and inputs,
each in a process of its own."""

import json

import numpy as np
import pytest

from onnx_models import zoo_ops_model
from tvm_memsched import zoo
from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.app.yardsticks import runtime_timings


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("y") / "model.onnx"
    path.write_bytes(zoo_ops_model(batch=1))
    return str(path)


def test_onnxruntime_timed_with_one_thread_and_all_cores(onnx_file):
    pytest.importorskip("onnxruntime")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    timings = runtime_timings(onnx_file, [x], repeat=3, budget=2.0)
    assert [(t.runtime, t.threads) for t in timings] == [("ONNX Runtime", 1), ("ONNX Runtime", 0)]
    for t in timings:
        assert t.error is None, t.error
        assert 0 < t.seconds < 2.0 and 1 <= t.runs <= 3
        assert t.rss_growth_bytes > 0          # a session and its arena take memory


def test_litert_timed_on_a_zoo_int8_file(tmp_path):
    pytest.importorskip("ai_edge_litert")
    path = tmp_path / "m.tflite"
    path.write_bytes(zoo.tflite("ds_cnn", "int8"))
    x = np.random.default_rng(0).integers(-128, 128, (1, 49, 10, 1)).astype("int8")
    (t,) = runtime_timings(str(path), [x], threads=(1,), repeat=2, budget=2.0)
    assert t.runtime == "LiteRT" and t.error is None and t.seconds > 0 and t.rss_growth_bytes > 0


def test_a_file_the_runtime_refuses_is_reported_not_raised(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    (t,) = runtime_timings(str(bad), [], threads=(1,))
    assert t.seconds is None and t.error


def test_compare_prints_and_saves_the_runtimes(onnx_file, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "c.json"
    assert cli_main(["compare", onnx_file, "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "ONNX Runtime (1 thread):" in text and "ONNX Runtime (all cores):" in text
    data = json.loads(out.read_text())
    assert [r["threads"] for r in data["runtimes"]] == [1, 0]
    assert all(r["seconds"] > 0 for r in data["runtimes"])
    assert cli_main(["compare", onnx_file, "--no-runtimes", "-q"]) == 0
    assert "ONNX Runtime" not in capsys.readouterr().out


def test_a_zoo_network_is_timed_in_litert_as_the_zoo_converts_it():
    """zoo:NAME (float): the zoo's own .tflite of the network, on random inputs of its NHWC shapes."""
    pytest.importorskip("ai_edge_litert")
    from tvm_memsched.app.yardsticks import spec_timings

    (t,) = spec_timings("zoo:swiftnet_like", zoo.load("swiftnet_like"), threads=(1,), repeat=2, budget=2.0)
    assert t.runtime == "LiteRT" and t.error is None and t.seconds > 0
    assert spec_timings("model.pt2", None) == []
