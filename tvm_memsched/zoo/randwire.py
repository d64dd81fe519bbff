"""Randomly wired networks (Xie et al., 2019, "Exploring Randomly Wired Neural Networks").

Each random stage is a Watts-Strogatz graph WS(N, K, P) from
``networkx.watts_strogatz_graph(N, K, P, seed)`` made a DAG by orienting every
edge from the lower to the higher node index. A node aggregates its inputs by a
sum (the paper's weighted sum with learned sigmoid weights; the weights are
omitted because they do not change the wiring or the tensor sizes) and applies
ReLU - separable 3x3 conv (depthwise 3x3 + pointwise 1x1) - BN. Nodes without
predecessors read the stage input with stride 2; the stage output is the sum of
the nodes without successors (the paper averages them; the 1/k factor could be
folded into the next layer, so it is left out).

The small-computation regime (Table 1 of the paper, as HMCOS used it):
``conv1`` 3x3/2 with C/2 channels, ``conv2`` 3x3/2 with C channels, three random
stages with C, 2C and 4C channels (28, 14, 7 pixels for a 224 input), then
ReLU + 1x1 conv with 1280 channels, global average pool and a dense classifier.

Each network is identified by the three WS seeds of its stages,
:data:`RANDWIRE_SEEDS`. Watts-Strogatz rewiring keeps the edge count, so every
stage has exactly ``N * K / 2`` edges.

Example
-------
>>> edges = ws_dag(32, 4, 0.75, seed=1)
>>> len(edges), all(u < v for u, v in edges)
(64, True)
>>> net = randwire_network("rw", seeds=(1, 2, 3), nodes=8, channels=8, image_size=64, final_channels=32)
>>> net.output_shape
(1, 1000)
"""

from __future__ import annotations

from .netdef import Net, NetBuilder

__all__ = ["RANDWIRE_SEEDS", "RANDWIRE_TINY_SEEDS", "ws_dag", "randwire_stage", "randwire_network"]

#: WS seeds of the three random stages of each zoo RandWire network (fixed forever: changing
#: them changes the benchmark).
RANDWIRE_SEEDS = {
    "randwire_ws_1": (101, 102, 103),
    "randwire_ws_2": (201, 202, 203),
    "randwire_ws_3": (301, 302, 303),
}
#: Seeds of the reduced ``randwire_tiny`` network.
RANDWIRE_TINY_SEEDS = (11, 12, 13)


def ws_dag(n: int, k: int, p: float, seed: int) -> list[tuple[int, int]]:
    """Edges ``(u, v)`` with ``u < v`` of ``networkx.watts_strogatz_graph(n, k, p, seed)``, sorted."""
    import networkx as nx

    g = nx.watts_strogatz_graph(n, k, p, seed=seed)
    return sorted((min(u, v), max(u, v)) for u, v in g.edges())


def randwire_stage(b: NetBuilder, x: str, channels: int, edges: list[tuple[int, int]], n: int) -> str:
    """A random stage on input ``x``: ``n`` nodes wired by ``edges`` (``u < v``); returns its output."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        if not (0 <= u < v < n):
            raise ValueError(f"edge {(u, v)} is not oriented from a lower to a higher node index")
        preds[v].append(u)
        succs[u].append(v)
    out: list[str] = []
    width = len(str(n - 1))
    for v in range(n):
        with b.scope(f"node{v:0{width}d}"):
            if preds[v]:
                agg, stride = b.add(*[out[u] for u in preds[v]], name="sum"), 1
            else:
                agg, stride = x, 2
            y = b.relu(agg)
            y = b.depthwise_conv2d(y, 3, stride, bias=False, name="dw")
            out.append(b.conv2d(y, channels, 1, name="pw"))
    sinks = [out[v] for v in range(n) if not succs[v]]
    return b.add(*sinks, name="output")


def randwire_network(name: str, seeds, *, nodes: int = 32, k: int = 4, p: float = 0.75, channels: int = 78,
                     image_size: int = 224, num_classes: int = 1000, final_channels: int = 1280,
                     description: str = "") -> Net:
    """A small-regime RandWire network with one WS(nodes, k, p) graph per seed (three stages)."""
    seeds = tuple(int(s) for s in seeds)
    b = NetBuilder(name, description)
    x = b.input((1, 3, image_size, image_size))
    with b.scope("conv1"):
        y = b.conv2d(x, channels // 2, 3, stride=2, act="relu", name="conv")
    with b.scope("conv2"):
        y = b.conv2d(y, channels, 3, stride=2, name="conv")
    stage_edges = []
    for i, seed in enumerate(seeds):
        edges = ws_dag(nodes, k, p, seed)
        stage_edges.append(len(edges))
        with b.scope(f"stage{i + 1}"):
            y = randwire_stage(b, y, channels * 2 ** i, edges, nodes)
    with b.scope("head"):
        y = b.conv2d(b.relu(y), final_channels, 1, act="relu", name="conv")
        y = b.dense(b.global_avg_pool(y), num_classes)
    config = {"graph": f"WS(N={nodes}, K={k}, P={p})", "seeds": list(seeds), "channels": channels,
              "stage_channels": [channels * 2 ** i for i in range(len(seeds))], "image_size": image_size,
              "final_channels": final_channels, "num_classes": num_classes, "edges_per_stage": stage_edges}
    return b.build(y, config)
