"""Real streaming models: microWakeWord keyword spotters as shipped in the pymicro-wakeword wheel.

These are converter output (CALL_ONCE initialisation, six resource variables as ring buffers, int8
convolutions), the kind of model ESP32 voice assistants run under TensorFlow Lite Micro. Random features
drive the final sigmoid to 0 almost always, so the checks also expose the values assigned to the state
variables and the logit as model outputs: a wrong state update or kernel shows up there.
"""

import importlib.util
import os

import numpy as np
import pytest

from test_cli import run
from test_streaming import planned_stream
from tvm_memsched.tflite.builder import serialize
from tvm_memsched.tflite.reader import load_model, read_tflite
from tvm_memsched.tflite.verify import litert_run_sequence, random_input_sequence, tflm_run_sequence

_SPEC = importlib.util.find_spec("pymicro_wakeword")
pytestmark = pytest.mark.skipif(_SPEC is None and not os.environ.get("CI"),
                                reason="pymicro-wakeword (a test extra) is not installed")


def wakeword(name: str) -> bytes:
    with open(os.path.join(_SPEC.submodule_search_locations[0], "models", f"{name}.tflite"), "rb") as f:
        return f.read()


def with_internal_outputs(buf: bytes) -> bytes:
    """``buf`` with every value assigned to a variable and the inputs of the ops producing the outputs
    (the logit before the sigmoid) added to subgraph 0's outputs."""
    model = load_model(buf)
    sg = model.subgraphs[0]
    outputs = [int(t) for t in sg.outputs]
    consts = {i for i, t in enumerate(sg.tensors) if model.buffers[t.buffer].data is not None}
    extra = []
    for op in sg.operators:
        ins, outs = [int(i) for i in op.inputs if i >= 0], [int(o) for o in (op.outputs if op.outputs is not None
                                                                            else [])]
        if not outs and len(ins) == 2:                                   # ASSIGN_VARIABLE(handle, value)
            extra.append(ins[1])
        if set(outs) & set(outputs):
            extra += [i for i in ins if i not in consts and sg.tensors[i].type != 20]   # not RESOURCE
    sg.outputs = outputs + [t for t in dict.fromkeys(extra) if t not in outputs]
    return serialize(model)


@pytest.fixture(scope="module")
def nabu():
    return with_internal_outputs(wakeword("okay_nabu"))


def test_the_models_are_streaming_models(nabu):
    for name in ("okay_nabu", "hey_mycroft"):
        m = read_tflite(wakeword(name))
        assert m.stateful and len(m.state.variables) == 6 and m.state.init_subgraphs == [1]
    seq = random_input_sequence(nabu, 8, seed=1)
    ref = litert_run_sequence(nabu, seq, reference_kernels=True)
    assert len(ref[0]) == 8                                              # output, logit and six states
    tflm = tflm_run_sequence(nabu, seq)
    assert all(np.array_equal(a, b) for r, t in zip(ref, tflm) for a, b in zip(r.values(), t))
    states = [np.concatenate([np.asarray(v).ravel() for v in list(r.values())[2:]]) for r in ref]
    assert not np.array_equal(states[3], states[7])                      # the ring buffers move


def test_offline_plan_of_a_real_streaming_model(nabu):
    res = planned_stream(nabu, time_limit=5)
    arena = {k: v["min_arena"] for k, v in res.measured.items()}
    assert arena["out_plan"] <= arena["in"]
    assert res.measured["out_plan"]["head"] <= res.measured["in"]["head"]


def test_micro_runs_a_real_streaming_model_in_qemu_like_litert(nabu, tmp_path):
    (tmp_path / "nabu.tflite").write_bytes(nabu)
    p = run("micro", str(tmp_path / "nabu.tflite"), "--board", "mps2-an386", "--out", str(tmp_path / "m"), "--run")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "8 output(s) x 20 invocations, max abs error vs LiteRT (reference kernels) 0 (ok)" in p.stdout
    assert "6 resource variable(s) in static buffers outside the arena" in p.stdout
    assert "at most TFLM's" in p.stdout
