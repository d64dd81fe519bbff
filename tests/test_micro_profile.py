"""Per-layer profile of a microcontroller run: instructions and live arena bytes per kernel call in the report,
and the plot next to it."""

import json
import os

import numpy as np
import pytest

from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.micro.timeline import arena_timeline, live_bytes


def _brute_live(rows, n):
    out = []
    for k in range(n):
        used = set()
        for _, off, size, first, last in rows:
            if first <= k <= last:
                used.update(range(off, off + size))
        out.append(len(used))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_live_bytes_is_the_union_of_live_ranges(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    rows = []
    for i in range(int(rng.integers(0, 15))):
        first = int(rng.integers(0, n))
        rows.append((f"b{i}", int(rng.integers(0, 200)), int(rng.integers(1, 80)), first,
                     int(rng.integers(first, n))))
    assert live_bytes(rows, n) == _brute_live(rows, n)


def test_timeline_maps_binding_steps_to_kernel_calls():
    layout = [("in", "global", 0, 32, 0, 2), ("t", "global", 32, 16, 3, 5), ("ws", "global", 48, 8, 5, 5),
              ("gone", "global", 64, 8, 6, 6), ("other", "local", 0, 8, 0, 9), ("empty", "global", 0, 0, 0, 9)]
    steps = [2, 5]                       # call 0 at binding 2, call 1 at binding 5
    assert arena_timeline(layout, steps) == [("in", 0, 32, 0, 0), ("t", 32, 16, 1, 1), ("ws", 48, 8, 1, 1)]


def test_micro_profile_report_and_plot(tmp_path, capsys):
    """``micro --run --profile``: one row per kernel call in model_report.json whose instructions add up to the
    run's (the SysTick hooks add a few per call), whose live bytes never exceed the arena and cover each call's
    own arena operands; the plot is written next to the report."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "kws"
    assert cli_main(["micro", "zoo:ds_cnn:int8", "-b", "mps2-an386", "--out", str(out), "--run", "--profile",
                     "--no-compare-tflm", "-q"]) == 0
    report = json.loads((out / "model_report.json").read_text())
    layers, run = report["run"]["layers"], report["run"]
    assert [r["call"] for r in layers] == list(range(report["kernel_calls"]))
    counted = sum(r["instructions"] for r in layers)
    assert 0.97 * run["instructions"] <= counted <= run["instructions"]
    assert all(0 < r["live_bytes"] <= report["arena_bytes"] for r in layers)
    rows = [tuple(r) for r in report["timeline"]]
    for r in layers:                    # the call's own buffers are live at it
        own = sum(size for _, _, size, first, last in rows if first == r["call"] == last)
        assert r["live_bytes"] >= own
    assert max(r["live_bytes"] for r in layers) >= 0.5 * report["arena_bytes"]
    png = out / "model_profile.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10_000
    assert "profile plot:" in capsys.readouterr().out
