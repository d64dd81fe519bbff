"""The ``tvm-memsched micro`` command: export a model for a microcontroller board, check, run.

::

    tvm-memsched micro zoo:randwire_tiny --board mps2-an386 --out build/rw --run
    tvm-memsched micro model.tflite --board nucleo_l4r5zi --out build/m --compare-default --run
    tvm-memsched micro --list-boards

For a ``.tflite`` model (or ``zoo:NAME:int8``) the command also measures
TFLite Micro's smallest arena for the same file (``--compare-tflm``, on by
default when tflite-micro is installed) and, with ``--run``, checks our
outputs against TFLite Micro's (bit for bit for integer outputs) and reports
LiteRT's reference kernels alongside. ``--compare-default`` exports TVM's
default build too (``OUT/tvm_default``: TVM's import arithmetic, kernels, order
and plan) and, with ``--run``, runs it for its instruction count. The printed
side-by-side table and ``<name>_report.json`` hold all of it.

``--harness mlperf-tiny[:BENCHMARK]`` also writes the device side of MLPerf Tiny's runner (EEMBC
EnergyRunner) next to the export (``OUT/mlperf_tiny``, :mod:`tvm_memsched.micro.mlperf_tiny`); with
``--run`` it drives that firmware in QEMU (or on the host with ``--host``) over its serial port with the
runner's commands and checks its ``m-results`` against the run's outputs (and LiteRT's for a .tflite).

:func:`add_parser` registers the sub-command on the main parser's sub-parsers
and :func:`run` executes it (the model spec: :mod:`.models`). Errors caused by the input (unknown board, model
too large, unsupported operator, missing toolchain) are
:class:`~tvm_memsched.core.errors.MemschedError`\\ s, which the main CLI prints
as one line with exit code 2; outputs that differ from TVM's exit with 1.
"""

from __future__ import annotations

import sys

from ..micro.mlperf_tiny import BENCHMARKS as MLPERF_BENCHMARKS
from ..micro.sidebyside import check_against_tflite, side_by_side, tflite_available, tflm_refuses
from ..relax.options import PipelineOptions
from ..relax.options import add_arguments as add_pipeline_arguments
from .models import add_input_shape_argument, add_tile_arguments, add_verbose_argument, wants_tiling
from .output import write_json
from .progress import progress_for

