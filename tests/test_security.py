"""Model files are untrusted: each malicious file is built here and the tool must not run its code, read outside
the model's folder, write through planted links, allocate what it declares, or import a different model."""

import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tvm_memsched.core.errors import InputFileError, UntrustedModelError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def run(*args, cwd=None, limit_mb=None):
    """The CLI in a child; (returncode, stdout, stderr, child's peak RSS in MB)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "tvm_memsched", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    out, err = p.communicate(timeout=900)
    return p.returncode, out, err


def assert_refused(rc, err, *fragments):
    assert rc == 2, (rc, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# ------------------------------------------------------------------ .pt2
class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _pt2() -> bytes:
    f = io.BytesIO()
    torch.export.save(torch.export.export(_Net(), (torch.ones(1, 4),)), f)
    return f.getvalue()


class _Payload:
    """Unpickling this writes the marker file: the proof that the file's code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _rewrite(buf: bytes, change) -> bytes:
    """``buf`` with its entries passed through ``change(entries) -> entries`` (name -> bytes)."""
    src = zipfile.ZipFile(io.BytesIO(buf))
    entries = {n: src.read(n) for n in src.namelist()}
    entries = change(entries)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for n, data in entries.items():
            z.writestr(n, data)
    return out.getvalue()


def _payload_bytes(marker) -> bytes:
    f = io.BytesIO()
    torch.save(_Payload(str(marker)), f)
    return f.getvalue()


def _json_edit(name, fn):
    def change(entries):
        key = next(k for k in entries if k.endswith(name))
        d = json.loads(entries[key])
        fn(d)
        entries[key] = json.dumps(d).encode()
        return entries
    return change


def _malicious_pt2(kind: str, marker) -> bytes:
    buf = _pt2()
    payload = _payload_bytes(marker)
    if kind == "pickled_weight":
        def change(entries):
            key = next(k for k in entries if k.endswith("model_weights_config.json"))
            d = json.loads(entries[key])
            d["config"]["fc.weight"]["use_pickle"] = True
            entries[key] = json.dumps(d).encode()
            entries[key.replace("model_weights_config.json", d["config"]["fc.weight"]["path_name"])] = payload
            return entries
        return _rewrite(buf, change)
    if kind == "legacy_weights":
        return _rewrite(buf, lambda e: {**e, "archive/data/weights/model.pt": payload})
    if kind == "opaque_constant":
        def change(entries):
            key = next(k for k in entries if k.endswith("model_constants_config.json"))
            d = json.loads(entries[key])
            d["config"]["evil"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                   "tensor_meta": None}
            entries[key] = json.dumps(d).encode()
            entries["archive/data/constants/opaque_obj_0"] = payload
            return entries
        return _rewrite(buf, change)
    if kind == "aoti":
        return _rewrite(buf, lambda e: {**e, "archive/data/aotinductor/model/model.wrapper.so": b"\x7fELF"})
    if kind == "sympy":
        def fn(d):
            d["graph_module"]["graph"]["sym_int_values"] = {
                "evil": {"as_expr": {"expr_str": f"__import__('os').system('touch {marker}')", "hint": None}}}
        return _rewrite(buf, _json_edit("models/model.json", fn))
    if kind == "target":
        def fn(d):
            d["graph_module"]["graph"]["nodes"][0]["target"] = "torch.os.system"
        return _rewrite(buf, _json_edit("models/model.json", fn))
    raise ValueError(kind)


def test_pt2_sample_inputs_never_unpickled(tmp_path):
    from tvm_memsched.relax.frontends.pt2_archive import load_exported_program

    marker = tmp_path / "ran"
    clean = _pt2()
    ep = load_exported_program(_rewrite(clean, lambda e: {**e, next(k for k in e if "sample_inputs" in k):
                                                          _payload_bytes(marker)}))
    assert not marker.exists()
    x = torch.randn(1, 4)
    assert torch.equal(ep.module()(x), torch.export.load(io.BytesIO(clean)).module()(x))


