"""The constants of the microkernel library's calls, in its layouts: weights packed as its kernels read them and
channel tables with what it needs precomputed (:mod:`tvm_memsched.micro.nn` decides which kernels it takes).

* the DSP path (and the portable C): :func:`pack_weights` (channel pairs interleaved every four reduction
  elements, rows padded to four), :func:`pack_pair16` (a fully connected layer's two channels as one int16 per
  input, where :func:`pair16_fits`), :func:`pack_depthwise`, :func:`channel_table` (the input zero point folded
  into the bias; the fast-requantisation flag set only where it is proven exact);
* the Helium path: :func:`pack_helium`, :func:`helium_table`;
* dynamic-range quantized ("hybrid") kernels: :func:`hybrid_table` and their scratch, :func:`hybrid_scratch_bytes`.

Example
-------
>>> import numpy as np
>>> pack_weights(np.arange(6, dtype=np.int8).reshape(1, 6)).reshape(-1, 4).tolist()
[[0, 1, 2, 3], [0, 0, 0, 0], [4, 5, 0, 0], [0, 0, 0, 0]]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["pack_weights", "pack_depthwise", "pack_pair16", "pair16_fits", "pack_helium", "helium_table",
           "channel_table", "hybrid_table", "hybrid_scratch_bytes", "FAST_FLAG", "HELIUM_FLAG", "ACC_LIMIT"]

#: TMS_F_FAST in a channel table's header: the fast requantisation is exact for every channel
FAST_FLAG = 1
#: TMS_PACK_HELIUM: weights and table in the Helium layouts
HELIUM_FLAG = 4
#: the accumulator bound below which the fast requantisation is exact
ACC_LIMIT = 1 << 30


def pack_helium(w: np.ndarray, op: str = "conv2d") -> np.ndarray:
    """``(rows, ...)`` int8 weights in the Helium layout of ``op``'s kernel: a convolution's (``conv2d``) rows
    of K elements each padded with zeros to K16 (K rounded up to 16): ``[rows][K16]``; a fully connected
    layer's (``dense``) rows K apart, padded with zero rows to a multiple of 4 (its kernel loads the last
    K % 16 elements of the input and of each row under a tail predicate): ``[rows4][K]``.

    >>> pack_helium(np.arange(1, 4, dtype=np.int8).reshape(1, 3)).reshape(1, 16)[:, :5].tolist()
    [[1, 2, 3, 0, 0]]
    >>> pack_helium(np.arange(1, 4, dtype=np.int8).reshape(1, 3), "dense").reshape(4, 3).tolist()
    [[1, 2, 3], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    """
    w = np.asarray(w, np.int8)
    rows = w.shape[0]
    flat = w.reshape(rows, -1)
    k = flat.shape[1]
    if op == "dense":
        out = np.zeros((-(-rows // 4) * 4, k), np.int8)
        out[:rows] = flat
        return out.reshape(-1)
    out = np.zeros((rows, -(-k // 16) * 16), np.int8)
    out[:, :k] = flat
    return out.reshape(-1)


def _eo_order(c: int) -> np.ndarray:
    """A depthwise convolution's table order: per block of eight channels (the last one, of ``c % 8``, too)
    the even channels, then the odd ones (the even and odd lanes of its widening multiply)."""
    order = []
    for base in range(0, c, 8):
        block = list(range(base, min(base + 8, c)))
        order += block[0::2] + block[1::2]
    return np.array(order, np.int64)


def helium_table(table: np.ndarray, op: str = "dense") -> np.ndarray:
    """A :func:`channel_table` in the Helium layout of ``op``'s kernel: its header (with ``TMS_PACK_HELIUM``),
    then, for a fully connected layer (``dense``), int32 arrays of C folded biases and C multipliers and
    int8 arrays of C4 (channels rounded up to 4) left shifts and C4 negated right shifts (zeros past the
    channels; the vector code widens four of them at a time), padded with zero bytes so that its four-channel
    loads of the last block stay in the table; a depthwise convolution's (``depthwise_conv2d``) the same with
    C8, its channels in blocks of eight in the order 0, 2, 4, 6, 1, 3, 5, 7 (a last block of ``C % 8`` its
    even channels, then its odd ones); a convolution's (``conv2d``: one channel for four pixels) a record of
    three int32 per channel: bias, multiplier, and left shift and negated right shift as its low two bytes.
    At most as many bytes as ``table`` (three int32 a channel) from 4 channels on (2 for ``dense``).

    >>> t = helium_table(np.array([[1, 0, 0], [7, 1 << 30, 2 | (3 << 16)]], np.int32))
    >>> t[:3].tolist(), t[3:5].tolist(), t[5:].view(np.int8).tolist()
    ([5, 0, 0], [7, 1073741824], [0, 0, 0, 0, -3, 0, 0, 0, 0, 0, 0, 0])
    >>> helium_table(np.array([[1, 0, 0], [7, 1 << 30, 2 | (3 << 16)]], np.int32), "conv2d")[3:].tolist()
    [7, 1073741824, 64768]
    """
    table = np.asarray(table, np.int64)
    head, rows = table[0].copy(), table[1:]
    c = rows.shape[0]
    bias, mult = rows[:, 0], rows[:, 1]
    left = ((rows[:, 2] >> 8) & 0xff).astype(np.int8)
    nright = (-((rows[:, 2] >> 16) & 0xff)).astype(np.int8)
    head[0] |= HELIUM_FLAG
    if op == "conv2d":
        shifts = left.view(np.uint8).astype(np.int64) | (nright.view(np.uint8).astype(np.int64) << 8)
        body = np.stack([bias, mult, shifts], axis=1).reshape(-1)
        return np.concatenate([head, body]).astype(np.int32)
    step = 8 if op == "depthwise_conv2d" else 4
    cp = -(-c // step) * step
    order = _eo_order(c) if op == "depthwise_conv2d" else np.arange(c)
    shift_bytes = np.zeros((2, cp), np.int8)
    shift_bytes[0, :c], shift_bytes[1, :c] = left[order], nright[order]
    tail = np.zeros(max(2 * cp, 4 * (cp - c)), np.int8)    # the last block's multiplier loads end in it
    tail[:2 * cp] = shift_bytes.reshape(-1)
    words = tail.view("<i4").astype(np.int64)
    return np.concatenate([head, bias[order], mult[order], words]).astype(np.int32)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """``(rows, ...)`` int8 weights as the library reads them: rows padded to an even count and each to a
    multiple of four, then channel pairs interleaved every four elements: ``[rows/2][K/4][2][4]``."""
    w = np.asarray(w, np.int8)
    rows = w.shape[0]
    flat = w.reshape(rows, -1)
    k = flat.shape[1]
    k4, r2 = -(-k // 4) * 4, rows + rows % 2
    padded = np.zeros((r2, k4), np.int8)
    padded[:rows, :k] = flat
    return np.ascontiguousarray(padded.reshape(r2 // 2, 2, k4 // 4, 4).transpose(0, 2, 1, 3)).reshape(-1)


def pair16_fits(w: np.ndarray) -> bool:
    """Whether fully connected weights ``(n, K)`` fit the pair16 layout (:func:`pack_pair16`): each pair's
    ``h = w[c] + 256 w[c + 1]`` an int16 and ``|sum of w[c + 1] x| < 2**23`` for any int8 input (the
    library recovers channel c + 1's sum from ``sum of h x`` minus channel c's in 32 bits, shifted by 8).

    >>> pair16_fits(np.array([[5, -128], [-128, 7]], np.int8)), pair16_fits(np.array([[-1], [-128]], np.int8))
    (True, False)
    """
    flat = np.asarray(w, np.int64).reshape(w.shape[0], -1)
    if flat.shape[0] % 2:
        flat = np.concatenate([flat, np.zeros((1, flat.shape[1]), np.int64)])
    lo, hi = flat[0::2], flat[1::2]
    h = lo + 256 * hi
    return bool(np.all((h >= -32768) & (h <= 32767)) and np.all(128 * np.abs(hi).sum(axis=1) < 1 << 23))


def pack_pair16(w: np.ndarray) -> np.ndarray:
    """Fully connected weights ``(n, K)`` in the pair16 layout (``TMS_PACK_PAIR16``, for cores with the DSP
    extension; :func:`pair16_fits` first), int8 bytes: rows padded to a multiple of 4 and K to a multiple of 4
    with zeros, channels ``(c, c + 1)`` as int16 ``h = w[c] + 256 w[c + 1]`` per input (little-endian: the low
    byte is ``w[c]``), per group of four inputs ``[h(k), h(k + 2), h(k + 1), h(k + 3)]`` (the SXTB16 and
    SXTB16 ROR #8 halves of an input word), two pairs per group: ``[n/4][K/4][2][4]`` int16.

    >>> pack_pair16(np.array([[1, 2, 3, 4], [0, 1, 0, -1]], np.int8)).view(np.int16)[:8].tolist()
    [1, 3, 258, -252, 0, 0, 0, 0]
    """
    flat = np.asarray(w, np.int64).reshape(w.shape[0], -1)
    n, k = flat.shape
    n4, k4 = -(-n // 4) * 4, -(-k // 4) * 4
    padded = np.zeros((n4, k4), np.int64)
    padded[:n, :k] = flat
    h = padded[0::2] + 256 * padded[1::2]                                   # (n4 / 2, k4)
    h = h.reshape(n4 // 4, 2, k4 // 4, 4)[..., [0, 2, 1, 3]].transpose(0, 2, 1, 3)
    return np.ascontiguousarray(h.astype(np.int16)).reshape(-1).view(np.int8)


def pack_depthwise(w: np.ndarray) -> np.ndarray:
    """Depthwise weights ``(1, kh, kw, C)`` as the library reads them: per block of four channels (zero
    beyond ``C``), each pair of taps ``(t, t+1)`` as two words ``[w_t[c], w_t[c+1], w_t+1[c], w_t+1[c+1]]``
    for channels ``c = 0, 2`` of the block, and an odd last tap as one word ``w_t[0..3]``
    (``4 * taps`` bytes per block)."""
    w = np.asarray(w, np.int8)
    c = w.shape[-1]
    taps = w.reshape(-1, c)
    n = taps.shape[0]
    c4 = -(-c // 4) * 4
    padded = np.zeros((n, c4), np.int8)
    padded[:, :c] = taps
    blocks = padded.reshape(n, c4 // 4, 4).transpose(1, 0, 2)          # (blocks, taps, 4)
    pairs = blocks[:, :n - n % 2].reshape(c4 // 4, n // 2, 2, 2, 2)      # (blocks, pair, tap, chan-pair, chan)
    pairs = pairs.transpose(0, 1, 3, 2, 4).reshape(c4 // 4, -1)          # (blocks, pair, chan-pair, tap, chan)
    last = blocks[:, n - 1:].reshape(c4 // 4, -1) if n % 2 else blocks[:, :0].reshape(c4 // 4, 0)
    return np.ascontiguousarray(np.concatenate([pairs, last], axis=1)).reshape(-1)


def _table_rows(desc: dict, table: np.ndarray | None, channels: int):
    """(bias, multipliers, shifts) per output channel from the TIR kernel's channel table and requant."""
    rq = desc["requant"]
    rows = [] if table is None else list(np.asarray(table, np.int64).reshape(-1, channels))
    bias = rows.pop(0) if desc["has_bias"] else np.zeros(channels, np.int64)
    if rq["multiplier"] is None:
        mult, shift = rows[0], rows[1]
    else:
        mult = np.full(channels, rq["multiplier"], np.int64)
        shift = np.full(channels, rq["shift"], np.int64)
    return bias, mult, shift


def channel_table(desc: dict, weights: np.ndarray, table: np.ndarray | None) -> np.ndarray:
    """The library's channel table for one call: a header (flags) and ``{bias', multiplier, shifts}`` per
    output channel, int32 ``(channels + 1, 3)``; ``weights`` as the TIR kernel takes them."""
    op = desc["op"]
    w = np.asarray(weights, np.int64)
    if op == "depthwise_conv2d":
        channels = w.shape[3]
        per_channel = w.reshape(-1, channels).T          # (C, taps)
    else:
        channels = w.shape[0]
        per_channel = w.reshape(channels, -1)
    bias, mult, shift = _table_rows(desc, table, channels)
    off = int(desc["in_offset"])                         # -zp_in
    folded = bias + off * per_channel.sum(axis=1)
    # |reference accumulator| <= max|x + off| * sum|w| + |bias|
    xmax = max(abs(-128 + off), abs(127 + off))
    bound = xmax * np.abs(per_channel).sum(axis=1) + np.abs(bias)
    ls, rs = np.maximum(shift, 0), np.maximum(-shift, 0)
    fast = bool(np.all(ls == 0) and np.all(rs >= 1) and np.all(rs <= 31) and np.all(bound < ACC_LIMIT)
                and np.all(mult >= 0))
    info = (np.maximum(rs - 1, 0) & 0xff) | (ls << 8) | (rs << 16)
    out = np.zeros((channels + 1, 3), np.int64)
    out[0, 0] = FAST_FLAG if fast else 0
    out[1:, 0] = folded
    out[1:, 1] = mult
    out[1:, 2] = info
    return ((out + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)   # the bias wraps like int32 sums


def hybrid_scratch_bytes(desc: dict, sums: bool = False) -> int:
    """Scratch bytes a hybrid kernel takes: every batch's parameters (12 bytes each; a fully connected
    layer's batches are its rows), then a convolution's (or fully connected layer's) two quantized windows
    and, with ``sums`` (computed per call: ``NnKernel.needs_weight_sums`` and not in its table), each output
    channel's sum of weights (int32, an even number of them).

    >>> hybrid_scratch_bytes({"op": "hybrid_dense", "x": [2, 10], "w": [3, 10]}, sums=True)
    64
    """
    op, x = desc["op"], desc["x"]
    if op == "hybrid_depthwise_conv2d":
        return 12 * x[0]
    batches, k = (math.prod(x[:-1]), x[-1]) if op == "hybrid_dense" else (x[0], math.prod(desc["w"][1:]))
    return 12 * batches + 2 * (-(-k // 4) * 4) + (4 * (-(-desc["w"][0] // 2) * 2) if sums else 0)


def hybrid_table(desc: dict, scales: np.ndarray, bias: np.ndarray | None, weights=None) -> np.ndarray:
    """A hybrid operator's table as ``tms_hconv_f32`` and ``tms_hdwconv_f32`` read it, int32: C weight scales
    (one per output channel, a per-tensor scale repeated) and C biases, as float32 bits, then, given the
    ``weights`` (``NnKernel.sums_in_table``), each output channel's sum of weights; else the kernel computes
    the sums per call, into scratch (:func:`hybrid_scratch_bytes`).

    >>> w = np.array([[1, 2], [-3, 4]], np.int8)
    >>> t = hybrid_table({"op": "hybrid_dense", "y": [1, 2]}, np.array([0.5], np.float32), None, w)
    >>> t[:2].view(np.float32).tolist(), t[2:4].view(np.float32).tolist(), t[4:].tolist()
    ([0.5, 0.5], [0.0, 0.0], [3, 1])
    """
    channels = int(desc["y"][-1])
    scales = np.broadcast_to(np.asarray(scales, np.float32).reshape(-1), (channels,))
    bias = np.zeros(channels, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    parts = [scales.view(np.int32), bias.view(np.int32)]
    if weights is not None:
        parts.append(np.asarray(weights, np.int64).reshape(channels, -1).sum(axis=1).astype(np.int32))
    return np.ascontiguousarray(np.concatenate(parts), np.int32)
