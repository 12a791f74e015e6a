"""mp.verify_plan on CNN cases (issue 24): the audit tables, and the time of a 4-rank call.

Run from the repository root: ``python -m benchmarks.verify_plan``. For each case it prints
the audit table (collective bytes per layer and transition, memory per rank: predicted by
the cost model, measured in the program) and the wall-clock seconds of the whole call
(spawning the gloo processes, one training step in each and in this process, the
comparison). Targets: the 4-rank CNN under 60 s; collectives within 5%, memory within 10%.

Cases: ``cnn-4`` (a residual CNN, sample + spatial + channel splits on 4 ranks),
``bn-2`` (a residual CNN with batch-norms and a two-layer head, 2 ranks) and ``mlp-shared``
(a linear right after a ReLU with the same sample split: the one storage both keep for
backward is priced twice by the per-layer tables, see ``docs/runtime.md``).
"""

from __future__ import annotations

import importlib
import sys
import time

import torch
from torch import nn

import milp_parallel as mp


class Net(nn.Module):
    """A small CNN with a residual branch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        y = self.conv3(torch.relu(self.conv2(x)))
        x = self.pool(torch.relu(x + y))
        return self.fc(torch.flatten(x, 1))


class BNNet(nn.Module):
    """A residual CNN with batch-norms, average pools and a two-layer head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 1)
        self.pool = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        y = self.conv3(torch.relu(self.bn2(self.conv2(x))))
        x = self.gap(self.pool(torch.relu(x + y)))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


class MLP(nn.Module):
    """linear -> ReLU -> linear: the ReLU's output is the second linear's saved input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


#: name -> (model class name, input shape, devices, pinned configurations)
CASES = {
    "cnn-4": ("Net", (16, 3, 16, 16), 4,
              {"conv1": "n=2 h=2", "conv2": "c=2", "conv3": "h=2 w=2", "fc": "n=2 c=2"}),
    "bn-2": ("BNNet", (8, 3, 16, 16), 2,
             {"conv1": "c=2", "conv2": "serial", "conv3": "h=2", "pool": "n=2",
              "fc1": "c=2", "fc2": "n=2"}),
    "mlp-shared": ("MLP", (32, 64), 2, {"x": "n=2", "fc1": "n=2", "fc2": "n=2"}),
}


def run(name: str) -> float:
    """Audit one case, print its table; returns the seconds of the verify_plan call."""
    cls_name, shape, devices, fixed = CASES[name]
    # the class by its module's name, so the spawned ranks can unpickle it
    cls = getattr(importlib.import_module("benchmarks.verify_plan"), cls_name)
    torch.manual_seed(0)
    module, x = cls(), torch.randn(*shape)
    plan = mp.solve(mp.from_torch(module, x), "abci", devices=devices, solver="dp",
                    cross_check=False, fixed=fixed)
    start = time.perf_counter()
    audit = mp.verify_plan(plan, module, x, world_size=devices)
    seconds = time.perf_counter() - start
    print(f"== {name}: {cls_name} {shape} on {devices} ranks")
    print(audit)
    print("\nactivations per rank (KiB): predicted / measured / measured:predicted")
    for row in audit.memory:
        p, m = row.predicted["activations"], row.measured["activations"]
        print(f"  rank {row.rank}: {p / 1024:.1f} / {m / 1024:.1f} / {m / p:.3f}")
    print(f"max collective error {100 * audit.max_collective_error:.1f}%, max memory error "
          f"{100 * audit.max_memory_error:.1f}%; verify_plan {seconds:.1f} s\n")
    return seconds


def main(names=None) -> None:
    names = names or list(CASES)
    seconds = {n: run(n) for n in names}
    if "cnn-4" in seconds:
        print(f"verify_plan, 4 ranks (cnn-4): {seconds['cnn-4']:.1f} s (target < 60 s)")


if __name__ == "__main__":
    main(sys.argv[1:])
