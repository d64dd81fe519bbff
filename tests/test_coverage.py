"""The operator coverage contract: every coverage model (tests/data/coverage, made by TensorFlow's
TFLiteConverter) that a reference runtime runs gives that runtime's outputs in our build - bit for bit
for integer kinds against TFLite Micro (LiteRT's reference kernels where TFLite Micro refuses the file) -
or fails with the named error listed in :data:`KNOWN` and its reason. ``docs/bench/coverage`` has the
same files through ``compare`` and ``micro --run`` (scripts/bench_coverage.py). In the quick subset (one test per
operator family and kind, tiny shapes: ~4 minutes of the suite on 2 cores)."""

import re

import pytest

import coverage_models as C

#: files that do not run as their reference does yet: file -> (a regex the verdict's detail must match, why)
KNOWN = {
}

ENTRIES = C.entries()


def test_the_manifest_lists_every_file_and_each_holds_its_operator():
    import os

    from tvm_memsched.tflite.builder import load, opcode_name

    files = {f for f in os.listdir(C.FOLDER) if f.endswith(".tflite")}
    assert files == {e["file"] for e in ENTRIES}
    for e in ENTRIES:
        m = load(C.read(e))
        ops = {opcode_name(m.operatorCodes[o.opcodeIndex]) for sg in m.subgraphs for o in sg.operators or []}
        assert ops == set(e["operators"]), e["file"]
    assert set(KNOWN) <= files


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_coverage_model_runs_as_its_reference_runtime(entry):
    verdict, detail = C.check(entry)
    if entry["file"] in KNOWN:
        pattern, why = KNOWN[entry["file"]]
        assert verdict != "ok" and re.search(pattern, detail), f"{verdict}: {detail} (listed: {why})"
        return
    if verdict == "n/a":
        pytest.skip(f"no reference runtime runs the file: {detail}")
    assert verdict == "ok", detail
