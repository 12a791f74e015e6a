"""Predicted and simulated vs measured step time of PyTorch DDP on this machine's CPU.

Trains three small models data-parallel with ``torch.nn.parallel.DistributedDataParallel``
(gloo, 2 processes, 1 thread each, SGD with momentum, DDP's default 25 MB buckets) and times
the steps, back to back after one barrier as a training loop runs them; the median of the
slowest process's step time after warm-up is ``measured_s``.
The prediction does not look at those timings: it comes from a calibration of this machine
(``milp_parallel.measure.calibrate``: the medians of gloo all-reduce / all-gather / ping-pong
timings, each kind fitted to its own alpha-beta pair, the device's speeds, how much an
all-reduce overlaps compute, and the per-op profile of each model's data-parallel tiles
timed by 2 processes at once, as the job runs them, with what each layer's weights add to
the optimizer's step; DDP's own time per layer and per step, measured on two chains of tiny
layers, ``milp_parallel.runtime.overhead``), a ``CostModel`` on that topology (with
DDP's default reducer, which copies each gradient into its bucket and back), and the
data-parallel assignment of each model's problem: ``predicted_s`` is the separable objective,
``simulated_s`` the step simulator's time
(``milp_parallel.costs.simulator``).

The models are torch modules written here and imported with ``milp_parallel.from_torch``
(so the graph is the module that runs): LeNet-5, a small ResNet (CIFAR-style, three stages of
one basic block) and a small MLP.

Run from the repository root (about 2-4 minutes on a 2-core machine)::

    .venv/bin/python -m benchmarks.ddp_cpu --csv ddp_cpu.csv
    .venv/bin/python -m benchmarks.ddp_cpu --cluster calibrated.json --csv out.csv

Prints one row per model: ``model, measured_s, predicted_s, simulated_s`` and the errors;
``--csv`` writes those columns and ``spread, machine, date`` (committed as
``benchmarks/results/ddp_cpu.csv``).
The machine may be shared: the load average is printed before and after, and a noisy run
shows in the spread column (interquartile range / median of the measured steps). The speed of
a shared machine drifts between seconds-apart runs (a model's local step measured 37-59 ms in
five runs within ten minutes), so each model is predicted and measured back to back in
``--rounds`` rounds, and each column is the median over them.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import milp_parallel as mp
from benchmarks.instances import machine
from milp_parallel.costs import CostModel
from milp_parallel.costs.build import build
from milp_parallel.costs.simulator import simulate_assignment
from milp_parallel.machine.topology import Topology
from milp_parallel.measure.calibrate import calibrate, load_report, profile_concurrently
from milp_parallel.runtime.overhead import measure_program_overhead

WORLD = 2


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.layer1 = Block(16, 16, 1)
        self.layer2 = Block(16, 32, 2)
        self.layer3 = Block(32, 64, 2)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.adaptive_avg_pool2d(x, 1)
        return self.fc(torch.flatten(x, 1))


class MLP(nn.Module):
    def __init__(self, width=1024):
        super().__init__()
        self.fc1 = nn.Linear(784, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


#: name -> (module factory, per-sample input shape, global batch)
MODELS = {"lenet5": (LeNet5, (1, 32, 32), 64),
          "small_resnet": (SmallResNet, (3, 32, 32), 32),
          "mlp": (MLP, (784,), 128)}


def graph_of(name: str):
    """The model's LayerGraph (imported from the torch module) with a loss layer."""
    make, shape, batch = MODELS[name]
    torch.manual_seed(0)
    g = mp.from_torch(make(), torch.randn(batch, *shape))
    g.loss("loss", g.output_names[0])
    g.name = name
    return g


# ---------------------------------------------------------------------- measuring DDP
def _ddp_worker(rank, init, name, steps, warmup, queue):   # pragma: no cover - subprocess
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    make, shape, batch = MODELS[name]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    local = batch // WORLD
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(local, *shape, generator=g)
    y = torch.randint(0, 10, (local,), generator=g)
    times = []
    dist.barrier()      # once: steps run back to back, as a training loop runs them
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    queue.put((rank, times))
    dist.destroy_process_group()


