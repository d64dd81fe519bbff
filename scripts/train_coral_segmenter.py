#!/usr/bin/env python3
"""Train the learned Coral segmenter and write ``tvm_memsched/tflite/data/coral_segmenter.npz``.

Pipeline (seeded, CPU):

1. **Synthetic graphs and exact labels.** :func:`tvm_memsched.core.coral_dag`
   graphs of 30-60 ops (layered int8 CNN-like DAGs with MACs and parameter
   bytes), each with a random stage count K in 2..6, labelled by the exact
   segmentation ``tflite.coral.segment(g, K, free_order=True)`` (the fixed-order
   DP, then CP-SAT over all orders with a deterministic time limit, not started
   from any learned solution); only
   labels CP-SAT proves optimal are kept. Labels are cached in ``--out``.
2. **Imitation.** The MLP of :mod:`tvm_memsched.tflite.coral.learned` is
   trained with the binary cross-entropy of ``[stage(v) > j]`` against the
   exact stage of every op, for every boundary ``j`` (Adam, mini-batches of
   graphs). Inputs are standardised with the training set's mean and deviation,
   which ship with the weights.
3. **Selection.** Every epoch the numpy decoder (the code users run: greedy
   decode, the exact window polish, no samples) segments held-out graphs; the
   weights with the lowest mean gap to the exact optimum are saved, with the
   config, timings, label statistics and a parameter hash.

    python scripts/train_coral_segmenter.py --out /tmp/coral-train            # full run (~15 min, 2 cores)
    python scripts/train_coral_segmenter.py --out /tmp/coral-quick --quick    # smoke run (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import random
import sys
import time
from multiprocessing import Pool

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.core import coral_dag  # noqa: E402
from tvm_memsched.tflite.coral import learned as CL  # noqa: E402
from tvm_memsched.tflite.coral import DEFAULT_COST_MODEL, segment  # noqa: E402


def instance(seed: int, n_range=(30, 60)) -> tuple:
    """``(graph, K)`` of training instance ``seed``."""
    rng = random.Random(1_000_003 * seed + 17)
    n = rng.randint(*n_range)
    return coral_dag(n, seed), rng.randint(2, 6)


def _label(job):
    seed, n_range, det_time = job
    g, k = instance(seed, n_range)
    s = segment(g, k, free_order=True, deterministic_time=det_time, learned_start=False)   # independent of any model
    return {"seed": seed, "n_range": n_range, "k": k, "optimal": s.optimal, "bottleneck_ms": s.bottleneck_ms,
            "dp_ms": s.stats["dp_bottleneck_ms"], "labels": s.labels(), "seconds": s.seconds}


def make_labels(name: str, seeds: list, n_range, det_time: float, out: str, workers: int, log) -> list:
    path = os.path.join(out, f"labels-{name}-{len(seeds)}-{seeds[0]}-{n_range[0]}-{n_range[1]}-{det_time}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = pickle.load(f)
        log(f"{name}: {len(data)} labels from the cache {path}")
        return data
    t0 = time.perf_counter()
    data = []
    jobs = [(s, n_range, det_time) for s in seeds]
    with Pool(workers) as pool:
        for i, d in enumerate(pool.imap(_label, jobs, chunksize=4)):
            data.append(d)
            if (i + 1) % 100 == 0 or i + 1 == len(jobs):
                log(f"{name}: labelled {i + 1}/{len(jobs)} graphs ({time.perf_counter() - t0:.0f} s)")
    with open(path, "wb") as f:
        pickle.dump(data, f)
    return data


def rows_of(d: dict) -> tuple:
    g, k = instance(d["seed"], tuple(d["n_range"]))
    x = CL.segmenter_features(g, k)
    st = np.array([d["labels"][op.name] for op in g.ops])
    y = (st[:, None] > np.arange(k - 1)[None, :]).astype(np.float32).reshape(-1)
    return x.astype(np.float32), y


def validate(params: dict, config: dict, data: list) -> dict:
    model = CL.SegmenterModel(params, config)
    gaps, raw = [], []
    for d in data:
        g, k = instance(d["seed"], tuple(d["n_range"]))
        s = CL.segment_learned(g, k, model=model, samples=0)   # greedy decode, default polish window
        gaps.append(s.bottleneck_ms / d["bottleneck_ms"] - 1)
        raw.append(s.stats["raw_bottleneck_ms"] / d["bottleneck_ms"] - 1)
    return {"mean_gap": float(np.mean(gaps)), "worst_gap": float(np.max(gaps)),
            "mean_raw_gap": float(np.mean(raw)), "optimal_share": float(np.mean(np.array(gaps) <= 1e-9))}


def reinforce(args, net, load, export, train, val, tx, ty, config, best, best_params, history, log):
    """Self-critical REINFORCE after imitation.

    The policy draws every bit ``[stage(v) > j]`` from ``Bernoulli(sigmoid(logit))``; the bits, as hard
    logits, go through the package's decoder (Kahn order, Viterbi cut, exact window polish), and the reward is
    the bottleneck the cost model gives, relative to the exact optimum. The greedy decode of the current
    logits is the baseline; the imitation loss stays as a regulariser (``--rl-il-weight``).
    """
    import torch

    from tvm_memsched.tflite.coral import PS_PER_MS, StageCosts

    load(best_params)
    opt = torch.optim.Adam(net.parameters(), lr=args.rl_lr)
    gen = torch.Generator().manual_seed(args.seed)
    insts = []
    for d in train:
        g, k = instance(d["seed"], tuple(d["n_range"]))
        insts.append((g, k, StageCosts(g, DEFAULT_COST_MODEL), d["bottleneck_ms"] * PS_PER_MS))
    rng = random.Random(args.seed + 1)
    t0 = time.perf_counter()
    for epoch in range(args.rl_epochs):
        idx = list(range(len(insts)))
        rng.shuffle(idx)
        adv_sum, better = 0.0, 0
        for b0 in range(0, len(idx), args.batch):
            terms = []
            for i in idx[b0:b0 + args.batch]:
                g, k, costs, exact = insts[i]
                n = g.num_ops
                logits = net(tx[i])[:, 0]
                lg = logits.detach().numpy().reshape(n, k - 1)
                base = CL.decode(g, lg, k, costs, n)[3]
                probs = torch.sigmoid(logits.detach())
                for _ in range(args.rl_samples):
                    bits = torch.bernoulli(probs, generator=gen)
                    ps = CL.decode(g, (bits.numpy() * 16.0 - 8.0).reshape(n, k - 1), k, costs, n)[3]
                    adv = (base - ps) / exact
                    adv_sum += adv
                    better += ps < base
                    if adv != 0:
                        logp = (bits * torch.nn.functional.logsigmoid(logits)
                                + (1 - bits) * torch.nn.functional.logsigmoid(-logits)).sum()
                        terms.append(-adv * logp)
                terms.append(args.rl_il_weight * torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, ty[i]) * n)
            loss = torch.stack(terms).sum() / len(idx[b0:b0 + args.batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
        params = export()
        v = validate(params, config, val)
        v.update(epoch=f"rl{epoch + 1}", seconds=round(time.perf_counter() - t0, 1),
                 better_than_greedy=better / (len(idx) * args.rl_samples))
        history.append(v)
        log(f"RL epoch {epoch + 1}/{args.rl_epochs}: samples beating the greedy decode "
            f"{100 * v['better_than_greedy']:.1f}%, validation gap mean {100 * v['mean_gap']:.2f}% "
            f"(raw {100 * v['mean_raw_gap']:.2f}%), worst {100 * v['worst_gap']:.1f}% ({v['seconds']:.0f} s)")
        if v["mean_gap"] < best["mean_gap"]:
            best, best_params = v, params
    return best, best_params


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="work directory (label cache, log)")
    ap.add_argument("--weights", default=CL.default_segmenter_path(), help="where to write the trained weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="processes for labelling")
    ap.add_argument("--graphs", type=int, default=1500)
    ap.add_argument("--val-graphs", type=int, default=120)
    ap.add_argument("--det-time", type=float, default=4.0, help="CP-SAT deterministic time limit per label")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16, help="graphs per mini-batch")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--rl-epochs", type=int, default=6, help="REINFORCE epochs after imitation (0: none)")
    ap.add_argument("--rl-samples", type=int, default=4, help="sampled decodes per graph and RL step")
    ap.add_argument("--rl-lr", type=float, default=3e-4)
    ap.add_argument("--rl-il-weight", type=float, default=0.5, help="imitation loss weight during RL")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.graphs, args.val_graphs, args.epochs, args.det_time, args.rl_epochs = 60, 12, 3, 1.0, 1
    os.makedirs(args.out, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    logf = open(os.path.join(args.out, "train.log"), "a", encoding="utf-8")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    t_start = time.perf_counter()
    base = 10_000 * args.seed
    train = make_labels("train", list(range(base, base + args.graphs)), (30, 60), args.det_time, args.out,
                        args.workers, log)
    val = make_labels("val", list(range(base + 900_000, base + 900_000 + args.val_graphs)), (30, 60),
                      args.det_time, args.out, args.workers, log)
    t_label = time.perf_counter() - t_start
    train = [d for d in train if d["optimal"]]
    val = [d for d in val if d["optimal"]]
    log(f"{len(train)} training and {len(val)} validation graphs with proven-optimal labels "
        f"(labelling took {t_label:.0f} s)")
    samples = [rows_of(d) for d in train]
    allx = np.concatenate([x for x, _ in samples])
    mean = allx.mean(axis=0)
    std = allx.std(axis=0) + 1e-6
    config = {"layers": args.layers, "hidden": args.hidden}

    layers = []
    d_in = CL.N_IN
    for _ in range(args.layers):
        layers += [torch.nn.Linear(d_in, args.hidden), torch.nn.ReLU()]
        d_in = args.hidden
    layers.append(torch.nn.Linear(d_in, 1))
    net = torch.nn.Sequential(*layers).double()
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    tx = [torch.from_numpy(((x - mean) / std).astype(np.float64)) for x, _ in samples]
    ty = [torch.from_numpy(y.astype(np.float64)) for _, y in samples]

    def export() -> dict:
        p = {"in_mean": mean, "in_std": std}
        lin = [m for m in net if isinstance(m, torch.nn.Linear)]
        for i, m in enumerate(lin[:-1]):
            p[f"W{i}"] = m.weight.detach().numpy().T.copy()
            p[f"b{i}"] = m.bias.detach().numpy().copy()
        p["Wout"] = lin[-1].weight.detach().numpy()[0].copy()
        p["bout"] = np.asarray(lin[-1].bias.detach().numpy()[0])
        return p

    def load(p: dict) -> None:
        lin = [m for m in net if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            for i, m in enumerate(lin[:-1]):
                m.weight.copy_(torch.from_numpy(np.asarray(p[f"W{i}"]).T.copy()))
                m.bias.copy_(torch.from_numpy(np.asarray(p[f"b{i}"])))
            lin[-1].weight.copy_(torch.from_numpy(np.asarray(p["Wout"])[None, :].copy()))
            lin[-1].bias.copy_(torch.from_numpy(np.asarray(p["bout"]).reshape(1)))

    rng = random.Random(args.seed)
    best, best_params, history = None, None, []
    t_train = time.perf_counter()
    for epoch in range(args.epochs):
        idx = list(range(len(tx)))
        rng.shuffle(idx)
        tot = 0.0
        for b0 in range(0, len(idx), args.batch):
            bi = idx[b0:b0 + args.batch]
            x = torch.cat([tx[i] for i in bi])
            y = torch.cat([ty[i] for i in bi])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x)[:, 0], y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(bi)
        sched.step()
        params = export()
        v = validate(params, config, val)
        v.update(epoch=epoch + 1, loss=tot / len(idx), seconds=round(time.perf_counter() - t_train, 1))
        history.append(v)
        log(f"epoch {epoch + 1}/{args.epochs}: loss {v['loss']:.4f}, validation gap mean "
            f"{100 * v['mean_gap']:.2f}% (raw {100 * v['mean_raw_gap']:.2f}%), worst {100 * v['worst_gap']:.1f}%, "
            f"optimal {100 * v['optimal_share']:.0f}%")
        if best is None or v["mean_gap"] < best["mean_gap"]:
            best, best_params = v, params
    t_il = time.perf_counter() - t_train
    if args.rl_epochs:
        best, best_params = reinforce(args, net, load, export, train, val, tx, ty, config, best, best_params,
                                      history, log)
    meta = {"training": {"args": vars(args), "train_graphs": len(train), "val_graphs": len(val),
                         "imitation_seconds": round(t_il, 1),
                         "label_seconds": round(t_label, 1),
                         "train_seconds": round(time.perf_counter() - t_train, 1),
                         "total_seconds": round(time.perf_counter() - t_start, 1), "best": best,
                         "history": history, "cost_model": DEFAULT_COST_MODEL.to_dict(),
                         "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version()}}
    CL.save_segmenter(args.weights, best_params, config, meta)
    log(f"best epoch {best['epoch']}: validation gap mean {100 * best['mean_gap']:.2f}%, worst "
        f"{100 * best['worst_gap']:.1f}%; wrote {args.weights} ({os.path.getsize(args.weights)} bytes) in "
        f"{time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
