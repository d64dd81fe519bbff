#!/usr/bin/env python3
"""Patch tiling of the first stage: planned peak against extra MACs per split point and grid, and TFLite Micro.

For each model (the zoo's MobileNetV2-like net, float32 and int8, and the float MediaPipe models given with
``--mediapipe``):

* every split point x grid that :func:`tvm_memsched.tflite.tiling.search_tiling` considers, with its extra
  multiply-accumulates (fraction of the model's) and our offline plan (in-place, TFLM head) -- the plot
  ``tiling.png`` shows plan / untiled plan against MAC overhead, next to MCUNetV2's published point (int8
  MobileNetV2, 4x4 patches: 1,372 kB -> 172 kB, 8x, 10-17% extra MACs);
* ``tvm-memsched tflite --tile --offline-plan --report``: TFLite Micro's smallest arena (bisected in its Python
  interpreter) of the original file and of the tiled file with our plan, outputs bit-identical to the original's
  in TFLite Micro and in LiteRT's reference kernels;
* Relax (``compare --tile``): TVM's default plan of the untiled model, ours untiled and ours tiled -- with the
  ``.tflite`` tiled in builtin operators and imported, and with the Relax-native ``PatchTiling`` on the zoo's
  Relax network and on a torchvision-style MobileNetV2 (width 1.0, 224x224) exported with ``torch.export``
  (``.pt2``).

    python scripts/bench_tiling.py --out docs/bench/tiling [--mediapipe DIR] [--no-224]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import zoo  # noqa: E402
from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched.tflite.optimize import optimize_tflite  # noqa: E402
from tvm_memsched.tflite.reader import read_tflite  # noqa: E402
from tvm_memsched.tflite.tiling import search_tiling  # noqa: E402
from tvm_memsched.tflite.verify import compare_litert, compare_tflm, tflm_arena  # noqa: E402

MCUNETV2 = {"label": "MCUNetV2, int8 MobileNetV2, 4x4 (published)", "ratio": 172 / 1372, "overhead": 0.10,
            "overhead_hi": 0.17}


def tflite_row(label: str, buf: bytes, budget: float) -> dict:
    tg = read_tflite(buf, name=label)
    t0 = time.perf_counter()
    res = search_tiling(tg, budget=budget)
    row = {"model": label, "untiled_plan": res.untiled_plan_bytes, "untiled_tail": res.untiled_tflm_tail_bytes,
           "model_macs": res.model_macs, "candidates": [c.to_dict() for c in res.candidates],
           "search_seconds": round(time.perf_counter() - t0, 1), "tiled": res.chosen is not None}
    a_in = tflm_arena(buf)
    base = a_in.min_arena
    sg = tg.model.subgraphs[0]
    row.update(tflm_min_arena_in=base, tflm_tail_in=a_in.tail, budget=budget,
               input_bytes=sum(tg.graph.tensor_bytes(t) for t in tg.graph.inputs), ops_in=len(sg.operators))
    if res.chosen is None:
        out = optimize_tflite(tg, offline_plan=True, inplace="windowed")
        a_out = tflm_arena(out.output)
        row.update(tflm_min_arena_out=a_out.min_arena, tflm_tail_out=a_out.tail, identical=True)
    else:
        c = res.chosen
        out = optimize_tflite(read_tflite(res.buf, name=label), offline_plan=True, inplace="windowed")
        a_out = tflm_arena(out.output)
        row.update(split=c.split, grid=f"{c.grid[0]}x{c.grid[1]}", mac_overhead=c.mac_overhead,
                   plan=out.plan.arena_bytes if out.plan else None,
                   tflm_min_arena_out=a_out.min_arena, tflm_tail_out=a_out.tail,
                   ops_out=len(read_tflite(res.buf).model.subgraphs[0].operators),
                   identical=compare_tflm(buf, out.output, trials=2).identical
                   and compare_litert(buf, out.output, trials=2, reference_kernels=True).identical)
    row["untiled_out"] = tflm_arena(optimize_tflite(tg, offline_plan=True, inplace="windowed").output).min_arena
    row["ratio"] = round(row["tflm_min_arena_out"] / base, 3)
    return row


def relax_row(spec: str) -> dict:
    from tvm_memsched.relax.compare import compare
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    name, dtype = spec.split(":")[1], (spec.split(":") + ["float32"])[2]
    buf = zoo.tflite(name, dtype)
    res = search_tiling(read_tflite(buf), tflm=False, inplace="windowed")   # as `compare --tile` scores it
    untiled = compare(from_tflite_bytes(buf), repeat=0, run=False)
    if res.chosen is None:
        return {"model": spec, "split": "-", "grid": "not tiled", "mac_overhead": 0.0,
                "tvm_default_untiled": untiled.default_planned_bytes, "ours_untiled": untiled.memsched_planned_bytes,
                "ours_tiled": untiled.memsched_planned_bytes, "numerics_ok": True,
                "vs_default": round(untiled.ratio, 2), "vs_untiled": 1.0}
    tiled = compare(from_tflite_bytes(res.buf), repeat=0)
    c = res.chosen
    return {"model": spec, "split": c.split, "grid": f"{c.grid[0]}x{c.grid[1]}", "mac_overhead": c.mac_overhead,
            "tvm_default_untiled": untiled.default_planned_bytes, "ours_untiled": untiled.memsched_planned_bytes,
            "ours_tiled": tiled.memsched_planned_bytes, "numerics_ok": tiled.numerics_ok,
            "vs_default": round(untiled.default_planned_bytes / tiled.memsched_planned_bytes, 2),
            "vs_untiled": round(untiled.memsched_planned_bytes / tiled.memsched_planned_bytes, 2)}


def native_row(label: str, mod) -> dict:
    """``compare`` untiled and with the Relax-native ``PatchTiling`` (numerics against TVM's untiled build)."""
    from tvm_memsched.relax.compare import compare

    t0 = time.perf_counter()
    untiled = compare(mod, repeat=0, run=False)
    tiled = compare(mod, repeat=0, tile=True)
    c = (tiled.tiling or {}).get("chosen") or {}
    return {"model": label, "split": c.get("split", "-"), "grid": c.get("grid", "not tiled"),
            "mac_overhead": c.get("mac_overhead", 0.0), "tvm_default_untiled": tiled.default_planned_bytes,
            "ours_untiled": untiled.memsched_planned_bytes, "ours_tiled": tiled.memsched_planned_bytes,
            "numerics_ok": tiled.numerics_ok, "max_abs_diff": tiled.max_abs_diff,
            "vs_default": round(tiled.default_planned_bytes / tiled.memsched_planned_bytes, 2),
            "vs_untiled": round(untiled.memsched_planned_bytes / tiled.memsched_planned_bytes, 2),
            "candidates": len((tiled.tiling or {}).get("candidates", [])),
            "seconds": round(time.perf_counter() - t0, 1)}


def markdown(data) -> str:
    meta = data["meta"]
    out = ["# Patch tiling of the first stage", "",
           f"{meta['date']}, Python {meta['python']}, {meta['machine']}; `python scripts/bench_tiling.py`; "
           f"MAC budget {100 * meta['budget']:.0f}%.", "",
           "## TFLite Micro (`tvm-memsched tflite --tile --offline-plan --report`)", "",
           "| model | split at | grid | extra MACs | TFLM smallest arena: original | untiled + our plan | tiled + our "
           "plan | tiled / original | outputs |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in data["tflite"]:
        out.append(f"| {r['model']} | {r.get('split', '-')} | {r.get('grid', 'not tiled')} | "
                   f"{100 * r.get('mac_overhead', 0):.1f}% | {r['tflm_min_arena_in']:,} | {r['untiled_out']:,} | "
                   f"{r['tflm_min_arena_out']:,} | {r['ratio']:.3f} | "
                   f"{'bit-identical' if r['identical'] else 'DIFFERENT'} |")
    out += ["", "What bounds the smallest arena from below: the model input is resident until the last patch has read "
            "its window (a model input is one TFLite tensor), and TFLite Micro's persistent tail grows with "
            "every operator the patches add.", "",
            "| model | MAC budget | ops | model input | TFLM tail | smallest arena | input / original arena | "
            "(input + tail) / original arena |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["tflite"]:
        if "input_bytes" not in r:
            continue
        ops = r.get("ops_out", r["ops_in"])
        tail = r["tflm_tail_out"]
        out.append(f"| {r['model']} | {100 * r['budget']:.0f}% | {r['ops_in']} -> {ops} | {r['input_bytes']:,} | "
                   f"{r['tflm_tail_in']:,} -> {tail:,} | {r['tflm_min_arena_in']:,} -> {r['tflm_min_arena_out']:,} "
                   f"| {r['input_bytes'] / r['tflm_min_arena_in']:.3f} | "
                   f"{(r['input_bytes'] + tail) / r['tflm_min_arena_in']:.3f} |")
    out += ["", "## Relax (llvm, `compare --tile`): planned activation bytes", "",
            "| model | split at | grid | extra MACs | TVM default (untiled) | ours untiled | ours tiled | vs TVM default "
            "| vs ours untiled | numerics |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in data["relax"]:
        out.append(f"| {r['model']} | {r['split']} | {r['grid']} | {100 * r['mac_overhead']:.1f}% | "
                   f"{r['tvm_default_untiled']:,} | {r['ours_untiled']:,} | {r['ours_tiled']:,} | {r['vs_default']}x "
                   f"| {r['vs_untiled']}x | {'ok' if r['numerics_ok'] else 'MISMATCH'} |")
    out += ["", "## Relax-native `PatchTiling` (`compare(mod, tile=True)`, `compare --tile` on .onnx / .pt2)", "",
            "| model | split at | grid | extra MACs | TVM default (untiled) | ours untiled | ours tiled | vs TVM default "
            "| vs ours untiled | numerics vs TVM (untiled) |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in data.get("native", []):
        same = "identical" if r["max_abs_diff"] == 0 else ("ok" if r["numerics_ok"] else "MISMATCH")
        out.append(f"| {r['model']} | {r['split']} | {r['grid']} | {100 * r['mac_overhead']:.1f}% | "
                   f"{r['tvm_default_untiled']:,} | {r['ours_untiled']:,} | {r['ours_tiled']:,} | {r['vs_default']}x "
                   f"| {r['vs_untiled']}x | {same} |")
    out += ["", "Every candidate (split point x grid) with its MAC overhead and plan is in `tiling.json`; "
            "`tiling.png` plots plan / untiled plan against MAC overhead for the within-budget ones, next to "
            f"MCUNetV2's published int8 MobileNetV2 point ({MCUNETV2['ratio']:.3f} at 10-17% extra MACs, with "
            "receptive-field redistribution, a change of the network; ours changes nothing but the schedule). "
            "TFLite Micro's smallest arena includes its persistent tail, which grows with every patch operator "
            "(per-channel int8 requantisation data), so candidates are ranked by plan + measured tail.", ""]
    return "\n".join(out)


def plot(data, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in data["tflite"]:
        pts = [(c["mac_overhead"], c["plan_bytes"] / r["untiled_plan"]) for c in r["candidates"]
               if c["within_budget"] and c["plan_bytes"]]
        if pts:
            ax.scatter([100 * x for x, _ in pts], [y for _, y in pts], s=12, label=r["model"], alpha=0.7)
    ax.errorbar([100 * (MCUNETV2["overhead"] + MCUNETV2["overhead_hi"]) / 2], [MCUNETV2["ratio"]],
                xerr=[[100 * (MCUNETV2["overhead_hi"] - MCUNETV2["overhead"]) / 2]], fmt="k*", ms=12,
                label=MCUNETV2["label"])
    ax.set_xlabel("extra multiply-accumulates (% of the model's)")
    ax.set_ylabel("planned peak / untiled plan (in-place, TFLM head)")
    ax.set_title("Patch tiling: every split point and grid within the budget")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--mediapipe", default=None, metavar="DIR")
    ap.add_argument("--budget", type=float, default=0.15)
    ap.add_argument("--wide-budget", type=float, default=0.35,
                    help="also search the --mediapipe models with this MAC budget (how far tiling goes at any cost)")
    ap.add_argument("--no-224", action="store_true", help="skip the torchvision-style MobileNetV2 at 224x224")
    args = ap.parse_args(argv)
    data = {"meta": {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                     "machine": platform.machine(), "budget": args.budget}, "tflite": [], "relax": [], "native": []}
    models = [("mobilenet_v2 float32", zoo.tflite("mobilenet_v2", "float32")),
              ("mobilenet_v2 int8", zoo.tflite("mobilenet_v2", "int8"))]
    runs = [(label, buf, args.budget) for label, buf in models]
    if args.mediapipe:
        for p in sorted(glob.glob(os.path.join(args.mediapipe, "*.tflite"))):
            with open(p, "rb") as f:
                buf = f.read()
            runs.append((os.path.basename(p), buf, args.budget))
            if args.wide_budget and args.wide_budget > args.budget:
                runs.append((f"{os.path.basename(p)}, budget {100 * args.wide_budget:.0f}%", buf, args.wide_budget))
    for label, buf, budget in runs:
        print(f"tflite {label} ...", file=sys.stderr, flush=True)
        try:
            data["tflite"].append(tflite_row(label, buf, budget))
        except Exception as e:  # noqa: BLE001 - a public model TFLM or our reader refuses is reported, not fatal
            print(f"  skipped: {str(e)[:200]}", file=sys.stderr)
    for spec in ("zoo:mobilenet_v2", "zoo:mobilenet_v2:int8"):
        print(f"relax {spec} ...", file=sys.stderr, flush=True)
        data["relax"].append(relax_row(spec))
    from tvm_memsched.app.models import load_relax_spec

    print("relax-native zoo:mobilenet_v2 ...", file=sys.stderr, flush=True)
    data["native"].append(native_row("zoo:mobilenet_v2 (Relax)", load_relax_spec("zoo:mobilenet_v2")[0]))
    if not args.no_224:
        import tempfile

        from tvm_memsched.relax.frontends.frontend import from_file
        from tvm_memsched.zoo import torch_nets

        print("relax-native torchvision MobileNetV2 224 (.pt2) ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "mobilenet_v2_224.pt2")
            torch_nets.export_pt2(torch_nets.mobilenet_v2(1.0), path, image_size=224)
            data["native"].append(native_row("torchvision-style MobileNetV2 1.0, 224 (.pt2)", from_file(path)))
    text = markdown(data)
    print(text)
    if args.out:
        write_results(args.out, "tiling", data, text)
        plot(data, os.path.join(args.out, "tiling.png"))
    bad = [r["model"] for r in data["tflite"] if not r["identical"]] + \
        [r["model"] for r in data["relax"] + data["native"] if not r["numerics_ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
