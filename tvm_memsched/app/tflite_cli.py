"""The ``tvm-memsched tflite`` and ``tvm-memsched coral`` commands.

::

    tvm-memsched tflite IN.tflite --output OUT.tflite [--method M] [--offline-plan] [--report]
    tvm-memsched coral MODEL.tflite --stages K --out DIR [--fixed-order] [--time-limit S]

A model is a ``.tflite`` path or ``zoo:NAME`` / ``zoo:NAME:int8`` (a zoo model
written on the fly; :mod:`.models`). :func:`add_parsers` registers both sub-commands on the
main parser's sub-parsers; :func:`run_tflite` and :func:`run_coral` execute
them. Errors caused by the input are
:class:`~tvm_memsched.core.errors.MemschedError`\\ s (one line, exit code 2 in
the main CLI); outputs that are not bit-identical in LiteRT exit with 1.
"""

from __future__ import annotations

import os
import sys

from .models import add_tile_arguments, load_tflite_spec, parse_zoo_spec, search_tiling_for, wants_tiling
from .output import table, write_bytes, write_json
from .progress import progress_for

__all__ = ["add_parsers", "run_tflite", "run_coral"]


def add_parsers(subparsers) -> None:
    """Add the ``tflite`` and ``coral`` sub-commands to ``subparsers`` (an argparse sub-parsers object)."""
    from ..schedulers import available_methods

    s = subparsers.add_parser(
        "tflite", help="reorder a .tflite for less activation memory (optionally with a TFLM offline plan)",
        description="Schedule the operators of a .tflite model to minimise peak activation memory and write a "
                    ".tflite whose operator list follows the schedule. With --offline-plan, also write our arena "
                    "offsets as OfflineMemoryAllocation metadata for TensorFlow Lite Micro. --report measures "
                    "TFLM's arena for IN, OUT and OUT + plan and checks bit-identical LiteRT outputs.")
    s.add_argument("model", metavar="IN.tflite", help="a .tflite file, or zoo:NAME[:int8|:float16]")
    s.add_argument("--output", "-o", required=True, metavar="OUT.tflite")
    s.add_argument("--force", action="store_true", help="allow --output to overwrite the input file")
    s.add_argument("--method", default="auto", choices=available_methods(), help="scheduler (default auto)")
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="scheduler time limit")
    s.add_argument("--offline-plan", action="store_true",
                   help="write the arena plan as OfflineMemoryAllocation metadata (TFLite Micro)")
    s.add_argument("--inplace", choices=("windowed", "elementwise", "off"), default="windowed",
                   help="with --offline-plan, which outputs may be placed over an input that dies at their "
                        "operator: windowed (default) adds CONV_2D, DEPTHWISE_CONV_2D and pooling with shifts "
                        "computed from TFLite Micro's reference kernels; elementwise keeps to element-wise ops "
                        "and views, safe with optimised kernel libraries such as CMSIS-NN; off places nothing "
                        "over anything")
    s.add_argument("--no-inplace", dest="inplace", action="store_const", const="off",
                   help="same as --inplace off")
    s.add_argument("--report", action="store_true",
                   help="measure TFLM arenas (IN / OUT / OUT + plan) and check LiteRT and TFLM outputs bit for bit")
    add_tile_arguments(s, "MCUNetV2-style patches in builtin STRIDED_SLICE / PAD / CONCATENATION ops")
    s.add_argument("--json", metavar="REPORT.json", help="also write the figures as JSON")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=run_tflite)

    s = subparsers.add_parser(
        "coral", help="split a .tflite into K pipeline segments for K Coral Edge TPUs",
        description="Split the scheduled model into K contiguous segments minimising the slowest stage of a "
                    "K-Edge-TPU pipeline (cost model: compute, parameters over the 8 MiB SRAM, activations "
                    "crossing cuts). Writes K .tflite segments and manifest.json, and checks that the chained "
                    "segments give bit-identical outputs in LiteRT.")
    s.add_argument("model", metavar="MODEL.tflite", help="a .tflite file, or zoo:NAME[:int8|:float16]")
    s.add_argument("--stages", "-k", type=int, required=True, metavar="K", help="number of Edge TPUs")
    s.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory")
    s.add_argument("--method", default="auto", choices=available_methods(),
                   help="scheduler giving the base order (default auto)")
    s.add_argument("--fixed-order", action="store_true",
                   help="only cut the scheduled order (dynamic programming); default: also let CP-SAT "
                        "change the order")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                   help="CP-SAT time limit (default 10)")
    s.add_argument("--segmenter", choices=("exact", "learned"), default="exact",
                   help="exact: DP over the scheduled order, then CP-SAT over all orders, started from the better of "
                        "the DP and the learned segmenter (default); learned: "
                        "the RESPECT-style learned segmenter's decodes and the DP over the scheduled order, "
                        "best of them (no CP-SAT, not proven optimal)")
    s.add_argument("--tops", type=float, default=None, help="Edge TPU int8 peak in TOPS (default 4)")
    s.add_argument("--utilization", type=float, default=None, help="effective fraction of the peak (default 0.15)")
    s.add_argument("--sram-mib", type=float, default=None, help="on-chip parameter SRAM in MiB (default 8)")
    s.add_argument("--bandwidth-mbps", type=float, default=None, metavar="MB/S",
                   help="host link bandwidth for parameters and activations in MB/s (default 320, USB 3.0)")
    s.add_argument("--no-verify", action="store_true", help="skip the LiteRT check of the chained segments")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=run_coral)


