"""The tutorials run as documented."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_tutorial(name):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tutorials", name)], capture_output=True, text=True,
                       env=env, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_relax_tutorial():
    out = run_tutorial("relax_memory_passes.py")
    assert "outputs match TVM's default build" in out
    assert "(reordered, proven optimal)" in out
    assert "planned activation memory" in out and "numerics: identical" in out
