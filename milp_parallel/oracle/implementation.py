"""The default mode's formulas: ParaDL's strategies as ChainerMN-X implements them, priced on a
topology with the roofline and the collectives of this package.

ParaDL's measurements (and its oracle) are of the ChainerMN-X implementations of each strategy
(repositories ankahira/paraDL and ankahira/chainermnx). The default mode follows what those
implementations do, with this package's physics instead of ParaDL's constants:

Compute
    A measured per-sample time (the ``t`` column of a ParaDL table) is spread over layers in
    proportion to each layer's roofline time on the cluster's device
    (:mod:`milp_parallel.roofline`) instead of ``2 x FLOPs + |w|`` (quirk 7): memory-bound
    layers (batch norm, ReLU, additions) get their share, which is what a strategy that does
    not split them pays in full. Without a measured time, the roofline time itself is used. A
    split layer costs its roofline tile time relative to the whole layer (tile quantization and
    halos included), not ``1 / p`` of it.
Which layers a split covers
    *Spatial* (and data+spatial): every layer from the first to the last masked one runs on its
    row tile (ChainerMN-X's spatial ResNet splits the input rows once and keeps batch norm,
    ReLU, pooling and additions on the tiles); the layers after it run on the all-gathered
    tensor on every GPU. *Filter / channel* (and data+filter): the masked layers only; each
    output is all-gathered, so the layers between them run unsplit on every GPU.
Halo exchange
    ``chainermnx.functions.halo_exchange`` (forward) and the spatial convolution's backward
    exchange the boundary rows of every masked layer with a kernel over 1 by **blocking**
    point-to-point sends along the chain of ranks, lower neighbour first, then upper: rank
    ``r`` sends before it receives, so the ``P - 1`` transfers of one pass run one after the
    other. Per layer ``4 (P - 1)`` messages of ``C W floor(K/2) b`` elements (forward: the
    input rows; backward: the output-gradient rows), each over the link between neighbours
    (``gpudirect=True``) or staged through host memory (``gpudirect=False``: ChainerMN's send of
    a GPU array without CUDA-aware MPI, ParaDL's measured ABCI path: PCIe at 16 GB/s crossed
    twice, 3 ms per message).
All-gather at the split
    The last split layer's output is all-gathered on the node's GPUs (NCCL), and its gradient
    reduce-scattered back (the all-gather's backward).
Filter / channel per layer
    Filter: forward all-gather of the layer's output, backward all-reduce of its input gradient
    (each GPU's partial ``dx`` from its filters). Channel: forward all-reduce of the partial
    output, backward all-gather of the input gradient.
Gradients
    Data: one all-reduce of every GPU's gradients over all devices. The hybrids use
    ChainerMN-X's hybrid optimizer: an all-reduce inside the node, then one over all devices,
    of each GPU's gradient buffer (all weights for data+spatial, the filter shard plus the
    unsplit layers for data+filter). Collectives are priced by
    :mod:`milp_parallel.collectives` (``auto``: the cheapest of ring, tree and hierarchical,
    network cards shared per node).

Every function returns ``(compute_s, allreduce_s, allgather_s, halo_s, latency_s)`` of one
epoch for its strategy; :mod:`milp_parallel.oracle.formulas` builds the rows.
"""

from __future__ import annotations

import math

import numpy as np

from ..machine import constants as _c
from ..machine.collectives import allgather_cost, allreduce_cost, reducescatter_cost
from .model import Cluster, Net

__all__ = ["HOST_PATH_BANDWIDTH", "HOST_PATH_LATENCY_S", "layer_seconds", "split_ratio",
           "data", "model_parallel", "spatial", "data_filter", "data_spatial"]

#: ParaDL's measured ABCI path of a GPU array sent without GPUDirect: the node's PCIe (PLX)
#: switch, bytes/s (crossed twice: device to host, then host to device).
HOST_PATH_BANDWIDTH = _c.Sourced(16e9, "B/s", "ParaDL's ABCI PCIe (PLX) switch, "
                                "parallel_analysis.py (Kahira et al., HPDC 2021)").value
