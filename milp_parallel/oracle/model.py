"""The inputs of ParaDL's formulas: per-layer arrays of a model, and the cluster's links.

:class:`Net` holds the per-sample arrays the formulas read (activations, weights, compute
seconds, shapes, kernels), from a ParaDL table (:class:`~milp_parallel.paradl.NetTable`) or a
:class:`~milp_parallel.graph.LayerGraph`; :class:`Cluster` the memory, speed and link model of
a ParaDL platform (ParaDL's built-in ABCI network, :func:`abci_link`) or of a
:class:`~milp_parallel.topology.Topology`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import FormatError, InvalidTopologyError
from ..machine import constants as _c
from .paradl_files import NetTable, Platform, read_platform

STRATEGIES = ("serial", "data", "spatial", "filter", "channel", "pipeline", "data+filter",
              "data+spatial")

#: ParaDL's ``--paratype`` codes and our names for them.
PARADL_CODES = {"o": "serial", "d": "data", "s": "spatial", "f": "filter", "c": "channel",
                "p": "pipeline", "df": "data+filter", "ds": "data+spatial"}

_ALIASES = {**PARADL_CODES, "single": "serial", "sequential": "serial", "df": "data+filter",
            "ds": "data+spatial", "filter+data": "data+filter", "spatial+data": "data+spatial",
            "gpipe": "pipeline"}

BYTES_PER_ELEMENT = _c.PARADL_BYTES_PER_ELEMENT.value

# ParaDL's ABCI constants, as its code states them
_PARADL = ("ParaDL's ABCI network model, parallel_analysis.py of "
           "TruongThaoNguyen/paraDL-analysis (Kahira et al., HPDC 2021)")
_INTRA_BW = _c.Sourced(50e9, "B/s", _PARADL + ": NVLink bandwidth").value
_INTRA_LAT = _c.Sourced(9e-6, "s", _PARADL + ": NVLink latency").value
_PLX_LAT = _c.Sourced(110e-9, "s", _PARADL + ": PCIe (PLX) switch latency").value
_PLX_NO_GPUDIRECT_LAT = _c.Sourced(3e-3, "s", _PARADL + ": host path without GPUDirect").value
_PLX_BW = _c.Sourced(16e9, "B/s", _PARADL + ": PCIe (PLX) switch bandwidth").value
_INTER_BW = _c.Sourced(12.5e9, "B/s", _PARADL + ": InfiniBand EDR bandwidth").value
_LEAF_LAT = _c.Sourced(90e-9, "s", _PARADL + ": leaf switch latency").value
_FBB_LAT = _c.Sourced(90e-9, "s", _PARADL + ": FBB switch latency").value
_SPINE_LAT = _c.Sourced(400e-9, "s", _PARADL + ": spine switch latency").value
#: PLX cable latency of the published HPDC'21 ranking logs.
PLX_CABLE_LATENCY_S = _c.Sourced(20e-6, "s", "calibration: reproduces ParaDL's published "
                                 "ranking_* logs (DESIGN.md section 6)").value
#: The older value behind the repository's ``*_scaling_proj`` logs.
PLX_CABLE_LATENCY_OLD_S = _c.Sourced(15e-6, "s", "calibration: reproduces the communication "
                                     "of ParaDL's *_scaling_proj logs (DESIGN.md "
                                     "section 6)").value


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
class Net:
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
    graph: Any = None        # a LayerGraph whose layers stand for the rows (default mode)
    rows: tuple = ()         # per row, the names of its layers in ``graph``
    measured: bool = False   # comp_s spreads a measured per-sample time
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_layers(self) -> int:
        return len(self.names)

    @property
    def inplace(self) -> np.ndarray:
        """Rows ParaDL leaves out of activation memory (RELU, BNORM)."""
        return (self.kinds == "RELU") | (self.kinds == "BNORM")


def _net_from_table(table: NetTable, speed_flops: float) -> Net:
    graph, rows = None, ()
    try:
        from .paradl_files import to_layer_graph
        graph = to_layer_graph(table)
        names = set(graph.names)
        rows = tuple(tuple(n for n in (f"{i}_{name}", f"{i}_flatten") if n in names)
                     for i, name in enumerate(table.names))
    except Exception:           # noqa: BLE001 - a table LayerGraph cannot express: no roofline
        graph, rows = None, ()
    return Net(name=table.model, dataset_size=table.dataset_size,
               kinds=np.asarray(table.kinds), x=table.x_elems.astype(np.float64),
               y=table.y_elems.astype(np.float64), w=table.w_elems.astype(np.float64),
               comp_s=table.layer_seconds(speed_flops), x_shape=table.x_shapes,
               y_shape=table.y_shapes, kernel=table.w_shapes[:, 2], names=table.names,
               graph=graph, rows=rows, measured=bool(np.all(table.has_time)))


_OP_KIND = {"conv": "CONV", "batchnorm": "BNORM", "layernorm": "BNORM", "elementwise": "RELU",
            "linear": "FC", "matmul": "FC", "embedding": "FC", "add": "ADD", "mul": "ADD",
            "dropout": "DROPOUT", "global_pool": "APOOL"}


def _net_from_graph(graph: Any, speed_flops: float, dataset_size: int,
                    seconds_per_sample: float | None = None) -> Net:
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
    return Net(name=getattr(graph, "name", "model"), dataset_size=dataset_size,
               kinds=np.array(kinds), x=np.array(xs), y=np.array(ys), w=np.array(ws),
               comp_s=comp, x_shape=np.array(xsh, dtype=np.int64),
               y_shape=np.array(ysh, dtype=np.int64), kernel=np.array(ks, dtype=np.int64),
               names=tuple(names), graph=graph, rows=tuple((n,) for n in names),
               measured=seconds_per_sample is not None)


# --------------------------------------------------------------------------------------------
# The cluster


@dataclass(frozen=True)
class Cluster:
    name: str
    memory_bytes: float
    speed_flops: float
    devices_per_node: int
    max_devices: int
    link: Callable[[float, bool], tuple[float, float]]   # (p, gpudirect) -> (bw, lat)
    intra: Callable[[float], tuple[float, float]]        # ring of p inside a node
    topology: Any = None                                 # links and collectives (default mode)
    #: ``delta``: bytes per element of activations, weights and messages (ParaDL mode and a
    #: ParaDL platform: 4; a Topology in default mode: its dtype's size)
    bytes_per_element: float = BYTES_PER_ELEMENT


def _cluster(cluster: Any, mode: str, plx_cable_latency_s: float,
             devices: int | None = None) -> Cluster:
    """The formulas' cluster from a Topology, a Platform, a ``.plat`` or cluster JSON path,
    or a preset name (grown by :func:`milp_parallel.clusters.for_devices` to ``devices``,
    as the command line does)."""
    from ..machine import clusters as _clusters  # late: written alongside
    from ..machine.topology import DTYPE_BYTES, Topology
    if isinstance(cluster, (str, Path)) and str(cluster).endswith(".plat"):
        cluster = read_platform(cluster)
    elif isinstance(cluster, str) and cluster in _clusters.names():
        cluster = (_clusters.get(cluster) if devices is None
                   else _clusters.for_devices(cluster, devices))
    elif isinstance(cluster, (str, Path)) and (Path(cluster).suffix in (".json", ".gz")
                                               or Path(cluster).exists()):
        cluster = Topology.load(cluster)
    elif isinstance(cluster, str):
        cluster = _clusters.get(cluster)        # an unknown name: UnknownNameError
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
        return Cluster(cluster.name, cluster.memory_bytes, cluster.speed_flops,
                       cluster.devices_per_node, cluster.max_devices, link, intra,
                       _platform_topology(cluster))
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
    delta = (BYTES_PER_ELEMENT if mode == "paradl"
             else float(DTYPE_BYTES.get(getattr(cluster, "dtype", "fp32"), BYTES_PER_ELEMENT)))
    return Cluster(getattr(cluster, "name", "topology"), float(dev.memory_bytes), speed,
                   per_node, n, link, link, cluster, delta)


def _platform_topology(plat: Platform):
    """A ParaDL platform as a Topology: its nodes of GPUs, every link at the platform's one
    bandwidth and latency (what a ``.plat`` file states)."""
    from ..machine.topology import Device, Level, Topology
    per = max(1, int(plat.devices_per_node))
    nodes = max(1, int(plat.max_devices) // per)
    dev = Device(plat.name or "gpu", plat.memory_bytes, plat.speed_flops, 1.0)
    levels = [Level("node", per, plat.bandwidth_bytes_per_s, plat.latency_s)]
    if nodes > 1:
        levels.append(Level("network", nodes, plat.bandwidth_bytes_per_s, plat.latency_s))
    return Topology(dev, tuple(levels), plat.name or "platform")