#: invocations ``--run`` checks for a stateful model (its state carried from one to the next)
STATEFUL_INVOCATIONS = 20

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    """Add the ``micro`` sub-command to ``subparsers`` (an argparse sub-parsers object)."""
    s = subparsers.add_parser(
        "micro", help="export a model as C for a microcontroller (one static arena) and run it in QEMU",
        description="Compile MODEL with tvm_memsched's pipeline and TVM's C code generator into a C project "
                    "with one static arena for a microcontroller board; optionally run it (QEMU or host) and "
                    "check its outputs against TVM.")
    s.add_argument("model", metavar="MODEL", nargs="?", help="a .tflite, .onnx or .pt2 file, or zoo:NAME[:int8|:float16]")
    add_input_shape_argument(s)
    s.add_argument("--board", "-b", help="target board (see --list-boards)")
    s.add_argument("--out", "-o", metavar="DIR", help="output directory for the C project")
    s.add_argument("--list-boards", action="store_true", help="list the known boards and exit")
    add_pipeline_arguments(s, "micro")        # --method, --time-limit, --no-int8, ...: PipelineOptions' fields
    s.add_argument("--name", default="model", help="C prefix: NAME_run, NAME.c, NAME.h (default model)")
    s.add_argument("--planner", default="tvm_memsched", choices=["tvm_memsched", "tvm"],
                   help="export our plan (default) or TVM's order and StaticPlanBlockMemory plan")
    s.add_argument("--compare-default", action="store_true",
                   help="also export TVM's default build (OUT/tvm_default: TVM's arithmetic, kernels, order and "
                        "plan) and compare RAM, flash and (with --run) instructions")
    s.add_argument("--compare-tflm", dest="compare_tflm", action="store_true", default=None,
                   help="measure TFLite Micro's smallest arena for the same .tflite file (default: on for .tflite "
                        "models when tflite-micro is installed)")
    s.add_argument("--no-compare-tflm", dest="compare_tflm", action="store_false")
    add_tile_arguments(s, "the model's .tflite is tiled in builtin ops, then imported; --run checks the outputs "
                          "against the untiled model")
    add_verbose_argument(s)
    s.add_argument("--inline-padding", action="store_true",
                   help="with --no-shrink-workspace: only inline convolution padding and element-wise stages")
    s.add_argument("--kernels", choices=["auto", "fast", "tvm"], default="auto",
                   help="fast: integer convolutions, fully connected layers, pools, ADD and table operators by "
                        "tvm_memsched's microkernel library (SMLAD on DSP cores), bit-identical, faster, a little "
                        "more RAM (column buffers, stack); tvm: TVM's C for every kernel (least RAM); auto "
                        "(default): fast unless its RAM total exceeds tvm's by more than 5%% (and 256 B); both are reported")
    s.add_argument("--no-fma", action="store_true",
                   help="the library's float kernels without fused multiply-add: the same floats as TVM's "
                        "kernels (default: VFMA on cores with an FPU, faster, last-bit differences)")
    s.add_argument("--widen-float16", action="store_true",
                   help="a model with float16 weights: store its convolution and fully connected weights float32 "
                        "(twice their flash, about 1.4x fewer instructions; default: kept float16 in flash and "
                        "widened as read; the int8 weights of a dynamic-range (hybrid) model likewise)")
    s.add_argument("--run", action="store_true", help="build and run on QEMU (or the host with --host), "
                                                      "compare the outputs with TVM's")
    s.add_argument("--profile", action="store_true",
                   help="with --run on a Cortex-M board: also time every kernel call and print where the "
                        "instructions go (per kernel: instructions, share, MACs, instructions per MAC)")
    s.add_argument("--host", action="store_true", help="with --run: build with the host compiler and run natively")
    s.add_argument("--seed", type=int, default=0, help="seed of the fixed test input (default 0)")
    s.add_argument("--invocations", type=int, default=None, metavar="N",
                   help="with --run: invoke the model N times on successive inputs (default 1; 20 for stateful "
                        "models, whose state carries over; a stateful .tflite is checked against LiteRT)")
    s.add_argument("--harness", choices=["mlperf-tiny"] + [f"mlperf-tiny:{b}" for b in MLPERF_BENCHMARKS],
                   help="also write the device side of MLPerf Tiny's runner (EEMBC EnergyRunner: serial commands, "
                        "th_* API) to OUT/mlperf_tiny; with --run, drive it in QEMU (--host: natively) with the "
                        "runner's commands and check its results. mlperf-tiny sends every input as stored; "
                        ":kws01/:vww01/:ic01/:ad01 use that benchmark's data and result conventions")
    s.add_argument("--no-measure", action="store_true",
                   help="do not cross-compile to measure flash and stack (no arm-none-eabi-gcc needed)")
    s.add_argument("--no-check-fit", action="store_true", help="do not fail when the model does not fit the board")
    s.add_argument("--json", metavar="OUT.json", help="also write the sizes (and run results) as JSON")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=run)
    return s


