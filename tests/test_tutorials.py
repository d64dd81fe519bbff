"""The tutorials run as documented."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow   # each tutorial compiles and runs models end to end


def run_tutorial(name, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tutorials", name), *args], capture_output=True,
                       text=True, env=env, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_relax_tutorial():
    out = run_tutorial("relax_memory_passes.py")
    assert "outputs match TVM's default build" in out
    assert "(reordered, proven optimal)" in out
    assert "planned activation memory" in out and "numerics: identical" in out


def test_tflite_coral_tutorial(tmp_path):
    out = run_tutorial("tflite_coral.py", str(tmp_path))
    assert "TFLite Micro arena: 309,008 -> 247,568 bytes" in out and "LiteRT outputs: bit-identical" in out
    assert "cp-sat   bottleneck 2.519 ms" in out and "proven optimal" in out and "learned  bottleneck" in out
    assert "chained segments vs whole model: bit-identical" in out
    assert sorted(os.listdir(tmp_path / "hrnet_coral")) == [f"hrnet_seg{k}.tflite" for k in range(4)] + [
        "manifest.json"]
