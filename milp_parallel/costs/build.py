"""Build the solver-facing :class:`~milp_parallel.problem.Problem` of a layer graph on a cluster.

One Problem node per layer (or per group of merged layers), one configuration per row of
:func:`~milp_parallel.configs.enumerate_configs`, node costs ``t_c + t_s``, edge costs ``t_x``
and memory per device from a :class:`~milp_parallel.costs.CostModel`.

Element-wise merging ("follow")
-------------------------------
With ``merge_elementwise=True`` a layer whose op is in :data:`FOLLOW_OPS` (element-wise
activations, dropout, batch-norm), that has one input, the same output shape and dims as that
input, and can split every dim its producer can, is merged into its producer's node: it takes
the producer's configuration (the same degrees), its compute, sync and memory are added to that
configuration's, and the edge between them disappears (its ``t_x`` is 0 on the diagonal, the
only pairs a follower may take). A merged node is named after its producer (the group's first
layer); :attr:`BuiltProblem.members` lists the layers of each node.

Edges between the same two nodes (a layer reading one tensor twice, or two members of a group
feeding one consumer) are summed into one Problem edge, oriented along the graph's
topological order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import InvalidOptionError, InvalidTopologyError, UnknownOptionError
from ..machine.topology import Topology
from ..problem import Problem
from ..units import parse_memory_limit
from .configs import ConfigOptions, SizeLimits, check_device_count, config_labels, enumerate_configs
from .model import CostModel

__all__ = ["build", "build_problem", "BuiltProblem", "FOLLOW_OPS"]

logger = logging.getLogger(__name__)

#: Ops that may follow their producer's layout when ``merge_elementwise`` is on.
FOLLOW_OPS = frozenset({"elementwise", "dropout", "batchnorm"})


@dataclass(frozen=True)
class MemberCosts:
    """The costs one layer adds to its node, for every configuration of the node."""

    name: str
    compute_seconds: np.ndarray   # (K,)
    sync_seconds: np.ndarray      # (K,)
    memory_bytes: np.ndarray      # (K, n_devices)


@dataclass(frozen=True)
class BuiltProblem:
    """A :class:`Problem` and the map from it back to layers.

    Attributes
    ----------
    problem : Problem
        ``node_names`` are layer names (a merged node's is its producer's), ``config_labels``
        the configuration labels (``"n=2 h=2"``, ``"serial"``).
    graph : LayerGraph
    topology : Topology
    cost_model : CostModel
    configs : tuple of numpy.ndarray
        Per node, the ``(K, ndim)`` degrees (aligned with the node's first layer's dims).
    members : tuple of tuple of str
        Per node, its layers (the producer first, then the layers that follow it).
    node_of : Mapping[str, int]
        Layer name -> node index.
    member_costs : tuple of tuple of MemberCosts
        Per node, per member, its compute, sync and memory for every configuration.
    edge_members : tuple of tuple of (str, str, int)
        Per Problem edge, the graph edges ``(producer, consumer, input index)`` summed into it.
    build_seconds : float
        Wall time of the build.
    """

    problem: Problem
    graph: Any
    topology: Topology
    cost_model: CostModel
    configs: tuple
    members: tuple
    node_of: Mapping[str, int]
    member_costs: tuple
    edge_members: tuple
    build_seconds: float = field(default=0.0, compare=False)

    def config_counts(self) -> dict[str, int]:
        """Number of configurations of every node, by node name."""
        return {n: int(k) for n, k in zip(self.problem.node_names, self.problem.n_configs)}

    def edge_table_size(self) -> int:
        """Total number of entries in the edge cost tables."""
        return int(sum(t.size for t in self.problem.edge_costs))

    def degrees(self, node: int, config: int) -> dict[str, int]:
        """The degrees of a node's configuration as ``{dim: degree}`` (all dims)."""
        layer = self.graph.layer(self.members[node][0])
        return {d: int(k) for d, k in zip(layer.dims, self.configs[node][config])}

    def summary(self) -> str:
        """A few lines: sizes, configurations per node (min / median / max), edge tables."""
        k = self.problem.n_configs
        merged = sum(len(m) - 1 for m in self.members)
        return "\n".join([
            f"{len(self.graph)} layers -> {self.problem.n_nodes} nodes ({merged} merged), "
            f"{self.problem.n_edges} edges, {self.topology.n_devices} devices "
            f"({self.topology.name})",
            f"configs per node: min {int(k.min())}, median {float(np.median(k)):g}, max "
            f"{int(k.max())}, total {int(k.sum())}",
            f"edge tables: {self.edge_table_size()} entries; built in "
            f"{self.build_seconds:.3f} s"])


