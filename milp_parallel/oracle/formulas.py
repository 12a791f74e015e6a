"""ParaDL's formulas: one function per strategy, in ParaDL's exact form (``q=True``, the
quirks of the package documentation) or corrected (``q=False``, default mode).

Each function takes ``(net, cluster, p, b, D, q, ...)`` and returns a :class:`ProjectionRow`
of one epoch; :data:`FORMULAS` maps strategy names to them, :func:`limit` gives a strategy's
largest device count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnknownNameError
from . import implementation as impl
from .model import _ALIASES, PARADL_CODES, STRATEGIES, Cluster, Net

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


def _act(net: Net, q: bool) -> tuple[float, float]:
    keep = ~net.inplace if q else np.ones(net.n_layers, bool)
    return float(net.x[keep].sum()), float(net.y[keep].sum())


def _serial(net, cl, p, b, D, q, **_):
    x, y = _act(net, q)
    W = float(net.w.sum())
    iters = math.ceil(D / b)
    if q:
        comp = D * float(net.comp_s.sum())
    else:   # the roofline, as every other strategy of default mode (the same at p = 1)
        comp = impl.data(net, cl, 1, b, iters)[0]
    mem = 2 * cl.bytes_per_element * (b * (y + x) + W)
    return _row("serial", 1, b, b, iters, comp, mem=mem, cap=cl.memory_bytes)


def _data(net, cl, p, b, D, q, **_):
    x, y = _act(net, q)
    W = float(net.w.sum())
    B = b * p
    iters = math.ceil(D / B)
    mem = 2 * (b * (x + y) + W) * cl.bytes_per_element
    if not q:
        comp, ar, _, _, lat = impl.data(net, cl, p, b, iters)
        return _row("data", p, B, b, iters, comp, allreduce=ar, latency=lat, mem=mem,
                    cap=cl.memory_bytes)
    total_comp = float(net.comp_s.sum())
    comp = math.ceil(D / p) * total_comp
    bw, lat = cl.link(p, True)
    beta = 1 / float(bw)
    ar = 2 * iters * (p - 1) * (lat + W * cl.bytes_per_element * beta / p)
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
    mem = 2 * (B * (x + y) + (w_split / p if q else w_split)) * cl.bytes_per_element
    if not q:
        comp, ar, ag, _, lat = impl.model_parallel(kind, net, cl, p, B, iters, mask)
        return _row(kind, p, B, b, iters, comp, allgather=ag, allreduce=ar, latency=lat,
                    mem=mem, cap=cl.memory_bytes)
    comp = iters * B * c_split
    bw, lat = cl.link(p, True)
    beta = 1 / float(bw)
    one = iters * (p - 1) * (lat * count + (B * out * cl.bytes_per_element * beta) / p)
    lat_one = iters * (p - 1) * lat * count
    if kind == "filter":
        return _row("filter", p, B, b, iters, comp, allgather=one, allreduce=2 * one,
                    latency=3 * lat_one, mem=mem, cap=cl.memory_bytes)
    return _row("channel", p, B, b, iters, comp, allreduce=2 * one, allgather=one,
                latency=3 * lat_one, mem=mem, cap=cl.memory_bytes)


def _split_index(mask):
    idx = np.flatnonzero(mask)
    return int(idx[-1]) if idx.size else 0


def _halo_elems(net, i):
    """ParaDL's per-sample halo of layer i in spatial (quirk 4): ``W floor((K-1)/2)``."""
    half = (int(net.kernel[i]) - 1) // 2
    return float(net.y_shape[i, 1] * half), float(net.x_shape[i, 1] * half)


