"""Relax-native patch tiling: tiled == untiled on random conv/pool stacks (both layouts), search, compare, CLI."""

import numpy as np
import pytest
import tvm

from tvm_memsched.core.errors import UnsupportedError
from tvm_memsched.relax.compare import random_inputs, run_vm
from tvm_memsched.relax.testing import conv_stack_module
from tvm_memsched.relax.passes.tiling import PatchTiling, search_tiling, split_points, tile_module


def _random_layers(rng, channels):
    layers = []
    c = channels
    for _ in range(int(rng.integers(3, 6))):
        kind = str(rng.choice(["conv", "dw", "max", "avg", "relu6", "bias", "conv"]))
        k = int(rng.choice([1, 2, 3]))
        s = int(rng.choice([1, 2]))
        d = int(rng.choice([1, 1, 2])) if kind in ("conv", "dw") else 1
        p = int(rng.integers(0, k)) if kind != "max" else 0
        co = int(rng.choice([c, 2 * c])) if kind == "conv" else c
        layers.append((kind, co, k, s, d, p))
        c = co
    layers.insert(0, ("conv", channels, 3, 1, 1, 1))         # every stack starts with a window
    return layers


def _run(mod, inputs):
    return run_vm(tvm.compile(mod, "llvm"), inputs)


CASES = [(layout, seed) for seed in range(4) for layout in ("NCHW", "NHWC")]


@pytest.mark.parametrize("layout,seed", CASES, ids=[f"{lay}-{s}" for lay, s in CASES])
def test_tiled_equals_untiled_at_every_split_point(layout, seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(11, 20))                          # odd sizes too
    mod = conv_stack_module(layout, size=size, channels=4, seed=seed, layers=_random_layers(rng, 4),
                            batch_norm=bool(seed % 2))
    inputs = random_inputs(mod["main"], seed)
    ref = _run(mod, inputs)
    points = split_points(mod["main"])
    assert points
    tried = 0
    for split in points[-2:]:
        for grid in ((2, 2), (3, 1)):
            try:
                tiled, info = tile_module(mod, split, grid)
            except UnsupportedError as e:                      # a patch entirely in padding: refused, named
                assert "padding" in str(e)
                continue
            tvm.relax.analysis.check_well_formed(tiled)
            assert info["tiled_ops"] > info["stage_ops"] and info["tiled_macs"] >= info["stage_macs"]
            got = _run(tiled, inputs)
            assert all(np.array_equal(a, b) for a, b in zip(ref, got)), (split, grid)
            tried += 1
    assert tried


def test_search_reports_every_candidate_and_keeps_the_budget():
    mod = conv_stack_module("NCHW", size=48, channels=16)
    res = search_tiling(mod, budget=0.15)
    assert res.chosen is not None and res.buf is not None
    assert res.chosen.within_budget and res.chosen.mac_overhead <= 0.15
    assert res.chosen.peak_bytes < res.untiled_peak_bytes
    points = split_points(mod["main"])
    considered = {c.split for c in res.candidates}
    assert considered <= set(points) and points[0] in considered   # values only an activation reads are skipped
    within = [c for c in res.candidates if c.within_budget]
    assert all(c.peak_bytes is not None for c in within)
    assert res.chosen.peak_bytes == min(c.peak_bytes for c in within)
    assert all(c.peak_bytes is None for c in res.candidates if not c.within_budget)


def test_split_point_errors_and_models_without_a_stage():
    mod = conv_stack_module("NCHW", size=16)
    with pytest.raises(UnsupportedError, match="not a split point"):
        tile_module(mod, "gv", (2, 2))
    with pytest.raises(UnsupportedError, match="at least 1x1"):
        tile_module(mod, split_points(mod["main"])[0], (0, 2))
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 16], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    plain = bb.finalize()
    with pytest.raises(UnsupportedError, match="single 4-D model input"):
        search_tiling(plain)
    tiling = PatchTiling()
    assert tiling(plain)["main"].same_as(plain["main"])        # no stage: the pass leaves it as it is
    bb = relax.BlockBuilder()                                   # quantized: left to the .tflite rewrite
    q = relax.Var("q", relax.TensorType([1, 3, 8, 8], "int8"))
    with bb.function("main", [q]):
        with bb.dataflow():
            x = bb.emit(relax.op.dequantize(q, relax.const(0.5, "float32"), relax.const(0, "int32")))
            y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(np.ones((4, 3, 3, 3), "float32")), padding=1))
        bb.emit_func_output(y)
    assert split_points(bb.finalize()["main"]) == []


def test_compare_tile_plans_less_with_identical_numbers():
    from tvm_memsched.relax.compare import compare

    mod = conv_stack_module("NCHW", size=48, channels=16)
    plain = compare(mod, repeat=0)
    tiled = compare(mod, repeat=0, tile=True)
    assert tiled.tiling["chosen"] is not None
    assert tiled.memsched_planned_bytes * 1.5 < plain.memsched_planned_bytes
    assert tiled.numerics_ok and tiled.max_abs_diff == 0.0     # against TVM's default build, untiled


def test_pipeline_tile_option_builds_and_matches():
    from tvm_memsched.relax.pipeline import build, pipeline

    assert pipeline({"kind": "llvm"}, tile=True).pass_names()[0] == "PatchTiling"
    mod = conv_stack_module("NHWC", size=32, channels=8)
    inputs = random_inputs(mod["main"], 0)
    ours = run_vm(build(mod, {"kind": "llvm"}, tile={"grid": (2, 2)}), inputs)
    ref = _run(mod, inputs)
    assert all(np.array_equal(a, b) for a, b in zip(ref, ours))


@pytest.mark.slow
def test_torchvision_mobilenet_v2_pt2_tiles_with_identical_outputs(tmp_path, capsys):
    """A real PyTorch export (BatchNorm, ReLU6, residual adds) through the .pt2 frontend and `compare --tile`:
    the tiled model's outputs equal the untiled model's (TVM's default builds of both), its plan is smaller,
    and the chosen split costs at most 15% extra MACs. The network is torchvision's MobileNetV2 (width 0.35)
    cut after its first six inverted residuals (three of them with residual adds: the large early feature
    maps a split tiles) with its classifier head; the later blocks, at 8x8 and below, only lengthen the
    compile. (The zoo's whole MobileNetV2 is tiled on the board in tests/test_tiling.py.)"""
    import re

    from torch import nn

    from tvm_memsched.app.cli import main as cli_main
    from tvm_memsched.zoo import torch_nets

    full = torch_nets.mobilenet_v2(0.35, 10)
    blocks = full[:7]                       # the stem and six inverted residuals (adds in blocks 3, 5 and 6)
    assert sum(getattr(m, "residual", False) for m in blocks) == 3
    net = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(blocks[-1].conv[-1].num_features,
                                                                                  10)).eval()
    path = tmp_path / "mobilenet_v2.pt2"
    torch_nets.export_pt2(net, path, image_size=64)
    rc = cli_main(["compare", str(path), "--tile", "--tile-grid", "2x2", "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "tiled outputs bit-identical to the untiled model's" in text and "numerics: identical (ok)" in text
    before, after, overhead = re.search(r"in 2x2 patches: plan ([\d,]+) -> ([\d,]+) B, ([\d.]+)% extra MACs",
                                        text).groups()
    assert int(after.replace(",", "")) < int(before.replace(",", "")) and float(overhead) <= 15.0
