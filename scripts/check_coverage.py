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
    python scripts/check_coverage.py --out docs/bench/coverage   # all, and the matrix as host.md + host.json
"""

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time

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
    ap.add_argument("--out", help="folder for host.md (the matrix) and host.json")
    args = ap.parse_args(argv)
    ents = [e for e in C.entries(args.folder) if (not args.cases or e["case"] in args.cases)
            and (not args.kinds or e["kind"] in args.kinds)]
    counts, rows = {}, []
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=8) as pool:
        for e, (f, verdict, detail) in zip(ents, pool.imap(check, ents)):
            counts[verdict] = counts.get(verdict, 0) + 1
            rows.append({"file": f, "case": e["case"], "family": e.get("family", e["case"]), "kind": e["kind"],
                         "operators": e["operators"], "verdict": verdict, "detail": detail})
            print(f"{f:52s} {verdict:8s} {detail}", flush=True)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(summary)
    if args.out:
        write_matrix(rows, args.out, summary, time.time() - t0, args.jobs)
    return 0


KINDS = ("float32", "int8", "int16x8", "hybrid", "float16")
MARK = {"ok": "ok", "MISMATCH": "≠", "FAIL": "✗", "n/a": "n/a"}


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_matrix(rows: list, out: str, summary: str, seconds: float, jobs: int) -> None:
    """``out/host.json`` (every row) and ``out/host.md``: one line per operator family, one column per kind."""
    os.makedirs(out, exist_ok=True)
    _atomic_write(os.path.join(out, "host.json"), json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
    fams = {}
    for r in rows:
        fams.setdefault(r["family"], {}).setdefault(r["kind"], []).append(r)
    counted = [r for r in rows if r["verdict"] != "n/a"]
    ok = [r for r in counted if r["verdict"] == "ok"]
    lines = ["# Operator coverage on the host", "",
             "Every model of `tests/data/coverage` (one operator each, made by TensorFlow's `TFLiteConverter`, "
             "`scripts/make_coverage_models.py`) imported, built with tvm_memsched's pipeline for the host "
             "(`llvm`, integer kernels for quantized operators) and run on inputs in the manifest's ranges "
             "(three invocations for stateful models), against TFLite Micro's interpreter (the `tflite-micro` "
             "wheel) bit for bit for int8 and int16x8, or LiteRT's reference kernels where TFLite Micro refuses "
             "the file and for hybrid and float16 files. `ok`: equal (float kinds within 1e-4 of the largest reference value, at least 1e-4); `≠`: "
             "differs; `✗`: our import or build fails; `n/a`: no reference runtime runs the file (not counted).",
             "", f"**{len(ok)} of {len(counted)}** files that a reference runtime runs give its outputs "
             f"({summary}; {len(rows)} files).", "",
             f"Command: `python scripts/check_coverage.py --out docs/bench/coverage` ({jobs} jobs, "
             f"{seconds / 60:.1f} min on {platform.machine()}, {os.cpu_count()} cores). The same files through "
             "`compare` and `micro --run` (a QEMU board): `scripts/bench_coverage.py`.", "",
             "| operator family | " + " | ".join(KINDS) + " |", "|---|" + "---|" * len(KINDS)]
    for fam in sorted(fams):
        cells = []
        for k in KINDS:
            rs = fams[fam].get(k, [])
            cells.append(" ".join(MARK[r["verdict"]] for r in rs) if rs else "")
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    bad = [r for r in rows if r["verdict"] not in ("ok",)]
    if bad:
        lines += ["", "## Not ok", "", "| file | verdict | detail |", "|---|---|---|"]
        lines += [f"| {r['file']} | {r['verdict']} | {r['detail'].replace('|', '/')[:300]} |" for r in bad]
    _atomic_write(os.path.join(out, "host.md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
