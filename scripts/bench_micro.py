#!/usr/bin/env python3
"""Microcontroller path side by side with TFLite Micro (built from source) and TVM's default build, .tflite models.

For every model (``zoo:NAME`` for the zoo's float file, ``zoo:NAME:int8`` for
its full-integer file, or a path to a ``.tflite``), on one QEMU board:

* **TFLite Micro, memory**: the smallest arena its Python interpreter accepts
  for the file (bisected, :func:`tvm_memsched.tflite.verify.tflm_arena`);
* **TFLite Micro, speed** (``--tflm-src``): TFLite Micro built from its source
  as bare-metal firmware for the board twice, with its portable reference
  kernels and with CMSIS-NN kernels, running the same file on the same input;
  the exact instructions of ``Invoke()`` (a QEMU plugin), the firmware's flash,
  and the SHA-256 of its output bytes. This uses the measuring tool
  ``tflm_cortexm`` (``--tflm-tool``; its README says how to fetch and build the
  sources into the ``--tflm-src`` folder, about 15 minutes once): the tool
  builds and runs TFLite Micro for its board (``mps2-an386``), and for the
  Cortex-M55 / M33 / M0+ boards (``mps3-an547``, ``mps2-an505``,
  ``mps2-an385-m0plus``: TFLM's ``cortex-m55`` / ``cortex-m33`` /
  ``cortex-m0plus`` targets) from a copy patched with
  ``docs/bench/micro/cortex-m55/tflm_cortexm_cores.diff``; this script only
  calls it and reads its lines;
* **TVM default**: ``micro.export(planner="tvm", int8=False)``: TVM's own
  import (dequantize -> float -> quantize for int8 files), kernels, order and
  ``StaticPlanBlockMemory`` plan, exported to the same C runtime;
* **ours**: ``micro.export()`` with every default (int8 lowering, the
  microkernel library, memory-aware order, one arena), and with
  ``--tvm-kernels`` also ``kernels="tvm"`` (TVM's C for every kernel: the
  speed before the library);

each cross-compiled for the board (flash, static RAM, stack) and run in QEMU
(instructions per inference, exact under ``-icount shift=0``). Everything runs
on the same input: TFLite Micro's tool pattern (byte ``k`` of every input is
``(7k + 3) & 255``; all-zero bytes for float inputs, whose bit patterns would
otherwise be NaNs), so our output bytes are compared with the TFLite Micro
firmware's (SHA-256), and with TFLite Micro's Python interpreter and TVM.

Results go to ``--out`` as ``micro.json`` and ``micro.md``.

    python scripts/bench_micro.py --out docs/bench/micro --tflm-src /tmp/tflm_cm \\
        --tflm-tool ../shared/tools/tflm_cortexm --tvm-kernels \\
        zoo:ds_cnn:int8 zoo:mobilenet_v1_025:int8 zoo:resnet8:int8 zoo:fc_autoencoder:int8 \\
        zoo:mobilenet_v2:int8 zoo:swiftnet_like:int8 zoo:darts_v2_cifar_tiny:int8 zoo:densenet_like:int8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import micro, zoo  # noqa: E402
from tvm_memsched.core.errors import MemschedError  # noqa: E402
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes  # noqa: E402
from tvm_memsched.relax.int8.kernels import module_macs  # noqa: E402
from tvm_memsched.tflite.reader import read_tflite  # noqa: E402
from tvm_memsched.tflite.verify import litert_run, tflm_arena, tflm_run  # noqa: E402

DEFAULT_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "tools",
                            "tflm_cortexm")


def load(spec: str) -> tuple[str, bytes]:
    if spec.startswith("zoo:"):
        parts = spec[4:].split(":")
        dtype = parts[1] if len(parts) > 1 else "float32"
        return spec[4:].replace(":", "_"), zoo.tflite(parts[0], dtype)
    with open(spec, "rb") as f:
        return os.path.splitext(os.path.basename(spec))[0], f.read()


def input_names(buf: bytes) -> list[str]:
    from tvm_memsched.tflite.builder import load as load_model

    m = load_model(buf)
    sg = m.subgraphs[0]
    return [sg.tensors[i].name.decode() for i in sg.inputs]


def pattern_inputs(mod, pattern: int) -> list[np.ndarray]:
    """The inputs TFLite Micro's tool writes: byte k = (7k + 3) & 255 (pattern 1) or zero bytes (0)."""
    out = []
    for p in mod["main"].params:
        shape = [int(v) for v in p.ty.shape.values]
        dtype = np.dtype(str(p.ty.dtype))
        n = math.prod(shape) * dtype.itemsize
        raw = ((np.arange(n) * 7 + 3) & 0xFF).astype(np.uint8) if pattern else np.zeros(n, np.uint8)
        out.append(raw.view(dtype).reshape(shape))
    return out


