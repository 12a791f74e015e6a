"""The torch operators a profile times: a layer's op on one tile, and its weights' update.

:func:`tile_runner` builds the operator a layer stands for on tile-shaped inputs (the table
in :mod:`milp_parallel.measure.profile`) and runs forward + backward;
:func:`update_runner` runs the optimizer's step over the weight shard of the same tile (the
shapes the tile's operator uses), with torch's own optimizer as a training script builds it
(:func:`make_optimizer`: on a CPU, ``torch.optim.Adam`` updates one tensor at a time, several
small kernels each, which no one-kernel estimate prices), and :func:`update_seconds` takes
what the shard adds to a step; :func:`median_seconds` times a closure. Torch is passed in,
never imported here.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["OPTIMIZERS", "OPTIMIZER_STATE_FACTOR", "make_optimizer", "input_tiles",
           "tile_runner", "update_runner", "update_seconds", "median_seconds"]

#: The optimizers a step can be timed and audited with.
OPTIMIZERS = ("adam", "sgd", "momentum")
#: Optimizer state per weight, in weights, as the cost model's ``optimizer_state_factor``.
OPTIMIZER_STATE_FACTOR = {"adam": 2.0, "momentum": 1.0, "sgd": 0.0}


def make_optimizer(torch: Any, name: str, params, lr: float = 1e-3) -> Any:
    """``torch.optim.Adam`` (``"adam"``), ``SGD(momentum=0.9)`` (``"momentum"``) or ``SGD``
    (``"sgd"``) over ``params``, with torch's defaults otherwise."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}")


