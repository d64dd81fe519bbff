"""Public CNN architectures as PyTorch modules, written out as ``.onnx`` and ``.pt2`` files.

What a new user brings: a model exported from PyTorch. torchvision is not a
dependency, so the architectures are written here by hand after their papers
(random weights, BatchNorm in eval mode with random statistics), at any width
and resolution:

* :func:`squeezenet` - SqueezeNet 1.1 (Fire modules: squeeze 1x1, expand 1x1 and
  3x3, concatenated);
* :func:`inception_v1` - GoogLeNet / Inception v1 (four-branch Inception
  modules, convolutions with BatchNorm, 3x3 in place of 5x5 as in torchvision);
* :func:`densenet` - DenseNet-BC (BN-ReLU-Conv dense layers concatenated onto
  the block's input, transitions with average pooling);
* :func:`shufflenet_v2` - ShuffleNet v2 (channel split, depthwise branches,
  channel shuffle by reshape-transpose-reshape);
* :func:`mobilenet_v2` - MobileNetV2 as torchvision writes it (inverted
  residuals: 1x1 expansion, 3x3 depthwise, 1x1 linear projection, each with
  BatchNorm, ReLU6, residual adds; channel counts rounded to multiples of 8).

``width`` scales every channel count (1.0: the paper's network) and
``image_size`` the input; tests use small ones. :func:`export_onnx` writes the
legacy TorchScript-based ONNX export (the classic ``Conv`` /
``BatchNormalization`` / ``Concat`` / pooling / ``Gemm`` / ``Reshape`` /
``Transpose`` graphs public model zoos hold); :func:`export_pt2` saves
``torch.export.export`` programs with ``torch.export.save``.

Example
-------
>>> import io
>>> net = squeezenet(width=0.25, num_classes=10)
>>> f = io.BytesIO()
>>> export_onnx(net, f, image_size=32)
>>> f.getvalue()[:2] != b""
True
"""

from __future__ import annotations

import io
import warnings

import torch
from torch import nn
from ..core.files import atomic_write

__all__ = ["squeezenet", "inception_v1", "densenet", "shufflenet_v2", "mobilenet_v2", "NETWORKS", "export_onnx",
           "export_pt2", "example_input"]


def _c(n: float, width: float) -> int:
    return max(4, int(round(n * width)))


