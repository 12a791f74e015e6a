"""Layer-wise plans run: mp.verify_plan on real gloo processes (issue 24).

A small CNN with a residual branch, planned with pinned sample, channel, spatial (h, w, both)
and mixed configurations, layers on fewer devices than the world, at world sizes 2 and 4;
one training step of the parallel program against the single-process one: outputs, loss and
gradients within 1e-4, every layer's and transition's collective bytes within 5% of what the
plan's cost model prices, parameters, gradients and optimizer state exactly and the
activations saved for backward within 10% per rank (the memory rows of ``CostModel``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import milp_parallel as mp  # noqa: E402
from milp_parallel.costs import CostModel  # noqa: E402
from milp_parallel.errors import PlanMismatchError  # noqa: E402
from milp_parallel.inputs import load_cluster  # noqa: E402
from milp_parallel.runtime import PlanAudit, verify_plan  # noqa: E402
from milp_parallel.runtime.layerwise import check_plan_fits  # noqa: E402


class ResNetlet(nn.Module):
    """conv -> relu -> [conv -> relu -> conv] + skip -> relu -> pool -> flatten -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 8)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        y = self.conv3(torch.relu(self.conv2(x)))
        x = self.pool(torch.relu(x + y))
        return self.fc(torch.flatten(x, 1))


class BNResNetlet(nn.Module):
    """conv -> bn -> relu -> [conv -> bn -> relu -> conv] + skip -> relu -> avg pool ->
    global average pool -> flatten -> linear -> relu -> dropout-free linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        # no bias before a batch-norm: its gradient is 0 in exact arithmetic, and rounding
        # noise relative to 0 is no test of the program
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 8, 1)
        self.pool = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        y = self.conv3(torch.relu(self.bn2(self.conv2(x))))
        x = self.gap(self.pool(torch.relu(x + y)))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


class Downsample(nn.Module):
    """A strided residual block: conv(stride 2) -> relu -> conv(dilation 2) + 1x1 conv
    (stride 2) shortcut -> relu -> max pool (padded) -> flatten -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.short = nn.Conv2d(3, 8, 1, stride=2)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(y + self.short(x)))
        return self.fc(torch.flatten(x, 1))


