#!/usr/bin/env python3
"""Stateful streaming keyword-spotting models: TFLite Micro arenas with our reordering and offline plan, and
the microcontroller export against TFLite Micro.

Models (``tvm_memsched.zoo.streaming``, int8, CALL_ONCE + resource variables): the small test model and a
microWakeWord-sized one, each in the ``traced`` operator order (every read next to its use) and the
``hoisted`` one (every READ_VARIABLE first, every ASSIGN_VARIABLE last), and the real microWakeWord
models shipped in the ``pymicro-wakeword`` wheel (converter output, Apache-2.0) when it is installed.
For each:

* ``tvm-memsched tflite --offline-plan`` (:func:`tvm_memsched.tflite.optimize.optimize_tflite` with
  ``measure`` and ``verify``): scheduled peak, TFLite Micro's head and smallest arena for IN, OUT and
  OUT + plan, and whether LiteRT and TFLite Micro give bit-identical outputs over 24 invocations;
* ``tvm-memsched micro --run``: our arena, state buffers and RAM total on a Cortex-M4F (mps2-an386,
  cross-compiled, QEMU) over 20 invocations checked against LiteRT's reference kernels, next to TFLite
  Micro's smallest arena for the same file.

    python scripts/bench_streaming.py --out docs/bench/streaming
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched import micro  # noqa: E402
from tvm_memsched.micro.run import default_sequence, litert_reference, run_qemu  # noqa: E402
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes  # noqa: E402
from tvm_memsched.tflite.optimize import optimize_tflite  # noqa: E402
from tvm_memsched.tflite.reader import read_tflite  # noqa: E402
from tvm_memsched.zoo.streaming import MICRO_WAKE_WORD_LIKE, SMALL, streaming_kws_tflite  # noqa: E402

CONFIGS = {"kws_small": SMALL, "kws_mww": MICRO_WAKE_WORD_LIKE}
#: real streaming models in the pymicro-wakeword wheel
WAKE_WORDS = ("okay_nabu", "hey_jarvis", "alexa", "hey_mycroft")


def real_models() -> dict:
    """``{label: .tflite bytes}`` of the pymicro-wakeword models (empty when the wheel is not installed)."""
    spec = importlib.util.find_spec("pymicro_wakeword")
    if spec is None:
        return {}
    out = {}
    for name in WAKE_WORDS:
        with open(os.path.join(spec.submodule_search_locations[0], "models", f"{name}.tflite"), "rb") as f:
            out[f"microWakeWord {name}"] = f.read()
    return out


def measure(name: str, buf: bytes, board: str, invocations: int) -> dict:
    tg = read_tflite(buf, name=name)
    t0 = time.perf_counter()
    res = optimize_tflite(tg, offline_plan=True, measure=True, verify=True)
    row = {"model": name, "file_bytes": len(buf), "ops": tg.graph.num_ops, "variables": len(tg.state.variables),
           "state_bytes": tg.state.bytes, "peak": res.peaks, "tflm_head": {k: v["head"] for k, v in res.measured.items()},
           "tflm_min_arena": {k: v["min_arena"] for k, v in res.measured.items()}, "used_plan": res.used_plan,
           "litert_identical": all(v["identical"] for v in res.litert.values()),
           "tflm_identical": all(v["identical"] for v in res.tflm.values()),
           "invocations_checked": res.litert["out"]["invocations"], "tflite_seconds": round(time.perf_counter() - t0, 1)}
    with tempfile.TemporaryDirectory() as d:
        exp = micro.export(from_tflite_bytes(buf), board, d)
        seq = default_sequence(exp, invocations, seed=0)
        r = run_qemu(exp, sequence=seq, reference=litert_reference(buf, seq), reference_name="LiteRT")
        row["micro"] = {"arena": exp.arena_bytes, "state": exp.state_bytes, "static_ram": exp.static_ram_bytes,
                        "stack": exp.stack_bytes, "io": exp.io_bytes, "ram_total": exp.ram_bytes,
                        "flash": exp.flash_bytes, "instructions": r.instructions, "ok": r.ok,
                        "invocations": r.invocations}
    row["micro_vs_tflm"] = round(row["tflm_min_arena"]["in"] / row["micro"]["ram_total"], 2)
    return row


def markdown(rows, meta) -> str:
    out = ["# Streaming keyword-spotting models (CALL_ONCE + resource variables, int8)", "",
           f"{meta['date']}, Python {meta['python']}, {meta['machine']}; `python scripts/bench_streaming.py`.", "",
           "## `tvm-memsched tflite --offline-plan`: TFLite Micro", "",
           "| model | ops | state B | peak IN -> OUT | TFLM head IN / OUT / +plan | TFLM smallest arena IN / OUT / "
           "+plan | LiteRT, TFLM outputs |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        h, a = r["tflm_head"], r["tflm_min_arena"]
        out.append(f"| {r['model']} | {r['ops']} | {r['state_bytes']} | {r['peak']['in']:,} -> {r['peak']['out']:,} | "
                   f"{h['in']:,} / {h['out']:,} / {h['out_plan']:,} | {a['in']:,} / {a['out']:,} / "
                   f"{a['out_plan']:,} | "
                   f"{'identical' if r['litert_identical'] and r['tflm_identical'] else 'DIFFERENT'} over "
                   f"{r['invocations_checked']} invocations |")
    out += ["", "## `tvm-memsched micro --run` (mps2-an386, Cortex-M4F, QEMU) vs TFLite Micro", "",
            "| model | arena | state | stack | I/O | RAM total | TFLM smallest arena | TFLM / ours | flash | "
            "flash / file | instructions per invocation | outputs vs LiteRT |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        m = r["micro"]
        out.append(f"| {r['model']} | {m['arena']:,} | {m['state']:,} | {m['stack']:,} | {m['io']:,} | "
                   f"{m['ram_total']:,} | {r['tflm_min_arena']['in']:,} | {r['micro_vs_tflm']}x | {m['flash']:,} | "
                   f"{m['flash'] / r['file_bytes']:.2f}x | "
                   f"{m['instructions']:,} | {'bit-identical' if m['ok'] else 'DIFFERENT'} over {m['invocations']} |")
    out += ["", "RAM total = arena + state buffers and runtime statics (linked) + stack estimate + I/O buffers. "
            "TFLite Micro's smallest arena includes its persistent tail (the variables, tensor and node "
            "structures); its planner's scratch during AllocateTensors, not the head, sets it for these models, "
            "so a smaller head does not always show there. The kws_* models are synthetic (random weights, "
            "`tvm_memsched.zoo.streaming`); the microWakeWord rows are the real models of the pymicro-wakeword "
            "wheel (2.5.0), driven by random int8 features.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write streaming.json and streaming.md here")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--invocations", type=int, default=20)
    args = ap.parse_args(argv)
    rows = []
    for name, cfg in CONFIGS.items():
        for layout in ("traced", "hoisted"):
            label = f"{name}_{layout}"
            print(f"{label} ...", file=sys.stderr)
            rows.append(measure(label, streaming_kws_tflite(cfg, layout=layout), args.board, args.invocations))
    for label, buf in real_models().items():
        print(f"{label} ...", file=sys.stderr)
        rows.append(measure(label, buf, args.board, args.invocations))
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "machine": platform.machine()}
    print(markdown(rows, meta))
    if args.out:
        write_results(args.out, "streaming", {"meta": meta, "rows": rows}, markdown(rows, meta))
    bad = [r["model"] for r in rows if not (r["litert_identical"] and r["tflm_identical"] and r["micro"]["ok"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
