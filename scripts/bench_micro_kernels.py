#!/usr/bin/env python3
"""Microcontroller export with and without ShrinkWorkspace / ShrinkConstants, next to TFLite Micro.

For every model (a ``.tflite`` file or ``zoo:NAME``) this exports for the
board twice with :func:`tvm_memsched.micro.export` (``compare_default=True``,
cross-compiled to measure flash, RAM and stack):

* **off**: ``shrink_workspace=False, shrink_constants=False`` (TVM's kernels
  and the constants as imported: what the export did before the two passes);
* **on**: the defaults.

and records the arena, the largest kernel workspace, RAM total, flash and the
constants, TVM's default plan's arena, the weight bytes the ``.tflite`` file
stores, and (``--tflm``) TFLite Micro's smallest arena for the same file.
``--run`` also runs the "on" export in QEMU (when it fits the board) and
checks it against TVM's VM.

    python scripts/bench_micro_kernels.py model.tflite zoo:mobilenet_v2 --out /tmp/mk --tflm --run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import micro  # noqa: E402
from tvm_memsched.relax.frontends.frontend import load_relax_model  # noqa: E402

COLUMNS = ("arena", "largest workspace", "RAM total", "flash", "constants", "TVM default arena")


def file_weights(spec: str) -> tuple[bytes | None, int | None]:
    """The .tflite file's bytes and the bytes of its constant buffers (None for zoo models)."""
    if not spec.endswith(".tflite"):
        return None, None
    from tvm_memsched.tflite.builder import load

    buf = open(spec, "rb").read()
    return buf, sum(len(b.data) for b in load(buf).buffers if b.data is not None)


def export_row(exp) -> dict:
    return {"arena": exp.arena_bytes, "largest workspace": exp.workspace_bytes, "RAM total": exp.ram_bytes,
            "flash": exp.flash_bytes, "constants": exp.params_bytes, "TVM default arena": exp.default.arena_bytes,
            "stack": exp.stack_bytes, "io": exp.io_bytes, "kernels shrunk": len(exp.shrunk_kernels),
            "constants shrunk": len(exp.shrunk_constants), "seconds": exp.seconds}


def bench(spec: str, board: str, out: str, tflm: bool, run: bool) -> dict:
    mod, name = load_relax_model(spec)
    buf, weights = file_weights(spec)
    row = {"model": name, "file_bytes": len(buf) if buf else None, "weight_bytes": weights}
    for label, kw in (("off", {"shrink_workspace": False, "shrink_constants": False}), ("on", {})):
        exp = micro.export(mod, board, os.path.join(out, name, label), compare_default=True, check_fit=False, **kw)
        row[label] = export_row(exp)
        print(f"{name} [{label}]\n{exp.summary()}", flush=True)
    if run and not exp.fits:
        row["run"] = {"ok": None, "skipped": "does not fit the board"}
    elif run:
        t0 = time.perf_counter()
        r = micro.run_qemu(exp)
        row["run"] = {"ok": r.ok, "max_abs_err": r.max_abs_err, "instructions": r.instructions,
                      "stack_used": r.stack_used, "seconds": round(time.perf_counter() - t0, 1)}
        print(r.summary(), flush=True)
    if tflm and buf is not None:
        from tvm_memsched.core.errors import MemschedError
        from tvm_memsched.tflite.verify import tflm_arena

        try:
            row["tflm_min_arena"] = tflm_arena(buf).min_arena
        except MemschedError as e:  # e.g. TFLM has no float16 DEQUANTIZE
            row["tflm_min_arena"] = None
            row["tflm_error"] = str(e).splitlines()[-1][:200]
    return row


def table(rows) -> str:
    def n(v):
        return "-" if v is None else f"{v:,}"

    out = ["| model | " + " | ".join(f"{c} off / on" for c in COLUMNS) + " | TFLM arena | file weights |",
           "|---" * (len(COLUMNS) + 3) + "|"]
    for r in rows:
        cells = [f"{n(r['off'][c])} / {n(r['on'][c])}" for c in COLUMNS]
        out.append(f"| {r['model']} | " + " | ".join(cells) + f" | {n(r.get('tflm_min_arena'))} | "
                   f"{n(r['weight_bytes'])} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help=".tflite files or zoo:NAME")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--out", required=True, help="directory for the exports and micro_kernels.{json,md}")
    ap.add_argument("--tflm", action="store_true", help="also bisect TFLite Micro's smallest arena")
    ap.add_argument("--run", action="store_true", help="run the 'on' export in QEMU against TVM's VM")
    args = ap.parse_args(argv)
    rows = [bench(m, args.board, args.out, args.tflm, args.run) for m in args.models]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "micro_kernels.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1, default=str)
    with open(os.path.join(args.out, "micro_kernels.md"), "w", encoding="utf-8") as f:
        f.write(table(rows) + "\n")
    print(table(rows))
    return 0 if all(r.get("run", {}).get("ok", True) is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
