#!/usr/bin/env python3
"""Benchmark the schedulers: peak, seconds and search effort per graph.

Graphs: NAS-like cell networks of growing size, random DAGs of growing size,
layered DNN-like DAGs, and the zoo networks (NAS cells, RandWire, HRNet's
multi-branch exchange units). For each graph and method it records the peak,
whether it is proven optimal, the seconds taken and the DP's state counts; an
ablation (on graphs up to ``--ablation-max-ops``) compares the DP budget
strategies (best-first, SERENITY's Algorithm 2, adaptive) and the effect of
chain fusion and divide-and-conquer.

    python scripts/bench_schedulers.py --out docs/bench/schedulers     # full run
    python scripts/bench_schedulers.py --quick                         # a minute or so
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.core import cell_network, layered_dag, random_dag  # noqa: E402
from tvm_memsched.app.progress import Progress  # noqa: E402
from tvm_memsched.schedulers import available_methods, schedule  # noqa: E402


def graphs(quick: bool, zoo_models: list[str]):
    out = []
    for cells in ((1, 2) if quick else (1, 2, 3, 4)):
        out.append(("cells", cell_network(cells, seed=11, blocks=5, name=f"nas-cells-{cells}")))
    for n in ((20, 60) if quick else (20, 40, 80, 160, 320, 640, 1000)):
        out.append(("random", random_dag(n, seed=n, max_inputs=3, locality=max(4, n // 10))))
    for n in ((30,) if quick else (30, 60, 120, 500, 1000)):
        out.append(("layered", layered_dag(n, seed=n)))
    if zoo_models:
        from tvm_memsched import zoo

        for name in zoo_models:
            out.append(("zoo", zoo.graph(name)))
    return out


DEFAULT_ZOO = ["swiftnet_like", "nasnet_a_cifar_tiny", "darts_v2_cifar_tiny", "hrnet_tiny",
               "hrnet_w18_small_v1", "hrnet_w18_small_v2", "randwire_ws_1", "randwire_ws_2", "randwire_ws_3",
               "darts_v2_cifar", "amoebanet_a_cifar", "nasnet_a_cifar"]


def run(args):
    methods = args.methods or [m for m in available_methods() if m != "learned" or args.learned]
    rows = []
    gs = graphs(args.quick, args.zoo if args.zoo is not None else ([] if args.quick else DEFAULT_ZOO))
    ablation = [("best-first", {}), ("serenity", {"strategy": "serenity"}), ("adaptive", {"strategy": "adaptive"}),
                ("no-fusion", {"fuse": False}), ("no-divide", {"divide": False})]
    total = sum(len(methods) + (len(ablation) if args.ablation and g.num_ops <= args.ablation_max_ops else 0)
                for _, g in gs)
    with Progress(total, "runs", label="bench_schedulers") as bar:
        for family, g in gs:
            for m in methods:
                bar.advance(note=f"{g.name} {m}")
                rows.append(measure(g, family, m, m, {}, args.time_limit))
            if args.ablation and g.num_ops <= args.ablation_max_ops:
                for label, kw in ablation:
                    bar.advance(note=f"{g.name} dp/{label}")
                    rows.append(measure(g, family, "dp", f"dp/{label}", kw, args.time_limit))
    return rows


def measure(g, family, method, label, kw, time_limit):
    t = time.perf_counter()
    r = schedule(g, method, time_limit=time_limit, **kw)
    secs = time.perf_counter() - t
    st = r.stats
    return {"graph": g.name, "family": family, "ops": g.num_ops, "method": label, "peak": r.peak_bytes,
            "lower_bound": r.lower_bound_bytes, "optimal": r.optimal, "seconds": round(secs, 4),
            "states": st.get("states"), "parts": st.get("parts"), "macros": st.get("macros"),
            "proven_lower_bound": st.get("proven_lower_bound", r.lower_bound_bytes)}


def markdown(rows) -> str:
    graphs_seen = []
    for r in rows:
        if r["graph"] not in graphs_seen:
            graphs_seen.append(r["graph"])
    methods = []
    for r in rows:
        if r["method"] not in methods:
            methods.append(r["method"])
    lines = ["| graph | ops | lower bound | " + " | ".join(methods) + " |",
             "|---|---|---|" + "---|" * len(methods)]
    for gname in graphs_seen:
        rs = {r["method"]: r for r in rows if r["graph"] == gname}
        any_r = next(iter(rs.values()))
        proven = max(r["proven_lower_bound"] or 0 for r in rs.values())
        cells = []
        for m in methods:
            r = rs.get(m)
            if r is None:
                cells.append("")
                continue
            mark = "*" if r["optimal"] else ""
            cells.append(f"{r['peak']}{mark} ({r['seconds']:.2f}s)")
        lines.append(f"| {gname} | {any_r['ops']} | {proven} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Peak bytes (seconds); * = proven optimal. Lower bound = best proven bound of any method.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--methods", nargs="*")
    ap.add_argument("--zoo", nargs="*", default=None, help="zoo models to include (default: a standard set)")
    ap.add_argument("--no-ablation", dest="ablation", action="store_false")
    ap.add_argument("--ablation-max-ops", type=int, default=250)
    ap.add_argument("--learned", action="store_true", help="include the learned scheduler")
    ap.add_argument("--out", default=None, help="directory for results.json and results.md")
    args = ap.parse_args()
    rows = run(args)
    md = markdown(rows)
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                "time_limit": args.time_limit, "date": time.strftime("%Y-%m-%d")}
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
