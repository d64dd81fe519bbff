"""HRNet classification networks (Wang et al., 2019, "Deep High-Resolution Representation Learning").

Structure of the public ``cls_hrnet`` code:

* stem: two 3x3/2 convs with 64 channels (+BN+ReLU), 1/4 resolution;
* stage 1: bottleneck blocks (1x1, 3x3, 1x1 x4, projection shortcut on the first);
* transitions: a 3x3 conv (+ReLU) adapts an existing branch whose width changes;
  a new, twice-smaller branch comes from a 3x3/2 conv (+ReLU) on the last branch;
* stages 2-4: ``modules`` high-resolution modules with 2/3/4 parallel branches
  (widths ``c, 2c, 4c, 8c`` at 1/4 ... 1/32 resolution). A module runs
  ``blocks`` basic blocks (3x3, 3x3, identity shortcut) on every branch, then an
  exchange unit: output ``i`` is the ReLU of the sum over branches ``j`` of
  ``x_j`` (``j == i``), 1x1 conv (+BN) and nearest upsampling by ``2^(j-i)``
  (``j > i``), or ``i - j`` 3x3/2 convs (+BN, ReLU between them) (``j < i``);
* classification head: a bottleneck per branch widening to 128/256/512/1024
  channels, 3x3/2 convs (+ReLU) that carry the sum down to the lowest
  resolution, a 1x1 conv to 2048 channels, global average pool and dense.

:data:`HRNET_CONFIGS` holds the public W18-small configurations.

Example
-------
>>> net = hrnet_network("tiny", HRNET_CONFIGS["hrnet_tiny"])
>>> net.count("upsample_nearest")
10
"""

from __future__ import annotations

from typing import Mapping

from .netdef import Net, NetBuilder

__all__ = ["HRNET_CONFIGS", "hrnet_network"]

#: Public configurations (HRNet-Image-Classification ``cls_hrnet_w18_small_v{1,2}`` YAML files),
#: plus a reduced one for fast tests.
HRNET_CONFIGS: dict[str, dict] = {
    "hrnet_w18_small_v1": {
        "image_size": 224, "stem_channels": 64,
        "stage1": {"blocks": 1, "channels": 32},
        "stages": [  # stages 2, 3, 4
            {"modules": 1, "blocks": 2, "channels": (16, 32)},
            {"modules": 1, "blocks": 2, "channels": (16, 32, 64)},
            {"modules": 1, "blocks": 2, "channels": (16, 32, 64, 128)},
        ],
        "head_channels": (32, 64, 128, 256), "final_channels": 2048, "num_classes": 1000,
    },
    "hrnet_w18_small_v2": {
        "image_size": 224, "stem_channels": 64,
        "stage1": {"blocks": 2, "channels": 64},
        "stages": [
            {"modules": 1, "blocks": 2, "channels": (18, 36)},
            {"modules": 3, "blocks": 2, "channels": (18, 36, 72)},
            {"modules": 2, "blocks": 2, "channels": (18, 36, 72, 144)},
        ],
        "head_channels": (32, 64, 128, 256), "final_channels": 2048, "num_classes": 1000,
    },
    "hrnet_tiny": {
        "image_size": 64, "stem_channels": 8,
        "stage1": {"blocks": 1, "channels": 8},
        "stages": [
            {"modules": 1, "blocks": 1, "channels": (4, 8)},
            {"modules": 1, "blocks": 1, "channels": (4, 8, 16)},
            {"modules": 1, "blocks": 1, "channels": (4, 8, 16, 32)},
        ],
        "head_channels": (4, 8, 16, 32), "final_channels": 64, "num_classes": 10,
    },
}

_EXPANSION = 4


def _bottleneck(b: NetBuilder, x: str, planes: int) -> str:
    out = planes * _EXPANSION
    y = b.conv2d(x, planes, 1, act="relu", name="conv1")
    y = b.conv2d(y, planes, 3, act="relu", name="conv2")
    y = b.conv2d(y, out, 1, name="conv3")
    short = x if b.channels(x) == out else b.conv2d(x, out, 1, name="downsample")
    return b.add(y, short, act="relu", name="add")


