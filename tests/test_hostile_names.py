"""Tensor names from a model file never reach generated C as written: quotes, newlines, #include, */, unicode."""

import os

import numpy as np
import pytest

from tvm_memsched import micro
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.frontends.names import c_identifier, c_safe_names
from tvm_memsched.tflite.builder import ModelBuilder, tfl

HOSTILE = ['my "input"\n#include "evil.h"\\', "out\u00e9 */ name", "a b", "a-b", "a_b", "3x3", "", "\t"]


def hostile_model():
    mb = ModelBuilder()
    x = mb.tensor(HOSTILE[0], [1, 4], np.float32)
    prev = x
    for i, name in enumerate(HOSTILE[1:6]):        # "a b", "a-b", "a_b" collide after sanitising
        t = mb.tensor(name or f"t{i}", [1, 4], np.float32)
        mb.op(tfl.BuiltinOperator.RELU if i % 2 == 0 else tfl.BuiltinOperator.TANH, [prev], [t])
        prev = t
    return from_tflite_bytes(mb.finish([x], [prev]))


def test_identifiers_are_c_identifiers_and_unique():
    mod, renamed = c_safe_names(hostile_model())
    names = [p.name for p in mod["main"].params]
    assert all(c_identifier(n) == n for n in names)
    assert HOSTILE[0] in renamed.values()
    assert c_identifier("") == "v" and c_identifier("3x3") == "v_3x3"


def test_export_with_hostile_names_compiles_and_runs(tmp_path):
    exp = micro.export(hostile_model(), "mps2-an386", str(tmp_path), measure=False)
    for f in os.listdir(tmp_path):
        if f.endswith((".c", ".h")):
            text = open(os.path.join(tmp_path, f), encoding="utf-8").read()
            assert "#include \"evil" not in text and "\"input\"" not in text and "*/ name" not in text
    r = micro.run_host(exp)
    assert r.ok, r.summary()
    assert r.warnings == ""


@pytest.mark.slow
def test_hostile_names_run_in_qemu(tmp_path):
    exp = micro.export(hostile_model(), "mps2-an386", str(tmp_path), measure=False)
    r = micro.run_qemu(exp)
    assert r.ok, r.summary()
