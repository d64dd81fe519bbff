"""Command line for the zoo: list the models, export a Graph JSON or a .tflite file.

::

    python -m tvm_memsched.zoo list [--size small]
    python -m tvm_memsched.zoo graph NAME [-o NAME.json] [--dtype int8]
    python -m tvm_memsched.zoo tflite NAME -o NAME.tflite [--dtype int8]
"""

from __future__ import annotations

import argparse
import sys

from . import get_net, graph, graph_json, info, names, tflite
from ..core.files import atomic_write


def _list(size):
    print(f"{'name':24s} {'size':6s} {'ops':>5s} {'tensors':>7s} {'input':>14s} {'act MB':>8s} {'MMAC':>8s}")
    for n in names(size):
        net, g = get_net(n), graph(n)
        shape = "x".join(str(s) for s in net.input_shape[1:])
        print(f"{n:24s} {info(n)['size']:6s} {g.num_ops:5d} {g.num_tensors:7d} {shape:>14s} "
              f"{g.total_bytes / 1e6:8.2f} {net.total_macs() / 1e6:8.1f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tvm_memsched.zoo", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("list", help="list the models with their sizes")
    pl.add_argument("--size", choices=["small", "medium", "large"])
    pg = sub.add_parser("graph", help="write a model's graph JSON")
    pt = sub.add_parser("tflite", help="write a model's .tflite file")
    for sp in (pg, pt):
        sp.add_argument("name")
        sp.add_argument("--dtype", choices=["float32", "int8"], default="float32")
        sp.add_argument("-o", "--output", required=sp is pt)
    args = p.parse_args(argv)
    try:
        if args.cmd == "list":
            _list(args.size)
        elif args.cmd == "graph":
            text = graph_json(args.name, args.dtype, indent=1)
            if args.output:
                atomic_write(args.output, text + "\n")
            else:
                print(text)
        else:
            n = len(tflite(args.name, args.dtype, args.output))
            print(f"wrote {args.output} ({n} bytes)")
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
