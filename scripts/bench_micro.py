#!/usr/bin/env python3
"""Microcontroller path against TFLite Micro and TVM's default build, on .tflite models.

For every model (``zoo:NAME`` for the zoo's float file, ``zoo:NAME:int8`` for
its full-integer file, or a path to a ``.tflite``):

* **TFLite Micro**: the smallest arena its Python interpreter accepts for the
  file (bisected, :func:`tvm_memsched.tflite.verify.tflm_arena`);
* **TVM default**: ``micro.export(planner="tvm", int8=False)``: TVM's own
  import (dequantize -> float -> quantize for int8 files), order and
  ``StaticPlanBlockMemory`` plan, exported to the same C runtime;
* **ours**: ``micro.export()`` with every default (int8 lowering, memory-aware
  order, one arena);

each cross-compiled for the board (flash, static RAM, stack) and run in QEMU
(instructions per inference). Our outputs are checked against TFLite Micro on
the same inputs (bit for bit for integer outputs) and against TVM.

Results go to ``--out`` as ``micro.json`` and ``micro.md``.

    python scripts/bench_micro.py --out docs/bench/micro \\
        zoo:mobilenet_v2:int8 zoo:swiftnet_like:int8 zoo:darts_v2_cifar_tiny:int8 zoo:densenet_like:int8 \\
        zoo:mobilenet_v2 path/to/iris_landmark.tflite
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import micro, zoo  # noqa: E402
from tvm_memsched.relax.compare import random_inputs  # noqa: E402
from tvm_memsched.relax.frontend import from_tflite_bytes  # noqa: E402
from tvm_memsched.core.errors import MemschedError  # noqa: E402
from tvm_memsched.tflite.reader import read_tflite  # noqa: E402
from tvm_memsched.tflite.verify import litert_run, tflm_arena, tflm_run  # noqa: E402


def load(spec: str) -> tuple[str, bytes]:
    if spec.startswith("zoo:"):
        parts = spec[4:].split(":")
        dtype = parts[1] if len(parts) > 1 else "float32"
        return spec[4:], zoo.tflite(parts[0], dtype)
    with open(spec, "rb") as f:
        return os.path.splitext(os.path.basename(spec))[0], f.read()


def input_names(buf: bytes) -> list[str]:
    from tvm_memsched.tflite.builder import load as load_model

    m = load_model(buf)
    sg = m.subgraphs[0]
    return [sg.tensors[i].name.decode() for i in sg.inputs]


def run_side(mod, board, out_dir, *, planner, int8, inputs):
    t0 = time.perf_counter()
    exp = micro.export(mod, board, out_dir, planner=planner, int8=int8, check_fit=False)
    seconds = time.perf_counter() - t0
    try:
        r = micro.run_qemu(exp, inputs, check=True, atol=1e-3, rtol=1e-3)
    except micro.DoesNotFitError as e:          # e.g. float32 weights overflow the board's flash
        print(f"   {planner}: not run in QEMU: {e}", flush=True)
        r = micro.run_host(exp, inputs, check=True, atol=1e-3, rtol=1e-3) if planner == "tvm_memsched" else None
    return exp, r, seconds


def bench_one(spec: str, board: str, work: str) -> dict:
    name, buf = load(spec)
    print(f"== {name}", flush=True)
    t0 = time.perf_counter()
    try:
        tflm = tflm_arena(buf)
    except MemschedError as e:                   # e.g. operators TFLite Micro does not have
        print(f"   TFLite Micro cannot run it: {e}", flush=True)
        tflm = None
    t_tflm = time.perf_counter() - t0
    mod = from_tflite_bytes(buf, name)
    if read_tflite(buf).stateful:
        raise MemschedError("a stateful streaming model: see scripts/bench_streaming.py (sequences of invocations)")
    inputs = random_inputs(mod["main"], seed=0)
    ours, r_ours, s_ours = run_side(mod, board, os.path.join(work, name, "ours"), planner="tvm_memsched",
                                    int8=True, inputs=inputs)
    dflt, r_dflt, s_dflt = run_side(mod, board, os.path.join(work, name, "default"), planner="tvm", int8=False,
                                    inputs=inputs)
    ref = [np.asarray(o) for o in tflm_run(buf, dict(zip(input_names(buf), inputs)))] if tflm else \
        [np.asarray(o) for o in litert_run(buf, dict(zip(input_names(buf), inputs))).values()]
    if r_ours is None:
        raise SystemExit(f"{name}: our export does not link for {board}")
    ours_out = [np.asarray(o) for o in r_ours.outputs]
    integer = all(np.issubdtype(o.dtype, np.integer) for o in ours_out)
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b.reshape(a.shape).astype(np.float64))))
               for a, b in zip(ours_out, ref))
    row = {
        "model": name, "file_bytes": len(buf), "reference": "TFLite Micro" if tflm else "LiteRT",
        "tflm": {"min_arena": tflm.min_arena, "head": tflm.head, "tail": tflm.tail, "seconds": round(t_tflm, 1)}
        if tflm else None,
        "ours": _side(ours, r_ours, s_ours), "default": _side(dflt, r_dflt, s_dflt),
        "int8": ours.int8, "tflm_max_abs_diff": diff, "tflm_identical": integer and diff == 0,
    }
    row["ram_vs_tflm"] = round(row["ours"]["ram_bytes"] / tflm.min_arena, 3) if tflm else None
    row["flash_vs_file"] = round(row["ours"]["flash_bytes"] / len(buf), 3)
    print(f"   TFLM {tflm.min_arena if tflm else '-'} B | ours RAM {row['ours']['ram_bytes']:,} B ({row['ram_vs_tflm']}x), "
          f"flash {row['ours']['flash_bytes']:,} B ({row['flash_vs_file']}x file) | TVM default RAM "
          f"{row['default']['ram_bytes']:,} B, flash {row['default']['flash_bytes']:,} B | vs TFLM max diff {diff}",
          flush=True)
    return row


def _side(exp, run, seconds) -> dict:
    return {"ram_bytes": exp.ram_bytes, "arena_bytes": exp.arena_bytes, "workspace_bytes": exp.workspace_bytes,
            "io_bytes": exp.io_bytes, "stack_bytes": exp.stack_bytes, "static_ram_bytes": exp.static_ram_bytes,
            "flash_bytes": exp.flash_bytes, "params_bytes": exp.params_bytes, "kernel_calls": exp.kernel_calls,
            "instructions": run.instructions if run else None, "ok_vs_tvm": run.ok if run else None,
            "fits": exp.fits, "export_seconds": round(seconds, 1)}


def markdown(rows, board) -> str:
    lines = [f"# Microcontroller path vs TFLite Micro ({board})", "",
             "RAM total = arena + runtime statics + stack estimate + I/O buffers (ours and TVM default, both "
             "exported to the same C runtime); TFLite Micro: the smallest arena its Python interpreter accepts "
             "for the same file (bisected). Instructions: QEMU's count for one inference.", "",
             "| model | file | TFLM arena | TVM default RAM | ours RAM | ours / TFLM | TVM default flash | "
             "ours flash | flash / file | instr. TVM default | instr. ours | vs TFLM |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        o, d = r["ours"], r["default"]
        check = ("bit-identical" if r["tflm_identical"] else f"max abs diff {r['tflm_max_abs_diff']:.3g}") \
            + ("" if r["tflm"] else " (vs LiteRT: TFLite Micro cannot run it)")
        arena = f"{r['tflm']['min_arena']:,}" if r["tflm"] else "cannot run"
        ratio = f"{r['ram_vs_tflm']}x" if r["ram_vs_tflm"] is not None else "-"
        lines.append(f"| {r['model']} | {r['file_bytes']:,} | {arena} | {d['ram_bytes']:,} | "
                     f"{o['ram_bytes']:,} | {ratio} | {d['flash_bytes']:,} | {o['flash_bytes']:,} | "
                     f"{r['flash_vs_file']}x | {_instr(d)} | {_instr(o)} | {check} |")
    lines += ["", "Int8 lowering per model:", ""]
    for r in rows:
        if r["int8"]:
            lines.append(f"* {r['model']}: {r['int8']['summary']}")
    return "\n".join(lines) + "\n"


def _instr(side) -> str:
    if side["instructions"] is not None:
        return f"{side['instructions']:,}"
    return "does not fit" if not side["fits"] else "host run"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="zoo:NAME, zoo:NAME:int8 or a .tflite path")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    skipped = []
    with tempfile.TemporaryDirectory() as work:
        for spec in args.models:
            try:
                rows.append(bench_one(spec, args.board, work))
            except MemschedError as e:          # e.g. custom operators: said, and the next model
                print(f"   skipped: {e}", flush=True)
                skipped.append({"model": spec, "reason": str(e)})
    meta = {"board": args.board, "machine": platform.machine(), "python": platform.python_version()}
    with open(os.path.join(args.out, "micro.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows, "skipped": skipped}, f, indent=1)
    text = markdown(rows, args.board) + "".join(f"\nSkipped {s['model']}: {s['reason']}\n" for s in skipped)
    with open(os.path.join(args.out, "micro.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
