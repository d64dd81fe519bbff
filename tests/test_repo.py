"""Repository conventions: the README's two commands are what CI runs; core imports no TVM (at run time;
the static layering is tests/test_layering.py)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def test_readme_starts_with_two_commands_that_ci_runs():
    cmds = readme_commands()
    assert len(cmds) == 2
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    ci_lines = [ln.strip() for ln in ci.splitlines()]
    for cmd in cmds:
        assert cmd.strip() in ci_lines, f"CI does not run the README command: {cmd}"
    assert "pytest" in cmds[1]


def test_core_and_schedulers_import_without_tvm():
    code = ("import sys; import tvm_memsched, tvm_memsched.core, tvm_memsched.schedulers, tvm_memsched.app.cli; "
            "bad = [m for m in sys.modules if m == 'tvm' or m.startswith('tvm.') or m.startswith('torch') "
            "or m.startswith('matplotlib') or m.startswith('ortools')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
