"""The zoo's model registry: names, descriptions, configurations and size classes.

Size classes:

* ``"small"`` - a few hundred layers at most and a few MB of activations; cheap
  enough to compile with TVM and run in LiteRT/TFLM inside unit tests (the
  ``*_tiny`` variants exist for that);
* ``"medium"`` - the full CIFAR-10 NAS networks (20 cells, ~800 layers);
* ``"large"`` - the ImageNet-size networks (224x224 inputs).

Example
-------
>>> "darts_v2_cifar" in names(), info("darts_v2_cifar")["size"]
(True, 'medium')
>>> get_net(default_model()).name
'swiftnet_like'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from ..core.errors import UnsupportedError
from .netdef import Net


class UnknownModelError(UnsupportedError, KeyError):
    """No zoo model has this name (a bad-input error: the CLI exits with code 2)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


__all__ = ["UnknownModelError", "ModelSpec", "names", "info", "get_net", "default_model", "DEFAULT_MODEL", "SIZES"]

SIZES = ("small", "medium", "large")
DEFAULT_MODEL = "swiftnet_like"


@dataclass(frozen=True)
class ModelSpec:
    """How to build one zoo model, and what to say about it."""

    name: str
    family: str
    size: str
    dataset: str
    input_shape: tuple
    description: str
    build: Callable[[], Net] = field(repr=False, compare=False)
    config: dict = field(default_factory=dict, compare=False)


_SPECS: dict[str, ModelSpec] = {}


def _register(name, family, size, dataset, image_size, description, build, config, input_shape=None):
    if size not in SIZES:
        raise ValueError(size)
    shape = tuple(input_shape) if input_shape is not None else (1, 3, image_size, image_size)
    _SPECS[name] = ModelSpec(name, family, size, dataset, shape, description, build, dict(config))


def _nas_models():
    from . import nas

    genotypes = nas.load_genotypes()
    hmcos = nas.hmcos_configs()
    families = (("nasnet_a", "NASNet", "NASNet", "NASNet-A (Zoph et al., 2018)"),
                ("amoebanet_a", "AmoebaNet", "AmoebaNet", "AmoebaNet-A (Real et al., 2019)"),
                ("darts_v2", "DARTS_V2", "DARTS", "DARTS V2 (Liu et al., 2019)"))
    for prefix, gkey, ckey, title in families:
        for ds, suffix, size, img in (("cifar10", "cifar", "medium", 32), ("imagenet", "imagenet", "large", 224)):
            n, f = hmcos[ds][ckey]
            name = f"{prefix}_{suffix}"
            desc = (f"{title} cell network, {ds} configuration used by HMCOS: {n} cells per stage "
                    f"({3 * n + 2} cells), {f} initial filters, DARTS-style cells and stem.")
            cfg = {"genotype": gkey, "dataset": ds, "cells_per_stage": n, "filters": f}
            _register(name, prefix, size, ds, img, desc,
                      lambda g=genotypes[gkey], name=name, ds=ds, n=n, f=f, desc=desc: nas.nas_network(
                          g, name=name, dataset=ds, cells_per_stage=n, filters=f, description=desc), cfg)
        name = f"{prefix}_cifar_tiny"
        desc = (f"{title} cell network reduced for fast tests: CIFAR-10 input, 1 cell per stage "
                f"(5 cells), 8 initial filters.")
        _register(name, prefix, "small", "cifar10", 32, desc,
                  lambda g=genotypes[gkey], name=name, desc=desc: nas.nas_network(
                      g, name=name, dataset="cifar10", cells_per_stage=1, filters=8, description=desc),
                  {"genotype": gkey, "dataset": "cifar10", "cells_per_stage": 1, "filters": 8})


def _randwire_models():
    from . import randwire

    for name, seeds in randwire.RANDWIRE_SEEDS.items():
        desc = (f"RandWire WS(N=32, K=4, P=0.75), small-computation regime (C=78, 224x224) as in "
                f"Xie et al. 2019 and HMCOS; stage graph seeds {seeds}.")
        _register(name, "randwire", "large", "imagenet", 224, desc,
                  lambda name=name, seeds=seeds, desc=desc: randwire.randwire_network(
                      name, seeds, description=desc),
                  {"nodes": 32, "k": 4, "p": 0.75, "channels": 78, "seeds": list(seeds)})
    seeds = randwire.RANDWIRE_TINY_SEEDS
    desc = f"RandWire reduced for fast tests: WS(N=8, K=4, P=0.75), C=16, 64x64 input, seeds {seeds}."
    _register("randwire_tiny", "randwire", "small", "imagenet", 64, desc,
              lambda: randwire.randwire_network("randwire_tiny", seeds, nodes=8, channels=16, image_size=64,
                                                final_channels=128, num_classes=10, description=desc),
              {"nodes": 8, "k": 4, "p": 0.75, "channels": 16, "seeds": list(seeds)})


