"""One call's problem, prepared: the inputs resolved (:mod:`milp_parallel.inputs`), the
configuration options checked, the problem built with its budget, and the per-layer
accounting that maps an assignment back to layers.

May import: ``inputs``, ``build``, ``configs``, ``costs``, ``profile``, ``graph``,
``validation``, ``errors``, ``plan.baselines``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InvalidOptionError
from ..inputs import load_cluster, load_model, memory_budget_bytes
from ..problem import Problem
from ..validation import check_exclusive, check_keys, check_mapping, check_whole, show
from .baselines import NodeConfigs


# ---------------------------------------------------------------------- layer accounting
class _Accounting:
    """Maps assignments of a built problem back to layers and splits their costs.

    Per-layer compute, sync and memory are the rows of the builder's per-member tables for the
    chosen configuration (the very numbers summed into the problem's node costs); transfers
    are the cost model's ``t_x`` of each graph edge between two nodes, attributed to the
    consumer (the Problem's edge tables are sums of these). So the split adds up to the
    objective.
    """

    def __init__(self, built):
        self.built = built
        self.problem: Problem = built.problem
        self.graph = built.graph
        self.cm = built.cost_model
        self.layers = tuple(self.graph.layers)
        self.node_of = dict(built.node_of)
        self.heads = tuple(m[0] for m in built.members)
        self.member_index = {name: (v, j) for v, ms in enumerate(built.members)
                             for j, name in enumerate(ms)}
        self.edges = [(u, w, i) for e in built.edge_members for (u, w, i) in e]
        self.nodes = [NodeConfigs(self.graph.layer(h).op, tuple(self.graph.layer(h).dims),
                                  np.asarray(c, dtype=np.int64))
                      for h, c in zip(self.heads, built.configs)]

    def degrees(self, name: str, a: np.ndarray) -> np.ndarray:
        v = self.node_of[name]
        return np.asarray(self.built.configs[v][a[v]], dtype=np.int64)

    def breakdown(self, a: np.ndarray) -> dict[str, list[float]]:
        """Per layer ``[compute, sync, transfer, memory on its most loaded device]``."""
        res = {}
        for lay in self.layers:
            v, j = self.member_index[lay.name]
            mc = self.built.member_costs[v][j]
            c = a[v]
            res[lay.name] = [float(mc.compute_seconds[c]), float(mc.sync_seconds[c]), 0.0,
                             float(np.max(mc.memory_bytes[c]))]
        configs = self.built.configs
        for u, w, i in self.edges:
            # the build's (cached) table of this graph edge: one lookup, not a new t_x
            nu, nw = self.node_of[u], self.node_of[w]
            t = self.cm.transfer_table(self.graph.layer(u), self.graph.layer(w), i,
                                       configs[nu], configs[nw])
            res[w][2] += float(t[a[nu], a[nw]])
        return res

    def totals(self, a: np.ndarray) -> tuple[float, float, float]:
        parts = np.array([x[:3] for x in self.breakdown(a).values()]).reshape(-1, 3)
        return tuple(float(s) for s in parts.sum(axis=0))


# ---------------------------------------------------------------------- solve
def _describe(labels: Sequence[str]) -> str:
    """``"n=4"`` when every node has the same label, else the labels with their counts."""
    uniq: dict[str, int] = {}
    for s in labels:
        uniq[s] = uniq.get(s, 0) + 1
    if len(uniq) == 1:
        return next(iter(uniq))
    return ", ".join(f"{s} x{k}" for s, k in sorted(uniq.items(), key=lambda t: -t[1]))


@dataclass(frozen=True)
class _Built:
    built: Any                      # build.BuiltProblem (budget applied)
    budget: float | None
    model_name: str
    cluster_name: str
    batch_origin: str = "default"   # see Plan.batch_origin


def _build(model, cluster, *, batch_size=None, devices=None, memory_limit="device",
           config_options=None, cost_model=None, profile=None,
           batch_per_device=None) -> _Built:
    from ..costs.build import build

    check_exclusive(batch_size=batch_size, batch_per_device=batch_per_device)
    check_exclusive(cost_model=cost_model, profile=profile)
    space = _config_space(config_options)
    _check_cost_model(cost_model)
    topo, cluster_name = load_cluster(cluster, devices=devices)
    if batch_per_device is not None:
        batch_size = check_whole("batch_per_device", batch_per_device) * topo.n_devices
    graph, model_name = load_model(model, batch_size=batch_size)
    _check_dims(space, graph, model_name)
    if profile is not None:
        from ..costs.model import CostModel
        from ..measure.profile import ProfileTable
        if not isinstance(profile, ProfileTable):
            if not isinstance(profile, (str, os.PathLike)):
                raise InvalidOptionError(f"profile must be a ProfileTable or the path of a "
                                         f"profile table file, got {type(profile).__name__}")
            profile = ProfileTable.load(profile)
        cost_model = CostModel(topo, profile=profile)
    budget = memory_budget_bytes(memory_limit, topo)
    b = build(graph, topo, cost_model=cost_model, memory_limit=budget, **space)
    origin = ("batch_per_device" if batch_per_device is not None
              else "batch_size" if batch_size is not None else "default")
    return _Built(b, budget if b.problem.has_budget else None, model_name, cluster_name,
                  origin)


def _config_space(config_options) -> dict[str, Any]:
    """``config_options`` as build keywords, every key and value checked (see
    :class:`~milp_parallel.configs.ConfigOptions` and :class:`~milp_parallel.configs.
    SizeLimits`)."""
    from ..costs.configs import ConfigOptions, SizeLimits
    if config_options is None:
        return {}
    if isinstance(config_options, ConfigOptions):
        return {"config_options": config_options}
    opts = check_mapping("config_options", config_options, "of ConfigOptions fields and "
                         "size limits, e.g. {'power_of_two': False, 'max_degree': {'h': 4}}")
    known = [f.name for f in fields(ConfigOptions)] + list(SizeLimits.field_names())
    check_keys("config_options", opts, known)
    space = {k: v for k, v in opts.items() if k not in SizeLimits.field_names()}
    limits = {k: v for k, v in opts.items() if k in SizeLimits.field_names()}
    out: dict[str, Any] = {"config_options": ConfigOptions(**space)}
    if limits:
        out["limits"] = SizeLimits(**limits)
    return out


def _check_dims(space: Mapping[str, Any], graph, model_name: str) -> None:
    """Refuse a cap or tile extent on a dimension no layer of the graph has (it would be
    ignored without a word)."""
    opts = space.get("config_options")
    if opts is None:
        return
    dims = list(dict.fromkeys(d for lay in graph.layers for d in lay.dims))
    for what in ("max_degree", "min_tile"):
        for d in getattr(opts, what):
            if d not in dims:
                from ..graph import DIM_LETTERS
                raise InvalidOptionError(
                    f"config_options.{what}: no layer of {model_name} has dimension {d!r} "
                    f"({DIM_LETTERS[d]}), so it would change nothing; its dimensions: "
                    + ", ".join(f"{x} ({DIM_LETTERS.get(x, 'other')})" for x in dims))


def _check_cost_model(cost_model) -> None:
    from ..costs.model import CostModel
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise InvalidOptionError(
            f"cost_model must be a milp_parallel.costs.CostModel made for the cluster (e.g. "
            f"CostModel(topology, dtype='bf16')) or None for the default, got "
            f"{type(cost_model).__name__} {show(cost_model, 40)}; for measured layer times "
            "pass profile=, for another dtype clusters.get(..., dtype=...)")