def _spatial(net, cl, p, b, D, q, mask, gpudirect=True, **_):
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
    item_cap = cl.memory_bytes / cl.bytes_per_element
    max_samples = (item_cap / 2 - W) / (x + y)
    B = b
    iters = math.ceil(D / B)
    mem = 2 * (float(B) * (x + y) + W) * cl.bytes_per_element
    if not q:
        comp, ar, ag, halo, lat = impl.spatial(net, cl, p, B, iters, m, gpudirect)
        row = _row("spatial", p, B, b, iters, comp, allreduce=ar, allgather=ag, halo=halo,
                   latency=lat, mem=mem, cap=cl.memory_bytes)
        return row, max_samples
    comp = D * comp_ps
    bw, lat = cl.link(p, False)
    beta = 1 / float(bw)
    halo = 0.0
    n_halo = 0
    for i in range(split + 1):
        if net.kernel[i] > 1 and m[i]:
            hy, hx = _halo_elems(net, i)
            halo += 2 * (lat + hy * max_samples * cl.bytes_per_element * beta)
            halo += 2 * (lat + hx * max_samples * cl.bytes_per_element * beta)
            n_halo += 1
    halo *= iters
    ag = 2 * (p - 1) * (lat + (B * float(net.y[split]) * cl.bytes_per_element * beta) / p) * iters
    ar_iters = D / B
    ar = 2 * ar_iters * (p - 1) * (lat + W * cl.bytes_per_element * beta / p)
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
    mem = 2 * (b * (x + y) + w_split) * cl.bytes_per_element
    if not q:
        comp, ar, ag, _, lat = impl.data_filter(net, cl, p, b, iters, mask)
        return _row("data+filter", p, B, b, iters, comp, allgather=ag, allreduce=ar,
                    latency=lat, mem=mem, cap=cl.memory_bytes)
    comp = iters * b * c_split
    bw1, lat1 = cl.intra(P2) if P2 > 1 else (math.inf, 0.0)
    beta1 = 1 / float(bw1)
    one = iters * (P2 - 1) * (lat1 * count + (b * out * cl.bytes_per_element * beta1) / P2)
    bw2, lat2 = cl.link(p, True) if P1 > 1 else (math.inf, 0.0)
    bw2 = bw2 / (2 * P2)
    beta2 = 1 / float(bw2)
    ar = 2 * iters * (P1 - 1) * (lat2 + W * cl.bytes_per_element * beta2 / P1)
    latency = 3 * iters * (P2 - 1) * lat1 * count + 2 * iters * (P1 - 1) * lat2
    return _row("data+filter", p, B, b, iters, comp, allgather=one, allreduce=2 * one + ar,
                latency=latency, mem=mem, cap=cl.memory_bytes)


#: ParaDL sources data+spatial can follow in ``paradl`` mode (see the package docstring).
DS_SOURCES = ("code", "log")