def input_tiles(layer: Any, tile_shape: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The shapes of the input regions a centred output box of ``tile_shape`` needs."""
    out = np.asarray(layer.output_shape, dtype=np.int64)
    tile = np.minimum(np.asarray(tile_shape, dtype=np.int64), out)
    lo = (out - tile) // 2
    hi = lo + tile
    shapes = []
    for i in range(len(layer.inputs)):
        in_lo, in_hi = layer.input_region(i, lo, hi)
        shapes.append(tuple(int(x) for x in (in_hi - in_lo)))
    return tuple(shapes)


def _build(torch: Any, layer: Any, tile: tuple[int, ...], dtype: Any, device: str,
           graph_inputs: Sequence[bool] | None = None):
    """``(fn, leaves, weights)`` of the layer's op on one tile (``fn()`` runs the forward;
    ``leaves``: the tensors it differentiates, inputs then weights; an input that is a
    graph input, per ``graph_inputs``, is data: no gradient), or None."""
    F = torch.nn.functional
    op, a = layer.op, layer.attrs
    ins = input_tiles(layer, tile)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def tensor(shape, grad=True):
        t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(device=device,
                                                                       dtype=dtype)
        return t.requires_grad_(grad)

    data = tuple(graph_inputs or ())
    xs = [tensor(s, grad=not (i < len(data) and data[i])) for i, s in enumerate(ins)]
    leaves = [x for x in xs if x.requires_grad]
    nsp = len(tile) - 2

    if op == "conv":
        cout, cin, g = layer.output_shape[1], layer.input_shapes[0][1], a["groups"]
        cout_t, cin_t = tile[1], ins[0][1]
        g_t = max(1, math.gcd(math.gcd(cin_t, cout_t), max(1, round(g * cout_t / cout))))
        w = tensor((cout_t, cin_t // g_t, *a["kernel"]))
        b = tensor((cout_t,)) if a["bias"] else None
        leaves += [w] + ([b] if b is not None else [])
        conv = getattr(F, f"conv{nsp}d")
        fn = lambda: conv(xs[0], w, b, a["stride"], a["padding"], a["dilation"], g_t)  # noqa
        _ = cin
    elif op == "pool":
        kind = "max" if a["kind"] == "max" else "avg"
        pool = getattr(F, f"{kind}_pool{nsp}d")
        kw = dict(kernel_size=a["kernel"], stride=a["stride"], padding=a["padding"],
                  ceil_mode=a["ceil_mode"])
        if kind == "max":
            kw["dilation"] = a["dilation"]
        fn = lambda: pool(xs[0], **kw)  # noqa: E731
    elif op == "adaptive_pool":
        pool = getattr(F, f"adaptive_{a['kind']}_pool{nsp}d")
        fn = lambda: pool(xs[0], tuple(tile[2:]))  # noqa: E731
    elif op == "global_pool":
        dims = tuple(range(2, len(tile)))
        fn = (lambda: xs[0].mean(dims, keepdim=True)) if a["kind"] == "avg" else (
            lambda: xs[0].amax(dims, keepdim=True))
    elif op == "linear":
        w = tensor((tile[-1], ins[0][-1]))
        b = tensor((tile[-1],)) if a["bias"] else None
        leaves += [w] + ([b] if b is not None else [])
        fn = lambda: F.linear(xs[0], w, b)  # noqa: E731
    elif op == "batchnorm":
        w, b = tensor((ins[0][1],)), tensor((ins[0][1],))
        leaves += [w, b]
        fn = lambda: F.batch_norm(xs[0], None, None, w, b, training=True)  # noqa: E731
    elif op == "layernorm":
        w, b = tensor((ins[0][-1],)), tensor((ins[0][-1],))
        leaves += [w, b]
        fn = lambda: F.layer_norm(xs[0], (ins[0][-1],), w, b)  # noqa: E731
    elif op == "elementwise":
        name = str(a["fn"])
        f = getattr(torch, name, None) or getattr(F, name, None)
        fn = None
        if callable(f):
            try:
                with torch.no_grad():
                    f(xs[0][(0,) * xs[0].dim()].reshape(1))
                fn = lambda: f(xs[0])  # noqa: E731
            except Exception:
                fn = None
        if fn is None:
            fn = lambda: xs[0] * 0.5  # noqa: E731
    elif op == "add":
        fn = lambda: sum(xs[1:], xs[0])  # noqa: E731
    elif op == "mul":
        def fn():
            y = xs[0]
            for t in xs[1:]:
                y = y * t
            return y
    elif op == "concat":
        axis = layer.dims.index(a["dim"])
        fn = lambda: torch.cat(xs, dim=axis)  # noqa: E731
    elif op == "fanout":
        fn = lambda: xs[0]  # noqa: E731
    elif op in ("flatten", "reshape"):
        fn = lambda: xs[0].reshape(xs[0].shape[0], -1)  # noqa: E731
    elif op == "transpose":
        perm = tuple(a["perm"])
        fn = lambda: xs[0].permute(perm).contiguous()  # noqa: E731
    elif op == "dropout":
        fn = lambda: F.dropout(xs[0], a["p"], training=True)  # noqa: E731
    elif op == "softmax":
        fn = lambda: F.softmax(xs[0], dim=-1)  # noqa: E731
    elif op == "loss":
        logits = xs[0].reshape(-1, ins[0][-1]) if len(ins[0]) > 1 else xs[0].reshape(-1, 1)
        target = torch.randint(0, logits.shape[-1], (logits.shape[0],), generator=gen
                               ).to(device)
        fn = lambda: F.cross_entropy(xs[0].reshape(logits.shape), target)  # noqa: E731
    elif op == "embedding":
        ids = torch.randint(0, a["vocab"], ins[0], generator=gen).to(device)
        w = tensor((a["vocab"], tile[-1]))
        leaves = [w]
        fn = lambda: F.embedding(ids, w)  # noqa: E731
    elif op == "matmul":
        fn = lambda: torch.matmul(xs[0], xs[1])  # noqa: E731
    else:
        return None

    return fn, leaves, [t for t in leaves if not any(t is x for x in xs)]


def tile_runner(torch: Any, layer: Any, tile: tuple[int, ...], dtype: Any, device: str,
                graph_inputs: Sequence[bool] | None = None) -> Callable[[], None] | None:
    """A closure running forward + backward (``autograd.grad`` of every input and weight,
    none of an input that ``graph_inputs`` marks as data) of the layer's op on one tile, or
    None when the op has no torch operator. With nothing to differentiate, the forward
    alone (as a training step runs it)."""
    built = _build(torch, layer, tile, dtype, device, graph_inputs)
    if built is None:
        return None
    fn, leaves, _ = built
    if not leaves:
        def forward() -> None:
            with torch.no_grad():
                fn()
        return forward
    y0 = fn()
    gen = torch.Generator(device="cpu").manual_seed(1)
    grad = torch.randn(tuple(y0.shape), generator=gen).to(device=device, dtype=y0.dtype)

    def run() -> None:
        y = fn()
        torch.autograd.grad(y, leaves, grad, allow_unused=True)

    return run


def update_runner(torch: Any, layer: Any, tile: tuple[int, ...], dtype: Any, device: str,
                  optimizer: str, copies: int = 1) -> Callable[[], None] | None:
    """A closure running one ``optimizer.step()`` (:func:`make_optimizer`) over ``copies``
    copies of the weight shard a tile of the layer holds, gradients set; None when the
    tile holds no weight."""
    built = _build(torch, layer, tile, dtype, device)
    if built is None or not built[2]:
        return None
    params = [w.detach().clone().requires_grad_(True) for _ in range(int(copies))
              for w in built[2]]
    for p in params:
        p.grad = torch.randn_like(p)
    return make_optimizer(torch, optimizer, params).step


def update_seconds(torch: Any, layer: Any, tile: tuple[int, ...], dtype: Any, device: str,
                   optimizer: str, repeats: int, warmup: int) -> float | None:
    """What the tile's weight shard adds to one optimizer step: the slope of the step's
    median time over 1 and 3 copies of the shard (``(t3 - t1) / 2``, at least 0). A
    training step runs one optimizer step over every layer's weights, so the step's fixed
    cost (its Python wrapper, tens of microseconds) is paid once, not once per layer as
    timing each layer's own step would count it. None when the tile holds no weight."""
    one = update_runner(torch, layer, tile, dtype, device, optimizer, copies=1)
    if one is None:
        return None
    three = update_runner(torch, layer, tile, dtype, device, optimizer, copies=3)
    t1 = median_seconds(torch, one, repeats, warmup, device)
    t3 = median_seconds(torch, three, repeats, warmup, device)
    return max(0.0, (t3 - t1) / 2.0)


def median_seconds(torch: Any, run: Callable[[], None], repeats: int, warmup: int,
                   device: str) -> float:
    """The median of ``repeats`` timed runs after ``warmup`` untimed ones (CUDA
    synchronized around each)."""
    cuda = device.startswith("cuda")
    for _ in range(warmup):
        run()
    if cuda:
        torch.cuda.synchronize()
    times = np.empty(repeats)
    for r in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        if cuda:
            torch.cuda.synchronize()
        times[r] = time.perf_counter() - t0
    return float(np.median(times))
