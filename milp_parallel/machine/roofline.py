"""Per-op roofline compute time of a layer's tiles: forward, backward and weight update.

The time of one phase (forward, backward, optimizer update) of a tile is

    max(FLOPs / (peak x class efficiency), bytes / (memory bandwidth x memory efficiency))
    + kernels x kernel launch time

with the FLOPs, the bytes read and written and the number of kernels counted per op from the
tile's own shapes (its output tile, the input regions it reads, its weight shard), in every
phase separately rather than as a fixed backward / forward factor. ``peak x efficiency`` is
:attr:`Device.effective_flops <milp_parallel.topology.Device.effective_flops>` for dense ops
(convolution, linear, matmul) and :attr:`RooflineParams.vector_compute_fraction` of it for
the rest; the memory bandwidth is the device's HBM figure
(``Device.memory_bandwidth_bytes_per_s``; ``0`` = unknown, no memory term), and the launch time
``Device.kernel_launch_s``. Measured per-layer times (:mod:`milp_parallel.profile`) replace
the forward+backward estimate where a profile table has the tile
(:class:`~milp_parallel.costs.CostModel`); the efficiencies here are only the defaults.

What each op costs (``x``: the input tiles' elements, ``y``: the output tile's, ``w``: the
weight shard's; ``F``: forward FLOPs of the tile, the graph's per-sample FLOPs scaled by the
tile's share of the output):

============== ========================= ============================== =========== ========
op             forward bytes (elements)  backward bytes (elements)      bwd FLOPs   kernels
                                                                                    f / b
============== ========================= ============================== =========== ========
conv, linear   x + y + w                 dgrad: y + w + x; wgrad:       2F (F      1 / 2
                                         y + x + w                      without
                                                                        dgrad)
matmul         x + y                     per input: y + other + input   2F         1 / 2
embedding      ids + y                   y + y (scatter into the shard) |y|        1 / 1
batchnorm,     2x + y (statistics pass,  2y + 3x                        2F         1 / 1
layernorm      normalize pass)
softmax        x + y                     2y + x                         F          1 / 1
loss           x + y                     2x                             F          1 / 1
pool, adaptive x + y                     y + 2x (+ y for max)           F          1 / 1
global_pool    x + y                     y + x                          F          1 / 1
elementwise,   x + y                     y + 2x                         F          1 / 1
dropout
add            x + y                     0 (the gradient is passed on)  0          1 / 0
mul            x + y                     per input: y + other + input   F          1 / 1
concat,        x + y (a copy)            0 (views) / x + y              0          1 / 0-1
transpose                                (transpose)
flatten,       0 (a view)                0                              0          0 / 0
reshape
input          0                         0                              0          0 / 0
============== ========================= ============================== =========== ========

A layer whose inputs are all graph inputs computes no input gradient (frameworks skip it):
the first convolution runs its weight gradient only. The optimizer update of a layer with
parameters reads the weights, their gradients and the optimizer state and writes the weights
and the state: ``(3 + 2 s) w`` elements with ``s`` the optimizer state per weight, in one
kernel (a fused multi-tensor update).

**Tile quantization.** GPU libraries compute a matrix product in output tiles (thread-block
tiles such as 128 x 128 or 256 x 128), so a product whose output rows or columns are not a
multiple of the tile wastes the rest of the last tile: a dense op's compute speed is
multiplied by ``q(M) q(N)``, ``q(d) = d / (ceil(d / t) t)``, with ``N`` the output channels
(features) of the tile and ``M`` its other output elements (samples x spatial positions), ``t``
= :attr:`RooflineParams.gemm_tile`. Splitting a convolution's 64 filters four ways leaves
16-wide products that run at a quarter of the speed per FLOP: splitting is not free. (NVIDIA,
*Matrix Multiplication Background User's Guide*, sections "Tile Quantization" and "Wave
Quantization", Deep Learning Performance documentation.)

Defaults (:class:`RooflineParams`): ``vector_compute_fraction = 0.5`` (element-wise kernels
issue one operation per element where dense kernels issue fused multiply-adds; these ops are
memory-bound on every preset anyway), ``memory_efficiency = 0.88`` (the share of the
data-sheet HBM bandwidth a streaming kernel sustains: 1.80 of 2.04 TB/s measured on A100 80GB
SXM) and ``gemm_tile = 128`` (the tile of the guide above; 0 turns quantization off). Each is
a :class:`~milp_parallel.machine.constants.Sourced` of :mod:`milp_parallel.machine.constants`,
whose ``source`` cites it; none is fitted.

Examples
--------
>>> from milp_parallel import clusters
>>> from milp_parallel.graph import LayerGraph
>>> g = LayerGraph()
>>> _ = g.input("x", (8, 64, 56, 56))
>>> _ = g.elementwise("relu", "x")
>>> dev = clusters.get("abci", nodes=1).device
>>> fwd, bwd, upd = phase_seconds(g.layer("relu"), np.array([[8, 64, 56, 56]]), dev,
...                               bytes_per_element=4)
>>> # forward: 2 x 1,605,632 elements x 4 B at 0.88 x 900 GB/s, plus a 4 us launch
>>> round(float(fwd[0]) * 1e6, 2)
20.22
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidTopologyError
from . import constants as _c

__all__ = ["RooflineParams", "TileWork", "OP_CLASS", "tile_work", "phase_seconds",
           "roofline_seconds", "tile_efficiency"]

#: Op -> class: ``dense`` runs at the device's dense speed, ``vector`` at a fraction of it,
#: ``view`` moves no data, ``none`` does nothing.
OP_CLASS = {
    "conv": "dense", "linear": "dense", "matmul": "dense",
    "embedding": "vector", "batchnorm": "vector", "layernorm": "vector", "softmax": "vector",
    "loss": "vector", "pool": "vector", "adaptive_pool": "vector", "global_pool": "vector",
    "elementwise": "vector", "dropout": "vector", "add": "vector", "mul": "vector",
    "concat": "vector", "transpose": "vector",
    "flatten": "view", "reshape": "view", "fanout": "view", "input": "none",
}


@dataclass(frozen=True)
class RooflineParams:
    """Efficiencies of the roofline (see the module docstring for the defaults' evidence).

    Parameters
    ----------
    vector_compute_fraction : float, default 0.5
        FLOP/s of non-dense ops as a fraction of the device's dense ``effective_flops``.
    memory_efficiency : float, default 0.88
        Fraction of the data-sheet memory bandwidth that streaming kernels sustain.
    gemm_tile : int, default 128
        Output tile of dense ops' matrix products (tile quantization); 0: none.

    Raises
    ------
    InvalidTopologyError
        When a fraction is outside ``(0, 1]`` or the tile is negative.
    """

    vector_compute_fraction: float = _c.VECTOR_COMPUTE_FRACTION.value
    memory_efficiency: float = _c.MEMORY_EFFICIENCY.value
    gemm_tile: int = int(_c.GEMM_TILE.value)

    def __post_init__(self) -> None:
        t = self.gemm_tile
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise InvalidTopologyError(f"RooflineParams.gemm_tile must be a non-negative "
                                       f"integer, got {t!r}")
        for what in ("vector_compute_fraction", "memory_efficiency"):
            v = getattr(self, what)
            if (not isinstance(v, (int, float, np.floating)) or isinstance(v, bool)
                    or not 0 < v <= 1):
                raise InvalidTopologyError(f"RooflineParams.{what} must be in (0, 1], "
                                           f"got {v!r}")


@dataclass(frozen=True)
class TileWork:
    """FLOPs, bytes and kernels of one tile per phase, for ``K`` tiles (arrays of shape (K,)).

    Bytes are elements times ``bytes_per_element``.
    """

    flops_fwd: np.ndarray
    flops_bwd: np.ndarray
    bytes_fwd: np.ndarray
    bytes_bwd: np.ndarray
    bytes_update: np.ndarray
    kernels_fwd: float
    kernels_bwd: float
    kernels_update: float
    op_class: str


def _input_elements(layer, ext: np.ndarray) -> list[np.ndarray]:
    """Elements of each input region a centred output tile of extent ``ext`` reads, (K,)."""
    out = np.asarray(layer.output_shape, dtype=np.int64)
    ext = np.minimum(ext, out)
    lo = (out - ext) // 2
    hi = lo + ext
    res = []
    for i in range(len(layer.inputs)):
        in_lo, in_hi = layer.input_region(i, lo, hi)
        res.append(np.maximum(in_hi - in_lo, 0).prod(axis=-1).astype(float))
    return res


def tile_work(layer, ext, *, bytes_per_element: float, weight_shards=None,
              optimizer_state_factor: float = 2.0,
              graph_inputs: tuple[bool, ...] | None = None) -> TileWork:
    """FLOPs, bytes and kernels of tiles of ``layer`` (the table of the module docstring).

    Parameters
    ----------
    layer : Layer
    ext : array_like of int, shape (K, ndim)
        Output tile extents (batch first).
    bytes_per_element : float
    weight_shards : array_like of int, shape (K,), optional
        Into how many shards the tile's weights are split (default 1).
    optimizer_state_factor : float, default 2.0
        Optimizer state per weight (Adam 2, momentum 1, plain SGD 0), for the update.
    graph_inputs : tuple of bool, optional
        Per input of the layer, whether it is a graph input (no gradient is computed for
        it). Default: none is.

    Returns
    -------
    TileWork
    """
    ext = np.atleast_2d(np.asarray(ext, dtype=np.int64))
    k = len(ext)
    op = layer.op
    cls = OP_CLASS.get(op, "vector")
    zero = np.zeros(k)
    if cls == "none" or cls == "view":
        return TileWork(zero, zero, zero, zero, zero, 0.0, 0.0, 0.0, cls)
    out_total = float(np.prod(np.asarray(layer.output_shape, dtype=float)))
    y = ext.prod(axis=1).astype(float)
    frac = y / out_total if out_total else zero
    f = float(layer.flops) * float(layer.output_shape[0]) * frac
    gi = tuple(graph_inputs) if graph_inputs is not None else (False,) * len(layer.inputs)
    xs = _input_elements(layer, ext)
    x = np.sum(xs, axis=0) if xs else zero
    x_grad = [xi for xi, g in zip(xs, gi) if not g]       # inputs that get a gradient
    shards = (np.ones(k) if weight_shards is None
              else np.asarray(weight_shards, dtype=float).reshape(k))
    w = float(layer.params) / shards if layer.params > 0 else zero
    dgrad = bool(x_grad)
    kb = 1.0
    if op in ("conv", "linear"):
        ff = f
        fb = f * (2.0 if dgrad else 1.0) if layer.params > 0 else (f if dgrad else zero)
        bf = x + y + w
        bb = (y + x + w) * (2.0 if dgrad else 1.0)
        kb = (2.0 if dgrad else 1.0) if layer.params > 0 else (1.0 if dgrad else 0.0)
    elif op == "matmul":
        ff, fb = f, f * len(x_grad)
        bf, bb = x + y, sum((y + x for _ in x_grad), zero)
        kb = float(len(x_grad))
    elif op == "embedding":
        ff, fb = zero, y
        bf, bb = x + y, 2.0 * y
    elif op in ("batchnorm", "layernorm"):
        ff, fb = f, 2.0 * f
        bf, bb = 2.0 * x + y, 2.0 * y + 3.0 * x
    elif op == "softmax":
        ff, fb = f, f
        bf, bb = x + y, 2.0 * y + x
    elif op == "loss":
        ff, fb = f, f
        bf, bb = x + y, 2.0 * x
    elif op in ("pool", "adaptive_pool"):
        ff, fb = f, f
        bf = x + y
        bb = y + 2.0 * x + (y if layer.attrs.get("kind", "max") == "max" else zero)
    elif op == "global_pool":
        ff, fb = f, f
        bf, bb = x + y, y + x
    elif op == "add":
        ff, fb = f, zero
        bf, bb = x + y, zero
        kb = 0.0
    elif op == "mul":
        ff, fb = f, f
        bf = x + y
        bb = sum((y + x for _ in x_grad), zero)
        kb = 1.0 if x_grad else 0.0
    elif op == "concat":
        ff, fb = zero, zero
        bf, bb = x + y, zero
        kb = 0.0
    elif op == "transpose":
        ff, fb = zero, zero
        bf, bb = x + y, x + y
    else:   # elementwise, dropout and anything element-wise-like
        ff, fb = f, f
        bf, bb = x + y, y + 2.0 * x
    if not dgrad and op not in ("conv", "linear", "embedding"):
        fb, bb, kb = zero, zero, 0.0       # nothing upstream needs a gradient
    bpe = float(bytes_per_element)
    upd = (3.0 + 2.0 * float(optimizer_state_factor)) * w * bpe if layer.params > 0 else zero
    return TileWork(np.broadcast_to(ff, (k,)).astype(float),
                    np.broadcast_to(fb, (k,)).astype(float),
                    np.broadcast_to(bf * bpe, (k,)).astype(float),
                    np.broadcast_to(bb * bpe, (k,)).astype(float),
                    np.broadcast_to(upd, (k,)).astype(float),
                    1.0, kb, 1.0 if layer.params > 0 else 0.0, cls)


def tile_efficiency(layer, ext, tile: int) -> np.ndarray:
    """``q(M) q(N)`` of the dense op's output tile (1 for other ops or ``tile = 0``), (K,).

    Examples
    --------
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (32, 64, 8, 8))
    >>> _ = g.conv("c", "x", 64, 3, padding=1)
    >>> tile_efficiency(g.layer("c"), [[32, 64, 8, 8], [32, 16, 8, 8]], 128).tolist()
    [0.5, 0.125]
    """
    ext = np.atleast_2d(np.asarray(ext, dtype=np.int64))
    if tile <= 0 or OP_CLASS.get(layer.op) != "dense":
        return np.ones(len(ext))
    if layer.op == "conv":
        n_col = ext[:, 1]
        rows = ext[:, 0] * (ext[:, 2:].prod(axis=1) if ext.shape[1] > 2 else 1)
    else:                       # linear, matmul: the last dim is the output feature
        n_col = ext[:, -1]
        rows = ext[:, :-1].prod(axis=1)

    def q(d):
        d = d.astype(float)
        return d / (np.ceil(d / tile) * tile)
    return q(rows) * q(n_col)


def roofline_seconds(flops, nbytes, kernels, *, flops_per_s: float, bytes_per_s: float,
                     launch_s: float) -> np.ndarray:
    """``max(flops / flops_per_s, bytes / bytes_per_s) + kernels x launch_s`` (vectorized).

    ``bytes_per_s = 0`` drops the memory term (an unknown bandwidth). Zero work costs
    nothing, not even the launch.

    Examples
    --------
    >>> float(roofline_seconds(2e9, 1e6, 1, flops_per_s=1e12, bytes_per_s=1e9, launch_s=1e-6))
    0.002001
    """
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    t = flops / np.asarray(flops_per_s, dtype=float)
    if bytes_per_s > 0:
        t = np.maximum(t, nbytes / bytes_per_s)
    busy = (flops > 0) | (nbytes > 0)
    return np.where(busy, t + float(kernels) * launch_s, 0.0)


def phase_seconds(layer, ext, device, *, bytes_per_element: float, weight_shards=None,
                  optimizer_state_factor: float = 2.0, params: RooflineParams | None = None,
                  peak_flops: float | None = None,
                  graph_inputs: tuple[bool, ...] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward, backward and update seconds of tiles of ``layer`` on ``device``, each (K,).

    Parameters
    ----------
    layer : Layer
    ext : array_like of int, shape (K, ndim)
    device : Device
    bytes_per_element : float
    weight_shards, optimizer_state_factor, graph_inputs
        As :func:`tile_work`.
    params : RooflineParams, optional
    peak_flops : float, optional
        The peak to use instead of ``device.peak_flops`` (e.g. another dtype's); the device's
        ``efficiency`` still applies.
    """
    p = params or RooflineParams()
    work = tile_work(layer, ext, bytes_per_element=bytes_per_element,
                     weight_shards=weight_shards,
                     optimizer_state_factor=optimizer_state_factor, graph_inputs=graph_inputs)
    peak = float(device.peak_flops if peak_flops is None else peak_flops)
    dense = peak * float(device.efficiency)
    if work.op_class == "dense":
        speed = dense * tile_efficiency(layer, ext, p.gemm_tile)
    else:
        speed = dense * p.vector_compute_fraction
    bw = float(device.memory_bandwidth_bytes_per_s) * p.memory_efficiency
    launch = float(device.kernel_launch_s)
    fwd = roofline_seconds(work.flops_fwd, work.bytes_fwd, work.kernels_fwd,
                           flops_per_s=speed, bytes_per_s=bw, launch_s=launch)
    bwd = roofline_seconds(work.flops_bwd, work.bytes_bwd, work.kernels_bwd,
                           flops_per_s=speed, bytes_per_s=bw, launch_s=launch)
    # the update is element-wise: vector speed
    upd = roofline_seconds(np.zeros_like(work.bytes_update), work.bytes_update,
                           work.kernels_update, flops_per_s=dense * p.vector_compute_fraction,
                           bytes_per_s=bw, launch_s=launch)
    if not math.isfinite(float(np.max(fwd + bwd + upd, initial=0.0))):
        raise InvalidTopologyError(f"layer {layer.name!r}: the roofline gave a non-finite "
                                   "time; check the device's speeds")
    return fwd, bwd, upd