def run(args) -> int:
    """Execute ``tvm-memsched micro`` (see the module docstring); returns the exit code."""
    from ..core.errors import MemschedError
    from ..micro.boards import boards_table, get_board

    if args.list_boards:
        print(boards_table())
        return 0
    missing = [flag for flag, v in (("MODEL", args.model), ("--board", args.board), ("--out", args.out)) if not v]
    if missing:
        raise MemschedError(f"micro: {', '.join(missing)} required (or --list-boards)")
    board = get_board(args.board)
    if args.harness and args.run and not args.host and not board.runnable:
        raise MemschedError(f"--harness with --run: board {board.name} has no QEMU machine to run the harness on "
                            "(use --host, or drop --run to only write it)")
    opts = PipelineOptions.from_cli(args, progress=progress_for(args))     # checked: a bad value fails here

    from ..micro.builder import export
    from ..tflite.builder import offset_buffer_count
    from .models import load_relax_spec, tflite_bytes

    if args.invocations is not None and args.invocations < 1:
        raise MemschedError(f"--invocations must be at least 1, got {args.invocations}")
    mod, model_name = load_relax_spec(args.model, input_shapes=args.input_shape)
    tfl = tflite_bytes(args.model, args.input_shape)
    refused = tflm_refuses(tfl) if tfl is not None else None
    tflm_readable = tfl is not None and tflite_available() and not offset_buffer_count(tfl) and not refused
    compare_tflm = args.compare_tflm
    if compare_tflm is None:
        compare_tflm = tflm_readable
    elif compare_tflm and tfl is None:
        raise MemschedError(f"--compare-tflm needs a .tflite model (or zoo:NAME:int8), got '{args.model}'")
    elif compare_tflm and not tflm_readable:
        raise MemschedError(f"--compare-tflm: TFLite Micro cannot read {args.model}" +
                            (f": {refused}" if refused else
                             ", whose constants are stored after the flatbuffer (Buffer.offset)"
                             if offset_buffer_count(tfl) else " (tflite-micro is not installed)"))
    if refused and args.compare_tflm is None:
        print(f"{refused}: comparing with LiteRT (reference kernels) only")
    original = mod
    if wants_tiling(args):
        from .models import tiled_relax_spec

        tiled, _, untiled, buf = tiled_relax_spec(args.model, args, progress=progress_for(args))
        if tiled is not None:           # --run checks against the untiled model (TVM, and TFLite Micro's file)
            original, mod = untiled, tiled
            if buf is not None:
                tfl = buf
                refused = tflm_refuses(tfl)
                tflm_readable = tflite_available() and not offset_buffer_count(tfl) and not refused
                compare_tflm = tflm_readable if args.compare_tflm is None else compare_tflm
    if opts.rewrite:                    # --run checks the outputs against TVM on the original model
        from ..relax.rewrite import identity_rewrite

        mod, rw = identity_rewrite(mod, policy=opts.rewrite)
        opts = opts.replace(rewrite=False)
        rules = sorted({site.rule for site in rw.sites})
        print(f"identity rewrites: {len(rw.sites)}" + (f" ({', '.join(rules)})" if rules else "")
              + f"; scheduled peak {rw.peak_before:,} -> {rw.peak_after:,} B")
    progress = opts.progress
    exp = export(mod, board, args.out, opts, name=args.name, planner=args.planner, inline_padding=args.inline_padding,
                 compare_default=args.compare_default, measure=not args.no_measure, check_fit=False,
                 kernels=args.kernels, float_fma=not args.no_fma, keep_float16=not args.widen_float16)
    print(exp.summary().replace(f"model {exp.name} ", f"model {model_name} ({exp.name}_run) ", 1))
    report = {"model": model_name, "export": exp.to_dict()}
    sides = {"ours": {"ram": exp.ram_bytes, "flash": exp.flash_bytes, "instructions": None}}
    dflt = None
    if args.compare_default:
        import os

        from ..micro.sidebyside import default_export

        dflt = default_export(original, board, os.path.join(args.out, "tvm_default"), name=args.name,
                              measure=not args.no_measure, progress=progress)
        sides["default"] = {"ram": dflt.ram_bytes, "flash": dflt.flash_bytes, "instructions": None,
                            "fits": dflt.fits}
        report["tvm_default"] = dflt.to_dict()
    if compare_tflm:
        from ..micro.sidebyside import tflm_reference

        sides["tflm"] = tflm_reference(tfl)
        report["tflm"] = sides["tflm"]
    code = 0
    try:
        if not args.no_check_fit:
            exp.check_fit()
        harness = _write_harness(args, exp, tfl, report) if args.harness else None
        if args.run:
            code = _run(args, exp, dflt, original, mod, tfl if (tflm_readable or refused) else None, sides,
                        report, tflm=tflm_readable, harness=(harness, tfl))
    finally:
        print(side_by_side(board.name, sides.get("tflm"), sides.get("default"), sides["ours"]))
        report["side_by_side"] = sides
        write_json(exp.files["report"], {**exp.to_dict(), "tflm": sides.get("tflm"),
                                         "tvm_default": report.get("tvm_default"), "side_by_side": sides,
                                         "run": report.get("run"), "tflite_check": report.get("tflite_check"),
                                         "mlperf_tiny": report.get("mlperf_tiny")})
        if args.json:
            write_json(args.json, report)
    return code


