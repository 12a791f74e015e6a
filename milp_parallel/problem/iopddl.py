"""The IOPDDL contest's problem format (google/iopddl, ASPLOS/EuroSys 2025), read into the
arrays a :class:`~milp_parallel.problem.Problem` is made of and written from them.

May import: ``io``, ``errors``, numpy (the Problem class calls in; this module never imports
it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import FormatError, InvalidProblemError
from ..io import Fields

if TYPE_CHECKING:
    from .tables import Problem

__all__ = ["iopddl_arguments", "iopddl_document"]

logger = logging.getLogger(__name__)

#: The keys each object of the format may have (:meth:`Fields.keys` refuses others).
_IOPDDL_KEYS = frozenset({"name", "nodes", "edges", "usage_limit"})
_IOPDDL_NODE_KEYS = frozenset({"costs", "usages", "intervals"})
_IOPDDL_EDGE_KEYS = frozenset({"nodes", "costs"})


def iopddl_arguments(data: Any, *, source: str = "<dict>") -> dict[str, Any]:
    """The keyword arguments of ``Problem(...)`` for an IOPDDL document (see
    :meth:`Problem.from_iopddl <milp_parallel.problem.Problem.from_iopddl>`).

    Raises
    ------
    FormatError
        A key missing or unknown, a value of the wrong type or a list of the wrong length
        (names ``source`` and the node or edge).
    """
    f = Fields(source)
    if not isinstance(data, dict) or not isinstance(data.get("problem"), dict):
        raise FormatError(f"{source}: not an IOPDDL problem (expected an object with a "
                          "'problem' object)")
    f.keys(data, ("problem",), "")
    p = _iopddl_object(f, data["problem"], _IOPDDL_KEYS, "problem", ("nodes", "edges"))
    nodes = _iopddl_object(f, p["nodes"], _IOPDDL_NODE_KEYS, "problem.nodes")
    edges = _iopddl_object(f, p["edges"], _IOPDDL_EDGE_KEYS, "problem.edges")
    raw_costs, raw_usages, raw_iv = nodes["costs"], nodes["usages"], nodes["intervals"]
    enodes, ecosts = edges["nodes"], edges["costs"]
    if p.get("name") is not None:
        f.string(p["name"], "problem.name")
    raw_costs = f.array(raw_costs, "problem.nodes.costs")
    raw_usages = f.array(raw_usages, "problem.nodes.usages")
    raw_iv = f.array(raw_iv, "problem.nodes.intervals")
    enodes = f.array(enodes, "problem.edges.nodes")
    ecosts = f.array(ecosts, "problem.edges.costs")
    n = len(raw_costs)
    if len(raw_usages) != n or len(raw_iv) != n:
        raise FormatError(f"{source}: {n} cost lists but {len(raw_usages)} usage lists and "
                          f"{len(raw_iv)} intervals; give one of each per node")
    costs = [f.numbers(c, f"problem.nodes.costs[{v}]", allow_inf=False)
             for v, c in enumerate(raw_costs)]
    usages = [f.numbers(u, f"problem.nodes.usages[{v}]", allow_inf=False)
              for v, u in enumerate(raw_usages)]
    for v in range(n):
        if usages[v].size != costs[v].size:
            raise FormatError(f"{source}: node {v} has {costs[v].size} costs but "
                              f"{usages[v].size} usages")
    intervals = _iopddl_pairs(f, raw_iv, "problem.nodes.intervals", "node")
    if len(enodes) != len(ecosts):
        raise FormatError(f"{source}: {len(enodes)} edges but {len(ecosts)} edge cost "
                          "lists")
    pairs = _iopddl_pairs(f, enodes, "problem.edges.nodes", "edge")
    merged: dict[tuple[int, int], np.ndarray] = {}
    order: list[tuple[int, int]] = []
    for i, ((u, v), c) in enumerate(zip(pairs.tolist(), ecosts)):
        if not (0 <= u < n and 0 <= v < n):
            raise FormatError(f"{source}: edge {i} ({u}, {v}) names a node out of range "
                              f"(the problem has {n} nodes)")
        if u == v:
            raise FormatError(f"{source}: edge {i} ({u}, {v}) is a self-loop; an edge joins "
                              "two different nodes")
        ku, kv = costs[u].size, costs[v].size
        tab = f.numbers(c, f"problem.edges.costs[{i}]", allow_inf=False)
        if tab.size != ku * kv:
            raise FormatError(f"{source}: edge {i} ({u}, {v}) has {tab.size} costs, "
                              f"expected {ku} x {kv} = {ku * kv} (row-major)")
        tab = tab.reshape(ku, kv)
        if (u, v) in merged:
            merged[(u, v)] = merged[(u, v)] + tab
        elif (v, u) in merged:
            merged[(v, u)] = merged[(v, u)] + tab.T
        else:
            merged[(u, v)] = tab
            order.append((u, v))
    if len(order) < len(enodes):
        logger.info("%s: merged %d parallel edges", source, len(enodes) - len(order))
    limit = p.get("usage_limit")
    if limit is not None:
        limit = f.number(limit, "problem.usage_limit", finite=True, minimum=0)
    return {"node_costs": costs, "edges": order, "edge_costs": [merged[e] for e in order],
            "memory": usages, "memory_limit": limit, "intervals": intervals,
            "node_names": [str(v) for v in range(n)]}



def iopddl_document(problem: "Problem", name: str) -> dict:
    """The IOPDDL document of ``problem`` (see :meth:`Problem.to_iopddl
    <milp_parallel.problem.Problem.to_iopddl>`).

    Raises
    ------
    InvalidProblemError
        Several devices, no intervals, or an ``inf`` cost (the format has no forbidden
        marker).
    """
    if problem.memory is None or problem.intervals is None or problem.n_devices != 1:
        raise InvalidProblemError(
            "the IOPDDL format needs one memory column and liveness intervals; save this "
            "problem with Problem.save instead")
    if any(np.isinf(t).any() for t in problem.node_costs + problem.edge_costs):
        raise InvalidProblemError("the IOPDDL format cannot express inf (forbidden) costs")
    doc = {"problem": {
        "name": name,
        "nodes": {
            "intervals": [[int(a), int(b)] for a, b in problem.intervals],
            "costs": [_num_list(c) for c in problem.node_costs],
            "usages": [_num_list(m[:, 0]) for m in problem.memory],
        },
        "edges": {
            "nodes": [[int(u), int(v)] for u, v in problem.edges],
            "costs": [_num_list(t.ravel()) for t in problem.edge_costs],
        },
    }}
    if problem.memory_limit is not None:
        doc["problem"]["usage_limit"] = _num(problem.memory_limit[0])
    return doc


def _iopddl_object(f: Fields, obj, keys: frozenset, where: str, required=None) -> Mapping:
    """An object of the IOPDDL format: only ``keys``, every ``required`` one (default all)."""
    f.mapping(obj, where)
    for key in sorted(keys) if required is None else required:
        if key not in obj:
            raise f.error(f"{where}.{key}", "is missing: not an IOPDDL problem (it has "
                                            "problem.nodes {costs, usages, intervals} and "
                                            "problem.edges {nodes, costs})")
    return f.keys(obj, keys, where)


def _iopddl_pairs(f: Fields, raw: list, where: str, what: str) -> np.ndarray:
    """An ``(m, 2)`` int64 array of integer pairs (a fast path for well-formed lists)."""
    if all(type(x) is list and len(x) == 2 for x in raw):
        flat = [y for x in raw for y in x]
        if set(map(type, flat)) <= {int}:
            try:
                return np.array(raw, dtype=np.int64).reshape(len(raw), 2)
            except OverflowError:
                pass
    out = np.empty((len(raw), 2), dtype=np.int64)
    for i, x in enumerate(raw):
        x = f.array(x, f"{where}[{i}] ({what} {i})", length=2)
        out[i] = (f.integer(x[0], f"{where}[{i}][0]"), f.integer(x[1], f"{where}[{i}][1]"))
    return out


def _num(x: float):
    x = float(x)
    return int(x) if x.is_integer() else x


def _num_list(a: np.ndarray) -> list:
    return [_num(x) for x in a]
