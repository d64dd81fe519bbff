"""ONNX ``LSTM``, ``GRU`` and ``RNN`` for TVM's Relax ONNX importer, unrolled over a static sequence length.

TVM 0.27's Relax ONNX frontend has no recurrent operator. :func:`recurrent_converters` gives converter
classes in the form the importer's operator table takes (``OnnxOpConverter`` subclasses); the
importer in :mod:`.onnx_frontend` adds them for the duration of an import. Each operator is unrolled
step by step in plain Relax operators (matrix products, element-wise gates), exactly as the ONNX
specification writes its equations:

* every attribute of the specification: ``direction`` (forward, reverse, bidirectional), ``layout``
  (0: ``[seq, batch, ...]``, 1: ``[batch, seq, ...]``), ``activations`` with their ``activation_alpha`` /
  ``activation_beta`` (Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu,
  Softsign, Softplus, Affine), ``clip``, LSTM's ``input_forget`` and peepholes ``P``, GRU's
  ``linear_before_reset``;
* optional inputs ``B``, ``initial_h``, ``initial_c`` (zeros when absent); passing the state as inputs and
  reading ``Y_h`` / ``Y_c`` makes a streaming model whose state the caller carries from one invocation to
  the next;
* ``sequence_lens`` only when it is a constant equal to the sequence length for every batch element
  (shorter sequences are refused by name: their per-element masking is not implemented).

The input projection ``X W^T + Wb`` is one matrix product over the whole sequence; the recurrent part is
one small product per step.

onnxruntime's contrib operator ``com.microsoft.DynamicQuantizeLSTM`` (what its ``quantize_dynamic`` makes of an
LSTM) is the same unrolling with int8/uint8 weights ``W [dirs, input, 4*hidden]`` and ``R [dirs, hidden,
4*hidden]`` (transposed against ``LSTM``'s), scales per direction or per gate column and one zero point per
direction. Its matrix products are computed as onnxruntime computes them: the operand is quantized to uint8
at run time (the whole sequence at once for ``X W``, the hidden state anew at every step for ``h R``;
``scale = (max(x, 0) - min(x, 0)) / 255``, 1 when that range is empty, zero point and values rounded half to
even, :func:`dynamic_quantize`), multiplied in int32 and scaled back by ``x_scale * w_scale``; the two biases
are summed. Only ``layout`` 0, as onnxruntime. onnxruntime quantizes the hidden state of a batch in chunks, one
per thread, when the batch has more than one sequence: our results are those of one thread.

Example
-------
>>> sorted(recurrent_converters())
['DynamicQuantizeLSTM', 'GRU', 'LSTM', 'RNN']
"""

from __future__ import annotations

import numpy as np

__all__ = ["recurrent_converters", "dynamic_quantize", "RECURRENT_OPS"]

#: the ONNX operators this module converts
RECURRENT_OPS = ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM")


def _static(expr, what: str) -> list[int]:
    from tvm import tirx

    shape = getattr(expr.ty, "shape", None)
    dims = getattr(shape, "values", None)
    if dims is None or not all(isinstance(d, tirx.IntImm) for d in dims):
        raise ValueError(f"{what} needs a static shape, got {expr.ty}")
    return [int(d) for d in dims]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activation(name: str, alpha, beta):
    """``f(bb, x)`` for one ONNX recurrent activation function (the specification's defaults for
    ``alpha``/``beta`` when None)."""
    from tvm import relax

    op = relax.op
    key = name.lower()

    def c(v):
        return relax.const(float(v), "float32")

    if key == "sigmoid":
        return op.sigmoid
    if key == "tanh":
        return op.tanh
    if key == "relu":
        return op.nn.relu
    if key == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: op.where(op.greater_equal(x, c(0)), x, op.multiply(x, c(a)))
    if key == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: op.where(op.greater(x, c(a)), x, op.zeros_like(x))
    if key == "scaledtanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda x: op.multiply(c(a), op.tanh(op.multiply(c(b), x)))
    if key == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: op.clip(op.add(op.multiply(c(a), x), c(b)), 0.0, 1.0)
    if key == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: op.where(op.greater_equal(x, c(0)), x, op.multiply(c(a), op.subtract(op.exp(x), c(1))))
    if key == "softsign":
        return lambda x: op.divide(x, op.add(op.abs(x), c(1)))
    if key == "softplus":
        return lambda x: op.log(op.add(op.exp(x), c(1)))
    if key == "affine":
        a, b = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return lambda x: op.add(op.multiply(c(a), x), c(b))
    raise ValueError(f"activation function '{name}' is not one ONNX defines for recurrent operators")


