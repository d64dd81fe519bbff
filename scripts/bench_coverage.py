"""The operator coverage matrix: every coverage model through ``compare`` and ``micro --run``.

Reads the models ``scripts/make_coverage_models.py`` made with TensorFlow's converter
(``tests/data/coverage/manifest.json``) and the ONNX ones of ``tests/data/coverage_onnx``, and for each file:

* which reference runtime runs it: LiteRT's reference kernels, TFLite Micro's interpreter (the
  ``tflite-micro`` wheel), onnxruntime for ``.onnx``; a cell that none runs is not counted;
* ``tvm-memsched compare FILE``: exit code, our numerics against TVM's default build and the reference
  runtime, planned bytes of both builds;
* ``tvm-memsched micro FILE -b mps2-an386 --run``: exit code, outputs against TFLite Micro (bit for bit
  for integer outputs) or LiteRT's reference kernels where TFLite Micro refuses the file, our RAM total
  against TFLite Micro's smallest arena.

Each command runs as a user would run it (a child process with a time limit); its last error line is the
cell's reason. ``docs/bench/coverage/README.md`` (the matrix: one row per operator family, one column per
kind) and ``results.json`` are written::

    python scripts/bench_coverage.py --out docs/bench/coverage            # all, ~1-2 h on 2 cores
    python scripts/bench_coverage.py --only conv_2d add --out /tmp/cov     # some cases
    python scripts/bench_coverage.py --resume --out docs/bench/coverage   # only files whose result changed inputs
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("float32", "int8", "int16x8", "hybrid", "float16")
sys.path.insert(0, HERE)

from bench_corpus import cli_command, last_error, run_command  # noqa: E402  (the same child-process runner)


def references(path: str) -> dict:
    """Which reference runtimes run ``path`` (on random inputs): ``{name: True | "reason"}``."""
    code = r"""
import json, sys
import numpy as np
path = sys.argv[1]
out = {}
buf = open(path, "rb").read()
if path.endswith(".onnx"):
    try:
        import onnxruntime as ort
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        out["onnxruntime"] = True
    except Exception as e:
        out["onnxruntime"] = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
else:
    from tvm_memsched.tflite.verify import litert_run_sequence, random_inputs, tflm_run
    feeds = random_inputs(buf, 0)
    for name, fn in (("litert_ref", lambda: litert_run_sequence(buf, [feeds], reference_kernels=True)),
                     ("tflm", lambda: tflm_run(buf, feeds))):
        try:
            fn()
            out[name] = True
        except Exception as e:
            msg = str(e).strip().splitlines()
            out[name] = (msg[-1] if msg else type(e).__name__)[:200]