def output_sha(outputs) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in outputs)).hexdigest()[:16]


# ------------------------------------------------------------------ TFLite Micro from source (the tool)
_LINE = re.compile(r"^(\S+) (reference|cmsis_nn) (.*)$")


#: the arena of the tool's first firmware build (build_and_run.sh, pass 1)
TOOL_ARENA = 1 << 20


#: the tool's ``CORE`` for each board it does not build for by default (the M4F's ``mps2-an386``):
#: the Cortex-M55, M33 and M0+ firmware the patch below adds to it
TOOL_CORES = {"mps3-an547": "m55", "mps2-an505": "m33", "mps2-an385-m0plus": "m0plus"}
#: the patch that adds them (``CORE=m55|m33|m0plus``) to ``../shared/tools/tflm_cortexm``
CORES_DIFF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "bench", "micro", "cortex-m55",
                          "tflm_cortexm_cores.diff")


def tool_for_board(tool: str, board: str, scratch: str) -> tuple[str, str | None]:
    """``(tool folder, CORE)`` that builds TFLite Micro for ``board``: the M4F's board as the tool is; another
    core from a copy of the tool in ``scratch`` with :data:`CORES_DIFF` applied, unless the tool has it."""
    core = TOOL_CORES.get(board)
    if board != "mps2-an386" and core is None:
        raise SystemExit(f"--tflm-src: the tool builds TFLite Micro for mps2-an386 and {', '.join(TOOL_CORES)} "
                         f"only, not {board}")
    if core is None:
        return tool, None
    with open(os.path.join(tool, "build_and_run.sh"), encoding="utf-8") as f:
        if "CORE=" in f.read():
            return tool, core
    copy = os.path.join(scratch, "tflm_cortexm")
    if not os.path.exists(copy):
        shutil.copytree(tool, copy)
        for root, _dirs, files in os.walk(copy):
            for name in files:
                os.chmod(os.path.join(root, name), 0o755)
        with open(CORES_DIFF, "rb") as diff:
            proc = subprocess.run(["patch", "-s", "-p1", "-d", copy], stdin=diff, capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"{CORES_DIFF} does not apply to {tool}: "
                             f"{(proc.stdout + proc.stderr).decode(errors='replace').strip()[-300:]}")
    return copy, core


