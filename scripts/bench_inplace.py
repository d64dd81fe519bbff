#!/usr/bin/env python3
"""In-place execution: what each model gains from letting outputs take over dying inputs, on every path.

* **TFLite Micro** (``tvm-memsched tflite --offline-plan --report``): TFLite Micro's smallest arena
  (its Python interpreter, bisection; head + persistent tail) for the original file (IN), the reordered
  file (OUT), OUT with our offline plan without in-place, and with in-place at the ``elementwise``
  level (safe with every kernel library) and the ``windowed`` level (conv/depthwise/pool with shifts
  computed from TFLM's reference kernels, the default). TFLite Micro runs the planned file and must give
  outputs bit-identical to the original's.
* **Relax** (``tvm-memsched compare``): planned bytes of TVM's default build, of our pipeline before
  in-place execution (``--no-inplace --no-inline-producers``: the model's own layout, no overlap), with
  element-wise producers inlined into their consumers alone, of the same order and layout
  planned without in-place, and of our default (convolutions channels-last, outputs over dying inputs
  where the kernels' TIR proves it: same index, consumed first, or a traced shift), numerics against TVM's
  default build; the floor is the largest single activation (no in-place plan can go below it).
* **micro** (``tvm-memsched micro``, int8/float zoo models, mps2-an386): our arena without and with
  in-place; the in-place build runs in QEMU with outputs checked against TVM.

    python scripts/bench_inplace.py --out docs/bench/inplace [--mediapipe DIR_WITH_TFLITE_FILES]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import micro, zoo  # noqa: E402
from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched.tflite.optimize import optimize_tflite  # noqa: E402

TFLITE_MODELS = [("resnet", "float32"), ("resnet", "int8"), ("mobilenet_v2", "float32"), ("mobilenet_v2", "int8"),
                 ("hrnet_tiny", "float32"), ("hrnet_tiny", "int8"), ("densenet_like", "float32"),
                 ("densenet_like", "int8"), ("swiftnet_like", "int8")]
RELAX_MODELS = ["zoo:resnet", "zoo:mobilenet_v2", "zoo:hrnet_tiny", "zoo:densenet_like", "zoo:swiftnet_like",
                "zoo:resnet:int8", "zoo:hrnet_tiny:int8", "zoo:mobilenet_v2:int8"]
MICRO_MODELS = ["zoo:resnet:int8", "zoo:hrnet_tiny", "zoo:resnet", "zoo:mobilenet_v2:int8"]


def tflite_row(label: str, buf: bytes) -> dict:
    row = {"model": label, "file_bytes": len(buf)}
    for mode in ("elementwise", "windowed"):
        t0 = time.perf_counter()
        r = optimize_tflite(buf, offline_plan=True, measure=True, verify=True, inplace=mode, time_limit=30)
        errors = [f"{k}: {v['error']}" for k, v in r.measured.items() if "error" in v]
        if errors:
            raise RuntimeError("TFLite Micro cannot run it (" + "; ".join(errors)[:200] + ")")
        arena = {k: v.get("min_arena") for k, v in r.measured.items()}
        row.setdefault("tflm_min_arena", {}).update({"in": arena["in"], "out": arena["out"],
                                                     "plan_no_inplace": arena.get("out_plan_no_inplace",
                                                                                  arena["out_plan"]),
                                                     f"plan_{mode}": arena["out_plan"]})
        row.setdefault("tflm_head", {}).update({"in": r.measured["in"]["head"],
                                                f"plan_{mode}": r.measured["out_plan"]["head"]})
        row[f"inplace_ops_{mode}"] = r.plan_inplace
        row[f"identical_{mode}"] = r.identical and bool(r.tflm) and all(v["identical"] for v in r.tflm.values())
        row[f"seconds_{mode}"] = round(time.perf_counter() - t0, 1)
    a = row["tflm_min_arena"]
    row["ratio_windowed_vs_in"] = round(a["plan_windowed"] / a["in"], 3)
    row["ratio_windowed_vs_plan"] = round(a["plan_windowed"] / a["plan_no_inplace"], 3)
    return row


def relax_row(spec: str) -> dict:
    from tvm_memsched.app.models import load_relax_spec
    from tvm_memsched.relax.compare import compare

    mod, name = load_relax_spec(spec)
    t0 = time.perf_counter()
    before = compare(mod, name=name, repeat=0, time_limit=30, inplace=False, inline_producers=False)
    inlined = compare(mod, name=name, repeat=0, time_limit=30, inplace=False)
    c = compare(mod, name=name, repeat=0, time_limit=30)
    floor = c.largest_tensor_bytes
    return {"model": spec, "default": c.default_planned_bytes, "before": before.memsched_planned_bytes,
            "inlined_no_inplace": inlined.memsched_planned_bytes,
            "ours_no_inplace": c.memsched_planned_no_inplace_bytes, "ours": c.memsched_planned_bytes,
            "inplace_ops": c.inplace_taken, "largest_tensor": floor,
            "gain": round(before.memsched_planned_bytes / c.memsched_planned_bytes, 3),
            "gain_same_order": round(c.memsched_planned_no_inplace_bytes / c.memsched_planned_bytes, 3),
            "vs_default": round(c.ratio, 3),
            "numerics_ok": c.numerics_ok and before.numerics_ok and inlined.numerics_ok,
            "max_abs_diff": c.max_abs_diff, "seconds": round(time.perf_counter() - t0, 1)}


def micro_row(spec: str, board: str) -> dict:
    from tvm_memsched.app.models import load_relax_spec

    mod, _ = load_relax_spec(spec)
    with tempfile.TemporaryDirectory() as d:
        off = micro.export(mod, board, os.path.join(d, "off"), measure=False, inplace=False, inline_producers=False)
        on = micro.export(mod, board, os.path.join(d, "on"))
        r = micro.run_qemu(on)
        return {"model": spec, "arena_no_inplace": off.arena_bytes, "arena": on.arena_bytes,
                "gain": round(off.arena_bytes / on.arena_bytes, 3), "ram_total": on.ram_bytes,
                "qemu_ok": r.ok, "instructions": r.instructions}


def markdown(data) -> str:
    meta = data["meta"]
    out = ["# In-place execution: gains per model and path", "",
           f"{meta['date']}, Python {meta['python']}, {meta['machine']}; `python scripts/bench_inplace.py`.", "",
           "## TFLite Micro: smallest arena (bytes, head + persistent tail, bisected in its Python interpreter)", "",
           "| model | IN | OUT (reordered) | + plan, no in-place | + plan, elementwise | + plan, windowed | "
           "windowed / IN | windowed / plan | ops in place | TFLM outputs vs IN |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data["tflite"]:
        a = r["tflm_min_arena"]
        same = r["identical_elementwise"] and r["identical_windowed"]
        out.append(f"| {r['model']} | {a['in']:,} | {a['out']:,} | {a['plan_no_inplace']:,} | "
                   f"{a['plan_elementwise']:,} | {a['plan_windowed']:,} | {r['ratio_windowed_vs_in']:.3f} | "
                   f"{r['ratio_windowed_vs_plan']:.3f} | {r['inplace_ops_elementwise']} / "
                   f"{r['inplace_ops_windowed']} | {'bit-identical' if same else 'DIFFERENT'} |")
    out += ["", "## Relax (llvm): planned activation bytes", "",
            "| model | TVM default | ours before (`--no-inplace --no-inline-producers`) | producers inlined, no "
            "in-place | same order, no in-place | ours (in-place) | "
            "gain vs before | largest tensor | vs TVM default | ops in place | numerics vs TVM (max abs diff) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data["relax"]:
        floor = f"{r['largest_tensor']:,}" if r.get("largest_tensor") else "-"
        out.append(f"| {r['model']} | {r['default']:,} | {r['before']:,} | {r['inlined_no_inplace']:,} | "
                   f"{r['ours_no_inplace']:,} | "
                   f"{r['ours']:,} | {r['gain']:.3f}x | {floor} | {r['vs_default']:.3f}x | {r['inplace_ops']} | "
                   f"{'ok' if r['numerics_ok'] else 'MISMATCH'} ({r['max_abs_diff']:.1e}) |")
    if data["micro"]:
        out += ["", f"## micro ({data['meta']['board']}, QEMU): arena bytes", "",
                "| model | arena, no in-place, no inlining | arena, ours | gain | RAM total | QEMU outputs vs TVM |",
                "|---|---:|---:|---:|---:|---|"]
        for r in data["micro"]:
            out.append(f"| {r['model']} | {r['arena_no_inplace']:,} | {r['arena']:,} | {r['gain']:.3f}x | "
                       f"{r['ram_total']:,} | {'equal' if r['qemu_ok'] else 'DIFFERENT'} |")
    out += ["", "TFLite rows: `elementwise` overlaps only element-wise ops and views (safe with CMSIS-NN and "
            "other optimised kernels); `windowed` (the default of `--offline-plan`) adds CONV_2D, "
            "DEPTHWISE_CONV_2D and pooling with the smallest shift TFLM's reference loop nests allow. "
            "\"ops in place\" counts outputs the plan really put over a dying input (elementwise / windowed). "
            "Relax: every overlap is proven from the kernel's TIR: same-index and consumed-first kernels "
            "structurally, convolutions and pooling by tracing the loop nest for the smallest safe shift "
            "(`relax/analysis/access_trace.py`); our default runs convolutions channels-last (`ConvolutionLayout`), "
            "where a 1x1 expansion's output can trail its input through memory (channels-first it could "
            "overlap one input plane only). \"same order, no in-place\" plans our final order and layout "
            "without overlaps; \"before\" is our pipeline with `--no-inplace --no-inline-producers` (the model's "
            "layout, every element-wise producer a tensor of its own); \"producers inlined\" adds `InlineProducers` "
            "alone (a cheap element-wise producer used once, such as DenseNet's pre-activation relu, computed "
            "inside its consumer's kernel). No "
            "in-place plan goes below the largest tensor. `ChannelsFirstReduction` sums the channels-last "
            "convolutions in TVM's channels-first order, so outputs are identical to TVM's default build.", ""]
    return "\n".join(out)


def plot(data, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["tflite"]
    labels = [r["model"] for r in rows]
    keys = [("out", "OUT (reordered)"), ("plan_no_inplace", "+ plan, no in-place"),
            ("plan_elementwise", "+ plan, elementwise"), ("plan_windowed", "+ plan, windowed")]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.1), 4.5))
    width = 0.8 / len(keys)
    for k, (key, name) in enumerate(keys):
        ax.bar([i + k * width for i in range(len(rows))],
               [r["tflm_min_arena"][key] / r["tflm_min_arena"]["in"] for r in rows], width, label=name)
    ax.axhline(0.8, color="grey", lw=0.8, ls="--")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TFLite Micro smallest arena / original file's")
    ax.set_title("In-place execution in TFLite Micro offline plans")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write inplace.json, inplace.md and inplace.png here")
    ap.add_argument("--mediapipe", default=None, metavar="DIR", help="also the float .tflite files in DIR")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--no-micro", action="store_true")
    args = ap.parse_args(argv)
    data = {"meta": {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                     "machine": platform.machine(), "board": args.board}, "tflite": [], "relax": [], "micro": []}
    for name, dtype in TFLITE_MODELS:
        print(f"tflite {name} {dtype} ...", file=sys.stderr, flush=True)
        data["tflite"].append(tflite_row(f"{name} {dtype}", zoo.tflite(name, dtype)))
    if args.mediapipe:
        for path in sorted(glob.glob(os.path.join(args.mediapipe, "*.tflite"))):
            print(f"tflite {path} ...", file=sys.stderr, flush=True)
            with open(path, "rb") as f:
                buf = f.read()
            try:
                data["tflite"].append(tflite_row(os.path.basename(path), buf))
            except Exception as e:  # noqa: BLE001 - a public model our reader refuses is reported, not fatal
                print(f"  skipped: {e}", file=sys.stderr)
    for spec in RELAX_MODELS:
        print(f"relax {spec} ...", file=sys.stderr, flush=True)
        data["relax"].append(relax_row(spec))
    if not args.no_micro:
        for spec in MICRO_MODELS:
            print(f"micro {spec} ...", file=sys.stderr, flush=True)
            data["micro"].append(micro_row(spec, args.board))
    text = markdown(data)
    print(text)
    if args.out:
        write_results(args.out, "inplace", data, text)
        plot(data, os.path.join(args.out, "inplace.png"))
    bad = [r["model"] for r in data["tflite"] if not (r["identical_elementwise"] and r["identical_windowed"])]
    bad += [r["model"] for r in data["relax"] if not r["numerics_ok"]]
    bad += [r["model"] for r in data["micro"] if not r["qemu_ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