def run_tflite(args) -> int:
    """Execute ``tvm-memsched tflite``; returns the exit code."""
    from ..tflite.optimize import optimize_tflite

    tg = load_tflite_spec(args.model)
    name = tg.graph.name
    original = tg
    tiling = None
    if wants_tiling(args):
        from ..tflite.reader import read_tflite

        tiling = search_tiling_for(tg, args, inplace=args.inplace if args.offline_plan else "off", tflm=None,
                                   progress=progress_for(args))
        if tiling.chosen is not None:
            tg = read_tflite(tiling.buf, name=tg.graph.name)
    res = optimize_tflite(tg, method=args.method, time_limit=args.time_limit, offline_plan=args.offline_plan,
                          measure=args.report, verify=args.report, progress=progress_for(args),
                          inplace=args.inplace)
    write_bytes(args.output, res.output)
    if args.json:
        write_json(args.json, res.to_dict())
    g = tg.graph
    p = res.predicted
    line = (f"{name}: {g.num_ops} ops; peak {res.peaks['in']} -> {res.schedule.peak_bytes} bytes ({args.method}); "
            f"TFLM head (predicted) IN {p['in']}, OUT {p['out']}")
    if "out_plan" in p:
        line += f", OUT + plan {p['out_plan']}"
        if p.get("out_plan_no_inplace", p["out_plan"]) != p["out_plan"]:
            line += f" ({p['out_plan_no_inplace']} without in-place)"
    print(line)
    if res.used_plan and res.plan_inplace:
        print(f"in-place ({args.inplace}): {res.plan_inplace} output(s) written over a dying input"
              + ("; conv/depthwise/pool overlaps assume TFLite Micro's reference kernels (use --inplace "
                 "elementwise with CMSIS-NN or other optimised kernels)" if res.plan_inplace_windowed else ""))
    if tg.stateful:
        print(f"state: {len(tg.state.variables)} resource variable(s), {tg.state.bytes} bytes, persistent outside "
              "the activation arena (TFLM: in the arena's tail); READ/ASSIGN order kept, CALL_ONCE initialisation "
              "subgraph unchanged")
    if args.report:
        print(res.table())
    if tiling is not None and tiling.chosen is not None and args.report:
        if not _check_tiled(original, res, tiling):
            return 1
    for n in res.notes:
        print(f"note: {n}")
    what = "with offline plan" if res.used_plan else "no offline plan"
    print(f"wrote {args.output} ({len(res.output)} bytes, {what})")
    if args.report and not res.identical:
        print("tvm-memsched: error: outputs of the rewritten model differ from the original (LiteRT or TFLite "
              "Micro)", file=sys.stderr)
        return 1
    return 0