def tflm_firmware(tool: str, src: str, path: str, pattern: int, configs: str = "reference cmsis_nn",
                  timeout: float = 3600, core: str | None = None) -> dict:
    """``{config: {instructions, arena_used, flash, static_ram, out_sha}}`` from the tool's output lines
    (``core``: the tool's ``CORE`` for a board other than the M4F's, :func:`tool_for_board`)."""
    env = dict(os.environ, TFLM_CM=src, INPUT_PATTERN=str(pattern), CONFIGS=configs)
    if core:
        env["CORE"] = core
    proc = subprocess.run(["bash", os.path.join(tool, "build_and_run.sh"), path], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise MemschedError(f"TFLite Micro's tool failed ({proc.returncode}): {tail}")
    res = {}
    for line in proc.stdout.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        if m.group(3).startswith("FAILED"):
            res[m.group(2)] = {"failed": m.group(3)}
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", m.group(3)))
        res[m.group(2)] = {k: (int(v) if v.isdigit() else v) for k, v in kv.items()}
    return res


# ------------------------------------------------------------------ our side and TVM's
def run_side(mod, board, out_dir, inputs, **kw):
    t0 = time.perf_counter()
    exp = micro.export(mod, board, out_dir, check_fit=False, **kw)
    seconds = time.perf_counter() - t0
    try:
        r = micro.run_qemu(exp, inputs, check=True, atol=1e-3, rtol=1e-3)
    except micro.DoesNotFitError as e:          # e.g. float32 weights overflow the board's flash
        print(f"   {kw.get('planner', 'ours')}: not run in QEMU: {e}", flush=True)
        r = None
    return exp, r, seconds


def _side(exp, run, seconds) -> dict:
    return {"ram_bytes": exp.ram_bytes, "arena_bytes": exp.arena_bytes, "workspace_bytes": exp.workspace_bytes,
            "io_bytes": exp.io_bytes, "stack_bytes": exp.stack_bytes, "static_ram_bytes": exp.static_ram_bytes,
            "flash_bytes": exp.flash_bytes, "params_bytes": exp.params_bytes, "kernel_calls": exp.kernel_calls,
            "library_kernels": len(exp.library_kernels), "kernels": exp.kernels,
            "instructions": run.instructions if run else None, "ok_vs_tvm": run.ok if run else None,
            "out_sha": output_sha(run.outputs) if run else None, "fits": exp.fits,
            "export_seconds": round(seconds, 1)}


def bench_one(spec: str, board: str, work: str, tool: str | None, src: str | None, tvm_kernels: bool,
              configs: str = "reference cmsis_nn", core: str | None = None) -> dict:
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
    integer_in = all(str(p.ty.dtype).startswith(("int", "uint")) for p in mod["main"].params)
    pattern = 1 if integer_in else 0
    inputs = pattern_inputs(mod, pattern)
    macs = module_macs(mod)
    firmware = None
    if tool and src and tflm is not None:
        path = os.path.join(work, f"{name}.tflite")
        with open(path, "wb") as f:
            f.write(buf)
        print(f"   TFLite Micro firmware ({configs}) ...", flush=True)
        firmware = tflm_firmware(tool, src, path, pattern, configs, core=core)
    ours, r_ours, s_ours = run_side(mod, board, os.path.join(work, name, "ours"), inputs)
    plain = run_side(mod, board, os.path.join(work, name, "ours_tvm_kernels"), inputs, kernels="tvm") \
        if tvm_kernels else None
    dflt, r_dflt, s_dflt = run_side(mod, board, os.path.join(work, name, "default"), inputs, planner="tvm",
                                    int8=False)
    if r_ours is None:
        raise SystemExit(f"{name}: our export does not link for {board}")
    feeds = dict(zip(input_names(buf), inputs))
    ref = [np.asarray(o) for o in tflm_run(buf, feeds)] if tflm else \
        [np.asarray(o) for o in litert_run(buf, feeds).values()]
    ours_out = [np.asarray(o) for o in r_ours.outputs]
    integer = all(np.issubdtype(o.dtype, np.integer) for o in ours_out)
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b.reshape(a.shape).astype(np.float64))))
               for a, b in zip(ours_out, ref))
    row = {
        "model": name, "file_bytes": len(buf), "macs": macs, "input_pattern": pattern,
        "reference": "TFLite Micro" if tflm else "LiteRT",
        "tflm": {"min_arena": tflm.min_arena, "head": tflm.head, "tail": tflm.tail, "seconds": round(t_tflm, 1)}
        if tflm else None,
        "tflm_firmware": firmware,
        "ours": _side(ours, r_ours, s_ours), "default": _side(dflt, r_dflt, s_dflt),
        "ours_tvm_kernels": _side(*plain) if plain else None,
        "int8": ours.int8, "tflm_max_abs_diff": diff, "tflm_identical": integer and diff == 0,
    }
    row["ram_vs_tflm"] = round(row["ours"]["ram_bytes"] / tflm.min_arena, 3) if tflm else None
    row["flash_vs_file"] = round(row["ours"]["flash_bytes"] / len(buf), 3)
    ins = row["ours"]["instructions"]
    row["instructions_per_mac"] = round(ins / macs, 2) if ins and macs else None
    cm = (firmware or {}).get("cmsis_nn", {})
    row["vs_cmsis_nn"] = round(ins / cm["instructions"], 3) if ins and cm.get("instructions") else None
    ref = (firmware or {}).get("reference", {})
    row["vs_reference"] = round(ins / ref["instructions"], 3) if ins and ref.get("instructions") else None
    row["firmware_identical"] = {cfg: v.get("out_sha") == row["ours"]["out_sha"]
                                 for cfg, v in (firmware or {}).items() if "out_sha" in v}
    print(f"   ours {ins:,} instructions ({row['instructions_per_mac']} per MAC)"
          + (f", {row['vs_cmsis_nn']}x TFLite Micro + CMSIS-NN ({cm['instructions']:,})" if row["vs_cmsis_nn"]
             else "")
          + (f", {row['vs_reference']}x TFLite Micro reference ({ref['instructions']:,})" if row["vs_reference"]
             else "")
          + f" | RAM {row['ours']['ram_bytes']:,} B"
          + (f" ({row['ram_vs_tflm']}x TFLM's arena)" if tflm else "")
          + f", flash {row['ours']['flash_bytes']:,} B ({row['flash_vs_file']}x the file) | outputs vs "
            f"{row['reference']}: max diff {diff}"
          + (f", firmware {row['firmware_identical']}" if firmware else ""), flush=True)
    return row


