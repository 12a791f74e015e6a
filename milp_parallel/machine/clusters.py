"""Cluster presets: public figures for the machines the papers (and people) use.

Every preset is a :class:`~milp_parallel.topology.Topology` of ``nodes`` nodes, each of
``gpus_per_node`` GPUs on an intra-node fabric, nodes joined by InfiniBand. Bandwidths are
**per direction**; the inter-node level's bandwidth is one network card's, and
``Level.uplinks`` says how many cards a node has (the GPUs of a node that talk across nodes at
the same time share them).

What a preset's :class:`~milp_parallel.topology.Device` states, from the vendor's data sheet:
peak FLOP/s per dtype (``peak_flops_by_dtype``), memory capacity and memory (HBM) bandwidth,
which the roofline compute model (:mod:`milp_parallel.roofline`) reads. Tensor-core figures
are the dense ones (without 2:4 sparsity).

**One dtype for every preset.** ``peak_flops`` is the device's peak for the topology's
``dtype`` (:attr:`Topology.dtype <milp_parallel.topology.Topology.dtype>`, shown by
``milp-parallel clusters``, saved in the cluster JSON). Every preset defaults to
:data:`DEFAULT_DTYPE` = ``"fp32"``, so the same GPU gives the same compute time in every
preset (``dgx_a100`` and ``selene`` are the same A100). Why fp32: it is the dtype of the
measurements this package reproduces (OptCNN's P100 and ParaDL's V100 runs trained in fp32;
ParaDL's 7.8 TFLOP/s is a measured fp32 speed), and of the layer-wise cost model's default of
4 bytes per element, so peak and tensor sizes agree. Pass ``dtype="bf16"`` (or any dtype the
device's data sheet states: :func:`dtypes`) for mixed-precision training, e.g.
``get("selene", dtype="bf16")`` for Megatron-LM's runs; pair it with
``CostModel(dtype="bf16")`` for 2-byte tensors.

Speeds: unless a preset says otherwise, ``efficiency`` (the fraction of the peak dense ops
reach) is :data:`DEFAULT_EFFICIENCY` = 0.5. The evidence: ParaDL's ABCI platform file uses
7.8 TFLOP/s for a V100 whose fp32 peak is 15.7 TFLOP/s (SXM2), i.e. about half of the peak,
and that constant reproduces its measured compute times (``abci`` at fp32 uses it).

Keywords: every preset takes ``nodes``, ``gpus_per_node`` and ``dtype``, checked in one place
(:func:`preset_options`) with the messages of the solver options
(:mod:`milp_parallel.solvers.base`): a bad value or an unknown keyword raises
:class:`~milp_parallel.errors.InvalidOptionError` /
:class:`~milp_parallel.errors.UnknownOptionError` naming the preset, the keyword and what is
allowed. ``precision=`` (the old name of ``dtype=``) still works for one release, with a
:class:`DeprecationWarning`.

Growing: :func:`for_devices` is the preset with as many nodes as a device count needs (what
``solve``, ``oracle`` and :func:`milp_parallel.oracle.project` do with a preset name).

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

import inspect
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from ..errors import InvalidOptionError, UnknownNameError, UnknownOptionError
from ..io import suggest
from ..solvers.base import Option, check_choice, check_int
from . import constants as _c
from .topology import DTYPE_BYTES, Device, Level, Topology

__all__ = ["get", "names", "describe", "load", "for_devices", "dtypes", "preset_options",
           "DEFAULT_DTYPE", "DEFAULT_EFFICIENCY", "GPU_KERNEL_LAUNCH_S",
           "optcnn", "abci", "dgx_a100", "dgx_h100", "dgx_h200", "pcie_box", "selene", "eos"]

#: The dtype of every preset's ``peak_flops`` unless ``dtype=`` says otherwise (see the module
#: docstring for why fp32).
DEFAULT_DTYPE = "fp32"

#: Fraction of the peak FLOP/s reached on real layers (source: ``constants.DEFAULT_EFFICIENCY``).
DEFAULT_EFFICIENCY = _c.DEFAULT_EFFICIENCY.value

#: Fixed time per GPU kernel, seconds (``constants.KERNEL_LAUNCH_S``: not checked against a
#: source; see the module docstring).
GPU_KERNEL_LAUNCH_S = _c.KERNEL_LAUNCH_S.value

#: ParaDL's calibrated per-message latencies on ABCI (``constants``; DESIGN.md section 6), s.
NVLINK_LATENCY_S = _c.NVLINK_LATENCY_S.value
IB_LATENCY_S = _c.IB_LATENCY_S.value

# Data-sheet peaks, FLOP/s per dtype (dense; see each preset's docstring for the source).
_P100_SXM2 = (("fp64", 5.3e12), ("fp32", 10.6e12), ("fp16", 21.2e12))
_V100_SXM2 = (("fp64", 7.8e12), ("fp32", 15.7e12), ("fp16", 125e12))
_A100 = (("fp64", 9.7e12), ("fp32", 19.5e12), ("tf32", 156e12), ("bf16", 312e12),
         ("fp16", 312e12))
_H100_SXM = (("fp64", 34e12), ("fp32", 67e12), ("tf32", 494.7e12), ("bf16", 989.4e12),
             ("fp16", 989.4e12), ("fp8", 1978.9e12))


# Each preset's data sheet (peaks per dtype) and its most GPUs per node.
_TABLES = {"optcnn": (_P100_SXM2, 8), "abci": (_V100_SXM2, 4), "dgx_a100": (_A100, 8),
           "dgx_h100": (_H100_SXM, 8), "dgx_h200": (_H100_SXM, 8), "pcie_box": (_A100, 8),
           "selene": (_A100, 8), "eos": (_H100_SXM, 8)}


def _check_gpus(limit: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                or not 1 <= value <= limit):
            raise InvalidOptionError(f"gpus_per_node must be a whole number in 1..{limit}, "
                                     f"got {value!r}")
        return int(value)
    return check


def dtypes(preset: str) -> tuple[str, ...]:
    """The dtypes a preset takes: those its device's data sheet states a peak for.

    Examples
    --------
    >>> dtypes("abci")
    ('fp64', 'fp32', 'fp16')
    """
    return tuple(dt for dt, _ in _TABLES[_builder(preset).__name__][0])


def preset_options(preset: str) -> tuple[Option, ...]:
    """The keywords of a preset, as :class:`~milp_parallel.solvers.base.Option` s.

    ``nodes`` (a whole number >= 1), ``gpus_per_node`` (1 up to the preset's node size) and
    ``dtype`` (one of :func:`dtypes`); their defaults are the preset's.
    """
    fn = _builder(preset)
    table, limit = _TABLES[fn.__name__]
    default = {k: v.default for k, v in inspect.signature(fn).parameters.items()}
    return (Option("nodes", default["nodes"], check_int("nodes", 1),
                   "nodes, joined by the inter-node network"),
            Option("gpus_per_node", default["gpus_per_node"], _check_gpus(limit),
                   "GPUs per node, on the intra-node fabric"),
            Option("dtype", DEFAULT_DTYPE,
                   check_choice("dtype", tuple(dt for dt, _ in table)),
                   "the dtype whose data-sheet peak is the device's peak_flops"))


def _settle(preset: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every keyword of ``preset``, validated (the one place; see the module docstring)."""
    given = dict(given)
    if "precision" in given:
        old = given.pop("precision")
        if old is not None:
            table = dict(_TABLES[preset][0])
            # the old 'bf16' meant "the 16-bit tensor-core peak" (fp16 where there is no bf16)
            new = "fp16" if old == "bf16" and "bf16" not in table else old
            warnings.warn(f"cluster {preset!r}: precision= is deprecated and will be removed "
                          f"in the next release; use dtype={new!r}", DeprecationWarning,
                          stacklevel=3)
            if given.get("dtype") not in (None, new):
                raise InvalidOptionError(f"cluster {preset!r}: precision={old!r} and "
                                         f"dtype={given['dtype']!r} disagree; give dtype only")
            given["dtype"] = new
    declared = {o.name: o for o in preset_options(preset)}
    unknown = [k for k in given if k not in declared]
    if unknown:
        raise UnknownOptionError(
            f"cluster {preset!r}: unknown option(s) {', '.join(map(str, unknown))}"
            f"{suggest(unknown[0], declared) or ';'} known: {', '.join(sorted(declared))}")
    out = {}
    for name, opt in declared.items():
        value = given.get(name)
        try:
            out[name] = opt.default if value is None else opt.check(value)
        except InvalidOptionError as exc:
            hint = ""
            if name == "dtype" and value in DTYPE_BYTES:
                hint = f" (its device's data sheet states no {value} peak)"
            raise InvalidOptionError(f"cluster {preset!r}: {exc}{hint}") from None
    return out


def _device(preset: str, name: str, memory_bytes: float, hbm_bytes_per_s: float,
            dtype: str, efficiency: float = DEFAULT_EFFICIENCY) -> Device:
    table = _TABLES[preset][0]
    return Device(name, memory_bytes, dict(table)[dtype], efficiency, hbm_bytes_per_s,
                  GPU_KERNEL_LAUNCH_S, table)


def _build(preset: str, device: Device, o: dict, intra: Level, inter: Level) -> Topology:
    nodes, gpus_per_node = o["nodes"], o["gpus_per_node"]
    levels = [Level(intra.name, gpus_per_node, intra.bandwidth_bytes_per_s, intra.latency_s,
                    intra.latency_steps)]
    if nodes > 1:
        # a node never has more cards in use than GPUs
        uplinks = min(inter.uplinks, gpus_per_node) if inter.uplinks else 0
        levels.append(Level(inter.name, nodes, inter.bandwidth_bytes_per_s, inter.latency_s,
                            inter.latency_steps, uplinks))
    return Topology(device, tuple(levels), preset, o["dtype"])


def optcnn(nodes: int = 4, gpus_per_node: int = 4, *, dtype: str | None = None,
           **options: Any) -> Topology:
    """OptCNN's cluster: nodes of 4 Tesla P100 (16 GB), NVLink inside, 100 Gb/s EDR IB between.

    Sources (issue 26.5; each marked checked or not against the paper's text):

    - Jia et al., *Exploring Hidden Dimensions in Parallelizing CNNs*, ICML 2018, section 6.
      **Checked** against the paper's text (as quoted by the ri.k117.org reproducibility
      summary of the ICML paper): "a GPU cluster with 4 compute nodes, each of which is
      equipped with two Intel 10-core E5-2600 CPUs, 256G main memory, and four NVIDIA Tesla
      P100 GPUs"; "synchronous training and a per-GPU batch size of 32"; data parallelism
      was run "in TensorFlow r1.7, PyTorch v0.3, and our implementation" (Legion). So:
      ``nodes=4``, ``gpus_per_node=4``, synchronous gradient exchange every step.
    - **Not checked** against the paper's text here (the text we could reach does not show
      it; carried from issue 8's transcription): GPUs of a node "connected by NVLink", nodes
      "over 100Gb/s EDR Infiniband", one network card per node (our reading; the paper gives
      no count), and which P100 variant (SXM2 is implied by NVLink; a PCIe P100 would be
      9.3 TFLOP/s fp32 on PCIe 3.0 at about 12 GB/s).
    - NVIDIA Tesla P100 data sheet (SXM2): 5.3 / 10.6 / 21.2 TFLOP/s fp64 / fp32 / fp16,
      16 GB CoWoS HBM2 at 732 GB/s. NVLink 1.0: 20 GB/s per direction per link; in a
      DGX-1-style quad every GPU pair has one link, so 20 GB/s per direction between two GPUs.
      EDR InfiniBand: 100 Gb/s = 12.5 GB/s. P100 has no bf16: its 16-bit peak is
      ``dtype="fp16"``. Latencies and efficiency: :mod:`milp_parallel.machine.constants`.
    """
    o = _settle("optcnn", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("optcnn", "P100-16GB", 16e9, 732e9, o["dtype"])
    return _build("optcnn", dev, o,
                  Level("nvlink", 1, 20e9, NVLINK_LATENCY_S),
                  Level("infiniband-edr", 1, 12.5e9, IB_LATENCY_S, uplinks=1))


def abci(nodes: int = 4, gpus_per_node: int = 4, *, dtype: str | None = None,
         **options: Any) -> Topology:
    """ABCI as ParaDL models it: 4 x V100-16GB per node, NVLink 50 GB/s, InfiniBand 12.5 GB/s.

    Sources: ParaDL (Kahira et al., HPDC 2021) platform file ``ABCI.plat``: 16e9 bytes and
    7.8e12 FLOP/s per GPU (its measured speed: ``efficiency`` = 7.8 / 15.7 of the fp32
    peak here), 12.5e9 B/s between nodes, 4 GPUs per node; the latencies that reproduce its
    ``ranking_*`` logs (DESIGN.md section 6): NVLink alpha 9 us; InfiniBand alpha 40.31 us
    for rings of at most 68 GPUs, 40.49 us up to 136, 40.98 us beyond
    (``Level.latency_steps``). NVIDIA V100 data sheet (SXM2): 7.8 / 15.7 / 125 TFLOP/s
    fp64 / fp32 / fp16 tensor core, HBM2 at 900 GB/s. ABCI's system overview (AIST): a
    compute node (A) has two InfiniBand EDR cards (``uplinks=2``). ``dtype="fp16"`` uses
    V100's 125 TFLOP/s fp16 tensor-core peak times 0.5 (V100 has no bf16).
    """
    o = _settle("abci", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    # ParaDL's measured fp32 speed, 7.8 TFLOP/s, is 7.8 / 15.7 of the fp32 peak
    eff = 7.8 / 15.7 if o["dtype"] == "fp32" else DEFAULT_EFFICIENCY
    dev = _device("abci", "V100-16GB", 16e9, 900e9, o["dtype"], eff)
    return _build("abci", dev, o,
                  Level("nvlink", 1, 50e9, NVLINK_LATENCY_S),
                  Level("infiniband", 1, 12.5e9, 40.98e-6,
                        ((68, 40.31e-6), (136, 40.49e-6)), uplinks=2))


def dgx_a100(nodes: int = 1, gpus_per_node: int = 8, *, dtype: str | None = None,
             **options: Any) -> Topology:
    """DGX A100 (80 GB): 8 x A100-SXM4-80GB on NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node.

    Sources: NVIDIA A100 data sheet (SXM 80GB): 9.7 / 19.5 TFLOP/s fp64 / fp32, 156 tf32,
    312 bf16 / fp16 dense (624 with sparsity), 80 GB HBM2e at 2,039 GB/s, third-generation
    NVLink 600 GB/s per GPU total = 300 GB/s per direction. DGX A100 data sheet: 8
    single-port ConnectX-6 200 Gb/s HDR for the compute fabric, one per GPU = 25 GB/s per
    card per direction (``uplinks=8``).
    """
    o = _settle("dgx_a100", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("dgx_a100", "A100-80GB", 80e9, 2039e9, o["dtype"])
    return _build("dgx_a100", dev, o,
                  Level("nvswitch", 1, 300e9, NVLINK_LATENCY_S),
                  Level("infiniband-hdr", 1, 25e9, IB_LATENCY_S, uplinks=8))


def dgx_h100(nodes: int = 1, gpus_per_node: int = 8, *, dtype: str | None = None,
             **options: Any) -> Topology:
    """DGX H100: 8 x H100-SXM5-80GB on NVSwitch, 8 x 400 Gb/s NDR InfiniBand per node.

    Sources: NVIDIA H100 data sheet (SXM): 34 / 67 TFLOP/s fp64 / fp32, 494.7 tf32, 989.4
    bf16 / fp16 dense (1,979 with sparsity), 1,979 fp8, 80 GB HBM3 at 3.35 TB/s,
    fourth-generation NVLink 900 GB/s per GPU total = 450 GB/s per direction. DGX H100 data
    sheet: 8 x ConnectX-7 400 Gb/s NDR = 50 GB/s per card (``uplinks=8``).
    """
    o = _settle("dgx_h100", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("dgx_h100", "H100-80GB", 80e9, 3.35e12, o["dtype"])
    return _build("dgx_h100", dev, o,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


def dgx_h200(nodes: int = 1, gpus_per_node: int = 8, *, dtype: str | None = None,
             **options: Any) -> Topology:
    """DGX H200: as :func:`dgx_h100` with 141 GB HBM3e per GPU at 4.8 TB/s.

    Sources: NVIDIA H200 data sheet (SXM): the H100 SXM's peaks (67 TFLOP/s fp32, 989 bf16
    dense), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s per GPU total; DGX H200 data sheet:
    8 x ConnectX-7 400 Gb/s NDR (``uplinks=8``).
    """
    o = _settle("dgx_h200", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("dgx_h200", "H200-141GB", 141e9, 4.8e12, o["dtype"])
    return _build("dgx_h200", dev, o,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


def pcie_box(nodes: int = 1, gpus_per_node: int = 4, *, dtype: str | None = None,
             **options: Any) -> Topology:
    """A workstation: A100-40GB PCIe cards talking over PCIe 4.0 x16 (no NVLink).

    Sources: NVIDIA A100 PCIe data sheet (40 GB): 19.5 TFLOP/s fp32, 156 tf32, 312 bf16
    dense, 40 GB HBM2 at 1,555 GB/s. PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s
    per direction; we use 25 GB/s, what peer-to-peer copies reach in practice (through the
    root complex). Latency 10 us. With ``nodes > 1`` the boxes are joined by one 100 Gb/s
    (12.5 GB/s) Ethernet/IB card each (``uplinks=1``).
    """
    o = _settle("pcie_box", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("pcie_box", "A100-40GB-PCIe", 40e9, 1555e9, o["dtype"])
    return _build("pcie_box", dev, o,
                  Level("pcie4", 1, 25e9, 10e-6),
                  Level("network-100g", 1, 12.5e9, IB_LATENCY_S, uplinks=1))


def selene(nodes: int = 1, gpus_per_node: int = 8, *, dtype: str | None = None,
           **options: Any) -> Topology:
    """NVIDIA's Selene (where Megatron-LM's SC'21 measurements ran): DGX A100 80 GB nodes.

    Sources: Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM*, SC'21, section 5 ("Each cluster node has 8 NVIDIA 80-GB A100 GPUs
    connected to each other by NVLink and NVSwitch. Each node has eight NVIDIA Mellanox
    200Gbps HDR Infiniband HCAs for application communication", a three-level fat tree;
    "peak device throughput of an A100 GPU with 16-bit precision is 312 teraFLOP/s"). NVIDIA
    A100 datasheet: 312 TFLOP/s fp16 / bf16 dense, 19.5 TFLOP/s fp32, 80 GB HBM2e at 2,039
    GB/s, NVLink 600 GB/s per GPU in total = 300 GB/s per direction. One HDR card per GPU:
    200 Gb/s = 25 GB/s per GPU per direction (``uplinks=8``). Megatron-LM trained in 16-bit:
    use ``dtype="bf16"`` (A100's fp16 and bf16 tensor-core peaks are the same 312 TFLOP/s);
    the default is :data:`DEFAULT_DTYPE`, as every preset. Latencies as the other presets.
    """
    o = _settle("selene", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("selene", "A100-SXM4-80GB", 80e9, 2039e9, o["dtype"])
    return _build("selene", dev, o,
                  Level("nvswitch", 1, 300e9, NVLINK_LATENCY_S),
                  Level("infiniband-hdr", 1, 25e9, IB_LATENCY_S, uplinks=8))


def eos(nodes: int = 1, gpus_per_node: int = 8, *, dtype: str | None = None,
        **options: Any) -> Topology:
    """An H100 cluster of Selene's shape (NVIDIA's Eos): DGX H100 nodes, 8 GPUs on NVSwitch,
    eight 400 Gb/s NDR InfiniBand cards per node.

    Sources: NVIDIA H100 datasheet (SXM5): 989 TFLOP/s fp16 / bf16 dense, 67 TFLOP/s fp32,
    80 GB HBM3, fourth-generation NVLink 900 GB/s per GPU in total = 450 GB/s per direction.
    NVIDIA DGX H100 datasheet: 8 x single-port ConnectX-7 400 Gb/s NDR for compute traffic =
    50 GB/s per GPU per direction. NVIDIA's Eos (DGX SuperPOD of DGX H100 systems, NDR fat
    tree) is built from these nodes. ``dtype="bf16"`` for 16-bit training, as :func:`selene`.
    """
    o = _settle("eos", {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype,
                       **options})
    dev = _device("eos", "H100-SXM5-80GB", 80e9, 3.35e12, o["dtype"])
    return _build("eos", dev, o,
                  Level("nvswitch", 1, 450e9, NVLINK_LATENCY_S),
                  Level("infiniband-ndr", 1, 50e9, IB_LATENCY_S, uplinks=8))


_PRESETS: MappingProxyType[str, Callable[..., Topology]] = MappingProxyType({
    "optcnn": optcnn, "abci": abci, "dgx_a100": dgx_a100, "dgx_h100": dgx_h100,
    "dgx_h200": dgx_h200, "pcie_box": pcie_box, "selene": selene, "eos": eos})


def names() -> tuple[str, ...]:
    """The preset names, sorted."""
    return tuple(sorted(_PRESETS))


def _builder(name: Any) -> Callable[..., Topology]:
    try:
        return _PRESETS[name]
    except (KeyError, TypeError):
        close = suggest(name, _PRESETS) if isinstance(name, str) else ""
        raise UnknownNameError(f"unknown cluster {name!r}{close or ';'} known clusters: "
                               f"{', '.join(names())} (or a JSON file via clusters.load)"
                               ) from None


def get(name: str, nodes: int | None = None, *, gpus_per_node: int | None = None,
        dtype: str | None = None, **options: Any) -> Topology:
    """A preset cluster by name.

    Parameters
    ----------
    name : str
        One of :func:`names`.
    nodes : int, optional
        Number of nodes (the preset's default when omitted: 4 for optcnn and abci, 1 else).
    gpus_per_node : int, optional
        GPUs per node (the preset's default when omitted).
    dtype : str, optional
        The dtype of the device's ``peak_flops`` (:attr:`Topology.dtype
        <milp_parallel.topology.Topology.dtype>`): one the data sheet states
        (:func:`dtypes`); default :data:`DEFAULT_DTYPE` (``"fp32"``) for every preset.
    **options
        ``precision=``: the old name of ``dtype`` (deprecated, one release). Anything else is
        refused.

    Raises
    ------
    UnknownNameError
        For an unknown name (the message lists the known ones).
    UnknownOptionError
        For a keyword presets do not take (lists the known ones).
    InvalidOptionError
        For a node count below 1, more GPUs per node than the preset's node holds, or a
        dtype its data sheet does not state (the message lists those it does).

    Examples
    --------
    >>> get("abci", nodes=2).n_devices
    8
    >>> get("selene", dtype="bf16").device.peak_flops
    312000000000000.0
    """
    builder = _builder(name)
    given = {"nodes": nodes, "gpus_per_node": gpus_per_node, "dtype": dtype, **options}
    return builder(**_settle(name, given))


def for_devices(name: str, devices: int, **options: Any) -> Topology:
    """The preset with as many nodes as ``devices`` devices need (at least its default).

    The one way a preset grows: ``milp-parallel oracle``, :func:`milp_parallel.oracle.project`
    and ``solve`` take a preset name and a device count and build it with
    ``ceil(devices / gpus_per_node)`` nodes when its default shape is too small (the first
    ``devices`` devices are then used; a count that does not fill whole nodes uses part of
    the last one).

    Parameters
    ----------
    name : str
        A preset (:func:`names`).
    devices : int
        The device count the cluster must hold (>= 1).
    **options
        As :func:`get` (``gpus_per_node``, ``dtype``; an explicit ``nodes`` is a lower bound).

    Raises
    ------
    InvalidOptionError
        For a device count that is not a whole number >= 1, or a bad keyword.

    Examples
    --------
    >>> for_devices("abci", 1024).n_devices
    1024
    >>> for_devices("abci", 8).n_devices       # the default 4 nodes hold 8 devices
    16
    """
    topo = get(name, **options)
    try:
        devices = check_int("devices", 1)(devices)
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"cluster {name!r}: {exc}") from None
    if devices <= topo.n_devices:
        return topo
    per_node = topo.levels[0].fanout
    return get(name, **{**options, "nodes": -(-devices // per_node)})


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
