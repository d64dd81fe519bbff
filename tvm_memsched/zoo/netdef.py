"""A tiny layer-graph IR for the benchmark zoo.

A :class:`Net` is a list of :class:`Layer` objects in *program order* (the order
the network definition emits them). Every layer has a name, an op kind, the names
of the layers it reads, free-form ``attrs`` and the shape of its single output.
Shapes are NCHW with batch 1 (``(1, C, H, W)``); after global pooling they are
``(1, C)``. The first layer is the network input (op ``"input"``): an image
``(1, C, H, W)`` or a feature vector ``(1, F)`` (fully connected networks).

Batch norm is always folded into the preceding convolution, so a convolution
"with bias" stands for conv + BN. Skip connections never create a layer: an
identity is simply the same layer name used twice.

:class:`NetBuilder` computes shapes while a network is written down and returns
layer names, so definitions read like the usual framework code::

    >>> b = NetBuilder("toy")
    >>> x = b.input((1, 3, 8, 8))
    >>> y = b.conv2d(x, 4, 3, stride=2, act="relu")
    >>> z = b.concat([y, b.max_pool2d(y, 3, stride=1)])
    >>> net = b.build(b.dense(b.global_avg_pool(z), 10))
    >>> [(l.name, l.op, l.shape) for l in net.layers]  # doctest: +NORMALIZE_WHITESPACE
    [('input', 'input', (1, 3, 8, 8)), ('conv', 'conv2d', (1, 4, 4, 4)),
     ('maxpool', 'max_pool2d', (1, 4, 4, 4)), ('concat', 'concat', (1, 8, 4, 4)),
     ('gap', 'global_avg_pool', (1, 8)), ('fc', 'dense', (1, 10))]
    >>> net.macs("conv"), net.total_macs()
    (1728, 1808)

Padding follows TensorFlow's ``SAME`` rule by default (output ``ceil(n / stride)``,
the odd pixel of padding goes to the bottom/right), so every layer maps onto one
TFLite operator with ``SAME`` or ``VALID`` padding; the explicit pads are stored
in ``attrs["pads"]`` as ``(top, left, bottom, right)`` for Relax and the numpy
reference.

Attributes by op kind (pairs are ``(H, W)``):

=====================  =====================================================================
``conv2d``             ``out_channels``, ``kernel``, ``stride``, ``dilation``, ``pads``,
                       ``groups`` (1), ``bias``, ``act`` (``None``, ``"relu"``, ``"relu6"``)
``depthwise_conv2d``   ``kernel``, ``stride``, ``dilation``, ``pads``, ``groups`` (= C), ``bias``, ``act``
``avg_pool2d``         ``kernel``, ``stride``, ``dilation`` (1, 1), ``pads``, ``count_include_pad`` (False)
``max_pool2d``         ``kernel``, ``stride``, ``dilation`` (1, 1), ``pads``
``add``                ``act`` (applied to the sum)
``concat``             ``axis`` (1)
``dense``              ``units``, ``bias``, ``act``
``strided_slice``      ``begin``, ``end``, ``strides`` (NCHW; the batch axis stays whole)
``upsample_nearest``   ``factor``
other                  none (``input``, ``relu``, ``relu6``, ``global_avg_pool``)
=====================  =====================================================================
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

__all__ = ["Layer", "Net", "NetBuilder", "OPS", "PARAM_OPS", "same_pads", "layer_param_shapes",
           "layer_macs"]

#: Every op kind the IR knows, with the number of inputs it takes (``None`` = one or more).
OPS = {
    "input": 0,
    "conv2d": 1,
    "depthwise_conv2d": 1,
    "relu": 1,
    "relu6": 1,
    "add": 2,
    "concat": None,
    "avg_pool2d": 1,
    "max_pool2d": 1,
    "global_avg_pool": 1,
    "dense": 1,
    "strided_slice": 1,
    "upsample_nearest": 1,
}

#: Op kinds that own weights.
PARAM_OPS = ("conv2d", "depthwise_conv2d", "dense")

_ACTS = (None, "relu", "relu6")


@dataclass(frozen=True)
class Layer:
    """One layer: ``op`` applied to the outputs of the layers named in ``inputs``.

    ``attrs`` holds the op's configuration (kernel, stride, pads, ...); ``shape``
    is the shape of its output. Treat both as read-only.
    """

    name: str
    op: str
    inputs: tuple = ()
    attrs: Mapping = field(default_factory=dict, hash=False)
    shape: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def scope(self) -> str:
        """The scope path of the layer (its name without the last component), e.g. ``"cell3/node2"``."""
        return self.name.rpartition("/")[0]

    @property
    def numel(self) -> int:
        """Number of elements of the output."""
        return math.prod(self.shape)


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair, got {v!r}")
    return v


def same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int, int]:
    """TensorFlow ``SAME`` padding along one axis: ``(pad_before, pad_after, out_size)``.

    >>> same_pads(32, 3, 2)   # the extra row goes after
    (0, 1, 16)
    >>> same_pads(32, 3, 1, dilation=2)
    (2, 2, 32)
    """
    eff = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2, out


def _resolve_padding(in_hw, kernel, stride, dilation, padding) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """Return explicit pads ``(top, left, bottom, right)`` and the output ``(H, W)``."""
    (h, w), (kh, kw), (sh, sw), (dh, dw) = in_hw, kernel, stride, dilation
    if padding == "same":
        t, b, oh = same_pads(h, kh, sh, dh)
        l, r, ow = same_pads(w, kw, sw, dw)
        return (t, l, b, r), (oh, ow)
    if padding == "valid":
        pads = (0, 0, 0, 0)
    elif isinstance(padding, int):
        pads = (padding,) * 4
    else:
        p = tuple(int(a) for a in padding)
        if len(p) == 2:
            pads = (p[0], p[1], p[0], p[1])
        elif len(p) == 4:
            pads = p
        else:
            raise ValueError(f"padding must be 'same', 'valid', an int, a pair or 4 values, got {padding!r}")
    t, l, b, r = pads
    oh = (h + t + b - ((kh - 1) * dh + 1)) // sh + 1
    ow = (w + l + r - ((kw - 1) * dw + 1)) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"window {kernel} does not fit the {in_hw} input with pads {pads}")
    return pads, (oh, ow)


def layer_param_shapes(layer: Layer, in_shape: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """Shapes of a layer's parameters, keyed ``"weight"`` / ``"bias"`` (empty if it has none).

    Convolution weights are OIHW, depthwise weights ``(C, 1, kh, kw)``, dense
    weights ``(units, in_features)``.
    """
    a = layer.attrs
    if layer.op == "conv2d":
        kh, kw = a["kernel"]
        shapes = {"weight": (a["out_channels"], in_shape[1], kh, kw)}
        out = a["out_channels"]
    elif layer.op == "depthwise_conv2d":
        kh, kw = a["kernel"]
        shapes = {"weight": (in_shape[1], 1, kh, kw)}
        out = in_shape[1]
    elif layer.op == "dense":
        shapes = {"weight": (a["units"], in_shape[1])}
        out = a["units"]
    else:
        return {}
    if a.get("bias", False):
        shapes["bias"] = (out,)
    return shapes


def layer_macs(layer: Layer, in_shape: Sequence[int]) -> int:
    """Multiply-accumulates of a convolution, depthwise convolution or dense layer (0 for other ops)."""
    if layer.op == "conv2d":
        kh, kw = layer.attrs["kernel"]
        return layer.numel * in_shape[1] * kh * kw
    if layer.op == "depthwise_conv2d":
        kh, kw = layer.attrs["kernel"]
        return layer.numel * kh * kw
    if layer.op == "dense":
        return layer.numel * in_shape[1]
    return 0


class Net:
    """A network: layers in program order, one input layer, one output layer.

    Parameters
    ----------
    name : str
    layers : sequence of Layer
        In program order; the first is the input layer (op ``"input"``). Every
        layer may only read layers listed before it.
    input, output : str
        Names of the input layer and of the layer whose output is the result.
    description : str
    config : mapping, optional
        The configuration the network was built from (for reports).

    Raises
    ------
    ValueError
        On duplicate names, unknown ops, reads of unknown or later layers, a
        missing input/output, or layers whose result nobody reads.
    """

    def __init__(self, name: str, layers: Iterable[Layer], input: str, output: str,
                 description: str = "", config: Mapping | None = None):
        self.name = str(name)
        self.layers: tuple[Layer, ...] = tuple(layers)
        self.input = input
        self.output = output
        self.description = description
        self.config = dict(config or {})
        index: dict[str, int] = {}
        for i, layer in enumerate(self.layers):
            if layer.op not in OPS:
                raise ValueError(f"layer '{layer.name}' has unknown op '{layer.op}'")
            if layer.name in index:
                raise ValueError(f"layer name '{layer.name}' is used twice")
            for x in layer.inputs:
                if x not in index:
                    raise ValueError(f"layer '{layer.name}' reads '{x}', which is not defined before it")
            n_in = OPS[layer.op]
            if (n_in is None and not layer.inputs) or (n_in is not None and len(layer.inputs) != n_in):
                raise ValueError(f"layer '{layer.name}' ({layer.op}) has {len(layer.inputs)} input(s)")
            index[layer.name] = i
        self._index = index
        if input not in index or self.layers[index[input]].op != "input":
            raise ValueError(f"'{input}' is not an input layer of net '{name}'")
        if [l.name for l in self.layers if l.op == "input"] != [input]:
            raise ValueError(f"net '{name}' must have exactly one input layer")
        if output not in index:
            raise ValueError(f"output '{output}' is not a layer of net '{name}'")
        read = {x for l in self.layers for x in l.inputs}
        dead = [l.name for l in self.layers if l.name not in read and l.name != output]
        if dead:
            raise ValueError(f"net '{name}' has layers nobody reads: {', '.join(dead[:5])}")
        self._weights_cache: dict[int, dict] = {}

    # ------------------------------------------------------------------ access
    def __repr__(self) -> str:
        return (f"Net({self.name!r}, layers={len(self.layers)}, input={self.input_shape}, "
                f"output={self.output_shape})")

    def __len__(self) -> int:
        return len(self.layers)

    def layer(self, name: str) -> Layer:
        """The layer called ``name``."""
        return self.layers[self._index[name]]

    def __contains__(self, name) -> bool:
        return name in self._index

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.layer(self.input).shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.layer(self.output).shape

    def in_shape(self, layer: Layer | str) -> tuple[int, ...]:
        """Shape of the (first) input of ``layer``."""
        layer = self.layer(layer) if isinstance(layer, str) else layer
        return self.layer(layer.inputs[0]).shape if layer.inputs else ()

    def consumers(self) -> dict[str, list[str]]:
        """Layer name -> names of the layers that read it (in program order, without repeats)."""
        out: dict[str, list[str]] = {l.name: [] for l in self.layers}
        for l in self.layers:
            for x in dict.fromkeys(l.inputs):
                out[x].append(l.name)
        return out

    def count(self, op: str | None = None) -> int:
        """Number of layers (excluding the input layer), or of layers of kind ``op``."""
        if op is None:
            return sum(1 for l in self.layers if l.op != "input")
        return sum(1 for l in self.layers if l.op == op)

    # --------------------------------------------------------------- costs
    def param_shapes(self, layer: Layer | str) -> dict[str, tuple[int, ...]]:
        """Parameter shapes of one layer, see :func:`layer_param_shapes`."""
        layer = self.layer(layer) if isinstance(layer, str) else layer
        return layer_param_shapes(layer, self.in_shape(layer))

    def macs(self, layer: Layer | str) -> int:
        """Multiply-accumulates of one layer, see :func:`layer_macs`."""
        layer = self.layer(layer) if isinstance(layer, str) else layer
        return layer_macs(layer, self.in_shape(layer))

    def total_macs(self) -> int:
        return sum(self.macs(l) for l in self.layers)

    def param_count(self, layer: Layer | str | None = None) -> int:
        """Number of parameters of one layer, or of the whole net."""
        if layer is None:
            return sum(self.param_count(l) for l in self.layers)
        return sum(math.prod(s) for s in self.param_shapes(layer).values())

    def param_bytes(self, layer: Layer | str, dtype: str = "float32") -> int:
        """Bytes of one layer's parameters: 4 per value for float32; for int8, 1 per weight and 4 per (int32) bias."""
        shapes = self.param_shapes(layer)
        if dtype == "float32":
            return 4 * sum(math.prod(s) for s in shapes.values())
        if dtype == "int8":
            return sum(math.prod(s) * (4 if k == "bias" else 1) for k, s in shapes.items())
        raise ValueError(f"dtype must be 'float32' or 'int8', got {dtype!r}")

    def activation_bytes(self, itemsize: int = 4) -> int:
        """Sum of the sizes of all layer outputs, the input included (the footprint if nothing were freed)."""
        return itemsize * sum(l.numel for l in self.layers)

    def summary(self) -> dict:
        """Counts for reports: layers, ops per kind, MACs, parameters, activation bytes."""
        kinds: dict[str, int] = {}
        for l in self.layers:
            if l.op != "input":
                kinds[l.op] = kinds.get(l.op, 0) + 1
        return {"name": self.name, "layers": self.count(), "ops": kinds,
                "input_shape": self.input_shape, "output_shape": self.output_shape,
                "macs": self.total_macs(), "params": self.param_count(),
                "activation_bytes_float32": self.activation_bytes(4)}

    # ------------------------------------------------------------- weights
    def weights(self, seed: int = 0) -> dict:
        """Deterministic float32 weights, keyed ``"<layer>.weight"`` / ``"<layer>.bias"``.

        Batch norm is emulated and folded: see :func:`tvm_memsched.zoo.weights.make_weights`.
        The result is cached per seed; the arrays are read-only.
        """
        if seed not in self._weights_cache:
            from .weights import make_weights
            w = make_weights(self, seed=seed)
            for a in w.values():
                a.setflags(write=False)
            self._weights_cache[seed] = w
        return dict(self._weights_cache[seed])


