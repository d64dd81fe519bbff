"""The benchmark report: --quick runs end to end and writes its files (no timing assertions)."""

import json
import os

import pytest

from tvm_memsched.app.report import markdown, published_rows, run_report, write_report


@pytest.mark.slow
def test_quick_report_runs_and_writes_files(tmp_path):
    rep = run_report(quick=True, progress=False)
    assert [r["model"] for r in rep["models"]] == ["swiftnet_like", "resnet"]
    for r in rep["models"]:
        assert set(r["peaks"]) >= {"program", "rpo", "kahn", "dp", "hmcos", "ilp", "auto"}
        assert r["peaks"]["auto"] <= r["peaks"]["program"]
        assert all(p >= r["lower_bound"] for p in r["peaks"].values())
        t = r["tvm"]
        assert t["numerics_ok"]
        assert t["memsched_planned_bytes"] <= t["default_planned_bytes"]
        assert t["memsched_planned_bytes"] >= t["memsched_plannable_peak_bytes"]
    files = write_report(rep, str(tmp_path))
    names = sorted(os.path.basename(f) for f in files)
    assert "results.json" in names and "results.md" in names and "peaks.png" in names
    assert "swiftnet_like_memory.png" in names and "swiftnet_like_arena.png" in names
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["models"][0]["model"] == "swiftnet_like"
    md = (tmp_path / "results.md").read_text()
    assert "Against the published results" in md and "serenity" in md


def test_published_rows_and_markdown_without_tvm():
    assert {p["paper"] for p in published_rows("randwire_ws_1")} == {"hmcos", "zhong"}
    rep = run_report(["default"], methods=["program", "rpo", "auto"], tvm=False, repeats=1, time_limit=2,
                     progress=False)
    assert rep["models"][0]["tvm"] is None
    assert "| swiftnet_like |" in markdown(rep)