def _hrnet_models():
    from . import hrnet

    texts = {
        "hrnet_w18_small_v1": ("large", "HRNet-W18-small-v1 classification network (public cls_hrnet config: "
                               "stage modules 1/1/1, 2 basic blocks per branch, widths 16/32/64/128)."),
        "hrnet_w18_small_v2": ("large", "HRNet-W18-small-v2 classification network (public cls_hrnet config: "
                               "stage modules 1/3/2, 2 basic blocks per branch, widths 18/36/72/144)."),
        "hrnet_tiny": ("small", "HRNet reduced for fast tests: 64x64 input, widths 4/8/16/32, one module "
                                "and one block per stage."),
    }
    for name, (size, desc) in texts.items():
        cfg = hrnet.HRNET_CONFIGS[name]
        _register(name, "hrnet", size, "imagenet", cfg["image_size"], desc,
                  lambda name=name, cfg=cfg, desc=desc: hrnet.hrnet_network(name, cfg, desc), cfg)


def _other_models():
    from . import classic, swiftnet

    desc = ("SwiftNet-like network (like, not the published SwiftNet): 96x96x3 Visual-Wake-Words input, "
            "3 irregular cells of separable convs joined by concatenations, about 60 layers.")
    _register("swiftnet_like", "swiftnet", "small", "vww", 96, desc,
              lambda: swiftnet.swiftnet_like(description=desc), {"image_size": 96, "cells": 3})
    desc = "ResNet-20 for CIFAR-10 (3 stages of 3 basic blocks, 16/32/64 channels, 1x1 projection shortcuts)."
    _register("resnet", "resnet", "small", "cifar10", 32, desc,
              lambda: classic.resnet_cifar(20, name="resnet", description=desc), {"depth": 20})
    desc = "MobileNetV2, width 0.35, 96x96 input, 1000 classes."
    _register("mobilenet_v2", "mobilenet", "small", "imagenet", 96, desc,
              lambda: classic.mobilenet_v2(0.35, 96, name="mobilenet_v2", description=desc),
              {"width": 0.35, "image_size": 96})
    desc = ("DenseNet-BC-like network for CIFAR-10 (depth 40, growth 12: 3 dense blocks of 6 bottleneck "
            "layers with growing concatenations; pre-activation BN folded).")
    _register("densenet_like", "densenet", "small", "cifar10", 32, desc,
              lambda: classic.densenet_bc(40, 12, name="densenet_like", description=desc),
              {"depth": 40, "growth": 12})


def _tinyml_models():
    from . import classic, tinyml

    desc = ("DS-CNN keyword spotting (MLPerf Tiny KWS, small): 49x10 MFCC input, 10x4/2 convolution to 64 "
            "channels, 4 depthwise-separable blocks, average pool, 12 classes.")
    _register("ds_cnn", "tinyml", "small", "speech_commands", 0, desc, lambda: tinyml.ds_cnn(description=desc),
              {"filters": 64, "blocks": 4}, input_shape=(1, 1, 49, 10))
    desc = "MobileNetV1, width 0.25, 96x96 input, 2 classes (MLPerf Tiny visual wake words)."
    _register("mobilenet_v1_025", "tinyml", "small", "vww", 96, desc,
              lambda: tinyml.mobilenet_v1(0.25, 96, name="mobilenet_v1_025", description=desc),
              {"width": 0.25, "image_size": 96})
    desc = ("ResNet-8 for CIFAR-10 (MLPerf Tiny image classification: 16/32/64 channels, one basic block per "
            "stage, 1x1 projection shortcuts).")
    _register("resnet8", "tinyml", "small", "cifar10", 32, desc,
              lambda: classic.resnet_cifar(8, name="resnet8", description=desc), {"depth": 8})
    desc = ("Fully connected autoencoder for anomaly detection (MLPerf Tiny AD): 640-128-128-128-128-8-128-128-"
            "128-128-640 with ReLU.")
    _register("fc_autoencoder", "tinyml", "small", "toyadmos", 0, desc,
              lambda: tinyml.fc_autoencoder(description=desc), {"features": 640, "hidden": 128, "bottleneck": 8},
              input_shape=(1, 640))


def _specs() -> dict[str, ModelSpec]:
    """The registry, filled on first use (the family modules are imported then)."""
    if not _SPECS:
        _nas_models()
        _randwire_models()
        _hrnet_models()
        _other_models()
        _tinyml_models()
    return _SPECS


def names(size: str | None = None) -> list[str]:
    """Names of all zoo models, or of the models of one size class."""
    if size is not None and size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}")
    return [n for n, s in _specs().items() if size is None or s.size == size]


def _spec(name: str) -> ModelSpec:
    try:
        return _specs()[name]
    except KeyError:
        raise UnknownModelError(f"unknown zoo model {name!r}; known: {', '.join(names())}") from None


def info(name: str) -> dict:
    """Description, family, dataset, input shape, size class and configuration of a model (no building)."""
    s = _spec(name)
    return {"name": s.name, "family": s.family, "size": s.size, "dataset": s.dataset,
            "input_shape": s.input_shape, "description": s.description, "config": dict(s.config)}


@lru_cache(maxsize=None)
def get_net(name: str) -> Net:
    """The :class:`Net` of a zoo model (built once, then cached; treat it as read-only)."""
    return _spec(name).build()


def default_model() -> str:
    """The built-in default model for demos: an irregular, small network."""
    return DEFAULT_MODEL
