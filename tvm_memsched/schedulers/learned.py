"""``method="learned"``: a RESPECT-style pointer network, imitation- and RL-trained, run in numpy.

RESPECT (Yin et al., DAC 2023) trains a pointer network on small synthetic DAGs
to imitate an exact scheduler and then schedules large graphs in milliseconds.
This module is the *inference* side: the trained weights ship in
``schedulers/data/learned.npz`` and everything here is numpy (no PyTorch). The
training side is ``scripts/train_learned.py`` (PyTorch, optional).

Model (identical math in the training script)
---------------------------------------------
* **Node embeddings.** Static features per op (ASAP topological level, height to
  the sinks, position, in/out degree, parents' levels and positions, output,
  input and workspace bytes, its must-live lower bound, ancestor/descendant
  counts, is-output), all scale-free (bytes are divided by the graph's lower
  bound). A linear layer, then ``mp_rounds`` rounds of message passing over the
  DAG (mean over predecessors and over successors, residual).
* **Encoder.** An LSTM over the ops in topological order (RESPECT's encoder);
  its outputs are the per-op context vectors, its final state starts the decoder.
* **Decoder.** An LSTM cell fed the embedding of the op chosen last plus global
  live-set features (resident bytes, peak so far, unavoidable future peak, ops
  done, ready-set size); a glimpse (attention over the ready ops' contexts) and
  a pointer score each *ready* op from its context, its dynamic live-set
  features (stable footprint if run now, excess over the current budget, bytes
  it frees and allocates, resulting live bytes, partial-freeing credit, ops it
  unlocks, its footprint relative to the best ready op) and the decoder state.
* **Masking.** Only ready ops are scored, so every decode is a valid
  topological order (RESPECT repaired invalid outputs afterwards; this never
  produces them). Restricting the pointer to the ready set also makes a greedy
  decode O(n * ready) rather than O(n^2).

All live-set features are maintained incrementally with integer/numpy state
(no networkx), see :class:`DecodeState`.

Decoding: the greedy decode always runs; then beam search (``beam=W``, default
4 for ``method="learned"``: partial orders that reached the same executed-op set
are merged, keeping the lower peak, which is SERENITY's signature argument)
and/or sampling (``samples=K`` sampled decodes). Every candidate is
re-simulated and the lowest-peak order wins; ``beam=1, samples=0`` is the
plain greedy decode.

Example
-------
>>> from tvm_memsched.core import layered_dag, simulate
>>> g = layered_dag(40, seed=3)
>>> r = schedule_learned(g, beam=1)          # greedy decode only
>>> r.method, len(r.order) == g.num_ops, r.peak_bytes == simulate(g, r.order).peak
('learned', True, True)
>>> schedule_learned(g).peak_bytes <= r.peak_bytes      # beam search (width 4) + re-simulation
True
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, Sequence

import numpy as np

from ..core.bounds import must_live_bounds
from ..core.errors import MemschedError
from ..core.graph import Graph
from ..core.simulate import peak_of_ids
from .base import Deadline, ScheduleResult, graph_lower_bound, make_result
from .registry import register
from .weights import load_weights, params_digest, write_weights_npz

__all__ = ["GraphData", "DecodeState", "LearnedModel", "load_model", "default_weights_path",
           "learned_order", "schedule_learned", "auto_phase", "params_digest", "param_shapes",
           "random_params", "save_weights", "write_weights_npz",
           "STATIC_FEATURES", "DYNAMIC_FEATURES", "GLOBAL_FEATURES", "FEATURE_VERSION"]

#: bumped whenever a feature's definition changes (weights record the version they were trained on)
FEATURE_VERSION = 1
#: the ``format`` of the learned scheduler's weights files
WEIGHTS_FORMAT = "tvm_memsched.learned/1"

STATIC_FEATURES = (
    "level",            # ASAP topological level / depth
    "height",           # longest path to a sink / depth
    "position",         # position in the graph's topological order / n
    "slack",            # (depth - level - height) / depth
    "in_degree",        # log1p(#predecessor ops) / 2
    "out_degree",       # log1p(#successor ops) / 2
    "is_source",        # no predecessor op
    "parents_level",    # mean level of the parents / depth (0 for sources)
    "parents_level_max",
    "parents_position",  # mean position of the parents / n (RESPECT's parents' ids)
    "out_bytes_rel",    # output bytes / largest output bytes in the graph
    "out_bytes",        # output bytes / lower bound
    "in_bytes",         # input bytes / lower bound
    "workspace",        # workspace / lower bound
    "must_live",        # must-live lower bound of the op / graph lower bound
    "is_output",        # writes a graph output
    "consumers",        # log1p(#readers of its outputs) / 2
    "ancestors",        # #ancestors / n
    "descendants",      # #descendants / n
)

DYNAMIC_FEATURES = (
    "stable",           # stable footprint if run now / LB
    "excess",           # (stable - budget) / LB, budget = max(peak so far, unavoidable future peak)
    "raise",            # max(stable - peak so far, 0) / LB
    "within_budget",    # stable <= budget
    "delta_live",       # (live after - live now) / LB
    "freed",            # bytes it frees / LB
    "alloc",            # outputs + workspace / LB
    "credit",           # sum over its unpinned inputs of size / remaining readers, / LB
    "unlock",           # log1p(#successors it makes ready)
    "stable_vs_best",   # (stable - min stable over ready ops) / LB
    "live_vs_best",     # (live after - min live after over ready ops) / LB
    "level_vs_min",     # (level - min level over ready ops) / depth
)

GLOBAL_FEATURES = (
    "live",             # resident bytes now / LB
    "peak",             # peak so far / LB
    "future",           # max must-live bound over the ops not yet run / LB
    "budget",           # max(peak, future) / LB
    "done",             # ops run / n
    "ready",            # log1p(#ready ops) / 4
)

NS, ND, NG = len(STATIC_FEATURES), len(DYNAMIC_FEATURES), len(GLOBAL_FEATURES)


# --------------------------------------------------------------------------- graph preprocessing
class GraphData:
    """Static, position-indexed view of a graph for the model.

    Ops are renumbered by their position ``k`` in ``graph.topo``; ``ops[k]`` is
    the op id at position ``k``. Holds the static feature matrix ``x`` (n x NS),
    the predecessor/successor lists, and the per-op byte counts the decoder
    state needs.
    """

    def __init__(self, graph: Graph, lower: int | None = None):
        self.graph = graph
        n = graph.num_ops
        self.n = n
        topo = list(graph.topo)
        self.ops = np.asarray(topo, dtype=np.int64)
        pos = [0] * n
        for k, v in enumerate(topo):
            pos[v] = k
        self.preds = [sorted(pos[p] for p in graph.preds[v]) for v in topo]
        self.succs = [sorted(pos[s] for s in graph.succs[v]) for v in topo]
        size, pinned = graph.size, graph.pinned
        self.size = list(size)
        self.pinned = list(pinned)
        self.consumers = [tuple(pos[c] for c in cs) for cs in graph.consumers]
        self.op_in = [tuple(graph.op_inputs[v]) for v in topo]
        outb = np.array([graph.output_bytes[v] for v in topo], dtype=np.float64)
        ws = np.array([graph.workspace[v] for v in topo], dtype=np.float64)
        self.outb, self.ws = outb, ws
        self.alloc = outb + ws
        self.dead_out = [sum(size[t] for t in graph.op_outputs[v] if not graph.consumers[t] and not pinned[t])
                         for v in topo]
        self.live0 = float(sum(size[t] for t in graph.input_ids))
        lb = graph_lower_bound(graph) if lower is None else lower
        self.lower = lb
        self.scale = float(max(lb, 1))
        inv = 1.0 / self.scale
        ml = must_live_bounds(graph).astype(np.float64) if n else np.zeros(0)
        self.must_live = ml[self.ops] if n else ml
        # ops sorted by must-live bound, largest first: the decoder's "unavoidable future peak"
        self.ml_rank = [int(k) for k in np.argsort(-self.must_live, kind="stable")]

        level = [0] * n
        for k in range(n):
            ps = self.preds[k]
            if ps:
                level[k] = 1 + max(level[p] for p in ps)
        height = [0] * n
        for k in range(n - 1, -1, -1):
            ss = self.succs[k]
            if ss:
                height[k] = 1 + max(height[s] for s in ss)
        depth = max(1, max(level, default=0))
        self.level = np.array(level, dtype=np.float64) / depth
        anc = [0] * n
        for k in range(n):
            m = 0
            for p in self.preds[k]:
                m |= anc[p] | (1 << p)
            anc[k] = m
        desc = [0] * n
        for k in range(n - 1, -1, -1):
            m = 0
            for s in self.succs[k]:
                m |= desc[s] | (1 << s)
            desc[k] = m
        x = np.zeros((n, NS), dtype=np.float64)
        if n:
            maxout = float(max(outb.max(), 1.0))
            nn_ = float(n)
            for k in range(n):
                v = topo[k]
                ps = self.preds[k]
                x[k, 7] = sum(level[p] for p in ps) / len(ps) / depth if ps else 0.0
                x[k, 8] = max(level[p] for p in ps) / depth if ps else 0.0
                x[k, 9] = sum(ps) / len(ps) / nn_ if ps else 0.0
                x[k, 12] = sum(size[t] for t in graph.op_inputs[v]) * inv
                x[k, 15] = 1.0 if any(graph.is_output[t] for t in graph.op_outputs[v]) else 0.0
                x[k, 16] = math.log1p(sum(len(graph.consumers[t]) for t in graph.op_outputs[v])) / 2
                x[k, 17] = anc[k].bit_count() / nn_
                x[k, 18] = desc[k].bit_count() / nn_
            lv = np.array(level, dtype=np.float64)
            ht = np.array(height, dtype=np.float64)
            indeg = np.array([len(p) for p in self.preds], dtype=np.float64)
            outdeg = np.array([len(s) for s in self.succs], dtype=np.float64)
            x[:, 0] = lv / depth
            x[:, 1] = ht / depth
            x[:, 2] = np.arange(n) / nn_
            x[:, 3] = (depth - lv - ht) / depth
            x[:, 4] = np.log1p(indeg) / 2
            x[:, 5] = np.log1p(outdeg) / 2
            x[:, 6] = indeg == 0
            x[:, 10] = outb / maxout
            x[:, 11] = outb * inv
            x[:, 13] = ws * inv
            x[:, 14] = self.must_live * inv
        self.x = x
        # message-passing index arrays: edges (dst <- src) sorted by dst, for mean over preds / succs
        self.pred_agg = _segments(self.preds, n)
        self.succ_agg = _segments(self.succs, n)


def _segments(lists: list[list[int]], n: int):
    """(src indices, segment starts, rows with neighbours, 1/count per such row) for a mean aggregation."""
    rows = [k for k in range(n) if lists[k]]
    src = np.array([s for k in rows for s in lists[k]], dtype=np.int64)
    counts = np.array([len(lists[k]) for k in rows], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if rows else np.zeros(0, np.int64)
    return src, starts, np.array(rows, dtype=np.int64), 1.0 / np.maximum(counts, 1)


def _mean_agg(e: np.ndarray, agg) -> np.ndarray:
    src, starts, rows, inv = agg
    out = np.zeros_like(e)
    if len(rows):
        out[rows] = np.add.reduceat(e[src], starts, axis=0) * inv[:, None]
    return out


# --------------------------------------------------------------------------- decoder state
class DecodeState:
    """The live-set state of a partial schedule, updated incrementally per step.

    Positions (not op ids) throughout. ``ready`` lists the ops whose producers
    have all run, in the order they became ready. ``features()`` returns the
    ready ops, their dynamic features and the global features.
    """

    __slots__ = ("gd", "live", "peak", "ndone", "done", "ready", "remaining", "missing", "freed", "credit",
                 "unlock", "is_done", "ml_ptr", "future")

    def __init__(self, gd: GraphData, _copy: bool = False):
        self.gd = gd
        if _copy:
            return
        n = gd.n
        self.live = gd.live0
        self.peak = 0.0
        self.ndone = 0
        self.done = 0
        self.remaining = [len(c) for c in gd.consumers]
        self.missing = [len(p) for p in gd.preds]
        self.ready = [k for k in range(n) if not gd.preds[k]]
        freed = np.array(gd.dead_out, dtype=np.float64)
        credit = np.zeros(n, dtype=np.float64)
        size, pinned, rem = gd.size, gd.pinned, self.remaining
        for k in range(n):
            for t in gd.op_in[k]:
                if pinned[t]:
                    continue
                credit[k] += size[t] / rem[t]
                if rem[t] == 1:
                    freed[k] += size[t]
        self.freed, self.credit = freed, credit
        unlock = np.zeros(n, dtype=np.float64)
        for k in range(n):
            if len(gd.preds[k]) == 1:
                unlock[gd.preds[k][0]] += 1
        self.unlock = unlock
        self.is_done = bytearray(n)
        self.ml_ptr = 0
        self.future = float(gd.must_live[gd.ml_rank[0]]) if n else 0.0

    def copy(self) -> "DecodeState":
        c = DecodeState(self.gd, _copy=True)
        c.live, c.peak, c.ndone, c.done = self.live, self.peak, self.ndone, self.done
        c.ready = list(self.ready)
        c.remaining = list(self.remaining)
        c.missing = list(self.missing)
        c.freed, c.credit, c.unlock = self.freed.copy(), self.credit.copy(), self.unlock.copy()
        c.is_done = bytearray(self.is_done)
        c.ml_ptr, c.future = self.ml_ptr, self.future
        return c

    def stable_of(self, k: int) -> float:
        return self.live + self.gd.alloc[k]

    def features(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        gd = self.gd
        R = np.array(self.ready, dtype=np.int64)
        inv = 1.0 / gd.scale
        live, peak = self.live, self.peak
        budget = max(peak, self.future)
        stable = live + gd.alloc[R]
        after = live + gd.outb[R] - self.freed[R]
        lev = gd.level[R]
        f = np.empty((len(R), ND), dtype=np.float64)
        f[:, 0] = stable * inv
        f[:, 1] = (stable - budget) * inv
        f[:, 2] = np.maximum(stable - peak, 0.0) * inv
        f[:, 3] = stable <= budget
        f[:, 4] = (after - live) * inv
        f[:, 5] = self.freed[R] * inv
        f[:, 6] = gd.alloc[R] * inv
        f[:, 7] = self.credit[R] * inv
        f[:, 8] = np.log1p(self.unlock[R])
        f[:, 9] = (stable - stable.min()) * inv
        f[:, 10] = (after - after.min()) * inv
        f[:, 11] = lev - lev.min()
        g = np.array([live * inv, peak * inv, self.future * inv, budget * inv, self.ndone / gd.n,
                      math.log1p(len(R)) / 4], dtype=np.float64)
        return R, f, g

    def step(self, k: int) -> None:
        gd = self.gd
        stable = self.live + gd.alloc[k]
        if stable > self.peak:
            self.peak = float(stable)
        self.done |= 1 << k
        self.is_done[k] = 1
        self.ndone += 1
        self.ready.remove(k)
        self.live = float(self.live + gd.outb[k] - self.freed[k])
        size, pinned, rem, consumers, is_done = gd.size, gd.pinned, self.remaining, gd.consumers, self.is_done
        for t in gd.op_in[k]:
            r = rem[t] - 1
            rem[t] = r
            if pinned[t] or r == 0:
                continue
            s = size[t]
            d = s / r - s / (r + 1)
            for c in consumers[t]:
                if not is_done[c]:
                    self.credit[c] += d
                    if r == 1:
                        self.freed[c] += s
        missing = self.missing
        for s in gd.succs[k]:
            m = missing[s] - 1
            missing[s] = m
            if m == 0:
                self.ready.append(s)
            elif m == 1:
                for p in gd.preds[s]:
                    if not is_done[p]:
                        self.unlock[p] += 1
                        break
        rank = gd.ml_rank
        ptr = self.ml_ptr
        while ptr < gd.n and is_done[rank[ptr]]:
            ptr += 1
        self.ml_ptr = ptr
        self.future = float(gd.must_live[rank[ptr]]) if ptr < gd.n else 0.0


# --------------------------------------------------------------------------- model
_ZERO = np.zeros(1)


def _gate_consts(d: int):
    """sigmoid(x) = (tanh(x / 2) + 1) / 2: one tanh over all four LSTM gates (i, f, g, o)."""
    pre = np.full(4 * d, 0.5)
    pre[2 * d:3 * d] = 1.0
    off = np.full(4 * d, 0.5)
    off[2 * d:3 * d] = 0.0
    return pre, off


class LearnedModel:
    """The pointer network's numpy inference (weights from :func:`load_model`)."""

    def __init__(self, params: dict, config: dict):
        self.config = dict(config)
        self.meta: dict = {}
        self.d = d = int(config["d"])
        self.rounds = int(config["mp_rounds"])
        self.enc_lstm = bool(config.get("enc_lstm", True))
        self.glimpse = bool(config.get("glimpse", True))
        self.clip = float(config.get("clip", 10.0))
        self.p = p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
        self.pre, self.off = _gate_consts(d)
        # decoder input = [embedding of the previous op (d), global features (NG)]; pre-scaled for one tanh
        self.dec_Wih_e = np.ascontiguousarray(p["dec_Wih"][:, :d].T) * self.pre
        self.dec_Wgh = np.ascontiguousarray(np.concatenate([p["dec_Wih"][:, d:].T, p["dec_Whh"].T])) * self.pre
        self.dec_b = (p["dec_bih"] + p["dec_bhh"]) * self.pre
        self.enc_Whh = np.ascontiguousarray(p["enc_Whh"].T) * self.pre
        # one matvec gives both the glimpse query and the pointer's decoder term
        self.hq = np.ascontiguousarray(np.concatenate([p["g_Wq"], p["p_Wh"]], axis=1))

    # ---- encoder
    def encode(self, gd: GraphData) -> dict:
        p, d, n = self.p, self.d, gd.n
        e = gd.x @ p["emb_W"] + p["emb_b"]
        for r in range(self.rounds):
            m = e @ p[f"mp{r}_self"] + _mean_agg(e, gd.pred_agg) @ p[f"mp{r}_pred"] \
                + _mean_agg(e, gd.succ_agg) @ p[f"mp{r}_succ"] + p[f"mp{r}_b"]
            e = e + np.maximum(m, 0.0)
        h = np.zeros(d)
        c = np.zeros(d)
        ctx = np.zeros((n, d))
        if self.enc_lstm and n:
            xg = (e @ p["enc_Wih"].T + (p["enc_bih"] + p["enc_bhh"])) * self.pre
            Whh, pre, off = self.enc_Whh, self.pre, self.off
            d2, d3 = 2 * d, 3 * d
            tanh = np.tanh
            for k in range(n):
                s = tanh(xg[k] + h @ Whh) * pre + off
                c = s[d:d2] * c + s[:d] * s[d2:d3]
                h = s[d3:] * tanh(c)
                ctx[k] = h
        return {
            "e": e, "h0": h, "c0": c,
            "dec_in": e @ self.dec_Wih_e + self.dec_b,                   # n x 4d (pre-scaled, bias folded)
            "dec_start": p["dec_start"] @ self.dec_Wih_e + self.dec_b,  # 4d
            "gref": e @ p["g_We"] + ctx @ p["g_Wc"],                     # n x d (glimpse keys and values)
            "pref": e @ p["p_We"] + ctx @ p["p_Wc"] + p["p_b"],          # n x d (pointer, bias folded)
        }

    # ---- one decoder step
    def lstm(self, enc: dict, prev: int, g: np.ndarray, h: np.ndarray, c: np.ndarray):
        d = self.d
        xin = enc["dec_start"] if prev < 0 else enc["dec_in"][prev]
        s = np.tanh(xin + np.concatenate((g, h)) @ self.dec_Wgh) * self.pre + self.off
        c = s[d:2 * d] * c + s[:d] * s[2 * d:3 * d]
        return s[3 * d:] * np.tanh(c), c

    def logits(self, enc: dict, R: np.ndarray, dyn: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Unclipped pointer scores over the ready ops ``R`` (positions); monotone in the logits."""
        p, d = self.p, self.d
        hq = h @ self.hq
        if self.glimpse:
            keys = enc["gref"][R]
            z = np.tanh(keys + hq[:d]) @ p["g_v"]
            z = np.exp(z - z.max())
            q = (z @ keys) / z.sum()
        else:
            q = h
        dh = np.maximum(dyn @ p["dyn_W1"] + p["dyn_b1"], 0.0)
        return np.tanh(enc["pref"][R] + dh @ p["p_Wd"] + (q @ p["p_Wq"] + hq[d:])) @ p["p_v"]

    def scores(self, enc: dict, R: np.ndarray, dyn: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Log-probabilities over the ready ops ``R`` (positions)."""
        return self.log_softmax(self.logits(enc, R, dyn, h))

    # ---- decodes
    def log_softmax(self, raw: np.ndarray) -> np.ndarray:
        u = self.clip * np.tanh(raw)
        u = u - u.max()
        return u - math.log(np.exp(u).sum())

    def decode(self, gd: GraphData, enc: dict | None = None, *, rng: np.random.Generator | None = None,
               record: bool = False, forced: Sequence[int] | Callable | None = None,
               deadline: Deadline | None = None):
        """One decode. Greedy (argmax of the logits) when ``rng`` is None, sampled otherwise.

        ``forced`` (a sequence of positions, or a callable ``(state, R, logp) ->
        index into R``) overrides the choice (teacher forcing). Returns
        ``(positions, peak, logp_sum, records)``; ``logp_sum`` is None for a plain
        greedy decode (it is not needed there and costs a softmax per step); with
        ``record`` each step records ``(R, dyn, glob, chosen index, previous
        position, log-probabilities over R)``. When ``deadline`` expires (checked
        every 64 steps) the decode stops and returns None.
        """
        enc = self.encode(gd) if enc is None else enc
        st = DecodeState(gd)
        h, c = enc["h0"], enc["c0"]
        prev = -1
        seq: list[int] = []
        recs = [] if record else None
        need_lp = record or rng is not None or forced is not None
        total = 0.0 if need_lp else None
        for t in range(gd.n):
            if deadline is not None and t % 64 == 63 and deadline.expired():
                return None
            R, dyn, g = st.features()
            h, c = self.lstm(enc, prev, g, h, c)
            if len(R) == 1 and not record:
                j = 0
            else:
                raw = self.logits(enc, R, dyn, h)
                if not need_lp:
                    j = int(np.argmax(raw))
                else:
                    lp = self.log_softmax(raw)
                    if forced is not None:
                        j = (int(np.flatnonzero(R == forced[t])[0]) if not callable(forced)
                             else int(forced(st, R, lp)))
                    elif rng is None:
                        j = int(np.argmax(raw))
                    else:
                        pr = np.exp(lp)
                        j = min(int(np.searchsorted(np.cumsum(pr), rng.random() * pr.sum(), side="right")),
                                len(R) - 1)
                    total += float(lp[j])
                    if record:
                        recs.append((R, dyn, g, j, prev, lp))
            k = int(R[j])
            st.step(k)
            seq.append(k)
            prev = k
        return seq, int(st.peak) if gd.n else int(gd.live0), total, recs

    def beam_search(self, gd: GraphData, enc: dict, width: int, deadline: Deadline | None = None):
        """Beam search on the log-probability; beams reaching the same executed-op set are merged
        (the one with the lower peak survives). Returns the finished beams as (positions, peak, logp)."""
        beams = [(0.0, DecodeState(gd), enc["h0"], enc["c0"], -1, [])]
        for t in range(gd.n):
            if deadline is not None and t % 16 == 0 and deadline.expired():
                return []           # out of time: the beams are dropped (the greedy decode stands)
            cands: dict[int, tuple] = {}
            for b, (lp0, st, h, c, prev, seq) in enumerate(beams):
                R, dyn, g = st.features()
                h2, c2 = self.lstm(enc, prev, g, h, c)
                lp = self.log_softmax(self.logits(enc, R, dyn, h2)) if len(R) > 1 else _ZERO
                alloc = gd.alloc
                for j in range(len(R)):
                    k = int(R[j])
                    key = st.done | (1 << k)
                    peak = max(st.peak, st.live + alloc[k])
                    score = lp0 + float(lp[j])
                    old = cands.get(key)
                    if old is None or (peak, -score) < (old[0], -old[1]):
                        cands[key] = (peak, score, b, k, h2, c2)
            top = sorted(cands.values(), key=lambda v: -v[1])[:width]
            nxt = []
            for peak, score, b, k, h2, c2 in top:
                st = beams[b][1].copy()
                st.step(k)
                nxt.append((score, st, h2, c2, k, beams[b][5] + [k]))
            beams = nxt
        return [(seq, int(st.peak) if gd.n else int(gd.live0), lp0) for lp0, st, h, c, prev, seq in beams]


# --------------------------------------------------------------------------- weights
def param_shapes(config: dict) -> dict:
    """Names and shapes of the parameters (LSTM weights in PyTorch's layout, gates i, f, g, o)."""
    d = int(config["d"])
    shapes = {"emb_W": (NS, d), "emb_b": (d,)}
    for r in range(int(config["mp_rounds"])):
        shapes.update({f"mp{r}_self": (d, d), f"mp{r}_pred": (d, d), f"mp{r}_succ": (d, d), f"mp{r}_b": (d,)})
    shapes.update({
        "enc_Wih": (4 * d, d), "enc_Whh": (4 * d, d), "enc_bih": (4 * d,), "enc_bhh": (4 * d,),
        "dec_Wih": (4 * d, d + NG), "dec_Whh": (4 * d, d), "dec_bih": (4 * d,), "dec_bhh": (4 * d,),
        "dec_start": (d,), "dyn_W1": (ND, d), "dyn_b1": (d,),
        "g_We": (d, d), "g_Wc": (d, d), "g_Wq": (d, d), "g_v": (d,),
        "p_We": (d, d), "p_Wc": (d, d), "p_Wd": (d, d), "p_Wq": (d, d), "p_Wh": (d, d), "p_b": (d,), "p_v": (d,),
    })
    return shapes


def random_params(config: dict, seed: int = 0) -> dict:
    """Random parameters (uniform in +-1/sqrt(fan-in)), for tests and as the training start."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(config).items():
        fan_in = shape[0] if len(shape) == 2 and not name.endswith(("Wih", "Whh")) else (
            shape[1] if len(shape) == 2 else int(config["d"]))
        bound = 1.0 / math.sqrt(max(fan_in, 1))
        out[name] = rng.uniform(-bound, bound, size=shape)
    return out


def default_weights_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "learned.npz")


_MODEL_CACHE: dict[str, LearnedModel] = {}


def load_model(path: str | None = None) -> LearnedModel:
    """Load (and cache) the weights; checks the format, feature version, shapes and parameter hash."""
    return load_weights(path or default_weights_path(), LearnedModel, _MODEL_CACHE, format=WEIGHTS_FORMAT,
                        feature_version=FEATURE_VERSION, what="learned scheduler",
                        train="train them with scripts/train_learned.py", param_shapes=param_shapes)


def save_weights(path: str, params: dict, config: dict, extra_meta: dict | None = None) -> dict:
    """Write weights (float32) + metadata (config, feature version, hash) as a compressed npz."""
    return write_weights_npz(path, params, {"format": WEIGHTS_FORMAT, "feature_version": FEATURE_VERSION,
                                            "config": config, "static_features": list(STATIC_FEATURES),
                                            "dynamic_features": list(DYNAMIC_FEATURES),
                                            "global_features": list(GLOBAL_FEATURES)}, extra_meta)


# --------------------------------------------------------------------------- scheduling
def learned_order(graph: Graph, *, samples: int = 0, beam: int = 1, seed: int = 0,
                  deadline: Deadline | None = None, model: LearnedModel | None = None,
                  stats: dict | None = None) -> list[int]:
    """The best (lowest re-simulated peak) order of op ids among the model's decodes.

    Always runs the greedy decode; then ``beam`` > 1 runs a beam search and
    ``samples`` > 0 draws that many sampled decodes (seeded by ``seed``), while
    ``deadline`` allows.
    """
    model = model or load_model()
    gd = GraphData(graph)
    if gd.n == 0:
        return []
    enc = model.encode(gd)
    first = model.decode(gd, enc, deadline=deadline)
    if first is None:           # the time limit ran out before the model's own decode finished
        from .greedy import greedy_order

        order = greedy_order(graph)
        if stats is not None:
            stats.update(decodes=0, best_from="memory-greedy fallback (time limit)")
        return order
    seq, peak, _, _ = first
    best_seq, best_peak, best_from = seq, peak, "greedy"
    decodes = 1
    if beam > 1 and not (deadline is not None and deadline.expired()):
        for s, pk, _ in model.beam_search(gd, enc, beam, deadline):
            decodes += 1
            if pk < best_peak:
                best_seq, best_peak, best_from = s, pk, "beam"
    if samples > 0:
        rng = np.random.default_rng(seed)
        for _ in range(samples):
            if deadline is not None and deadline.expired():
                break
            sampled = model.decode(gd, enc, rng=rng, deadline=deadline)
            if sampled is None:
                break
            s, pk, _, _ = sampled
            decodes += 1
            if pk < best_peak:
                best_seq, best_peak, best_from = s, pk, "sample"
    order = [int(gd.ops[k]) for k in best_seq]
    if stats is not None:
        stats.update(decodes=decodes, greedy_peak=peak, best_from=best_from)
    return order


@register("learned", "RESPECT-style pointer network (imitation + RL trained; numpy inference)")
def schedule_learned(graph: Graph, *, time_limit: float | None = None, progress=None, samples: int = 0,
                     beam: int = 4, seed: int = 0, weights: str | None = None) -> ScheduleResult:
    """Schedule with the learned pointer network.

    ``samples``: extra sampled decodes; ``beam``: beam width (default 4; 1 = the greedy decode only);
    every decode is re-simulated and the lowest peak wins. ``time_limit`` stops
    the beam search / sampling early (the greedy decode always runs).
    ``weights``: a .npz from ``scripts/train_learned.py`` (default: the shipped one).
    """
    start = time.perf_counter()
    if samples < 0 or beam < 1:
        raise MemschedError(f"learned: samples must be >= 0 and beam >= 1, got samples={samples}, beam={beam}")
    model = load_model(weights)
    stats: dict = {"weights": model.meta.get("params_sha256", "")[:12]}
    order = learned_order(graph, samples=samples, beam=beam, seed=seed, deadline=Deadline(time_limit),
                          model=model, stats=stats)
    if progress:
        progress(f"learned: {stats['decodes']} decode(s), best from {stats['best_from']}")
    return make_result(graph, order, "learned", start, stats=stats)


def auto_phase(graph: Graph, deadline: Deadline, incumbent_order, proven_lower: int, progress=None):
    """An ``auto.EXTRA_PHASES`` entry: greedy + beam-4 decodes within a quarter of the time left.

    Returns ``(order ids or None, proven_lower)``; the learned scheduler proves
    nothing, so ``proven_lower`` is returned unchanged. ``None`` when the weights
    are missing (the phase is then a no-op).
    """
    try:
        model = load_model()
    except MemschedError:
        return None, proven_lower
    order = learned_order(graph, beam=4, deadline=deadline.share(0.25), model=model)
    if progress:
        progress(f"learned: peak {peak_of_ids(graph, order)}")
    return order, proven_lower
