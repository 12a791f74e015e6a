"""ParaDL's analytical oracle: time per epoch and memory per device of uniform strategies.

The oracle of Kahira et al. (HPDC 2021; tech report "A Model-driven Analysis of the Practical
Limits of Large-scale DNN Training", 2020) projects, for a whole-model strategy (every layer
split the same way), the compute and communication time of one epoch and the memory each
device needs (DESIGN section 4). With ``D`` samples, global batch ``B``, ``p`` devices,
``I = ceil(D / B)`` iterations, ``delta`` bytes per element and ring collectives
(all-reduce ``2(p-1)(alpha + m beta / p)``, all-gather ``(p-1)(alpha + m beta / p)`` per
``m``-byte result):

========== ================================================ =====================================
strategy   communication per iteration                      memory per device
========== ================================================ =====================================
serial     none                                             ``2 delta (B sum(|x|+|y|) + sum|w|)``
data       all-reduce of ``sum|w|``                         ``2 delta ((B/p) sum(|x|+|y|) + |w|)``
spatial    halo of each kernel > 1 layer (both passes),     activations of split layers / p
           all-gather at the last split layer, all-reduce
filter     all-gather of ``B|y_l|`` (forward) and           weights of split layers / p
           all-reduce (backward) per split layer but last
channel    all-reduce (forward) and all-gather (backward)   as filter
data+filt. filter inside a node, all-reduce across nodes    activations / p1, weights / p2
data+spat. spatial inside a node, data across nodes          activations / p
pipeline   point-to-point between stages (GPipe, S micro-   the largest stage
           batches)
========== ================================================ =====================================

Two modes:

``mode="paradl"``
    Reproduces ParaDL's published numbers exactly (see :func:`paradl_summary` and the
    "Quirks" list below). The network is ParaDL's built-in ABCI model (NVLink 50 GB/s and
    9 us inside a node of 4; beyond, InfiniBand 12.5 GB/s with a latency of
    ``2 (plx_cable + 110 ns) + switches``: 40.31 us up to 68 GPUs, 40.49 us up to 136, 40.98 us
    beyond); the ``.plat`` bandwidth and latency lines are not used, as in ParaDL. The
    ``*_scaling_proj`` logs of the repository were produced with an older PLX cable latency of
    15 us instead of 20 us (``plx_cable_latency_s=15e-6``), i.e. 10 us less per ring step
    beyond one node.
``mode="default"``
    The same formulas with the quirks corrected, on our :class:`~milp_parallel.topology.Topology`
    (or a ``.plat``'s single bandwidth and latency).

Quirks of ParaDL reproduced in ``paradl`` mode (corrected in ``default`` mode)
--------------------------------------------------------------------------------
1. Activation memory of serial, data, filter, channel and data+filter leaves out RELU and
   BNORM rows (counted as in place); spatial and data+spatial count every row. Default:
   every row counts.
2. Filter and channel memory divide the split layers' weights by ``p`` twice. Default: once.
3. Integer iteration counts ``ceil(D/B)``, but data parallelism's compute uses
   ``ceil(D/p)`` samples and spatial's all-reduce uses ``D/B`` (not rounded). Default:
   ``I = ceil(D/B)`` everywhere (compute is ``I * B/p`` samples per device).
4. Spatial halos use the memory capacity in samples (``maxSamplePerNode``, a real number)
   instead of the batch, and a halo of ``W * floor((K-1)/2)`` elements (width only, no
   channels or height); ``floor`` makes 2x2 pools exchange nothing yet pay the latency.
   Default: ``B * C * H * floor(K/2)`` elements per side, only layers with ``K > 1``.
5. Data+filter: the across-node all-reduce sends the full weights (the ChainerMNx
   implementation limit) over a bandwidth divided by ``2 * GPUs per node`` (contention on
   the PCIe switch); data+spatial: the halos use ``16 GB/s / p2`` and 3 ms latency (no
   GPUDirect), the all-gather runs over ``p2`` only, the all-reduce is hierarchical with the
   across-node bandwidth halved, and compute and memory leave out the layers after the
   last spatially split one. Default: shards of ``|w| / p2``, the topology's links, all
   layers.
6. Filter and channel rows that do not fit in memory are dropped (they are reported as
   not fitting in :func:`project`); data, data+filter and data+spatial rows are kept
   whatever their memory.
7. The measured per-sample time covers forward, backward and the weight update, spread
   over layers in proportion to ``2 * forward FLOPs + |w|``: the weight update is counted
   per sample, not per iteration (kept in both modes).

Examples
--------
>>> from milp_parallel import paradl, oracle
>>> net = paradl.read_net("data/paradl/RESNET50_ImageNet_profall.net_sc")  # doctest: +SKIP
>>> rows = oracle.paradl_summary(net, "data/paradl/ABCI.plat", "d", max_devices=16,
...                              max_batch=262144, batch_per_device=64)  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .errors import FormatError, InvalidTopologyError, UnknownNameError
from .paradl import NetTable, Platform, read_mask, read_net, read_platform

__all__ = [
    "STRATEGIES",
    "PARADL_CODES",
    "ProjectionRow",
    "Projection",
    "project",
    "rank",
    "paradl_summary",
    "parse_summary",
    "abci_link",
    "compare_with_layerwise",
]

logger = logging.getLogger(__name__)

#: Strategy names accepted by :func:`project`.
STRATEGIES = ("serial", "data", "spatial", "filter", "channel", "pipeline", "data+filter",
              "data+spatial")

#: ParaDL's ``--paratype`` codes and our names for them.
PARADL_CODES = {"o": "serial", "d": "data", "s": "spatial", "f": "filter", "c": "channel",
                "p": "pipeline", "df": "data+filter", "ds": "data+spatial"}

_ALIASES = {**PARADL_CODES, "single": "serial", "sequential": "serial", "df": "data+filter",
            "ds": "data+spatial", "filter+data": "data+filter", "spatial+data": "data+spatial",
            "gpipe": "pipeline"}

BYTES_PER_ELEMENT = 4.0

# ParaDL's ABCI constants (parallel_analysis.py)
_INTRA_BW = 50e9
_INTRA_LAT = 9e-6
_PLX_LAT = 110e-9
_PLX_NO_GPUDIRECT_LAT = 3e-3
_PLX_BW = 16e9
_INTER_BW = 12.5e9
_LEAF_LAT = 90e-9
_FBB_LAT = 90e-9
_SPINE_LAT = 400e-9
#: PLX cable latency of the published HPDC'21 ranking logs.
PLX_CABLE_LATENCY_S = 20e-6
#: The older value behind the repository's ``*_scaling_proj`` logs.
PLX_CABLE_LATENCY_OLD_S = 15e-6


def abci_link(p: float, *, gpudirect: bool = True,
              plx_cable_latency_s: float = PLX_CABLE_LATENCY_S) -> tuple[float, float]:
    """ParaDL's ABCI network model: ``(bandwidth_bytes_per_s, latency_s)`` of a ring of p GPUs.

    Up to 4 GPUs: NVLink (50 GB/s, 9 us). Up to 68 (one leaf switch), 136 (one rack) and
    beyond: InfiniBand EDR 12.5 GB/s with latency ``2 (plx_cable + 110 ns)`` plus the
    switches crossed (90 ns leaf, 90 ns FBB, 400 ns spine). Without GPUDirect, up to 4 GPUs
    go through the PCIe switch (16 GB/s, 3 ms) and up to 68 pay the PCIe hops twice.

    Parameters
    ----------
    p : float
        Number of GPUs in the ring.
    gpudirect : bool, optional
    plx_cable_latency_s : float, optional
        20 us (HPDC'21 logs) or 15 us (the older scaling logs).

    Returns
    -------
    tuple of float

    Examples
    --------
    >>> bw, lat = abci_link(64)
    >>> bw, round(lat * 1e6, 2)
    (12500000000.0, 40.31)
    """
    plx = plx_cable_latency_s
    if p <= 4:
        bw, lat = _INTRA_BW, _INTRA_LAT
    elif p <= 68:
        bw, lat = min(_INTER_BW, _INTRA_BW), max(_INTRA_LAT, 2 * (plx + _PLX_LAT) + _LEAF_LAT)
    elif p <= 136:
        bw = min(_INTER_BW, _INTRA_BW)
        lat = max(_INTRA_LAT, 2 * (plx + _PLX_LAT) + _FBB_LAT + 2 * _LEAF_LAT)
    else:
        bw = min(_INTER_BW, _INTRA_BW)
        lat = max(_INTRA_LAT, 2 * (plx + _PLX_LAT) + _SPINE_LAT + 2 * _FBB_LAT + 2 * _LEAF_LAT)
    if not gpudirect:
        if p <= 4:
            bw, lat = _PLX_BW, _PLX_NO_GPUDIRECT_LAT + _PLX_LAT
        elif p <= 68:
            bw = min(_INTER_BW, _PLX_BW)
            lat = max(2 * _INTRA_LAT, 4 * (plx + _PLX_LAT) + _LEAF_LAT)
    return bw, lat


# --------------------------------------------------------------------------------------------
# The model as arrays


@dataclass(frozen=True, eq=False)
class _Net:
    """Per-layer arrays the formulas need (per sample)."""

    name: str
    dataset_size: int
    kinds: np.ndarray        # str
    x: np.ndarray            # |x_l|
    y: np.ndarray            # |y_l|
    w: np.ndarray            # |w_l|
    comp_s: np.ndarray       # seconds per sample, forward + backward + update
    x_shape: np.ndarray      # (L, 1+s): C, W, H[, D]
    y_shape: np.ndarray
    kernel: np.ndarray       # (L,) first spatial kernel size (0 when none)
    names: tuple[str, ...]

    @property
    def n_layers(self) -> int:
        return len(self.names)

    @property
    def inplace(self) -> np.ndarray:
        """Rows ParaDL leaves out of activation memory (RELU, BNORM)."""
        return (self.kinds == "RELU") | (self.kinds == "BNORM")


def _net_from_table(table: NetTable, speed_flops: float) -> _Net:
    return _Net(name=table.model, dataset_size=table.dataset_size,
                kinds=np.asarray(table.kinds), x=table.x_elems.astype(np.float64),
                y=table.y_elems.astype(np.float64), w=table.w_elems.astype(np.float64),
                comp_s=table.layer_seconds(speed_flops), x_shape=table.x_shapes,
                y_shape=table.y_shapes, kernel=table.w_shapes[:, 2], names=table.names)


_OP_KIND = {"conv": "CONV", "batchnorm": "BNORM", "layernorm": "BNORM", "elementwise": "RELU",
            "linear": "FC", "matmul": "FC", "embedding": "FC", "add": "ADD", "mul": "ADD",
            "dropout": "DROPOUT", "global_pool": "APOOL"}


def _net_from_graph(graph: Any, speed_flops: float, dataset_size: int,
                    seconds_per_sample: float | None = None) -> _Net:
    """Arrays from a :class:`~milp_parallel.graph.LayerGraph` (skipping its input layers)."""
    layers = [lay for lay in graph.layers if lay.op != "input"]
    if not layers:
        raise FormatError("the layer graph has no layers besides its inputs")
    kinds, xs, ys, ws, fl, xsh, ysh, ks, names = [], [], [], [], [], [], [], [], []
    for lay in layers:
        kind = _OP_KIND.get(lay.op, "OTHER")
        if lay.op == "pool":
            kind = "MPOOL" if lay.attrs.get("kind", "max") == "max" else "APOOL"
        src = graph.layer(lay.inputs[0]).output_shape if lay.inputs else lay.output_shape
        out = tuple(lay.output_shape)
        xs.append(float(np.prod(src[1:])))
        ys.append(float(np.prod(out[1:])))
        ws.append(float(lay.params))
        fl.append(2.0 * float(lay.flops) + float(lay.params))
        pad = lambda s: (list(s[1:]) + [1, 1, 1])[:3]  # noqa: E731  C, W, H
        xsh.append(pad(src))
        ysh.append(pad(out))
        k = lay.attrs.get("kernel", 0) if lay.op in ("conv", "pool") else 0
        ks.append(int(k[0] if isinstance(k, (tuple, list)) else k))
        kinds.append(kind)
        names.append(lay.name)
    flops = np.array(fl)
    if seconds_per_sample is not None:
        comp = flops * (seconds_per_sample / flops.sum())
    else:
        comp = flops / speed_flops
    return _Net(name=getattr(graph, "name", "model"), dataset_size=dataset_size,
                kinds=np.array(kinds), x=np.array(xs), y=np.array(ys), w=np.array(ws),
                comp_s=comp, x_shape=np.array(xsh, dtype=np.int64),
                y_shape=np.array(ysh, dtype=np.int64), kernel=np.array(ks, dtype=np.int64),
                names=tuple(names))


# --------------------------------------------------------------------------------------------
# The cluster


@dataclass(frozen=True)
class _Cluster:
    name: str
    memory_bytes: float
    speed_flops: float
    devices_per_node: int
    max_devices: int
    link: Callable[[float, bool], tuple[float, float]]   # (p, gpudirect) -> (bw, lat)
    intra: Callable[[float], tuple[float, float]]        # ring of p inside a node


def _cluster(cluster: Any, mode: str, plx_cable_latency_s: float) -> _Cluster:
    if isinstance(cluster, (str, Path)) and str(cluster).endswith(".plat"):
        cluster = read_platform(cluster)
    elif isinstance(cluster, str):
        from . import clusters as _clusters  # late: written alongside
        cluster = _clusters.get(cluster)
    if isinstance(cluster, Platform):
        if mode == "paradl":
            def link(p, gd=True):
                return abci_link(p, gpudirect=gd, plx_cable_latency_s=plx_cable_latency_s)
            intra = link
        else:
            def link(p, gd=True):
                if p <= 1:
                    return math.inf, 0.0
                return cluster.bandwidth_bytes_per_s, cluster.latency_s
            intra = link
        return _Cluster(cluster.name, cluster.memory_bytes, cluster.speed_flops,
                        cluster.devices_per_node, cluster.max_devices, link, intra)
    # a Topology (duck-typed: device, levels, n_devices, latency(i, j), bandwidth(i, j))
    try:
        dev = cluster.device
        n = int(cluster.n_devices)
        per_node = int(cluster.levels[0].fanout) if cluster.levels else n
    except AttributeError:
        raise InvalidTopologyError(
            f"cluster {cluster!r} is neither a Topology, a ParaDL Platform, a .plat path nor a "
            "cluster name; pass clusters.get('abci') or paradl.read_platform(path)") from None

    def link(p, gd=True):
        p = int(p)
        if p <= 1:
            return math.inf, 0.0
        alpha, bw, _ = cluster.ring_parameters(np.arange(min(p, n)))
        return float(bw), float(alpha)

    speed = float(dev.peak_flops) * float(getattr(dev, "efficiency", 1.0))
    return _Cluster(getattr(cluster, "name", "topology"), float(dev.memory_bytes), speed,
                    per_node, n, link, link)


# --------------------------------------------------------------------------------------------
# Rows


@dataclass(frozen=True)
class ProjectionRow:
    """One strategy at one device count; times are per epoch unless named ``_per_iter``.

    Attributes
    ----------
    strategy : str
    devices : int
    batch : float
        Global batch ``B``.
    batch_per_device : float
        Samples per data-parallel replica (ParaDL's ``--cBon``).
    iterations : float
        Iterations per epoch.
    compute_s, compute_s_per_iter : float
    allreduce_s, allgather_s, halo_s, p2p_s : float
        Each kind of communication, per epoch.
    comm_s : float
        Their sum.
    comm_latency_s : float
        The part of ``comm_s`` due to latency (``alpha`` terms).
    total_s : float
        ``compute_s + comm_s`` (no overlap, as ParaDL).
    memory_bytes : float
        Memory per device (the largest, for pipeline).
    memory_capacity_bytes : float
    fits : bool
    applicable : bool
        False when the strategy cannot use this many devices (times are then ``nan``).
    reason : str
        Why not applicable, or ``""``.
    """

    strategy: str
    devices: int
    batch: float
    batch_per_device: float
    iterations: float
    compute_s: float
    compute_s_per_iter: float
    allreduce_s: float
    allgather_s: float
    halo_s: float
    p2p_s: float
    comm_s: float
    comm_latency_s: float
    total_s: float
    memory_bytes: float
    memory_capacity_bytes: float
    fits: bool
    applicable: bool
    reason: str = ""

    @property
    def comm_s_per_iter(self) -> float:
        """Communication per iteration."""
        return self.comm_s / self.iterations if self.iterations else math.nan


def _row(strategy, p, B, b, iters, comp, *, allreduce=0.0, allgather=0.0, halo=0.0, p2p=0.0,
         latency=0.0, mem, cap, comp_per_iter=None) -> ProjectionRow:
    comm = allreduce + allgather + halo + p2p
    return ProjectionRow(strategy, int(p), float(B), float(b), float(iters), float(comp),
                         float(comp / iters if comp_per_iter is None else comp_per_iter),
                         float(allreduce), float(allgather), float(halo), float(p2p),
                         float(comm), float(latency), float(comp + comm), float(mem),
                         float(cap), bool(mem <= cap), True, "")


def _not_applicable(strategy, p, B, b, mem_cap, reason) -> ProjectionRow:
    nan = math.nan
    return ProjectionRow(strategy, int(p), float(B), float(b), nan, nan, nan, nan, nan, nan,
                         nan, nan, nan, nan, nan, float(mem_cap), False, False, reason)


# --------------------------------------------------------------------------------------------
# The formulas, one function per strategy; ``q`` (quirks) selects ParaDL's exact behaviour.


def _act(net: _Net, q: bool) -> tuple[float, float]:
    keep = ~net.inplace if q else np.ones(net.n_layers, bool)
    return float(net.x[keep].sum()), float(net.y[keep].sum())


def _serial(net, cl, p, b, D, q, **_):
    x, y = _act(net, q)
    W = float(net.w.sum())
    comp = D * float(net.comp_s.sum())
    iters = math.ceil(D / b)
    mem = 2 * BYTES_PER_ELEMENT * (b * (y + x) + W)
    return _row("serial", 1, b, b, iters, comp, mem=mem, cap=cl.memory_bytes)


def _data(net, cl, p, b, D, q, **_):
    x, y = _act(net, q)
    W = float(net.w.sum())
    B = b * p
    iters = math.ceil(D / B)
    total_comp = float(net.comp_s.sum())
    comp = math.ceil(D / p) * total_comp if q else iters * b * total_comp
    bw, lat = cl.link(p, True)
    beta = 1 / float(bw)
    ar = 2 * iters * (p - 1) * (lat + W * BYTES_PER_ELEMENT * beta / p)
    mem = 2 * (b * (x + y) + W) * BYTES_PER_ELEMENT
    return _row("data", p, B, b, iters, comp, allreduce=ar, latency=2 * iters * (p - 1) * lat,
                mem=mem, cap=cl.memory_bytes)


def _mask_sums(net, mask, div):
    m = mask
    w = float(net.w[m].sum()) / div + float(net.w[~m].sum())
    c = float(net.comp_s[m].sum()) / div + float(net.comp_s[~m].sum())
    count = int(m.sum())
    out = float(net.y[m].sum())
    if m[-1]:
        out -= float(net.y[-1])
        count -= 1
    return w, c, count, out


def _model_parallel(kind, net, cl, p, b, D, q, mask, **_):
    """filter or channel with ParaDL's case 3: global batch b, p devices."""
    x, y = _act(net, q)
    B = b
    w_split, c_split, count, out = _mask_sums(net, mask, p)
    iters = math.ceil(D / B)
    mem = 2 * (B * (x + y) + (w_split / p if q else w_split)) * BYTES_PER_ELEMENT
    comp = iters * B * c_split
    bw, lat = cl.link(p, True)
    beta = 1 / float(bw)
    one = iters * (p - 1) * (lat * count + (B * out * BYTES_PER_ELEMENT * beta) / p)
    lat_one = iters * (p - 1) * lat * count
    if kind == "filter":
        return _row("filter", p, B, b, iters, comp, allgather=one, allreduce=2 * one,
                    latency=3 * lat_one, mem=mem, cap=cl.memory_bytes)
    return _row("channel", p, B, b, iters, comp, allreduce=2 * one, allgather=one,
                latency=3 * lat_one, mem=mem, cap=cl.memory_bytes)


def _split_index(mask):
    idx = np.flatnonzero(mask)
    return int(idx[-1]) if idx.size else 0


def _halo_elems(net, q, i):
    """Per-sample halo elements of layer i: (forward y, backward dx)."""
    k = int(net.kernel[i])
    if q:
        half = (k - 1) // 2
        return float(net.y_shape[i, 1] * half), float(net.x_shape[i, 1] * half)
    half = k // 2
    other_y = float(np.prod(net.y_shape[i, 2:])) * float(net.y_shape[i, 0])
    other_x = float(np.prod(net.x_shape[i, 2:])) * float(net.x_shape[i, 0])
    return other_y * half, other_x * half


def _spatial(net, cl, p, b, D, q, mask, **_):
    W = float(net.w.sum())
    m = mask
    split = _split_index(m)
    if q:
        x = float(np.ceil(net.x[m] / p).sum() + net.x[~m].sum())
        y = float(np.ceil(net.y[m] / p).sum() + net.y[~m].sum())
    else:
        x = float((net.x[m] / p).sum() + net.x[~m].sum())
        y = float((net.y[m] / p).sum() + net.y[~m].sum())
    comp_ps = float(net.comp_s[m].sum()) / p + float(net.comp_s[~m].sum())
    item_cap = cl.memory_bytes / BYTES_PER_ELEMENT
    max_samples = (item_cap / 2 - W) / (x + y)
    B = b
    iters = math.ceil(D / B)
    mem = 2 * (float(B) * (x + y) + W) * BYTES_PER_ELEMENT
    comp = D * comp_ps if q else iters * B * comp_ps
    bw, lat = cl.link(p, not q)
    beta = 1 / float(bw)
    halo_samples = max_samples if q else B
    halo = 0.0
    n_halo = 0
    for i in range(split + 1):
        if net.kernel[i] > 1 and m[i]:
            hy, hx = _halo_elems(net, q, i)
            halo += 2 * (lat + hy * halo_samples * BYTES_PER_ELEMENT * beta)
            halo += 2 * (lat + hx * halo_samples * BYTES_PER_ELEMENT * beta)
            n_halo += 1
    halo *= iters
    ag = 2 * (p - 1) * (lat + (B * float(net.y[split]) * BYTES_PER_ELEMENT * beta) / p) * iters
    ar_iters = D / B if q else iters
    ar = 2 * ar_iters * (p - 1) * (lat + W * BYTES_PER_ELEMENT * beta / p)
    latency = iters * 4 * lat * n_halo + 2 * (p - 1) * lat * iters + 2 * ar_iters * (p - 1) * lat
    row = _row("spatial", p, B, b, iters, comp, allreduce=ar, allgather=ag, halo=halo,
               latency=latency, mem=mem, cap=cl.memory_bytes)
    return row, max_samples


def _data_filter(net, cl, p, b, D, q, mask, **_):
    x, y = _act(net, q)
    W = float(net.w.sum())
    P2 = min(cl.devices_per_node, p)
    P1 = p / P2
    B = b * P1
    w_split, c_split, count, out = _mask_sums(net, mask, P2)
    iters = math.ceil(D / B)
    mem = 2 * (b * (x + y) + w_split) * BYTES_PER_ELEMENT
    comp = iters * b * c_split
    bw1, lat1 = cl.intra(P2) if P2 > 1 else (math.inf, 0.0)
    beta1 = 1 / float(bw1)
    one = iters * (P2 - 1) * (lat1 * count + (b * out * BYTES_PER_ELEMENT * beta1) / P2)
    bw2, lat2 = cl.link(p, True) if P1 > 1 else (math.inf, 0.0)
    if q:
        bw2 = bw2 / (2 * P2)
        shard = W
    else:
        shard = w_split
    beta2 = 1 / float(bw2)
    ar = 2 * iters * (P1 - 1) * (lat2 + shard * BYTES_PER_ELEMENT * beta2 / P1)
    latency = 3 * iters * (P2 - 1) * lat1 * count + 2 * iters * (P1 - 1) * lat2
    return _row("data+filter", p, B, b, iters, comp, allgather=one, allreduce=2 * one + ar,
                latency=latency, mem=mem, cap=cl.memory_bytes)


def _data_spatial(net, cl, p, b, D, q, mask, **_):
    W = float(net.w.sum())
    m = mask
    split = _split_index(m)
    P2 = min(cl.devices_per_node, p)
    P1 = p / P2
    B = b * P1
    keep = np.arange(net.n_layers) <= split if q else np.ones(net.n_layers, bool)
    ms, ns = m & keep, ~m & keep
    if q:
        x = float(np.ceil(net.x[ms] / P2).sum() + net.x[ns].sum())
        y = float(np.ceil(net.y[ms] / P2).sum() + net.y[ns].sum())
    else:
        x = float((net.x[ms] / P2).sum() + net.x[ns].sum())
        y = float((net.y[ms] / P2).sum() + net.y[ns].sum())
    comp_ps = float(net.comp_s[ms].sum()) / P2 + float(net.comp_s[ns].sum())
    iters = math.ceil(D / B)
    mem = 2 * (float(B) * (x + y) / P1 + W) * BYTES_PER_ELEMENT
    comp = math.ceil(D / P1) * comp_ps if q else iters * b * comp_ps
    if q:
        bw1, lat1 = cl.link(P2, False)
        beta_h = 1 / (bw1 / P2)
        beta_g = beta_h
    else:
        bw1, lat1 = cl.intra(P2) if P2 > 1 else (math.inf, 0.0)
        beta_h = beta_g = 1 / float(bw1)
    halo = 0.0
    n_halo = 0
    for i in range(split + 1):
        # ParaDL's published data+spatial logs exchange halos of every kernel > 1 layer up
        # to the split, masked or not (quirk 5)
        if net.kernel[i] > 1 and (m[i] or q):
            hy, hx = _halo_elems(net, q, i)
            halo += 2 * (lat1 + hy * b * BYTES_PER_ELEMENT * beta_h)
            halo += 2 * (lat1 + hx * b * BYTES_PER_ELEMENT * beta_h)
            n_halo += 1
    halo *= iters
    ag = 2 * (P2 - 1) * (lat1 + (b * float(net.y[split]) * BYTES_PER_ELEMENT * beta_g) / P2)
    ag *= iters
    bwl, latl = cl.intra(P2) if P2 > 1 else (math.inf, 0.0)
    ar_local = 2 * (P2 - 1) * (latl + W * BYTES_PER_ELEMENT / float(bwl) / P2)
    bwg, latg = cl.link(p, True) if P1 > 1 else (math.inf, 0.0)
    if q:
        bwg = bwg / 2
    ar = (ar_local + 2 * (P1 - 1) * (latg + W * BYTES_PER_ELEMENT / float(bwg) / P1)) * iters
    latency = iters * (4 * lat1 * n_halo + 2 * (P2 - 1) * lat1 + 2 * (P2 - 1) * latl
                       + 2 * (P1 - 1) * latg)
    return _row("data+spatial", p, B, b, iters, comp, allreduce=ar, allgather=ag, halo=halo,
                latency=latency, mem=mem, cap=cl.memory_bytes)


def _stages(comp: np.ndarray, p: int) -> list[tuple[int, int]] | None:
    """ParaDL's greedy contiguous partition of layers into p stages of ~equal compute."""
    G = len(comp)
    target = float(comp.sum()) / p
    bounds = [0]
    cur = float(comp[0])
    for j in range(1, G):
        if len(bounds) == p:
            break
        cur += float(comp[j])
        if cur > target:
            bounds.append(j)
            cur = float(comp[j])
    if len(bounds) < p:
        return None
    ends = bounds[1:] + [G]
    return list(zip(bounds, ends))


def _pipeline(net, cl, p, b, D, q, micro_batches=None, **_):
    S = int(micro_batches or p)
    B = b * S
    iters = math.ceil(D / B)
    stages = _stages(net.comp_s, p)
    if stages is None:
        return None
    comp_stage = np.array([net.comp_s[a:e].sum() for a, e in stages])
    mem = max(2 * (B * float(net.x[a:e].sum() + net.y[a:e].sum()) + float(net.w[a:e].sum()))
              * BYTES_PER_ELEMENT for a, e in stages)
    comp = iters * (p + S - 1) * b * float(comp_stage.max())
    worst, worst_lat = 0.0, 0.0
    for i, (a, e) in enumerate(stages[:-1]):
        bw, lat = cl.link(i + 2, True)
        t = lat + b * float(net.y[e - 1]) * BYTES_PER_ELEMENT / float(bw)
        if t > worst:
            worst, worst_lat = t, lat
    p2p = 2 * iters * (p + S - 2) * worst
    return _row("pipeline", p, B, b, iters, comp, p2p=p2p,
                latency=2 * iters * (p + S - 2) * worst_lat, mem=mem, cap=cl.memory_bytes)


# --------------------------------------------------------------------------------------------
# Limits


def _default_mask(net: _Net, strategy: str) -> np.ndarray:
    """Layers a strategy splits when no mask is given: conv/pool layers (spatial), conv layers
    (filter, channel), i.e. what ParaDL's ``*.lc`` files mark."""
    if strategy in ("spatial", "data+spatial"):
        m = np.isin(net.kinds, ["CONV", "MPOOL", "APOOL"]) & (net.y_shape[:, 1] > 1)
    else:
        m = net.kinds == "CONV"
    if not m.any():
        m = np.ones(net.n_layers, bool)
    return m


def _limit(net: _Net, strategy: str, mask: np.ndarray, b: float, cl: _Cluster
           ) -> tuple[float, str]:
    """The largest device count of a strategy and the reason for it."""
    if strategy == "serial":
        return 1, "serial uses one device"
    if strategy == "data":
        return math.inf, ""
    if strategy == "spatial":
        v = min(int(net.x_shape[mask, 1].min()), int(net.y_shape[mask, 1].min()))
        return v, f"spatial splits the width: at most min W = {v} devices"
    if strategy == "filter":
        v = int(net.y_shape[mask, 0].min())
        return v, f"filter splits output channels: at most min F = {v} devices"
    if strategy == "channel":
        idx = np.flatnonzero(mask)
        idx = idx[idx > 0]
        v = int(net.x_shape[idx, 0].min()) if idx.size else 1
        return v, f"channel splits input channels (from layer 2): at most min C = {v} devices"
    if strategy == "pipeline":
        return net.n_layers, f"pipeline needs a layer per stage: at most G = {net.n_layers}"
    if strategy == "data+filter":
        return math.inf, ""
    if strategy == "data+spatial":
        return math.inf, ""
    raise AssertionError(strategy)


def _canon(strategy: str) -> str:
    s = _ALIASES.get(strategy, strategy)
    if s not in STRATEGIES:
        raise UnknownNameError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)} "
                               f"or ParaDL codes {', '.join(PARADL_CODES)}")
    return s


