"""In-place overlap of channels-last (NHWC) window operators, from their loop nest.

A convolution, depthwise convolution or pooling that visits output pixels in
memory order (batch, row, column, then channels) and reads a window of input
rows around each pixel can write its output over its input if the output
trails far enough behind: :func:`nhwc_window_shift` is the smallest such
distance, in bytes, for given shapes, kernel, strides, dilation and padding
before the first row and column. TFLite Micro's reference kernels and TVM's
NHWC kernels both run this loop order.

Example
-------
>>> nhwc_window_shift((1, 8, 8, 4), (1, 8, 8, 4), kernel=(3, 3), stride=(1, 1), pad_before=(1, 1),
...                   itemsize=(1, 1), depthwise=True)   # one input row and one pixel (9 x 4 bytes)
36
"""

from __future__ import annotations

import numpy as np

__all__ = ["nhwc_window_shift"]


def nhwc_window_shift(in_shape, out_shape, *, kernel, stride, pad_before, itemsize, dilation=(1, 1),
                      depthwise=False, pool=False) -> int:
    """Bytes the output of an NHWC window op must start below its input to be computed in place.

    Follows TFLM's reference loop nest (batch, out_y, out_x, then output
    channels; ``depthwise``: input channel then multiplier; ``pool``: channel),
    where every output element is written after all its reads. Output element
    ``w`` (in write order) must end at or before the lowest input byte any
    later element still reads; the shift is the largest excess over all ``w``.
    """
    n, h, w, c = (int(d) for d in in_shape)
    _, ho, wo, co = (int(d) for d in out_shape)
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    isz, osz = itemsize
    ph, pw = pad_before

    def first_valid(out_len, size, s, p, k, d):
        """Per output coordinate: the smallest input coordinate its window reads (size if none)."""
        base = np.arange(out_len) * s - p
        f = np.where(base < 0, -(-(-base) // d), 0)          # first tap index landing at >= 0
        first = base + f * d
        return np.where((f < k) & (first < size), first, size)

    fy = first_valid(ho, h, sh, ph, kh, dh)
    fx = first_valid(wo, w, sw, pw, kw, dw)
    # lowest input element index read by each output element, in write order
    pix = (fy[:, None] * w + fx[None, :]) * c                   # (ho, wo), channel 0
    bad = (fy[:, None] >= h) | (fx[None, :] >= w)
    if depthwise or pool:
        mult = co // c if depthwise else 1
        ch = np.repeat(np.arange(c), mult)                     # input channel of each output channel
        low = pix[:, :, None] + ch[None, None, :]
    else:
        low = np.broadcast_to(pix[:, :, None], (ho, wo, co))
    never = np.int64(2) ** 40                                   # "reads nothing": no constraint
    low = np.where(bad[:, :, None], never, low).astype(np.int64)
    per_image = ho * wo * co
    low = low.reshape(-1)
    lows = np.concatenate([np.where(low >= never, never, low + b * h * w * c) for b in range(n)])
    # needed after write k: min of lows[k+1:]
    after = np.minimum.accumulate(lows[::-1])[::-1]
    after = np.append(after[1:], never)
    ends = (np.arange(n * per_image, dtype=np.int64) + 1) * osz
    return int(max(0, int(np.max(ends - after * isz)) if len(ends) else 0))
