"""Gradient buckets: which layers' weight-shard gradients one all-reduce sums.

One rule, used by the step simulator (:mod:`.simulator`) to price the bucketed sync and by
the layer-wise program (:mod:`milp_parallel.runtime.layerwise`) to run it, so that the two
cannot drift apart: walking the layers in backward order, a layer whose weight shard has
replicas (:func:`sync_groups`) joins the open bucket of its replica-group structure, and a
bucket that reaches the bucket size closes (PyTorch DDP's rule, per group structure).

May import: ``costs.model`` (the replica groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .model import replica_groups

__all__ = ["SyncBucket", "shard_groups", "sync_groups", "sync_buckets"]


def shard_groups(layer, degrees: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """The groups of ranks that hold the same slice of ``layer``'s weight-split dims (those
    with more than one rank): a weight shard's replicas, a batch-norm's channel slice."""
    split = [d in layer.weight_split_dims for d in layer.dims]
    return tuple(tuple(int(x) for x in g) for g in replica_groups(degrees, split)
                 if len(g) > 1)


def sync_groups(layer, degrees: np.ndarray) -> tuple[tuple[tuple[int, ...], ...], float]:
    """The groups of ranks that hold the same weight shard of ``layer`` (those with more
    than one rank) and the shard's elements as the cost model prices them (``params /
    shards``)."""
    if layer.params <= 0:
        return (), 0.0
    shards = int(np.prod([k for k, d in zip(degrees, layer.dims)
                          if d in layer.weight_split_dims], dtype=np.int64))
    return shard_groups(layer, degrees), float(layer.params) / shards


@dataclass(frozen=True)
class SyncBucket:
    """One gradient all-reduce of a step, on each of its replica groups.

    Attributes
    ----------
    layers : tuple of str
        The layers whose weight-shard gradients it sums, in the order the backward pass
        makes them ready (the reverse of the graph's order).
    groups : tuple of tuple of int
        The replica groups (every layer of the bucket has these); each group reduces its
        own shard.
    shard_bytes : float
        Bytes each rank of a group all-reduces: the layers' shard bytes summed, as the
        cost model prices them.
    full : bool
        Whether it reached the bucket size (its all-reduce starts when its last gradient
        is ready); a partial one is what is left when the backward pass ends.
    """

    layers: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    shard_bytes: float
    full: bool = True

    @property
    def name(self) -> str:
        """The bucket's label: its layers joined by ``+`` (as the step simulator's task)."""
        return "+".join(self.layers)


def sync_buckets(graph, configs: Mapping[str, np.ndarray], bucket_bytes: float | None,
                 bytes_per_element: float) -> tuple[SyncBucket, ...]:
    """The gradient buckets of an assignment: the step simulator's and the layer-wise
    program's.

    Walking the layers in backward order, a layer whose weight shard has replicas joins
    the open bucket of its replica-group structure; a bucket holding ``bucket_bytes`` or
    more is closed (``None``: every layer is its own bucket). Closed buckets come in the
    order they closed, then the partial ones, in the order their last layer is ready.

    Parameters
    ----------
    graph : Graph
    configs : mapping
        Layer name -> its degrees aligned with its dims.
    bucket_bytes : float or None
    bytes_per_element : float

    Returns
    -------
    tuple of SyncBucket
    """
    closed: list[SyncBucket] = []
    open_: dict[tuple, tuple[list[str], float, int]] = {}
    order = list(reversed(graph.layers))
    for i, layer in enumerate(order):
        groups, shard = sync_groups(layer, configs[layer.name])
        if not groups or shard <= 0:
            continue
        names, size, _ = open_.get(groups, ([], 0.0, 0))
        names, size = names + [layer.name], size + shard * bytes_per_element
        if bucket_bytes is None or size >= bucket_bytes:
            open_.pop(groups, None)
            closed.append(SyncBucket(tuple(names), groups, size))
        else:
            open_[groups] = (names, size, i)
    rest = sorted(open_.items(), key=lambda kv: kv[1][2])
    return tuple(closed) + tuple(SyncBucket(tuple(names), groups, size, full=False)
                                 for groups, (names, size, _) in rest)