_FORMULAS = {
    "serial": _serial,
    "data": _data,
    "spatial": lambda *a, **k: _spatial(*a, **k)[0],
    "filter": lambda *a, **k: _model_parallel("filter", *a, **k),
    "channel": lambda *a, **k: _model_parallel("channel", *a, **k),
    "pipeline": _pipeline,
    "data+filter": _data_filter,
    "data+spatial": _data_spatial,
}


# --------------------------------------------------------------------------------------------
# Projection


@dataclass(frozen=True)
class Projection:
    """The oracle's projection of one strategy over device counts.

    Attributes
    ----------
    model, cluster, strategy, mode, scaling : str
    dataset_size : int
    rows : tuple of ProjectionRow
    """

    model: str
    cluster: str
    strategy: str
    mode: str
    scaling: str
    dataset_size: int
    rows: tuple[ProjectionRow, ...]

    def to_dict(self) -> dict:
        """Plain dict (rows as dicts)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}
        d["rows"] = [asdict(r) for r in self.rows]
        d["bottleneck"] = self.bottleneck()
        return d

    def to_json(self, path: str | Path | None = None) -> str:
        """JSON text (``nan`` as ``null``); written to ``path`` when given."""
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v
        d = self.to_dict()
        d["rows"] = [{k: clean(v) for k, v in r.items()} for r in d["rows"]]
        text = json.dumps(d, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_csv(self, path: str | Path | None = None) -> str:
        """CSV text, one row per device count; written to ``path`` when given."""
        buf = io.StringIO()
        names = [f.name for f in fields(ProjectionRow)]
        wr = csv.writer(buf, lineterminator="\n")
        wr.writerow(names)
        for r in self.rows:
            wr.writerow([getattr(r, n) for n in names])
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def bottleneck(self) -> str:
        """A plain-language note on what limits scaling.

        Examples: ``"communication exceeds compute from 1024 devices: the all-reduce latency
        term dominates"``; ``"compute dominates up to 64 devices (communication is 12% of the
        time at 64)"``.
        """
        rows = [r for r in self.rows if r.applicable]
        if not rows:
            return f"{self.strategy} is not applicable at any of the device counts asked"
        for r in rows:
            if r.comm_s > r.compute_s:
                parts = {"all-reduce": r.allreduce_s, "all-gather": r.allgather_s,
                         "halo exchange": r.halo_s, "point-to-point": r.p2p_s}
                top = max(parts, key=parts.get)
                term = "latency" if r.comm_latency_s > 0.5 * r.comm_s else "bandwidth"
                note = (f"communication exceeds compute from {r.devices} devices: the {top} "
                        f"{term} term dominates")
                break
        else:
            r = rows[-1]
            share = r.comm_s / r.total_s if r.total_s else 0.0
            note = (f"compute dominates up to {r.devices} devices (communication is "
                    f"{100 * share:.0f}% of the time at {r.devices})")
        bad = [r.devices for r in rows if not r.fits]
        if bad:
            note += f"; memory does not fit at {', '.join(map(str, bad))} devices"
        return note


def _resolve_model(model, cl, dataset_size, seconds_per_sample):
    if isinstance(model, (str, Path)):
        model = read_net(model)
    if isinstance(model, NetTable):
        net = _net_from_table(model, cl.speed_flops)
        if seconds_per_sample is not None:
            fl = model.flops()
            net = _Net(**{**net.__dict__, "comp_s": fl * (seconds_per_sample / fl.sum())})
    else:
        net = _net_from_graph(model, cl.speed_flops, dataset_size or 0, seconds_per_sample)
    if dataset_size is not None:
        net = _Net(**{**net.__dict__, "dataset_size": int(dataset_size)})
    if net.dataset_size <= 0:
        raise FormatError("dataset_size is needed for a model without a dataset line "
                          "(pass dataset_size=1_281_167 for ImageNet)")
    return net


def _resolve_mask(net, strategy, layer_mask):
    if layer_mask is None:
        return _default_mask(net, strategy)
    if isinstance(layer_mask, (str, Path)):
        return np.asarray(read_mask(layer_mask, names=net.names))
    m = np.asarray(layer_mask, dtype=bool)
    if m.shape != (net.n_layers,):
        raise FormatError(f"layer_mask has {m.size} entries for a model of {net.n_layers} "
                          "layers")
    return m


def project(model: Any, cluster: Any, strategy: str, *, devices: Sequence[int],
            batch_per_device: float, dataset_size: int | None = None,
            scaling: str = "weak", global_batch: float | None = None,
            mode: str = "default", layer_mask: Any = None, micro_batches: int | None = None,
            seconds_per_sample: float | None = None,
            plx_cable_latency_s: float = PLX_CABLE_LATENCY_S) -> Projection:
    """Project one uniform strategy's epoch time and memory at several device counts.

    Parameters
    ----------
    model : NetTable, path to a ParaDL table, or LayerGraph
    cluster : Topology, Platform, path to a ``.plat`` or a cluster name
    strategy : str
        One of :data:`STRATEGIES` (or a ParaDL code, see :data:`PARADL_CODES`).
    devices : sequence of int
        Device counts.
    batch_per_device : float
        Samples per data-parallel replica (ParaDL's ``--cBon``): the global batch is this
        times the number of replicas (``p`` for data, ``p / GPUs per node`` for the hybrids, 1
        for spatial, filter and channel, ``S`` micro-batches for pipeline).
    dataset_size : int, optional
        Samples per epoch (default: the table's ``Input`` line).
    scaling : {"weak", "strong"}
        Weak: ``batch_per_device`` fixed. Strong: the global batch fixed at ``global_batch``
        (default ``batch_per_device`` times the replicas at the smallest device count) and
        the per-replica batch shrinks.
    mode : {"default", "paradl"}
        See the module documentation.
    layer_mask : path, bool array or None
        Layers the strategy splits (ParaDL ``*.lc``); default: conv (and pool, for spatial).
    micro_batches : int, optional
        Pipeline micro-batches ``S`` (default ``p``).
    seconds_per_sample : float, optional
        Measured forward+backward time of one sample, spread over layers by FLOPs (otherwise
        the table's ``t`` column, or FLOPs / device speed).
    plx_cable_latency_s : float, optional
        ParaDL mode's ABCI latency constant (see :func:`abci_link`).

    Returns
    -------
    Projection
        Rows in the order of ``devices``; a device count beyond the strategy's limit gives a
        row with ``applicable=False`` and the reason.

    Raises
    ------
    UnknownNameError
        For an unknown strategy.
    FormatError
        For a bad mask or a missing dataset size.
    """
    strategy = _canon(strategy)
    if mode not in ("default", "paradl"):
        raise UnknownNameError(f"unknown mode {mode!r}; use 'default' or 'paradl'")
    if scaling not in ("weak", "strong"):
        raise UnknownNameError(f"unknown scaling {scaling!r}; use 'weak' or 'strong'")
    cl = _cluster(cluster, mode, plx_cable_latency_s)
    net = _resolve_model(model, cl, dataset_size, seconds_per_sample)
    mask = _resolve_mask(net, strategy, layer_mask)
    q = mode == "paradl"
    D = net.dataset_size
    limit, why = _limit(net, strategy, mask, batch_per_device, cl)
    devs = [int(p) for p in devices]
    replicas = _replicas_fn(strategy, cl, micro_batches)
    if scaling == "strong" and global_batch is None:
        global_batch = batch_per_device * replicas(min(devs))
    rows = []
    for p in devs:
        b = batch_per_device if scaling == "weak" else global_batch / replicas(p)
        if p < 1:
            rows.append(_not_applicable(strategy, p, math.nan, b, cl.memory_bytes,
                                        "needs at least one device"))
            continue
        if p > cl.max_devices:
            rows.append(_not_applicable(strategy, p, math.nan, b, cl.memory_bytes,
                                        f"the cluster {cl.name} has {cl.max_devices} devices"))
            continue
        if p > limit or (strategy == "serial" and p != 1):
            rows.append(_not_applicable(strategy, p, b * replicas(p), b, cl.memory_bytes, why))
            continue
        if strategy in ("data+filter", "data+spatial") and p % min(cl.devices_per_node, p):
            rows.append(_not_applicable(strategy, p, math.nan, b, cl.memory_bytes,
                                        f"{strategy} needs a multiple of the "
                                        f"{cl.devices_per_node} devices per node"))
            continue
        if p == 1 and strategy != "serial":
            r = _serial(net, cl, 1, b, D, q)
            rows.append(ProjectionRow(**{**asdict(r), "strategy": strategy}))
            continue
        r = _FORMULAS[strategy](net, cl, p, b, D, q, mask=mask, micro_batches=micro_batches)
        if r is None:
            rows.append(_not_applicable(strategy, p, math.nan, b, cl.memory_bytes,
                                        f"cannot balance {net.n_layers} layers into {p} "
                                        "stages"))
            continue
        if strategy == "data" and not q and r.batch < p:
            rows.append(_not_applicable(strategy, p, r.batch, b, cl.memory_bytes,
                                        f"data parallelism needs p <= B = {r.batch:g}"))
            continue
        rows.append(r)
    cname = cl.name
    return Projection(net.name, cname, strategy, mode, scaling, D, tuple(rows))


def _replicas_fn(strategy, cl, micro_batches):
    if strategy in ("data",):
        return lambda p: p
    if strategy in ("data+filter", "data+spatial"):
        return lambda p: max(1, p // min(cl.devices_per_node, p))
    if strategy == "pipeline":
        return lambda p: micro_batches or p
    return lambda p: 1


def rank(model: Any, cluster: Any, strategies: Iterable[str] = STRATEGIES, *,
         devices: Sequence[int], batch_per_device: float, key: str = "total_s",
         layer_masks: dict | None = None, **options) -> dict[int, list[ProjectionRow]]:
    """Order strategies at each device count, best first.

    Parameters
    ----------
    model, cluster, devices, batch_per_device
        As :func:`project`.
    strategies : iterable of str
    key : str, optional
        A :class:`ProjectionRow` field to sort by (default ``total_s``).
    layer_masks : dict, optional
        Strategy name -> mask (as ``layer_mask`` of :func:`project`).
    **options
        Passed to :func:`project` (``mode``, ``scaling``, ``dataset_size`` ...).

    Returns
    -------
    dict
        Device count -> rows, applicable and fitting ones first (by ``key``), then those
        that do not fit, then the inapplicable ones.
    """
    layer_masks = {(_canon(k)): v for k, v in (layer_masks or {}).items()}
    out: dict[int, list[ProjectionRow]] = {int(p): [] for p in devices}
    for s in strategies:
        s = _canon(s)
        pr = project(model, cluster, s, devices=devices, batch_per_device=batch_per_device,
                     layer_mask=layer_masks.get(s), **options)
        for r in pr.rows:
            out[r.devices].append(r)
    for p, rows in out.items():
        rows.sort(key=lambda r: (not r.applicable, not r.fits,
                                 getattr(r, key) if r.applicable else math.inf, r.strategy))
    return out


# --------------------------------------------------------------------------------------------
# ParaDL's command line, exactly


def _as_table(net) -> NetTable:
    if isinstance(net, NetTable):
        return net
    return read_net(net)


def _as_platform(plat) -> Platform:
    if isinstance(plat, Platform):
        return plat
    return read_platform(plat)


def paradl_summary(net: NetTable | str | Path, plat: Platform | str | Path,
                   strategies: str | Sequence[str], *, max_devices: float, max_batch: float,
                   batch_per_device: float, layer_mask: Any = None,
                   plx_cable_latency_s: float = PLX_CABLE_LATENCY_S) -> list[dict]:
    """ParaDL's SUMMARY table for ``parallel_analysis.py -goal 1``.

    Reproduces ``parallel_analysis.py -net NET -plat PLAT -goal 1 --paratype STRATEGIES
    --cmaxp MAX_DEVICES --cmaxB MAX_BATCH --cBon=BATCH_PER_DEVICE --lc LAYER_MASK``: rows
    in ParaDL's order (serial, data, spatial, filter case 1 then 3, channel case 1 then 3,
    data+filter, data+spatial, whatever the order of ``strategies``), device counts the
    powers of two from 2 up to ``max_devices`` (capped by the platform and each strategy's
    limit), with ParaDL's quirks (module documentation).

    Parameters
    ----------
    net : NetTable or path
    plat : Platform or path
    strategies : str or sequence of str
        ParaDL codes ``o, d, s, f, c, df, ds`` (``a`` for all); a string may join them with
        commas, as ``--paratype``.
    max_devices, max_batch, batch_per_device : float
        ``--cmaxp``, ``--cmaxB``, ``--cBon``.
    layer_mask : path or bool array, optional
        ``--lc``: the layers filter, channel, spatial and the hybrids split (default all).
    plx_cable_latency_s : float, optional
        20 us (the ranking logs) or :data:`PLX_CABLE_LATENCY_OLD_S` (the scaling logs).

    Returns
    -------
    list of dict
        Keys ``name`` (ParaDL's: single, data, spatial, filter1, filter3, chan1, chan3, df,
        ds), ``B``, ``p``, ``mem_bytes``, ``comp_s``, ``comm_s``, ``time_s`` and
        ``cost_node_minutes`` (``p * ceil(time / 60)``).

    Raises
    ------
    UnknownNameError
        For an unknown code (``p``, pipeline, is refused: ParaDL's pipeline analysis returns
        before computing anything).
    """
    table = _as_table(net)
    platform = _as_platform(plat)
    codes = [c.strip() for c in (strategies.split(",") if isinstance(strategies, str)
                                 else strategies)]
    for c in codes:
        if c not in ("a", "o", "d", "s", "f", "c", "df", "ds"):
            raise UnknownNameError(f"unknown ParaDL strategy code {c!r}; known: a, o, d, s, "
                                   "f, c, df, ds (p, pipeline, is not implemented in ParaDL)")
    want = set(codes)
    if "a" in want:
        want |= {"o", "d", "s", "f", "c", "df", "ds"}
    cl = _cluster(platform, "paradl", plx_cable_latency_s)
    net_ = _net_from_table(table, platform.speed_flops)
    if layer_mask is None:
        mask = np.ones(net_.n_layers, bool)
    elif isinstance(layer_mask, (str, Path)):
        mask = np.asarray(read_mask(layer_mask, names=table.names))
    else:
        mask = np.asarray(layer_mask, dtype=bool)
    max_rank = min(float(max_devices), float(platform.max_devices))
    b = float(batch_per_device)
    max_b = float(max_batch)
    D = float(table.dataset_size)
    items = platform.memory_bytes / BYTES_PER_ELEMENT
    x, y = _act(net_, True)
    W = float(net_.w.sum())
    rows: list[ProjectionRow | tuple[str, ProjectionRow]] = []
    out: list[tuple[str, ProjectionRow]] = []

    def powers(limit):
        return [2.0 ** i for i in range(1, int(math.log(limit, 2)) + 1)]

    enough = (items / 2 - W) / (x + y) >= 1
    if "o" in want and enough:
        out.append(("single", _serial(net_, cl, 1, b, D, True)))
    if "d" in want and enough:
        for p in powers(max_rank):
            if b * p <= max_b:
                out.append(("data", _data(net_, cl, p, b, D, True)))
    if "s" in want:
        m = mask
        min_w = min(float(net_.x_shape[m, 1].min()), float(net_.y_shape[m, 1].min()))
        for p in powers(min(max_rank, min_w)):
            r, max_samples = _spatial(net_, cl, p, b, D, True, mask=m)
            if max_samples >= 1 and b <= max_b:
                out.append(("spatial", r))
    for code, kind, tag in (("f", "filter", "filter"), ("c", "channel", "chan")):
        if code not in want:
            continue
        if kind == "filter":
            lim = float(net_.y_shape[mask, 0].min())
        else:
            idx = np.flatnonzero(mask)
            idx = idx[idx > 0]
            lim = float(net_.x_shape[idx, 0].min()) if idx.size else 1e9
        ps = powers(min(max_rank, lim))
        for case, batch_of in ((1, lambda p: b * p), (3, lambda p: b)):
            for p in ps:
                B = batch_of(p)
                if B > max_b:
                    continue
                r = _model_parallel(kind, net_, cl, p, B, D, True, mask=mask)
                if r.memory_bytes > platform.memory_bytes:
                    logger.info("%s%d: %g samples on %g GPUs do not fit", tag, case, B, p)
                    continue
                out.append((f"{tag}{case}", r))
    P2 = float(platform.devices_per_node)
    if "df" in want and (items / 2 - W / P2) / (x + y) >= 1:
        for i in range(int(math.log(P2, 2)), int(math.log(max_rank, 2)) + 1):
            p = 2.0 ** i
            if b * p / P2 <= max_b:
                out.append(("df", _data_filter(net_, cl, p, b, D, True, mask=mask)))
    if "ds" in want:
        for i in range(int(math.log(P2, 2)), int(math.log(max_rank, 2)) + 1):
            p = 2.0 ** i
            if b * p / P2 <= max_b and p >= P2:
                out.append(("ds", _data_spatial(net_, cl, p, b, D, True, mask=mask)))
    del rows
    result = []
    for name, r in out:
        t = r.compute_s + r.comm_s
        result.append({"name": name, "B": r.batch, "p": r.devices, "mem_bytes": r.memory_bytes,
                       "comp_s": r.compute_s, "comm_s": r.comm_s, "time_s": t,
                       "cost_node_minutes": r.devices * math.ceil(t / 60)})
    return result


_SUMMARY_KEYS = ("name", "B", "p", "mem_bytes", "comp_s", "comm_s", "time_s",
                 "cost_node_minutes")


def parse_summary(text: str) -> list[dict]:
    """Parse the SUMMARY table(s) of a ParaDL log into dicts like :func:`paradl_summary`'s.

    Parameters
    ----------
    text : str
        A log's content.

    Returns
    -------
    list of dict
        The rows of the last SUMMARY in the log.

    Raises
    ------
    FormatError
        When the log has no SUMMARY or a row is malformed.
    """
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if "SUMMARY" in ln and ln.startswith("=")]
    if not starts:
        raise FormatError("no ==SUMMARY== section in the ParaDL log")
    rows = []
    for ln in lines[starts[-1] + 2:]:
        if not ln.strip() or ln.startswith("#") or ln.startswith("="):
            break
        parts = ln.split()
        if len(parts) != len(_SUMMARY_KEYS):
            raise FormatError(f"SUMMARY row {ln!r} has {len(parts)} columns, expected "
                              f"{len(_SUMMARY_KEYS)}")
        rows.append({"name": parts[0], **{k: float(v) for k, v in
                                          zip(_SUMMARY_KEYS[1:], parts[1:])}})
    return rows


def parse_command(text: str) -> dict:
    """The arguments of a ParaDL log's first lines (``-net``, ``--paratype``, ``--cmaxB`` ...).

    Returns
    -------
    dict
        Keys ``net``, ``plat``, ``strategies`` (list of codes), ``max_batch``,
        ``max_devices``, ``batch_per_device``.
    """
    import ast
    import re
    m1 = re.search(r"-net (\S+) -plat (\S+) -goal \d+ --paratype (\[.*?\])", text)
    m2 = re.search(r"--cmaxB (\S+) --cmaxp (\S+) --cBon (\S+)", text)
    if not (m1 and m2):
        raise FormatError("no ParaDL command line at the top of the log")
    return {"net": m1.group(1), "plat": m1.group(2),
            "strategies": ast.literal_eval(m1.group(3)),
            "max_batch": float(m2.group(1)), "max_devices": float(m2.group(2)),
            "batch_per_device": float(m2.group(3))}


# --------------------------------------------------------------------------------------------
# Tie to the layer-wise search


def compare_with_layerwise(model: Any, cluster: Any, devices: int, *,
                           strategy: str = "data", batch_size: int | None = None,
                           batch_per_device: float | None = None,
                           dataset_size: int | None = None, solver: str = "auto",
                           **solve_options) -> dict:
    """The oracle's projection and the layer-wise cost model's view of one uniform strategy.

    Parameters
    ----------
    model : LayerGraph or model name (see :mod:`milp_parallel.models`)
    cluster : Topology or cluster name
    devices : int
    strategy : str, optional
        The uniform strategy to compare (``data`` maps to the layer-wise ``data`` baseline;
        ``filter`` and ``channel`` to ``model``).
    batch_size : int, optional
        Global batch of the layer-wise model (default ``batch_per_device * devices``).
    batch_per_device : float, optional
        Oracle batch per replica (default ``batch_size / devices``).
    dataset_size : int, optional
        Samples per epoch for the oracle (default: one iteration, ``batch_size``).
    solver : str, optional
    **solve_options
        Passed to :func:`milp_parallel.plan.solve`.

    Returns
    -------
    dict
        ``oracle`` (a :class:`ProjectionRow`, per epoch), ``oracle_step_seconds`` (its time
        per iteration), ``layerwise_step_seconds`` (the layer-wise model's time of the same
        uniform strategy), ``optimum_step_seconds`` (the MILP optimum), ``plan`` (the Plan).
    """
    from . import plan as _plan  # late: depends on the whole pipeline
    strategy = _canon(strategy)
    if isinstance(model, str):
        from . import models as _models
        model = _models.get(model)
    if batch_size is None:
        if batch_per_device is None:
            raise FormatError("give batch_size or batch_per_device")
        batch_size = int(batch_per_device * devices)
    if batch_per_device is None:
        batch_per_device = batch_size / devices if strategy == "data" else batch_size
    pl = _plan.solve(model, cluster, batch_size=batch_size, devices=devices, solver=solver,
                     **solve_options)
    proj = project(model, cluster, strategy, devices=[devices],
                   batch_per_device=batch_per_device,
                   dataset_size=dataset_size or batch_size)
    row = proj.rows[0]
    name = {"data": "data", "filter": "model", "channel": "model"}.get(strategy)
    base = pl.baselines.get(name) if name else None
    return {"oracle": row,
            "oracle_step_seconds": row.total_s / row.iterations if row.applicable else math.nan,
            "layerwise_step_seconds": base.step_seconds if base is not None else math.nan,
            "optimum_step_seconds": pl.step_seconds,
            "plan": pl}