class Other(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return self.body(x)


def _case(devices: int, fixed: dict, model=ResNetlet, batchnorm_stats: str = "local"):
    torch.manual_seed(0)
    module = model()
    x = torch.randn(4, 3, 8, 8)
    topo = load_cluster("abci", devices=devices)[0]
    plan = mp.solve(mp.from_torch(module, x), topo, solver="dp", cross_check=False,
                    fixed=fixed, cost_model=CostModel(topo, batchnorm_stats=batchnorm_stats))
    for name, label in fixed.items():
        assert plan.layer(name).config == label
    return plan, module, x


CASES = {
    # sample + spatial (h) mixed, a layer on 2 of 4 ranks (channels), spatial h and w,
    # a linear split by its output features
    "mixed-4": (4, {"conv1": "n=2 h=2", "conv2": "c=2", "conv3": "h=2 w=2", "fc": "c=4"}),
    # channels on all ranks, width, sample, a serial layer in the middle
    "kinds-4": (4, {"x": "n=4", "conv1": "c=4", "conv2": "w=4", "conv3": "serial",
                    "pool": "n=2 c=2", "fc": "n=4"}),
    "mixed-2": (2, {"conv1": "w=2", "conv2": "n=2", "conv3": "c=2", "fc": "c=2"}),
    # batch-norm split along channels (in training it may split only those), a 1x1 conv
    # split spatially, average pools, a two-layer head split by features then samples
    # (a batch-norm shares its convolution's layout)
    "bn-4": (4, {"conv1": "c=4", "conv2": "c=2", "conv3": "h=2 w=2", "pool": "n=4",
                 "fc1": "c=2", "fc2": "n=2"}, BNResNetlet),
    # strides, a dilation and a padded max pool split spatially
    "stride-4": (4, {"conv1": "h=2 w=2", "conv2": "h=4", "short": "n=2 w=2",
                     "pool": "w=2", "fc": "c=2"}, Downsample),
    "bn-2": (2, {"conv1": "c=2", "conv2": "serial", "conv3": "n=2", "fc1": "c=2",
                 "fc2": "c=2"}, BNResNetlet),
    # batch-norms split by samples and height (one group of 4 ranks), and by channels and
    # height (two groups of 2), normalized by the whole batch's statistics as priced
    "bn-sync-4": (4, {"conv1": "n=2 h=2", "conv2": "c=2 h=2", "conv3": "n=4", "fc1": "n=2",
                      "fc2": "c=2"}, BNResNetlet, "sync"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def audited(request):
    devices, fixed, *model = CASES[request.param]
    plan, module, x = _case(devices, fixed, *model)
    return plan, verify_plan(plan, module, x, world_size=devices)


def test_numbers_match_the_single_process_step(audited):
    plan, audit = audited
    assert audit.world_size == plan.devices
    assert audit.max_rel_error <= 1e-4, audit.errors
    assert {"output", "loss", "grad:conv2.weight"} <= set(audit.errors)
    assert any(k.startswith("grad:fc") and k.endswith(".bias") for k in audit.errors)


def test_collectives_are_what_the_plan_priced(audited):
    plan, audit = audited
    assert audit.collectives, "every case moves data"
    kinds = {r.kind for r in audit.collectives}
    assert "transfer" in kinds and "sync" in kinds
    for row in audit.collectives:
        assert row.predicted_bytes > 0, row      # nothing the plan did not price
        assert row.rel_error <= 0.05, row
    # a batch-norm split by samples or space sums its statistics, forward and backward
    stats = {r.layer for r in audit.collectives if r.kind == "stats"}
    split = {lc.name for lc in plan.layers if lc.op == "batchnorm"
             and {d for d, k in lc.degrees.items() if k > 1} - {"c"}}
    assert stats == split


def test_memory_is_what_the_plan_priced(audited):
    plan, audit = audited
    assert len(audit.memory) == plan.devices
    for row in audit.memory:
        for part in ("parameters", "gradients", "optimizer"):
            p, m = row.predicted[part], row.measured[part]
            assert m == pytest.approx(p, rel=1e-9, abs=1e-9), (row.rank, part, p, m)
        # the activations the program saves for backward: what the cost model's per-op
        # table (costs/saved.py) prices on this rank's tiles
        p, m = row.predicted["activations"], row.measured["activations"]
        assert m > 0
        assert abs(m - p) <= 0.1 * p, (row.rank, p, m)
        assert row.rel_error <= 0.1, row
        # the prediction is the plan's own per-device memory
        assert row.predicted_bytes == pytest.approx(plan.memory_bytes[row.rank], rel=1e-6)
    assert len(audit.step_seconds) == plan.devices
    assert all(s > 0 for s in audit.step_seconds)


def test_audit_prints_and_round_trips(audited, tmp_path):
    _, audit = audited
    text = str(audit)
    assert "conv2" in text and "transfer" in text and "rank" in text
    path = tmp_path / "audit.json"
    audit.save(path)
    assert PlanAudit.load(path) == audit


def test_a_saved_plan_runs_as_it_was_priced(tmp_path):
    # the plan file records the cost model's batch statistics and buckets: read back, with
    # no cost model, its batch-norms still sum their statistics and its buckets are the same
    plan, module, x = _case(2, {"conv1": "n=2", "conv2": "n=2"}, BNResNetlet, "sync")
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = mp.Plan.load(path)
    assert loaded.inputs is None and loaded.runtime_options["batchnorm_stats"] == "sync"
    audit = verify_plan(loaded, module, x, world_size=2)
    assert audit.max_rel_error <= 1e-4, audit.errors
    assert {r.layer for r in audit.collectives if r.kind == "stats"} == {"bn1", "bn2"}
    assert all(r.rel_error <= 0.05 for r in audit.collectives)


def test_world_size_other_than_the_plan_is_refused():
    plan, module, x = _case(4, {"conv1": "n=4"})
    with pytest.raises(PlanMismatchError, match="world_size=2"):
        verify_plan(plan, module, x, world_size=2)


def test_a_module_the_plan_was_not_made_for_is_refused():
    plan, module, x = _case(2, {"conv1": "n=2"})
    with pytest.raises(PlanMismatchError, match="only in the plan"):
        verify_plan(plan, Other(), x, world_size=2)
    with pytest.raises(PlanMismatchError, match="batch 8"):
        check_plan_fits(plan, mp.from_torch(module, torch.randn(8, 3, 8, 8)))


def test_a_plan_a_rank_cannot_run_is_refused_here_with_its_typed_error():
    # a batch-norm split by samples in training mode, priced with each tile's own
    # statistics: found by the ranks, raised in the caller as PlanMismatchError (not the
    # ranks' tracebacks), with the fix
    plan, module, x = _case(2, {"bn1": "n=2"}, model=BNResNetlet)
    with pytest.raises(PlanMismatchError, match="bn1.*batchnorm_stats='sync'"):
        verify_plan(plan, module, x, world_size=2)


def test_timed_steps_are_plain_steps_after_the_audited_one():
    plan, module, x = _case(2, {"conv1": "n=2"})
    audit = verify_plan(plan, module, x, world_size=2, timed_steps=3)
    assert len(audit.step_seconds) == 2 and all(s > 0 for s in audit.step_seconds)
    assert audit.max_rel_error <= 1e-4            # the audited step is compared, as before
    with pytest.raises(mp.errors.InvalidOptionError, match="timed_steps"):
        verify_plan(plan, module, x, world_size=2, timed_steps=-1)


def test_parallelize_needs_a_process_group():
    plan, module, x = _case(2, {"conv1": "n=2"})
    with pytest.raises(PlanMismatchError, match="init_process_group"):
        mp.parallelize(module, plan, example_inputs=x)


def _bucketed_case():
    # buckets of 3000 bytes, filled in backward order: fc (1032 parameters, 4128 bytes)
    # closes one alone, conv3 and conv2 (2336 bytes each) one together, conv1 (896 bytes)
    # stays partial until the backward pass ends; the sample split replicates every shard
    from milp_parallel.costs import CostModel
    torch.manual_seed(0)
    module, x = ResNetlet(), torch.randn(4, 3, 8, 8)
    topo = mp.clusters.get("abci", nodes=1, gpus_per_node=2)
    cm = CostModel(topo, gradient_bucket_bytes=3000.0)
    plan = mp.solve(mp.from_torch(module, x), topo, solver="dp", cross_check=False,
                    cost_model=cm, fixed={n: "n=2" for n in ("conv1", "conv2", "conv3", "fc")})
    return plan, module, x


def test_gradients_are_reduced_in_the_plans_buckets_the_ones_its_simulator_runs():
    plan, module, x = _bucketed_case()
    audit = verify_plan(plan, module, x, world_size=2)
    assert audit.max_rel_error <= 1e-4, audit.errors
    sync = {r.layer: r for r in audit.collectives if r.kind == "sync"}
    sim = mp.simulate(plan, trace=True)
    ran = {t.name for t in sim.tasks if t.kind == "allreduce"}
    assert set(sync) == ran == {"fc", "conv3+conv2", "conv1"}
    for row in sync.values():       # each bucket's bytes, counted as the plan priced them
        assert row.counted_bytes == pytest.approx(row.predicted_bytes, rel=1e-9), row
    assert sync["conv3+conv2"].counted_bytes == 2 * 2 * 2336


def _accumulate(rank, port, plan, module, x, out):       # pragma: no cover - subprocess
    import os

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        pm = mp.parallelize(module, plan, example_inputs=x)
        grads = []
        for _ in range(2):      # two backward passes without zeroing: the sums accumulate
            pm(x).pow(2).sum().backward()
            grads.append({k: p.grad.clone() for k, p in pm.shards.items()})
        torch.save(grads, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_bucketed_gradients_accumulate_over_backward_passes(tmp_path):
    from milp_parallel.runtime.verify import _free_port
    plan, module, x = _bucketed_case()
    torch.multiprocessing.spawn(_accumulate, args=(_free_port(), plan, module, x,
                                                   str(tmp_path)), nprocs=2)
    ref = module
    ref(x).pow(2).sum().backward()
    for rank in (0, 1):
        first, second = torch.load(tmp_path / f"{rank}.pt")
        for key, g in first.items():
            full = dict(ref.named_parameters())[key.replace("__", ".")].grad
            # every rank holds the whole (replicated) gradient of the whole batch's loss
            assert torch.allclose(g, full, rtol=1e-5, atol=1e-6), key
            assert torch.allclose(second[key], 2 * g, rtol=1e-5, atol=1e-6), key
