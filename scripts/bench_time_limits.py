#!/usr/bin/env python3
"""Does every scheduler keep ``--time-limit``? Wall time of ``tvm-memsched schedule`` per method and graph.

Graphs: chains of 5,000, 7,500 and 20,000 ops, a 3,750-op diamond chain, and random DAGs of 7,500 and 20,000
ops (``random_dag(locality=...)``). Each method runs as the user runs it (a fresh ``tvm-memsched schedule``
process, so Python start-up, reading the JSON and the final verification count) with ``--time-limit T``;
the promise is the best valid order within ``T + 10% + 1 s``.

    python scripts/bench_time_limits.py --out docs/bench/time_limits [--limit 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched.core.generators import random_dag  # noqa: E402
from tvm_memsched.core.io import graph_to_dict  # noqa: E402
from tvm_memsched.schedulers import available_methods  # noqa: E402


def chain(n: int) -> dict:
    return {"name": f"chain{n}", "tensors": [{"name": f"t{i}", "bytes": 100 + i % 7} for i in range(n + 1)],
            "ops": [{"name": f"op{i}", "inputs": [f"t{i}"], "outputs": [f"t{i + 1}"]} for i in range(n)],
            "inputs": ["t0"], "outputs": [f"t{n}"]}


def diamonds(k: int) -> dict:
    tensors, ops, prev = [{"name": "x", "bytes": 10}], [], "x"
    for i in range(k):
        a, b, c = f"a{i}", f"b{i}", f"c{i}"
        tensors += [{"name": a, "bytes": 10 + i % 5}, {"name": b, "bytes": 12}, {"name": c, "bytes": 9}]
        ops += [{"name": f"A{i}", "inputs": [prev], "outputs": [a]}, {"name": f"B{i}", "inputs": [prev], "outputs": [b]},
                {"name": f"C{i}", "inputs": [a, b], "outputs": [c]}]
        prev = c
    return {"name": f"diamonds{3 * k}", "tensors": tensors, "ops": ops, "inputs": ["x"], "outputs": [prev]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--limit", type=float, default=5.0)
    args = ap.parse_args(argv)
    graphs = [chain(5000), chain(7500), chain(20000), diamonds(1250),
              graph_to_dict(random_dag(7500, seed=2, locality=12)), graph_to_dict(random_dag(20000, seed=1, locality=30))]
    graphs[4]["name"], graphs[5]["name"] = "random7500", "random20000"
    allowed = args.limit * 1.1 + 1.0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for g in graphs:
            path = os.path.join(d, g["name"] + ".json")
            with open(path, "w") as f:
                json.dump(g, f)
            for m in available_methods():
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "tvm_memsched.app.cli", "schedule", path, "--method", m,
                                    "--time-limit", str(args.limit), "-q", "-o", os.path.join(d, "r.json")],
                                   capture_output=True, text=True)
                secs = time.perf_counter() - t0
                res = {}
                if os.path.exists(os.path.join(d, "r.json")) and p.returncode != 0:
                    os.remove(os.path.join(d, "r.json"))
                if p.returncode == 0 and os.path.exists(os.path.join(d, "r.json")):
                    with open(os.path.join(d, "r.json")) as f:
                        res = json.load(f)
                if os.path.exists(os.path.join(d, "r.json")):
                    os.remove(os.path.join(d, "r.json"))
                rows.append({"graph": g["name"], "ops": len(g["ops"]), "method": m, "seconds": round(secs, 2),
                             "kept": secs <= allowed, "exit": p.returncode,
                             "optimal": res.get("optimal"), "peak_bytes": res.get("peak_bytes")})
                print(f"{g['name']:12s} {m:8s} {secs:6.2f} s {'ok' if secs <= allowed else 'OVER'}", file=sys.stderr)
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "machine": platform.machine(),
            "limit": args.limit, "allowed": allowed}
    lines = ["# Time limits kept", "",
             f"{meta['date']}, Python {meta['python']}, {meta['machine']}; `python scripts/bench_time_limits.py "
             f"--limit {args.limit:g}`: wall time of a whole `tvm-memsched schedule` process (start-up, reading "
             f"the JSON, search, verification) against T + 10% + 1 s = {allowed:.1f} s.", "",
             "| graph | ops | method | seconds | kept | optimal |", "|---|---:|---|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['ops']:,} | {r['method']} | {r['seconds']:.2f} | "
                     f"{'yes' if r['kept'] else 'NO'} | {r['optimal']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, "time_limits", {"meta": meta, "rows": rows}, text)
    return 0 if all(r["kept"] and r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
