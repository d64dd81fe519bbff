"""Make the operator-coverage test models with TensorFlow's own converter (run it in a TensorFlow virtualenv).

This script is the only place tensorflow is used: it needs ``tensorflow-cpu`` from PyPI, which is not a
dependency of tvm_memsched, so it runs in a virtualenv of its own, made once::

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python scripts/make_coverage_models.py --out tests/data/coverage

For every case of :data:`CASES` (one TFLite operator family, tiny shapes, constant weights drawn from a
seeded generator) it converts one ``tf.function`` with ``tf.lite.TFLiteConverter`` in each kind people
deploy to microcontrollers:

* ``float32``: the plain conversion;
* ``int8``: full-integer post-training quantization (``TFLITE_BUILTINS_INT8``, int8 inputs and outputs,
  a representative data set of 32 samples);
* ``int16x8``: 16-bit activations, 8-bit weights
  (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``);
* ``hybrid``: dynamic-range quantization (``Optimize.DEFAULT`` without data): int8 weights read by
  float operators; kept only where it differs from the float32 file;
* ``float16``: float16 weights widened by ``DEQUANTIZE``; kept only where it differs from float32.

A kind the converter refuses for an operator is listed in the manifest with the converter's error, not
written. ``manifest.json`` lists every file with its case, kind, operators, input ranges and the
converter's version; ``scripts/bench_coverage.py`` reads it. The files are small (a few KB) and are
checked in as test data: CI never needs tensorflow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

KINDS = ("float32", "int8", "int16x8", "hybrid", "float16")


class Case:
    """One operator family: ``build(tf, rng)`` returns the ``tf.function`` body; ``inputs`` are
    ``(shape, dtype, lo, hi)``; ``ops`` the TFLite operators the file must hold (one of them suffices
    when the converter picks between equivalent forms)."""

    def __init__(self, name, ops, inputs, build, kinds=KINDS, note="", float_io=False, resources=False):
        self.name, self.ops, self.inputs, self.build, self.kinds, self.note = name, ops, inputs, build, kinds, note
        self.float_io, self.resources = float_io, resources


F = "float32"


def x4(c=3, h=6, w=6, lo=-1.0, hi=1.0):
    return (1, h, w, c), F, lo, hi


def cases():
    """The coverage cases (TFLite Micro's builtins and the LiteRT builtins common in exported models)."""
    import tensorflow as tf

    def const(rng, shape, scale=0.5):
        return tf.constant(rng.uniform(-scale, scale, shape).astype(np.float32))

    def unary(fn):
        return lambda rng: fn

    def binary(fn):
        return lambda rng: fn

    def conv(rng):
        w, b = const(rng, (3, 3, 8, 16)), const(rng, (16,), 0.2)
        return lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + b)

    def conv_valid_s2(rng):
        w, b = const(rng, (3, 3, 3, 4)), const(rng, (4,), 0.2)
        return lambda x: tf.nn.conv2d(x, w, 2, "VALID") + b

    def dwconv(rng):
        w, b = const(rng, (3, 3, 32, 4)), const(rng, (128,), 0.2)
        return lambda x: tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME") + b)

    def fc(rng):
        w, b = const(rng, (64, 16)), const(rng, (16,), 0.2)
        return lambda x: tf.matmul(x, w) + b

    def tconv(rng):
        w, b = const(rng, (3, 3, 8, 16)), const(rng, (8,), 0.2)
        return lambda x: tf.nn.conv2d_transpose(x, w, (1, 12, 12, 8), 2, "SAME") + b

    def tconv_valid(rng):
        w = const(rng, (2, 2, 2, 3))
        return lambda x: tf.nn.conv2d_transpose(x, w, (1, 12, 12, 2), 2, "VALID")

    def bmm_const(rng):
        w = const(rng, (32, 32))
        return lambda x: tf.matmul(x, tf.broadcast_to(w, (2, 32, 32)))

    def attention(rng):
        # one attention head as people write it: softmax(Q K^T / sqrt(d)) V, Q, K and V dense projections
        d = 8
        wq, wk, wv, bq = const(rng, (16, d)), const(rng, (16, d)), const(rng, (16, d)), const(rng, (d,), 0.2)

        def f(x):
            q, k, v = tf.matmul(x, wq) + bq, tf.matmul(x, wk), tf.matmul(x, wv)
            s = tf.matmul(q, k, transpose_b=True) / np.float32(np.sqrt(d))
            return tf.matmul(tf.nn.softmax(s, -1), v)
        return f

    def multi_head_attention(rng):
        import tf_keras

        inp = tf_keras.Input(shape=(6, 16), batch_size=1)
        out = tf_keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
        m = tf_keras.Model(inp, out)
        m.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
        return m

    def prelu(rng):
        a = tf.constant(rng.uniform(0.05, 0.3, (3,)).astype(np.float32))
        return lambda x: tf.maximum(x, 0.0) + a * tf.minimum(x, 0.0)

    def keras_rnn(cls, units, shape, **kw):
        def build(rng):
            # Keras 2 (tf_keras): a whole Keras model is what the converter fuses into one LSTM operator
            import tf_keras

            m = tf_keras.Sequential([tf_keras.Input(shape=shape[1:], batch_size=shape[0]),
                                     getattr(tf_keras.layers, cls)(units, **kw)])
            m.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in m.get_weights()])
            return m
        return build

    def fill(rng):
        return lambda x: tf.fill([2, 3], tf.reshape(x, []))

    def cond(rng):
        return lambda p, x: tf.cond(tf.reshape(p, []) > 0.0, lambda: x * 2.0, lambda: x - 1.0)

    def while_loop(rng):
        def body(i, v):
            return i + 1, v * 0.5 + 1.0
        return lambda x: tf.while_loop(lambda i, v: i < 3, body, (tf.constant(0), x))[1]

    def while_data(rng):
        def body(i, v):
            return i + 1, v * 1.5 + 0.25
        return lambda x: tf.while_loop(lambda i, v: tf.reduce_max(v) < 4.0, body, (tf.constant(0), x),
                                       maximum_iterations=6)[1]

    def while_nested(rng):
        def inner(j, v):
            return j + 1, v * 0.75 + 0.5

        def body(i, v):
            v = tf.while_loop(lambda j, w: j < 2, inner, (tf.constant(0), v))[1]
            return i + 1, tf.concat([v[..., 1:], v[..., :1]], -1) - 0.25
        return lambda x: tf.while_loop(lambda i, v: i < 3, body, (tf.constant(0), x))[1]

    def embedding(rng):
        table = const(rng, (256, 4))
        return lambda ids: tf.nn.embedding_lookup(table, ids)

    def gather(rng):
        idx = tf.constant([3, 0, 2], tf.int32)
        return lambda x: tf.gather(x, idx, axis=2)

    def gather_nd(rng):
        idx = tf.constant([[0, 1], [2, 3], [1, 1]], tf.int32)
        return lambda x: tf.gather_nd(x[0], idx)

    def mirror_pad(rng):
        return lambda x: tf.pad(x, [[0, 0], [1, 2], [2, 1], [0, 0]], mode="REFLECT")

    def resize(method, **kw):
        return lambda rng: (lambda x: tf.compat.v1.image.resize(x, (9, 11), method=method, **kw))

    def var_state(rng):
        m = tf.Module()
        m.v = tf.Variable(tf.zeros((1, 4)), trainable=False)

        def f(x):
            y = m.v + x
            m.v.assign(y * 0.5)
            return y
        f.trackable = m            # the converter keeps the variables of this object as resource variables
        return f

    def keras_layer(cls, shape, **kw):
        def build(rng):
            import tf_keras

            m = tf_keras.Sequential([tf_keras.Input(shape=shape[1:], batch_size=shape[0]),
                                     getattr(tf_keras.layers, cls)(**kw)])
            m.set_weights([rng.uniform(0.05, 0.4, w.shape).astype(np.float32) for w in m.get_weights()])
            return m
        return build

    q = (-1.0, 1.0)
    pos = (0.1, 2.0)
    C = Case
    return [
        C("abs", ["ABS"], [x4()], unary(tf.abs)),
        C("add", ["ADD"], [x4(), x4()], binary(tf.add)),
        C("add_broadcast", ["ADD"], [x4(), ((1, 1, 1, 3), F, *q)], binary(tf.add)),
        C("add_n", ["ADD_N"], [x4(), x4(), x4()], lambda rng: lambda a, b, c: tf.add_n([a, b, c])),
        C("arg_max", ["ARG_MAX"], [x4()], unary(lambda x: tf.argmax(x, -1, output_type=tf.int32))),
        C("arg_min", ["ARG_MIN"], [x4()], unary(lambda x: tf.argmin(x, -1, output_type=tf.int32))),
        C("average_pool_2d", ["AVERAGE_POOL_2D"], [x4()], unary(lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"))),
        C("batch_matmul", ["BATCH_MATMUL"], [((2, 4, 6), F, *q), ((2, 6, 5), F, *q)], binary(tf.matmul)),
        C("batch_matmul_const", ["BATCH_MATMUL", "FULLY_CONNECTED"], [((2, 4, 32), F, *q)], bmm_const),
        C("attention", ["BATCH_MATMUL"], [((1, 6, 16), F, *q)], attention,
          note="one attention head: softmax(Q K^T / sqrt(d)) V of dense projections"),
        C("multi_head_attention", ["BATCH_MATMUL"], [((1, 6, 16), F, *q)], multi_head_attention,
          note="Keras MultiHeadAttention, 2 heads of 4, self-attention"),
        C("batch_to_space_nd", ["BATCH_TO_SPACE_ND"], [((4, 3, 3, 2), F, *q)],
          unary(lambda x: tf.batch_to_space(x, [2, 2], [[0, 0], [0, 1]]))),
        C("broadcast_to", ["BROADCAST_TO"], [((1, 1, 4, 1), F, *q)],
          unary(lambda x: tf.broadcast_to(x, (2, 3, 4, 5)))),
        C("cast", ["CAST"], [x4()], unary(lambda x: tf.cast(x * 10.0, tf.int32))),
        C("cast_complex", ["RFFT2D", "CAST"], [((1, 32), F, -1.0, 1.0)],
          unary(lambda x: tf.cast(tf.signal.rfft(x), tf.float32) * 0.5), kinds=("float32",),
          note="the real part of a complex64 value (BirdNET's spectrogram)"),
        C("rfft2d", ["RFFT2D", "COMPLEX_ABS", "REAL", "IMAG", "CONCATENATION"], [((1, 3, 6, 12), F, -1.0, 1.0)],
          unary(lambda x: (lambda z: tf.concat([tf.math.abs(z), tf.math.real(z), tf.math.imag(z)], -1))(
              tf.signal.rfft2d(x, fft_length=[4, 16]))), kinds=("float32",),
          note="2-D real FFT, the input zero-padded to fft_length (4, 16): power-of-two kernels"),
        C("stft", ["RFFT2D", "COMPLEX_ABS"], [((1, 400), F, -1.0, 1.0)],
          unary(lambda x: tf.math.abs(tf.signal.stft(x, frame_length=64, frame_step=32, fft_length=64))),
          kinds=("float32",), note="a magnitude spectrogram (tf.signal.stft: frames, Hann window, rfft)"),
        C("ceil", ["CEIL"], [x4()], unary(tf.math.ceil)),
        C("concatenation", ["CONCATENATION"], [x4(), x4(c=2)], binary(lambda a, b: tf.concat([a, b], -1))),
        C("conv_2d", ["CONV_2D"], [x4(c=8)], conv),
        C("conv_2d_valid_s2", ["CONV_2D"], [x4(h=7, w=7)], conv_valid_s2),
        C("cos", ["COS"], [x4()], unary(tf.cos)),
        C("cumsum", ["CUMSUM"], [x4()], unary(lambda x: tf.cumsum(x, axis=2))),
        C("depth_to_space", ["DEPTH_TO_SPACE"], [x4(c=8, h=3, w=3)], unary(lambda x: tf.nn.depth_to_space(x, 2))),
        C("depthwise_conv_2d", ["DEPTHWISE_CONV_2D"], [x4(c=32, h=4, w=4)], dwconv),
        C("div", ["DIV"], [x4(), x4(lo=0.5, hi=2.0)], binary(tf.divide)),
        C("elu", ["ELU"], [x4()], unary(tf.nn.elu)),
        C("embedding_lookup", ["GATHER", "EMBEDDING_LOOKUP"], [((3,), "int32", 0, 256)], embedding),
        C("equal", ["EQUAL"], [x4(), x4()], binary(lambda a, b: tf.equal(tf.round(a * 2), tf.round(b * 2)))),
        C("exp", ["EXP"], [x4()], unary(tf.exp)),
        C("expand_dims", ["EXPAND_DIMS", "RESHAPE"], [x4()], unary(lambda x: tf.expand_dims(x, 1))),
        C("fill", ["FILL"], [((1,), F, *q)], fill),
        C("floor", ["FLOOR"], [x4()], unary(tf.floor)),
        C("floor_div", ["FLOOR_DIV"], [x4(), x4(lo=0.5, hi=2.0)], binary(tf.math.floordiv)),
        C("floor_mod", ["FLOOR_MOD"], [x4(), x4(lo=0.5, hi=2.0)], binary(tf.math.floormod)),
        C("fully_connected", ["FULLY_CONNECTED"], [((2, 64), F, *q)], fc),
        C("gather", ["GATHER"], [x4()], gather),
        C("gather_nd", ["GATHER_ND"], [x4()], gather_nd),
        C("greater", ["GREATER"], [x4(), x4()], binary(tf.greater)),
        C("greater_equal", ["GREATER_EQUAL"], [x4(), x4()], binary(tf.greater_equal)),
        C("hard_swish", ["HARD_SWISH"], [x4(lo=-4.0, hi=4.0)], unary(lambda x: x * tf.nn.relu6(x + 3.0) / 6.0)),
        C("if", ["IF"], [((1,), F, *q), x4()], cond),
        C("l2_normalization", ["L2_NORMALIZATION"], [x4()], unary(lambda x: tf.math.l2_normalize(x, -1))),
        C("leaky_relu", ["LEAKY_RELU"], [x4()], unary(lambda x: tf.nn.leaky_relu(x, 0.2))),
        C("less", ["LESS"], [x4(), x4()], binary(tf.less)),
        C("less_equal", ["LESS_EQUAL"], [x4(), x4()], binary(tf.less_equal)),
        C("log", ["LOG"], [x4(lo=pos[0], hi=pos[1])], unary(tf.math.log)),
        C("log_softmax", ["LOG_SOFTMAX"], [((2, 10), F, -3.0, 3.0)], unary(tf.nn.log_softmax)),
        C("logical_and", ["LOGICAL_AND"], [x4(), x4()], binary(lambda a, b: tf.logical_and(a > 0, b > 0))),
        C("logical_not", ["LOGICAL_NOT"], [((1, 6, 6, 3), "bool", 0, 2)], unary(tf.logical_not)),
        C("logical_or", ["LOGICAL_OR"], [x4(), x4()], binary(lambda a, b: tf.logical_or(a > 0, b > 0))),
        C("logistic", ["LOGISTIC"], [x4(lo=-4.0, hi=4.0)], unary(tf.sigmoid)),
        C("max_pool_2d", ["MAX_POOL_2D"], [x4()], unary(lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"))),
        C("maximum", ["MAXIMUM"], [x4(), x4()], binary(tf.maximum)),
        C("mean", ["MEAN"], [x4()], unary(lambda x: tf.reduce_mean(x, [1, 2], keepdims=True))),
        C("minimum", ["MINIMUM"], [x4(), x4()], binary(tf.minimum)),
        C("mirror_pad", ["MIRROR_PAD"], [x4()], mirror_pad),
        C("mul", ["MUL"], [x4(), x4()], binary(tf.multiply)),
        C("neg", ["NEG"], [x4()], unary(tf.negative)),
        C("not_equal", ["NOT_EQUAL"], [x4(), x4()],
          binary(lambda a, b: tf.not_equal(tf.round(a * 2), tf.round(b * 2)))),
        C("pack", ["PACK"], [x4(), x4()], binary(lambda a, b: tf.stack([a, b], 1))),
        C("pad", ["PAD"], [x4()], unary(lambda x: tf.pad(x, [[0, 0], [1, 1], [2, 0], [0, 0]]))),
        C("padv2", ["PADV2"], [x4()], unary(lambda x: tf.pad(x, [[0, 0], [1, 1], [2, 0], [0, 0]],
                                                               constant_values=0.5))),
        C("prelu", ["PRELU"], [x4()], keras_layer("PReLU", (1, 6, 6, 3), shared_axes=[1, 2]), note="Keras PReLU"),
        C("quantize_dequantize", ["QUANTIZE", "DEQUANTIZE"], [x4()], unary(lambda x: tf.nn.relu(x)),
          kinds=("int8", "int16x8"), note="float inputs and outputs around an integer model", float_io=True),
        C("reduce_max", ["REDUCE_MAX"], [x4()], unary(lambda x: tf.reduce_max(x, [1, 2]))),
        C("reduce_min", ["REDUCE_MIN"], [x4()], unary(lambda x: tf.reduce_min(x, [1, 2]))),
        C("reduce_prod", ["REDUCE_PROD"], [x4()], unary(lambda x: tf.reduce_prod(x, 3))),
        C("relu", ["RELU"], [x4()], unary(tf.nn.relu)),
        C("relu6", ["RELU6"], [x4(lo=-3.0, hi=9.0)], unary(tf.nn.relu6)),
        C("relu_n1_to_1", ["RELU_N1_TO_1"], [x4(lo=-2.0, hi=2.0)], unary(lambda x: tf.clip_by_value(x, -1.0, 1.0))),
        C("reshape", ["RESHAPE"], [x4()], unary(lambda x: tf.reshape(x, (1, 9, 12)))),
        C("resize_bilinear", ["RESIZE_BILINEAR"], [x4()], resize("bilinear")),
        C("resize_bilinear_align", ["RESIZE_BILINEAR"], [x4()], resize("bilinear", align_corners=True)),
        C("resize_bilinear_half_pixel", ["RESIZE_BILINEAR"], [x4()],
          lambda rng: lambda x: tf.image.resize(x, (9, 11), method="bilinear")),
        C("resize_nearest_neighbor", ["RESIZE_NEAREST_NEIGHBOR"], [x4()], resize("nearest")),
        C("reverse_v2", ["REVERSE_V2"], [x4()], unary(lambda x: tf.reverse(x, [2]))),
        C("round", ["ROUND"], [x4(lo=-3.0, hi=3.0)], unary(tf.round)),
        C("rsqrt", ["RSQRT"], [x4(lo=pos[0], hi=pos[1])], unary(tf.math.rsqrt)),
        C("select_v2", ["SELECT_V2"], [x4(), x4(), ((1, 1, 1, 3), F, *q)],
          lambda rng: lambda c, a, b: tf.where(c > 0, a, b)),
        C("sin", ["SIN"], [x4()], unary(tf.sin)),
        C("slice", ["SLICE"], [x4()], unary(lambda x: tf.slice(x, [0, 1, 2, 0], [1, 3, 2, 2]))),
        C("softmax", ["SOFTMAX"], [((2, 10), F, -3.0, 3.0)], unary(tf.nn.softmax)),
        C("space_to_batch_nd", ["SPACE_TO_BATCH_ND"], [x4()],
          unary(lambda x: tf.space_to_batch(x, [2, 2], [[0, 0], [1, 1]]))),
        C("space_to_depth", ["SPACE_TO_DEPTH"], [x4()], unary(lambda x: tf.nn.space_to_depth(x, 2))),
        C("split", ["SPLIT"], [x4(c=4)], unary(lambda x: tf.split(x, 2, axis=3))),
        C("split_v", ["SPLIT_V"], [x4(c=4)], unary(lambda x: tf.split(x, [1, 3], axis=3))),
        C("sqrt", ["SQRT"], [x4(lo=pos[0], hi=pos[1])], unary(tf.sqrt)),
        C("square", ["SQUARE"], [x4()], unary(tf.square)),
        C("squared_difference", ["SQUARED_DIFFERENCE"], [x4(), x4()], binary(tf.math.squared_difference)),
        C("squeeze", ["SQUEEZE", "RESHAPE"], [((1, 3, 1, 4), F, *q)], unary(lambda x: tf.squeeze(x, [2]))),
        C("strided_slice", ["STRIDED_SLICE"], [x4()], unary(lambda x: x[:, 1:5:2, ::-1, 1:])),
        C("sub", ["SUB"], [x4(), x4()], binary(tf.subtract)),
        C("sum", ["SUM"], [x4()], unary(lambda x: tf.reduce_sum(x, [2]))),
        C("tanh", ["TANH"], [x4(lo=-3.0, hi=3.0)], unary(tf.tanh)),
        C("transpose", ["TRANSPOSE"], [x4(c=4)], unary(lambda x: tf.transpose(x, [0, 3, 1, 2]))),
        C("transpose_conv", ["TRANSPOSE_CONV"], [x4(c=16)], tconv),
        C("transpose_conv_valid", ["TRANSPOSE_CONV"], [x4()], tconv_valid),
        C("unidirectional_sequence_lstm", ["UNIDIRECTIONAL_SEQUENCE_LSTM"], [((1, 5, 4), F, *q)],
          keras_rnn("LSTM", 6, (1, 5, 4), return_sequences=True), note="Keras LSTM"),
        C("unidirectional_sequence_lstm_last", ["UNIDIRECTIONAL_SEQUENCE_LSTM"], [((1, 3, 2), F, *q)],
          keras_rnn("LSTM", 4, (1, 3, 2)), note="Keras LSTM, last step only"),
        C("unidirectional_sequence_lstm_large", ["UNIDIRECTIONAL_SEQUENCE_LSTM"], [((1, 3, 32), F, *q)],
          keras_rnn("LSTM", 32, (1, 3, 32), return_sequences=True), kinds=("hybrid",),
          note="Keras LSTM with 32x32 gate matrices (dynamic-range quantization needs 1024 weights)"),
        C("unidirectional_sequence_lstm_stateful", ["UNIDIRECTIONAL_SEQUENCE_LSTM", "READ_VARIABLE"], [((1, 3, 2), F, *q)],
          keras_rnn("LSTM", 4, (1, 3, 2), return_sequences=True, stateful=True), kinds=("float32", "int8"),
          note="Keras LSTM(stateful=True): the converter does not fuse it (a WHILE loop over the steps, the states "
               "resource variables carried over between invocations)", resources=True),
        C("gru", ["FULLY_CONNECTED", "LOGISTIC"], [((1, 4, 3), F, *q)],
          keras_rnn("GRU", 5, (1, 4, 3), unroll=True), note="Keras GRU, unrolled"),
        C("gru_loop", ["WHILE"], [((1, 6, 3), F, *q)], keras_rnn("GRU", 5, (1, 6, 3), return_sequences=True),
          note="Keras GRU as a loop over the steps (the converter fuses no GRU: a WHILE over tensor lists)"),
        C("simple_rnn", ["WHILE"], [((1, 5, 4), F, *q)], keras_rnn("SimpleRNN", 6, (1, 5, 4)),
          note="Keras SimpleRNN, last step (a WHILE over the steps)"),
        C("unpack", ["UNPACK"], [((1, 3, 4), F, *q)], unary(lambda x: tf.unstack(x, axis=1))),
        C("while", ["WHILE"], [x4()], while_loop),
        C("while_nested", ["WHILE"], [x4()], while_nested, note="a loop in a loop, both counted"),
        C("while_data", ["WHILE"], [x4()], while_data,
          note="a loop whose trip count depends on the data (runs to its static bound, each step kept by a select)"),
        C("variable", ["VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"], [((1, 4), F, *q)], var_state,
          note="stateful: the variable carries over between invocations", resources=True),
    ]


def _convert(tf, fn, specs, kind, rng_data, case, trackable=None):
    if hasattr(fn, "get_concrete_function"):
        c = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], trackable or fn)
    else:
        c = tf.lite.TFLiteConverter.from_keras_model(fn)
    if case.resources:
        c.experimental_enable_resource_variables = True
    int_inputs = [s[1] != F for s in specs]
    if kind in ("int8", "int16x8"):
        c.optimizations = [tf.lite.Optimize.DEFAULT]

        def rep():
            for _ in range(32):
                yield [_sample(rng_data, s) for s in specs]
        c.representative_dataset = rep
        if kind == "int8":
            c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            io = tf.int8
        else:
            c.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
            io = tf.int16
        if not all(int_inputs) and not case.float_io:
            c.inference_input_type = io
            c.inference_output_type = io
    elif kind == "hybrid":
        c.optimizations = [tf.lite.Optimize.DEFAULT]
    elif kind == "float16":
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.target_spec.supported_types = [tf.float16]
    return c.convert()


def _sample(rng, spec):
    shape, dtype, lo, hi = spec
    if dtype == "int32":
        return rng.integers(int(lo), int(hi), shape).astype(np.int32)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _operators(buf: bytes) -> list[str]:
    from tensorflow.lite.python import schema_py_generated as s

    m = s.ModelT.InitFromObj(s.Model.GetRootAsModel(buf, 0))
    names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}
    ops = []
    for sg in m.subgraphs:
        for op in sg.operators or []:
            oc = m.operatorCodes[op.opcodeIndex]
            code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
            ops.append(oc.customCode.decode() if code == s.BuiltinOperator.CUSTOM else names.get(code, str(code)))
    return sorted(set(ops))


def _has_kind(buf: bytes, kind: str) -> bool:
    """True if ``buf`` is of ``kind``: int8 constants (``hybrid``), float16 tensors (``float16``), int8 or
    int16 tensors (``int8``, ``int16x8``)."""
    from tensorflow.lite.python import schema_py_generated as s

    m = s.ModelT.InitFromObj(s.Model.GetRootAsModel(buf, 0))
    want = {"float16": s.TensorType.FLOAT16, "int16x8": s.TensorType.INT16}.get(kind, s.TensorType.INT8)
    constant = kind == "hybrid"       # int8 weights; the other kinds: any tensor of the type
    return any(t.type == want and (not constant or m.buffers[t.buffer].data is not None)
               for sg in m.subgraphs for t in sg.tensors)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/coverage", help="output folder (default tests/data/coverage)")
    ap.add_argument("--only", nargs="*", help="case names to make (default all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _make_case(args.child, args.out)
    import subprocess

    import tensorflow as tf

    os.makedirs(args.out, exist_ok=True)
    old = {}
    path = os.path.join(args.out, "manifest.json")
    if args.only and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    manifest = {"converter": f"tensorflow {tf.__version__} TFLiteConverter", "files": [], "refused": []}
    for key in ("files", "refused"):
        manifest[key] = [r for r in old.get(key, []) if r["case"] not in (args.only or ())]
    for case in cases():
        if args.only and case.name not in args.only:
            continue
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--out", args.out, "--child", case.name],
                           capture_output=True, text=True)
        rows = [json.loads(line[5:]) for line in p.stdout.splitlines() if line.startswith("JSON ")]
        for r in rows:
            manifest["files" if "file" in r else "refused"].append(r)
            print(f"{r['case']:34s} {r['kind']:8s} " + (f"{r['bytes']:6d} B  {' '.join(r['operators'])}"
                                                         if "file" in r else f"refused: {r['error'][:90]}"))
        if p.returncode:
            err = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
            manifest["refused"].append({"case": case.name, "kind": "?", "error": f"converter crashed: {err}"[:300]})
            print(f"{case.name:34s} crashed: {err[:100]}")
    manifest["files"].sort(key=lambda r: r["file"])
    manifest["refused"].sort(key=lambda r: (r["case"], r["kind"]))
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(manifest['files'])} files, {len(manifest['refused'])} refused -> {args.out}")
    return 0


