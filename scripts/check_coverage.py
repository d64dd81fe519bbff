"""Quick check of the coverage models: our host build (llvm) against TFLite Micro / LiteRT, in-process.

Much faster than ``scripts/bench_coverage.py`` (no compare of two builds, no microcontroller): for each model
of ``tests/data/coverage`` it imports the file, builds it with tvm_memsched's pipeline (integer kernels for
quantized operators), runs it on inputs in the manifest's ranges (three invocations for stateful models) and
compares with TFLite Micro (bit for bit for integer kinds) or, where TFLite Micro refuses the file, LiteRT's
reference kernels. One line per file: ``ok``, ``MISMATCH`` (largest difference), ``FAIL`` (the error) or
``n/a`` (no runtime runs the file)::

    python scripts/check_coverage.py                      # every file
    python scripts/check_coverage.py conv_2d add_n        # some cases
    python scripts/check_coverage.py --kinds int8         # one kind
"""

import argparse
import multiprocessing as mp
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import coverage_models as C  # noqa: E402

STATEFUL = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "VAR_HANDLE")


def check(entry, folder=C.FOLDER):
    """``(file, verdict, detail)`` for one manifest entry."""
    buf = C.read(entry, folder)
    n = 3 if any(o in entry["operators"] for o in STATEFUL) else 1
    seq = C.inputs(entry, buf, 0, n)
    refs = C.references(buf, seq)
    runs = [k for k, v in refs.items() if not isinstance(v, str)]
    if not runs:
        return entry["file"], "n/a", "; ".join(f"{k}: {v[:100]}" for k, v in refs.items())
    try:
        got = C.ours(buf, seq)
    except Exception as ex:  # noqa: BLE001 - reported, not raised
        return entry["file"], "FAIL", (str(ex).strip().splitlines() or [type(ex).__name__])[-1][:300]
    # TFLite Micro runs a hybrid LSTM's int8 weights as floats (garbage): LiteRT is its reference
    name = "tflm" if "tflm" in runs and entry["kind"] != "hybrid" else "litert"
    ok, d = C.agree(got, refs[name], entry["kind"] in ("int8", "int16x8"))
    return entry["file"], "ok" if ok else "MISMATCH", f"vs {name} {d:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--kinds", nargs="*")
    ap.add_argument("--folder", default=C.FOLDER)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    ents = [e for e in C.entries(args.folder) if (not args.cases or e["case"] in args.cases)
            and (not args.kinds or e["kind"] in args.kinds)]
    counts = {}
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=8) as pool:
        for f, verdict, detail in pool.imap(check, ents):
            counts[verdict] = counts.get(verdict, 0) + 1
            print(f"{f:52s} {verdict:8s} {detail}", flush=True)
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
