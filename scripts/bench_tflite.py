#!/usr/bin/env python3
"""TFLite Micro arena table: IN / OUT / OUT + offline plan for the zoo's .tflite models.

For every model and dtype this runs the ``tvm-memsched tflite`` pipeline
(:func:`tvm_memsched.tflite.optimize.optimize_tflite` with ``offline_plan``,
``measure`` and ``verify``) and records:

* the model peak in the file's order and in the schedule;
* TFLM's arena for the original file (IN), the reordered file (OUT) and the
  reordered file with our ``OfflineMemoryAllocation`` plan (OUT + plan): the
  head (tensor section, from ``print_allocations()``) and the smallest arena
  ``AllocateTensors`` accepts (bisected in forked children);
* whether LiteRT (builtin kernels, file order) gives bit-identical outputs for
  OUT and OUT + plan on random inputs, and (``--tflm-check``, small models)
  whether TFLM itself computes bit-identical outputs with our plan.

Results go to ``--out`` as ``tflite_arena.json`` and ``tflite_arena.md``.

    python scripts/bench_tflite.py --out docs/bench/tflite             # small + medium + large
    python scripts/bench_tflite.py --quick --out /tmp/tfl              # small models only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import zoo  # noqa: E402
from tvm_memsched.tflite.optimize import optimize_tflite  # noqa: E402
from tvm_memsched.tflite.verify import random_inputs, tflm_run  # noqa: E402


def bench_one(name: str, dtype: str, time_limit: float, tflm_check: bool) -> dict:
    t0 = time.perf_counter()
    buf = zoo.tflite(name, dtype)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = optimize_tflite(buf, offline_plan=True, measure=True, verify=True, time_limit=time_limit)
    m = r.measured
    row = {"model": name, "dtype": dtype, "size": zoo.info(name)["size"], "ops": r.tg.graph.num_ops,
           "file_bytes": len(buf), "peak_file": r.peaks["in"], "peak_schedule": r.schedule.peak_bytes,
           "lower_bound": r.schedule.lower_bound_bytes, "schedule_optimal": r.schedule.optimal,
           "out_order": r.orders["out"], "plan_order": r.orders.get("out_plan"), "plan_method": r.plan.method,
           "plan_optimal": r.plan.optimal, "used_plan": r.used_plan,
           "head": {k: m[k].get("head") for k in ("in", "out", "out_plan")},
           "min_arena": {k: m[k].get("min_arena") for k in ("in", "out", "out_plan")},
           "predicted_head": dict(r.predicted),
           "litert_identical": {k: v["identical"] for k, v in r.litert.items()},
           "notes": r.notes}
    if tflm_check:
        feeds = random_inputs(buf, seed=1)
        row["tflm_plan_identical"] = all(a.tobytes() == b.tobytes()
                                         for a, b in zip(tflm_run(buf, feeds), tflm_run(r.out_plan, feeds)))
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["build_seconds"] = round(t_build, 2)
    return row


def pct(a, b):
    return f"{100.0 * (1 - a / b):.1f}%" if a is not None and b else "-"


def markdown(rows: list, meta: dict) -> str:
    lines = [
        "# TFLite Micro arena: original vs reordered vs reordered + offline plan",
        "",
        f"Command: `{meta['command']}`  ",
        f"ai-edge-litert {meta['litert']}, tflite-micro {meta['tflm']}, Python {meta['python']}, "
        f"{meta['machine']}; scheduler `auto`, {meta['time_limit']} s.",
        "",
        "*head* = TFLM's tensor section (`print_allocations()`); *arena* = smallest `arena_size` that "
        "`AllocateTensors` accepts (bisected; head + TFLM's persistent structures). IN = the zoo file, OUT = "
        "operators reordered (best order for TFLM's own greedy planner), OUT+plan = reordered with our "
        "`OfflineMemoryAllocation`. LiteRT = bit-identical outputs of OUT and OUT+plan vs IN (builtin kernels, "
        "file order).",
        "",
        "| model | dtype | ops | peak file -> schedule | head IN | head OUT | head OUT+plan | arena IN | "
        "arena OUT | arena OUT+plan | arena saving | LiteRT |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | | error: {r['error']} | | | | | | | | |")
            continue
        h, a = r["head"], r["min_arena"]
        ok = all(r["litert_identical"].values())
        tflm = "" if "tflm_plan_identical" not in r else (", TFLM ok" if r["tflm_plan_identical"] else
                                                          ", TFLM DIFFERENT")
        lines.append(f"| {r['model']} | {r['dtype']} | {r['ops']} | {r['peak_file']} -> {r['peak_schedule']} | "
                     f"{h['in']} | {h['out']} | {h['out_plan']} | {a['in']} | {a['out']} | {a['out_plan']} | "
                     f"{pct(a['out_plan'], a['in'])} | {'bit-identical' if ok else 'DIFFERENT'}{tflm} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--models", nargs="*", help="zoo model names (default: small, medium and large)")
    p.add_argument("--dtypes", nargs="*", default=["float32", "int8"], choices=["float32", "int8"])
    p.add_argument("--quick", action="store_true", help="small models only")
    p.add_argument("--time-limit", type=float, default=5.0, help="scheduler time limit per model (default 5)")
    p.add_argument("--tflm-check", choices=["small", "all", "none"], default="small",
                   help="run TFLM with the plan and compare outputs (default: small models)")
    args = p.parse_args(argv)
    models = args.models or (zoo.names("small") if args.quick else
                             zoo.names("small") + zoo.names("medium") + zoo.names("large"))
    os.makedirs(args.out, exist_ok=True)
    import importlib.metadata as md

    meta = {"command": "python scripts/bench_tflite.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "litert": md.version("ai-edge-litert"), "tflm": md.version("tflite-micro"),
            "python": platform.python_version(), "machine": f"{platform.machine()} {os.cpu_count()} cpus",
            "time_limit": args.time_limit}
    rows = []
    for name in models:
        for dtype in args.dtypes:
            check = args.tflm_check == "all" or (args.tflm_check == "small" and zoo.info(name)["size"] == "small")
            try:
                row = bench_one(name, dtype, args.time_limit, check)
            except Exception as e:  # noqa: BLE001 - record and go on with the other models
                row = {"model": name, "dtype": dtype, "error": f"{type(e).__name__}: {e}"}
            rows.append(row)
            if "error" in row:
                print(f"{name:24s} {dtype:8s} ERROR {row['error']}", flush=True)
            else:
                a = row["min_arena"]
                print(f"{name:24s} {dtype:8s} arena {a['in']} -> {a['out']} -> {a['out_plan']} "
                      f"({pct(a['out_plan'], a['in'])}) litert {row['litert_identical']} "
                      f"{row['seconds']}s", flush=True)
            with open(os.path.join(args.out, "tflite_arena.json"), "w", encoding="utf-8") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
            with open(os.path.join(args.out, "tflite_arena.md"), "w", encoding="utf-8") as f:
                f.write(markdown(rows, meta))
    bad = [r for r in rows if "error" in r or not all(r["litert_identical"].values())
           or r.get("tflm_plan_identical") is False
           or r["min_arena"]["out_plan"] > r["min_arena"]["in"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
