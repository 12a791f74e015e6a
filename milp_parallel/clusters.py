"""Cluster presets: public figures for the machines the papers (and people) use.

Every preset is a :class:`~milp_parallel.topology.Topology` of ``nodes`` nodes, each of
``gpus_per_node`` GPUs on an intra-node fabric, nodes joined by InfiniBand. Bandwidths are
**per direction**; the inter-node level's bandwidth is one network card's, and
``Level.uplinks`` says how many cards a node has (the GPUs of a node that talk across nodes at
the same time share them).

What a preset's :class:`~milp_parallel.topology.Device` states, from the vendor's data sheet:
peak FLOP/s per dtype (``peak_flops_by_dtype``; ``peak_flops`` is the one of the
``precision`` asked for), memory capacity and memory (HBM) bandwidth, which the roofline
compute model (:mod:`milp_parallel.roofline`) reads. Tensor-core figures are the dense ones
(without 2:4 sparsity).

Speeds: unless a preset says otherwise, ``efficiency`` (the fraction of the peak dense ops
reach) is :data:`DEFAULT_EFFICIENCY` = 0.5. The evidence: ParaDL's ABCI platform file uses
7.8 TFLOP/s for a V100 whose fp32 peak is 15.7 TFLOP/s (SXM2), i.e. about half of the peak,
and that constant reproduces its measured compute times. ``precision="bf16"`` uses the dense
tensor-core bf16 peak (fp16 on GPUs without bf16; pair it with ``CostModel(bytes_per_element=2)``
or ``CostModel(dtype="bf16")``).

Per-kernel time: :data:`GPU_KERNEL_LAUNCH_S` (4 us) for every preset. Not a data-sheet
figure: it is the usual gap between back-to-back small kernels launched from a framework on
these GPUs (a few microseconds); a measured profile table (``milp-parallel profile`` or
``calibrate --profile``) replaces the estimate where it has the tile.

Latencies: NCCL-level per-message latencies are not on spec sheets; presets reuse ParaDL's
ABCI calibration (9 us for NVLink, about 40 us for InfiniBand), which includes software
overhead. Override them with a custom JSON cluster (:func:`load`) when you have measurements
(``milp-parallel calibrate`` fits them on the machine it runs on).

Memory: the spec-sheet figure in decimal bytes (16 GB = 16e9), slightly below the real
capacity (which is in GiB) to leave room for the framework's workspace.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Callable

from .errors import InvalidTopologyError, UnknownNameError
from .topology import Device, Level, Topology

__all__ = ["get", "names", "describe", "load", "DEFAULT_EFFICIENCY", "GPU_KERNEL_LAUNCH_S",
           "optcnn", "abci", "dgx_a100", "dgx_h100", "dgx_h200", "pcie_box", "selene", "eos"]

#: Fraction of the peak FLOP/s reached on real layers (see the module docstring).
DEFAULT_EFFICIENCY = 0.5

#: Fixed time per GPU kernel (launch and scheduling gap), seconds (see the module docstring).
GPU_KERNEL_LAUNCH_S = 4e-6

#: ParaDL's calibrated per-message latencies on ABCI (DESIGN.md section 6), seconds.
NVLINK_LATENCY_S = 9e-6
IB_LATENCY_S = 40.31e-6

_PRECISIONS = ("fp32", "bf16")

# Data-sheet peaks, FLOP/s per dtype (dense; see each preset's docstring for the source).
_P100_SXM2 = (("fp64", 5.3e12), ("fp32", 10.6e12), ("fp16", 21.2e12))
_V100_SXM2 = (("fp64", 7.8e12), ("fp32", 15.7e12), ("fp16", 125e12))
_A100 = (("fp64", 9.7e12), ("fp32", 19.5e12), ("tf32", 156e12), ("bf16", 312e12),
         ("fp16", 312e12))
_H100_SXM = (("fp64", 34e12), ("fp32", 67e12), ("tf32", 494.7e12), ("bf16", 989.4e12),
             ("fp16", 989.4e12), ("fp8", 1978.9e12))


def _peak(precision: str, table: tuple, preset: str) -> float:
    peaks = dict(table)
    if precision == "fp32":
        return peaks["fp32"]
    if precision == "bf16":
        return peaks.get("bf16", peaks["fp16"])
    raise UnknownNameError(f"cluster {preset!r}: unknown precision {precision!r}; known: "
                           f"{', '.join(_PRECISIONS)}")


def _check_counts(preset: str, nodes: int, gpus_per_node: int, max_gpus: int) -> None:
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise InvalidTopologyError(f"cluster {preset!r}: nodes must be a positive integer, "
                                   f"got {nodes!r}")
    if (not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool)
            or not 1 <= gpus_per_node <= max_gpus):
        raise InvalidTopologyError(f"cluster {preset!r}: gpus_per_node must be an integer in "
                                   f"1..{max_gpus}, got {gpus_per_node!r}")


def _build(preset: str, device: Device, nodes: int, gpus_per_node: int, intra: Level,
           inter: Level) -> Topology:
    levels = [Level(intra.name, gpus_per_node, intra.bandwidth_bytes_per_s, intra.latency_s,
                    intra.latency_steps)]
    if nodes > 1:
        # a node never has more cards in use than GPUs
        uplinks = min(inter.uplinks, gpus_per_node) if inter.uplinks else 0
        levels.append(Level(inter.name, nodes, inter.bandwidth_bytes_per_s, inter.latency_s,
                            inter.latency_steps, uplinks))
    return Topology(device, tuple(levels), preset)


def optcnn(nodes: int = 4, gpus_per_node: int = 4, *, precision: str = "fp32") -> Topology:
    """OptCNN's cluster: nodes of 4 Tesla P100 (16 GB), NVLink inside, 100 Gb/s EDR IB between.

    Sources: Jia et al., *Exploring Hidden Dimensions in Parallelizing CNNs*, ICML 2018,
    section 6 ("four NVIDIA Tesla P100 GPUs" per node, "connected by NVLink", nodes "over
    100Gb/s EDR Infiniband"; up to 4 nodes; one network card per node is our reading, the
    paper does not give a count). NVIDIA Tesla P100 data sheet (SXM2, the NVLink part):
    5.3 / 10.6 / 21.2 TFLOP/s fp64 / fp32 / fp16, 16 GB CoWoS HBM2 at 732 GB/s. NVLink 1.0:
    20 GB/s per direction per link; in a DGX-1-style quad every GPU pair has one link, so
    20 GB/s per direction between two GPUs (40 GB/s bidirectional; we use the per-direction
    figure). EDR InfiniBand: 100 Gb/s = 12.5 GB/s. ``precision="bf16"`` (P100 has no bf16)
    uses the fp16 peak.
    """
    _check_counts("optcnn", nodes, gpus_per_node, 8)
    dev = Device("P100-16GB", 16e9, _peak(precision, _P100_SXM2, "optcnn"),
                 DEFAULT_EFFICIENCY, 732e9, GPU_KERNEL_LAUNCH_S, _P100_SXM2)
    return _build("optcnn", dev, nodes, gpus_per_node,
                  Level("nvlink", 1, 20e9, NVLINK_LATENCY_S),
                  Level("infiniband-edr", 1, 12.5e9, IB_LATENCY_S, uplinks=1))


def abci(nodes: int = 4, gpus_per_node: int = 4, *, precision: str = "fp32") -> Topology:
    """ABCI as ParaDL models it: 4 x V100-16GB per node, NVLink 50 GB/s, InfiniBand 12.5 GB/s.

    Sources: ParaDL (Kahira et al., HPDC 2021) platform file ``ABCI.plat``: 16e9 bytes and
    7.8e12 FLOP/s per GPU (its measured speed: ``efficiency`` = 7.8 / 15.7 of the fp32
    peak here), 12.5e9 B/s between nodes, 4 GPUs per node; the latencies that reproduce its
    ``ranking_*`` logs (DESIGN.md section 6): NVLink alpha 9 us; InfiniBand alpha 40.31 us
    for rings of at most 68 GPUs, 40.49 us up to 136, 40.98 us beyond
    (``Level.latency_steps``). NVIDIA V100 data sheet (SXM2): 7.8 / 15.7 / 125 TFLOP/s
    fp64 / fp32 / fp16 tensor core, HBM2 at 900 GB/s. ABCI's system overview (AIST): a
    compute node (A) has two InfiniBand EDR cards (``uplinks=2``). ``precision="bf16"``
    uses V100's 125 TFLOP/s fp16 tensor-core peak times 0.5.
    """
    _check_counts("abci", nodes, gpus_per_node, 4)
    if precision == "fp32":
        dev = Device("V100-16GB", 16e9, 15.7e12, 7.8 / 15.7, 900e9, GPU_KERNEL_LAUNCH_S,
                     _V100_SXM2)
    else:
        dev = Device("V100-16GB", 16e9, _peak(precision, _V100_SXM2, "abci"),
                     DEFAULT_EFFICIENCY, 900e9, GPU_KERNEL_LAUNCH_S, _V100_SXM2)
    return _build("abci", dev, nodes, gpus_per_node,
                  Level("nvlink", 1, 50e9, NVLINK_LATENCY_S),
                  Level("infiniband", 1, 12.5e9, 40.98e-6,
                        ((68, 40.31e-6), (136, 40.49e-6)), uplinks=2))


def dgx_a100(nodes: int = 1, gpus_per_node: int = 8, *, precision: str = "fp32") -> Topology:
    """DGX A100 (80 GB): 8 x A100-SXM4-80GB on NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node.

    Sources: NVIDIA A100 data sheet (SXM 80GB): 9.7 / 19.5 TFLOP/s fp64 / fp32, 156 tf32,
    312 bf16 / fp16 dense (624 with sparsity), 80 GB HBM2e at 2,039 GB/s, third-generation
    NVLink 600 GB/s per GPU total = 300 GB/s per direction. DGX A100 data sheet: 8
    single-port ConnectX-6 200 Gb/s HDR for the compute fabric, one per GPU = 25 GB/s per
    card per direction (``uplinks=8``).
    """
    _check_counts("dgx_a100", nodes, gpus_per_node, 8)
    dev = Device("A100-80GB", 80e9, _peak(precision, _A100, "dgx_a100"), DEFAULT_EFFICIENCY,
                 2039e9, GPU_KERNEL_LAUNCH_S, _A100)
    return _build("dgx_a100", dev, nodes, gpus_per_node,
                  Level("nvswitch", 1, 300e9, NVLINK_LATENCY_S),
                  Level("infiniband-hdr", 1, 25e9, IB_LATENCY_S, uplinks=8))


def dgx_h100(nodes: int = 1, gpus_per_node: int = 8, *, precision: str = "fp32") -> Topology:
    """DGX H100: 8 x H100-SXM5-80GB on NVSwitch, 8 x 400 Gb/s NDR InfiniBand per node.

    Sources: NVIDIA H100 data sheet (SXM): 34 / 67 TFLOP/s fp64 / fp32, 494.7 tf32, 989.4
    bf16 / fp16 dense (1,979 with sparsity), 1,979 fp8, 80 GB HBM3 at 3.35 TB/s,
    fourth-generation NVLink 900 GB/s per GPU total = 450 GB/s per direction. DGX H100 data
    sheet: 8 x ConnectX-7 400 Gb/s NDR = 50 GB/s per card (``uplinks=8``).
    """
    _check_counts("dgx_h100", nodes, gpus_per_node, 8)
    dev = Device("H100-80GB", 80e9, _peak(precision, _H100_SXM, "dgx_h100"),
                 DEFAULT_EFFICIENCY, 3.35e12, GPU_KERNEL_LAUNCH_S, _H100_SXM)
    return _build("dgx_h100", dev, nodes, gpus_per_node,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


def dgx_h200(nodes: int = 1, gpus_per_node: int = 8, *, precision: str = "fp32") -> Topology:
    """DGX H200: as :func:`dgx_h100` with 141 GB HBM3e per GPU at 4.8 TB/s.

    Sources: NVIDIA H200 data sheet (SXM): the H100 SXM's peaks (67 TFLOP/s fp32, 989 bf16
    dense), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s per GPU total; DGX H200 data sheet:
    8 x ConnectX-7 400 Gb/s NDR (``uplinks=8``).
    """
    _check_counts("dgx_h200", nodes, gpus_per_node, 8)
    dev = Device("H200-141GB", 141e9, _peak(precision, _H100_SXM, "dgx_h200"),
                 DEFAULT_EFFICIENCY, 4.8e12, GPU_KERNEL_LAUNCH_S, _H100_SXM)
    return _build("dgx_h200", dev, nodes, gpus_per_node,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


def pcie_box(nodes: int = 1, gpus_per_node: int = 4, *, precision: str = "fp32") -> Topology:
    """A workstation: A100-40GB PCIe cards talking over PCIe 4.0 x16 (no NVLink).

    Sources: NVIDIA A100 PCIe data sheet (40 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16
    dense, 40 GB HBM2 at 1,555 GB/s. PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s
    per direction; we use 25 GB/s, what peer-to-peer copies reach in practice (through the
    root complex). Latency 10 us. With ``nodes > 1`` the boxes are joined by one 100 Gb/s
    (12.5 GB/s) Ethernet/IB card each (``uplinks=1``).
    """
    _check_counts("pcie_box", nodes, gpus_per_node, 8)
    dev = Device("A100-40GB-PCIe", 40e9, _peak(precision, _A100, "pcie_box"),
                 DEFAULT_EFFICIENCY, 1555e9, GPU_KERNEL_LAUNCH_S, _A100)
    return _build("pcie_box", dev, nodes, gpus_per_node,
                  Level("pcie4", 1, 25e9, 10e-6),
                  Level("network-100g", 1, 12.5e9, IB_LATENCY_S, uplinks=1))


def selene(nodes: int = 1, gpus_per_node: int = 8, *, precision: str = "bf16") -> Topology:
    """NVIDIA's Selene (where Megatron-LM's SC'21 measurements ran): DGX A100 80 GB nodes.

    Sources: Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM*, SC'21, section 5 ("Each cluster node has 8 NVIDIA 80-GB A100 GPUs
    connected to each other by NVLink and NVSwitch. Each node has eight NVIDIA Mellanox
    200Gbps HDR Infiniband HCAs for application communication", a three-level fat tree;
    "peak device throughput of an A100 GPU with 16-bit precision is 312 teraFLOP/s"). NVIDIA
    A100 datasheet: 312 TFLOP/s fp16 / bf16 dense, 19.5 TFLOP/s fp32, 80 GB HBM2e at 2,039
    GB/s, NVLink 600 GB/s per GPU in total = 300 GB/s per direction. One HDR card per GPU:
    200 Gb/s = 25 GB/s per GPU per direction (``uplinks=8``). The default precision is
    16-bit (``"bf16"``: A100's fp16 and bf16 tensor-core peaks are the same 312 TFLOP/s).
    Latencies as the other presets.
    """
    _check_counts("selene", nodes, gpus_per_node, 8)
    dev = Device("A100-SXM4-80GB", 80e9, _peak(precision, _A100, "selene"),
                 DEFAULT_EFFICIENCY, 2039e9, GPU_KERNEL_LAUNCH_S, _A100)
    return _build("selene", dev, nodes, gpus_per_node,
                  Level("nvswitch", 1, 300e9, NVLINK_LATENCY_S),
                  Level("infiniband-hdr", 1, 25e9, IB_LATENCY_S, uplinks=8))


def eos(nodes: int = 1, gpus_per_node: int = 8, *, precision: str = "bf16") -> Topology:
    """An H100 cluster of Selene's shape (NVIDIA's Eos): DGX H100 nodes, 8 GPUs on NVSwitch,
    eight 400 Gb/s NDR InfiniBand cards per node.

    Sources: NVIDIA H100 datasheet (SXM5): 989 TFLOP/s fp16 / bf16 dense, 67 TFLOP/s fp32,
    80 GB HBM3, fourth-generation NVLink 900 GB/s per GPU in total = 450 GB/s per direction.
    NVIDIA DGX H100 datasheet: 8 x single-port ConnectX-7 400 Gb/s NDR for compute traffic =
    50 GB/s per GPU per direction. NVIDIA's Eos (DGX SuperPOD of DGX H100 systems, NDR fat
    tree) is built from these nodes. Default precision 16-bit, as :func:`selene`.
    """
    _check_counts("eos", nodes, gpus_per_node, 8)
    dev = Device("H100-SXM5-80GB", 80e9, _peak(precision, _H100_SXM, "eos"),
                 DEFAULT_EFFICIENCY, 3.35e12, GPU_KERNEL_LAUNCH_S, _H100_SXM)
    return _build("eos", dev, nodes, gpus_per_node,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


_PRESETS: MappingProxyType[str, Callable[..., Topology]] = MappingProxyType({
    "optcnn": optcnn, "abci": abci, "dgx_a100": dgx_a100, "dgx_h100": dgx_h100,
    "dgx_h200": dgx_h200, "pcie_box": pcie_box, "selene": selene, "eos": eos})


def names() -> tuple[str, ...]:
    """The preset names, sorted."""
    return tuple(sorted(_PRESETS))


def get(name: str, nodes: int | None = None, *, gpus_per_node: int | None = None,
        precision: str | None = None) -> Topology:
    """A preset cluster by name.

    Parameters
    ----------
    name : str
        One of :func:`names`.
    nodes : int, optional
        Number of nodes (the preset's default when omitted: 4 for optcnn and abci, 1 else).
    gpus_per_node : int, optional
        GPUs per node (the preset's default when omitted).
    precision : {"fp32", "bf16"}, optional
        Default ``"fp32"`` (``"bf16"`` for selene and eos).

    Raises
    ------
    UnknownNameError
        For an unknown name (the message lists the known ones).
    InvalidTopologyError
        For a non-positive node count or too many GPUs per node.

    Examples
    --------
    >>> get("abci", nodes=2).n_devices
    8
    """
    try:
        builder = _PRESETS[name]
    except (KeyError, TypeError):
        raise UnknownNameError(f"unknown cluster {name!r}; known clusters: "
                               f"{', '.join(names())} (or a JSON file via clusters.load)"
                               ) from None
    kw: dict = {} if precision is None else {"precision": precision}
    if nodes is not None:
        kw["nodes"] = nodes
    if gpus_per_node is not None:
        kw["gpus_per_node"] = gpus_per_node
    return builder(**kw)


def describe() -> list[str]:
    """One line per preset (name, default shape, device, links), for the CLI."""
    lines = []
    for n in names():
        t = get(n)
        first = (_PRESETS[n].__doc__ or "").strip().splitlines()[0]
        lines.append(f"{n:10s} {t!r}  -- {first}")
    return lines


def load(path: str | Path) -> Topology:
    """A custom cluster from a JSON file written by :meth:`Topology.save`."""
    return Topology.load(path)
