#!/usr/bin/env python3
"""Compile time and the compiler's memory on large synthetic networks: our pipeline against TVM's default.

Each network is :func:`tvm_memsched.relax.testing.random_module` (a random DAG of small convolutions,
depthwise convolutions, pools, adds and concatenations on 8x8 maps; every tensor nobody reads is an
output), built with ``tvm.compile(mod, llvm, relax_pipeline=...)`` in a fresh process per size and side,
under :class:`~tvm_memsched.relax.analysis.profiling.PassTimer` and
:func:`~tvm_memsched.relax.analysis.profiling.peak_rss`. The table gives seconds, peak resident memory and
the slowest passes; a side that runs longer than ``--timeout`` seconds is killed and reported as such.

    python scripts/bench_large_compile.py --out docs/bench/large 2000 10000 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.output import write_results  # noqa: E402

SIDES = ("ours", "tvm")


def compile_once(n_ops: int, side: str, seed: int) -> dict:
    """Build one network and compile it with one side's pipeline, in this process."""
    import tvm
    from tvm import relax

    from tvm_memsched.relax.analysis.profiling import PassTimer, peak_rss
    from tvm_memsched.relax.pipeline import pipeline
    from tvm_memsched.relax.testing import random_module

    t0 = time.perf_counter()
    mod = random_module(seed=seed, n_ops=n_ops, multi_output=True)
    built = time.perf_counter() - t0
    target = tvm.target.Target("llvm")
    timer = PassTimer()
    with peak_rss() as rss:
        t0 = time.perf_counter()
        with tvm.transform.PassContext(instruments=[timer]):
            if side == "ours":
                tvm.compile(mod, target, relax_pipeline=pipeline(target))
            else:
                tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
        seconds = time.perf_counter() - t0
    return {"ops": n_ops, "side": side, "seed": seed, "bindings": len(mod["main"].body.blocks[0].bindings),
            "build_module_seconds": round(built, 1), "compile_seconds": round(seconds, 1),
            "peak_rss_bytes": rss.peak_bytes, "rss_growth_bytes": rss.growth_bytes,
            "passes": [[k, round(v, 2), c] for k, v, c in timer.top(8)]}


def run_side(n_ops: int, side: str, seed: int, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--seed", str(seed), str(n_ops)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ops": n_ops, "side": side, "seed": seed, "error": f"killed after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"ops": n_ops, "side": side, "seed": seed,
                "error": f"exit {proc.returncode} after {time.perf_counter() - t0:.0f} s: {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    out = ["| operators | side | compile | peak RSS | slowest passes |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['ops']:,} | {r['side']} | {r['error']} | | |")
            continue
        passes = ", ".join(f"{k} {v:.1f} s" for k, v, _c in r["passes"][:4])
        out.append(f"| {r['ops']:,} | {r['side']} | {r['compile_seconds']:.1f} s | "
                   f"{r['peak_rss_bytes'] / 2**30:.2f} GiB | {passes} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", type=int, nargs="+", help="operators per network")
    ap.add_argument("--out", default="docs/bench/large")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per compile")
    ap.add_argument("--sides", default=",".join(SIDES), help="ours,tvm (default both)")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(compile_once(args.ops[0], args.child, args.seed)))
        return 0
    rows = []
    for n in args.ops:
        for side in args.sides.split(","):
            print(f"[bench_large_compile] {n:,} operators, {side} ...", flush=True)
            row = run_side(n, side, args.seed, args.timeout)
            print(f"[bench_large_compile]   {row.get('error') or str(row['compile_seconds']) + ' s, '}"
                  f"{'' if 'error' in row else format(row['peak_rss_bytes'] / 2**30, '.2f') + ' GiB'}", flush=True)
            rows.append(row)
    text = ("# Large synthetic networks: compile time and compiler memory\n\n"
            f"`random_module(seed={args.seed}, n_ops=N, multi_output=True)`, one process per compile, "
            f"{os.cpu_count()} cores. Command: `python scripts/bench_large_compile.py --out {args.out} "
            f"{' '.join(map(str, args.ops))}`\n\n" + table(rows))
    for p in write_results(args.out, "large", {"rows": rows}, text):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
