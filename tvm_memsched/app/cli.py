"""The ``tvm-memsched`` command: :func:`main`, the graph commands (``simulate``, ``schedule``, ``info``),
``compare``, ``bench`` and ``demo``; ``micro`` is in :mod:`.micro_cli`, ``tflite`` and ``coral`` in
:mod:`.tflite_cli`, and every model spec is resolved by :mod:`.models`.

Every error caused by bad input is printed as one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..core.errors import MemschedError
from ..relax.options import add_arguments as add_pipeline_arguments
from .models import add_input_shape_argument, add_tile_arguments, add_verbose_argument, load_graph_spec, wants_tiling
from .output import check_paths, fmt_bytes, table, write_json
from .progress import progress_for

#: when this module was imported (the command's start, for --time-limit)
_STARTED = time.perf_counter()

__all__ = ["main"]


# ---------------------------------------------------------------- commands
def cmd_simulate(args) -> int:
    from ..core.io import load_order
    from ..core.simulate import simulate

    graph = load_graph_spec(args.graph, args.input_shape)
    order = load_order(args.order)
    result = simulate(graph, order)
    if args.json:
        print(json.dumps(result.to_dict() if args.full else
                         {"peak_bytes": result.peak, "peak_step": result.peak_step,
                          "peak_op": result.peak_op, "live_at_peak": list(result.live_at_peak)}))
    else:
        print(f"peak: {result.peak} bytes ({fmt_bytes(result.peak)}) at step {result.peak_step} "
              f"(op {result.peak_op}); {len(result.live_at_peak)} tensors live")
    return 0


def search_budget(time_limit: float | None, num_ops: int) -> float | None:
    """The search's share of ``--time-limit``: what is left after this process's start-up and reading the
    input, minus what verifying and writing the result will take (about 25 microseconds per op), and at
    least a fifth of the limit. The command as a whole then ends within the limit (+ 10% + 1 s)."""
    if time_limit is None:
        return None
    spent = time.perf_counter() - _STARTED
    return max(0.2 * time_limit, time_limit - spent - 2.5e-5 * num_ops)


def cmd_schedule(args) -> int:
    from ..schedulers import schedule

    graph = load_graph_spec(args.graph, args.input_shape)
    result = schedule(graph, method=args.method, time_limit=search_budget(args.time_limit, graph.num_ops),
                      progress=progress_for(args))
    out = result.to_dict()
    if args.output:
        write_json(args.output, out)
    if args.output is None or not args.quiet:
        proven = "proven optimal" if result.optimal else "not proven optimal"
        print(f"{args.method}: peak {result.peak_bytes} bytes ({fmt_bytes(result.peak_bytes)}), "
              f"lower bound {result.lower_bound_bytes}, {proven}, {result.seconds:.3f}s", file=sys.stderr)
    if args.output is None:
        print(json.dumps(out))
    return 0


def cmd_info(args) -> int:
    from ..core.bounds import lower_bound_details
    from ..schedulers import schedule

    from .models import is_tflite_spec, load_tflite_spec

    scheme = None
    if is_tflite_spec(args.graph):
        from ..tflite.quantization import quantization_scheme

        tg = load_tflite_spec(args.graph, args.input_shape)
        graph, scheme = tg.graph, quantization_scheme(tg.model)
    else:
        graph = load_graph_spec(args.graph, args.input_shape)
    lb = lower_bound_details(graph)
    info = {"name": graph.name, "ops": graph.num_ops, "tensors": graph.num_tensors,
            "inputs": len(graph.inputs), "outputs": len(graph.outputs),
            "total_bytes": graph.total_bytes, "lower_bound_bytes": lb.bytes,
            "lower_bound": lb.to_dict(), "baseline_peaks": {}}
    for m in ("program", "kahn", "rpo"):
        info["baseline_peaks"][m] = schedule(graph, m).peak_bytes
    if scheme is not None:
        info["quantization"] = scheme
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"graph {graph.name}: {graph.num_ops} ops, {graph.num_tensors} tensors, "
          f"{len(graph.inputs)} inputs, {len(graph.outputs)} outputs")
    if scheme is not None:
        print(f"quantization:           {scheme}")
    print(f"total activation bytes: {graph.total_bytes} ({fmt_bytes(graph.total_bytes)})")
    print(f"lower bound:            {lb.bytes} ({fmt_bytes(lb.bytes)})  [op {lb.op_bound}, "
          f"must-live {lb.must_live_bound} at {lb.op}, end {lb.end_bound}]")
    for m, p in info["baseline_peaks"].items():
        print(f"{m + ' peak:':<24}{p} ({fmt_bytes(p)})")
    return 0


def cmd_compare(args) -> int:
    """TVM's default pipeline vs ours on one model."""
    from ..relax.options import PipelineOptions
    from .models import load_relax_spec
    from .yardsticks import spec_timings

    opts = PipelineOptions.from_cli(args, progress=progress_for(args))    # a bad option value fails here
    mod, name = load_relax_spec(args.model, args.input_shape)   # bad specs and files fail here
    from ..relax.compare import compare

    untiled = None
    if wants_tiling(args):
        from .models import tiled_relax_spec

        tiled, _, untiled_mod, _ = tiled_relax_spec(args.model, args, progress=progress_for(args), imported=mod)
        if tiled is not None:
            untiled, mod = untiled_mod, tiled
    c = compare(mod, args.target, opts, name=name, run=not args.no_run,
                reference=_reference(args.model, mod, args.input_shape), inputs=_initial_state_inputs(mod))
    print(c.summary())
    runtimes = [] if args.no_run or args.no_runtimes or untiled is not None else \
        spec_timings(args.model, mod, args.input_shape)
    for line in _runtime_lines(c, runtimes):
        print(line)
    if args.profile:
        print("compile time per pass (own time, nested passes excluded):")
        print(c.profile())
    if untiled is not None:
        ok, line = _tiled_vs_untiled(untiled, mod, args.target, run=not args.no_run)
        c0 = compare(untiled, args.target, opts.replace(rewrite=False, progress=None), name=name, run=False,
                     repeat=0)
        print(f"  patch tiling: our plan {c0.memsched_planned_bytes / 1e6:.3f} MB untiled -> "
              f"{c.memsched_planned_bytes / 1e6:.3f} MB tiled ({c0.memsched_planned_bytes / c.memsched_planned_bytes:.2f}x); "
              f"TVM default untiled {c0.default_planned_bytes / 1e6:.3f} MB "
              f"({c0.default_planned_bytes / c.memsched_planned_bytes:.2f}x); {line}")
        if not ok:
            print("tvm-memsched: error: the tiled model's outputs differ from the untiled model's", file=sys.stderr)
            return 1
    if args.json:
        write_json(args.json, {**c.to_dict(), "runtimes": [t.to_dict() for t in runtimes]})
    if not c.numerics_ok:
        print("tvm-memsched: error: outputs differ from TVM's default build", file=sys.stderr)
        return 1
    if c.reference_ok is False:
        print(f"tvm-memsched: error: TVM's import of the model computes other outputs than {c.reference} "
              "(both builds share the import)", file=sys.stderr)
        return 1
    return 0


