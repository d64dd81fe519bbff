"""Regular reference networks: a CIFAR ResNet, MobileNetV2 and a DenseNet-BC-like net.

They give the schedulers baselines whose best order is (nearly) the program
order: ResNets and MobileNets are chains of blocks with one skip each; DenseNet's
growing concatenations are the classic "regular but memory hungry" case.

* :func:`resnet_cifar` - ResNet-(6n+2) for CIFAR (He et al., 2016): 3x3 conv, three
  stages of ``n`` basic blocks with 16/32/64 channels, 1x1/2 projection shortcuts
  when the shape changes (option B), global average pool, dense.
* :func:`mobilenet_v2` - MobileNetV2 (Sandler et al., 2018) with a width
  multiplier (channels rounded to multiples of 8 as in the reference code).
* :func:`densenet_bc` - DenseNet-BC for CIFAR (Huang et al., 2017): dense layers
  (ReLU, 1x1 conv to 4k, ReLU, 3x3 conv to k, concatenated to the running
  feature map), transitions (ReLU, 1x1 conv halving the channels, 2x2 average
  pool). Pre-activation batch norms are folded into the convolutions, hence
  "like".

Example
-------
>>> resnet_cifar(depth=20).count("add")
9
"""

from __future__ import annotations

from .netdef import Net, NetBuilder

__all__ = ["resnet_cifar", "mobilenet_v2", "densenet_bc", "make_divisible", "MOBILENET_V2_BLOCKS"]


def resnet_cifar(depth: int = 20, *, name: str | None = None, num_classes: int = 10, widths=(16, 32, 64),
                 image_size: int = 32, description: str = "") -> Net:
    """ResNet-``depth`` for CIFAR-10 (``depth = 6n + 2``)."""
    if (depth - 2) % 6:
        raise ValueError("a CIFAR ResNet has depth 6n + 2 (8, 14, 20, 32, ...)")
    n = (depth - 2) // 6
    b = NetBuilder(name or f"resnet{depth}", description)
    x = b.input((1, 3, image_size, image_size))
    y = b.conv2d(x, widths[0], 3, act="relu", name="stem")
    for s, c in enumerate(widths):
        for k in range(n):
            stride = 2 if s > 0 and k == 0 else 1
            with b.scope(f"stage{s + 1}/block{k}"):
                r = b.conv2d(y, c, 3, stride=stride, act="relu", name="conv1")
                r = b.conv2d(r, c, 3, name="conv2")
                short = y if stride == 1 and b.channels(y) == c else b.conv2d(y, c, 1, stride=stride,
                                                                             name="shortcut")
                y = b.add(r, short, act="relu", name="add")
    with b.scope("head"):
        y = b.dense(b.global_avg_pool(y), num_classes)
    return b.build(y, {"depth": depth, "blocks_per_stage": n, "widths": list(widths),
                       "image_size": image_size, "num_classes": num_classes})


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round ``v`` to a multiple of ``divisor``, never going below 90% of it (MobileNet reference code).

    >>> make_divisible(32 * 0.35), make_divisible(96 * 0.35)
    (16, 32)
    """
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new < 0.9 * v:
        new += divisor
    return new


#: MobileNetV2 inverted residual settings: (expansion t, channels c, repeats n, first stride s).
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(width: float = 0.35, image_size: int = 96, *, name: str | None = None,
                 num_classes: int = 1000, last_channels: int = 1280, description: str = "") -> Net:
    """MobileNetV2 with width multiplier ``width`` (the last 1x1 conv keeps 1280 channels when width <= 1)."""
    b = NetBuilder(name or f"mobilenet_v2_{width}_{image_size}", description)
    x = b.input((1, 3, image_size, image_size))
    y = b.conv2d(x, make_divisible(32 * width), 3, stride=2, act="relu6", name="stem")
    idx = 0
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        out = make_divisible(c * width)
        for k in range(n):
            stride = s if k == 0 else 1
            with b.scope(f"block{idx}"):
                cin = b.channels(y)
                h = y if t == 1 else b.conv2d(y, cin * t, 1, act="relu6", name="expand")
                h = b.depthwise_conv2d(h, 3, stride, act="relu6", name="dw")
                h = b.conv2d(h, out, 1, name="project")
                y = b.add(y, h, name="add") if stride == 1 and cin == out else h
            idx += 1
    last = make_divisible(last_channels * max(1.0, width))
    with b.scope("head"):
        y = b.conv2d(y, last, 1, act="relu6", name="conv")
        y = b.dense(b.global_avg_pool(y), num_classes)
    return b.build(y, {"width": width, "image_size": image_size, "num_classes": num_classes,
                       "last_channels": last, "blocks": [list(s) for s in MOBILENET_V2_BLOCKS]})


def densenet_bc(depth: int = 40, growth: int = 12, *, name: str | None = None, compression: float = 0.5,
                num_classes: int = 10, image_size: int = 32, description: str = "") -> Net:
    """DenseNet-BC for CIFAR: three dense blocks of ``(depth - 4) / 6`` bottleneck layers each."""
    if (depth - 4) % 6:
        raise ValueError("DenseNet-BC has depth 6n + 4 (22, 28, 40, 100, ...)")
    n = (depth - 4) // 6
    b = NetBuilder(name or f"densenet_bc_{depth}_{growth}", description)
    x = b.input((1, 3, image_size, image_size))
    y = b.conv2d(x, 2 * growth, 3, name="stem")
    for blk in range(3):
        for k in range(n):
            with b.scope(f"block{blk + 1}/layer{k}"):
                h = b.conv2d(b.relu(y, name="relu1"), 4 * growth, 1, act="relu", name="conv1")
                h = b.conv2d(h, growth, 3, name="conv2")
                y = b.concat([y, h], name="concat")
        if blk < 2:
            with b.scope(f"transition{blk + 1}"):
                h = b.conv2d(b.relu(y), int(b.channels(y) * compression), 1, name="conv")
                y = b.avg_pool2d(h, 2, 2, name="pool")
    with b.scope("head"):
        y = b.dense(b.global_avg_pool(b.relu(y)), num_classes)
    return b.build(y, {"depth": depth, "growth": growth, "layers_per_block": n, "compression": compression,
                       "image_size": image_size, "num_classes": num_classes})
