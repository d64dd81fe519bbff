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

__all__ = ["memory_over_time", "arena_layout", "peaks_bar_chart", "kernel_profile"]


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


def kernel_profile(layers: Sequence[Mapping], timeline: Sequence[Sequence], path: str, *, title: str = "",
                   arena_bytes: int | None = None) -> str:
    """A profiled microcontroller run, by kernel call: instructions per call (bars, coloured by what computes
    the kernel) above the arena's occupancy (each buffer a rectangle from its first to its last call at its
    offset, and the live bytes as a line). ``layers``: :func:`tvm_memsched.micro.run.profile_layers`;
    ``timeline``: the export's ``(name, offset, size, first call, last call)`` rows.

    >>> import os, tempfile
    >>> layers = [{"call": 0, "code": "conv", "instructions": 900, "live_bytes": 96},
    ...           {"call": 1, "code": "TVM C", "instructions": 300, "live_bytes": 64}]
    >>> path = os.path.join(tempfile.mkdtemp(), "profile.png")
    >>> kernel_profile(layers, [("a", 0, 64, 0, 1), ("b", 64, 32, 0, 0)], path) == path
    True
    """
    plt = _plt()
    from matplotlib.patches import Rectangle

    n = len(layers)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, min(24.0, 0.12 * n + 6)), 6.4), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1.4]})
    codes = sorted({str(r.get("code")) for r in layers})
    cmap = plt.get_cmap("tab10")
    colour = {c: cmap(i % 10) for i, c in enumerate(codes)}
    for code in codes:
        rows = [r for r in layers if str(r.get("code")) == code and r.get("instructions")]
        if rows:
            top.bar([r["call"] for r in rows], [r["instructions"] for r in rows], width=0.8, color=colour[code],
                    label=code)
    total = sum(r.get("instructions") or 0 for r in layers)
    top.set_ylabel("instructions")
    top.set_title(title or f"kernel calls: {total:,} instructions")
    top.grid(alpha=0.3, axis="y")
    if codes:
        top.legend(fontsize=7, ncol=min(4, len(codes)), loc="upper right")
    for i, (_, off, size, first, last) in enumerate(timeline):
        bottom.add_patch(Rectangle((first - 0.4, off / 1024), last - first + 0.8, size / 1024,
                                   facecolor=cmap(i % 10), edgecolor="black", linewidth=0.3, alpha=0.55))
    live = [r.get("live_bytes") for r in layers]
    if all(v is not None for v in live) and live:
        bottom.step(range(n), [v / 1024 for v in live], where="mid", color="black", linewidth=1.2,
                    label=f"live bytes (peak {max(live) / 1024:.1f} KiB)")
        bottom.legend(fontsize=8, loc="upper right")
    height = max([arena_bytes or 0] + [off + size for _, off, size, _, _ in timeline] + [1])
    if arena_bytes:
        bottom.axhline(arena_bytes / 1024, color="red", linestyle="--", linewidth=1)
    bottom.set_ylim(0, height / 1024 * 1.05)
    bottom.set_xlim(-0.6, max(n, 1) - 0.4)
    bottom.set_xlabel("kernel call (schedule order)")
    bottom.set_ylabel("arena offset / live (KiB)")
    bottom.grid(alpha=0.3)
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
