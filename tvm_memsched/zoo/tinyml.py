"""The networks embedded engineers deploy on microcontrollers (MLPerf Tiny's four, after their reference code).

Structures as published in MLPerf Tiny's reference models (batch norms folded into
the convolutions and dense layers); weights are the zoo's seeded random ones and
int8 files are calibrated by :mod:`.quant`, so instruction counts, memory and
bit-exactness are those of the real deployments, accuracy is not.

* :func:`ds_cnn` - keyword spotting DS-CNN (small): 49x10 MFCC input, a 10x4/2
  convolution to 64 channels, four depthwise-separable blocks (3x3 depthwise,
  1x1 to 64), global average pool, 12 classes.
* :func:`mobilenet_v1` - visual wake words MobileNetV1 with a width multiplier
  (0.25 at 96x96: 8 to 256 channels, 13 depthwise-separable blocks), ReLU6,
  2 classes.
* ResNet-8 (image classification on CIFAR-10) is
  :func:`~.classic.resnet_cifar` with depth 8.
* :func:`fc_autoencoder` - anomaly detection: a 640-128-128-128-128-8-128-128-
  128-128-640 fully connected autoencoder on one frame of log-mel features.

Example
-------
>>> net = ds_cnn()
>>> net.input_shape, net.output_shape
((1, 1, 49, 10), (1, 12))
>>> fc_autoencoder().count("dense")
10
"""

from __future__ import annotations

from .netdef import Net, NetBuilder

__all__ = ["ds_cnn", "mobilenet_v1", "fc_autoencoder", "MOBILENET_V1_BLOCKS"]

#: MobileNetV1's depthwise-separable blocks at width 1.0: (output channels, stride)
MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
                       (512, 1), (512, 1), (1024, 2), (1024, 1))


def ds_cnn(*, name: str = "ds_cnn", filters: int = 64, blocks: int = 4, num_classes: int = 12,
           description: str = "") -> Net:
    """DS-CNN for keyword spotting on a ``(1, 1, 49, 10)`` MFCC map."""
    b = NetBuilder(name, description)
    x = b.input((1, 1, 49, 10))
    y = b.conv2d(x, filters, (10, 4), stride=2, act="relu", name="conv")
    for k in range(blocks):
        with b.scope(f"block{k + 1}"):
            y = b.depthwise_conv2d(y, 3, act="relu", name="dw")
            y = b.conv2d(y, filters, 1, act="relu", name="pw")
    with b.scope("head"):
        y = b.dense(b.global_avg_pool(y), num_classes)
    return b.build(y, {"filters": filters, "blocks": blocks, "num_classes": num_classes})


def mobilenet_v1(width: float = 0.25, image_size: int = 96, *, name: str | None = None, num_classes: int = 2,
                 description: str = "") -> Net:
    """MobileNetV1 with width multiplier ``width`` (channels ``int(c * width)``, as Keras does)."""
    b = NetBuilder(name or f"mobilenet_v1_{int(width * 100):03d}", description)
    x = b.input((1, 3, image_size, image_size))
    y = b.conv2d(x, int(32 * width), 3, stride=2, act="relu6", name="stem")
    for k, (c, s) in enumerate(MOBILENET_V1_BLOCKS):
        with b.scope(f"block{k + 1}"):
            y = b.depthwise_conv2d(y, 3, stride=s, act="relu6", name="dw")
            y = b.conv2d(y, int(c * width), 1, act="relu6", name="pw")
    with b.scope("head"):
        y = b.dense(b.global_avg_pool(y), num_classes)
    return b.build(y, {"width": width, "image_size": image_size, "num_classes": num_classes})


def fc_autoencoder(*, name: str = "fc_autoencoder", features: int = 640, hidden: int = 128, bottleneck: int = 8,
                   depth: int = 4, description: str = "") -> Net:
    """The anomaly-detection autoencoder: ``depth`` hidden layers each side of the bottleneck, ReLU."""
    b = NetBuilder(name, description)
    y = b.input((1, features))
    for k in range(depth):
        y = b.dense(y, hidden, act="relu", name=f"enc{k + 1}")
    y = b.dense(y, bottleneck, act="relu", name="bottleneck")
    for k in range(depth):
        y = b.dense(y, hidden, act="relu", name=f"dec{k + 1}")
    y = b.dense(y, features, name="out")
    return b.build(y, {"features": features, "hidden": hidden, "bottleneck": bottleneck, "depth": depth})