#: Its latency per message (ParaDL's measurement, 3 ms, plus the switch's 110 ns), seconds.
HOST_PATH_LATENCY_S = _c.Sourced(3e-3 + 110e-9, "s", "ParaDL's measured host path "
                                 "without GPUDirect (3 ms) plus the PLX switch's 110 ns, "
                                 "parallel_analysis.py").value


# ---------------------------------------------------------------------- compute
def _graph_at(net: Net, batch: int):
    key = ("graph", int(batch))
    if key not in net.cache:
        net.cache[key] = net.graph.with_batch_size(int(batch))
    return net.cache[key]


def _row_roofline(net: Net, cl: Cluster, batch: float, dim: str | None = None,
                  degree: int = 1, rows: np.ndarray | None = None) -> np.ndarray | None:
    """Per row, the roofline time of its layers at ``batch`` samples, with the rows in
    ``rows`` split ``degree`` ways along ``dim`` (None: no roofline available)."""
    if net.graph is None or not net.rows or cl.topology is None:
        return None
    b = max(1, int(round(batch)))
    key = ("roof", b, dim, int(degree), None if rows is None else rows.tobytes())
    if key in net.cache:
        return net.cache[key]
    from ..costs.model import CostModel
    from ..machine.topology import Level, Topology
    topo = Topology(cl.topology.device, (Level("tile", max(1, int(degree)), 1e12),), "tile",
                    getattr(cl.topology, "dtype", "fp32"))
    cm = CostModel(topo, bytes_per_element=int(cl.bytes_per_element))
    g = _graph_at(net, b)
    inputs = {lay.name for lay in g.layers if lay.op == "input"}
    out = np.zeros(net.n_layers)
    for i, names in enumerate(net.rows):
        split = dim is not None and degree > 1 and (rows is None or rows[i])
        for n in names:
            lay = g.layer(n)
            cfg = np.ones((1, len(lay.dims)), dtype=np.int64)
            if split and dim in lay.dims and dim in lay.parallel_dims:
                j = lay.dims.index(dim)
                cfg[0, j] = min(int(degree), int(lay.output_shape[j]))
            gi = tuple(x in inputs for x in lay.inputs)
            out[i] += float(cm.compute_seconds(lay, cfg, graph_inputs=gi)[0])
    net.cache[key] = out
    return out


def layer_seconds(net: Net, cl: Cluster, batch: float) -> np.ndarray:
    """Per row, seconds per sample (forward + backward + update) in default mode.

    A measured per-sample total spread by the rows' roofline times at ``batch``; without a
    measured time, the roofline time per sample; without a roofline (no graph), ``comp_s``.
    """
    roof = _row_roofline(net, cl, batch)
    if roof is None or roof.sum() <= 0:
        return net.comp_s
    if net.measured:
        return float(net.comp_s.sum()) * roof / roof.sum()
    return roof / max(1.0, float(round(batch)))


