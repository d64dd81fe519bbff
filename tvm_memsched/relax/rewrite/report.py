"""What the identity rewriting did: sites, evaluated candidates, per-block and per-module reports.

Example
-------
>>> from tvm_memsched.relax.rewrite import identity_rewrite
>>> from tvm_memsched.relax.testing import branchy_module
>>> _, report = identity_rewrite(branchy_module(branches=3), policy="always")
>>> isinstance(report, RewriteReport), report.to_dict()["sites"] == len(report.sites)
(True, True)
>>> report.summary().splitlines()[0].startswith("identity rewrite (policy always")
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .registry import MERGE

__all__ = ["RewriteSite", "Candidate", "BlockRewriteReport", "RewriteReport"]


@dataclass
class RewriteSite:
    """One rule application: ``var`` (the rewritten consumer) consumed ``concat`` of ``inputs``.

    For ``merge_duplicates``, ``var`` is the dropped duplicate, ``concat`` is
    empty and ``inputs`` holds the var it now reads instead.
    """

    function: str
    block: int
    rule: str
    var: str
    concat: str
    inputs: tuple
    level: int = 1          # 1: a user of the site's concat, 2: of a concat created at level 1, ...
    plan: int = 0           # index of the plan (site) it belongs to within its block


@dataclass
class Candidate:
    """The evaluation of one site's plan under ``policy="if-better"`` (the best of its depths).

    ``concat`` names the site (the concat, or the first dropped duplicate);
    ``peak_before``/``peak_after`` are the block's scheduled peaks without and
    with the plan; ``accepted`` says whether it was kept.
    """

    function: str
    block: int
    concat: str
    inputs: tuple
    depth: int
    steps: int
    peak_before: int
    peak_after: int
    accepted: bool
    seconds: float = 0.0


@dataclass
class BlockRewriteReport:
    """What happened to one DataflowBlock."""

    function: str
    block: int
    level: str = "kernel"          # where the peaks below were measured
    status: str = "unchanged"      # "rewritten", "unchanged", or "skipped: <reason>"
    peak_before: int | None = None  # scheduled peak (``method``) of the block before / after
    peak_after: int | None = None
    sites: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # (concat var, reason)
    evaluations: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["skipped"] = [list(s) for s in self.skipped]
        return d


@dataclass
class RewriteReport:
    """All blocks of a module: which sites were rewritten, and the peaks before and after."""

    policy: str
    method: str
    rules: list
    level: str = "best"
    blocks: list = field(default_factory=list)
    scores: dict = field(default_factory=dict)   # level="best": function -> search -> peaks of its result
    chosen: dict = field(default_factory=dict)   # level="best": function -> the search whose result was kept

    @property
    def sites(self) -> list:
        return [s for b in self.blocks for s in b.sites]

    @property
    def peak_before(self) -> int:
        """Largest scheduled peak before rewriting (kernel level with ``level="best"``; unschedulable blocks: 0)."""
        if self.scores:
            return max(sc["original"]["kernel_peak"] for sc in self.scores.values())
        return max([b.peak_before or 0 for b in self.blocks] or [0])

    @property
    def peak_after(self) -> int:
        """Largest scheduled peak after rewriting (kernel level with ``level="best"``)."""
        if self.scores:
            return max(sc[self.chosen.get(name, "original")]["kernel_peak"] for name, sc in self.scores.items())
        return max([b.peak_after or 0 for b in self.blocks] or [0])

    def to_dict(self) -> dict:
        return {"policy": self.policy, "method": self.method, "rules": list(self.rules), "level": self.level,
                "scores": self.scores, "chosen": self.chosen,
                "peak_before": self.peak_before, "peak_after": self.peak_after,
                "sites": len(self.sites), "blocks": [b.to_dict() for b in self.blocks]}

    def summary(self) -> str:
        lines = [f"identity rewrite (policy {self.policy}, scheduler {self.method}, level {self.level}): "
                 f"{len(self.sites)} rewrites, "
                 f"peak {self.peak_before} -> {self.peak_after} bytes"]
        for b in self.blocks:
            lines.append(f"  {b.function} block {b.block}: {b.status}, peak {b.peak_before} -> {b.peak_after} "
                         f"({b.level} level"
                         f", {len(b.sites)} rewrites, {b.evaluations} evaluations, {b.seconds:.2f}s)")
            for s in b.sites:
                if s.rule == MERGE:
                    lines.append(f"    {s.rule}: {s.var} := {s.inputs[0]}")
                else:
                    lines.append(f"    {s.rule}: {s.var} <- {s.concat}({', '.join(s.inputs)})")
        return "\n".join(lines)