@pytest.mark.parametrize("kind,fragment", [("pickled_weight", "pickled"), ("legacy_weights", "pickle"),
                                           ("opaque_constant", "pickled"), ("aoti", "native code"),
                                           ("sympy", "shape expression"), ("target", "operator")])
def test_pt2_needing_code_is_refused(tmp_path, kind, fragment):
    from tvm_memsched.relax.frontends.pt2_archive import load_exported_program

    marker = tmp_path / "ran"
    buf = _malicious_pt2(kind, marker)
    with pytest.raises(UntrustedModelError, match=fragment) as e:
        load_exported_program(buf)
    assert "--trust-model-code" in str(e.value)
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["info", "compare"])
def test_pt2_refused_by_the_cli(tmp_path, command):
    marker = tmp_path / "ran"
    path = tmp_path / "m.pt2"
    path.write_bytes(_malicious_pt2("pickled_weight", marker))
    rc, out, err = run(command, str(path), "--no-run" if command == "compare" else "--json", cwd=tmp_path)
    assert_refused(rc, err, "--trust-model-code", "pickled")
    assert not marker.exists()


def test_pt2_trust_is_an_explicit_opt_in(tmp_path):
    from tvm_memsched.relax.frontends.pt2_archive import load_exported_program, trusting_model_code

    marker = tmp_path / "ran"
    buf = _malicious_pt2("pickled_weight", marker)
    with trusting_model_code():
        try:
            load_exported_program(buf)
        except Exception:          # the payload is no tensor; what matters is that it ran
            pass
    assert marker.exists()


def test_pt2_corrupt_tables_are_input_errors():
    from tvm_memsched.relax.frontends.pt2_archive import load_exported_program

    def shrink(entries):
        key = next(k for k in entries if k.endswith("weights/weight_0"))
        entries[key] = entries[key][:8]
        return entries
    with pytest.raises(InputFileError, match="needs 48 bytes"):
        load_exported_program(_rewrite(_pt2(), shrink))
    with pytest.raises(InputFileError, match="not a readable"):
        load_exported_program(b"PK\x03\x04 not a zip")


def test_pt2_zero_stride_size_bomb_is_refused():
    """A 48-byte weight declared as a 2**20 x 2**20 view with zero strides would be materialised by the
    importer: refused before any tensor is made."""
    from tvm_memsched.core.errors import UnsupportedError
    from tvm_memsched.relax.frontends.pt2_archive import load_exported_program

    def fn(d):
        meta = d["config"]["fc.weight"]["tensor_meta"]
        meta["sizes"] = [{"as_int": 2 ** 20}, {"as_int": 2 ** 20}]
        meta["strides"] = [{"as_int": 0}, {"as_int": 0}]
    with pytest.raises(UnsupportedError, match="limit per tensor"):
        load_exported_program(_rewrite(_pt2(), _json_edit("model_weights_config.json", fn)))


