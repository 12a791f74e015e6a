"""What users hand in, resolved in one place: a model, a cluster, a memory budget.

A *model* is a zoo name (:func:`milp_parallel.models.get`), a
:class:`~milp_parallel.graph.LayerGraph` or the path of a graph JSON file; a *cluster* a
preset name (:func:`milp_parallel.clusters.get`, grown to the devices asked for), a
:class:`~milp_parallel.topology.Topology` or the path of a cluster JSON file; a *memory
limit* anything :func:`~milp_parallel.units.parse_memory_limit` reads. ``solve``, the
transformer planner, the profiler, the oracle, sweeps and the command line all resolve
their inputs here, so a name, a file and an object mean the same thing everywhere.

May import: ``errors``, ``units``, ``graph``, ``topology``, ``models``, ``clusters``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FormatError, InvalidGraphError, InvalidTopologyError

__all__ = ["is_path", "load_model", "load_cluster", "memory_budget_bytes"]


def is_path(x: Any) -> bool:
    """Whether ``x`` names a file rather than a zoo model or a preset: a path object, or a
    string ending in ``.json`` / ``.json.gz`` or holding a path separator."""
    if isinstance(x, os.PathLike):
        return True
    return isinstance(x, str) and (x.endswith((".json", ".json.gz")) or os.sep in x
                                   or (os.altsep is not None and os.altsep in x))


def _is_count(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def load_model(model: Any, *, batch_size: int | None = None) -> tuple[Any, str]:
    """``(graph, name)`` from a zoo name, a ``LayerGraph`` or a graph JSON path.

    Parameters
    ----------
    model : str, path or LayerGraph
    batch_size : int, optional
        The global batch: the graph is rebatched to it (a zoo model is built at it).

    Raises
    ------
    InvalidGraphError
        For a batch size that is not a whole number >= 1, an empty graph or a value that is
        none of the three.
    FormatError
        For a path that does not exist or a file that is not a graph.
    UnknownNameError
        For a zoo name that is not known (the nearest names suggested).

    Examples
    --------
    >>> graph, name = load_model("lenet5", batch_size=32)
    >>> name, graph.batch_size
    ('lenet5', 32)
    """
    from .graph import LayerGraph
    if batch_size is not None:
        if not _is_count(batch_size) or batch_size < 1:
            raise InvalidGraphError(f"batch_size must be a positive integer, got "
                                    f"{batch_size!r:.40}")
        batch_size = int(batch_size)
    if isinstance(model, LayerGraph):
        graph, name = model, getattr(model, "name", None) or "graph"
    elif is_path(model):
        path = Path(model)
        if not path.exists():
            raise FormatError(f"{path}: no such model file (give a zoo name such as 'alexnet', "
                              "a LayerGraph, or the path of a graph JSON file)")
        graph = LayerGraph.load(path)
        name = getattr(graph, "name", None) or path.name.split(".")[0]
    elif isinstance(model, str):
        from . import models
        return models.get(model, batch_size=batch_size), model
    else:
        raise InvalidGraphError(f"model must be a zoo name, a LayerGraph or a path, got "
                                f"{type(model).__name__}")
    if len(graph) == 0:
        raise InvalidGraphError(f"model {name!r} has no layers; add at least an input layer")
    if batch_size is not None and batch_size != graph.batch_size:
        graph = graph.with_batch_size(batch_size)
    return graph, str(name)


def load_cluster(cluster: Any, *, devices: int | None = None) -> tuple[Any, str]:
    """``(topology, name)`` from a preset name, a ``Topology`` or a cluster JSON path.

    Parameters
    ----------
    cluster : str, path or Topology
    devices : int, optional
        Use the first ``devices`` devices. A preset grows to hold them
        (:func:`milp_parallel.clusters.for_devices`); a file or an object does not.

    Raises
    ------
    InvalidTopologyError
        For a device count that is not a whole number from 1 to the cluster's size, or a
        value that is none of the three.
    FormatError
        For a path that does not exist or a file that is not a cluster.
    UnknownNameError
        For a preset name that is not known (the nearest names suggested).

    Examples
    --------
    >>> topo, name = load_cluster("abci", devices=64)
    >>> name, topo.n_devices
    ('abci', 64)
    """
    from .machine.topology import Topology
    if devices is not None and (not _is_count(devices) or devices < 1):
        raise InvalidTopologyError(f"devices={devices!r:.40}: give a whole number >= 1 (the "
                                   "first devices of the cluster)")
    if isinstance(cluster, Topology):
        topo = cluster
    elif is_path(cluster):
        path = Path(cluster)
        if not path.exists():
            raise FormatError(f"{path}: no such cluster file (give a preset name, a Topology, "
                              "or the path of a cluster JSON file)")
        topo = Topology.load(path)
    elif isinstance(cluster, str):
        from .machine import clusters
        topo = (clusters.get(cluster) if devices is None
                else clusters.for_devices(cluster, int(devices)))
    else:
        raise InvalidTopologyError(f"cluster must be a preset name, a Topology or a path, got "
                                   f"{type(cluster).__name__}")
    name = getattr(topo, "name", None) or (cluster if isinstance(cluster, str) else "cluster")
    if devices is not None:
        if not 1 <= devices <= topo.n_devices:
            raise InvalidTopologyError(
                f"devices={devices!r}: give a whole number from 1 to {topo.n_devices} (the "
                f"devices of cluster {name!r}), or a larger cluster")
        if devices != topo.n_devices:
            topo = topo.with_devices(int(devices))
    return topo, str(name)


def memory_budget_bytes(memory_limit: Any, topology: Any) -> float | None:
    """The budget per device in bytes (:func:`~milp_parallel.units.parse_memory_limit`):
    ``"device"`` -> the device's memory; ``None``, ``"none"`` or ``inf`` -> no budget
    (``None``)."""
    from .units import parse_memory_limit
    return parse_memory_limit(memory_limit, device_bytes=float(topology.device.memory_bytes))