# ------------------------------------------------------------------ tables
def _n(v, unit="") -> str:
    return "-" if v is None else (f"{v:,}{unit}" if isinstance(v, int) else str(v))


def _instr(side) -> str:
    if side is None:
        return "-"
    if side["instructions"] is not None:
        return f"{side['instructions']:,}"
    return "does not fit" if not side["fits"] else "not run"


def markdown(rows, board) -> str:
    lines = [f"# Microcontroller path vs TFLite Micro ({board})", "",
             "Same QEMU board, same file, same input. **TFLite Micro** built from its source (reference kernels; "
             "CMSIS-NN kernels): exact instructions of `Invoke()`, firmware flash (text + data, with the model), "
             "and the smallest arena its Python interpreter accepts (bisected). **TVM default**: TVM's import, "
             "kernels, order and plan exported to our C runtime. **Ours**: every default (int8 lowering, the "
             "microkernel library, memory-aware order and one arena); RAM total = arena + runtime statics + "
             "stack estimate + I/O buffers. Instructions: QEMU's count for one inference (`-icount shift=0`).", "",
             "## Speed", "",
             "| model | MACs | TFLM ref. | TFLM CMSIS-NN | TVM default | ours, TVM's kernels | ours | per MAC "
             "| ours / ref. | ours / CMSIS-NN | outputs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        fw = r.get("tflm_firmware") or {}
        same = r.get("firmware_identical") or {}
        check = ("bit-identical" if r["tflm_identical"] else f"max abs diff {r['tflm_max_abs_diff']:.3g}") \
            + (" (and the firmware's bytes)" if same and all(same.values()) else "") \
            + ("" if r["tflm"] else " (vs LiteRT: TFLite Micro cannot run it)")
        ratio = " | ".join(f"{r[k]:.2f}x" if r.get(k) else "-" for k in ("vs_reference", "vs_cmsis_nn"))
        lines.append(f"| {r['model']} | {r['macs']:,} | {_n(fw.get('reference', {}).get('instructions'))} | "
                     f"{_n(fw.get('cmsis_nn', {}).get('instructions'))} | {_instr(r['default'])} | "
                     f"{_instr(r.get('ours_tvm_kernels'))} | {_instr(r['ours'])} | "
                     f"{_n(r.get('instructions_per_mac'))} | {ratio} | {check} |")
    lines += ["", "## Memory", "",
              "| model | file | TFLM arena | TFLM firmware flash (ref. / CMSIS-NN) | TVM default RAM | ours RAM | "
              "ours / TFLM arena | TVM default flash | ours flash | flash / file |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        o, d, fw = r["ours"], r["default"], r.get("tflm_firmware") or {}
        arena = f"{r['tflm']['min_arena']:,}" if r["tflm"] else "cannot run"
        ratio = f"{r['ram_vs_tflm']}x" if r["ram_vs_tflm"] is not None else "-"
        flash = f"{_n(fw.get('reference', {}).get('flash'))} / {_n(fw.get('cmsis_nn', {}).get('flash'))}" \
            if fw else "-"
        lines.append(f"| {r['model']} | {r['file_bytes']:,} | {arena} | {flash} | {d['ram_bytes']:,} | "
                     f"{o['ram_bytes']:,} | {ratio} | {_n(d['flash_bytes'])} | {_n(o['flash_bytes'])} | "
                     f"{r['flash_vs_file']}x |")
    failures = [(r, cfg, v["failed"]) for r in rows for cfg, v in (r.get("tflm_firmware") or {}).items()
                if "failed" in v]
    if failures:
        lines += ["", "TFLite Micro firmware that did not run:", ""]
        for r, cfg, why in failures:
            big = r["tflm"] and r["tflm"]["min_arena"] > TOOL_ARENA
            why = re.sub(r"^FAILED |\s*\(see [^)]*\)", "", why)
            lines.append(f"* {r['model']} ({cfg}): {why}" + (
                f" (the tool's firmware has a {TOOL_ARENA:,} B arena; TFLite Micro needs "
                f"{r['tflm']['min_arena']:,} B for this file)" if big else ""))
    lines += ["", "Int8 lowering and kernels per model:", ""]
    for r in rows:
        if r["int8"]:
            lines.append(f"* {r['model']}: {r['int8']['summary']}; {r['ours']['library_kernels']} of "
                         f"{r['ours']['kernels']} kernels by the microkernel library")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="zoo:NAME, zoo:NAME:int8 or a .tflite path")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tflm-src", metavar="DIR",
                    help="TFLite Micro's sources and built libraries (the tool's TFLM_CM folder): measure its "
                         "firmware side by side (instructions, flash, output bytes)")
    ap.add_argument("--tflm-tool", metavar="DIR", default=DEFAULT_TOOL,
                    help="the tflm_cortexm measuring tool (build_and_run.sh; default: %(default)s)")
    ap.add_argument("--tflm-configs", default="reference cmsis_nn",
                    help="the TFLite Micro builds to measure (the tool's CONFIGS; default: %(default)s)")
    ap.add_argument("--tvm-kernels", action="store_true",
                    help="also run our export with TVM's C for every kernel (kernels='tvm')")
    args = ap.parse_args(argv)
    if args.tflm_src and not os.path.exists(os.path.join(args.tflm_tool, "build_and_run.sh")):
        ap.error(f"--tflm-tool {args.tflm_tool}: no build_and_run.sh there")
    os.makedirs(args.out, exist_ok=True)
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as work:
        tool, core = tool_for_board(args.tflm_tool, args.board, work) if args.tflm_src else (None, None)
        for spec in args.models:
            try:
                rows.append(bench_one(spec, args.board, work, tool, args.tflm_src, args.tvm_kernels,
                                      args.tflm_configs, core))
            except MemschedError as e:          # e.g. custom operators: said, and the next model
                print(f"   skipped: {e}", flush=True)
                skipped.append({"model": spec, "reason": str(e)})
    meta = {"board": args.board, "machine": platform.machine(), "python": platform.python_version(),
            "tflm_commit": _tflm_commit(args.tflm_src),
            "command": "python scripts/bench_micro.py " + shlex.join(sys.argv[1:])}
    with open(os.path.join(args.out, "micro.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows, "skipped": skipped}, f, indent=1)
    text = markdown(rows, args.board) + "".join(f"\nSkipped {s['model']}: {s['reason']}\n" for s in skipped)
    if meta["tflm_commit"]:
        text += f"\nTFLite Micro commit {meta['tflm_commit']}.\n"
    text += f"\nCommand: `{meta['command']}`\n"
    with open(os.path.join(args.out, "micro.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


def _tflm_commit(src: str | None) -> str | None:
    path = os.path.join(src, "tflite-micro.commit") if src else None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()[:12]
    return None


if __name__ == "__main__":
    sys.exit(main())