def _data_spatial(net, cl, p, b, D, q, mask, gpudirect=True, ds_source="code", **_):
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
    iters = math.ceil(D / B)
    mem = 2 * (float(B) * (x + y) / P1 + W) * cl.bytes_per_element
    if not q:
        comp, ar, ag, halo, lat = impl.data_spatial(net, cl, p, b, iters, m, gpudirect)
        return _row("data+spatial", p, B, b, iters, comp, allreduce=ar, allgather=ag,
                    halo=halo, latency=lat, mem=mem, cap=cl.memory_bytes)
    if ds_source not in DS_SOURCES:
        raise UnknownNameError(f"unknown ds_source {ds_source!r}; use 'code' (ParaDL's "
                               "current parallel_analysis.py) or 'log' (its published log)")
    comp_ps = float(net.comp_s[ms].sum()) / P2 + float(net.comp_s[ns].sum())
    comp = math.ceil(D / P1) * comp_ps
    log = ds_source == "log"
    # halos and the all-gather go without GPUDirect through the node's PCIe switch; the
    # current code divides its bandwidth by 2 P2 for the halos and by 2 for the all-gather,
    # the version behind the published log by P2 for both
    bw1, lat1 = cl.link(P2, False)
    beta_h = 1 / (bw1 / P2) if log else 1 / (bw1 / (2 * P2))
    beta_g = beta_h if log else 1 / (bw1 / 2)
    halo = 0.0
    n_halo = 0
    for i in range(split + 1):
        if net.kernel[i] <= 1:
            continue
        if log:     # every kernel > 1 layer up to the split, halos of W floor((K-1)/2)
            hy, hx = _halo_elems(net, i)
        elif m[i]:  # masked layers only, halos of C H floor((K-1)/2), both passes
            hy = hx = float(net.x_shape[i, 0]) * ((int(net.kernel[i]) - 1) // 2) * float(
                np.prod(net.x_shape[i, 2:]))
        else:
            continue
        halo += 2 * (lat1 + hy * b * cl.bytes_per_element * beta_h)
        halo += 2 * (lat1 + hx * b * cl.bytes_per_element * beta_h)
        n_halo += 1
    halo *= iters
    ag = 2 * (P2 - 1) * (lat1 + (b * float(net.y[split]) * cl.bytes_per_element * beta_g) / P2)
    ag *= iters
    bwl, latl = cl.intra(P2) if P2 > 1 else (math.inf, 0.0)
    ar_local = 2 * (P2 - 1) * (latl + W * cl.bytes_per_element / float(bwl) / P2)
    bwg, latg = cl.link(p, True) if P1 > 1 else (math.inf, 0.0)
    bwg = bwg / 2 if log else bwg / (2 * P2)
    ar = (ar_local + 2 * (P1 - 1) * (latg + W * cl.bytes_per_element / float(bwg) / P1)) * iters
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
              * cl.bytes_per_element for a, e in stages)
    comp = iters * (p + S - 1) * b * float(comp_stage.max())
    worst, worst_lat = 0.0, 0.0
    for i, (a, e) in enumerate(stages[:-1]):
        bw, lat = cl.link(i + 2, True)
        t = lat + b * float(net.y[e - 1]) * cl.bytes_per_element / float(bw)
        if t > worst:
            worst, worst_lat = t, lat
    p2p = 2 * iters * (p + S - 2) * worst
    return _row("pipeline", p, B, b, iters, comp, p2p=p2p,
                latency=2 * iters * (p + S - 2) * worst_lat, mem=mem, cap=cl.memory_bytes)


def memory_note(strategy: str, paradl: bool, bytes_per_element: float) -> str:
    """What a row's ``memory_bytes`` counts, in words (printed under the oracle's table).

    Both modes count ``2 x delta x (samples on the device x sum(|x| + |y|) + |w| on the
    device)`` bytes: every counted layer's input and output kept for the backward pass and
    their gradients, the weights and their gradients; neither counts optimizer state or
    workspace (the layer-wise cost model adds the optimizer state). They differ in the
    layers counted: ParaDL mode leaves out RELU and BNORM rows (counted as in place,
    quirk 1; spatial and data+spatial count them), default mode counts every row.
    """
    strategy = _canon(strategy)
    if paradl and strategy not in ("spatial", "data+spatial", "pipeline"):
        layers = "every layer but RELU and BNORM (in place, as ParaDL counts)"
    else:
        layers = "every layer"
    return (f"memory per device = 2 x {bytes_per_element:g} B x (samples on the device x "
            f"(|x| + |y|) of {layers} + weights on the device): activations kept for the "
            "backward and their gradients, weights and their gradients; no optimizer state, "
            "no workspace; GB = 1e9 bytes")


# --------------------------------------------------------------------------------------------
# Limits


def _default_mask(net: Net, strategy: str) -> np.ndarray:
    """Layers a strategy splits when no mask is given: conv/pool layers (spatial), conv layers
    (filter, channel), i.e. what ParaDL's ``*.lc`` files mark."""
    if strategy in ("spatial", "data+spatial"):
        m = np.isin(net.kinds, ["CONV", "MPOOL", "APOOL"]) & (net.y_shape[:, 1] > 1)
    else:
        m = net.kinds == "CONV"
    if not m.any():
        m = np.ones(net.n_layers, bool)
    return m


def _limit(net: Net, strategy: str, mask: np.ndarray, b: float, cl: Cluster
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


FORMULAS = {
    "serial": _serial,
    "data": _data,
    "spatial": lambda *a, **k: _spatial(*a, **k)[0],
    "filter": lambda *a, **k: _model_parallel("filter", *a, **k),
    "channel": lambda *a, **k: _model_parallel("channel", *a, **k),
    "pipeline": _pipeline,
    "data+filter": _data_filter,
    "data+spatial": _data_spatial,
}