def _runtime_lines(c, runtimes) -> list[str]:
    """compare's run times next to the runtimes' (latency, process memory growth)."""
    if not runtimes or not c.memsched_run_seconds:
        return []
    ours = c.memsched_run_seconds
    out = [f"  side by side (TVM's builds on TVM's thread pool; the file in its runtime, in a process of its own): "
           f"TVM default {c.default_run_seconds * 1e3:.2f} ms, ours {ours * 1e3:.2f} ms"]
    for t in runtimes:
        if t.error:
            out.append(f"    {t.label}: does not run the file ({t.error})")
        else:
            out.append(f"    {t.label}: {t.seconds * 1e3:.2f} ms (ours {ours / t.seconds:.2f}x its time), process "
                       f"memory growth {t.rss_growth_bytes / 1e6:.1f} MB")
    return out


def _reference(spec: str, mod, input_shapes=None):
    """``(name, run)`` running the model file in the runtime it was made for, on compare's inputs: a
    ``.tflite`` in LiteRT's reference kernels, an ``.onnx`` in onnxruntime (CPU); None where there is none
    (a ``.pt2``, a stateful model whose inputs differ, the runtime not installed or refusing the file)."""
    from .models import parse_zoo_spec

    if spec.lower().endswith(".onnx"):
        return _onnxruntime_reference(spec, mod, input_shapes)
    z = parse_zoo_spec(spec)
    if z is not None and z[1] != "float32":
        from .. import zoo

        buf = zoo.tflite(*z)
    elif z is None and spec.lower().endswith(".tflite"):
        from .models import tflite_bytes

        buf = tflite_bytes(spec, input_shapes)     # with the shapes the model was imported with
    else:
        return None
    from ..relax.frontends.tflite_state import states

    n_states = len(states(mod))
    try:
        from ..tflite.verify import litert_run_sequence, tflm_run_sequence
    except ImportError:
        return None
    # the runtime that runs the file: LiteRT's reference kernels, else TFLite Micro (LiteRT lacks a few
    # builtins TFLM has, such as CEIL); a runtime that cannot load the file is no reason to refuse it
    runtimes = [("LiteRT (reference kernels)",
                 lambda feeds: [list(r.values()) for r in litert_run_sequence(buf, feeds, reference_kernels=True)]),
                ("TFLite Micro", lambda feeds: tflm_run_sequence(buf, [dict(enumerate(f)) for f in feeds]))]
    if _full_integer(buf):          # TFLM is the ground truth of integer kernels (its int8 LSTM differs from LiteRT's)
        runtimes.reverse()
    probe = _zero_feeds(buf)
    for name, runtime in runtimes:
        try:
            if probe is None or len(probe) + n_states != len(mod["main"].params):
                return None
            runtime([probe])
        except (MemschedError, ImportError):
            continue

        def run(inputs, runtime=runtime):   # a stateful model: one invocation from the initial state
            n = len(inputs) - n_states
            return list(runtime([list(inputs)[:n]])[0])

        return (name, run, _output_count(mod) - n_states) if n_states else (name, run)
    return None


