"""Devices, the hierarchy of links between them, and the cost of collectives.

A :class:`Topology` is ``n`` identical devices (:class:`Device`) joined by a hierarchy of
:class:`Level` s, innermost first: ``[Level("nvlink", 4, ...), Level("infiniband", 4, ...)]``
is 4 nodes of 4 GPUs. Device ``i`` sits at mixed-radix digits ``(i % f0, (i // f0) % f1,
...)``, so consecutive devices fill the innermost level first (devices 0..3 are node 0).

Two devices talk over the level of their lowest common ancestor: devices 1 and 2 above over
NVLink, devices 3 and 4 over InfiniBand. Levels are expected to get slower outward; a
collective over a set of devices is charged on the slowest level its ring crosses.

Collective conventions (``m`` = the **total** bytes, ``r`` devices, ``alpha`` the latency and
``beta = 1 / bandwidth`` of the slowest link the ring crosses; tree and hierarchical
algorithms, and network cards shared per node, are in :mod:`milp_parallel.collectives`):

- ring all-reduce of an ``m``-byte buffer held by every device: ``2 (r - 1) (alpha + (m / r)
  beta)`` (reduce-scatter then all-gather, ``r - 1`` steps each);
- ring all-gather of an ``m``-byte result (each device contributes ``m / r``): ``(r - 1)
  (alpha + (m / r) beta)``. ParaDL writes this ``(p - 1)(alpha + m' beta)`` with ``m'`` the
  per-device piece; it is the same number.

A level's latency may depend on the number of devices in the ring (``latency_steps``), which
models ParaDL's ABCI calibration (the InfiniBand alpha grows with the job size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidTopologyError

__all__ = ["Device", "Level", "Topology", "TOPOLOGY_FORMAT", "TOPOLOGY_FORMAT_VERSION",
           "DTYPE_BYTES", "COLLECTIVE_KINDS"]

TOPOLOGY_FORMAT = "milp_parallel.topology"
TOPOLOGY_FORMAT_VERSION = 1


def _positive(value: Any, what: str, *, integer: bool = False) -> None:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and integer:
        ok = isinstance(value, (int, np.integer)) or float(value).is_integer()
    if ok and isinstance(value, (int, np.integer)) and abs(int(value)) >= 2**63:
        ok = False                                    # beyond any machine (and float64)
    if not ok or not math.isfinite(float(value)) or value <= 0:
        kind = "a positive integer" if integer else "a positive finite number"
        raise InvalidTopologyError(f"{what} must be {kind}, got {repr(value):.40}")


def _latency(value: Any, what: str) -> None:
    if (not isinstance(value, (int, float, np.floating)) or isinstance(value, bool)
            or not math.isfinite(value) or value < 0):
        raise InvalidTopologyError(f"{what} must be a non-negative number, got {value!r}")


#: Bytes per element of the dtypes :meth:`Device.peak_flops_for` knows.
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# The keys each object of a cluster document may have (Topology.from_dict, strict).
_DOCUMENT_KEYS = frozenset({"format", "version", "name", "dtype", "device", "levels"})
_DEVICE_KEYS = frozenset({"name", "memory_bytes", "peak_flops", "efficiency",
                          "memory_bandwidth_bytes_per_s", "kernel_launch_s",
                          "peak_flops_by_dtype"})
_LEVEL_KEYS = frozenset({"name", "fanout", "bandwidth_bytes_per_s", "latency_s",
                         "latency_steps", "uplinks", "collectives"})
_COLLECTIVE_KEYS = frozenset({"latency_s", "bandwidth_bytes_per_s"})
#: The collectives a level may price with their own measured alpha and bandwidth.
COLLECTIVE_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")


def _unknown_dtype(value: Any, *, key: bool = False) -> str:
    from ..io import describe_type, suggest
    what = "is not a known dtype" if key else f"must be a known dtype, got {describe_type(value)}"
    return f"{what}{suggest(value, DTYPE_BYTES) or ';'} known: {', '.join(DTYPE_BYTES)}"


def _nonnegative(value: Any, what: str) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or value < 0:
        raise InvalidTopologyError(f"{what} must be a non-negative finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Device:
    """One accelerator.

    Parameters
    ----------
    name : str
        E.g. ``"V100-16GB"``.
    memory_bytes : float
        Memory available to training, in bytes.
    peak_flops : float
        Peak FLOP/s for the precision the cost model assumes.
    efficiency : float, default 1.0
        Fraction of the peak that dense ops (convolutions, matrix products) reach, in
        ``(0, 1]``; the roofline (:mod:`milp_parallel.roofline`) scales the other op classes
        from it.
    memory_bandwidth_bytes_per_s : float, default 0.0
        Peak memory (HBM / DRAM) bandwidth, bytes/s; ``0`` = unknown (the roofline then has
        no memory-bound term).
    kernel_launch_s : float, default 0.0
        Fixed time per kernel (launch and scheduling gap), seconds; the roofline adds it per
        kernel of every op.
    peak_flops_by_dtype : tuple of (str, float), optional
        Spec-sheet peaks per dtype (``(("fp32", 15.7e12), ("bf16", 125e12))``), read by
        :meth:`peak_flops_for` (a ``CostModel(dtype=...)`` uses it); keys from
        :data:`DTYPE_BYTES`.

    Raises
    ------
    InvalidTopologyError
        For a non-positive memory or speed, an efficiency outside ``(0, 1]``, a negative
        bandwidth or launch time, or an unknown dtype.

    Examples
    --------
    >>> Device("V100", 16e9, 15.7e12, 0.5).effective_flops
    7850000000000.0
    >>> Device("V100", 16e9, 15.7e12, peak_flops_by_dtype=(("fp16", 125e12),)
    ...        ).peak_flops_for("fp16")
    125000000000000.0
    """

    name: str
    memory_bytes: float
    peak_flops: float
    efficiency: float = 1.0
    memory_bandwidth_bytes_per_s: float = 0.0
    kernel_launch_s: float = 0.0
    peak_flops_by_dtype: tuple[tuple[str, float], ...] = field(default=())

    def __post_init__(self) -> None:
        _positive(self.memory_bytes, f"device {self.name!r}: memory_bytes")
        _positive(self.peak_flops, f"device {self.name!r}: peak_flops")
        e = self.efficiency
        if (not isinstance(e, (int, float, np.floating)) or isinstance(e, bool)
                or not (0 < e <= 1)):
            raise InvalidTopologyError(
                f"device {self.name!r}: efficiency must be in (0, 1], got {e!r}")
        object.__setattr__(self, "memory_bandwidth_bytes_per_s", _nonnegative(
            self.memory_bandwidth_bytes_per_s,
            f"device {self.name!r}: memory_bandwidth_bytes_per_s"))
        object.__setattr__(self, "kernel_launch_s", _nonnegative(
            self.kernel_launch_s, f"device {self.name!r}: kernel_launch_s"))
        items = dict(self.peak_flops_by_dtype or ())
        for dt, v in items.items():
            if dt not in DTYPE_BYTES:
                raise InvalidTopologyError(
                    f"device {self.name!r}: unknown dtype {dt!r} in peak_flops_by_dtype; "
                    f"known: {', '.join(DTYPE_BYTES)}")
            _positive(v, f"device {self.name!r}: peak_flops_by_dtype[{dt!r}]")
        object.__setattr__(self, "peak_flops_by_dtype",
                           tuple((str(k), float(v)) for k, v in items.items()))

    @property
    def effective_flops(self) -> float:
        """``peak_flops * efficiency``: the FLOP/s of dense ops."""
        return float(self.peak_flops) * float(self.efficiency)

    def peak_flops_for(self, dtype: str) -> float:
        """The spec-sheet peak FLOP/s for ``dtype``.

        Raises
        ------
        InvalidTopologyError
            When the device does not state a peak for that dtype (the message lists those
            it states).
        """
        table = dict(self.peak_flops_by_dtype)
        if dtype not in table:
            raise InvalidTopologyError(
                f"device {self.name!r} states no peak for dtype {dtype!r}; it states: "
                f"{', '.join(table) or 'none'} (use a preset, or give peak_flops_by_dtype)")
        return table[dtype]

    def to_dict(self) -> dict:
        d = {"name": self.name, "memory_bytes": self.memory_bytes,
             "peak_flops": self.peak_flops, "efficiency": self.efficiency}
        if self.memory_bandwidth_bytes_per_s:
            d["memory_bandwidth_bytes_per_s"] = self.memory_bandwidth_bytes_per_s
        if self.kernel_launch_s:
            d["kernel_launch_s"] = self.kernel_launch_s
        if self.peak_flops_by_dtype:
            d["peak_flops_by_dtype"] = dict(self.peak_flops_by_dtype)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Device":
        """Inverse of :meth:`to_dict` (raises ``KeyError`` / ``TypeError`` on a bad dict)."""
        return cls(str(d["name"]), d["memory_bytes"], d["peak_flops"],
                   d.get("efficiency", 1.0), d.get("memory_bandwidth_bytes_per_s", 0.0),
                   d.get("kernel_launch_s", 0.0),
                   tuple(dict(d.get("peak_flops_by_dtype") or {}).items()))


@dataclass(frozen=True)
class Level:
    """One level of the link hierarchy (a group of ``fanout`` units of the level below).

    Parameters
    ----------
    name : str
        E.g. ``"nvlink"``.
    fanout : int
        Number of units of the level below grouped by this level (GPUs per node for the
        innermost level, nodes for the next).
    bandwidth_bytes_per_s : float
        Bandwidth of one link of this level, per direction, bytes/s.
    latency_s : float
        Per-message latency (alpha), seconds; used for rings larger than every
        ``latency_steps`` bound and for point-to-point messages when there are no steps.
    latency_steps : tuple of (int, float), optional
        ``((max_devices, latency_s), ...)`` by increasing ``max_devices``: a ring of ``r``
        devices uses the latency of the first step with ``r <= max_devices``.
    uplinks : int, default 0
        Links of ``bandwidth_bytes_per_s`` that each unit of the level below has into this
        level (network cards per node for an inter-node level). The devices of a unit that
        send or receive over this level at the same time share them. ``0``: one per device
        (no sharing).
    collectives : tuple of (str, float, float), optional
        ``((kind, latency_s, bandwidth_bytes_per_s), ...)``: a collective's own alpha and
        bandwidth on this level, as measured (:func:`milp_parallel.calibrate`), for kinds of
        :data:`COLLECTIVE_KINDS`. A backend's collective can be slower per byte than the
        point-to-point messages its links carry (gloo on CPU sums an all-reduce on the cores
        that send it and copies an all-gather's parts into a list); the collective formulas
        use these figures in place of the level's for that kind. Kinds not listed use
        ``latency_for`` and ``bandwidth_bytes_per_s``.

    Raises
    ------
    InvalidTopologyError
        For a non-positive fanout or bandwidth, a negative latency, unsorted steps, or an
        unknown or repeated collective kind.

    Examples
    --------
    >>> ib = Level("ib", 4, 12.5e9, 40.98e-6, ((68, 40.31e-6), (136, 40.49e-6)))
    >>> ib.latency_for(64), ib.latency_for(100), ib.latency_for(1024)
    (4.031e-05, 4.049e-05, 4.098e-05)
    """

    name: str
    fanout: int
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    latency_steps: tuple[tuple[int, float], ...] = field(default=())
    uplinks: int = 0
    collectives: tuple[tuple[str, float, float], ...] = field(default=())

    def __post_init__(self) -> None:
        _positive(self.fanout, f"level {self.name!r}: fanout", integer=True)
        object.__setattr__(self, "fanout", int(self.fanout))
        u = self.uplinks
        if (not isinstance(u, (int, np.integer)) or isinstance(u, bool) or u < 0):
            raise InvalidTopologyError(
                f"level {self.name!r}: uplinks must be a non-negative integer (0 = one per "
                f"device), got {u!r}")
        object.__setattr__(self, "uplinks", int(u))
        _positive(self.bandwidth_bytes_per_s, f"level {self.name!r}: bandwidth_bytes_per_s")
        _latency(self.latency_s, f"level {self.name!r}: latency_s")
        steps = tuple((int(n), float(a)) for n, a in self.latency_steps)
        for n, a in steps:
            if n <= 0 or not math.isfinite(a) or a < 0:
                raise InvalidTopologyError(
                    f"level {self.name!r}: latency_steps entry ({n}, {a}) needs a positive "
                    "device count and a non-negative latency")
        if any(steps[i][0] >= steps[i + 1][0] for i in range(len(steps) - 1)):
            raise InvalidTopologyError(
                f"level {self.name!r}: latency_steps must be sorted by strictly increasing "
                f"max_devices, got {steps}")
        object.__setattr__(self, "latency_steps", steps)
        own = []
        for entry in self.collectives:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
                raise InvalidTopologyError(
                    f"level {self.name!r}: collectives entry {entry!r} must be (kind, "
                    "latency_s, bandwidth_bytes_per_s)")
            kind, lat_k, bw_k = entry
            if kind not in COLLECTIVE_KINDS:
                raise InvalidTopologyError(
                    f"level {self.name!r}: collectives names {kind!r}; known: "
                    f"{', '.join(COLLECTIVE_KINDS)}")
            if any(k == kind for k, _, _ in own):
                raise InvalidTopologyError(
                    f"level {self.name!r}: collectives gives {kind!r} twice")
            _positive(bw_k, f"level {self.name!r}: collectives {kind!r} bandwidth_bytes_per_s")
            _latency(lat_k, f"level {self.name!r}: collectives {kind!r} latency_s")
            own.append((str(kind), float(lat_k), float(bw_k)))
        object.__setattr__(self, "collectives", tuple(own))

    def collective_params(self, kind: str, n_devices: int) -> tuple[float, float]:
        """``(latency_s, bandwidth_bytes_per_s)`` of one step of collective ``kind`` over
        ``n_devices`` devices: its own measured figures, else the level's."""
        for k, lat, bw in self.collectives:
            if k == kind:
                return lat, bw
        return self.latency_for(n_devices), float(self.bandwidth_bytes_per_s)

    def latency_for(self, n_devices: int) -> float:
        """The latency (s) of one ring step in a collective over ``n_devices`` devices."""
        for bound, lat in self.latency_steps:
            if n_devices <= bound:
                return lat
        return float(self.latency_s)

    def to_dict(self) -> dict:
        d = {"name": self.name, "fanout": self.fanout,
             "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s, "latency_s": self.latency_s}
        if self.latency_steps:
            d["latency_steps"] = [list(s) for s in self.latency_steps]
        if self.uplinks:
            d["uplinks"] = self.uplinks
        if self.collectives:
            d["collectives"] = {k: {"latency_s": lat, "bandwidth_bytes_per_s": bw}
                                for k, lat, bw in self.collectives}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Level":
        """Inverse of :meth:`to_dict` (raises ``KeyError`` / ``TypeError`` on a bad dict)."""
        return cls(str(d["name"]), d["fanout"], d["bandwidth_bytes_per_s"],
                   d.get("latency_s", 0.0),
                   tuple((int(a), float(b)) for a, b in d.get("latency_steps", ())),
                   d.get("uplinks", 0),
                   tuple((k, v["latency_s"], v["bandwidth_bytes_per_s"])
                         for k, v in d.get("collectives", {}).items()))


@dataclass(frozen=True)
class Topology:
    """Identical devices joined by a hierarchy of links.

    Parameters
    ----------
    device : Device
        Every device is one of these.
    levels : sequence of Level
        Innermost first; the device count is the product of the fanouts.
    name : str, default "custom"
    dtype : str, default "fp32"
        The dtype ``device.peak_flops`` is the peak of (a key of :data:`DTYPE_BYTES`): what
        a FLOP/s of this cluster means. Presets set it (``clusters.get(..., dtype=...)``);
        ``milp-parallel clusters`` and plans show it; it is saved in the cluster JSON.

    Raises
    ------
    InvalidTopologyError
        When there are no levels (an empty cluster), the dtype is unknown, or the device
        states a peak for ``dtype`` (``peak_flops_by_dtype``) other than its ``peak_flops``.

    Examples
    --------
    >>> t = Topology(Device("gpu", 16e9, 1e13),
    ...              [Level("nvlink", 4, 50e9, 9e-6), Level("ib", 2, 12.5e9, 40e-6)])
    >>> t.n_devices, t.link(0, 3).name, t.link(3, 4).name
    (8, 'nvlink', 'ib')
    >>> t.allreduce_seconds([0, 1, 2, 3], 4e6)  # 2*3*(9e-6 + 1e6/50e9)
    0.000174
    """

    device: Device
    levels: tuple[Level, ...]
    name: str = "custom"
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        if not isinstance(self.device, Device):
            raise InvalidTopologyError(f"device must be a Device, got {self.device!r}")
        if not isinstance(self.dtype, str) or self.dtype not in DTYPE_BYTES:
            raise InvalidTopologyError(
                f"topology {self.name!r}: unknown dtype {self.dtype!r}; known: "
                f"{', '.join(DTYPE_BYTES)} (the dtype device.peak_flops is the peak of)")
        table = dict(self.device.peak_flops_by_dtype)
        stated = table.get(self.dtype)
        if stated is not None and not math.isclose(stated, self.device.peak_flops,
                                                    rel_tol=1e-9):
            match = [k for k, v in table.items()
                     if math.isclose(v, self.device.peak_flops, rel_tol=1e-9)]
            fix = (f"it is the {match[0]} peak: set dtype={match[0]!r}" if match else
                   "set dtype to the dtype peak_flops is the peak of, peak_flops to the "
                   f"{self.dtype} peak, or peak_flops_by_dtype=() for a measured speed")
            default = " (the default dtype)" if self.dtype == "fp32" else ""
            raise InvalidTopologyError(
                f"topology {self.name!r}: device {self.device.name!r} has peak_flops "
                f"{self.device.peak_flops:g} but states {stated:g} for dtype "
                f"{self.dtype!r}{default}; {fix}")
        levels = tuple(self.levels)
        if not levels:
            raise InvalidTopologyError(
                f"topology {self.name!r} has no levels (an empty cluster); give at least one "
                "Level, e.g. Level('nvlink', 4, 50e9, 9e-6)")
        for lv in levels:
            if not isinstance(lv, Level):
                raise InvalidTopologyError(f"levels must hold Level objects, got {lv!r}")
        object.__setattr__(self, "levels", levels)

    # ------------------------------------------------------------------ structure
    @property
    def n_devices(self) -> int:
        """The number of devices: the product of the fanouts."""
        return int(np.prod([lv.fanout for lv in self.levels]))

    @property
    def group_sizes(self) -> tuple[int, ...]:
        """Devices per unit of each level: ``(f0, f0*f1, ...)``; the last is ``n_devices``."""
        return tuple(int(x) for x in np.cumprod([lv.fanout for lv in self.levels]))

    def _check_devices(self, a: np.ndarray) -> None:
        if a.size and (a.min() < 0 or a.max() >= self.n_devices):
            bad = a[(a < 0) | (a >= self.n_devices)].flat[0]
            raise InvalidTopologyError(
                f"device {int(bad)} is out of range: topology {self.name!r} has "
                f"{self.n_devices} devices (0..{self.n_devices - 1})")

    def level_index(self, i, j) -> np.ndarray:
        """Index into ``levels`` of the link between devices ``i`` and ``j`` (vectorized).

        ``-1`` where ``i == j`` (no link). Broadcasts like numpy.
        """
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        self._check_devices(i)
        self._check_devices(j)
        out = np.zeros(np.broadcast(i, j).shape, dtype=np.int64)
        for g in self.group_sizes[:-1]:
            out += (i // g) != (j // g)
        return np.where(i == j, -1, out)

    def link(self, i: int, j: int) -> Level:
        """The level joining devices ``i != j`` (that of their lowest common ancestor).

        Raises
        ------
        InvalidTopologyError
            When ``i == j`` or a device is out of range.
        """
        k = int(self.level_index(i, j))
        if k < 0:
            raise InvalidTopologyError(f"device {i} has no link to itself")
        return self.levels[k]

    def bandwidth(self, i: int, j: int) -> float:
        """Bandwidth (bytes/s) between two devices; ``inf`` from a device to itself."""
        return math.inf if i == j else float(self.link(i, j).bandwidth_bytes_per_s)

    def latency(self, i: int, j: int) -> float:
        """Point-to-point latency (s) between two devices; 0 from a device to itself."""
        return 0.0 if i == j else self.link(i, j).latency_for(2)

    def bandwidth_matrix(self) -> np.ndarray:
        """``(n, n)`` bandwidths in bytes/s, ``inf`` on the diagonal."""
        idx = np.arange(self.n_devices)
        lev = self.level_index(idx[:, None], idx[None, :])
        bw = np.array([lv.bandwidth_bytes_per_s for lv in self.levels] + [np.inf], float)
        return bw[lev]  # -1 picks the trailing inf

    def latency_matrix(self) -> np.ndarray:
        """``(n, n)`` point-to-point latencies in seconds, 0 on the diagonal."""
        idx = np.arange(self.n_devices)
        lev = self.level_index(idx[:, None], idx[None, :])
        lat = np.array([lv.latency_for(2) for lv in self.levels] + [0.0], float)
        return lat[lev]

    # ------------------------------------------------------------------ collectives
    def ring_parameters(self, devices) -> tuple[np.ndarray, np.ndarray, int]:
        """Latency and bandwidth of the slowest link rings over device groups cross.

        Parameters
        ----------
        devices : array_like of int, shape (r,) or (G, r)
            One ring (or ``G`` rings) of ``r`` distinct devices each.

        Returns
        -------
        alpha_s, bandwidth_bytes_per_s : numpy.ndarray, shape () or (G,)
            The largest latency (for a ring of ``r``) and the least bandwidth among the
            levels the ring crosses; ``0`` and ``inf`` for a ring of one device.
        r : int
        """
        d = np.asarray(devices, dtype=np.int64)
        one = d.ndim == 1
        d = np.atleast_2d(d)
        r = d.shape[1]
        if r <= 1:
            shape = (d.shape[0],)
            a, b = np.zeros(shape), np.full(shape, np.inf)
            return (a[0], b[0], r) if one else (a, b, r)
        d = np.sort(d, axis=1)
        # the ring visits the devices in increasing order (so it stays inside a unit as long
        # as it can), then wraps around; the slowest level it crosses is the outermost one.
        lev = self.level_index(d, np.roll(d, -1, axis=1)).max(axis=1)
        if np.any(lev < 0):
            raise InvalidTopologyError("a ring lists the same device twice")
        bw = np.array([lv.bandwidth_bytes_per_s for lv in self.levels], float)
        lat = np.array([lv.latency_for(r) for lv in self.levels], float)
        # slowest over all levels up to the outermost crossed (levels may be non-monotone)
        bw_min = np.minimum.accumulate(bw)[lev]
        lat_max = np.maximum.accumulate(lat)[lev]
        return (lat_max[0], bw_min[0], r) if one else (lat_max, bw_min, r)

    def _collective(self, kind: str, devices, nbytes: float, algorithm: str):
        from . import collectives  # late: collectives reads Topology's levels
        fn = {"allreduce": collectives.allreduce_cost, "allgather": collectives.allgather_cost,
              "reducescatter": collectives.reducescatter_cost}[kind]
        costs = fn(self, devices, algorithm=algorithm, nbytes=nbytes)
        out = np.array([c.seconds(nbytes) for c in costs], float)
        return float(out[0]) if np.ndim(devices) == 1 else out

    def allreduce_seconds(self, devices, nbytes: float, *, algorithm: str = "ring"):
        """All-reduce time of an ``m``-byte buffer held by every device of a group.

        The ring (the default) is ``2 (r - 1) (alpha + (m / r) / bandwidth)`` on the slowest
        link the ring crosses; ``"tree"``, ``"hierarchical"`` and ``"auto"`` are described in
        :mod:`milp_parallel.collectives`, which also shares network cards (``Level.uplinks``)
        between groups that run at the same time.

        Parameters
        ----------
        devices : array_like of int, shape (r,) or (G, r)
            The group's devices (or ``G`` groups at once, running concurrently).
        nbytes : float
            ``m``: the bytes of the buffer every device holds (the total, not a piece).
        algorithm : {"ring", "tree", "hierarchical", "auto"}

        Returns
        -------
        float or numpy.ndarray of shape (G,)
            Seconds; 0 for a single device.
        """
        return self._collective("allreduce", devices, nbytes, algorithm)

    def allgather_seconds(self, devices, nbytes: float, *, algorithm: str = "ring"):
        """All-gather time, ring ``(r - 1) (alpha + (m / r) / bandwidth)``, ``m`` = total bytes.

        Same conventions as :meth:`allreduce_seconds` (algorithms ``ring``,
        ``hierarchical``, ``auto``).
        """
        return self._collective("allgather", devices, nbytes, algorithm)

    def reducescatter_seconds(self, devices, nbytes: float, *, algorithm: str = "ring"):
        """Reduce-scatter time of an ``m``-byte buffer (the same formula as the all-gather)."""
        return self._collective("reducescatter", devices, nbytes, algorithm)

    def p2p_seconds(self, src: int, dst: int, nbytes: float) -> float:
        """Point-to-point time ``alpha + m / bandwidth`` between two devices (0 to itself)."""
        from .collectives import p2p_seconds
        return p2p_seconds(self, src, dst, nbytes)

    # ------------------------------------------------------------------ derived
    def with_devices(self, n: int) -> "Topology":
        """The topology of the first ``n`` devices.

        Levels above the one that holds ``n`` devices are dropped; that level's fanout
        shrinks to ``n / (devices per unit below)``.

        Raises
        ------
        InvalidTopologyError
            When ``n`` exceeds the device count or does not fill whole units below (e.g. 6
            devices of 4-GPU nodes).
        """
        _positive(n, "with_devices: n", integer=True)
        n = int(n)
        if n > self.n_devices:
            raise InvalidTopologyError(
                f"topology {self.name!r} has {self.n_devices} devices, cannot take {n}; "
                "build the cluster with more nodes")
        below = 1
        levels = []
        for lv in self.levels:
            if n <= below * lv.fanout:
                if n % below:
                    raise InvalidTopologyError(
                        f"{n} devices do not fill whole units of {below} devices (level "
                        f"{lv.name!r}); use a multiple of {below}")
                levels.append(replace(lv, fanout=n // below))
                break
            levels.append(lv)
            below *= lv.fanout
        return Topology(self.device, tuple(levels), self.name, self.dtype)

    # ------------------------------------------------------------------ formats
    def to_dict(self) -> dict:
        """A JSON-ready dict (``format``, ``version``, ``name``, ``dtype``, ``device``,
        ``levels``)."""
        return {"format": TOPOLOGY_FORMAT, "version": TOPOLOGY_FORMAT_VERSION,
                "name": self.name, "dtype": self.dtype, "device": self.device.to_dict(),
                "levels": [lv.to_dict() for lv in self.levels]}

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "<dict>") -> "Topology":
        """Inverse of :meth:`to_dict`: the strict reader of a cluster (topology) document.

        Every object of the document may hold only its known keys (a misspelled key is
        refused naming its path and the nearest known key, never read as a default), and
        every value must have its type. The keys, with the **declared defaults** of those
        that may be left out:

        - document: ``format`` and ``version`` (required), ``device`` and ``levels``
          (required), ``name`` (default ``"custom"``; ``null`` too), ``dtype`` (the dtype of
          ``device.peak_flops``, a key of :data:`DTYPE_BYTES`; default ``"fp32"``).
        - ``device``: ``name``, ``memory_bytes``, ``peak_flops`` (required), ``efficiency``
          (default 1.0), ``memory_bandwidth_bytes_per_s`` (default 0: unknown, no
          memory-bound term), ``kernel_launch_s`` (default 0), ``peak_flops_by_dtype`` (an
          object of dtype -> FLOP/s; default none).
        - ``levels[i]``: ``name``, ``fanout``, ``bandwidth_bytes_per_s`` (required),
          ``latency_s`` (default 0), ``latency_steps`` (a list of ``[max_devices,
          latency_s]``; default none), ``uplinks`` (default 0: one link per device),
          ``collectives`` (an object of collective kind -> ``{"latency_s",
          "bandwidth_bytes_per_s"}``, both required; default none).

        Raises
        ------
        FormatError
            When the format tag, version or a required field is missing, a key is unknown
            (``cluster.json: device.efficency is not a known key; did you mean
            'efficiency'? known: ...``) or a value has the wrong type; the message starts
            with ``source``.
        InvalidTopologyError
            When a value is invalid (non-positive bandwidth, ...).
        """
        from ..io import Fields, read_document
        f = Fields(source)
        if isinstance(data, dict) and data.get("format", TOPOLOGY_FORMAT) == TOPOLOGY_FORMAT:
            # keys first, so a misspelled "format" or "version" is named as such (a document
            # of another format is refused by read_document, saying so)
            f.keys(data, _DOCUMENT_KEYS, "",
                   hint="the cluster's shape is its levels' fanouts (levels[0].fanout GPUs "
                        "per node, levels[1].fanout nodes)")
        doc = read_document(source, TOPOLOGY_FORMAT, TOPOLOGY_FORMAT_VERSION, data=data,
                            what="topology")
        f.keys(doc, _DOCUMENT_KEYS, "", required=("device", "levels"))
        dev = f.keys(doc["device"], _DEVICE_KEYS, "device",
                     required=("name", "memory_bytes", "peak_flops"))
        raw_levels = f.array(doc["levels"], "levels")
        if not raw_levels:
            raise f.error("levels", "is empty; give at least one level, e.g. {\"name\": "
                                    "\"nvlink\", \"fanout\": 4, \"bandwidth_bytes_per_s\": "
                                    "50e9, \"latency_s\": 9e-6}")
        dtype = f.string(doc.get("dtype", "fp32"), "dtype")
        if dtype not in DTYPE_BYTES:
            raise f.error("dtype", _unknown_dtype(dtype))
        by_dtype = f.mapping(dev.get("peak_flops_by_dtype", {}), "device.peak_flops_by_dtype")
        for k in by_dtype:
            if k not in DTYPE_BYTES:
                raise f.error(f"device.peak_flops_by_dtype.{k}", _unknown_dtype(k, key=True))
        try:
            device = Device(f.string(dev["name"], "device.name"),
                            f.number(dev["memory_bytes"], "device.memory_bytes"),
                            f.number(dev["peak_flops"], "device.peak_flops"),
                            f.number(dev.get("efficiency", 1.0), "device.efficiency"),
                            f.number(dev.get("memory_bandwidth_bytes_per_s", 0.0),
                                     "device.memory_bandwidth_bytes_per_s"),
                            f.number(dev.get("kernel_launch_s", 0.0), "device.kernel_launch_s"),
                            tuple((k, f.number(v, f"device.peak_flops_by_dtype.{k}"))
                                  for k, v in by_dtype.items()))
            levels = []
            for i, lv in enumerate(raw_levels):
                w = f"levels[{i}]"
                f.keys(lv, _LEVEL_KEYS, w, required=("name", "fanout", "bandwidth_bytes_per_s"))
                steps = []
                for j, st in enumerate(f.array(lv.get("latency_steps", []),
                                               f"{w}.latency_steps")):
                    st = f.array(st, f"{w}.latency_steps[{j}]", length=2)
                    steps.append((f.integer(st[0], f"{w}.latency_steps[{j}][0]", minimum=1),
                                  f.number(st[1], f"{w}.latency_steps[{j}][1]")))
                own = []
                kinds = f.keys(lv.get("collectives", {}), frozenset(COLLECTIVE_KINDS),
                               f"{w}.collectives")
                for kind, c in kinds.items():
                    cw = f"{w}.collectives.{kind}"
                    c = f.keys(c, _COLLECTIVE_KEYS, cw,
                               required=("latency_s", "bandwidth_bytes_per_s"))
                    own.append((kind, f.number(c["latency_s"], f"{cw}.latency_s"),
                                f.number(c["bandwidth_bytes_per_s"],
                                         f"{cw}.bandwidth_bytes_per_s")))
                levels.append(Level(
                    f.string(lv["name"], f"{w}.name"),
                    f.integer(lv["fanout"], f"{w}.fanout"),
                    f.number(lv["bandwidth_bytes_per_s"], f"{w}.bandwidth_bytes_per_s"),
                    f.number(lv.get("latency_s", 0.0), f"{w}.latency_s"),
                    tuple(steps),
                    f.integer(lv.get("uplinks", 0), f"{w}.uplinks"),
                    tuple(own)))
            name = doc.get("name", "custom")
            return cls(device, tuple(levels),
                       "custom" if name is None else f.string(name, "name"), dtype)
        except InvalidTopologyError as exc:
            if source == "<dict>":
                raise
            raise InvalidTopologyError(f"{source}: {exc}") from None

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON (floats round-trip exactly; gzip if it ends in .gz)."""
        from ..io import write_json
        write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "Topology":
        """Read a file written by :meth:`save` (gzip-compressed or not).

        Raises
        ------
        FormatError
            Missing or unreadable file, not JSON, not a topology, a malformed field (names
            the file and the field).
        InvalidTopologyError
            An invalid value (names the file).
        """
        from ..io import read_json
        return cls.from_dict(read_json(path, what="topology file"), source=str(path))

    def __repr__(self) -> str:
        shape = " x ".join(f"{lv.fanout} ({lv.name} {lv.bandwidth_bytes_per_s / 1e9:g} GB/s)"
                           for lv in reversed(self.levels))
        d = self.device
        return (f"Topology({self.name!r}: {self.n_devices} x {d.name} "
                f"[{d.memory_bytes / 1e9:g} GB, {d.peak_flops / 1e12:g} TFLOP/s "
                f"{self.dtype} x "
                f"{d.efficiency:g}]; {shape})")
