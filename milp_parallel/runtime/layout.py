"""Where a layer-wise plan puts every tile, and what its program must move (numpy only).

The geometry is the cost model's own (:mod:`milp_parallel.costs`): a layer's configuration
tiles its output row-major over devices ``0 .. prod(degrees) - 1``
(:func:`~milp_parallel.configs.tile_boxes`), and a consumer's tile needs the box of each
input that :meth:`~milp_parallel.graph.Layer.input_region` names. From it:

- :func:`edge_exchange`: for one edge, the box every rank sends every other rank (what the
  receiver needs and does not hold). Its elements, forward, are what
  ``CostModel.transfer_seconds`` integrates over the links; the backward pass sends the
  gradients of the same boxes back (``backward_transfer_factor`` = 1), except from a graph
  input, which has no gradient (see ``docs/runtime.md``).
- :func:`plan_sync_buckets`: the gradient buckets of the plan
  (:func:`milp_parallel.costs.buckets.sync_buckets`, the function the step simulator runs
  them by; one all-reduce per bucket and group).
- :func:`stats_groups`: the ranks a batch-norm split along samples or space sums its
  statistics over when the plan was priced with ``batchnorm_stats="sync"``
  (:func:`plan_batchnorm_stats`).
- :func:`predicted_memory`: ``CostModel.memory_parts`` of the plan's cost model
  (:func:`plan_cost_model`) summed over the layers: parameters, gradients, optimizer state
  and the activations each layer's backward keeps (no second formula here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..costs.buckets import SyncBucket, shard_groups, sync_buckets, sync_groups
from ..costs.configs import tile_boxes
from ..costs.model import DDP_BUCKET_BYTES, STATS_BYTES_PER_ELEMENT
from ..errors import PlanMismatchError
from ..machine.topology import DTYPE_BYTES
from ..measure.operators import OPTIMIZER_STATE_FACTOR

__all__ = ["Exchange", "SyncBucket", "layer_degrees", "tiles", "edge_exchange", "sync_groups",
           "sync_buckets", "plan_sync_buckets", "stats_groups", "plan_batchnorm_stats",
           "predicted_memory", "predicted_collectives",
           "plan_cost_model", "OPTIMIZER_STATE_FACTOR"]


def layer_degrees(layer, degrees: Mapping[str, int]) -> np.ndarray:
    """A plan's ``{dim: degree}`` as one row aligned with ``layer.dims``.

    Raises
    ------
    PlanMismatchError
        A dim the layer does not have.
    """
    unknown = sorted(set(degrees) - set(layer.dims))
    if unknown:
        raise PlanMismatchError(
            f"layer {layer.name!r}: the plan splits dim(s) {', '.join(unknown)}, but the "
            f"module's layer has dims {''.join(layer.dims)}; solve the plan on the graph of "
            "this module (mp.from_torch(module, example_input))")
    return np.array([int(degrees.get(d, 1)) for d in layer.dims], dtype=np.int64)


def tiles(shape: Sequence[int], degrees: np.ndarray, world: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """The output box ``[lo, hi)`` of every rank (empty on ranks the layer does not use),
    each of shape ``(world, ndim)``."""
    lo, hi, _ = tile_boxes(tuple(shape), np.asarray(degrees)[None, :], n_tiles=world)
    return lo[0], hi[0]


def _volume(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.maximum(hi - lo, 0).prod(axis=-1)


@dataclass(frozen=True)
class Exchange:
    """What one edge's redistribution moves, rank to rank.

    Attributes
    ----------
    producer, consumer : str
        The edge's layers.
    input_index : int
        Which input of the consumer the edge feeds.
    need_lo, need_hi : numpy.ndarray, shape (world, ndim)
        The box of the producer's output each rank's consumer tile needs (clipped).
    hold_lo, hold_hi : numpy.ndarray, shape (world, ndim)
        The producer's tile on each rank.
    elements : numpy.ndarray of int, shape (world, world)
        ``elements[s, r]``: the elements rank ``s`` sends rank ``r`` (0 on the diagonal:
        a rank keeps what it holds).
    """

    producer: str
    consumer: str
    input_index: int
    need_lo: np.ndarray
    need_hi: np.ndarray
    hold_lo: np.ndarray
    hold_hi: np.ndarray
    elements: np.ndarray

    def piece(self, sender: int, receiver: int) -> tuple[np.ndarray, np.ndarray]:
        """The box ``[lo, hi)`` (global coordinates) ``sender`` has of what ``receiver``
        needs (empty when none)."""
        lo = np.maximum(self.hold_lo[sender], self.need_lo[receiver])
        hi = np.minimum(self.hold_hi[sender], self.need_hi[receiver])
        return lo, np.maximum(hi, lo)

    @property
    def moves(self) -> bool:
        """Whether any rank sends anything."""
        return bool(self.elements.sum() > 0)


def edge_exchange(producer, consumer, input_index: int, cfg_u: np.ndarray, cfg_v: np.ndarray,
                  world: int) -> Exchange:
    """The redistribution of the tensor ``producer -> consumer`` (input ``input_index``)."""
    h_lo, h_hi = tiles(producer.output_shape, cfg_u, world)
    o_lo, o_hi = tiles(consumer.output_shape, cfg_v, world)
    n_lo, n_hi = consumer.input_region(input_index, o_lo, o_hi)
    lo = np.maximum(h_lo[:, None, :], n_lo[None, :, :])
    hi = np.minimum(h_hi[:, None, :], n_hi[None, :, :])
    el = _volume(lo, hi)
    np.fill_diagonal(el, 0)
    return Exchange(producer.name, consumer.name, int(input_index), n_lo, n_hi, h_lo, h_hi, el)


def plan_sync_buckets(plan, graph, configs: Mapping[str, np.ndarray]
                      ) -> tuple[SyncBucket, ...]:
    """:func:`sync_buckets` of a plan: the bucket size of the cost model it was solved with
    (``plan.inputs.cost_model``, or the plan's recorded ``runtime_options``), else the cost
    model's default (:data:`~milp_parallel.costs.DDP_BUCKET_BYTES`), and the plan's dtype."""
    size = _priced(plan, "gradient_bucket_bytes", float(DDP_BUCKET_BYTES))
    return sync_buckets(graph, configs, size, _bytes_per_element(plan))


def _priced(plan, name: str, default):
    """The cost model's ``name`` the plan was priced with: the solve's own cost model
    (``plan.inputs.cost_model``), else what the plan recorded (``plan.runtime_options``,
    a saved plan), else ``default``."""
    given = getattr(getattr(plan, "inputs", None), "cost_model", None)
    if given is not None and hasattr(given, name):
        return getattr(given, name)
    return dict(getattr(plan, "runtime_options", None) or {}).get(name, default)


def stats_groups(layer, degrees: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """The groups of ranks that hold the same channel slice of a batch-norm ``layer`` (those
    with more than one rank): the ranks whose batch statistics are one batch's. Empty for
    another op."""
    return shard_groups(layer, degrees) if layer.op == "batchnorm" else ()


def plan_batchnorm_stats(plan) -> str:
    """The ``batchnorm_stats`` of the cost model the plan was solved with (the solve's, or
    the one the plan recorded), else the cost model's default, ``"local"``."""
    return _priced(plan, "batchnorm_stats", "local")


def _bytes_per_element(plan) -> int:
    return DTYPE_BYTES.get(getattr(plan, "dtype", "fp32"), 4)


def predicted_collectives(plan, graph, world: int) -> dict[tuple[str, str], float]:
    """What the plan's cost model prices, in bytes summed over the ranks.

    ``(consumer, "transfer")``: every redistribution into the layer, forward plus backward
    (the backward only for an edge that carries a gradient: not from a graph input);
    ``(bucket, "sync")``: the gradient all-reduce of a bucket of weight shards
    (:func:`plan_sync_buckets`; the bucket's
    layers joined by ``+``), counted as the bucket's bytes once per rank of a replica group;
    ``(batch-norm, "stats")`` with ``batchnorm_stats="sync"``: its statistics' all-reduces,
    forward and backward, ``2 C`` fp32 of each rank's channel slice in each.
    """
    bpe = _bytes_per_element(plan)
    cfg = {lc.name: layer_degrees(graph.layer(lc.name), lc.degrees) for lc in plan.layers}
    out: dict[tuple[str, str], float] = {}
    for u, v, i in graph.edges:
        ex = edge_exchange(graph.layer(u), graph.layer(v), i, cfg[u], cfg[v], world)
        if ex.moves:
            passes = 1 if graph.layer(u).op == "input" else 2
            key = (v, "transfer")
            out[key] = out.get(key, 0.0) + passes * float(ex.elements.sum()) * bpe
    for b in plan_sync_buckets(plan, graph, cfg):
        out[(b.name, "sync")] = b.shard_bytes * sum(len(g) for g in b.groups)
    if plan_batchnorm_stats(plan) == "sync":
        for layer in graph.layers:
            groups = stats_groups(layer, cfg[layer.name])
            if groups:
                lo, hi = tiles(layer.output_shape, cfg[layer.name], world)
                ch = layer.dims.index(layer.weight_split_dims[0])
                ranks = [r for g in groups for r in g]
                out[(layer.name, "stats")] = 2 * sum(
                    2.0 * STATS_BYTES_PER_ELEMENT * float(hi[r, ch] - lo[r, ch])
                    for r in ranks)
    return out


def plan_cost_model(plan, world: int, optimizer_state_factor: float = 2.0):
    """The plan's cost model, for ``world`` devices and the audited optimizer.

    The one the plan was solved with (``plan.inputs.cost_model``) when it has one, else
    ``CostModel`` on the plan's cluster (``plan.inputs.cluster``, else the preset named
    ``plan.cluster``); its activation bytes per element are the plan's dtype's.
    """
    from ..costs.model import CostModel
    from ..inputs import load_cluster

    inputs = getattr(plan, "inputs", None)
    given = getattr(inputs, "cost_model", None)
    cluster = getattr(inputs, "cluster", None) or plan.cluster
    topology = (given.topology if given is not None
                else load_cluster(cluster, devices=world)[0])
    bpe = given.bytes_per_element if given is not None else _bytes_per_element(plan)
    return CostModel(topology, bytes_per_element=bpe,
                     optimizer_state_factor=optimizer_state_factor)


def predicted_memory(plan, graph, world: int, optimizer_state_factor: float = 2.0
                     ) -> list[dict[str, float]]:
    """Per rank, ``CostModel.memory_parts`` (:func:`plan_cost_model`) summed over the
    plan's layers: ``parameters``, ``gradients``, ``optimizer`` and ``activations`` (what
    each layer's backward keeps on the rank's tile, :mod:`milp_parallel.costs.saved`)."""
    cm = plan_cost_model(plan, world, optimizer_state_factor)
    parts = ("parameters", "gradients", "optimizer", "activations")
    total = {k: np.zeros(world) for k in parts}
    for lc in plan.layers:
        layer = graph.layer(lc.name)
        got = cm.memory_parts(layer, layer_degrees(layer, lc.degrees)[None, :])
        for k in parts:
            total[k] += got[k][0, :world]
    return [{k: float(total[k][r]) for k in parts} for r in range(world)]
