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

def check(entry, folder=C.FOLDER):
    """``(file, verdict, detail)`` for one manifest entry (:func:`coverage_models.check`)."""
    return (entry["file"],) + C.check(entry, folder)


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
