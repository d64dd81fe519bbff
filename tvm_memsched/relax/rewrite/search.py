"""The searches of the identity rewriting: ``"if-better"`` and ``"always"``, scored at kernel or operator level.

:func:`identity_rewrite` rewrites a module, :func:`rewrite_function` one
function; :class:`Evaluator` schedules a candidate block and scores it (peak,
then footprint profile). The policies, levels and the ``level="best"``
portfolio are described in :mod:`tvm_memsched.relax.rewrite`.

Example
-------
>>> from tvm_memsched.relax.testing import branchy_module
>>> new, report = identity_rewrite(branchy_module(branches=4), policy="if-better", level="operator")
>>> report.peak_after < report.peak_before
True
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterable

import tvm
from tvm import relax

from ...core.errors import MemschedError, UnsupportedError
from ...core.simulate import footprints
from ...schedulers import schedule
from ..graph import block_to_graph
from ..target import as_target, stages
from .engine import binding_positions, canonicalize, find_sites, site_plans, site_present
from .registry import MERGE, Rule, get_rules
from .report import BlockRewriteReport, Candidate, RewriteReport

__all__ = ["POLICIES", "LEVELS", "SEARCHES", "Evaluator", "rewrite_function", "identity_rewrite"]

log = logging.getLogger("tvm_memsched")


POLICIES = ("if-better", "always")


@dataclass
class _Eval:
    peak: int
    profile: tuple
    order: dict

    @property
    def key(self):
        return (self.peak, self.profile)


#: where blocks are evaluated: after TVM's legalization and fusion, right here, or both (the better result wins)
LEVELS = ("best", "kernel", "operator")


class Evaluator:
    """Schedules block ``k`` of a candidate function and scores it (peak, then footprint profile).

    ``level="operator"`` schedules the operator-level block itself.
    ``level="kernel"`` first runs TVM's dispatch and legalization stages of
    ``target`` (``LegalizeOps``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``) on the
    module with the candidate in place and schedules the fused block, which is
    what :class:`~tvm_memsched.transform.MemoryAwareReorder` and the arena
    planner see: a concat feeding an element-wise op is fused away by TVM, a
    convolution's partial sums are not. The positions used to order partial sums
    always come from the operator-level schedule.
    """

    def __init__(self, module, name: str, method: str, time_limit: float | None, options: dict,
                 level: str = "kernel", target=None):
        if level not in ("kernel", "operator"):
            raise UnsupportedError(f"unknown evaluation level '{level}'; use one of {', '.join(LEVELS)}")
        self.module, self.name, self.level = module, name, level
        self.method, self.time_limit, self.options = method, time_limit, dict(options)
        self.count = 0
        if level == "kernel":
            self.target = as_target(target)
            st = stages(self.target)
            self.lower = tvm.transform.Sequential(st["dispatch"] + st["legalize"])

    def _schedule(self, func, k: int):
        bg = block_to_graph(func, k)
        g = bg.graph
        res = schedule(g, self.method, time_limit=self.time_limit, **self.options)
        ids = list(res.order_ids) if res.order_ids else g.resolve_order(res.order)
        return bg, g, res, ids

    def __call__(self, func, k: int) -> _Eval:
        self.count += 1
        bg, g, res, ids = self._schedule(func, k)
        order = {bg.block.bindings[bg.binding_of_op[g.ops[v].name]].var: pos for pos, v in enumerate(ids)}
        if self.level == "kernel":
            mod = self.module.clone()
            mod[self.name] = func
            with self.target:
                fused = self.lower(mod)
            kfunc = fused[self.name]
            kk = _matching_block(func, kfunc, k)
            _, g, res, ids = self._schedule(kfunc, kk)
        stable, _ = footprints(g, ids)
        profile = tuple(sorted((s for s, v in zip(stable, ids) if g.output_bytes[v] + g.workspace[v] > 0),
                               reverse=True))
        return _Eval(res.peak_bytes, profile, order)


def _matching_block(func, lowered, k: int) -> int:
    """Index in ``lowered`` of the DataflowBlock that was block ``k`` of ``func`` (the same rank among them)."""
    rank = sum(1 for b in func.body.blocks[:k] if isinstance(b, relax.DataflowBlock))
    dataflow = [i for i, b in enumerate(lowered.body.blocks) if isinstance(b, relax.DataflowBlock)]
    if rank >= len(dataflow):
        raise UnsupportedError("the dataflow block disappeared during legalization")
    return dataflow[rank]


def _record(rep: BlockRewriteReport, steps, plan: int) -> None:
    for s in steps:
        s.function, s.plan = rep.function, plan
    rep.sites.extend(steps)


def _if_better(func, k: int, rep: BlockRewriteReport, rules, merge, evaluate: Evaluator, max_passes: int,
               merges_first: bool = True):
    t0 = time.perf_counter()
    try:
        cur_eval = evaluate(func, k)
    except MemschedError as e:
        rep.status = f"skipped: {e}"
        return func
    rep.evaluations += 1
    rep.peak_before = rep.peak_after = cur_eval.peak
    cur, plans = func, 0
    for npass in range(max_passes):
        accepted = False
        for site in find_sites(cur, k, merge, merges_first):
            if not site_present(cur, k, site):
                continue
            tc = time.perf_counter()
            variants, reason = site_plans(cur, k, site, rules, cur_eval.order, all_depths=True)
            if variants is None:
                if npass == 0:
                    rep.skipped.append((site.name, reason))
                continue
            best = None
            for f_v, s_v in variants:
                try:
                    ev = evaluate(f_v, k)
                except MemschedError as e:
                    log.warning("IdentityRewrite: cannot evaluate a rewrite of %s: %s", site.name, e)
                    continue
                rep.evaluations += 1
                if best is None or ev.key < best[0].key:
                    best = (ev, f_v, s_v)
            if best is None:
                continue
            ev, f_v, s_v = best
            ok = ev.key < cur_eval.key
            depth = max(s.level for s in s_v)
            rep.candidates.append(Candidate(rep.function, k, site.name, s_v[0].inputs if site.kind == "concat"
                                            else tuple(v.name for v in site.vars), depth, len(s_v),
                                            cur_eval.peak, ev.peak, ok, round(time.perf_counter() - tc, 4)))
            if ok:
                _record(rep, s_v, plans)
                plans += 1
                cur, cur_eval, accepted = f_v, ev, True
        if not accepted:
            break
    if rep.sites and cur_eval.peak >= rep.peak_before:
        # the profile improved but the peak did not: keep the block as it was
        rep.status = f"unchanged: {plans} plans lowered the footprint profile but not the peak (reverted)"
        rep.sites = []
        for c in rep.candidates:
            c.accepted = False
        cur, cur_eval = func, None
    rep.peak_after = rep.peak_before if cur_eval is None else cur_eval.peak
    rep.seconds = round(time.perf_counter() - t0, 4)
    return cur


def _always(func, k: int, rep: BlockRewriteReport, rules, merge, evaluate: Evaluator | None):
    t0 = time.perf_counter()
    cur, plans = func, 0
    seen_skips = set()
    for _ in range(1 + len(func.body.blocks[k].bindings)):
        changed = False
        for site in find_sites(cur, k, merge):
            if not site_present(cur, k, site):
                continue
            variants, reason = site_plans(cur, k, site, rules, binding_positions(cur, k), all_depths=False)
            if variants is None:
                if site.name not in seen_skips:
                    seen_skips.add(site.name)
                    rep.skipped.append((site.name, reason))
                continue
            cur, steps = variants[-1]
            _record(rep, steps, plans)
            plans, changed = plans + 1, True
        if not changed:
            break
    if evaluate is not None:
        for which, f in (("peak_before", func), ("peak_after", cur)):
            try:
                setattr(rep, which, evaluate(f, k).peak)
                rep.evaluations += 1
            except MemschedError as e:
                rep.status = f"skipped: {e}"
    rep.seconds = round(time.perf_counter() - t0, 4)
    return cur


def rewrite_function(func, name: str = "main", *, rules=None, policy: str = "if-better", method: str | None = "beam",
                     time_limit: float | None = None, max_passes: int = 2, level: str = "kernel", target=None,
                     module=None, merges_first: bool = True, reports: list | None = None, **options):
    """``func`` with the identity rewrites of :func:`identity_rewrite` applied to each DataflowBlock.

    ``level`` is ``"kernel"`` or ``"operator"`` (one greedy search); ``module`` is
    the module ``func`` belongs to under ``name`` (needed to legalize it at
    kernel level; default: a module of ``func`` alone); ``merges_first`` visits
    duplicate groups before concat sites (else after).
    """
    if policy not in POLICIES:
        raise UnsupportedError(f"unknown rewrite policy '{policy}'; use one of {', '.join(POLICIES)}")
    rule_list, merge = _select(rules)
    reports = reports if reports is not None else []
    if policy == "if-better" and method is None:
        raise UnsupportedError("policy 'if-better' needs a scheduling method")
    evaluate = None
    if method is not None:
        module = tvm.IRModule({name: func}) if module is None else module
        evaluate = Evaluator(module, name, method, time_limit, options, level, target)
    cur = canonicalize(func)
    changed = False
    for k, block in enumerate(cur.body.blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        rep = BlockRewriteReport(name, k, level)
        if policy == "always":
            cur = _always(cur, k, rep, rule_list, merge, evaluate)
        else:
            cur = _if_better(cur, k, rep, rule_list, merge, evaluate, max_passes, merges_first)
        if rep.sites:
            rep.status, changed = "rewritten", True
        reports.append(rep)
    return cur if changed else func


def _select(rules) -> tuple[list, bool]:
    """(pattern rules, whether to merge duplicates) for a ``rules`` argument."""
    if rules is None:
        return get_rules(None), True
    if isinstance(rules, (str, Rule)):
        rules = [rules]
    rules = list(rules)
    merge = MERGE in rules
    return get_rules([r for r in rules if r != MERGE]), merge


def identity_rewrite(mod, rules: Iterable | None = None, policy: str = "if-better", method: str | None = "beam",
                     time_limit: float | None = None, max_passes: int = 2, level: str = "best", target=None,
                     **options):
    """Apply the identity rewrites to every Relax function of ``mod``; returns ``(module, RewriteReport)``.

    ``rules``: rule names or :class:`Rule` objects, plus ``"merge_duplicates"``
    (default: all of :data:`RULES` and duplicate merging). ``policy``:
    ``"if-better"`` keeps a site's rewrite only when the scheduled peak of the
    block goes down (see the module docstring), ``"always"`` applies every one.

    Evaluation (:class:`Evaluator`): ``level="kernel"`` scores a block after TVM's
    legalization and fusion for ``target`` (default llvm), ``"operator"`` scores
    the operator-level block directly (cheaper, but blind to fusion: it counts the
    copy of a concat that feeds an element-wise op, which TVM fuses away, so some
    of its rewrites only pay off at operator level). Greedy search is
    path-dependent and the two scores lead it to different results, so
    ``"best"`` (default) runs the searches of :data:`SEARCHES` and keeps the
    result with the lowest (kernel-level peak, operator-level peak, number of
    rewrites), provided it does not raise the kernel-level peak and lowers one
    of the two peaks; otherwise the function stays as it was. ``method``, ``time_limit`` (seconds per
    evaluation) and ``options`` configure the scheduler (with ``"always"``, only
    used to report peaks; ``method=None`` skips that). The default, the beam
    search of the ``dp`` scheduler without a time limit, is deterministic and
    fast; ``"auto"`` or ``"dp"`` with a time limit search harder but make the
    decisions depend on the machine's speed. ``max_passes`` bounds the greedy
    passes over the sites.
    """
    if policy not in POLICIES:
        raise UnsupportedError(f"unknown rewrite policy '{policy}'; use one of {', '.join(POLICIES)}")
    if level not in LEVELS:
        raise UnsupportedError(f"unknown evaluation level '{level}'; use one of {', '.join(LEVELS)}")
    rule_list, merge = _select(rules)
    names = [r.name for r in rule_list] + ([MERGE] if merge else [])
    report = RewriteReport(policy, str(method), names, level)
    new_mod = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        kw = dict(rules=rule_list + ([MERGE] if merge else []), policy=policy, method=method,
                  time_limit=time_limit, max_passes=max_passes, target=target, module=new_mod)
        if level == "best" and policy == "if-better":
            new_func = _best_of_levels(func, gv.name_hint, report, kw, options)
        else:
            new_func = rewrite_function(func, gv.name_hint, level="kernel" if level == "best" else level,
                                        reports=report.blocks, **kw, **options)
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    return new_mod, report


#: the greedy searches of ``level="best"``: (scoring level, duplicate groups visited first)
SEARCHES = (("operator", True), ("kernel", True), ("kernel", False))


def _search_name(level: str, merges_first: bool, merge: bool) -> str:
    return level if not merge else f"{level}, {'merges first' if merges_first else 'merges last'}"


def _best_of_levels(func, name: str, report: "RewriteReport", kw: dict, options: dict):
    """Rewrite ``func`` with the searches of :data:`SEARCHES`; keep the best function (see ``level="best"``)."""
    merge = MERGE in kw["rules"]
    results = {}
    for lv, first in SEARCHES:
        label = _search_name(lv, first, merge)
        if label in results:  # without duplicate merging the site order does not matter
            continue
        reps: list = []
        results[label] = (rewrite_function(func, name, level=lv, merges_first=first, reports=reps, **kw, **options),
                          reps)
    kernel = Evaluator(kw["module"], name, kw["method"], kw["time_limit"], options, "kernel", kw["target"])
    operator = Evaluator(kw["module"], name, kw["method"], kw["time_limit"], options, "operator")

    def score(f):
        """(kernel-level peak, operator-level peak) over the dataflow blocks of ``f``, None if not schedulable."""
        peaks = [0, 0]
        for k, block in enumerate(f.body.blocks):
            if isinstance(block, relax.DataflowBlock):
                try:
                    peaks = [max(peaks[0], kernel(f, k).peak), max(peaks[1], operator(f, k).peak)]
                except MemschedError:
                    return None
        return peaks

    base = score(func)
    best, best_key = None, None
    if base is not None:
        report.scores[name] = {"original": {"kernel_peak": base[0], "operator_peak": base[1], "rewrites": 0}}
        for label, (f, reps) in results.items():
            sc = score(f) if f is not func else base
            if sc is None:
                continue
            n = sum(len(r.sites) for r in reps)
            report.scores[name][label] = {"kernel_peak": sc[0], "operator_peak": sc[1], "rewrites": n}
            key = (sc[0], sc[1], n)
            if f is not func and sc[0] <= base[0] and (sc[0], sc[1]) < (base[0], base[1]) \
                    and (best_key is None or key < best_key):
                best, best_key = label, key
    report.chosen[name] = best or "original"
    if best is None:  # no search lowers the peak: report the first search, keep the function
        reps = next(iter(results.values()))[1]
        for rep in reps:
            if rep.sites:
                rep.status = "unchanged: the rewrites did not lower the kernel-level peak (reverted)"
            rep.sites, rep.peak_after = [], rep.peak_before
            for c in rep.candidates:
                c.accepted = False
        report.blocks.extend(reps)
        return func
    report.blocks.extend(results[best][1])
    return results[best][0]