def _run(args, exp, dflt, original, mod, tfl, sides, report, tflm: bool = True, harness=None) -> int:
    """``--run``: ours on a sequence of inputs (checked against TVM on the same arithmetic; a stateful model
    against LiteRT's reference kernels over the sequence), against TFLite Micro (``tflm``: when it runs the
    file) and LiteRT for a .tflite model, the MLPerf Tiny harness (``harness``: its files and the .tflite),
    then TVM's default build."""
    from ..micro.run import (default_sequence, litert_reference, reference_sequence, run_host, run_qemu,
                             tflm_differs_from_litert)

    run = run_host if args.host else run_qemu
    n = args.invocations or (STATEFUL_INVOCATIONS if exp.states else 1)
    sequence = default_sequence(exp, n, args.seed)
    if tfl is not None:
        from ..micro.sidebyside import tflite_inputs

        sequence = tflite_inputs(tfl, sequence, args.seed)
    reference, name = None, "TVM"
    if original is not mod:           # rewritten: check against the original model's arithmetic
        if exp.int8:
            from ..relax.int8.lower import lower_int8

            original = lower_int8(original)[0]
        reference = reference_sequence(original, sequence, exp.states)
    elif tfl is not None and exp.states and tflm and tflm_differs_from_litert(tfl):
        from ..micro.run import tflm_sequence_reference          # TFLM is the ground truth of what it runs

        reference, name = tflm_sequence_reference(tfl, sequence), "TFLite Micro"
    elif tfl is not None and exp.states:
        reference, name = litert_reference(tfl, sequence), "LiteRT (reference kernels)"
    extra = {"profile": True} if args.profile else {}
    r = run(exp, sequence=sequence, reference=reference, reference_name=name, **extra)
    print(r.summary())
    sides["ours"]["instructions"] = r.instructions
    report["run"] = {"mode": r.mode, "max_abs_err": r.max_abs_err, "ok": r.ok, "seconds": r.seconds,
                     "instructions": r.instructions, "macs": r.macs,
                     "instructions_per_mac": r.instructions_per_mac, "stack_used": r.stack_used,
                     "workspace_high_water": r.workspace_high_water, "invocations": r.invocations,
                     "reference": r.reference_name}
    if args.profile:
        from ..micro.run import profile_layers, profile_table

        print("where the instructions go (kernel calls timed with SysTick; the timing adds a few per call):")
        print(profile_table(exp, r))
        report["run"]["profile"] = {exp.program.calls[k].kernel + f"#{k}": n for k, n in sorted(r.profile.items())}
        report["run"]["layers"] = profile_layers(exp, r)
        _profile_plot(exp, report["run"]["layers"])
    code = 0
    if not r.ok:
        print(f"tvm-memsched: error: outputs differ from {r.reference_name}'s (max abs error {r.max_abs_err:.3g})",
              file=sys.stderr)
        code = 1
    if tfl is not None:
        chk = check_against_tflite(tfl, sequence[0], r.outputs, tflm=tflm,
                                   **({"sequence": sequence, "outputs_sequence": r.sequence} if exp.states else {}))
        report["tflite_check"] = chk
        lt = chk["litert_ref"]
        lite = "does not run the file" if lt.get("error") else \
            "bit-identical" if lt["identical"] else f"max abs diff {lt['max_abs_diff']:.3g}"
        calls = f" over {chk['invocations']} invocations" if chk["invocations"] > 1 else ""
        if tflm and chk["tflm"].get("error"):
            print(f"TFLite Micro does not run the file ({chk['tflm']['error'][:200]}); vs LiteRT reference "
                  f"kernels{calls}: {lite} ({'ok' if chk['ok'] else 'MISMATCH'})")
        elif tflm and chk["tflm"].get("undefined"):
            t = chk["tflm"]
            print(f"vs LiteRT reference kernels{calls}: {lite} ({'ok' if chk['ok'] else 'MISMATCH'}); TFLite Micro's "
                  f"outputs are undefined ({t['undefined']}): "
                  f"{'bit-identical' if t['identical'] else 'max abs diff %.3g' % t['max_abs_diff']}, not judged")
        elif tflm:
            t = chk["tflm"]
            print(f"vs TFLite Micro{calls}: {'bit-identical' if t['identical'] else 'max abs diff %.3g' % t['max_abs_diff']}"
                  f" ({'ok' if chk['ok'] else 'MISMATCH'}); vs LiteRT reference kernels: {lite}")
        else:
            print(f"vs LiteRT reference kernels{calls}: {lite} ({'ok' if chk['ok'] else 'MISMATCH'})")
        if not chk["ok"]:
            judge = tflm and chk["tflm"].get("ok") is not None      # None: TFLM failed or is undefined there
            print(f"tvm-memsched: error: outputs differ from {'TFLite Micro' if judge else 'LiteRT'}'s",
                  file=sys.stderr)
            code = 1
    if harness is not None and harness[0] is not None:
        code = max(code, _run_harness(args, exp, harness[0], harness[1], sequence[0], r.outputs, report))
    if dflt is not None:
        if dflt.fits:
            rd = run(dflt, sequence[0])
            sides["default"]["instructions"] = rd.instructions
            report["tvm_default_run"] = {"ok": rd.ok, "instructions": rd.instructions, "max_abs_err": rd.max_abs_err}
        else:
            sides["default"]["instructions"] = "does not fit"
    return code


