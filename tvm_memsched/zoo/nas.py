"""NAS cell networks (NASNet-A, AmoebaNet-A, DARTS V2) built from DARTS-format genotypes.

The structure follows the DARTS reference implementation (Liu et al., 2019,
``model.py``), which HMCOS used for all three genotypes:

* a cell reads the outputs of the two previous cells. Each input is preprocessed
  with ReLU + 1x1 conv (+BN); when the older input has twice the resolution
  (right after a reduction) it goes through a *factorized reduction* instead:
  ReLU, then two 1x1 stride-2 convs, one on the input and one on the input
  shifted by one pixel (a strided slice), concatenated along channels;
* node ``i`` (``i >= 2``) sums two operations applied to earlier states. Each
  operation carries its own ReLU (as in DARTS): ``sep_conv_kxk`` = (ReLU,
  depthwise kxk, pointwise 1x1+BN) twice; ``dil_conv_kxk`` = the same once with
  dilation 2; ``conv_7x1_1x7`` = ReLU, 1x7 conv, 7x1 conv+BN; pools are 3x3; and
  ``skip_connect`` is an identity (no layer), or a factorized reduction in a
  reduction cell;
* reduction cells sit at 1/3 and 2/3 of the depth, double the channels, and
  apply stride 2 to every operation that reads a cell input;
* the cell output is the concatenation of the genotype's ``concat`` states.

Networks: ``N`` cells per stage means ``3N + 2`` cells. CIFAR-10 (32x32): stem =
3x3 conv with 3C channels. ImageNet (224x224): the DARTS ImageNet stem, i.e.
3x3/2 conv (C/2) + ReLU + 3x3/2 conv (C), then ReLU + 3x3/2 conv (C), so cells
run at 28, 14 and 7 pixels. Classifier: global average pool + dense.

Two deliberate departures from the DARTS code: padding is TensorFlow ``SAME``
(for stride 2 the odd pixel of padding goes bottom/right) rather than PyTorch's
symmetric padding, so every layer maps onto one TFLite operator; and a
factorized reduction to an odd channel count gives its first half ``ceil(C/2)``
channels (DARTS requires an even count; NASNet-A ImageNet has C = 11).

Example
-------
>>> net = nas_network(load_genotypes()["DARTS_V2"], name="darts_tiny", dataset="cifar10",
...                   cells_per_stage=1, filters=8)
>>> net.count("concat") >= 5, net.output_shape
(True, (1, 10))
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache

from .netdef import Net, NetBuilder

__all__ = ["Genotype", "load_genotypes", "hmcos_configs", "stage_channels", "nas_network", "CELL_OPS"]

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "genotypes.json")

#: Operation names a genotype may use.
CELL_OPS = ("sep_conv_3x3", "sep_conv_5x5", "sep_conv_7x7", "dil_conv_3x3", "dil_conv_5x5",
            "conv_7x1_1x7", "avg_pool_3x3", "max_pool_3x3", "skip_connect")


@dataclass(frozen=True)
class Genotype:
    """A DARTS-format genotype: ``(op, input_state)`` pairs, two per node, and the concatenated states."""

    name: str
    normal: tuple
    normal_concat: tuple
    reduce: tuple
    reduce_concat: tuple

    def cell(self, reduction: bool) -> tuple[tuple, tuple]:
        """``(ops, concat)`` of the reduction or the normal cell."""
        return (self.reduce, self.reduce_concat) if reduction else (self.normal, self.normal_concat)


@lru_cache(maxsize=None)
def _json() -> dict:
    with open(_DATA, encoding="utf-8") as f:
        return json.load(f)


def load_genotypes() -> dict[str, Genotype]:
    """The genotypes shipped in ``zoo/data/genotypes.json``: ``NASNet``, ``AmoebaNet``, ``DARTS_V2``."""
    out = {}
    for key, g in _json().items():
        if key.startswith("_"):
            continue
        for part in ("normal", "reduce"):
            ops = g[part]
            if len(ops) % 2:
                raise ValueError(f"genotype {key}: {part} must list two operations per node")
            for op, idx in ops:
                if op not in CELL_OPS:
                    raise ValueError(f"genotype {key}: unknown operation {op!r}")
        out[key] = Genotype(key, tuple((op, int(i)) for op, i in g["normal"]), tuple(g["normal_concat"]),
                            tuple((op, int(i)) for op, i in g["reduce"]), tuple(g["reduce_concat"]))
    return out


def hmcos_configs() -> dict[str, dict[str, tuple]]:
    """``{"cifar10" | "imagenet": {"NASNet" | "AmoebaNet" | "DARTS": (cells_per_stage, filters)}}`` used by HMCOS."""
    cfg = _json()["_network_configs_used_by_HMCOS"]
    return {"cifar10": {k: tuple(v) for k, v in cfg["CIFAR-10 (32x32 input)"].items()},
            "imagenet": {k: tuple(v) for k, v in cfg["ImageNet (224x224 input)"].items()}}


def stage_channels(filters: float, stage: int) -> int:
    """Channels per node in ``stage`` (0, 1, 2): ``filters * 2**stage`` rounded half up.

    Fractional filter counts (AmoebaNet-A ImageNet uses 12.5) are scaled first and
    rounded per stage, so 12.5 gives 13, 25, 50.

    >>> [stage_channels(12.5, s) for s in range(3)], [stage_channels(36, s) for s in range(3)]
    ([13, 25, 50], [36, 72, 144])
    """
    return max(1, int(math.floor(filters * 2 ** stage + 0.5)))


# ------------------------------------------------------------------ building blocks
def _relu_conv(b: NetBuilder, x: str, c: int) -> str:
    """ReLU + 1x1 conv + BN (DARTS ReLUConvBN)."""
    return b.conv2d(b.relu(x), c, 1, name="conv")


def factorized_reduce(b: NetBuilder, x: str, c: int) -> str:
    """ReLU, then 1x1/2 convs on ``x`` and on ``x`` shifted by one pixel, concatenated (C channels)."""
    n, ci, h, w = b.shape(x)
    if h % 2 or w % 2:
        raise ValueError(f"factorized reduction needs an even resolution, got {h}x{w}")
    r = b.relu(x)
    a = b.conv2d(r, c - c // 2, 1, stride=2, name="conv_a")
    shifted = b.strided_slice(r, (0, 0, 1, 1), (n, ci, h, w), name="shift")
    s = b.conv2d(shifted, c // 2, 1, stride=2, name="conv_b")
    return b.concat([a, s], name="concat")


def _sep_conv(b: NetBuilder, x: str, c: int, k: int, stride: int) -> str:
    y = b.relu(x, name="relu1")
    y = b.depthwise_conv2d(y, k, stride, bias=False, name="dw1")
    y = b.conv2d(y, b.channels(x), 1, name="pw1")
    y = b.relu(y, name="relu2")
    y = b.depthwise_conv2d(y, k, 1, bias=False, name="dw2")
    return b.conv2d(y, c, 1, name="pw2")


def _dil_conv(b: NetBuilder, x: str, c: int, k: int, stride: int) -> str:
    y = b.relu(x)
    y = b.depthwise_conv2d(y, k, stride, dilation=2, bias=False, name="dw")
    return b.conv2d(y, c, 1, name="pw")


def _conv_7x1_1x7(b: NetBuilder, x: str, c: int, stride: int) -> str:
    y = b.relu(x)
    y = b.conv2d(y, c, (1, 7), stride=(1, stride), bias=False, name="conv1x7")
    return b.conv2d(y, c, (7, 1), stride=(stride, 1), name="conv7x1")


def cell_op(b: NetBuilder, op: str, x: str, c: int, stride: int) -> str:
    """Apply one genotype operation to ``x`` (C channels in and out); returns the layer name."""
    if op.startswith("sep_conv_"):
        return _sep_conv(b, x, c, int(op[-1]), stride)
    if op.startswith("dil_conv_"):
        return _dil_conv(b, x, c, int(op[-1]), stride)
    if op == "conv_7x1_1x7":
        return _conv_7x1_1x7(b, x, c, stride)
    if op == "avg_pool_3x3":
        return b.avg_pool2d(x, 3, stride)
    if op == "max_pool_3x3":
        return b.max_pool2d(x, 3, stride)
    if op == "skip_connect":
        return x if stride == 1 else factorized_reduce(b, x, c)
    raise ValueError(f"unknown cell operation {op!r}")


def nas_cell(b: NetBuilder, s0: str, s1: str, genotype: Genotype, reduction: bool, c: int) -> str:
    """One cell reading the two previous cell outputs ``s0`` (older) and ``s1``; returns its output."""
    ops, concat = genotype.cell(reduction)
    with b.scope("pre0"):
        p0 = factorized_reduce(b, s0, c) if b.shape(s0)[2] != b.shape(s1)[2] else _relu_conv(b, s0, c)
    with b.scope("pre1"):
        p1 = _relu_conv(b, s1, c)
    states = [p0, p1]
    for i in range(len(ops) // 2):
        with b.scope(f"node{i + 2}"):
            terms = []
            for j, (op, idx) in enumerate(ops[2 * i: 2 * i + 2]):
                if idx >= len(states):
                    raise ValueError(f"genotype {genotype.name}: node {i + 2} reads state {idx}, not yet computed")
                stride = 2 if reduction and idx < 2 else 1
                with b.scope(f"op{j}_{op}"):
                    terms.append(cell_op(b, op, states[idx], c, stride))
            states.append(b.add(*terms, name="sum"))
    return b.concat([states[i] for i in concat], name="concat")


def nas_network(genotype: Genotype, *, name: str, dataset: str, cells_per_stage: int, filters: float,
                num_classes: int | None = None, image_size: int | None = None,
                description: str = "") -> Net:
    """A DARTS-style network of ``3 * cells_per_stage + 2`` cells (see the module docstring).

    Parameters
    ----------
    genotype : Genotype
    name : str
    dataset : ``"cifar10"`` or ``"imagenet"``
        Picks the stem, the input size (32 or 224) and the classes (10 or 1000).
    cells_per_stage : int
        Normal cells per stage (NASNet's ``N``).
    filters : float
        Channels per node in the first stage; doubled at every reduction, see
        :func:`stage_channels`.
    num_classes, image_size : int, optional
        Override the dataset defaults.
    """
    if dataset not in ("cifar10", "imagenet"):
        raise ValueError("dataset must be 'cifar10' or 'imagenet'")
    imagenet = dataset == "imagenet"
    size = image_size or (224 if imagenet else 32)
    classes = num_classes or (1000 if imagenet else 10)
    n_cells = 3 * cells_per_stage + 2
    reductions = {n_cells // 3, 2 * n_cells // 3}
    b = NetBuilder(name, description)
    x = b.input((1, 3, size, size))
    c0 = stage_channels(filters, 0)
    if imagenet:
        with b.scope("stem0"):
            y = b.conv2d(x, c0 // 2, 3, stride=2, act="relu", name="conv1")
            s0 = b.conv2d(y, c0, 3, stride=2, name="conv2")
        with b.scope("stem1"):
            s1 = b.conv2d(b.relu(s0), c0, 3, stride=2, name="conv")
    else:
        with b.scope("stem"):
            s0 = s1 = b.conv2d(x, 3 * c0, 3, name="conv")
    stage = 0
    for i in range(n_cells):
        reduction = i in reductions
        stage += reduction
        with b.scope(f"cell{i}"):
            out = nas_cell(b, s0, s1, genotype, reduction, stage_channels(filters, stage))
        s0, s1 = s1, out
    with b.scope("head"):
        y = b.dense(b.global_avg_pool(s1), classes)
    config = {"genotype": genotype.name, "dataset": dataset, "cells_per_stage": cells_per_stage,
              "cells": n_cells, "reduction_cells": sorted(reductions), "filters": filters,
              "stage_channels": [stage_channels(filters, s) for s in range(3)],
              "image_size": size, "num_classes": classes}
    return b.build(y, config)
