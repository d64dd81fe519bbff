"""The tvm-memsched command: outputs, and clean errors (exit 2, one line, no traceback)."""

import json
import os
import subprocess
import sys

import pytest

from tvm_memsched.core import example_graph, graph_to_dict, simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tvm_memsched", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps(graph_to_dict(example_graph())))
    return p


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(p)


def assert_clean_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.mark.parametrize("method", ["program", "kahn", "rpo"])
def test_schedule_then_simulate(tmp_path, graph_file, method):
    out = tmp_path / "o.json"
    p = run("schedule", str(graph_file), "--method", method, "--output", str(out))
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert set(res) >= {"order", "peak_bytes", "lower_bound_bytes", "optimal", "method", "seconds"}
    assert res["method"] == method
    g = example_graph()
    assert res["peak_bytes"] == simulate(g, res["order"]).peak
    s = run("simulate", str(graph_file), str(out), "--json")
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["peak_bytes"] == res["peak_bytes"]
    # a plain list works as an order file too
    lst = write(tmp_path, "list.json", res["order"])
    s2 = run("simulate", str(graph_file), lst)
    assert s2.returncode == 0 and str(res["peak_bytes"]) in s2.stdout


def test_info(graph_file):
    p = run("info", str(graph_file), "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["ops"] == example_graph().num_ops
    assert set(info["baseline_peaks"]) == {"program", "kahn", "rpo"}
    assert all(v >= info["lower_bound_bytes"] for v in info["baseline_peaks"].values())
    assert "lower bound" in run("info", str(graph_file)).stdout


def test_malformed_json(tmp_path):
    bad = write(tmp_path, "bad.json", "{\"tensors\": [")
    assert_clean_error(run("info", bad), "not valid JSON")


def test_missing_file(tmp_path):
    assert_clean_error(run("info", str(tmp_path / "nope.json")), "not found")


def test_cycle_in_file(tmp_path):
    g = {"tensors": [{"name": "a", "bytes": 1}, {"name": "b", "bytes": 1}],
         "ops": [{"name": "A", "inputs": ["b"], "outputs": ["a"]}, {"name": "B", "inputs": ["a"], "outputs": ["b"]}],
         "inputs": [], "outputs": []}
    assert_clean_error(run("schedule", write(tmp_path, "c.json", g), "--method", "rpo"), "cycle", "A", "B")


@pytest.mark.parametrize("order,fragment", [
    (["nope"], "unknown op 'nope'"),
    ({"ord": []}, "needs an 'order' list"),
    ("3", "must be a JSON list"),
])
def test_bad_order_files(tmp_path, graph_file, order, fragment):
    assert_clean_error(run("simulate", str(graph_file), write(tmp_path, "o.json", order)), fragment)


def test_negative_size(tmp_path):
    g = {"tensors": [{"name": "x", "bytes": -3}], "ops": [], "inputs": ["x"], "outputs": []}
    assert_clean_error(run("info", write(tmp_path, "n.json", g)), "non-negative integer")


def test_unknown_method_and_bad_time_limit(graph_file):
    p = run("schedule", str(graph_file), "--method", "magic")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = run("schedule", str(graph_file), "--method", "rpo", "--time-limit", "-1")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_unwritable_output(graph_file, tmp_path):
    assert_clean_error(run("schedule", str(graph_file), "--method", "rpo", "--output",
                           str(tmp_path / "no" / "dir" / "o.json")), "cannot write", "does not exist")


def test_demo_runs_without_terminal():
    p = run("demo", "--methods", "program", "rpo")
    assert p.returncode == 0, p.stderr
    assert "program" in p.stdout and "lower bound" in p.stdout


def test_compare_refuses_graph_json_and_corrupt_tflite(tmp_path, graph_file):
    assert_clean_error(run("compare", str(graph_file)), "graph JSON", "tvm-memsched schedule")
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 64)
    assert_clean_error(run("compare", str(bad)), "not a TFLite flatbuffer")
    trunc = tmp_path / "trunc.tflite"
    trunc.write_bytes(b"\x1c\x00\x00\x00TFL3" + b"\x00" * 8)
    assert_clean_error(run("compare", str(trunc)), "trunc.tflite")


# ------------------------------------------------------------ output paths, before any work
def test_output_equal_to_input_is_refused_unless_forced(tmp_path):
    from tvm_memsched.core.generators import random_dag
    from tvm_memsched.core.io import save_graph

    g = tmp_path / "g.json"
    save_graph(random_dag(10, seed=2), str(g))
    before = g.read_bytes()
    (tmp_path / "link.json").symlink_to(g)
    for out in ("g.json", "./g.json", str(g)):
        assert_clean_error(run("schedule", "g.json", "-o", out, "--method", "rpo", cwd=tmp_path), "input file", "--force")
    assert_clean_error(run("schedule", "link.json", "-o", "g.json", cwd=tmp_path), "input file")
    assert g.read_bytes() == before
    proc = run("schedule", "g.json", "-o", "g.json", "--method", "rpo", "--force", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert g.read_bytes() != before and "order" in g.read_text()


def test_output_paths_are_checked_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    for args, fragment in [
        (("tflite", "zoo:resnet", "-o", "out.tflite", "--json", "nodir/r.json"), "does not exist"),
        (("compare", "zoo:resnet", "--json", "nodir/c.json"), "does not exist"),
        (("micro", "zoo:resnet", "--board", "mps2-an386", "--out", "file"), "not a directory"),
        (("micro", "zoo:resnet", "--board", "mps2-an386", "--out", "d", "--json", "nodir/m.json"), "does not exist"),
        (("micro", "zoo:resnet", "--board", "mps2-an386", "--out", "d", "--host"), "--host only applies with --run"),
        (("schedule", "zoo:resnet", "-o", "."), "is a directory"),
        (("tflite", "zoo:resnet", "-o", "same.json", "--json", "same.json"), "same file"),
    ]:
        assert_clean_error(run(*args, cwd=tmp_path), fragment)
    assert not (tmp_path / "out.tflite").exists() and not (tmp_path / "d").exists()   # nothing was made


def test_native_log_lines_go_to_a_log_file(capfd):
    """What TVM's C++ writes to descriptor 2 is kept in a log file; --verbose shows it, a failure names it."""
    import argparse

    from tvm_memsched.app.cli import _with_native_log

    def job(rc):
        def fn(args):
            os.write(2, b"[12:00:00] block_builder.cc:67: Warning: from C++\n")
            print("progress from Python", file=sys.stderr)
            return rc
        return fn

    assert _with_native_log(argparse.Namespace(fn=job(0), verbose=False)) == 0
    err = capfd.readouterr().err
    assert "progress from Python" in err and "from C++" not in err
    assert _with_native_log(argparse.Namespace(fn=job(0), verbose=True)) == 0
    assert "from C++" in capfd.readouterr().err
    assert _with_native_log(argparse.Namespace(fn=job(2), verbose=False)) == 2
    err = capfd.readouterr().err
    assert "from C++" not in err and "TVM's log lines are in" in err
    path = err.strip().splitlines()[-1].split(" are in ")[1]
    assert "from C++" in open(path).read()
    os.remove(path)