def _profile_plot(exp, layers) -> None:
    """``<name>_profile.png`` next to the report: instructions per kernel call over the arena's occupancy."""
    import os

    from ..core.errors import MemschedError
    from .plots import kernel_profile

    path = os.path.join(exp.out_dir, f"{exp.name}_profile.png")
    try:
        kernel_profile(layers, exp.timeline, path, arena_bytes=exp.arena_bytes,
                       title=f"{exp.name} on {exp.board.name}: instructions per kernel call and the arena")
    except MemschedError as e:             # no matplotlib (UnsupportedError): the numbers are in the report
        print(f"profile plot skipped: {e}")
        return
    exp.files["profile_plot"] = path
    print(f"profile plot: {path}")


def _harness_benchmark(choice: str):
    return choice.partition(":")[2] or None


def _write_harness(args, exp, tfl, report):
    """``--harness``: the MLPerf Tiny device side in ``OUT/mlperf_tiny``."""
    import os

    from ..micro.mlperf_tiny import write_harness

    files = write_harness(exp, os.path.join(args.out, "mlperf_tiny"), tflite=tfl,
                          benchmark=_harness_benchmark(args.harness))
    spec = files.spec
    print(f"MLPerf Tiny harness ({spec.model_version}): {files.dir} (README.md: build, run, runner commands; "
          f"'db load {spec.wire_bytes}')")
    report["mlperf_tiny"] = {"dir": files.dir, "model_version": spec.model_version, "benchmark": spec.benchmark,
                             "input_bytes": spec.wire_bytes}
    return files


def _run_harness(args, exp, files, tfl, inputs, outputs, report) -> int:
    """``--harness`` with ``--run``: the runner's session with the harness firmware on the run's first input; its
    m-results must be what the device prints for the run's outputs (LiteRT's reference kernels reported for a
    .tflite: they differ from TFLite Micro's, and ours, in a few kernels)."""
    from ..core.errors import MemschedError
    from ..micro.mlperf_tiny import compare_results, run_harness_host, run_harness_qemu

    spec = files.spec
    run = run_harness_host if args.host else run_harness_qemu
    tr = run(exp, inputs=inputs, tflite=tfl, benchmark=spec.benchmark, harness_dir=files.dir)
    wire = spec.wire(inputs)
    printed = (tr.results(as_text=True) or [[]])[-1]
    chk = compare_results(spec, printed, outputs, wire)
    lite = None
    if tfl is not None:
        from ..micro.run import litert_reference

        try:
            lite = compare_results(spec, printed, litert_reference(tfl, [inputs])[0], wire)
        except MemschedError as e:
            lite = str(e)
    us = tr.infer_microseconds
    timing = "" if us is None else f"; infer 1 0: {us:,} us between the timestamps" + (
        f" (~{us * 1000:,} instructions under -icount shift=0)" if not args.host else "")
    vs_lite = "" if lite is None else ("; LiteRT reference kernels: does not run the file" if isinstance(lite, str)
                                       else "; LiteRT reference kernels: " + ("identical" if lite.ok else
                                       f"{len(lite.mismatches)}+ item(s) differ, max {lite.max_abs_err:.3g}"))
    print(f"MLPerf Tiny harness ({tr.mode}, {len(tr.commands)} runner commands): m-results {chk.items} value(s) "
          f"{'as the run' if chk.ok else 'DIFFER from the run'}{vs_lite}{timing}")
    report["mlperf_tiny"].update({"mode": tr.mode, "commands": len(tr.commands), "ok": chk.ok,
                                  "max_abs_err": chk.max_abs_err, "errors": tr.errors(), "infer_us": us,
                                  "litert_identical": None if lite is None or isinstance(lite, str) else lite.ok})
    if not chk.ok or tr.errors():
        print(f"tvm-memsched: error: the MLPerf Tiny harness's results differ from the run's "
              f"({chk.mismatches[:3]}; errors {tr.errors()[:3]})", file=sys.stderr)
        return 1
    return 0