def _output_count(mod) -> int:
    """How many tensors ``main`` returns (a tuple's fields, or 1)."""
    from tvm import relax

    ty = mod["main"].ret_ty if hasattr(mod["main"], "ret_ty") else mod["main"].body.ty
    return len(ty.fields) if isinstance(ty, relax.TupleType) else 1


def _full_integer(buf: bytes) -> bool:
    """True for a full-integer (int8) ``.tflite``: int8 weights, or none and integer activations only (a single
    int8 or int16 RELU6 has no weights), whose ground truth is TFLite Micro's integer kernels."""
    from ..tflite.builder import load, type_name
    from ..tflite.quantization import quantization_scheme
    from ..tflite.reader import is_constant

    try:
        m = load(buf)
        scheme = quantization_scheme(m)
        act = {type_name(t.type) for sg in m.subgraphs[:1] for t in sg.tensors or [] if not is_constant(m, t)
               and not t.isVariable}
    except (TypeError, ValueError, AttributeError, IndexError):
        return False
    return scheme == "full integer (int8)" or (scheme == "float32" and bool(act & {"INT8", "INT16"})
                                              and not act & {"FLOAT32", "FLOAT16"})


def _zero_feeds(buf: bytes):
    """Zero arrays for every input of the ``.tflite`` ``buf`` (read from the file, not from a runtime), or
    None for an input type without a numpy form."""
    import numpy as np

    from ..tflite.builder import load

    types = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16,
             9: np.int8}
    try:
        sg = load(buf).subgraphs[0]
        return [np.zeros([int(d) for d in sg.tensors[i].shape], types[sg.tensors[i].type]) for i in sg.inputs]
    except (KeyError, TypeError, ValueError):
        return None


def _initial_state_inputs(mod):
    """compare's inputs for a stateful model: random inputs, the states at their initial values (what the
    reference runtime starts from); None (random everything) for a stateless one."""
    from ..relax.frontends.tflite_state import states

    spec = states(mod)
    if not spec:
        return None
    from ..relax.compare import random_inputs

    inputs = random_inputs(mod["main"], 0)
    for s in spec:
        inputs[s.param] = s.init
    return inputs


def _onnxruntime_reference(path: str, mod, input_shapes=None):
    """onnxruntime running the file, fed compare's inputs and the values ``--input-value`` froze (made as the
    importer makes them, :func:`~tvm_memsched.relax.frontends.onnx_frontend.frozen_inputs`), with exact
    integer matrix products (``session.x64quantprecision``: the ONNX specification's results on every CPU)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from .models import as_input_shapes

    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        # exact integer products: without it onnxruntime's u8s8 kernels on x86 CPUs without VNNI (vpmaddubsw)
        # saturate pairs of products to int16, so a dynamically quantized file's outputs depend on the machine
        opts.add_session_config_entry("session.x64quantprecision", "1")
        opts.intra_op_num_threads = 1      # its DynamicQuantizeLSTM quantizes a batch in per-thread chunks
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime refuses the file: no reference, compare still runs
        return None
    import onnx

    from ..relax.compare import DYNAMIC_QUANTIZATION_SPREAD
    from ..relax.frontends.onnx_frontend import frozen_inputs, quantizes_at_run_time

    model = onnx.load(path, load_external_data=False)
    shapes, frozen = as_input_shapes(input_shapes), {}
    if shapes.frozen:
        frozen = frozen_inputs(model, shapes.frozen, shapes, path)
    names = [i.name for i in session.get_inputs() if i.name not in frozen]
    if len(names) != len(mod["main"].params):
        return None

    def run(inputs):
        return session.run(None, {**dict(zip(names, inputs)), **frozen})

    if quantizes_at_run_time(model):
        return "onnxruntime (CPU)", run, None, DYNAMIC_QUANTIZATION_SPREAD
    return "onnxruntime (CPU)", run


def _tiled_vs_untiled(untiled, tiled, target, run: bool = True) -> tuple[bool, str]:
    """TVM's default builds of both modules on the same random inputs: (equal, one-line verdict)."""
    if not run:
        return True, "outputs not checked (--no-run)"
    import numpy as np
    import tvm

    from ..relax.compare import random_inputs, run_vm
    from ..relax.target import as_target

    t = as_target(target)
    inputs = random_inputs(untiled["main"], 0)
    a = run_vm(tvm.compile(untiled, t), inputs)
    b = run_vm(tvm.compile(tiled, t), inputs)
    same = len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))
    diff = max((float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in zip(a, b)
                if x.shape == y.shape and x.size), default=0.0)
    return same or diff <= 1e-5, ("tiled outputs bit-identical to the untiled model's (TVM default builds)" if same
                                  else f"tiled vs untiled outputs: max abs diff {diff:.3g}")


