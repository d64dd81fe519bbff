#!/usr/bin/env python3
"""Benchmark the learned Coral segmenter against the exact segmentation (results.json + results.md).

Three parts, all under the default Edge TPU cost model of ``tvm_memsched.tflite.coral``:

1. **Held-out synthetic graphs** (``coral_dag`` seeds never used in training) of
   30, 60 and 120 ops, K = 2, 4, 6: the bottleneck gap of every method to the
   best known free-order segmentation (CP-SAT with a deterministic time limit,
   started from the better of the DP and the learned solution, the default of
   ``segment(free_order=True)``; proven optimal or not, as reported). Methods: ``learned`` (default: greedy decode +
   8 samples + the exact polish of ``default_window``), ``learned-raw`` (the model's greedy
   decode alone), ``learned+dp`` (what ``tvm-memsched coral --segmenter learned``
   does: those decodes plus the exact cut of the given order, here the program
   order), ``heuristic`` (the same decoding on logits from the compute
   share alone, i.e. without the trained model), ``dp-program`` (the exact DP
   over the cut positions of the program order).
2. **Speed** on 100-1,000-op graphs (K = 4): seconds of ``learned`` against the
   exact DP over the program order and CP-SAT over all orders (with its
   result and proof status at the time limit), started from the DP alone and
   from the better of the DP and the learned segmenter.
3. **Zoo** (int8 graphs of the benchmark networks), K = 4 and 6, same columns.

    python scripts/bench_coral.py --out docs/bench/coral            # ~15 min on 2 cores
    python scripts/bench_coral.py --out /tmp/coral-bench --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched import zoo  # noqa: E402
from tvm_memsched.core import coral_dag  # noqa: E402
from tvm_memsched.app.progress import Progress  # noqa: E402
from tvm_memsched.tflite.coral import learned as CL  # noqa: E402
from tvm_memsched.tflite.coral import segment  # noqa: E402

HELD_OUT_SEED = 5_000_000     # training uses seeds < 1,000,000
ZOO = ("swiftnet_like", "hrnet_w18_small_v1", "hrnet_w18_small_v2", "darts_v2_cifar", "nasnet_a_cifar",
       "randwire_ws_1", "mobilenet_v2", "resnet", "densenet_like")


class Heuristic:
    """Logits from the op's compute share alone: ``[stage(v) > j]`` iff its ancestors' compute passes the boundary."""

    meta: dict = {}

    def logits(self, rows):
        return 25.0 * rows[:, CL.NO + CL.NG + CL.BOUNDARY_FEATURES.index("anc_minus_b")]


def methods(g, k, exact_ms):
    out = {}
    t = time.perf_counter()
    s = CL.segment_learned(g, k)
    out["learned"] = (s.bottleneck_ms, time.perf_counter() - t)
    out["learned-raw"] = (s.stats["raw_bottleneck_ms"], None)
    t = time.perf_counter()
    s = CL.segment_learned(g, k, order=list(g.topo))
    out["learned+dp"] = (s.bottleneck_ms, time.perf_counter() - t)
    t = time.perf_counter()
    h = CL.segment_learned(g, k, model=Heuristic())
    out["heuristic"] = (h.bottleneck_ms, time.perf_counter() - t)
    t = time.perf_counter()
    d = segment(g, k)
    out["dp-program"] = (d.bottleneck_ms, time.perf_counter() - t)
    return {m: {"ms": v, "gap": v / exact_ms - 1, "seconds": sec} for m, (v, sec) in out.items()}


def exact_runs(g, k, limit):
    """CP-SAT from the DP's solution, and from the better of the DP's and the learned one (the default)."""
    out = {}
    for tag, ls in (("cpsat_dp_", False), ("cpsat_", True)):
        t = time.perf_counter()
        ex = segment(g, k, free_order=True, time_limit=limit, learned_start=ls)
        out.update({tag + "ms": ex.bottleneck_ms, tag + "optimal": ex.optimal,
                    tag + "lower_bound_ms": ex.lower_bound_ms, tag + "seconds": time.perf_counter() - t,
                    tag + "start": ex.stats.get("start")})
    return out


def fmt_pct(x):
    return f"{100 * x:.2f}%"


def exact_cell(r, tag):
    return f"{r[tag + 'ms']:.3f} ({'yes' if r[tag + 'optimal'] else 'no, bound %.3f' % r[tag + 'lower_bound_ms']})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--graphs", type=int, default=12, help="held-out graphs per size")
    ap.add_argument("--det-time", type=float, default=10.0, help="CP-SAT deterministic time for the reference")
    ap.add_argument("--speed-limit", type=float, default=60.0, help="CP-SAT wall-clock limit in the speed part")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    sizes, ks, speed_sizes, zoo_models = (30, 60, 120), (2, 4, 6), (100, 250, 500, 1000), ZOO
    if args.quick:
        args.graphs, args.det_time, args.speed_limit = 2, 1.0, 2.0
        sizes, ks, speed_sizes, zoo_models = (30,), (2, 4), (100,), ("swiftnet_like",)
    os.makedirs(args.out, exist_ok=True)
    model = CL.load_segmenter()
    res = {"weights": model.meta.get("params_sha256"), "training": {
        k: model.meta.get("training", {}).get(k) for k in ("train_graphs", "label_seconds", "train_seconds",
                                                           "total_seconds")},
        "args": vars(args), "synthetic": [], "speed": [], "zoo": []}

    jobs = [(n, i, k) for n in sizes for i in range(args.graphs) for k in ks]
    with Progress(len(jobs), "synthetic instances", label="held-out") as bar:
        for n, i, k in jobs:
            g = coral_dag(n, HELD_OUT_SEED + 1000 * n + i)
            t = time.perf_counter()
            ex = segment(g, k, free_order=True, deterministic_time=args.det_time)   # best known: learned start
            row = {"n": n, "seed": HELD_OUT_SEED + 1000 * n + i, "k": k, "exact_ms": ex.bottleneck_ms,
                   "exact_optimal": ex.optimal, "exact_seconds": time.perf_counter() - t,
                   "methods": methods(g, k, ex.bottleneck_ms)}
            res["synthetic"].append(row)
            bar.advance()

    with Progress(len(speed_sizes), "graphs", label="speed") as bar:
        for n in speed_sizes:
            g = coral_dag(n, HELD_OUT_SEED + 7)
            row = {"n": n}
            row.update(exact_runs(g, 4, args.speed_limit))
            row["methods"] = methods(g, 4, row["cpsat_ms"])
            res["speed"].append(row)
            bar.advance()

    with Progress(len(zoo_models) * 2, "segmentations", label="zoo") as bar:
        for name in zoo_models:
            g = zoo.graph(name, "int8")
            for k in (4, 6):
                row = {"model": name, "ops": g.num_ops, "k": k}
                row.update(exact_runs(g, k, args.speed_limit))
                row["methods"] = methods(g, k, row["cpsat_ms"])
                res["zoo"].append(row)
                bar.advance()

    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
    lines = ["# Learned Coral segmentation vs exact", "",
             f"`python scripts/bench_coral.py --out {args.out}`; weights {str(res['weights'])[:12]}; "
             "default Edge TPU cost model (4 TOPS x 0.15, 8 MiB SRAM, 320 MB/s).", "",
             "## Held-out synthetic graphs: bottleneck gap to the best known free-order segmentation", "",
             "| ops | K | instances | exact proven | learned mean / worst | learned-raw mean | learned+dp mean | "
             "heuristic mean / worst | dp-program mean / worst | learned = exact |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        for k in ks:
            rows = [r for r in res["synthetic"] if r["n"] == n and r["k"] == k]

            def col(m, rows=rows):
                return [r["methods"][m]["gap"] for r in rows]
            lines.append(
                f"| {n} | {k} | {len(rows)} | {sum(r['exact_optimal'] for r in rows)} | "
                f"{fmt_pct(statistics.mean(col('learned')))} / {fmt_pct(max(col('learned')))} | "
                f"{fmt_pct(statistics.mean(col('learned-raw')))} | "
                f"{fmt_pct(statistics.mean(col('learned+dp')))} | "
                f"{fmt_pct(statistics.mean(col('heuristic')))} / {fmt_pct(max(col('heuristic')))} | "
                f"{fmt_pct(statistics.mean(col('dp-program')))} / {fmt_pct(max(col('dp-program')))} | "
                f"{sum(g <= 1e-9 for g in col('learned'))} |")
    allg = {m: [r["methods"][m]["gap"] for r in res["synthetic"]] for m in
            ("learned", "learned-raw", "learned+dp", "heuristic", "dp-program")}
    lines += ["", "All instances: " + ", ".join(f"{m} mean {fmt_pct(statistics.mean(v))}, worst {fmt_pct(max(v))}"
                                             for m, v in allg.items()) + ".", "",
              "## Speed (K = 4)", "",
              "| ops | learned s | learned+dp s | dp-program s | CP-SAT from DP s | learned ms | learned+dp ms | dp-program ms | "
              "CP-SAT from DP ms (proven?) | CP-SAT from learned ms (proven?) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["speed"]:
        m = r["methods"]
        lines.append(f"| {r['n']} | {m['learned']['seconds']:.3f} | {m['learned+dp']['seconds']:.3f} | "
                     f"{m['dp-program']['seconds']:.3f} | {r['cpsat_dp_seconds']:.2f} | {m['learned']['ms']:.3f} | "
                     f"{m['learned+dp']['ms']:.3f} | {m['dp-program']['ms']:.3f} | {exact_cell(r, 'cpsat_dp_')} | "
                     f"{exact_cell(r, 'cpsat_')} |")
    lines += ["", "## Zoo (int8)", "",
              "| model | ops | K | CP-SAT from DP ms (proven?) | s | CP-SAT from learned ms (proven?) | s | "
              "learned ms (gap) | learned s | learned+dp ms (gap) | heuristic ms | dp-program ms (gap) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["zoo"]:
        m = r["methods"]
        lines.append(f"| {r['model']} | {r['ops']} | {r['k']} | {exact_cell(r, 'cpsat_dp_')} | "
                     f"{r['cpsat_dp_seconds']:.2f} | {exact_cell(r, 'cpsat_')} | {r['cpsat_seconds']:.2f} | "
                     f"{m['learned']['ms']:.3f} ({fmt_pct(m['learned']['gap'])}) | {m['learned']['seconds']:.3f} | "
                     f"{m['learned+dp']['ms']:.3f} ({fmt_pct(m['learned+dp']['gap'])}) | {m['heuristic']['ms']:.3f} | "
                     f"{m['dp-program']['ms']:.3f} ({fmt_pct(m['dp-program']['gap'])}) |")
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
