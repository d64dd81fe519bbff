"""Figures for reports: memory over time, arena layouts, peaks per model.

Needs matplotlib (``pip install 'tvm_memsched[plot]'``); it is imported on first
use with the non-interactive Agg backend, so plots work without a display.

Example
-------
>>> import os, tempfile
>>> from tvm_memsched.core import example_graph, simulate
>>> from tvm_memsched.schedulers import schedule
>>> g = example_graph()
>>> a, b = simulate(g, schedule(g, "program").order), simulate(g, schedule(g, "dp").order)
>>> path = os.path.join(tempfile.mkdtemp(), "mem.png")
>>> memory_over_time({"program": a.stable, "dp": b.stable}, path, title=g.name) == path
True
"""

from __future__ import annotations

import io
from typing import Mapping, Sequence

from ..core.files import atomic_write

__all__ = ["memory_over_time", "arena_layout", "peaks_bar_chart"]


def _plt():
    try:
        import matplotlib
    except ImportError:
        from ..core.errors import UnsupportedError

        raise UnsupportedError("plots need matplotlib (pip install 'tvm_memsched[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _mib(n):
    return n / (1 << 20)


def memory_over_time(profiles: Mapping[str, Sequence[int]], path: str, *, title: str = "",
                     limit: int | None = None, limit_label: str = "") -> str:
    """Resident bytes per step for several orders (a line each); saves a PNG at ``path``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for label, prof in profiles.items():
        if not len(prof):
            continue
        peak = max(prof)
        ax.step(range(len(prof)), [_mib(x) for x in prof], where="post",
                label=f"{label} (peak {_mib(peak):.2f} MiB)", linewidth=1.4)
    if limit:
        ax.axhline(_mib(limit), color="red", linestyle="--", linewidth=1, label=limit_label or "limit")
    ax.set_xlabel("step (operator in schedule order)")
    ax.set_ylabel("resident MiB")
    ax.set_title(title or "memory over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _save(fig, path)


def arena_layout(layout: Sequence[Sequence], path: str, *, title: str = "", arena_bytes: int | None = None) -> str:
    """Rectangles (time x offset) of an arena plan: ``layout`` rows are (name, scope, offset, size, start, end)."""
    plt = _plt()
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(8, 4))
    top = 0
    last = 0
    for row in layout:
        name, _scope, off, size, start, end = row[:6]
        if not size:
            continue
        is_ws = ":ws" in str(name)
        ax.add_patch(Rectangle((start, _mib(off)), end - start + 1, _mib(size),
                               facecolor="tab:orange" if is_ws else "tab:blue", edgecolor="white",
                               linewidth=0.3, alpha=0.85))
        top = max(top, off + size)
        last = max(last, end + 1)
    if arena_bytes:
        top = max(top, arena_bytes)
        ax.axhline(_mib(arena_bytes), color="black", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, max(1, last))
    ax.set_ylim(0, _mib(top) * 1.05 if top else 1)
    ax.set_xlabel("step (binding of the lowered function)")
    ax.set_ylabel("arena offset (MiB)")
    ax.set_title(title or "arena layout")
    fig.tight_layout()
    return _save(fig, path)


def peaks_bar_chart(rows: Mapping[str, Mapping[str, int]], path: str, *, title: str = "") -> str:
    """Grouped bars: for each model (outer key) the bytes of each series (inner key)."""
    plt = _plt()
    import numpy as np

    models = list(rows)
    series = []
    for m in models:
        for k in rows[m]:
            if k not in series:
                series.append(k)
    width = 0.8 / max(1, len(series))
    x = np.arange(len(models))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(models) + 2), 4))
    for i, s in enumerate(series):
        vals = [_mib(rows[m].get(s, 0) or 0) for m in models]
        ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, label=s)
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("MiB")
    ax.set_title(title or "peak memory per model")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: str) -> str:
    """Render ``fig`` (format from ``path``'s extension) and write it atomically; close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=110, format=path.rsplit(".", 1)[-1].lower() if "." in path else "png")
    finally:
        plt.close(fig)
    atomic_write(path, buf.getvalue())
    return path