def _can_follow(layer, producer, merge: bool) -> bool:
    return (merge and layer.op in FOLLOW_OPS and len(layer.inputs) == 1
            and tuple(layer.output_shape) == tuple(producer.output_shape)
            and tuple(layer.dims) == tuple(producer.dims)
            and set(producer.parallel_dims) <= set(layer.parallel_dims))


def build(graph, topology: Topology, *, cost_model: CostModel | None = None,
          config_options: ConfigOptions | None = None, merge_elementwise: bool = True,
          memory_limit: float | str | None = "device", limits: SizeLimits | None = None,
          **option_overrides: Any) -> BuiltProblem:
    """Build the Problem of ``graph`` on ``topology`` and the map back to layers.

    Parameters
    ----------
    graph : LayerGraph
    topology : Topology
    cost_model : CostModel, optional
        Default ``CostModel(topology)`` (fp32, Adam).
    config_options : ConfigOptions, optional
        The configuration space; keyword arguments (``power_of_two=False``,
        ``max_degree={"h": 4}``, ...) override its fields.
    merge_elementwise : bool, default True
        Merge :data:`FOLLOW_OPS` layers into their producer (see the module docstring).
    memory_limit : float, str or None, default "device"
        Per-device budget (:func:`~milp_parallel.units.parse_memory_limit`): ``"device"`` =
        the topology's device memory, ``"none"`` or ``None`` = unconstrained (the memory
        tables are still attached), or bytes / a size such as ``"12GiB"``.
    limits : SizeLimits, optional
        The largest sizes to allocate (default :class:`~milp_parallel.configs.SizeLimits`);
        keyword arguments ``max_devices=``, ``max_configs=``, ``max_edge_entries=``,
        ``max_memory_entries=`` override its fields. Checked before any table is built.

    Returns
    -------
    BuiltProblem

    Raises
    ------
    InvalidTopologyError
        When the cost model was made for another topology, or the device count is not a
        power of two under power-of-two degrees (see
        :func:`~milp_parallel.configs.check_device_count`).
    InvalidOptionError
        When ``memory_limit`` or an option is invalid, or the cost model's profile table
        prices no layer of the graph (``CostModel.check_profile``).
    ProblemTooLargeError
        When a size exceeds its limit (names the size and the option that raises it).

    Examples
    --------
    >>> from milp_parallel import clusters
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (8, 3, 8, 8))
    >>> _ = g.conv("conv", "x", 4, 3, padding=1)
    >>> _ = g.elementwise("relu", "conv")
    >>> b = build(g, clusters.get("pcie_box"))
    >>> b.problem.node_names, b.members
    (('x', 'conv'), (('x',), ('conv', 'relu')))
    """
    start = time.perf_counter()
    if not isinstance(topology, Topology):
        raise InvalidTopologyError(f"build: topology must be a Topology, got "
                                   f"{type(topology).__name__}")
    opts, limits = _split_options(config_options, limits, option_overrides)
    n_dev = topology.n_devices
    check_device_count(n_dev, opts, limits=limits, where=f"cluster {topology.name!r}")
    if cost_model is None:
        cost_model = CostModel(topology)
    elif cost_model.topology != topology:
        raise InvalidTopologyError("cost_model was made for another topology "
                                   f"({cost_model.topology!r}); pass a CostModel(topology)")

    root: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for layer in graph.layers:
        if layer.inputs:
            prod = graph.layer(layer.inputs[0])
            if _can_follow(layer, prod, merge_elementwise):
                r = root[prod.name]
                root[layer.name] = r
                groups[r].append(layer.name)
                continue
        root[layer.name] = layer.name
        groups[layer.name] = [layer.name]
    node_names = list(groups)
    index = {n: i for i, n in enumerate(node_names)}
    graph_inputs = {lay.name for lay in graph.layers if lay.op == "input"}

    # Sizes first: every table below is allocated only once all of them fit the limits.
    configs = []
    for name in node_names:
        cfg = enumerate_configs(graph.layer(name), n_dev, options=opts,
                                max_configs=limits.max_configs)
        cfg.setflags(write=False)
        configs.append(cfg)
    k = [len(c) for c in configs]
    limits.check("max_memory_entries", sum(k) * n_dev,
                 f"memory tables ({sum(k):,} configurations x {n_dev} devices)")
    pairs = {(min(index[root[u]], index[root[v]]), max(index[root[u]], index[root[v]]))
             for u, v, _ in graph.edges if root[u] != root[v]}
    limits.check("max_edge_entries", sum(k[a] * k[b] for a, b in pairs),
                 f"edge cost tables ({len(pairs):,} edges)")

    labels, node_costs, memory, member_costs = [], [], [], []
    for name, cfg in zip(node_names, configs):
        head = graph.layer(name)
        labels.append(config_labels(head, cfg))
        cost = np.zeros(len(cfg))
        mem = np.zeros((len(cfg), n_dev))
        mc = []
        for m in groups[name]:
            layer = graph.layer(m)
            gi = tuple(x in graph_inputs for x in layer.inputs)
            tc = cost_model.compute_seconds(layer, cfg, graph_inputs=gi)
            ts = cost_model.sync_seconds(layer, cfg, graph_inputs=gi)
            mb = cost_model.memory_bytes(layer, cfg)
            cost += tc + ts
            mem += mb
            mc.append(MemberCosts(m, tc, ts, mb))
        node_costs.append(cost)
        memory.append(mem)
        member_costs.append(tuple(mc))
    if cost_model.profile is not None:
        cost_model.check_profile(graph)  # a table that prices no layer is an error

    tables: dict[tuple[int, int], np.ndarray] = {}
    edge_members: dict[tuple[int, int], list] = {}
    for u, v, i in graph.edges:
        a, b = index[root[u]], index[root[v]]
        if a == b:
            continue  # a follow edge inside a merged node: t_x is 0 on the diagonal
        t = cost_model.transfer_seconds(graph.layer(u), graph.layer(v), i, configs[a],
                                        configs[b])
        key = (a, b) if a < b else (b, a)
        if a > b:
            t = t.T
        tables[key] = tables[key] + t if key in tables else t
        edge_members.setdefault(key, []).append((u, v, int(i)))
    keys = list(tables)

    limit = parse_memory_limit(memory_limit, device_bytes=topology.device.memory_bytes)
    problem = Problem(node_costs, keys, [tables[k] for k in keys], memory=memory,
                      memory_limit=limit, node_names=node_names, config_labels=labels)
    seconds = time.perf_counter() - start
    built = BuiltProblem(problem, graph, topology, cost_model, tuple(configs),
                         tuple(tuple(groups[n]) for n in node_names),
                         MappingProxyType({m: index[r] for m, r in root.items()}),
                         tuple(member_costs), tuple(tuple(edge_members[k]) for k in keys),
                         seconds)
    logger.debug("built problem: %s", built.summary())
    return built


