"""Time mp.verify_plan on a 4-rank CNN case (issue 24; target: under 60 s on this machine).

Run from the repository root: ``python -m benchmarks.verify_plan``. Prints the audit table
and the wall-clock seconds of the whole call (spawning 4 gloo processes, one training step
in each and in this process, the comparison).
"""

from __future__ import annotations

import importlib
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


FIXED = {"conv1": "n=2 h=2", "conv2": "c=2", "conv3": "h=2 w=2", "fc": "n=2 c=2"}


def main() -> None:
    # the class by its module's name, so the spawned ranks can unpickle it
    net_class = importlib.import_module("benchmarks.verify_plan").Net
    torch.manual_seed(0)
    module, x = net_class(), torch.randn(16, 3, 16, 16)
    plan = mp.solve(mp.from_torch(module, x), "abci", devices=4, solver="dp",
                    cross_check=False, fixed=FIXED)
    start = time.perf_counter()
    audit = mp.verify_plan(plan, module, x, world_size=4)
    seconds = time.perf_counter() - start
    print(audit)
    print(f"\nverify_plan, 4 ranks: {seconds:.1f} s (target < 60 s)")


if __name__ == "__main__":
    main()
