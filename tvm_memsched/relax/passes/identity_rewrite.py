"""The ``IdentityRewrite`` pass: exact graph rewrites (:mod:`tvm_memsched.relax.rewrite`) where they lower the
scheduled peak.

Example
-------
>>> import tvm
>>> isinstance(tvm.transform.Sequential([IdentityRewrite(policy="always")]), tvm.transform.Pass)
True
"""

from __future__ import annotations

import tvm

from ..rewrite import identity_rewrite

__all__ = ["IdentityRewrite"]


@tvm.transform.module_pass(opt_level=0, name="IdentityRewrite")
class IdentityRewrite:
    """Rewrite concat patterns into mathematically identical ones with smaller peaks.

    Run at operator level (right after import, before legalization), e.g. in a
    ``tvm.transform.Sequential`` before :class:`MemoryAwareReorder`. The rules and
    the policies are described in :mod:`tvm_memsched.relax.rewrite`; after the
    pass has run, ``report`` is a :class:`~tvm_memsched.relax.rewrite.RewriteReport`
    (the rewritten sites and the scheduled peak of every block before and after).

    Parameters
    ----------
    rules : list of str, optional
        Rule names and ``"merge_duplicates"`` (default: all).
    policy : {"if-better", "always"}
        Keep a rewrite only where the scheduled peak goes down, or apply every one.
    method : str
        Scheduler used to evaluate blocks (default ``"beam"``: deterministic and
        fast; ``"auto"``, ``"dp"``, ... with a ``time_limit`` search harder).
    time_limit : float, optional
        Seconds per evaluation.
    max_passes : int
        Greedy passes over the sites (``"if-better"``).
    level : {"best", "kernel", "operator"}
        Score blocks after TVM's legalization and fusion, as they are, or run
        both searches and keep the better result (default).
    target : Target, optional
        Target for the legalization (default: the current target, else llvm).
    **options
        Passed to the scheduler (e.g. ``state_limit`` for ``"dp"``).
    """

    def __init__(self, rules=None, policy: str = "if-better", method: str = "beam",
                 time_limit: float | None = None, max_passes: int = 2, level: str = "best", target=None,
                 **options):
        self.rules, self.policy, self.method = rules, policy, method
        self.time_limit, self.max_passes, self.options = time_limit, max_passes, options
        self.level, self.target = level, target
        self.report = None

    def transform_module(self, mod, ctx):
        target = self.target if self.target is not None else tvm.target.Target.current(allow_none=True)
        new_mod, self.report = identity_rewrite(mod, rules=self.rules, policy=self.policy, method=self.method,
                                                time_limit=self.time_limit, max_passes=self.max_passes,
                                                level=self.level, target=target, **self.options)
        return new_mod