def measure_ddp(name: str, steps: int, warmup: int) -> np.ndarray:
    """Step times (the slower process's, per step) of DDP training of ``name``."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "rdzv")
        procs = [ctx.Process(target=_ddp_worker, args=(r, init, name, steps, warmup, queue))
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        got = dict(queue.get(timeout=900) for _ in procs)
        for p in procs:
            p.join(timeout=30)
    return np.max([np.asarray(got[r]) for r in range(WORLD)], axis=0)


# ---------------------------------------------------------------------- predicting
def predict(name: str, topo: Topology, *, repeats: int, overlap: float,
            overhead: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """``(predicted_s, simulated_s)`` of data parallelism on the calibrated topology."""
    g = graph_of(name)
    # the tiles of the data-parallel assignment: every layer split by samples on WORLD
    tiles = []
    for lay in g.layers:
        shape = list(lay.output_shape)
        shape[0] = -(-shape[0] // WORLD)
        tiles.append((lay, tuple(shape)))
    # timed by WORLD processes at once, as the job runs them (they share the machine)
    # (and what each tile's weights add to the step of SGD with momentum)
    table = profile_concurrently(g, tiles, world_size=WORLD, threads=1, repeats=repeats,
                                 optimizer="momentum")
    # SGD with momentum; the overlap the calibration measured (the simulator shares the
    # cores between an overlapped all-reduce and compute at that rate); DDP's default
    # reducer, which copies each gradient into its bucket and back
    # DDP's own time per layer and per step, measured on chains of tiny layers
    cm = CostModel(topo, profile=table, optimizer_state_factor=1.0, sync_overlap=overlap,
                   bucket_copies=2, layer_overhead_seconds=overhead[0],
                   step_overhead_seconds=overhead[1])
    built = build(g, topo, cost_model=cm, memory_limit=None)
    p = built.problem
    a = [p.config_labels[v].index(f"n={WORLD}") if f"n={WORLD}" in p.config_labels[v] else 0
         for v in range(p.n_nodes)]
    predicted = float(p.evaluate(a).cost)
    simulated = float(simulate_assignment(built, a).step_seconds)
    return predicted, simulated


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", help="write the rows to this CSV file")
    ap.add_argument("--cluster", help="a calibrated topology JSON (default: calibrate now)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=15, help="profile repeats per tile")
    ap.add_argument("--rounds", type=int, default=3,
                    help="back-to-back predict + measure rounds per model (medians kept)")
    args = ap.parse_args()
    print(f"load average before: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.cluster:
        topo = Topology.load(args.cluster)
        report = load_report(args.cluster) or {"overlap_efficiency": 1.0}
    else:
        topo, report = calibrate(None, world_size=WORLD, threads=1)
        fit = report["fit"]
        fits = ", ".join(f"{k} {f['alpha_s'] * 1e6:.0f} us + {f['bandwidth_bytes_per_s'] / 1e9:.2f}"
                         f" GB/s (RMS {100 * f['rms_relative_error']:.0f}%)"
                         for k, f in report["fits_by_kind"].items() if "error" not in f)
        print(f"calibrated: {fits}; one pair for all: RMS "
              f"{100 * fit['rms_relative_error']:.0f}%; device {topo.device.peak_flops / 1e9:.1f}"
              f" GFLOP/s, {topo.device.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
              f"{topo.device.kernel_launch_s * 1e6:.1f} us per op; all-reduce overlap "
              f"efficiency {report['overlap_efficiency']:.2f}")
    overlap = float(report["overlap_efficiency"])
    over = measure_program_overhead(topo, program="ddp", world_size=WORLD, optimizer="momentum",
                                    cost_options={"bucket_copies": 2, "sync_overlap": overlap})
    print(f"DDP's own time: {over.layer_seconds * 1e6:.1f} us per layer, "
          f"{over.step_seconds * 1e6:.1f} us per step")
    rows = []
    for name in args.models.split(","):
        got = []
        for _ in range(max(1, args.rounds)):
            # back to back, so that both see the same load on a shared machine
            pred, sim = predict(name, topo, repeats=args.repeats, overlap=overlap,
                                overhead=(over.layer_seconds, over.step_seconds))
            t = measure_ddp(name, args.steps, args.warmup)
            med = float(np.median(t))
            q1, q3 = np.percentile(t, [25, 75])
            got.append((med, pred, sim, float((q3 - q1) / med)))
        med, pred, sim, spread = (float(x) for x in np.median(np.asarray(got), axis=0))
        rows.append({"model": name, "measured_s": med, "predicted_s": pred,
                     "simulated_s": sim, "spread": spread})
    print(f"load average after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'model':<14}{'measured_s':>12}{'predicted_s':>13}{'simulated_s':>13}"
          f"{'pred err':>10}{'sim err':>9}{'spread':>8}")
    for r in rows:
        pe = r["predicted_s"] / r["measured_s"] - 1
        se = r["simulated_s"] / r["measured_s"] - 1
        print(f"{r['model']:<14}{r['measured_s']:>12.5f}{r['predicted_s']:>13.5f}"
              f"{r['simulated_s']:>13.5f}{100 * pe:>9.1f}%{100 * se:>8.1f}%"
              f"{100 * r['spread']:>7.0f}%")
    if args.csv:
        stamp = {"machine": machine(), "date": datetime.date.today().isoformat()}
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["model", "measured_s", "predicted_s",
                                              "simulated_s", "spread", "machine", "date"])
            w.writeheader()
            for r in rows:
                w.writerow({**r, **stamp})


if __name__ == "__main__":
    main()