def _randomize(net: nn.Module, seed: int) -> nn.Module:
    """Random BatchNorm statistics (a trained network's are not 0/1) and eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return net.eval()


class _ConvBN(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1, groups=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        super().__init__(*(layers + ([nn.ReLU()] if relu else [])))


# ------------------------------------------------------------------ SqueezeNet
class _Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)


def squeezenet(width: float = 1.0, num_classes: int = 1000, seed: int = 0) -> nn.Module:
    """SqueezeNet 1.1 (Iandola et al. 2016)."""
    torch.manual_seed(seed)
    c = lambda n: _c(n, width)  # noqa: E731
    fires = [(64, 16, 64), (128, 16, 64), None, (128, 32, 128), (256, 32, 128), None,
             (256, 48, 192), (384, 48, 192), (384, 64, 256), (512, 64, 256)]
    layers = [nn.Conv2d(3, c(64), 3, stride=2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True)]
    for f in fires:
        layers.append(nn.MaxPool2d(3, 2, ceil_mode=True) if f is None else _Fire(c(f[0]), c(f[1]), c(f[2])))
    layers += [nn.Conv2d(c(512), num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return _randomize(nn.Sequential(*layers), seed)


# ---------------------------------------------------------------- Inception v1
class _Inception(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
        super().__init__()
        self.b1 = _ConvBN(cin, c1, 1)
        self.b2 = nn.Sequential(_ConvBN(cin, c3r, 1), _ConvBN(c3r, c3, 3))
        self.b3 = nn.Sequential(_ConvBN(cin, c5r, 1), _ConvBN(c5r, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), _ConvBN(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


def inception_v1(width: float = 1.0, num_classes: int = 1000, seed: int = 0, modules: int = 9) -> nn.Module:
    """GoogLeNet / Inception v1 (Szegedy et al. 2015), torchvision's layout without the auxiliary heads;
    ``modules`` < 9 keeps only the first Inception modules (3a, 3b, 4a...)."""
    torch.manual_seed(seed)
    c = lambda n: _c(n, width)  # noqa: E731
    cfg = {"3a": (192, 64, 96, 128, 16, 32, 32), "3b": (256, 128, 128, 192, 32, 96, 64), "pool3": None,
           "4a": (480, 192, 96, 208, 16, 48, 64), "4b": (512, 160, 112, 224, 24, 64, 64),
           "4c": (512, 128, 128, 256, 24, 64, 64), "4d": (512, 112, 144, 288, 32, 64, 64),
           "4e": (528, 256, 160, 320, 32, 128, 128), "pool4": None,
           "5a": (832, 256, 160, 320, 32, 128, 128), "5b": (832, 384, 192, 384, 48, 128, 128)}
    layers = [_ConvBN(3, c(64), 7, stride=2), nn.MaxPool2d(3, 2, ceil_mode=True), _ConvBN(c(64), c(64), 1),
              _ConvBN(c(64), c(192), 3), nn.MaxPool2d(3, 2, ceil_mode=True)]
    cin, kept = c(192), 0
    for v in cfg.values():
        if v is None:
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            continue
        if kept == modules:
            break
        layers.append(_Inception(cin, *[c(n) for n in v[1:]]))
        cin, kept = c(v[1]) + c(v[3]) + c(v[5]) + c(v[6]), kept + 1
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return _randomize(nn.Sequential(*layers), seed)


# -------------------------------------------------------------------- DenseNet
class _DenseLayer(nn.Module):
    def __init__(self, cin, growth, bottleneck=4):
        super().__init__()
        mid = bottleneck * growth
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, mid, 1, bias=False),
                                  nn.BatchNorm2d(mid), nn.ReLU(), nn.Conv2d(mid, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet(width: float = 1.0, num_classes: int = 1000, seed: int = 0, blocks=(6, 12, 24, 16),
             growth: int = 32) -> nn.Module:
    """DenseNet-BC (Huang et al. 2017); the defaults are DenseNet-121."""
    torch.manual_seed(seed)
    k = _c(growth, width)
    ch = 2 * k
    layers = [nn.Conv2d(3, ch, 7, 2, 3, bias=False), nn.BatchNorm2d(ch), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    for i, n in enumerate(blocks):
        for _ in range(n):
            layers.append(_DenseLayer(ch, k))
            ch += k
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.Conv2d(ch, ch // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
            ch //= 2
    layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, num_classes)]
    return _randomize(nn.Sequential(*layers), seed)


# --------------------------------------------------------------- ShuffleNet v2
def _shuffle(x, groups: int = 2):
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class _ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        bin_ = cin if stride > 1 else cin // 2
        self.branch = nn.Sequential(_ConvBN(bin_, half, 1), _ConvBN(half, half, 3, stride, groups=half, relu=False),
                                    _ConvBN(half, half, 1))
        self.short = nn.Sequential(_ConvBN(cin, cin, 3, stride, groups=cin, relu=False), _ConvBN(cin, half, 1)) \
            if stride > 1 else None

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.branch(b)], 1)
        else:
            out = torch.cat([self.short(x), self.branch(x)], 1)
        return _shuffle(out)


def shufflenet_v2(width: float = 1.0, num_classes: int = 1000, seed: int = 0, repeats=(4, 8, 4)) -> nn.Module:
    """ShuffleNet v2 1.0x (Ma et al. 2018); ``repeats``: units per stage."""
    torch.manual_seed(seed)
    c = lambda n: 2 * _c(n / 2, width)  # noqa: E731  (even channel counts for the split)
    stages = [(c(ch), n) for ch, n in zip((116, 232, 464), repeats)]
    ch = c(24)
    layers = [_ConvBN(3, ch, 3, 2), nn.MaxPool2d(3, 2, 1)]
    for cout, n in stages:
        for i in range(n):
            layers.append(_ShuffleUnit(ch, cout, 2 if i == 0 else 1))
            ch = cout
    layers += [_ConvBN(ch, c(1024), 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c(1024), num_classes)]
    return _randomize(nn.Sequential(*layers), seed)


#: name -> constructor
# ----------------------------------------------------------------- MobileNetV2
def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of 8, never more than 10% down."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class _ConvBNReLU6(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = int(round(cin * expand))
        self.residual = stride == 1 and cin == cout
        layers = [_ConvBNReLU6(cin, hidden, 1)] if expand != 1 else []
        layers += [_ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


def mobilenet_v2(width: float = 1.0, num_classes: int = 1000, seed: int = 0) -> nn.Module:
    """MobileNetV2 (Sandler et al. 2018) as torchvision's ``mobilenet_v2(width_mult=width)``."""
    torch.manual_seed(seed)
    setting = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
               (6, 320, 1, 1)]
    cin = _divisible(32 * width)
    last = _divisible(1280 * max(1.0, width))
    layers = [_ConvBNReLU6(3, cin, stride=2)]
    for t, c, n, s in setting:
        cout = _divisible(c * width)
        for i in range(n):
            layers.append(_InvertedResidual(cin, cout, s if i == 0 else 1, t))
            cin = cout
    layers += [_ConvBNReLU6(cin, last, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
               nn.Linear(last, num_classes)]
    return _randomize(nn.Sequential(*layers), seed)


NETWORKS = {"squeezenet": squeezenet, "inception_v1": inception_v1, "densenet": densenet,
            "shufflenet_v2": shufflenet_v2, "mobilenet_v2": mobilenet_v2}


def example_input(image_size: int = 224, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """A random NCHW image batch."""
    return torch.randn(batch, 3, image_size, image_size, generator=torch.Generator().manual_seed(seed))


def export_onnx(net: nn.Module, f, image_size: int = 224, *, opset: int = 17, dynamic_batch: bool = False) -> None:
    """Write ``net`` as ONNX to ``f`` (a path or a binary file) with the TorchScript-based exporter; input
    ``input``, output ``output``; ``dynamic_batch`` leaves the batch dimension symbolic."""
    axes = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (example_input(image_size),), f, input_names=["input"], output_names=["output"],
                          opset_version=opset, dynamic_axes=axes, dynamo=False)


def export_pt2(net: nn.Module, f, image_size: int = 224, *, dynamic_batch: bool = False) -> None:
    """Save ``torch.export.export(net, ...)`` to ``f`` (a path or a binary file) with ``torch.export.save``;
    ``dynamic_batch`` exports the batch dimension as a ``torch.export.Dim``."""
    x = example_input(image_size, batch=2 if dynamic_batch else 1)
    shapes = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(net, (x,), dynamic_shapes=shapes)
        buf = io.BytesIO()
        torch.export.save(ep, buf)
    if hasattr(f, "write"):
        f.write(buf.getvalue())
    else:
        atomic_write(f, buf.getvalue())
