"""Patch tiling arithmetic shared by the TFLite and Relax rewrites (MCUNetV2-style patch-based inference).

A stage of spatially local operators is computed patch by patch: each patch of
the stage output needs a window of every tensor before it, the receptive field
with its halo. :func:`input_range` is that window for one window operator and
one axis, with the zero rows the operator's padding contributes at a true
border; :func:`patch_ranges` splits an axis into nearly equal parts.
:class:`TilingCandidate` / :class:`TilingResult` report a search over split
points and grids.

Example
-------
>>> input_range(2, 4, stride=2, kernel=3, dilation=1, pad_before=1, size=8)   # rows [2, 4) of a s2 conv
(3, 8, 0, 0)
>>> patch_ranges(10, 3)
[(0, 3), (3, 7), (7, 10)]
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["input_range", "patch_ranges", "TilingCandidate", "TilingResult", "DEFAULT_GRIDS", "DEFAULT_BUDGET"]

#: grids tried by the searches (rows x columns of the stage output)
DEFAULT_GRIDS = ((2, 2), (3, 3), (4, 4), (2, 1), (3, 1), (4, 1), (5, 5), (6, 6), (8, 8))
#: default budget: extra multiply-accumulates, as a fraction of the model's
DEFAULT_BUDGET = 0.15


def input_range(a: int, b: int, *, stride: int, kernel: int, dilation: int, pad_before: int,
                size: int) -> tuple[int, int, int, int]:
    """Input rows ``[lo, hi)`` a window op needs for output rows ``[a, b)``, and the zero rows
    ``(before, after)`` its padding adds there: ``hi - lo + before + after`` is the padded window."""
    start = a * stride - pad_before
    end = (b - 1) * stride - pad_before + (kernel - 1) * dilation + 1
    lo, hi = max(0, start), min(size, end)
    return lo, hi, lo - start, end - hi



@dataclass
class TilingCandidate:
    """One (split point, grid) considered by :func:`search_tiling`."""

    split: str
    grid: tuple
    stage_ops: int
    tiled_ops: int
    extra_macs: int
    mac_overhead: float            # extra MACs / the model's MACs
    peak_bytes: int | None         # scheduled peak of the tiled graph (auto)
    plan_bytes: int | None         # our offline plan of it (TFLM head)
    within_budget: bool
    seconds: float = 0.0
    tflm_tail_bytes: int | None = None   # TFLite Micro's persistent tail for the tiled file

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["grid"] = f"{self.grid[0]}x{self.grid[1]}"
        return d


@dataclass
class TilingResult:
    """The chosen tiling (``buf``: the tiled model, ``.tflite`` bytes or a Relax module) and every candidate
    considered."""

    buf: bytes | None
    chosen: TilingCandidate | None
    candidates: list = field(default_factory=list)
    untiled_peak_bytes: int = 0
    untiled_plan_bytes: int = 0
    model_macs: int = 0
    untiled_tflm_tail_bytes: int | None = None

    def to_dict(self) -> dict:
        """The search as plain data (without the tiled model)."""
        return {"chosen": self.chosen.to_dict() if self.chosen is not None else None,
                "untiled_peak_bytes": self.untiled_peak_bytes, "untiled_plan_bytes": self.untiled_plan_bytes,
                "model_macs": self.model_macs, "untiled_tflm_tail_bytes": self.untiled_tflm_tail_bytes,
                "candidates": [c.to_dict() for c in self.candidates]}

    def table(self) -> str:
        rows = [["split at", "grid", "stage ops", "ops", "extra MACs", "overhead", "peak", "plan", "TFLM tail", ""]]
        for c in self.candidates:
            rows.append([c.split, f"{c.grid[0]}x{c.grid[1]}", str(c.stage_ops), str(c.tiled_ops),
                         f"{c.extra_macs:,}", f"{100 * c.mac_overhead:.1f}%",
                         "-" if c.peak_bytes is None else f"{c.peak_bytes:,}",
                         "-" if c.plan_bytes is None else f"{c.plan_bytes:,}",
                         "-" if c.tflm_tail_bytes is None else f"{c.tflm_tail_bytes:,}",
                         ("chosen" if c is self.chosen else "") + ("" if c.within_budget else " over budget")])
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(x.ljust(w[i]) if i < 2 else x.rjust(w[i]) for i, x in enumerate(r)).rstrip()
                         for r in rows)


def patch_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` nearly equal ranges covering ``[0, n)``."""
    parts = max(1, min(parts, n))
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]
