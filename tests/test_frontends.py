"""ONNX and PyTorch (.pt2) model files: import, every command that takes a model, and clean errors."""

import io
import json

import numpy as np
import pytest

import onnx_models
from test_cli import assert_clean_error, run
from tvm_memsched.core.errors import InputFileError, MemschedError, UnsupportedError
from tvm_memsched.relax.frontends.frontend import from_file
from tvm_memsched.relax.frontends.onnx_fold import fold_shapes
from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes
from tvm_memsched.relax.frontends.torch_frontend import from_pt2_bytes
from tvm_memsched.zoo import torch_nets

#: small versions of the public architectures (32x32 inputs): name -> network
TINY = {
    "squeezenet": lambda: torch_nets.squeezenet(0.25, 10),
    "inception_v1": lambda: torch_nets.inception_v1(0.125, 10, modules=2),
    "densenet": lambda: torch_nets.densenet(0.25, 10, blocks=(2, 2), growth=16),
    "shufflenet_v2": lambda: torch_nets.shufflenet_v2(0.25, 10, repeats=(1, 2, 1)),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every tiny network as .onnx and .pt2, the helper graph, and a .pt2 with a dynamic batch."""
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, make in TINY.items():
        net = make()
        torch_nets.export_onnx(net, d / f"{name}.onnx", 32)
        out[f"{name}.onnx"] = str(d / f"{name}.onnx")
    torch_nets.export_pt2(TINY["squeezenet"](), d / "squeezenet.pt2", 32)
    torch_nets.export_pt2(TINY["squeezenet"](), d / "squeezenet_dyn.pt2", 32, dynamic_batch=True)
    torch_nets.export_onnx(TINY["squeezenet"](), d / "squeezenet_dyn.onnx", 32, dynamic_batch=True)
    (d / "zoo_ops.onnx").write_bytes(onnx_models.zoo_ops_model())
    (d / "unsupported.onnx").write_bytes(onnx_models.unsupported_model())
    for k in ("squeezenet.pt2", "squeezenet_dyn.pt2", "squeezenet_dyn.onnx", "zoo_ops.onnx", "unsupported.onnx"):
        out[k] = str(d / k)
    out["dir"] = d
    return out


def _ops(path):
    import onnx

    return {n.op_type for n in onnx.load(path).graph.node}


def test_architectures_use_the_public_zoo_operators(files):
    ops = set().union(*(_ops(files[f"{n}.onnx"]) for n in TINY)) | _ops(files["zoo_ops.onnx"])
    assert {"Conv", "BatchNormalization", "Concat", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm",
            "ConstantOfShape", "Unsqueeze", "Reshape", "Transpose", "Shape", "Gather", "Slice"} <= ops


@pytest.mark.parametrize("name", list(TINY))
def test_onnx_imports_with_static_shapes(files, name):
    mod = from_file(files[f"{name}.onnx"])
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [1, 3, 32, 32]


def test_shape_arithmetic_is_folded_and_the_import_matches_onnx_reference():
    """ConstantOfShape(Shape), Gather/Unsqueeze/Concat -> Reshape: folded; outputs equal ONNX's reference."""
    import onnx
    import tvm
    from onnx.reference import ReferenceEvaluator
    from tvm import relax

    from tvm_memsched.relax.compare import run_vm

    buf = onnx_models.zoo_ops_model(batch=1)
    folded = fold_shapes(onnx.load_model_from_string(buf))
    assert not {"Shape", "Gather"} & {n.op_type for n in folded.graph.node}
    # the large ConstantOfShape and the ops on the data stay; Unsqueeze(gamma) of a 3-value constant folds
    assert {"ConstantOfShape", "Reshape", "Transpose"} <= {n.op_type for n in folded.graph.node}
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ReferenceEvaluator(onnx.load_model_from_string(buf)).run(None, {"x": x})[0]
    mod = from_onnx_bytes(buf)
    target = tvm.target.Target({"kind": "llvm"})
    got = run_vm(tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target)), [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_pt2_imports_and_dynamic_batch_needs_input_shape(files):
    mod = from_file(files["squeezenet.pt2"])
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [1, 3, 32, 32]
    with pytest.raises(UnsupportedError, match=r"input 'input' has a symbolic shape .*--input-shape input=1x3x32x32"):
        from_file(files["squeezenet_dyn.pt2"])
    mod = from_file(files["squeezenet_dyn.pt2"], {"input": (2, 3, 32, 32)})
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [2, 3, 32, 32]
    with pytest.raises(UnsupportedError, match="unknown input"):
        from_file(files["squeezenet_dyn.pt2"], {"y": (1, 3, 32, 32)})
    with pytest.raises(UnsupportedError, match="has shape"):
        from_file(files["squeezenet_dyn.pt2"], {"input": (1, 3, 16, 16)})


def test_onnx_errors():
    with pytest.raises(InputFileError, match="not an ONNX model"):
        from_onnx_bytes(b"\x08\x07garbage" * 10)
    buf = onnx_models.zoo_ops_model(batch=1)
    with pytest.raises(InputFileError):
        from_onnx_bytes(buf[: len(buf) // 2])
    with pytest.raises(UnsupportedError, match="unsupported ONNX operator.*Celu.*FancyOp|FancyOp.*Celu"):
        from_onnx_bytes(onnx_models.unsupported_model())
    with pytest.raises(UnsupportedError, match="symbolic shape"):
        from_onnx_bytes(onnx_models.zoo_ops_model())


def test_pt2_unsupported_operator_is_named():
    import torch

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.special.zeta(x, x)

    f = io.BytesIO()
    torch.export.save(torch.export.export(Net(), (torch.ones(2, 2),)), f)
    with pytest.raises(UnsupportedError, match="unsupported PyTorch operator.*zeta"):
        from_pt2_bytes(f.getvalue())


def test_info_schedule_simulate_on_onnx_and_pt2(files, tmp_path, capsys):
    for f in (files["squeezenet.onnx"], files["squeezenet.pt2"]):
        code, out, err = cli(capsys, "info", f, "--json")
        assert code == 0, err
        info = json.loads(out)
        assert info["ops"] > 20 and info["lower_bound_bytes"] > 0
    order = tmp_path / "order.json"
    code, _, err = cli(capsys, "schedule", files["zoo_ops.onnx"], "--input-shape", "x=1x3x16x16", "--method", "dp",
                       "-o", order, "-q")
    assert code == 0, err
    code, out, err = cli(capsys, "simulate", files["zoo_ops.onnx"], order, "--input-shape", "x=1x3x16x16", "--json")
    assert code == 0 and json.loads(out)["peak_bytes"] > 0, err


def bad_files(files, d) -> dict:
    """Truncated and corrupt .onnx and .pt2 files in ``d``: name -> path."""
    onnx_buf = open(files["squeezenet.onnx"], "rb").read()
    pt2_buf = open(files["squeezenet.pt2"], "rb").read()
    cases = {"trunc.onnx": onnx_buf[: len(onnx_buf) // 3], "garbage.onnx": b"not a model\n" * 20,
             "trunc.pt2": pt2_buf[: len(pt2_buf) // 3], "garbage.pt2": b"PK\x03\x04 broken" * 20}
    for name, data in cases.items():
        (d / name).write_bytes(data)
    return {name: str(d / name) for name in cases}


COMMANDS = {"info": [], "schedule": [], "compare": [], "micro": ["--board", "mps2-an386", "--out", "{d}/m"],
            "bench": []}


def _command(cmd, path, d):
    if cmd == "bench":
        return ["bench", "--models", path, "--no-tvm", "--methods", "program"]
    return [cmd, path, *[a.format(d=d) for a in COMMANDS[cmd]]]


def cli(capsys, *args):
    """Run the command in this process: (exit code, stdout, stderr)."""
    from tvm_memsched.app.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(result, *fragments):
    code, _, err = result
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_clean_errors_for_onnx_and_pt2_files(files, tmp_path, capsys):
    d = tmp_path
    bad = bad_files(files, d)
    for (name, path), cmd in zip(bad.items(), ["info", "compare", "micro", "bench"]):
        assert_one_line_error(cli(capsys, *_command(cmd, path, d)), name)
    assert_clean_error(run("info", bad["trunc.pt2"]), "trunc.pt2")      # torch's own logging stays quiet too
    assert_one_line_error(cli(capsys, "compare", files["unsupported.onnx"]), "unsupported ONNX operator", "FancyOp")
    assert_one_line_error(cli(capsys, "info", files["squeezenet_dyn.onnx"]), "symbolic shape", "--input-shape input=")
    assert_one_line_error(cli(capsys, "info", files["zoo_ops.onnx"], "--input-shape", "x=1x3"), "rank")
    assert_one_line_error(cli(capsys, "info", files["zoo_ops.onnx"], "--input-shape", "x=1xAx3"), "bad --input-shape")
    assert_one_line_error(cli(capsys, "info", "zoo:resnet", "--input-shape", "x=1x3x3x3"), "--input-shape and --input-value are for")
    assert_one_line_error(cli(capsys, "tflite", files["squeezenet.onnx"], "-o", d / "o.tflite"), ".tflite file")
    assert_one_line_error(cli(capsys, "compare", d / "missing.onnx"), "cannot read")
    assert_one_line_error(cli(capsys, "compare", d / "model.h5"), "unsupported model file", ".onnx")


@pytest.mark.slow
def test_every_command_refuses_every_bad_file(files, tmp_path, capsys):
    for name, path in bad_files(files, tmp_path).items():
        for cmd in COMMANDS:
            assert_one_line_error(cli(capsys, *_command(cmd, path, tmp_path)), name)


def test_bench_takes_model_files_without_tvm(files, capsys):
    code, out, err = cli(capsys, "bench", "--models", files["zoo_ops.onnx"], "--input-shape", "x=1x3x16x16",
                         "--no-tvm", "--methods", "program", "dp", "--repeats", "1")
    assert code == 0, err
    assert "zoo_ops" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_compare_onnx(files, name, tmp_path, capsys):
    out = tmp_path / "c.json"       # the command in this process (tests/test_cli.py runs compare in its own)
    code, _, err = cli(capsys, "compare", files[f"{name}.onnx"], "--json", str(out), "--no-runtimes")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["numerics_ok"] and d["ratio"] >= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("tradeoff", ["balanced", "speed"])
def test_compare_densenet_faster_kernels_in_place(files, tradeoff, tmp_path, capsys):
    """The DenseNet transition (a copy-first 1x1 convolution over its input, then an average pool over that) runs
    in place with the faster kernels and computes TVM's numbers (it did not while one kernel kept noalias)."""
    out = tmp_path / "c.json"
    code, _, err = cli(capsys, "compare", files["densenet.onnx"], "--tradeoff", tradeoff, "--json", str(out),
                       "--no-runtimes")
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["numerics_ok"] and d["max_abs_diff"] == 0.0 and d["inplace_taken"] > 0


@pytest.mark.slow
def test_compare_pt2(files, tmp_path, capsys):
    out = tmp_path / "c.json"
    code, _, err = cli(capsys, "compare", files["squeezenet.pt2"], "--json", str(out))
    assert code == 0, err
    pt2 = json.loads(out.read_text())
    assert pt2["numerics_ok"] and pt2["ratio"] > 1.2


def test_dynamic_onnx_batch_with_input_shape(files, capsys):
    code, out, err = cli(capsys, "info", files["squeezenet_dyn.onnx"], "--input-shape", "input=2x3x32x32", "--json")
    assert code == 0, err
    one = json.loads(cli(capsys, "info", files["squeezenet.onnx"], "--json")[1])
    assert json.loads(out)["lower_bound_bytes"] == 2 * one["lower_bound_bytes"]


@pytest.mark.slow
def test_bench_and_micro_on_onnx(files, tmp_path):
    p = run("bench", "--models", files["zoo_ops.onnx"], "--input-shape", "x=1x3x16x16", "--methods", "program",
            "auto", "--repeats", "1", "--no-plots")
    assert p.returncode == 0, p.stderr
    p = run("micro", files["zoo_ops.onnx"], "--input-shape", "x=1x3x16x16", "--board", "mps2-an386",
            "--out", str(tmp_path / "m"), "--run", "--host", "--no-measure")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "max abs error vs TVM" in p.stdout and "(ok)" in p.stdout


def test_input_shape_parsing():
    from tvm_memsched.app.models import parse_input_shapes

    assert parse_input_shapes(["a=1x2", "b=3"]) == {"a": (1, 2), "b": (3,)}
    for bad in (["a=1x0"], ["=1x2"], ["a"], ["a=1x2", "a=1x2"]):
        with pytest.raises(MemschedError):
            parse_input_shapes(bad)