print("JSON " + json.dumps(out))
"""
    rc, so, se, _ = run_command([sys.executable, "-c", code, path], 300)
    for line in so.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])
    return {"probe": last_error(se) or f"exit {rc}"}


def run_compare(path: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "c.json")
        rc, so, se, sec = run_command(cli_command() + ["compare", path, "--json", js], timeout)
        row = {"exit": rc, "seconds": round(sec, 1)}
        if os.path.exists(js):
            with open(js) as f:
                c = json.load(f)
            row.update(default_planned=c.get("default_planned_bytes"), ours_planned=c.get("memsched_planned_bytes"),
                       numerics_ok=c.get("numerics_ok"), reference=c.get("reference"),
                       reference_ok=c.get("reference_ok"), reference_max_abs_diff=c.get("reference_max_abs_diff"))
        if rc != 0:
            row["error"] = last_error(se + "\n" + so)
        return row


def run_micro(path: str, timeout: int, board: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "m.json")
        rc, so, se, sec = run_command(cli_command() + ["micro", path, "-b", board, "--out", os.path.join(d, "out"), "--run",
                                         "--json", js], timeout)
        row = {"exit": rc, "seconds": round(sec, 1)}
        if os.path.exists(js):
            with open(js) as f:
                m = json.load(f)
            sides = m.get("side_by_side", {})
            ours = sides.get("ours", {})
            row.update(ram=ours.get("ram"), flash=ours.get("flash"), instructions=ours.get("instructions"),
                       tflm_arena=(sides.get("tflm") or {}).get("min_arena"))
            chk = m.get("tflite_check") or {}
            if "tflm" in chk:
                row["vs"] = "TFLite Micro"
                row["identical"] = chk["tflm"].get("identical")
                row["max_abs_diff"] = chk["tflm"].get("max_abs_diff")
            elif "litert_ref" in chk:
                row["vs"] = "LiteRT (reference kernels)"
                row["identical"] = chk["litert_ref"].get("identical")
                row["max_abs_diff"] = chk["litert_ref"].get("max_abs_diff")
            run = m.get("run") or {}
            if "vs" not in row and run:
                row["vs"] = run.get("reference")
                row["identical"] = run.get("max_abs_err") == 0
            row["ok_run"] = run.get("ok")
        if rc != 0:
            row["error"] = last_error(se + "\n" + so)
        return row


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def evaluate(entry: dict, folder: str, args) -> dict:
    path = os.path.join(folder, entry["file"])
    row = {k: entry[k] for k in ("file", "case", "family", "kind", "operators") if k in entry}
    row["sha"] = _sha(path)
    row["source"] = entry.get("source", "")
    row["refs"] = references(path)
    row["compare"] = run_compare(path, args.timeout)
    if not args.skip_micro:
        row["micro"] = run_micro(path, args.timeout, args.board)
    return row


def runs_somewhere(row: dict) -> bool:
    return any(v is True for v in row.get("refs", {}).values())


def passes(row: dict) -> dict:
    """Per path: True, or the reason it fails."""
    c = row["compare"]
    out = {"compare": True if c["exit"] == 0 else c.get("error") or f"exit {c['exit']}"}
    m = row.get("micro")
    if m is not None:
        out["micro"] = True if m["exit"] == 0 else m.get("error") or f"exit {m['exit']}"
    return out


def _cell(row) -> str:
    if not runs_somewhere(row):
        return "n/a"
    p = passes(row)
    marks = []
    for path, short in (("compare", "C"), ("micro", "M")):
        if path in p:
            marks.append(short if p[path] is True else short.lower() + "✗")
    text = " ".join(marks)
    m = row.get("micro") or {}
    if m.get("ram") and m.get("tflm_arena"):
        text += f" {m['ram'] / m['tflm_arena']:.2f}x"
    return text


def write_report(rows: list, out: str, args) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"board": args.board, "rows": rows}, f, indent=1, sort_keys=True)
        f.write("\n")
    counted = [r for r in rows if runs_somewhere(r)]
    both = [r for r in counted if all(v is True for v in passes(r).values())]
    lines = ["# Operator coverage", "",
             "Every single-operator model of `tests/data/coverage` (made by TensorFlow's `TFLiteConverter`, "
             "`scripts/make_coverage_models.py`) and `tests/data/coverage_onnx`, through `tvm-memsched compare` "
             f"(**C**) and `tvm-memsched micro -b {args.board} --run` (**M**), as a user runs them. A cell passes "
             "when the command exits 0: `compare`'s outputs equal TVM's default build and the reference runtime "
             "(LiteRT's reference kernels, onnxruntime), `micro --run`'s equal TFLite Micro's bit for bit for "
             "integer outputs (LiteRT's reference kernels where TFLite Micro refuses the file or its outputs are "
             "undefined). Lower case with ✗ "
             "fails (the reasons are listed below). The ratio is our RAM total (arena + runtime statics + stack + "
             "I/O) over TFLite Micro's smallest arena for the same file. `n/a`: no reference runtime runs the "
             "file.", "",
             f"Command: `python scripts/bench_coverage.py --out {os.path.relpath(args.out, ROOT)}"
             + (f" --kinds {' '.join(args.kinds)}" if args.kinds else "") + f"` ({args.jobs} jobs)"
             + (" (the other kinds: host check only, [host.md](host.md))" if args.kinds else ""), "",
             f"**{len(both)} of {len(counted)} cells pass both paths** ({100 * len(both) / max(1, len(counted)):.1f}%)"
             f"; {len(rows) - len(counted)} files no reference runs.", ""]
    cases = sorted({r["case"] for r in rows})
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)] + \
        sorted({r["kind"] for r in rows} - set(KINDS))
    lines.append("| case | " + " | ".join(kinds) + " |")
    lines.append("|---|" + "---|" * len(kinds))
    by = {(r["case"], r["kind"]): r for r in rows}
    for case in cases:
        cells = [(_cell(by[(case, k)]) if (case, k) in by else "") for k in kinds]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    lines += ["", "## Failures", ""]
    for r in rows:
        if not runs_somewhere(r):
            continue
        for path, why in passes(r).items():
            if why is not True:
                lines.append(f"* `{r['file']}` {path}: {why}")
    lines += ["", "## Files no reference runtime runs", ""]
    for r in rows:
        if not runs_somewhere(r):
            lines.append(f"* `{r['file']}`: " + "; ".join(f"{k}: {v}" for k, v in r["refs"].items()))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(both)}/{len(counted)} cells pass both paths -> {out}")


def entries(args) -> list:
    out = []
    for folder in args.models:
        man = os.path.join(folder, "manifest.json")
        if not os.path.exists(man):
            continue
        with open(man) as f:
            for e in json.load(f)["files"]:
                e = dict(e, folder=folder)
                if args.only and e["case"] not in args.only:
                    continue
                if args.kinds and e["kind"] not in args.kinds:
                    continue
                out.append(e)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "coverage"))
    ap.add_argument("--models", nargs="*", default=[os.path.join(ROOT, "tests", "data", "coverage"),
                                                    os.path.join(ROOT, "tests", "data", "coverage_onnx")])
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--kinds", nargs="*", help="kinds (float32 int8 int16x8 hybrid float16 onnx)")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per command")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--resume", action="store_true", help="keep results.json rows of unchanged files")
    args = ap.parse_args(argv)
    todo = entries(args)
    old = {}
    res_path = os.path.join(args.out, "results.json")
    if os.path.exists(res_path):
        with open(res_path) as f:
            old = {r["file"]: r for r in json.load(f)["rows"]}
    rows, pending = [], []
    for e in todo:
        prev = old.get(e["file"])
        if args.resume and prev and prev.get("sha") == _sha(os.path.join(e["folder"], e["file"])):
            rows.append(prev)
        else:
            pending.append(e)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(evaluate, e, e["folder"], args): e for e in pending}
        for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            r = fut.result()
            rows.append(r)
            p = passes(r)
            print(f"[{i}/{len(pending)}] {r['file']:48s} refs={','.join(k for k, v in r['refs'].items() if v is True) or '-'}"
                  f" " + " ".join(f"{k}={'ok' if v is True else 'FAIL: ' + str(v)[:80]}" for k, v in p.items()),
                  flush=True)
    if args.only or args.kinds:      # a partial run updates the rows it ran
        keep = {r["file"] for r in rows}
        rows += [r for f, r in old.items() if f not in keep]
    rows.sort(key=lambda r: r["file"])
    write_report(rows, args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