def _name_ok(name: str) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ValueError(f"bad layer name {name!r}: use letters, digits, '_', '.', '-'")
    return name


class NetBuilder:
    """Write a :class:`Net` layer by layer; every method returns the new layer's name.

    Names are ``scope/.../local``; ``local`` defaults to a short op name and gets a
    ``_1``, ``_2``... suffix when taken. ``with b.scope("cell3"):`` nests names.
    """

    def __init__(self, name: str, description: str = ""):
        self.name = name
        self.description = description
        self._layers: list[Layer] = []
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._scope: list[str] = []
        self._input: str | None = None

    # ----------------------------------------------------------- plumbing
    @contextmanager
    def scope(self, name: str):
        """Prefix the names of the layers created inside the block with ``name/`` (``name`` may nest: ``a/b``)."""
        for part in name.split("/"):
            _name_ok(part)
        self._scope.append(name)
        try:
            yield self
        finally:
            self._scope.pop()

    def _unique(self, local: str) -> str:
        base = "/".join(self._scope + [_name_ok(local)])
        name, k = base, 0
        while name in self._shapes:
            k += 1
            name = f"{base}_{k}"
        return name

    def _add(self, op: str, inputs: Sequence[str], attrs: dict, shape: Sequence[int],
             name: str | None, default: str) -> str:
        for x in inputs:
            if x not in self._shapes:
                raise ValueError(f"unknown layer '{x}'")
        lname = self._unique(name or default)
        layer = Layer(lname, op, tuple(inputs), attrs, tuple(shape))
        self._layers.append(layer)
        self._shapes[lname] = layer.shape
        return lname

    def shape(self, x: str) -> tuple[int, ...]:
        """Output shape of layer ``x``."""
        return self._shapes[x]

    def channels(self, x: str) -> int:
        return self._shapes[x][1]

    def _spatial(self, x: str, what: str) -> tuple[int, int, int, int]:
        s = self._shapes[x]
        if len(s) != 4:
            raise ValueError(f"{what} needs an NCHW input, '{x}' has shape {s}")
        return s

    # ------------------------------------------------------------- layers
    def input(self, shape: Sequence[int], name: str = "input") -> str:
        """The network input: NCHW or ``(1, features)``, batch 1."""
        if self._input is not None:
            raise ValueError("a net has exactly one input")
        shape = tuple(int(s) for s in shape)
        if len(shape) not in (2, 4) or shape[0] != 1 or min(shape) < 1:
            raise ValueError(f"the input must be NCHW or (1, features) with batch 1, got {shape}")
        self._input = self._add("input", (), {}, shape, name, "input")
        return self._input

    def _window(self, x, kernel, stride, padding, dilation, what):
        n, c, h, w = self._spatial(x, what)
        kernel, stride, dilation = _pair(kernel, "kernel"), _pair(stride, "stride"), _pair(dilation, "dilation")
        pads, (oh, ow) = _resolve_padding((h, w), kernel, stride, dilation, padding)
        attrs = {"kernel": kernel, "stride": stride, "dilation": dilation, "pads": pads}
        return attrs, (oh, ow)

    def conv2d(self, x: str, out_channels: int, kernel, stride=1, padding="same", dilation=1,
               groups: int = 1, bias: bool = True, act: str | None = None, name: str | None = None) -> str:
        """2-D convolution (+ folded batch norm when ``bias``) with an optional fused ``act``.

        ``groups`` may only be 1 here; use :meth:`depthwise_conv2d` for groups == channels.
        """
        if groups == self.channels(x) and groups == out_channels and groups > 1:
            return self.depthwise_conv2d(x, kernel, stride, padding, dilation, bias, act, name)
        if groups != 1:
            raise ValueError("only groups=1 or depthwise (groups == in == out channels) are supported")
        if act not in _ACTS:
            raise ValueError(f"act must be one of {_ACTS}")
        attrs, (oh, ow) = self._window(x, kernel, stride, padding, dilation, "conv2d")
        attrs.update(out_channels=int(out_channels), groups=1, bias=bool(bias), act=act)
        return self._add("conv2d", [x], attrs, (1, out_channels, oh, ow), name, "conv")

    def depthwise_conv2d(self, x: str, kernel, stride=1, padding="same", dilation=1, bias: bool = True,
                         act: str | None = None, name: str | None = None) -> str:
        """Depthwise convolution (groups == channels, multiplier 1); weights ``(C, 1, kh, kw)``."""
        if act not in _ACTS:
            raise ValueError(f"act must be one of {_ACTS}")
        c = self.channels(x)
        attrs, (oh, ow) = self._window(x, kernel, stride, padding, dilation, "depthwise_conv2d")
        attrs.update(groups=c, bias=bool(bias), act=act)
        return self._add("depthwise_conv2d", [x], attrs, (1, c, oh, ow), name, "dwconv")

    def relu(self, x: str, name: str | None = None) -> str:
        return self._add("relu", [x], {}, self._shapes[x], name, "relu")

    def relu6(self, x: str, name: str | None = None) -> str:
        return self._add("relu6", [x], {}, self._shapes[x], name, "relu6")

    def add(self, *xs: str, act: str | None = None, name: str | None = None) -> str:
        """Sum of one or more layers as a chain of binary adds (left to right).

        One input is returned unchanged (an identity, no layer). With ``k`` inputs
        there are ``k - 1`` add layers; the last one applies ``act`` and is named
        ``name`` (the partial sums are ``name_p1``, ``name_p2``...).
        """
        if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
            xs = tuple(xs[0])
        if not xs:
            raise ValueError("add needs at least one input")
        if len(xs) == 1:
            if act is not None:
                raise ValueError("an add of one input cannot apply an activation")
            return xs[0]
        shape = self._shapes[xs[0]]
        for x in xs[1:]:
            if self._shapes[x] != shape:
                raise ValueError(f"add of different shapes: {shape} and {self._shapes[x]} ('{x}')")
        if act not in _ACTS:
            raise ValueError(f"act must be one of {_ACTS}")
        base = name or "add"
        acc = xs[0]
        for i, x in enumerate(xs[1:], start=1):
            last = i == len(xs) - 1
            acc = self._add("add", [acc, x], {"act": act if last else None}, shape,
                            base if last else f"{base}_p{i}", "add")
        return acc

    def concat(self, xs: Sequence[str], name: str | None = None) -> str:
        """Concatenation along channels. One input is returned unchanged (no layer)."""
        xs = list(xs)
        if not xs:
            raise ValueError("concat needs at least one input")
        if len(xs) == 1:
            return xs[0]
        n, _, h, w = self._spatial(xs[0], "concat")
        c = 0
        for x in xs:
            s = self._spatial(x, "concat")
            if (s[0], s[2], s[3]) != (n, h, w):
                raise ValueError(f"concat of different spatial shapes: {self._shapes[xs[0]]} and {s} ('{x}')")
            c += s[1]
        return self._add("concat", xs, {"axis": 1}, (n, c, h, w), name, "concat")

    def avg_pool2d(self, x: str, kernel, stride=None, padding="same", name: str | None = None) -> str:
        """Average pooling; padded positions are excluded from the average (TFLite ``SAME`` behaviour)."""
        attrs, (oh, ow) = self._window(x, kernel, stride if stride is not None else kernel, padding, 1,
                                       "avg_pool2d")
        attrs["count_include_pad"] = False
        return self._add("avg_pool2d", [x], attrs, (1, self.channels(x), oh, ow), name, "avgpool")

    def max_pool2d(self, x: str, kernel, stride=None, padding="same", name: str | None = None) -> str:
        """Max pooling; padded positions never win."""
        attrs, (oh, ow) = self._window(x, kernel, stride if stride is not None else kernel, padding, 1,
                                       "max_pool2d")
        return self._add("max_pool2d", [x], attrs, (1, self.channels(x), oh, ow), name, "maxpool")

    def global_avg_pool(self, x: str, name: str | None = None) -> str:
        """Mean over H and W, flattened to ``(1, C)``."""
        self._spatial(x, "global_avg_pool")
        return self._add("global_avg_pool", [x], {}, (1, self.channels(x)), name, "gap")

    def dense(self, x: str, units: int, bias: bool = True, act: str | None = None,
              name: str | None = None) -> str:
        """Fully connected layer on a ``(1, features)`` input; weights ``(units, features)``."""
        s = self._shapes[x]
        if len(s) != 2:
            raise ValueError(f"dense needs a (1, features) input, '{x}' has shape {s}")
        if act not in _ACTS:
            raise ValueError(f"act must be one of {_ACTS}")
        return self._add("dense", [x], {"units": int(units), "bias": bool(bias), "act": act},
                         (1, int(units)), name, "fc")

    def strided_slice(self, x: str, begin: Sequence[int], end: Sequence[int],
                      strides: Sequence[int] | None = None, name: str | None = None) -> str:
        """``x[:, b1:e1:s1, b2:e2:s2, b3:e3:s3]``.

        ``begin``/``end``/``strides`` have 4 NCHW entries, non-negative and in
        range; the batch axis must stay whole (``0:1:1``).
        """
        shape = self._spatial(x, "strided_slice")
        strides = tuple(strides) if strides is not None else (1, 1, 1, 1)
        begin, end = tuple(int(v) for v in begin), tuple(int(v) for v in end)
        if not (len(begin) == len(end) == len(strides) == 4):
            raise ValueError("strided_slice needs 4 begin/end/stride values (NCHW)")
        if (begin[0], end[0], strides[0]) != (0, 1, 1):
            raise ValueError("strided_slice must keep the batch axis whole (0:1:1)")
        out = []
        for b_, e_, s_, n_ in zip(begin, end, strides, shape):
            if not (0 <= b_ < e_ <= n_ and s_ >= 1):
                raise ValueError(f"bad slice {b_}:{e_}:{s_} of an axis of size {n_}")
            out.append(-(-(e_ - b_) // s_))
        return self._add("strided_slice", [x], {"begin": begin, "end": end, "strides": tuple(strides)},
                         out, name, "slice")

    def upsample_nearest(self, x: str, factor: int, name: str | None = None) -> str:
        """Nearest-neighbour upsampling by an integer factor (each pixel becomes a ``factor`` x ``factor`` block)."""
        n, c, h, w = self._spatial(x, "upsample_nearest")
        factor = int(factor)
        if factor < 1:
            raise ValueError("the upsampling factor must be >= 1")
        return self._add("upsample_nearest", [x], {"factor": factor}, (n, c, h * factor, w * factor),
                         name, "upsample")

    # -------------------------------------------------------------- finish
    def build(self, output: str | None = None, config: Mapping | None = None) -> Net:
        """The finished :class:`Net`; ``output`` defaults to the last layer."""
        if self._input is None:
            raise ValueError("the net has no input layer")
        out = output if output is not None else self._layers[-1].name
        return Net(self.name, self._layers, self._input, out, self.description, config)