def _check_tiled(original, res, tiling) -> bool:
    """The written file against the untiled original: LiteRT and TFLite Micro, bit for bit."""
    from ..core.errors import MemschedError
    from ..tflite.verify import compare_litert, compare_tflm, tflm_arena

    ok = compare_litert(original.buf, res.output, trials=2, reference_kernels=True).identical
    line = f"tiled output vs the untiled original: LiteRT (reference kernels) {'bit-identical' if ok else 'DIFFERENT'}"
    if original.dtype != "int8" and ok and not compare_litert(original.buf, res.output, trials=2).identical:
        line += " (LiteRT's optimised float kernels block their sums by tensor shape: last-bit differences there)"
    if not original.offset_buffers:
        try:
            t = compare_tflm(original.buf, res.output, trials=2).identical
            a, b = tflm_arena(original.buf).min_arena, tflm_arena(res.output).min_arena
            line += (f", TFLite Micro {'bit-identical' if t else 'DIFFERENT'}; TFLite Micro smallest arena "
                     f"{a:,} -> {b:,} B ({b / a:.3f}x)")
            ok = ok and t
        except MemschedError as e:
            line += f"; TFLite Micro could not run it: {e}"
    print(line)
    if not ok:
        print("tvm-memsched: error: the tiled model's outputs differ from the original's", file=sys.stderr)
    return ok


def run_coral(args) -> int:
    """Execute ``tvm-memsched coral``; returns the exit code."""
    from ..core.errors import MemschedError
    from ..tflite.coral import DEFAULT_COST_MODEL, EdgeTpuCostModel, coral_export

    if args.stages < 1:
        raise MemschedError(f"--stages must be at least 1, got {args.stages}")
    cm = DEFAULT_COST_MODEL
    over = {}
    if args.tops is not None:
        over["peak_tops"] = args.tops
    if args.utilization is not None:
        over["utilization"] = args.utilization
    if args.sram_mib is not None:
        over["sram_bytes"] = int(args.sram_mib * 2 ** 20)
    if args.bandwidth_mbps is not None:
        over["host_bandwidth"] = over["link_bandwidth"] = args.bandwidth_mbps * 1e6
    if over:
        cm = EdgeTpuCostModel(**{**cm.__dict__, **over})
    tg = load_tflite_spec(args.model)
    man, seg = coral_export(tg, args.stages, args.out, method=args.method, free_order=not args.fixed_order,
                            time_limit=args.time_limit, cost_model=cm, verify=not args.no_verify,
                            segmenter=args.segmenter,
                            source=None if parse_zoo_spec(args.model) else os.path.abspath(args.model),
                            progress=progress_for(args))
    rows = []
    for s in man["segments"]:
        rows.append([str(s["index"]), s["file"], str(s["ops"]), f"{s['param_bytes'] / 1024:.1f}",
                     f"{s['macs'] / 1e6:.2f}", f"{s['in_bytes'] / 1024:.1f}", f"{s['out_bytes'] / 1024:.1f}",
                     f"{s['compute_ms']:.4f}", f"{s['stream_ms']:.4f}", f"{s['transfer_ms']:.4f}",
                     f"{s['time_ms']:.4f}"])
    print(table(rows, ["stage", "file", "ops", "params KiB", "MMACs", "in KiB", "out KiB", "compute ms",
                        "stream ms", "transfer ms", "stage ms"]))
    sol, pred = man["solver"], man["predicted"]
    head = (f"bottleneck {pred['bottleneck_ms']:.4f} ms ({pred['throughput_per_s']:.1f} inferences/s, "
            f"{pred['speedup_vs_single_tpu']:.2f}x one Edge TPU at {pred['single_tpu_ms']:.4f} ms); ")
    if sol["method"] == "learned":
        proof = ("optimal (meets the lower bound)" if sol["optimal"] else
                 f"not proven optimal (trivial lower bound {sol['lower_bound_ms']:.4f} ms)")
        print(head + f"learned segmenter (best candidate: {seg.stats['best_from']}), {proof}")
    else:
        print(head + f"{sol['method']}, "
              f"{'proven optimal' if sol['optimal'] else 'lower bound %.4f ms' % sol['lower_bound_ms']}"
              f"{' over all orders' if sol['free_order'] else ' for the scheduled order'}")
    val = man.get("validation")
    if val:
        print(f"LiteRT: chained segments vs whole model: {'bit-identical' if val['identical'] else 'DIFFERENT'} "
              f"({val['trials']} random inputs)")
    print(f"wrote {len(man['segments'])} segments and manifest.json to {args.out}")
    if man["edgetpu_compatible"]:
        print("next, compile each segment for its Edge TPU (in " + args.out + "):")
        for c in man["edgetpu_compiler"]:
            print("  " + c)
    else:
        print("note: " + man["edgetpu_note"])
    if val and not val["identical"]:
        print("tvm-memsched: error: chained segments differ from the whole model", file=sys.stderr)
        return 1
    return 0