def split_ratio(net: Net, cl: Cluster, batch: float, dim: str, degree: int,
                rows: np.ndarray) -> np.ndarray:
    """Per row, the time of its tile split ``degree`` ways along ``dim`` over its whole time
    (``1 / degree`` without a roofline); 1 for rows not in ``rows``."""
    whole = _row_roofline(net, cl, batch)
    tile = _row_roofline(net, cl, batch, dim, degree, rows)
    if whole is None or tile is None:
        return np.where(rows, 1.0 / degree, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(whole > 0, tile / whole, 1.0 / degree)
    return np.where(rows, r, 1.0)


def _spatial_dim(net: Net) -> str:
    g = net.graph
    if g is not None:
        for lay in g.layers:
            for d in ("h", "d", "w"):
                if d in lay.dims:
                    return d
    return "h"


def _compute(net, cl, b, iters, rows, dim, degree):
    per = layer_seconds(net, cl, b)
    ratio = split_ratio(net, cl, b, dim, degree, rows) if degree > 1 else np.ones(len(per))
    return iters * b * float((per * ratio).sum())


# ---------------------------------------------------------------------- communication
def _ar(cl, devices, nbytes) -> float:
    if len(devices) <= 1 or nbytes <= 0:
        return 0.0
    return allreduce_cost(cl.topology, devices, algorithm="auto", nbytes=nbytes)[0].seconds(nbytes)


def _ar_latency(cl, devices, nbytes) -> float:
    if len(devices) <= 1 or nbytes <= 0:
        return 0.0
    return allreduce_cost(cl.topology, devices, algorithm="auto", nbytes=nbytes)[0].latency_s


def _ag(cl, devices, nbytes, scatter=False) -> tuple[float, float]:
    if len(devices) <= 1 or nbytes <= 0:
        return 0.0, 0.0
    fn = reducescatter_cost if scatter else allgather_cost
    c = fn(cl.topology, devices, algorithm="auto", nbytes=nbytes)[0]
    return c.seconds(nbytes), c.latency_s


def _hop(cl, a: int, b: int, nbytes: float, gpudirect: bool) -> tuple[float, float]:
    """One message between neighbours ``a`` and ``b``: (seconds, latency part)."""
    topo = cl.topology
    t = topo.p2p_seconds(a, b, nbytes)
    lat = topo.latency(a, b)
    if not gpudirect:
        host = HOST_PATH_LATENCY_S + nbytes / (HOST_PATH_BANDWIDTH / 2.0)
        crosses = topo.level_index(a, b) > 0
        t, lat = host + (t if crosses else 0.0), HOST_PATH_LATENCY_S + (lat if crosses else 0.0)
    return t, lat


def _halos(net, cl, rows, b, ranks: int, gpudirect: bool) -> tuple[float, float]:
    """Seconds (and latency part) of the chained halo exchanges of one iteration."""
    if ranks <= 1:
        return 0.0, 0.0
    total = lat_total = 0.0
    for i in np.flatnonzero(rows):
        k = int(net.kernel[i])
        if k <= 1:
            continue
        half = k // 2
        # forward: the input's boundary rows; backward: the output gradient's
        for shape in (net.x_shape[i], net.y_shape[i]):
            elems = float(shape[0]) * float(np.prod(shape[2:])) * half * b
            for r in range(ranks - 1):       # the chain: one transfer after the other
                t, lat = _hop(cl, r, r + 1, elems * cl.bytes_per_element, gpudirect)
                total += 2.0 * t                 # the lower pass, then the upper one
                lat_total += 2.0 * lat
    return total, lat_total


def _split_region(mask: np.ndarray) -> np.ndarray:
    """Rows from the first to the last masked one (what runs on spatial tiles)."""
    idx = np.flatnonzero(mask)
    out = np.zeros(len(mask), bool)
    if idx.size:
        out[idx[0]:idx[-1] + 1] = True
    return out


# ---------------------------------------------------------------------- strategies
def data(net: Net, cl: Cluster, p: int, b: float, iters: int) -> tuple:
    comp = _compute(net, cl, b, iters, np.zeros(net.n_layers, bool), "n", 1)
    W = float(net.w.sum()) * cl.bytes_per_element
    devs = list(range(int(p)))
    return comp, iters * _ar(cl, devs, W), 0.0, 0.0, iters * _ar_latency(cl, devs, W)


def model_parallel(kind: str, net: Net, cl: Cluster, p: int, B: float, iters: int,
                   mask: np.ndarray) -> tuple:
    """Filter or channel on ``p`` devices with global batch ``B``."""
    p = int(p)
    devs = list(range(p))
    if kind == "filter":
        comp = _compute(net, cl, B, iters, mask, "c", p)
    else:   # channel splits the input channels: a K-split product, no tile loss on outputs
        per = layer_seconds(net, cl, B)
        comp = iters * B * float((per * np.where(mask, 1.0 / p, 1.0)).sum())
    ag = ar = lat = 0.0
    idx = [i for i in np.flatnonzero(mask) if i != net.n_layers - 1]
    for i in idx:
        out_b = B * float(net.y[i]) * cl.bytes_per_element
        in_b = B * float(net.x[i]) * cl.bytes_per_element
        if kind == "filter":
            g, gl = _ag(cl, devs, out_b)
            ar += _ar(cl, devs, in_b)
            lat += gl + _ar_latency(cl, devs, in_b)
        else:
            g, gl = _ag(cl, devs, in_b)
            ar += _ar(cl, devs, out_b)
            lat += gl + _ar_latency(cl, devs, out_b)
        ag += g
    return comp, iters * ar, iters * ag, 0.0, iters * lat


def spatial(net: Net, cl: Cluster, p: int, B: float, iters: int, mask: np.ndarray,
            gpudirect: bool) -> tuple:
    p = int(p)
    region = _split_region(mask)
    comp = _compute(net, cl, B, iters, region, _spatial_dim(net), p)
    halo, hl = _halos(net, cl, mask & region, B, p, gpudirect)
    devs = list(range(p))
    last = int(np.flatnonzero(mask)[-1]) if mask.any() else 0
    m = B * float(net.y[last]) * cl.bytes_per_element
    g1, l1 = _ag(cl, devs, m)
    g2, l2 = _ag(cl, devs, m, scatter=True)
    W = float(net.w.sum()) * cl.bytes_per_element
    return (comp, iters * _ar(cl, devs, W), iters * (g1 + g2), iters * halo,
            iters * (hl + l1 + l2 + _ar_latency(cl, devs, W)))


def data_filter(net: Net, cl: Cluster, p: int, b: float, iters: int, mask: np.ndarray
                ) -> tuple:
    P2 = min(int(cl.devices_per_node), int(p))
    comp, ar, ag, _, lat = model_parallel("filter", net, cl, P2, b, iters, mask)
    shard = (float(net.w[mask].sum()) / P2 + float(net.w[~mask].sum())) * cl.bytes_per_element
    node, every = list(range(P2)), list(range(int(p)))
    sync = _ar(cl, node, shard) + _ar(cl, every, shard)
    sync_l = _ar_latency(cl, node, shard) + _ar_latency(cl, every, shard)
    return comp, ar + iters * sync, ag, 0.0, lat + iters * sync_l


def data_spatial(net: Net, cl: Cluster, p: int, b: float, iters: int, mask: np.ndarray,
                 gpudirect: bool) -> tuple:
    P2 = min(int(cl.devices_per_node), int(p))
    region = _split_region(mask)
    comp = _compute(net, cl, b, iters, region, _spatial_dim(net), P2)
    halo, hl = _halos(net, cl, mask & region, b, P2, gpudirect)
    node, every = list(range(P2)), list(range(int(p)))
    last = int(np.flatnonzero(mask)[-1]) if mask.any() else 0
    m = b * float(net.y[last]) * cl.bytes_per_element
    g1, l1 = _ag(cl, node, m)
    g2, l2 = _ag(cl, node, m, scatter=True)
    W = float(net.w.sum()) * cl.bytes_per_element
    sync = _ar(cl, node, W) + _ar(cl, every, W)
    sync_l = _ar_latency(cl, node, W) + _ar_latency(cl, every, W)
    return (comp, iters * sync, iters * (g1 + g2), iters * halo,
            iters * (hl + l1 + l2 + sync_l))


def iterations(D: float, B: float) -> int:
    """``ceil(D / B)``: iterations of an epoch."""
    return int(math.ceil(float(D) / float(B)))