def _activations(attr, kind: str, count: int, directions: int) -> list[list]:
    """The activation functions of each direction (``count`` per direction)."""
    defaults = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[kind]
    names = [_text(a) for a in attr.get("activations", ())] or defaults * directions
    if len(names) == count and directions == 2:
        names = names * 2
    if len(names) != count * directions:
        raise ValueError(f"{kind}: {len(names)} activations for {directions} direction(s); expected "
                         f"{count * directions}")
    alphas = list(attr.get("activation_alpha", ()))
    betas = list(attr.get("activation_beta", ()))
    # alpha/beta are listed only for the functions that take them, in order
    takes_alpha = {"leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu", "affine"}
    takes_beta = {"scaledtanh", "hardsigmoid", "affine"}
    fns = []
    for n in names:
        a = alphas.pop(0) if n.lower() in takes_alpha and alphas else None
        b = betas.pop(0) if n.lower() in takes_beta and betas else None
        fns.append(_activation(n, a, b))
    return [fns[d * count:(d + 1) * count] for d in range(directions)]


class _Unroller:
    """The shared frame of the three operators: inputs, shapes, directions, projections, outputs."""

    def __init__(self, kind: str, gates: int, bb, inputs, attr):
        from tvm import relax

        self.kind, self.gates, self.bb, self.attr = kind, gates, bb, attr
        self.op = relax.op
        x, w, r = (bb.normalize(v) for v in inputs[:3])
        self.layout = int(attr.get("layout", 0))
        xs = _static(x, f"{kind} input X")
        if len(xs) != 3:
            raise ValueError(f"{kind}: input X has rank {len(xs)}, expected 3")
        if self.layout:
            x = self.op.permute_dims(x, [1, 0, 2])
            xs = [xs[1], xs[0], xs[2]]
        self.seq, self.batch, self.input_size = xs
        ws = _static(w, f"{kind} weights W")
        self.directions = ws[0]
        self.hidden = int(attr.get("hidden_size", ws[1] // gates))
        direction = _text(attr.get("direction", "forward")).lower()
        want = 2 if direction == "bidirectional" else 1
        if direction not in ("forward", "reverse", "bidirectional") or ws[0] != want:
            raise ValueError(f"{kind}: direction '{direction}' with weights for {ws[0]} direction(s)")
        if ws[1] != gates * self.hidden or ws[2] != self.input_size:
            raise ValueError(f"{kind}: weights W of shape {ws} for hidden size {self.hidden} and input size "
                             f"{self.input_size}")
        if _static(r, f"{kind} weights R") != [ws[0], gates * self.hidden, self.hidden]:
            raise ValueError(f"{kind}: recurrent weights R of shape {_static(r, 'R')}")
        self.reverse = [direction == "reverse"] if want == 1 else [False, True]
        self.x, self.w, self.r = x, w, r
        self.b = inputs[3]
        self.clip = attr.get("clip")
        lens = inputs[4]
        if lens is not None:
            import tvm

            values = np.asarray(lens.value.numpy()).reshape(-1) if isinstance(lens, tvm.ir.Constant) else None
            if values is None or values.size != self.batch or np.any(values != self.seq):
                raise ValueError(f"{kind}: sequence_lens other than a constant {self.seq} for every batch element "
                                 "(shorter sequences in a batch) is not supported")

    def emit(self, e):
        return self.bb.normalize(e)

    def initial(self, expr, d):
        """Direction ``d`` of an initial state ``[dirs, batch, hidden]`` (layout 1: ``[batch, dirs, hidden]``),
        or zeros."""
        op = self.op
        if expr is None:
            return op.zeros((self.batch, self.hidden), "float32")
        if self.layout:
            expr = op.permute_dims(expr, [1, 0, 2])
        return op.squeeze(op.strided_slice(expr, [0], [d], [d + 1]), [0])

    def projections(self, d):
        """``X W_d^T + Wb_d`` for every step: ``[seq, batch, gates*hidden]``, the recurrent weights
        ``R_d^T`` and bias ``Rb_d`` (None when there is no bias)."""
        op = self.op
        g = self.gates * self.hidden
        w = op.squeeze(op.strided_slice(self.w, [0], [d], [d + 1]), [0])
        r = op.squeeze(op.strided_slice(self.r, [0], [d], [d + 1]), [0])
        xw = op.matmul(op.reshape(self.x, (self.seq * self.batch, self.input_size)), op.permute_dims(w, [1, 0]))
        rb = None
        if self.b is not None:
            b = op.squeeze(op.strided_slice(self.b, [0], [d], [d + 1]), [0])
            xw = op.add(xw, op.strided_slice(b, [0], [0], [g]))
            rb = op.strided_slice(b, [0], [g], [2 * g])
        xw = self.emit(op.reshape(xw, (self.seq, self.batch, g)))
        return xw, self.emit(op.permute_dims(r, [1, 0])), rb

    def step_input(self, xw, t):
        return self.op.squeeze(self.op.strided_slice(xw, [0], [t], [t + 1]), [0])

    def recurrent(self, z, h, rt):
        """``z + h R^T`` (``rt``: what :meth:`projections` returned for ``R^T``)."""
        return self.op.add(z, self.op.matmul(h, rt))

    def gate(self, v, k, n=1):
        """Gates ``k .. k+n-1`` of a ``[batch, gates*hidden]`` value."""
        h = self.hidden
        return self.op.strided_slice(v, [1], [k * h], [(k + n) * h])

    def clipped(self, v):
        if self.clip is None:
            return v
        return self.op.clip(v, -float(self.clip), float(self.clip))

    def outputs(self, ys, finals, extra_finals=None):
        """``(Y, Y_h[, Y_c])`` from per-direction lists of per-step ``[batch, hidden]`` values."""
        op = self.op
        per_dir = [op.stack(y, axis=0) for y in ys]                  # [seq, batch, hidden] each
        y = op.stack(per_dir, axis=1)                                # [seq, dirs, batch, hidden]
        yh = op.stack(finals, axis=0)                                # [dirs, batch, hidden]
        out = [y, yh]
        if extra_finals is not None:
            out.append(op.stack(extra_finals, axis=0))
        if self.layout:
            out[0] = op.permute_dims(out[0], [2, 0, 1, 3])           # [batch, seq, dirs, hidden]
            out[1:] = [op.permute_dims(o, [1, 0, 2]) for o in out[1:]]
        from tvm import relax

        return relax.Tuple([self.emit(o) for o in out])


def dynamic_quantize(bb, x):
    """``(q - zero_point as int32, scale)``: ``x`` (float32) quantized to uint8 over its whole extent as
    onnxruntime quantizes a matrix product's operand at run time (``DynamicQuantizeLinear``,
    ``GetQuantizationParameter``): the range widened to hold 0, ``scale = (max - min) / 255`` (1 when
    ``max == min``), ``zero_point = round(clip(-min / scale, 0, 255))``, ``q = clip(round(x / scale) +
    zero_point, 0, 255)``, rounding half to even (TVM's ``round``).

    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    >>> with bb.function("f", [x]):
    ...     q, s = dynamic_quantize(bb, x)
    ...     _ = bb.emit_func_output(relax.Tuple([q, s]))
    >>> str(q.ty.dtype), str(s.ty.dtype)
    ('int32', 'float32')
    """
    from tvm import relax

    op = relax.op
    zero, one = relax.const(0.0, "float32"), relax.const(1.0, "float32")
    hi = op.maximum(zero, op.max(x))
    lo = op.minimum(zero, op.min(x))
    scale = bb.normalize(op.where(op.equal(hi, lo), one,
                                  op.divide(op.subtract(hi, lo), relax.const(255.0, "float32"))))
    zp = bb.normalize(op.round(op.clip(op.divide(op.negative(lo), scale), 0, 255)))
    q = op.clip(op.add(op.round(op.divide(x, scale)), zp), 0, 255)
    return bb.normalize(op.astype(op.subtract(q, zp), "int32")), scale


class _QuantizedUnroller(_Unroller):
    """``DynamicQuantizeLSTM``'s frame: quantized weights, products as onnxruntime computes them."""

    def __init__(self, bb, inputs, attr):
        from tvm import relax

        op = relax.op
        w, r = bb.normalize(inputs[1]), bb.normalize(inputs[2])
        for name, v in (("W", w), ("R", r)):
            if v.ty.dtype not in ("int8", "uint8"):
                raise ValueError(f"DynamicQuantizeLSTM: weights {name} must be int8 or uint8, got {v.ty.dtype}")
        if int(attr.get("layout", 0)):
            raise ValueError("DynamicQuantizeLSTM: only layout 0 ([seq, batch, ...]) is defined")
        # LSTM's frame checks [dirs, 4*hidden, input] and [dirs, 4*hidden, hidden]
        t = [bb.normalize(op.permute_dims(v, [0, 2, 1])) for v in (w, r)]
        super().__init__("DynamicQuantizeLSTM", 4, bb, [inputs[0], t[0], t[1], *inputs[3:8]], attr)
        self.wq, self.rq = w, r
        self.scales = inputs[8], inputs[10]
        self.zero_points = inputs[9], inputs[11]

    def _weights(self, k: int, d: int):
        """Direction ``d`` of W (``k`` 0) or R (1) as ``int32(w) - zero_point`` ``[rows, 4*hidden]``, and its
        scale per gate column ``[4*hidden]`` (constants: the scales and zero points must be)."""
        import tvm
        from tvm import relax

        op = self.op
        zp, scale = self.zero_points[k], self.scales[k]
        if not (isinstance(zp, tvm.ir.Constant) and isinstance(scale, tvm.ir.Constant)):
            raise ValueError("DynamicQuantizeLSTM: the weights' scales and zero points must be constants")
        g = self.gates * self.hidden
        zps = np.asarray(zp.value.numpy()).reshape(self.directions, -1)[d]
        if np.any(zps != zps[0]):               # onnxruntime refuses them too: it reads the first
            raise ValueError(f"DynamicQuantizeLSTM: the zero points of {'WR'[k]} differ along the gate columns; "
                             "one per direction is supported")
        z = int(zps[0])
        sc = np.asarray(scale.value.numpy(), dtype=np.float32).reshape(self.directions, -1)[d]
        sc = np.broadcast_to(sc, (g,)).astype(np.float32)
        w = self.emit(op.squeeze(op.strided_slice((self.wq, self.rq)[k], [0], [d], [d + 1]), [0]))
        w = self.emit(op.subtract(op.astype(w, "int32"), relax.const(z, "int32")))
        return w, relax.const(sc, "float32")

    def _product(self, x, w, w_scale):
        """``x @ w`` as onnxruntime's quantized GEMM: ``float(int32 product) * (x_scale * w_scale)``."""
        op = self.op
        q, s = dynamic_quantize(self.bb, x)
        acc = op.matmul(q, w, out_dtype="int32")
        return op.multiply(op.astype(acc, "float32"), op.multiply(s, w_scale))

    def projections(self, d):
        op = self.op
        g = self.gates * self.hidden
        w, ws = self._weights(0, d)
        r, rs = self._weights(1, d)
        xw = self._product(op.reshape(self.x, (self.seq * self.batch, self.input_size)), w, ws)
        xw = self.emit(op.reshape(xw, (self.seq, self.batch, g)))
        rb = None
        if self.b is not None:                 # Wb + Rb, summed once (as onnxruntime)
            b = op.squeeze(op.strided_slice(self.b, [0], [d], [d + 1]), [0])
            rb = self.emit(op.add(op.strided_slice(b, [0], [0], [g]), op.strided_slice(b, [0], [g], [2 * g])))
        return xw, (r, rs), rb

    def recurrent(self, z, h, rt):
        r, rs = rt
        return self.op.add(z, self._product(h, r, rs))


def _lstm(bb, inputs, attr, quantized: bool = False):
    u = _QuantizedUnroller(bb, inputs, attr) if quantized else _Unroller("LSTM", 4, bb, inputs, attr)
    op = u.op
    acts = _activations(attr, "LSTM", 3, u.directions)
    peep = inputs[7] if len(inputs) > 7 else None
    coupled = bool(attr.get("input_forget", 0))
    one = relax_one()
    ys, hs, cs = [], [], []
    for d, rev in enumerate(u.reverse):
        f, g, hfn = acts[d]
        xw, rt, rb = u.projections(d)
        h, c = u.emit(u.initial(inputs[5], d)), u.emit(u.initial(inputs[6], d))
        p = None
        if peep is not None:
            p = op.squeeze(op.strided_slice(peep, [0], [d], [d + 1]), [0])
            pi, po, pf = (u.emit(op.strided_slice(p, [0], [k * u.hidden], [(k + 1) * u.hidden])) for k in range(3))
        steps = [None] * u.seq
        for t in (range(u.seq - 1, -1, -1) if rev else range(u.seq)):
            z = u.recurrent(u.step_input(xw, t), h, rt)
            if rb is not None:
                z = op.add(z, rb)
            z = u.emit(z)
            zi, zo, zf, zc = (u.gate(z, k) for k in range(4))       # ONNX gate order: i, o, f, c
            if p is not None:
                zi, zf = op.add(zi, op.multiply(pi, c)), op.add(zf, op.multiply(pf, c))
            i = u.emit(f(u.clipped(zi)))
            if coupled:
                fg = u.emit(op.subtract(one, i))
            else:
                fg = u.emit(f(u.clipped(zf)))
            c = u.emit(op.add(op.multiply(fg, c), op.multiply(i, g(u.clipped(zc)))))
            if p is not None:
                zo = op.add(zo, op.multiply(po, c))
            o = u.emit(f(u.clipped(zo)))
            h = u.emit(op.multiply(o, hfn(c)))
            steps[t] = h
        ys.append(steps)
        hs.append(h)
        cs.append(c)
    return u.outputs(ys, hs, cs)


def relax_one():
    from tvm import relax

    return relax.const(1.0, "float32")


def _gru(bb, inputs, attr):
    u = _Unroller("GRU", 3, bb, inputs, attr)
    op = u.op
    acts = _activations(attr, "GRU", 2, u.directions)
    before = bool(attr.get("linear_before_reset", 0))
    one = relax_one()
    ys, hs = [], []
    for d, rev in enumerate(u.reverse):
        f, g = acts[d]
        xw, rt, rb = u.projections(d)
        h = u.emit(u.initial(inputs[5], d))
        steps = [None] * u.seq
        for t in (range(u.seq - 1, -1, -1) if rev else range(u.seq)):
            xt = u.emit(u.step_input(xw, t))
            hr = op.matmul(h, rt)                                     # [batch, 3*hidden]: z, r, h
            if rb is not None:
                hr = op.add(hr, rb)
            hr = u.emit(hr)
            zt = u.emit(f(u.clipped(op.add(u.gate(xt, 0), u.gate(hr, 0)))))
            r = u.emit(f(u.clipped(op.add(u.gate(xt, 1), u.gate(hr, 1)))))
            if before:
                hh = op.add(u.gate(xt, 2), op.multiply(r, u.gate(hr, 2)))
            else:
                rh = op.matmul(op.multiply(r, h), op.strided_slice(rt, [1], [2 * u.hidden], [3 * u.hidden]))
                if rb is not None:
                    rh = op.add(rh, op.strided_slice(rb, [0], [2 * u.hidden], [3 * u.hidden]))
                hh = op.add(u.gate(xt, 2), rh)
            hh = u.emit(g(u.clipped(hh)))
            h = u.emit(op.add(op.multiply(op.subtract(one, zt), hh), op.multiply(zt, h)))
            steps[t] = h
        ys.append(steps)
        hs.append(h)
    return u.outputs(ys, hs)


def _rnn(bb, inputs, attr):
    u = _Unroller("RNN", 1, bb, inputs, attr)
    op = u.op
    acts = _activations(attr, "RNN", 1, u.directions)
    ys, hs = [], []
    for d, rev in enumerate(u.reverse):
        (f,) = acts[d]
        xw, rt, rb = u.projections(d)
        h = u.emit(u.initial(inputs[5], d))
        steps = [None] * u.seq
        for t in (range(u.seq - 1, -1, -1) if rev else range(u.seq)):
            z = u.recurrent(u.step_input(xw, t), h, rt)
            if rb is not None:
                z = op.add(z, rb)
            h = u.emit(f(u.clipped(z)))
            steps[t] = h
        ys.append(steps)
        hs.append(h)
    return u.outputs(ys, hs)


def recurrent_converters() -> dict:
    """``{ONNX operator: converter class}`` for TVM's Relax ONNX importer (one ``_impl_v7`` each: the
    operators' semantics are unchanged from opset 7 to 22, ``layout`` added in 14)."""
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

    def make(name, fn):
        def impl(cls, bb, inputs, attr, params):
            return fn(bb, inputs, attr)

        return type(name, (OnnxOpConverter,), {"_impl_v7": classmethod(impl)})

    def dq_lstm(bb, inputs, attr):
        return _lstm(bb, list(inputs) + [None] * (12 - len(inputs)), attr, quantized=True)

    return {"LSTM": make("LSTM", _lstm), "GRU": make("GRU", _gru), "RNN": make("RNN", _rnn),
            "DynamicQuantizeLSTM": make("DynamicQuantizeLSTM", dq_lstm)}
