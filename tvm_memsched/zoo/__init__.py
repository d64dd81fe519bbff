"""The benchmark zoo: network definitions and their conversion to Graph, .tflite and Relax.

Networks are written in a tiny layer IR (:mod:`.netdef`) by one module per family:
NAS cell networks from DARTS-format genotypes (:mod:`.nas`: NASNet-A, AmoebaNet-A,
DARTS V2), RandWire (:mod:`.randwire`), HRNet (:mod:`.hrnet`), a SwiftNet-like
net (:mod:`.swiftnet`) and regular references (:mod:`.classic`: ResNet,
MobileNetV2, DenseNet-BC-like). Converters: :mod:`.to_graph` (the core
:class:`~tvm_memsched.core.Graph`), :mod:`.to_tflite` (float32 / int8 flatbuffers)
and :mod:`.to_relax` (a TVM Relax IRModule). :mod:`.reference` is a numpy
executor that defines what every layer computes.

Importing the zoo needs only numpy and networkx; TVM and the TFLite wheels are
imported by :func:`load` and :func:`tflite` when called.

Example
-------
>>> from tvm_memsched import zoo
>>> name = zoo.default_model()
>>> g = zoo.graph(name)
>>> g.num_ops == zoo.get_net(name).count(), g.inputs
(True, ('input',))
>>> sorted(zoo.names("small"))[:3]
['amoebanet_a_cifar_tiny', 'darts_v2_cifar_tiny', 'densenet_like']
"""

from __future__ import annotations

import json
import os

from .netdef import Layer, Net, NetBuilder
from .registry import DEFAULT_MODEL, default_model, get_net, info, names
from ..core.files import atomic_write

__all__ = ["Layer", "Net", "NetBuilder", "names", "info", "get_net", "default_model", "DEFAULT_MODEL",
           "graph", "graph_json", "tflite", "load"]


def graph(name: str, dtype: str = "float32"):
    """The core :class:`~tvm_memsched.core.Graph` of zoo model ``name`` (activations of ``dtype``)."""
    from .to_graph import net_to_graph

    return net_to_graph(get_net(name), dtype)


def graph_json(name: str, dtype: str = "float32", indent: int | None = None) -> str:
    """The graph JSON text of zoo model ``name`` (the format of :func:`tvm_memsched.core.graph_from_dict`)."""
    from ..core.io import graph_to_dict

    return json.dumps(graph_to_dict(graph(name, dtype)), indent=indent)


def tflite(name: str, dtype: str = "float32", path: str | os.PathLike | None = None, *, seed: int = 0) -> bytes:
    """The ``.tflite`` bytes of zoo model ``name`` (``dtype``: float32, float16, hybrid or int8; see
    :func:`.to_tflite.net_to_tflite`); also written to ``path`` if given."""
    from .to_tflite import net_to_tflite

    buf = net_to_tflite(get_net(name), dtype, seed=seed)
    if path is not None:
        atomic_write(path, buf)
    return buf


def load(name: str, *, params_as_inputs: bool = False, seed: int = 0):
    """The Relax IRModule of zoo model ``name``; ``main`` takes the NCHW float32 input.

    With ``params_as_inputs=True`` the weights become parameters of ``main``
    after the input; :func:`tvm_memsched.zoo.to_relax.relax_params` gives the
    arrays in that order.
    """
    from .to_relax import net_to_relax

    return net_to_relax(get_net(name), params_as_inputs=params_as_inputs, seed=seed)
