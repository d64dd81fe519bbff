#!/usr/bin/env python3
"""Evaluate the learned scheduler (``method="learned"``): gaps, speed, zoo.

1. **Held-out gaps**: ``layered_dag(n, seed=900_000 + i)`` (the core generator's
   default parameters; the training graphs used other seeds and randomized
   parameters) for n = 30, 60, 120; the optimum is ``dp``'s proven peak (graphs
   the DP cannot prove within the time limit are counted and skipped). Mean and
   worst gap of learned greedy / sampled / beam decodes, and of the memory-greedy
   heuristic and HMCOS for reference.
2. **Speed**: seconds per graph of ``learned`` against ``dp``, ``hmcos`` (and
   ``ilp`` when registered) on layered graphs of 100 to 1,000 ops, with the
   peaks reached.
3. **Zoo**: every network of ``tvm_memsched.zoo`` (when importable).

Writes ``results.json`` and ``results.md`` to ``--out``.

    python scripts/bench_learned.py --out bench/learned              # full run
    python scripts/bench_learned.py --out /tmp/bl --quick            # a couple of minutes

BLAS threads are limited to one (``OPENBLAS_NUM_THREADS=1`` unless set): the
numpy decoder multiplies small matrices, where threading only adds latency.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.core import layered_dag  # noqa: E402
from tvm_memsched.app.progress import Progress  # noqa: E402
from tvm_memsched.schedulers import available_methods, schedule  # noqa: E402
from tvm_memsched.schedulers import learned as L  # noqa: E402  (registers "learned")

try:  # the ILP scheduler registers itself when its module exists
    from tvm_memsched.schedulers import ilp as _ilp  # noqa: E402,F401
except Exception:  # noqa: BLE001
    pass

# "learned" is the registry default (beam search of width 4); the others are explicit options
LEARNED_VARIANTS = [("learned/greedy", {"beam": 1}), ("learned", {}), ("learned/b8", {"beam": 8}),
                    ("learned/s8", {"beam": 1, "samples": 8}), ("learned/s32", {"beam": 1, "samples": 32})]


def run_method(g, label, time_limit):
    method, kw = label.split("/")[0], {}
    for name, opts in LEARNED_VARIANTS:
        if name == label:
            kw = dict(opts)
    t = time.perf_counter()
    r = schedule(g, method, time_limit=time_limit if method in ("dp", "ilp", "hmcos", "auto") else None, **kw)
    return r, time.perf_counter() - t


def held_out(args, bar):
    rows = []
    methods = [v for v, _ in LEARNED_VARIANTS] + ["greedy", "hmcos"]
    for n in args.sizes:
        for i in range(args.held_out):
            g = layered_dag(n, seed=900_000 + i)
            bar.advance(note=f"held-out {g.name}")
            t = time.perf_counter()
            ex = schedule(g, "dp", time_limit=args.time_limit)
            dp_s = time.perf_counter() - t
            row = {"n": n, "seed": 900_000 + i, "ops": g.num_ops, "optimal": ex.optimal, "opt_peak": ex.peak_bytes,
                   "dp_seconds": dp_s, "lower_bound": ex.lower_bound_bytes}
            if ex.optimal:
                for m in methods:
                    r, s = run_method(g, m, args.time_limit)
                    row[m] = {"peak": r.peak_bytes, "gap": r.peak_bytes / ex.peak_bytes - 1, "seconds": s}
            rows.append(row)
    summary = []
    for n in args.sizes:
        rs = [r for r in rows if r["n"] == n and r["optimal"]]
        skipped = sum(1 for r in rows if r["n"] == n and not r["optimal"])
        for m in methods:
            gaps = np.array([r[m]["gap"] for r in rs])
            secs = np.array([r[m]["seconds"] for r in rs])
            summary.append({"n": n, "method": m, "graphs": len(rs), "skipped_unproven": skipped,
                            "mean_gap": float(gaps.mean()) if len(gaps) else None,
                            "worst_gap": float(gaps.max()) if len(gaps) else None,
                            "median_gap": float(np.median(gaps)) if len(gaps) else None,
                            "optimal_frac": float((gaps <= 1e-12).mean()) if len(gaps) else None,
                            "mean_seconds": float(secs.mean()) if len(secs) else None,
                            "dp_mean_seconds": float(np.mean([r["dp_seconds"] for r in rs])) if rs else None})
    return rows, summary


def speed(args, bar):
    exact = ["dp", "hmcos"] + (["ilp"] if "ilp" in available_methods() else [])
    methods = exact + [v for v, _ in LEARNED_VARIANTS[:3]] + ["greedy"]
    rows = []
    for n in args.speed_sizes:
        for i in range(args.speed_seeds):
            g = layered_dag(n, seed=800_000 + n + i)
            for m in methods:
                bar.advance(note=f"speed {g.name} {m}")
                r, s = run_method(g, m, args.time_limit)
                rows.append({"graph": g.name, "ops": g.num_ops, "method": m, "peak": r.peak_bytes,
                             "optimal": r.optimal, "lower_bound": r.lower_bound_bytes, "seconds": s})
    return rows, exact


def zoo_runs(args, bar):
    try:
        from tvm_memsched import zoo
        names = list(zoo.names())
    except Exception as exc:  # noqa: BLE001
        return None, f"zoo not available: {exc}"
    if args.zoo:
        names = [n for n in names if n in args.zoo]
    rows = []
    methods = ["dp", "hmcos", "greedy", "learned/greedy", "learned", "learned/b8"]
    for name in names:
        try:
            g = zoo.graph(name)
        except Exception as exc:  # noqa: BLE001
            rows.append({"model": name, "error": str(exc)})
            continue
        for m in methods:
            bar.advance(note=f"zoo {name} {m}")
            r, s = run_method(g, m, args.zoo_time_limit)
            rows.append({"model": name, "ops": g.num_ops, "method": m, "peak": r.peak_bytes, "optimal": r.optimal,
                         "lower_bound": r.lower_bound_bytes, "seconds": s})
    return rows, None


def fmt_pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def markdown(res) -> str:
    out = ["# Learned scheduler (RESPECT-style pointer network)", ""]
    meta = res["weights"]
    out.append(f"Weights `{meta['params_sha256'][:12]}` ({meta['num_params']} parameters, config {meta['config']}); "
               f"machine {res['machine']}; exact time limit {res['args']['time_limit']} s.")
    out += ["", "## Held-out synthetic graphs: gap to the proven optimum (`dp`)", "",
            "| ops | method | graphs | mean gap | worst gap | optimal | s/graph | dp s/graph |",
            "|---|---|---|---|---|---|---|---|"]
    for s in res["held_out_summary"]:
        out.append(f"| {s['n']} | {s['method']} | {s['graphs']} (+{s['skipped_unproven']} unproven) | "
                   f"{fmt_pct(s['mean_gap'])} | {fmt_pct(s['worst_gap'])} | {fmt_pct(s['optimal_frac'])} | "
                   f"{s['mean_seconds']:.4f} | {s['dp_mean_seconds']:.4f} |")
    out += ["", "## Speed: seconds per graph (layered DAGs)", ""]
    rows = res["speed"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out.append("| graph | ops | " + " | ".join(methods) + " | learned speedup vs " + "/".join(res["exact"]) + " |")
    out.append("|---|---|" + "---|" * len(methods) + "---|")
    for gname in dict.fromkeys(r["graph"] for r in rows):
        rs = {r["method"]: r for r in rows if r["graph"] == gname}
        cells = []
        for m in methods:
            r = rs[m]
            star = "*" if r["optimal"] else ""
            cells.append(f"{r['seconds']:.3f}s / {r['peak']}{star}")
        sp = ", ".join(f"{lm}: " + "/".join(f"{rs[e]['seconds'] / rs[lm]['seconds']:.0f}x" for e in res["exact"])
                       for lm in ("learned/greedy", "learned"))
        out.append(f"| {gname} | {rs['learned']['ops']} | " + " | ".join(cells) + f" | {sp} |")
    out.append("")
    out.append("Cells: seconds / peak bytes (`*` = proven optimal).")
    if res.get("zoo"):
        out += ["", "## Zoo", "", "| model | ops | method | peak | vs best | proven | seconds |",
                "|---|---|---|---|---|---|---|"]
        zrows = [r for r in res["zoo"] if "error" not in r]
        for model in dict.fromkeys(r["model"] for r in zrows):
            rs = [r for r in zrows if r["model"] == model]
            best = min(r["peak"] for r in rs)
            for r in rs:
                out.append(f"| {model} | {r['ops']} | {r['method']} | {r['peak']} | {fmt_pct(r['peak'] / best - 1)} | "
                           f"{'yes' if r['optimal'] else ''} | {r['seconds']:.3f} |")
    elif res.get("zoo_note"):
        out += ["", f"Zoo: {res['zoo_note']}"]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/learned")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--held-out", type=int, default=50, help="graphs per size")
    ap.add_argument("--sizes", type=int, nargs="*", default=[30, 60, 120])
    ap.add_argument("--speed-sizes", type=int, nargs="*", default=[100, 200, 500, 750, 1000])
    ap.add_argument("--speed-seeds", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60.0, help="for dp / ilp / hmcos")
    ap.add_argument("--zoo", nargs="*", help="zoo models (default: all)")
    ap.add_argument("--zoo-time-limit", type=float, default=30.0)
    ap.add_argument("--no-zoo", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.held_out, args.speed_sizes, args.speed_seeds, args.time_limit = 8, [100, 500], 1, 20.0
        args.zoo_time_limit = 5.0
    model = L.load_model()
    total = len(args.sizes) * args.held_out + len(args.speed_sizes) * args.speed_seeds * 7 + 120
    with Progress(total, "runs", label="bench_learned") as bar:
        rows, summary = held_out(args, bar)
        sp, exact = speed(args, bar)
        zoo, note = (None, "skipped (--no-zoo)") if args.no_zoo else zoo_runs(args, bar)
    meta = {k: v for k, v in model.meta.items() if k != "training"}
    res = {"args": vars(args), "machine": f"{platform.machine()} {platform.python_version()} "
                                          f"({os.cpu_count()} cpus)",
           "weights": meta, "training": {k: v for k, v in model.meta.get("training", {}).items() if k != "history"},
           "held_out": rows, "held_out_summary": summary, "speed": sp, "exact": exact, "zoo": zoo, "zoo_note": note}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
