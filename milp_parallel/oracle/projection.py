"""Projections: one strategy over device counts (:func:`project`), strategies ranked
(:func:`rank`), and the tie to the layer-wise search (:func:`compare_with_layerwise`)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import FormatError, InvalidOptionError, UnknownNameError
from .formulas import (
    FORMULAS,
    ProjectionRow,
    _canon,
    _default_mask,
    _limit,
    _not_applicable,
    _serial,
    memory_note,
)
from .model import PLX_CABLE_LATENCY_S, STRATEGIES, Net, _cluster, _net_from_graph, _net_from_table
from .paradl_files import NetTable, read_mask, read_net

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
    memory_note : str
        What ``memory_bytes`` counts (:func:`~milp_parallel.oracle.formulas.memory_note`):
        the command line prints it under the table.
    """

    model: str
    cluster: str
    strategy: str
    mode: str
    scaling: str
    dataset_size: int
    rows: tuple[ProjectionRow, ...]
    memory_note: str = ""

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


#: Samples per epoch assumed for a zoo model or a graph file (ImageNet-1k's training set), as
#: the command line does.
IMAGENET_SAMPLES = 1_281_167

_TABLE_SUFFIXES = (".net", ".net_sc", ".net_256")

#: The most devices a preset name grows to in :func:`project` (a projection at 2**20 devices
#: takes about a second; beyond, give a Topology).
MAX_GROWN_DEVICES = 2**20


def _resolve_model(model, cl, dataset_size, seconds_per_sample):
    if isinstance(model, (str, Path)):
        path = Path(model)
        if path.suffix in _TABLE_SUFFIXES or str(model).endswith(".net_256") or path.exists():
            model = read_net(model)
        else:               # a zoo name, as on the command line
            from .. import models as _models
            model = _models.get(str(model))
            if dataset_size is None:
                dataset_size = IMAGENET_SAMPLES
    if isinstance(model, NetTable):
        net = _net_from_table(model, cl.speed_flops)
        if seconds_per_sample is not None:
            fl = model.flops()
            net = Net(**{**net.__dict__, "comp_s": fl * (seconds_per_sample / fl.sum()),
                         "measured": True, "cache": {}})
    else:
        net = _net_from_graph(model, cl.speed_flops, dataset_size or 0, seconds_per_sample)
    if dataset_size is not None:
        net = Net(**{**net.__dict__, "dataset_size": _positive_int(dataset_size,
                                                                   "dataset_size")})
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


def _positive(value: Any, what: str) -> float:
    """``value`` as a positive finite float, or InvalidOptionError naming ``what``."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:
        raise InvalidOptionError(f"{what} must be a positive finite number, got {value!r}")
    return float(value)


def _positive_int(value: Any, what: str) -> int:
    v = _positive(value, what)
    if v != int(v):
        raise InvalidOptionError(f"{what} must be a positive integer, got {value!r}")
    return int(v)


def project(model: Any, cluster: Any, strategy: str, *, devices: Sequence[int],
            batch_per_device: float, dataset_size: int | None = None,
            scaling: str = "weak", global_batch: float | None = None,
            mode: str = "default", layer_mask: Any = None, micro_batches: int | None = None,
            seconds_per_sample: float | None = None,
            plx_cable_latency_s: float = PLX_CABLE_LATENCY_S, gpudirect: bool = True,
            ds_source: str = "code") -> Projection:
    """Project one uniform strategy's epoch time and memory at several device counts.

    Parameters
    ----------
    model : NetTable, path to a ParaDL table, LayerGraph, or zoo name
        A zoo name (``"resnet50"``, :func:`milp_parallel.models.names`) is a graph of that
        model with ImageNet's 1,281,167 samples per epoch unless ``dataset_size`` says
        otherwise, as on the command line.
    cluster : Topology, Platform, path to a ``.plat`` or cluster JSON file, or a preset name
        A preset name grows to as many nodes as the largest of ``devices`` needs
        (:func:`milp_parallel.clusters.for_devices`, as the command line does); a Topology
        or a platform is used as given (a device count beyond it gives a row with
        ``applicable=False`` saying how many devices it has).
    strategy : str
        One of :data:`STRATEGIES` (or a ParaDL code, see :data:`PARADL_CODES`).
    devices : sequence of int
        Device counts.
    batch_per_device : float
        Samples per data-parallel replica per iteration (ParaDL's ``--cBon``; **not** the
        global batch of :func:`milp_parallel.solve`'s ``batch_size``): the global batch
        (``ProjectionRow.batch``) is this times the number of replicas (``p`` for data,
        ``p / GPUs per node`` for the hybrids, 1 for spatial, filter and channel, ``S``
        micro-batches for pipeline).
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
    gpudirect : bool, default True
        Default mode: whether point-to-point halo exchanges go device to device over the
        topology's links (True) or through host memory (False: ChainerMN-X's sends without
        CUDA-aware MPI, ParaDL's measured ABCI path; see
        :mod:`milp_parallel.oracle.implementation`).
    ds_source : {"code", "log"}
        ParaDL mode's data+spatial: the current ``parallel_analysis.py`` (default) or the
        older version behind the repository's published data+spatial log.

    Returns
    -------
    Projection
        Rows in the order of ``devices``; a device count beyond the strategy's limit gives a
        row with ``applicable=False`` and the reason.

    Raises
    ------
    UnknownNameError
        For an unknown strategy or zoo model.
    FormatError
        For a bad mask or a missing dataset size.
    InvalidOptionError
        For a batch, dataset size, device count or micro-batch count that is not a positive
        finite number, or a preset name asked to grow beyond :data:`MAX_GROWN_DEVICES`.
    """
    strategy = _canon(strategy)
    batch_per_device = _positive(batch_per_device, "batch_per_device")
    if global_batch is not None:
        global_batch = _positive(global_batch, "global_batch")
    if micro_batches is not None:
        micro_batches = _positive_int(micro_batches, "micro_batches")
    devices = [_positive_int(p, "devices") for p in devices]
    if not devices:
        raise InvalidOptionError("devices is empty; give device counts such as [1, 2, 4]")
    if mode not in ("default", "paradl"):
        raise UnknownNameError(f"unknown mode {mode!r}; use 'default' or 'paradl'")
    if scaling not in ("weak", "strong"):
        raise UnknownNameError(f"unknown scaling {scaling!r}; use 'weak' or 'strong'")
    if isinstance(cluster, str) and max(devices) > MAX_GROWN_DEVICES:
        raise InvalidOptionError(
            f"devices: {max(devices)} is beyond the {MAX_GROWN_DEVICES} devices a preset name "
            "grows to (the projection walks every device); give fewer devices or a Topology")
    cl = _cluster(cluster, mode, plx_cable_latency_s, devices=max(devices))
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
            rows.append(_not_applicable(
                strategy, p, math.nan, b, cl.memory_bytes,
                f"the cluster {cl.name} has {cl.max_devices} devices; pass a preset's name "
                f"(grown to the devices asked for) or a larger cluster, e.g. "
                f"clusters.for_devices({cl.name!r}, {p})"))
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
        r = FORMULAS[strategy](net, cl, p, b, D, q, mask=mask, micro_batches=micro_batches,
                               gpudirect=gpudirect, ds_source=ds_source)
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
    return Projection(net.name, cname, strategy, mode, scaling, D, tuple(rows),
                      memory_note(strategy, q, cl.bytes_per_element))


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
    from .. import plan as _plan  # late: depends on the whole pipeline
    strategy = _canon(strategy)
    if isinstance(model, str):
        from .. import models as _models
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
