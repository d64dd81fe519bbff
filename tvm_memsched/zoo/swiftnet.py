"""A SwiftNet-like network: three irregular cells of separable convolutions joined by concatenations.

SwiftNet (Zhang et al., 2019) is the NAS network for human presence detection
that SERENITY evaluates (Visual Wake Words regime, 62 nodes in 3 cells). Its
exact cells are not published in a machine-readable form, so this is a network
*like* it, written for this zoo, and not the published one: a 96x96x3 input, a
3x3/2 stem, three hand-wired cells (:data:`SWIFTNET_CELLS`) at 48, 24 and 12
pixels, each followed by a separable 3x3/2 reduction, and a 1x1 conv + global
pool + dense head with two classes (person / no person). About 60 layers.

A cell node concatenates its inputs (when it has more than one), then applies a
depthwise kxk conv and a pointwise 1x1 conv (+BN+ReLU) with ``C`` or ``2C``
channels; the cell output concatenates the listed nodes. Inputs named ``"in"``
are the cell input. The first level of every cell widens the cell input into
several ``2C`` branches that the next level narrows again, and the nodes are
listed level by level, like the breadth-first order a converter emits; so, as
SERENITY observed for SwiftNet, the program order is not the memory-optimal one
(here a depth-first order of the branches needs about 12% less memory).

Example
-------
>>> net = swiftnet_like()
>>> net.input_shape, net.output_shape, 55 <= net.count() <= 90
((1, 3, 96, 96), (1, 2), True)
"""

from __future__ import annotations

from .netdef import Net, NetBuilder

__all__ = ["SWIFTNET_CELLS", "swiftnet_like"]

#: Cells: ``(nodes, outputs)``; a node is ``(name, inputs, kernel, width)`` with ``width`` in units of
#: the cell's ``C``. Nodes are listed level by level (breadth first), the order a converter emits.
SWIFTNET_CELLS = (
    ((("a1", ("in",), 3, 2), ("a2", ("in",), 5, 2), ("a3", ("in",), 3, 2),
      ("b1", ("a1",), 3, 1), ("b2", ("a2",), 3, 1), ("b3", ("a3",), 5, 1),
      ("c1", ("b1", "b2"), 3, 1), ("c2", ("b2", "b3"), 3, 1)),
     ("b1", "c1", "c2")),
    ((("a1", ("in",), 3, 2), ("a2", ("in",), 5, 2), ("a3", ("in",), 3, 2),
      ("b1", ("a1",), 5, 1), ("b2", ("a2",), 3, 1), ("b3", ("a3",), 3, 1),
      ("c1", ("b1", "b3"), 3, 1), ("c2", ("b1", "b2"), 5, 1)),
     ("b2", "c1", "c2")),
    ((("a1", ("in",), 3, 2), ("a2", ("in",), 5, 2),
      ("b1", ("a1",), 3, 1), ("b2", ("a2",), 3, 1), ("b3", ("a1",), 5, 1),
      ("c1", ("b1", "b2"), 3, 1), ("c2", ("b2", "b3"), 3, 1)),
     ("b3", "c1", "c2")),
)


def _cell(b: NetBuilder, x: str, spec, channels: int) -> str:
    nodes, outputs = spec
    states = {"in": x}
    for name, inputs, k, width in nodes:
        with b.scope(name):
            y = b.concat([states[i] for i in inputs], name="concat")
            y = b.depthwise_conv2d(y, k, bias=False, name="dw")
            states[name] = b.conv2d(y, channels * width, 1, act="relu", name="pw")
    return b.concat([states[o] for o in outputs], name="concat")


def swiftnet_like(*, name: str = "swiftnet_like", image_size: int = 96, stem_channels: int = 16,
                  channels=(8, 16, 32), reduce_channels=(32, 64), head_channels: int = 128,
                  num_classes: int = 2, description: str = "") -> Net:
    """The SwiftNet-like network of the module docstring."""
    b = NetBuilder(name, description)
    x = b.input((1, 3, image_size, image_size))
    y = b.conv2d(x, stem_channels, 3, stride=2, act="relu", name="stem")
    for i, spec in enumerate(SWIFTNET_CELLS):
        with b.scope(f"cell{i}"):
            y = _cell(b, y, spec, channels[i])
        if i < len(SWIFTNET_CELLS) - 1:
            with b.scope(f"reduce{i}"):
                y = b.depthwise_conv2d(y, 3, stride=2, bias=False, name="dw")
                y = b.conv2d(y, reduce_channels[i], 1, act="relu", name="pw")
    with b.scope("head"):
        y = b.conv2d(y, head_channels, 1, act="relu", name="conv")
        y = b.dense(b.global_avg_pool(y), num_classes)
    return b.build(y, {"image_size": image_size, "stem_channels": stem_channels, "cell_channels": list(channels),
                       "reduce_channels": list(reduce_channels), "head_channels": head_channels,
                       "num_classes": num_classes, "cells": len(SWIFTNET_CELLS)})