# ------------------------------------------------------------------ ONNX external data
def _onnx_with_external(folder, location="w.bin", offset=0, length=None, write_data=True):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length or w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    if write_data:
        with open(os.path.join(folder, "w.bin"), "wb") as f:
            f.write(w.tobytes())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [t])
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_onnx_external_data_beside_the_model_from_any_directory(tmp_path, monkeypatch):
    from tvm_memsched.relax.frontends.frontend import from_file

    (tmp_path / "model").mkdir()
    path = _onnx_with_external(str(tmp_path / "model"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    mod = from_file(path)
    import tvm
    from tvm import relax

    from tvm_memsched.relax.compare import run_vm

    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    y = run_vm(tvm.compile(relax.get_pipeline("zero")(mod), "llvm"), [x])[0]
    np.testing.assert_allclose(y, x @ np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("case,fragment", [("dotdot", "outside"), ("absolute", "outside"),
                                           ("symlink", "leads outside"), ("length", "needs 48 bytes"),
                                           ("short_file", "which has"), ("cwd_only", "cannot read")])
def test_onnx_external_data_stays_in_the_model_folder(tmp_path, monkeypatch, case, fragment):
    from tvm_memsched.relax.frontends.frontend import from_file

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S3CR3T!!" * 64)
    model = tmp_path / "model"
    model.mkdir()
    if case == "dotdot":
        path = _onnx_with_external(str(model), "../secret.bin", write_data=False)
    elif case == "absolute":
        path = _onnx_with_external(str(model), str(secret), write_data=False)
    elif case == "symlink":
        os.symlink(secret, model / "link.bin")
        path = _onnx_with_external(str(model), "link.bin", write_data=False)
    elif case == "length":
        path = _onnx_with_external(str(model), length=16)
    elif case == "short_file":
        path = _onnx_with_external(str(model), offset=40)
    else:                          # the data only exists in the current directory, not beside the model
        path = _onnx_with_external(str(model), "secret.bin", write_data=False)
        monkeypatch.chdir(tmp_path)
    with pytest.raises(InputFileError, match=fragment):
        from_file(path)


def test_onnx_dims_against_data(tmp_path):
    from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes

    t = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    t.dims[:] = [2, 2000]
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    buf = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(InputFileError, match="needs 16,000 bytes of data, the file holds 16"):
        from_onnx_bytes(buf)


# ------------------------------------------------------------------ size bombs
def _constant_of_shape_bomb(shape) -> bytes:
    s = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array(shape, np.int64)))
    c = helper.make_node("ConstantOfShape", ["s"], ["c"])
    a = helper.make_node("Add", ["x", "c"], ["y"])
    g = helper.make_graph([s, c, a], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("shape", [[1, 2 ** 19, 2 ** 10], [2 ** 40], [2 ** 20, 2 ** 20, 4]])
def test_onnx_size_bomb_refused_before_allocating(shape):
    import resource

    from tvm_memsched.core.errors import UnsupportedError
    from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes

    buf = _constant_of_shape_bomb(shape)
    assert len(buf) < 200
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UnsupportedError, match="limit per tensor"):
        from_onnx_bytes(buf)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500 * 1024   # KB: under 500 MB more


def _tflite_with_activation(shape) -> bytes:
    from tvm_memsched.tflite.builder import ModelBuilder, tfl

    mb = ModelBuilder()
    x = mb.tensor("x", shape)
    y = mb.tensor("y", shape)
    mb.op(tfl.BuiltinOperator.RELU, [x], [y])
    return mb.finish(inputs=[x], outputs=[y])


@pytest.mark.parametrize("shape", [[1, 100000, 100000, 3], [2 ** 31 - 1, 2 ** 31 - 1]])
def test_tflite_huge_activation_refused(tmp_path, shape):
    path = tmp_path / "huge.tflite"
    path.write_bytes(_tflite_with_activation(shape))
    rc, out, err = run("compare", str(path), "--no-run")
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


# ------------------------------------------------------------------ writes through planted links
def test_coral_does_not_write_through_links(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(target, out / "manifest.json")
    os.symlink(target, out / "resnet_seg0.tflite")
    rc, _, err = run("coral", "zoo:resnet:int8", "--stages", "2", "--out", str(out), "--no-verify")
    assert rc == 0, err
    assert target.read_text() == "untouched"
    assert not os.path.islink(out / "manifest.json")
    assert json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_micro_does_not_write_through_links(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("untouched")
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(target, out / "tvm_memsched_rt.c")
    os.symlink(victim, out / "include")
    os.symlink(victim, out / "build")
    rc, _, err = run("micro", "zoo:resnet:int8", "--board", "mps2-an386", "--out", str(out), "--no-check-fit")
    assert rc == 0, err
    assert target.read_text() == "untouched"
    assert sorted(os.listdir(victim)) == ["keep.txt"]
    assert not os.path.islink(out / "include") and os.path.isfile(out / "tvm_memsched_rt.c")


def test_output_dir_replaces_links_below_the_root(tmp_path):
    from tvm_memsched.core.files import atomic_write, output_dir

    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, tmp_path / "sub")
    d = output_dir(tmp_path, "sub", "deeper")
    atomic_write(os.path.join(d, "f.txt"), "x")
    assert os.listdir(victim) == [] and not os.path.islink(tmp_path / "sub")
    with pytest.raises(OSError):
        output_dir(tmp_path, "../escape")


# ------------------------------------------------------------------ duplicate tensor names
def _duplicate_named_tflite() -> bytes:
    """x + 1 -> "t"; t * 3 -> "t" (the same name): TVM keyed by name would read the wrong "t"."""
    from tvm_memsched.tflite.builder import ModelBuilder, load, serialize, tfl

    mb = ModelBuilder()
    x = mb.tensor("x", [1, 8])
    one = mb.tensor("one", [1, 8], data=np.ones((1, 8), np.float32))
    three = mb.tensor("three", [1, 8], data=np.full((1, 8), 3, np.float32))
    t1 = mb.tensor("t", [1, 8])
    t2 = mb.tensor("t2", [1, 8])
    y = mb.tensor("y", [1, 8])
    mb.op(tfl.BuiltinOperator.ADD, [x, one], [t1])
    mb.op(tfl.BuiltinOperator.MUL, [t1, three], [t2])
    mb.op(tfl.BuiltinOperator.SUB, [t2, t1], [y])           # (x+1)*3 - (x+1) = 2x + 2
    model = load(mb.finish(inputs=[x], outputs=[y]))
    model.subgraphs[0].tensors[t2].name = b"t"              # the builder refuses this; a file need not
    return serialize(model)


def test_duplicate_names_import_by_index():
    import tvm
    from tvm import relax

    from tvm_memsched.relax.compare import run_vm
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.tflite.verify import litert_run_sequence

    buf = _duplicate_named_tflite()
    mod = from_tflite_bytes(buf)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    ours = run_vm(tvm.compile(relax.get_pipeline("zero")(mod), "llvm"), [x])[0]
    ref = list(litert_run_sequence(buf, [[x]], reference_kernels=True)[0].values())[0]
    np.testing.assert_allclose(ours, 2 * x + 2, rtol=1e-6)
    np.testing.assert_array_equal(ours, ref)


def test_compare_checks_the_import_against_litert(tmp_path):
    path = tmp_path / "dup.tflite"
    path.write_bytes(_duplicate_named_tflite())
    rc, out, err = run("compare", str(path), "--json", str(tmp_path / "c.json"))
    assert rc == 0, err
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["reference"].startswith("LiteRT") and c["reference_ok"] and c["reference_max_abs_diff"] == 0


def test_graph_json_float_size_bomb(tmp_path):
    from tvm_memsched.core import example_graph, graph_to_dict

    d = graph_to_dict(example_graph())
    d["tensors"][0]["bytes"] = 1e308
    path = tmp_path / "g.json"
    path.write_text(json.dumps(d))
    rc, out, err = run("info", str(path))
    assert_refused(rc, err, "above the limit")


def test_litert_is_never_asked_to_allocate_a_declared_size_bomb():
    """The shape folding at import runs LiteRT on the file: a tensor declaring more than MAX_TENSOR_BYTES
    stops it before LiteRT allocates anything (the reader then refuses the file by name)."""
    import numpy as np

    from tvm_memsched.relax.frontends import tflite_fold

    class Tensor:
        def __init__(self, shape):
            self.shape = np.array(shape, np.int32)

        def ShapeLength(self):  # noqa: N802 - the flatbuffers accessor names
            return len(self.shape)

        def ShapeAsNumpy(self):  # noqa: N802
            return self.shape

        def Type(self):  # noqa: N802 - FLOAT32
            return 0

    class Subgraph:
        def __init__(self, shapes):
            self.tensors = [Tensor(s) for s in shapes]

        def TensorsLength(self):  # noqa: N802
            return len(self.tensors)

        def Tensors(self, i):  # noqa: N802
            return self.tensors[i]

    assert tflite_fold._invoked(b"not a model", Subgraph([[1, 4], [16384, 16384, 2]])) is None   # 2 GiB of float32
