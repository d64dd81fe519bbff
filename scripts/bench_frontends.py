#!/usr/bin/env python3
"""ONNX and PyTorch (.pt2) files of public architectures: TVM's default build against ours.

SqueezeNet 1.1, Inception v1 (GoogLeNet), DenseNet-121 and ShuffleNet v2 1.0x, written by hand after the papers
(:mod:`tvm_memsched.zoo.torch_nets`, random weights, 224x224), exported as ONNX (TorchScript-based exporter) and
as ``torch.export`` programs (``.pt2``), then compared as ``tvm-memsched compare FILE`` does: planned activation
memory of TVM's default pipeline vs tvm_memsched's (order + arena), numerics checked on the VM.

    python scripts/bench_frontends.py --out docs/bench/frontends [--size 224] [--models squeezenet ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched.app.models import load_relax_spec  # noqa: E402
from tvm_memsched.zoo import torch_nets  # noqa: E402


def measure(name: str, fmt: str, path: str) -> dict:
    import tvm

    from tvm_memsched.relax.compare import compare

    t0 = time.perf_counter()
    mod, _ = load_relax_spec(path)
    t1 = time.perf_counter()
    c = compare(mod, tvm.target.Target({"kind": "llvm"}), name=f"{name}.{fmt}").to_dict()
    return {"model": name, "format": fmt, "file_bytes": os.path.getsize(path), "import_seconds": round(t1 - t0, 1),
            "compare_seconds": round(time.perf_counter() - t1, 1), "tvm_default_bytes": c["default_planned_bytes"],
            "ours_bytes": c["memsched_planned_bytes"], "ratio": c["ratio"], "numerics_ok": c["numerics_ok"]}


def markdown(rows, meta) -> str:
    out = ["# ONNX and .pt2 files: TVM's default build vs tvm_memsched", "",
           f"{meta['date']}, Python {meta['python']}, {meta['machine']}, {meta['size']}x{meta['size']} inputs; "
           "`python scripts/bench_frontends.py`. Architectures written after the papers "
           "(`tvm_memsched.zoo.torch_nets`, random weights); ONNX from PyTorch's TorchScript-based exporter "
           "(BatchNorm folded into convolutions where it follows one), .pt2 from `torch.export` (BatchNorm kept).",
           "", "| model | file | TVM default planned | tvm_memsched | ratio | numerics |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['model']} | .{r['format']} | {r['tvm_default_bytes'] / 2**20:.2f} MiB | "
                   f"{r['ours_bytes'] / 2**20:.2f} MiB | {r['ratio']:.2f}x | "
                   f"{'equal' if r['numerics_ok'] else 'DIFFERENT'} |")
    return "\n".join(out + [""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write frontends.json and frontends.md here")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--models", nargs="*", default=list(torch_nets.NETWORKS))
    ap.add_argument("--formats", nargs="*", default=["onnx", "pt2"], choices=["onnx", "pt2"])
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            net = torch_nets.NETWORKS[name]()
            for fmt in args.formats:
                path = os.path.join(d, f"{name}.{fmt}")
                (torch_nets.export_onnx if fmt == "onnx" else torch_nets.export_pt2)(net, path, args.size)
                print(f"{name}.{fmt} ...", file=sys.stderr)
                rows.append(measure(name, fmt, path))
                print(f"  {rows[-1]}", file=sys.stderr)
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "machine": platform.machine(),
            "size": args.size}
    print(markdown(rows, meta))
    if args.out:
        write_results(args.out, "frontends", {"meta": meta, "rows": rows}, markdown(rows, meta))
    return 0 if all(r["numerics_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