def _make_case(name: str, out: str) -> int:
    """Convert case ``name`` in every kind; each result is one ``JSON {...}`` line on stdout."""
    import tensorflow as tf

    for case in cases():
        if case.name != name:
            continue
        for kind in case.kinds:
            rng = np.random.default_rng(zlib.crc32(case.name.encode()))
            specs = case.inputs
            body = case.build(rng)
            sig = [tf.TensorSpec(s[0], getattr(tf, s[1])) for s in specs]
            fn = body if hasattr(body, "get_weights") else tf.function(body, input_signature=sig)
            try:
                buf = _convert(tf, fn, specs, kind, np.random.default_rng(7), case,
                               getattr(body, "trackable", None))
            except Exception as e:  # the converter's refusal is a fact of the matrix
                msg = str(e).strip().splitlines()
                _emit({"case": case.name, "kind": kind, "error": (msg[-1] if msg else type(e).__name__)[:300]})
                continue
            if kind != "float32" and not _has_kind(buf, kind):
                continue                       # nothing to quantize: the float32 file again
            ops = _operators(buf)
            if not any(o in ops for o in case.ops):
                _emit({"case": case.name, "kind": kind, "error": f"the converter wrote {ops}, none of {case.ops}"})
                continue
            fname = f"{case.name}.{kind}.tflite"
            with open(os.path.join(out, fname), "wb") as f:
                f.write(buf)
            _emit({"file": fname, "case": case.name, "family": case.ops[0], "kind": kind, "operators": ops,
                   "bytes": len(buf), "note": case.note,
                   "inputs": [{"shape": list(s[0]), "dtype": s[1], "range": [s[2], s[3]]} for s in specs]})
    return 0


def _emit(row: dict) -> None:
    print("JSON " + json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