def build_problem(graph, topology: Topology, *, cost_model: CostModel | None = None,
                  config_options: ConfigOptions | None = None, merge_elementwise: bool = True,
                  memory_limit: float | str | None = "device",
                  limits: SizeLimits | None = None, **option_overrides: Any) -> Problem:
    """The :class:`Problem` of :func:`build` (same parameters), without the map back."""
    return build(graph, topology, cost_model=cost_model, config_options=config_options,
                 merge_elementwise=merge_elementwise, memory_limit=memory_limit,
                 limits=limits, **option_overrides).problem


def _split_options(config_options, limits, overrides: Mapping[str, Any]
                   ) -> tuple[ConfigOptions, SizeLimits]:
    """The configuration space and the size limits, from the objects and keyword overrides."""
    if config_options is not None and not isinstance(config_options, ConfigOptions):
        raise InvalidOptionError(f"config_options must be a ConfigOptions, got "
                                 f"{type(config_options).__name__}")
    if limits is not None and not isinstance(limits, SizeLimits):
        raise InvalidOptionError(f"limits must be a SizeLimits, got {type(limits).__name__}")
    opts = config_options or ConfigOptions()
    limits = limits or SizeLimits()
    space = {f.name for f in fields(ConfigOptions)}
    sizes = set(SizeLimits.field_names())
    unknown = set(overrides) - space - sizes
    if unknown:
        raise UnknownOptionError(f"unknown build option(s) {sorted(unknown)}; known: "
                                 f"{sorted(space | sizes)}")
    mine = {k: v for k, v in overrides.items() if k in space}
    if mine:
        try:
            opts = replace(opts, **mine)
        except TypeError as exc:
            raise InvalidOptionError(f"config options {mine!r:.80}: {exc}") from None
    lim = {k: v for k, v in overrides.items() if k in sizes}
    if lim:
        limits = replace(limits, **lim)
    return opts, limits