def cmd_bench(args) -> int:
    """The benchmark report on zoo models (TVM default vs tvm_memsched, all schedulers)."""
    from .report import markdown, run_report, write_report

    rep = run_report(args.models, quick=args.quick, methods=args.methods, time_limit=args.time_limit,
                     repeats=args.repeats, tvm=not args.no_tvm, tvm_all=args.tvm_all, input_shapes=args.input_shape)
    print(markdown(rep))
    if args.out:
        files = write_report(rep, args.out, plots=not args.no_plots)
        print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    bad = [r["model"] for r in rep["models"] if r.get("tvm") and not r["tvm"]["numerics_ok"]]
    if bad:
        print(f"tvm-memsched: error: outputs differ from TVM's default build for {', '.join(bad)}",
              file=sys.stderr)
        return 1
    return 0


def cmd_demo(args) -> int:
    """Schedule the built-in example graph with every method and print the table."""
    from ..core.generators import example_graph
    from ..schedulers import available_methods, schedule

    graph = example_graph()
    methods = args.methods or available_methods()
    print(f"{graph.name}: {graph.num_ops} ops, {graph.num_tensors} tensors "
          f"(built-in example graph; activation bytes of float32 feature maps)\n")
    base = schedule(graph, "program")
    rows = []
    for m in methods:
        r = schedule(graph, m, time_limit=args.time_limit, progress=progress_for(args))
        rows.append([m, str(r.peak_bytes), fmt_bytes(r.peak_bytes), f"{base.peak_bytes / r.peak_bytes:.2f}x",
                     "yes" if r.optimal else "no", f"{r.seconds:.3f}"])
    print(table(rows, ["method", "peak bytes", "peak", "vs program", "proven optimal", "seconds"]))
    print(f"\nlower bound: {base.lower_bound_bytes} bytes ({fmt_bytes(base.lower_bound_bytes)})")
    return 0


