"""The ``tvm-memsched micro`` command: export a model for a microcontroller board, check, run.

::

    tvm-memsched micro zoo:randwire_tiny --board mps2-an386 --out build/rw --run
    tvm-memsched micro model.tflite --board nucleo_l4r5zi --out build/m --compare-default
    tvm-memsched micro --list-boards

:func:`add_parser` registers the sub-command on the main parser's sub-parsers
and :func:`run` executes it (the model spec: :mod:`.models`). Errors caused by the input (unknown board, model
too large, unsupported operator, missing toolchain) are
:class:`~tvm_memsched.core.errors.MemschedError`\\ s, which the main CLI prints
as one line with exit code 2; outputs that differ from TVM's exit with 1.
"""

from __future__ import annotations

import sys

from .models import add_input_shape_argument, tflite_bytes
from .output import write_json
from .progress import progress_for

#: invocations ``--run`` checks for a stateful model (its state carried from one to the next)
STATEFUL_INVOCATIONS = 20

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    """Add the ``micro`` sub-command to ``subparsers`` (an argparse sub-parsers object)."""
    from ..schedulers import available_methods

    s = subparsers.add_parser(
        "micro", help="export a model as C for a microcontroller (one static arena) and run it in QEMU",
        description="Compile MODEL with tvm_memsched's pipeline and TVM's C code generator into a C project "
                    "with one static arena for a microcontroller board; optionally run it (QEMU or host) and "
                    "check its outputs against TVM.")
    s.add_argument("model", metavar="MODEL", nargs="?", help="a .tflite, .onnx or .pt2 file, or zoo:NAME")
    add_input_shape_argument(s)
    s.add_argument("--board", "-b", help="target board (see --list-boards)")
    s.add_argument("--out", "-o", metavar="DIR", help="output directory for the C project")
    s.add_argument("--list-boards", action="store_true", help="list the known boards and exit")
    s.add_argument("--method", default="auto", choices=available_methods(), help="scheduler (default auto)")
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="scheduler time limit")
    s.add_argument("--name", default="model", help="C prefix: NAME_run, NAME.c, NAME.h (default model)")
    s.add_argument("--planner", default="tvm_memsched", choices=["tvm_memsched", "tvm"],
                   help="export our plan (default) or TVM's order and StaticPlanBlockMemory plan")
    s.add_argument("--compare-default", action="store_true",
                   help="also plan with TVM's default order and planner and compare both against the board")
    s.add_argument("--inline-padding", action="store_true", help="inline convolution padding (less workspace)")
    s.add_argument("--rewrite", nargs="?", const="if-better", choices=["if-better", "always"],
                   help="identity graph rewriting first (policy, default if-better); --run then checks "
                        "the outputs against TVM on the original model")
    s.add_argument("--greedy-arena", action="store_true",
                   help="keep the greedy tensor placement (default: CP-SAT when greedy misses the live-peak bound)")
    s.add_argument("--run", action="store_true", help="build and run on QEMU (or the host with --host), "
                                                      "compare the outputs with TVM's")
    s.add_argument("--host", action="store_true", help="with --run: build with the host compiler and run natively")
    s.add_argument("--seed", type=int, default=0, help="seed of the fixed test input (default 0)")
    s.add_argument("--invocations", type=int, default=None, metavar="N",
                   help="with --run: invoke the model N times on successive inputs (default 1; 20 for stateful "
                        "models, whose state carries over; a stateful .tflite is checked against LiteRT)")
    s.add_argument("--compare-tflm", action="store_true",
                   help="for a .tflite: also measure TFLite Micro's smallest arena for the same file and compare "
                        "it with our RAM total")
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
    if args.time_limit is not None and not args.time_limit > 0:
        raise MemschedError(f"--time-limit must be positive, got {args.time_limit}")

    from ..micro.builder import export
    from .models import load_relax_spec

    if args.invocations is not None and args.invocations < 1:
        raise MemschedError(f"--invocations must be at least 1, got {args.invocations}")
    mod, model_name = load_relax_spec(args.model, input_shapes=args.input_shape)
    source = tflite_bytes(args.model)
    if args.compare_tflm and source is None:
        raise MemschedError("--compare-tflm needs a .tflite model")
    if args.compare_tflm:
        from ..tflite.builder import offset_buffer_count

        if offset_buffer_count(source):
            raise MemschedError(f"--compare-tflm: TFLite Micro cannot read {args.model}, whose constants are stored "
                                "after the flatbuffer (Buffer.offset)")
    original = mod
    if args.rewrite:
        from ..relax.rewrite import identity_rewrite

        mod, rw = identity_rewrite(mod, policy=args.rewrite)
        rules = sorted({site.rule for site in rw.sites})
        print(f"identity rewrites: {len(rw.sites)}" + (f" ({', '.join(rules)})" if rules else "")
              + f"; scheduled peak {rw.peak_before:,} -> {rw.peak_after:,} B")
    exp = export(mod, board, args.out, args.method, name=args.name, planner=args.planner,
                 time_limit=args.time_limit, inline_padding=args.inline_padding, exact_arena=not args.greedy_arena,
                 compare_default=args.compare_default, measure=not args.no_measure, check_fit=False,
                 progress=progress_for(args))
    print(exp.summary().replace(f"model {exp.name} ", f"model {model_name} ({exp.name}_run) ", 1))
    report = {"model": model_name, "export": exp.to_dict()}
    code = 0
    if args.compare_tflm:
        from ..tflite.verify import tflm_arena

        tflm = tflm_arena(source).min_arena
        print(f"TFLite Micro's smallest arena for {args.model}: {tflm:,} B; our RAM total {exp.ram_bytes:,} B "
              f"({'at most' if exp.ram_bytes <= tflm else 'MORE than'} TFLM's, {tflm / max(1, exp.ram_bytes):.2f}x)")
        report["tflm_min_arena"] = tflm
    try:
        if not args.no_check_fit:
            exp.check_fit()
        if args.run:
            r = _run(args, exp, mod, original, source)
            print(r.summary())
            report["run"] = {"mode": r.mode, "max_abs_err": r.max_abs_err, "ok": r.ok, "seconds": r.seconds,
                             "instructions": r.instructions, "stack_used": r.stack_used,
                             "workspace_high_water": r.workspace_high_water, "invocations": r.invocations,
                             "reference": r.reference_name}
            if not r.ok:
                print(f"tvm-memsched: error: outputs differ from {r.reference_name}'s (max abs error "
                      f"{r.max_abs_err:.3g})", file=sys.stderr)
                code = 1
    finally:
        if args.json:
            write_json(args.json, report)
    return code


def _run(args, exp, mod, original, source):
    """Run the export (QEMU or host) on a sequence of inputs against the right reference."""
    from ..micro.run import default_sequence, litert_reference, reference_sequence, run_host, run_qemu

    n = args.invocations or (STATEFUL_INVOCATIONS if exp.states else 1)
    sequence = default_sequence(exp, n, args.seed)
    reference, name = None, "TVM"
    if original is not mod:                  # rewritten: check against TVM on the original model
        reference = reference_sequence(original, sequence, exp.states)
    elif source is not None and exp.states:
        reference, name = litert_reference(source, sequence), "LiteRT (reference kernels)"
    return (run_host if args.host else run_qemu)(exp, sequence=sequence, reference=reference, reference_name=name)