def _basic(b: NetBuilder, x: str, planes: int) -> str:
    y = b.conv2d(x, planes, 3, act="relu", name="conv1")
    y = b.conv2d(y, planes, 3, name="conv2")
    short = x if b.channels(x) == planes else b.conv2d(x, planes, 1, name="downsample")
    return b.add(y, short, act="relu", name="add")


def _exchange(b: NetBuilder, xs: list[str], channels) -> list[str]:
    """The fusion unit of a high-resolution module: every branch receives every other branch."""
    outs = []
    for i in range(len(xs)):
        terms = []
        for j, x in enumerate(xs):
            if j == i:
                terms.append(x)
            elif j > i:
                with b.scope(f"fuse{i}_from{j}"):
                    y = b.conv2d(x, channels[i], 1, name="conv")
                    terms.append(b.upsample_nearest(y, 2 ** (j - i), name="up"))
            else:
                with b.scope(f"fuse{i}_from{j}"):
                    y = x
                    for k in range(i - j):
                        last = k == i - j - 1
                        y = b.conv2d(y, channels[i] if last else channels[j], 3, stride=2,
                                     act=None if last else "relu", name=f"down{k}")
                    terms.append(y)
        outs.append(b.add(*terms, act="relu", name=f"fuse{i}"))
    return outs


def _module(b: NetBuilder, xs: list[str], channels, blocks: int) -> list[str]:
    ys = []
    for i, x in enumerate(xs):
        for k in range(blocks):
            with b.scope(f"branch{i}/block{k}"):
                x = _basic(b, x, channels[i])
        ys.append(x)
    return _exchange(b, ys, channels) if len(ys) > 1 else ys


def _transition(b: NetBuilder, xs: list[str], channels) -> list[str]:
    ys = []
    for i, c in enumerate(channels):
        if i < len(xs):
            ys.append(xs[i] if b.channels(xs[i]) == c else b.conv2d(xs[i], c, 3, act="relu", name=f"branch{i}"))
        else:
            ys.append(b.conv2d(xs[-1], c, 3, stride=2, act="relu", name=f"branch{i}"))
    return ys


def hrnet_network(name: str, config: Mapping, description: str = "") -> Net:
    """An HRNet classification network for ``config`` (see :data:`HRNET_CONFIGS` for the keys)."""
    b = NetBuilder(name, description)
    s = config["image_size"]
    x = b.input((1, 3, s, s))
    with b.scope("stem"):
        y = b.conv2d(x, config["stem_channels"], 3, stride=2, act="relu", name="conv1")
        y = b.conv2d(y, config["stem_channels"], 3, stride=2, act="relu", name="conv2")
    for k in range(config["stage1"]["blocks"]):
        with b.scope(f"stage1/block{k}"):
            y = _bottleneck(b, y, config["stage1"]["channels"])
    xs = [y]
    for si, st in enumerate(config["stages"], start=2):
        with b.scope(f"transition{si - 1}"):
            xs = _transition(b, xs, st["channels"])
        for m in range(st["modules"]):
            with b.scope(f"stage{si}/module{m}"):
                xs = _module(b, xs, st["channels"], st["blocks"])
    with b.scope("head"):
        hc = config["head_channels"]
        y = None
        for i, x in enumerate(xs):
            with b.scope(f"incre{i}"):
                z = _bottleneck(b, x, hc[i])
            if y is None:
                y = z
            else:
                with b.scope(f"down{i - 1}"):
                    d = b.conv2d(y, hc[i] * _EXPANSION, 3, stride=2, act="relu", name="conv")
                y = b.add(z, d, name=f"sum{i}")
        y = b.conv2d(y, config["final_channels"], 1, act="relu", name="final")
        y = b.dense(b.global_avg_pool(y), config["num_classes"])
    cfg = dict(config)
    cfg["branches_per_stage"] = [len(st["channels"]) for st in config["stages"]]
    return b.build(y, cfg)