# -------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    from ..schedulers import available_methods

    p = argparse.ArgumentParser(prog="tvm-memsched",
                                description="Memory-aware operator scheduling and arena planning.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    graph_help = "a graph JSON file, a .tflite, .onnx or .pt2 file, or zoo:NAME[:int8|:float16]"
    s = sub.add_parser("simulate", help="peak memory of a given order")
    s.add_argument("graph", metavar="GRAPH.json", help=graph_help)
    add_input_shape_argument(s)
    s.add_argument("order", metavar="ORDER.json", help="a JSON list of op names or {\"order\": [...]}")
    s.add_argument("--json", action="store_true", help="print a JSON object (with peak_bytes)")
    s.add_argument("--full", action="store_true", help="with --json: include per-step footprints")
    s.set_defaults(fn=cmd_simulate)

    s = sub.add_parser("schedule", help="find a low-peak order")
    s.add_argument("graph", metavar="GRAPH.json", help=graph_help)
    add_input_shape_argument(s)
    s.add_argument("--method", default="auto", choices=available_methods())
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS")
    s.add_argument("--output", "-o", metavar="OUT.json", help="write the result here (default: stdout)")
    s.add_argument("--force", action="store_true", help="allow --output to overwrite the input file")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("info", help="op/tensor counts, lower bound and baseline peaks")
    s.add_argument("graph", metavar="GRAPH.json", help=graph_help)
    add_input_shape_argument(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("compare", help="TVM's default pipeline vs tvm_memsched on a model")
    s.add_argument("model", metavar="MODEL", help="a .tflite, .onnx or .pt2 file, or zoo:NAME")
    add_input_shape_argument(s)
    add_pipeline_arguments(s, "compare")      # --method, --time-limit, --tradeoff, ...: PipelineOptions' fields
    s.add_argument("--target", default="llvm", help="TVM target kind (default llvm)")
    s.add_argument("--json", metavar="OUT.json", help="also write the comparison as JSON")
    s.add_argument("--no-run", action="store_true", help="skip the numerical check")
    s.add_argument("--no-runtimes", action="store_true",
                   help="do not time the file in ONNX Runtime / LiteRT (default: an .onnx or .tflite model is "
                        "timed there too, 1 thread and all cores, each in a process of its own)")
    s.add_argument("--profile", action="store_true",
                   help="also print the seconds each compiler pass took, on both sides")
    add_verbose_argument(s)
    add_tile_arguments(s, "the model's .tflite is tiled in builtin ops, then imported; .tflite and zoo models")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=cmd_compare)

    from .micro_cli import add_parser as add_micro_parser
    add_micro_parser(sub)

    from .tflite_cli import add_parsers as add_tflite_parsers
    add_tflite_parsers(sub)

    s = sub.add_parser("bench", help="benchmark report on zoo models (TVM default vs ours, all schedulers)")
    s.add_argument("--quick", action="store_true", help="a small subset in a few minutes")
    s.add_argument("--models", nargs="*", help="zoo model names ('default' = the default model) or model files "
                                                 "(.tflite, .onnx, .pt2)")
    add_input_shape_argument(s)
    s.add_argument("--methods", nargs="*", choices=available_methods())
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="per scheduler run (default 10, quick 2)")
    s.add_argument("--repeats", type=int, default=None, help="timing repeats for quick methods")
    s.add_argument("--out", metavar="DIR", help="write results.json, results.md and plots here")
    s.add_argument("--no-tvm", action="store_true", help="schedulers only, no TVM builds")
    s.add_argument("--tvm-all", action="store_true", help="also build the slow 224x224 NAS networks")
    s.add_argument("--no-plots", action="store_true")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("demo", help="schedule the built-in example graph with every method")
    s.add_argument("--methods", nargs="*", choices=available_methods())
    s.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS")
    s.add_argument("--quiet", "-q", action="store_true")
    s.set_defaults(fn=cmd_demo)
    return p


def one_line(text: str) -> str:
    """``text`` with control characters escaped (a newline in a model's tensor name must not split a message)
    and lone surrogates replaced, so every message is one printable line.

    >>> one_line('bad name "a\\nb"')
    'bad name "a\\\\nb"'
    """
    out = []
    for ch in text:
        if ch == "\n" or ch == "\r" or ch == "\t" or ord(ch) < 32 or ord(ch) == 127:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _with_native_log(args) -> int:
    """Run a TVM-heavy command with TVM's C++ log lines in a log file (shown with ``--verbose``, and named
    when the command fails)."""
    import tempfile

    from ..relax.frontends.native_log import native_stderr_to_file

    fd, path = tempfile.mkstemp(prefix="tvm-memsched-", suffix=".log")   # a new file: no planted link
    os.close(fd)
    rc = 1
    try:
        with native_stderr_to_file(path):
            rc = args.fn(args)
        return rc
    finally:
        text = ""
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            pass
        if text.strip() and args.verbose:
            sys.stderr.write(text)
        if text.strip() and rc != 0 and not args.verbose:
            print(f"tvm-memsched: TVM's log lines are in {path}", file=sys.stderr)
        elif os.path.exists(path) and (not text.strip() or args.verbose):
            os.remove(path)


def _run(args) -> int:
    if getattr(args, "verbose", None) is not None:
        return _with_native_log(args)
    return args.fn(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "time_limit", None) is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be positive, got {args.time_limit}")
    try:
        check_paths(args)
        if getattr(args, "host", False) and not getattr(args, "run", False):
            raise MemschedError("--host only applies with --run (build and run the export on this machine)")
        if getattr(args, "profile", False) and hasattr(args, "host") and (args.host or not args.run):
            raise MemschedError("--profile applies with --run on a Cortex-M board (kernel calls are timed with "
                                "its SysTick in QEMU), not with --host or without --run")
        if getattr(args, "trust_model_code", False):
            from ..relax.frontends.pt2_archive import trusting_model_code

            with trusting_model_code():
                return _run(args)
        return _run(args)
    except MemschedError as e:
        print(f"tvm-memsched: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except RecursionError:
        print("tvm-memsched: error: the input is nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tvm-memsched: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
