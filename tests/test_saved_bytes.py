"""What each op's backward keeps (milp_parallel.costs.saved) against what torch saves.

One layer at a time: the module is imported with ``mp.from_torch``, the cost model prices
the layer's activations on a tile (``CostModel.memory_parts``), and the same layer runs in
torch under ``saved_tensors_hooks`` (``runtime.audit.MemoryMeter``: distinct storages,
parameters and buffers excluded). Convolutions and pools with padding run as the layer-wise
program runs them (its own gloo process group of one rank): the padded window is a copy.
"""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import milp_parallel as mp  # noqa: E402
from milp_parallel import clusters  # noqa: E402
from milp_parallel.costs import CostModel  # noqa: E402
from milp_parallel.costs.saved import SAVED_RULES  # noqa: E402
from milp_parallel.runtime.audit import MemoryMeter  # noqa: E402


class Wrap(nn.Module):
    """One layer module."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        mods = {"conv": nn.Conv2d(3, 4, 3), "conv_s2_g": nn.Conv2d(4, 8, 3, stride=2, groups=2),
                "maxpool": nn.MaxPool2d(2), "avgpool": nn.AvgPool2d(3, stride=2),
                "gap": nn.AdaptiveAvgPool2d(1), "adaptive": nn.AdaptiveAvgPool2d(2),
                "adaptive_max": nn.AdaptiveMaxPool2d(2), "gmp": nn.AdaptiveMaxPool2d(1),
                "linear": nn.Linear(8, 5), "linear3d": nn.Linear(8, 5),
                "batchnorm": nn.BatchNorm2d(3), "layernorm": nn.LayerNorm(8),
                "relu": nn.ReLU(), "gelu": nn.GELU(), "sigmoid": nn.Sigmoid(),
                "tanh": nn.Tanh(), "softmax": nn.Softmax(dim=-1), "dropout": nn.Dropout(0.5)}
        self.m = mods.get(kind)

    def forward(self, x):
        return self.m(x)


class Binary(nn.Module):
    """One op of two activations."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x, y):
        if self.kind == "add":
            return x + y
        if self.kind == "mul":
            return x * y
        return torch.cat([x, y], dim=1)


class Flatten(nn.Module):
    def forward(self, x):
        return torch.flatten(x, 1)


def _module(kind: str):
    if kind in ("add", "mul", "cat"):
        return Binary(kind), 2
    if kind == "flatten":
        return Flatten(), 1
    return Wrap(kind).train(), 1


#: kind -> (op of the graph layer, input shape)
KINDS = {
    "conv": ("conv", (2, 3, 8, 8)), "conv_s2_g": ("conv", (2, 4, 9, 9)),
    "maxpool": ("pool", (2, 3, 8, 8)), "avgpool": ("pool", (2, 3, 9, 9)),
    "gap": ("global_pool", (2, 3, 8, 8)), "gmp": ("global_pool", (2, 3, 8, 8)),
    "adaptive": ("adaptive_pool", (2, 3, 8, 8)),
    "adaptive_max": ("adaptive_pool", (2, 3, 8, 8)),
    "linear": ("linear", (4, 8)), "linear3d": ("linear", (2, 6, 8)),
    "batchnorm": ("batchnorm", (2, 3, 8, 8)), "layernorm": ("layernorm", (2, 6, 8)),
    "relu": ("elementwise", (2, 3, 8, 8)), "gelu": ("elementwise", (2, 3, 8, 8)),
    "sigmoid": ("elementwise", (4, 8)), "tanh": ("elementwise", (4, 8)),
    "softmax": ("softmax", (2, 6, 8)), "dropout": ("dropout", (4, 8)),
    "add": ("add", (2, 3, 8, 8)), "mul": ("mul", (2, 3, 8, 8)),
    "cat": ("concat", (2, 3, 8, 8)), "flatten": ("flatten", (2, 3, 4, 4)),
}


def _saved_by_torch(module, inputs) -> float:
    """Bytes torch saves running the module (inputs requiring grad, as activations do)."""
    meter = MemoryMeter()
    xs = [t.clone().requires_grad_(True) for t in inputs]
    with meter.saving(module):
        out = module(*xs)
    out.sum().backward()
    return meter.activation_bytes


def _layer(graph, op: str):
    found = [lay for lay in graph.layers if lay.op == op]
    assert len(found) == 1, [(lay.name, lay.op) for lay in graph.layers]
    return found[0]


def _priced(layer, degrees=None) -> float:
    cm = CostModel(clusters.get("abci", nodes=1))
    deg = np.ones((1, len(layer.dims)), np.int64) if degrees is None else np.asarray(
        [degrees], np.int64)
    return float(cm.memory_parts(layer, deg)["activations"][0].sum())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_saved_bytes_rule_is_what_torch_saves(kind):
    op, shape = KINDS[kind]
    torch.manual_seed(0)
    module, n_in = _module(kind)
    xs = tuple(torch.randn(shape) for _ in range(n_in))
    layer = _layer(mp.from_torch(module, xs), op)
    assert op in SAVED_RULES
    if kind == "dropout":
        # an accelerator runs nn.Dropout as native_dropout (a bool mask); the CPU's
        # nn.Dropout multiplies by a mask of the activations' dtype (docs/runtime.md)
        module = _NativeDropout()
    assert _priced(layer) == pytest.approx(_saved_by_torch(module, xs), rel=1e-9), kind


class _NativeDropout(nn.Module):
    def forward(self, x):
        return torch.native_dropout(x, 0.5, True)[0]


@pytest.mark.parametrize("kind, degrees", [("linear", [2, 1]), ("batchnorm", [1, 3, 1, 1]),
                                           ("relu", [2, 1, 1, 1])])
def test_a_tile_keeps_its_share(kind, degrees):
    # a sample or channel split: every tile keeps what its piece saves, summed = the whole
    op, shape = KINDS[kind]
    module, _ = _module(kind)
    layer = _layer(mp.from_torch(module, torch.randn(shape)), op)
    assert _priced(layer, degrees) == pytest.approx(_priced(layer), rel=1e-9)


# ---------------------------------------------------------------------- padded windows
class Padded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1)

    def forward(self, x):
        return self.avg(self.pool(self.conv(x)))


@pytest.fixture(scope="module")
def one_rank_group():
    import torch.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_padded_windows_are_what_the_program_saves(one_rank_group):
    torch.manual_seed(0)
    module = Padded()
    x = torch.randn(2, 3, 8, 8)
    graph = mp.from_torch(module, x)
    plan = mp.solve(graph, "abci", devices=1, solver="dp", cross_check=False)
    pm = mp.parallelize(module, plan, example_inputs=x)
    meter = MemoryMeter()
    with meter.saving(pm, module):
        pm(x).sum().backward()
    bpe = 4
    conv = 2 * 3 * 10 * 10 * bpe                      # the input padded by 1
    pool = 2 * 4 * 9 * 9 * bpe + 2 * 4 * 4 * 4 * 8   # rows -1 .. 7 (3 windows of stride 2 and
    #                                                   one of 3), int64 indices
    avg = 2 * 4 * 6 * 6 * bpe
    assert meter.activation_bytes == conv + pool + avg
    priced = sum(_priced(graph.layer(n)) for n in graph.names)
    assert priced == pytest.approx(meter.activation_bytes, rel=1e-9)


# ---------------------------------------------------------------- the allocation peak
def test_the_allocation_peak_counts_what_is_alive_and_leaves_the_state_out():
    # a linear on (64, 32): forward keeps x's copy (8 KiB) and the output (8 KiB, 2048
    # floats); the weight (4 KiB) is state and its gradient is the gradient's, not counted
    lin = torch.nn.Linear(32, 32, bias=False)
    x = torch.randn(64, 32)
    meter = MemoryMeter()
    with meter.allocating(lin):
        h = x * 1.0
        y = lin(h)
        y.sum().backward()
    assert lin.weight.grad is not None
    # alive at once: h, y (8 KiB each), and in backward the output gradient and the
    # weight gradient's temporaries; never the weight itself
    assert 16 * 1024 <= meter.activation_bytes <= 32 * 1024 + 4096, meter.peak_by_op
    assert meter.peak_by_op and sum(meter.peak_by_op.values()) == meter.activation_bytes
    assert "mul.Tensor" in meter.peak_by_op


def test_a_storage_released_by_resize_counts_nothing_after():
    meter = MemoryMeter()
    with meter.allocating():
        big = torch.ones(4096)                          # 16 KiB
        big.untyped_storage().resize_(0)                # what FSDP does to resharded weights
        small = torch.ones(1024) * 2.0                  # 4 KiB, 4 KiB
    del small
    assert meter.activation_bytes == 16 * 1024          # the peak was the big one alone
    meter2 = MemoryMeter()
    with meter2.allocating():
        big = torch.ones(4096)
        big.untyped_storage().resize_(0)
        a = torch.ones(4096) * 1.0
        b = a + 1.0
    assert b.numel() == a.numel()
    assert meter2.activation_bytes == 16 * 1024 * 2     # a and b, the released one 0


def test_fake_and_meta_tensors_hold_no_memory():
    # DTensor's sharding propagation builds fake tensors of every op's shapes (and keeps some
    # in its cache): they allocate nothing, and the peak is the real tensors' alone
    from torch._subclasses.fake_tensor import FakeTensorMode
    meter = MemoryMeter()
    with meter.allocating():
        real = torch.ones(1024)                         # 4 KiB
        with FakeTensorMode():
            fake = torch.empty(1 << 20) + 1.0           # 4 MiB, fake
        meta = torch.empty(1 << 20, device="meta") * 2  # 4 MiB, meta
    assert fake.numel() == meta.numel() == 1 << 20 and real.numel() == 1024
    assert meter.activation_bytes == 4 * 1024, meter.peak_by_op


def test_a_misspelt_activation_meter_is_named():
    from milp_parallel.errors import InvalidOptionError
    from milp_parallel.runtime.verify import RuntimeHooks
    with pytest.raises(InvalidOptionError, match="'allocate'"):
        RuntimeHooks(*[print] * 7, activations="allocate")


def test_the_regather_shows_what_it_keeps_to_the_hooks_outside(one_rank_group):
    # regather_in_backward's saved-tensor hooks are innermost, so they must pass every saved
    # tensor (its kept slice in place of the gathered input) on to the hooks outside them:
    # the audit's meter sees the same bytes with and without it, the gradients agree
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    from milp_parallel.runtime.tp_saves import regather_in_backward
    mesh = init_device_mesh("cpu", (1,))

    def run(regather: bool):
        torch.manual_seed(0)
        block = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.Tanh())
        parallelize_module(block, mesh, {"0": ColwiseParallel(use_local_output=False)})
        if regather:
            regather_in_backward(block, mesh, ("block", "transfer"))
        x = torch.randn(2, 4, 8, requires_grad=True)
        meter = MemoryMeter()
        with meter.saving(block):
            xd = DTensor.from_local(x, mesh, (Shard(1),)).redistribute(mesh, (Replicate(),))
            block(xd).to_local().pow(2).sum().backward()
        return meter.activation_bytes, x.grad, block[0].weight.grad.full_tensor()

    plain, with_regather = run(False), run(True)
    assert plain[0] > 0 and with_regather[0] == plain[0]
    assert torch.equal(plain[1], with_regather[1]) and torch.equal(plain[2], with_regather[2])
