"""The solver-facing core: :class:`Problem`, :class:`Evaluation`, and their file formats.

A :class:`Problem` is a min-sum labelling problem over a graph: each node ``v`` picks one of
``K_v`` configurations, paying ``node_costs[v][c]``; each edge ``(u, v)`` pays
``edge_costs[e][c_u, c_v]``. Optionally each configuration uses memory (per device), and the
total memory must stay within a budget, either with every node live at once (the training-peak
model) or over half-open liveness intervals (the IOPDDL contest model).

It is numpy only and knows nothing of layers: ``node_names`` and ``config_labels`` are plain
strings that map an answer back to whatever built the problem.

``inf`` in a cost means *forbidden* (the configuration or the pair may not be chosen).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import FormatError, InvalidAssignmentError, InvalidProblemError

__all__ = ["Problem", "Evaluation", "PROBLEM_FORMAT", "PROBLEM_FORMAT_VERSION"]

logger = logging.getLogger(__name__)

PROBLEM_FORMAT = "milp_parallel.problem"
PROBLEM_FORMAT_VERSION = 1

#: Relative tolerance used when comparing memory against a budget.
MEMORY_RTOL = 1e-9


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class Evaluation:
    """The cost and memory of one assignment of a :class:`Problem`.

    Attributes
    ----------
    cost : float
        Total objective: ``node_cost + edge_cost`` (``inf`` if a forbidden choice is made).
    node_cost, edge_cost : float
        The two parts of the objective.
    peak_memory : numpy.ndarray or None
        Peak memory per device (shape ``(n_devices,)``), ``None`` without memory tables.
    peak_time : numpy.ndarray or None
        With intervals: the time point at which each device's peak occurs.
    feasible : bool
        ``True`` when the cost is finite and every device's peak is within the budget.
    """

    cost: float
    node_cost: float
    edge_cost: float
    peak_memory: np.ndarray | None
    peak_time: np.ndarray | None
    feasible: bool


class Problem:
    """A layer-wise parallelization problem as numpy tables.

    Parameters
    ----------
    node_costs : sequence of 1-D arrays
        One array per node, of length ``K_v`` (its number of configurations). ``inf`` forbids.
    edges : sequence of (u, v)
        Node index pairs. No self-loops, no two edges between the same pair of nodes
        (sum their cost tables into one edge instead).
    edge_costs : sequence of 2-D arrays
        One per edge, of shape ``(K_u, K_v)``. ``inf`` forbids a pair.
    memory : sequence of arrays, optional
        One per node, of shape ``(K_v,)`` (one shared resource) or ``(K_v, n_devices)``.
    memory_limit : float or sequence of float, optional
        The budget, one number for every device or one per device. Needs ``memory``.
    intervals : sequence of (start, end), optional
        Half-open liveness ``[start, end)`` per node; memory binds at every time point. An
        empty interval (``start == end``) means the node is never live. Without intervals every
        node is live at once (the training-peak model).
    node_names : sequence of str, optional
        Default ``"0", "1", ...``.
    config_labels : sequence of sequences of str, optional
        One label per configuration of each node. Default ``"0", "1", ...``.

    Raises
    ------
    InvalidProblemError
        When a table has the wrong shape, holds NaN or a negative number, an edge is out of
        range, a self-loop or a duplicate, an interval ends before it starts, or the problem is
        empty. The message names the node or edge.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> p.evaluate([0, 0]).cost
    4.0
    """

    def __init__(
        self,
        node_costs: Sequence[Sequence[float]],
        edges: Sequence[tuple[int, int]],
        edge_costs: Sequence[Sequence[Sequence[float]]],
        *,
        memory: Sequence[Sequence[float]] | None = None,
        memory_limit: float | Sequence[float] | None = None,
        intervals: Sequence[tuple[int, int]] | None = None,
        node_names: Sequence[str] | None = None,
        config_labels: Sequence[Sequence[str]] | None = None,
    ) -> None:
        n = len(node_costs)
        if n == 0:
            raise InvalidProblemError("the problem is empty: give at least one node")
        costs = []
        for v, c in enumerate(node_costs):
            a = _float_array(c, f"node {v} costs")
            if a.ndim != 1 or a.size == 0:
                raise InvalidProblemError(
                    f"node {v}: costs must be a non-empty 1-D array, got shape {a.shape}")
            _check_values(a, f"node {v} costs")
            costs.append(_readonly(a))
        self._node_costs = tuple(costs)
        k = np.array([a.size for a in costs], dtype=np.int64)
        self._n_configs = _readonly(k)

        if len(edges) != len(edge_costs):
            raise InvalidProblemError(
                f"got {len(edges)} edges but {len(edge_costs)} edge cost tables; give one "
                "table per edge")
        e_arr = np.zeros((len(edges), 2), dtype=np.int64)
        seen: dict[tuple[int, int], int] = {}
        etabs = []
        for i, (e, tab) in enumerate(zip(edges, edge_costs)):
            try:
                u, v = (int(x) for x in e)
            except (TypeError, ValueError):
                raise InvalidProblemError(f"edge {i}: expected a pair of node indices, got {e!r}")
            for x in (u, v):
                if not 0 <= x < n:
                    raise InvalidProblemError(
                        f"edge {i} ({u}, {v}): node {x} is out of range (the problem has {n} "
                        f"nodes, indices 0..{n - 1})")
            if u == v:
                raise InvalidProblemError(f"edge {i} ({u}, {v}) is a self-loop; fold its cost "
                                          "into the node's costs")
            key = (min(u, v), max(u, v))
            if key in seen:
                raise InvalidProblemError(
                    f"edge {i} ({u}, {v}) duplicates edge {seen[key]} between the same nodes; "
                    "sum their cost tables into one edge")
            seen[key] = i
            a = _float_array(tab, f"edge {i} ({u}, {v}) costs")
            if a.shape != (k[u], k[v]):
                raise InvalidProblemError(
                    f"edge {i} ({u}, {v}): cost table has shape {a.shape}, expected "
                    f"({k[u]}, {k[v]}) = (configs of node {u}, configs of node {v})")
            _check_values(a, f"edge {i} ({u}, {v}) costs")
            e_arr[i] = (u, v)
            etabs.append(_readonly(a))
        self._edges = _readonly(e_arr)
        self._edge_costs = tuple(etabs)

        if memory is None:
            if memory_limit is not None:
                raise InvalidProblemError("memory_limit was given without memory tables")
            self._memory = None
            self._memory_limit = None
        else:
            if len(memory) != n:
                raise InvalidProblemError(
                    f"got memory for {len(memory)} nodes, but the problem has {n} nodes")
            mems = []
            n_dev = None
            for v, m in enumerate(memory):
                a = _float_array(m, f"node {v} memory")
                if a.ndim == 1:
                    a = a[:, None]
                if a.ndim != 2 or a.shape[0] != k[v]:
                    raise InvalidProblemError(
                        f"node {v}: memory has shape {np.shape(m)}, expected ({k[v]},) or "
                        f"({k[v]}, n_devices)")
                if n_dev is None:
                    n_dev = a.shape[1]
                elif a.shape[1] != n_dev:
                    raise InvalidProblemError(
                        f"node {v}: memory has {a.shape[1]} device columns, node 0 has {n_dev}")
                if not np.all(np.isfinite(a)):
                    raise InvalidProblemError(f"node {v}: memory holds NaN or inf")
                if np.any(a < 0):
                    raise InvalidProblemError(f"node {v}: memory holds a negative number")
                mems.append(_readonly(a))
            self._memory = tuple(mems)
            if memory_limit is None:
                self._memory_limit = None
            else:
                lim = np.atleast_1d(_float_array(memory_limit, "memory_limit"))
                if lim.ndim != 1 or lim.size not in (1, n_dev):
                    raise InvalidProblemError(
                        f"memory_limit must be one number or one per device ({n_dev}), got "
                        f"shape {np.shape(memory_limit)}")
                if np.any(np.isnan(lim)) or np.any(lim < 0):
                    raise InvalidProblemError("memory_limit must be a non-negative number")
                self._memory_limit = _readonly(np.broadcast_to(lim, (n_dev,)).copy())

        if intervals is None:
            self._intervals = None
        else:
            iv = np.asarray(intervals)
            if iv.shape != (n, 2):
                raise InvalidProblemError(
                    f"intervals must be one (start, end) pair per node: expected shape ({n}, 2)"
                    f", got {iv.shape}")
            if not np.issubdtype(iv.dtype, np.integer):
                if not np.all(np.isfinite(iv.astype(float))) or np.any(iv != np.round(iv)):
                    raise InvalidProblemError("intervals must hold integer time points")
            iv = iv.astype(np.int64)
            bad = np.nonzero(iv[:, 1] < iv[:, 0])[0]
            if bad.size:
                v = int(bad[0])
                raise InvalidProblemError(
                    f"node {v}: interval [{iv[v, 0]}, {iv[v, 1]}) ends before it starts")
            if self._memory is None:
                raise InvalidProblemError("intervals were given without memory tables")
            self._intervals = _readonly(iv)

        if node_names is None:
            names = tuple(str(v) for v in range(n))
        else:
            names = tuple(str(s) for s in node_names)
            if len(names) != n:
                raise InvalidProblemError(f"got {len(names)} node names for {n} nodes")
        self._node_names = names
        if config_labels is None:
            labels = tuple(tuple(str(c) for c in range(kv)) for kv in k)
        else:
            if len(config_labels) != n:
                raise InvalidProblemError(f"got config labels for {len(config_labels)} nodes, "
                                          f"the problem has {n}")
            labels = tuple(tuple(str(s) for s in ls) for ls in config_labels)
            for v, ls in enumerate(labels):
                if len(ls) != k[v]:
                    raise InvalidProblemError(
                        f"node {v} ({names[v]}): {len(ls)} config labels for {k[v]} configs")
        self._config_labels = labels

    # ------------------------------------------------------------------ accessors
    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self._node_costs)

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return len(self._edge_costs)

    @property
    def n_configs(self) -> np.ndarray:
        """Number of configurations per node (read-only int array)."""
        return self._n_configs

    @property
    def node_costs(self) -> tuple[np.ndarray, ...]:
        """One read-only 1-D cost array per node."""
        return self._node_costs

    @property
    def edges(self) -> np.ndarray:
        """Edges as a read-only ``(n_edges, 2)`` int array."""
        return self._edges

    @property
    def edge_costs(self) -> tuple[np.ndarray, ...]:
        """One read-only ``(K_u, K_v)`` cost table per edge."""
        return self._edge_costs

    @property
    def memory(self) -> tuple[np.ndarray, ...] | None:
        """One read-only ``(K_v, n_devices)`` memory table per node, or ``None``."""
        return self._memory

    @property
    def memory_limit(self) -> np.ndarray | None:
        """The budget per device (read-only), or ``None`` for no budget."""
        return self._memory_limit

    @property
    def intervals(self) -> np.ndarray | None:
        """Half-open liveness intervals ``(n_nodes, 2)``, or ``None`` (all live at once)."""
        return self._intervals

    @property
    def n_devices(self) -> int:
        """Number of memory columns (devices), 0 without memory tables."""
        return 0 if self._memory is None else self._memory[0].shape[1]

    @property
    def has_budget(self) -> bool:
        """Whether a memory budget constrains the problem."""
        return self._memory_limit is not None

    @property
    def node_names(self) -> tuple[str, ...]:
        """One name per node."""
        return self._node_names

    @property
    def config_labels(self) -> tuple[tuple[str, ...], ...]:
        """One label per configuration of each node."""
        return self._config_labels

    def __repr__(self) -> str:
        mem = "none"
        if self._memory is not None:
            model = "intervals" if self._intervals is not None else "all-live"
            budget = "no budget" if self._memory_limit is None else "budget"
            mem = f"{self.n_devices} device(s), {model}, {budget}"
        return (f"Problem(n_nodes={self.n_nodes}, n_edges={self.n_edges}, "
                f"configs={int(self._n_configs.sum())} (max {int(self._n_configs.max())}), "
                f"memory={mem})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return (self.node_names == other.node_names
                and self.config_labels == other.config_labels
                and np.array_equal(self.edges, other.edges)
                and _tables_equal(self.node_costs, other.node_costs)
                and _tables_equal(self.edge_costs, other.edge_costs)
                and _opt_equal(self._memory, other._memory, _tables_equal)
                and _opt_equal(self._memory_limit, other._memory_limit, np.array_equal)
                and _opt_equal(self._intervals, other._intervals, np.array_equal))

    __hash__ = None  # mutable-looking container of arrays: not hashable

    # ------------------------------------------------------------------ evaluation
    def check_assignment(self, assignment: Sequence[int]) -> np.ndarray:
        """Validate an assignment and return it as an int array.

        Raises
        ------
        InvalidAssignmentError
            Wrong length, or a configuration index out of range (names the node).
        """
        a = np.asarray(assignment)
        if a.shape != (self.n_nodes,):
            raise InvalidAssignmentError(
                f"an assignment needs one configuration index per node ({self.n_nodes}), "
                f"got shape {a.shape}")
        if not np.issubdtype(a.dtype, np.integer):
            if not np.all(a == np.round(a)):
                raise InvalidAssignmentError("assignment entries must be integers")
        a = a.astype(np.int64)
        bad = np.nonzero((a < 0) | (a >= self._n_configs))[0]
        if bad.size:
            v = int(bad[0])
            raise InvalidAssignmentError(
                f"node {v} ({self._node_names[v]}): configuration {a[v]} is out of range "
                f"0..{self._n_configs[v] - 1}")
        return a

    def memory_profile(self, assignment: Sequence[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """Peak memory per device and, with intervals, the time of each peak."""
        a = self.check_assignment(assignment)
        if self._memory is None:
            raise InvalidProblemError("this problem has no memory tables")
        use = np.stack([self._memory[v][a[v]] for v in range(self.n_nodes)])  # (n, D)
        if self._intervals is None:
            return use.sum(axis=0), None
        iv = self._intervals
        live = iv[:, 1] > iv[:, 0]
        if not np.any(live):
            return np.zeros(self.n_devices), np.zeros(self.n_devices, dtype=np.int64)
        # Memory changes only at interval starts: sweep the start times.
        times = np.unique(iv[live, 0])
        starts = np.searchsorted(times, iv[live, 0], side="left")
        ends = np.searchsorted(times, iv[live, 1], side="left")
        delta = np.zeros((times.size + 1, self.n_devices))
        np.add.at(delta, starts, use[live])
        np.add.at(delta, ends, -use[live])
        level = np.cumsum(delta, axis=0)[:-1]
        peak_idx = level.argmax(axis=0)
        return level.max(axis=0), times[peak_idx]

    def evaluate(self, assignment: Sequence[int]) -> Evaluation:
        """Cost, memory and feasibility of one assignment.

        Parameters
        ----------
        assignment : sequence of int
            One configuration index per node.

        Returns
        -------
        Evaluation

        Raises
        ------
        InvalidAssignmentError
            If the assignment has the wrong length or an index out of range.
        """
        a = self.check_assignment(assignment)
        node = float(sum(self._node_costs[v][a[v]] for v in range(self.n_nodes)))
        edge = 0.0
        if self.n_edges:
            u, v = self._edges[:, 0], self._edges[:, 1]
            edge = float(sum(t[a[i], a[j]] for t, i, j in zip(self._edge_costs, u, v)))
        cost = node + edge
        peak = peak_t = None
        feasible = math.isfinite(cost)
        if self._memory is not None:
            peak, peak_t = self.memory_profile(a)
            if self._memory_limit is not None:
                feasible = feasible and bool(
                    np.all(peak <= self._memory_limit * (1 + MEMORY_RTOL)))
        return Evaluation(cost=cost, node_cost=node, edge_cost=edge, peak_memory=peak,
                          peak_time=peak_t, feasible=feasible)

    def with_memory_limit(self, memory_limit: float | Sequence[float] | None) -> "Problem":
        """A copy of this problem with another memory budget (``None`` removes it)."""
        return Problem(self._node_costs, self._edges, self._edge_costs, memory=self._memory,
                       memory_limit=memory_limit, intervals=self._intervals,
                       node_names=self._node_names, config_labels=self._config_labels)

    # ------------------------------------------------------------------ our JSON format
    def to_dict(self) -> dict:
        """The problem as plain JSON-ready data (format ``milp_parallel.problem`` v1).

        Layout::

            {"format": "milp_parallel.problem", "version": 1,
             "nodes": [{"name": str, "labels": [str], "costs": [float],
                        "memory": [[float] per config] (optional),
                        "interval": [start, end] (optional)}],
             "edges": [{"u": int, "v": int, "costs": [[float]]}],
             "memory_limit": [float per device] (optional)}

        ``inf`` is written as the string ``"inf"``; every other number is written exactly
        (Python's shortest round-trip repr), so loading gives back the identical problem.
        """
        nodes = []
        for v in range(self.n_nodes):
            d = {"name": self._node_names[v], "labels": list(self._config_labels[v]),
                 "costs": _encode(self._node_costs[v])}
            if self._memory is not None:
                d["memory"] = _encode(self._memory[v])
            if self._intervals is not None:
                d["interval"] = [int(x) for x in self._intervals[v]]
            nodes.append(d)
        edges = [{"u": int(u), "v": int(v), "costs": _encode(t)}
                 for (u, v), t in zip(self._edges, self._edge_costs)]
        out = {"format": PROBLEM_FORMAT, "version": PROBLEM_FORMAT_VERSION,
               "nodes": nodes, "edges": edges}
        if self._memory_limit is not None:
            out["memory_limit"] = _encode(self._memory_limit)
        return out

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "<dict>") -> "Problem":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        FormatError
            If the data is not a ``milp_parallel.problem`` document of a known version.
        """
        if not isinstance(data, dict) or data.get("format") != PROBLEM_FORMAT:
            raise FormatError(f"{source}: not a {PROBLEM_FORMAT} document (missing or wrong "
                              "'format' key); IOPDDL files load with Problem.from_iopddl")
        if data.get("version") != PROBLEM_FORMAT_VERSION:
            raise FormatError(f"{source}: unsupported version {data.get('version')!r}; this "
                              f"library reads version {PROBLEM_FORMAT_VERSION}")
        try:
            nodes = data["nodes"]
            has_mem = bool(nodes) and "memory" in nodes[0]
            has_iv = bool(nodes) and "interval" in nodes[0]
            return cls(
                [_decode(d["costs"]) for d in nodes],
                [(d["u"], d["v"]) for d in data["edges"]],
                [_decode(d["costs"]) for d in data["edges"]],
                memory=[_decode(d["memory"]) for d in nodes] if has_mem else None,
                memory_limit=(_decode(data["memory_limit"]) if "memory_limit" in data
                              else None),
                intervals=[d["interval"] for d in nodes] if has_iv else None,
                node_names=[d["name"] for d in nodes],
                config_labels=[d["labels"] for d in nodes],
            )
        except (KeyError, TypeError) as exc:
            raise FormatError(f"{source}: malformed problem document ({exc!r} missing or of "
                              "the wrong type)") from None

    def save(self, path: str | Path) -> None:
        """Write the problem as JSON (gzip-compressed when the name ends in ``.gz``)."""
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "Problem":
        """Read a problem written by :meth:`save`.

        Raises
        ------
        FormatError
            If the file is not valid JSON or not a problem document.
        """
        return cls.from_dict(_read_json(path), source=str(path))

    # ------------------------------------------------------------------ IOPDDL format
    @classmethod
    def from_iopddl(cls, path: str | Path) -> "Problem":
        """Read an IOPDDL contest instance (``.json`` or ``.json.gz``).

        The contest format (google/iopddl, ASPLOS/EuroSys 2025) lists per node its liveness
        interval ``[a, b)``, a cost and a memory usage per strategy; per edge a row-major
        ``len(u) x len(v)`` cost list; and one ``usage_limit`` that the usages of the nodes
        live at any time must respect. Integer costs stay exact (float64 holds every integer
        below 2**53 and the contest's 10**18 sentinel exactly).

        Edges listed more than once between the same two nodes (instance G has two such
        pairs) are merged into one edge by summing their tables, which leaves the cost of every
        assignment unchanged; an empty interval (``a == b``) is a node that is never live.

        Raises
        ------
        FormatError
            If a key is missing or a list has the wrong length (names the node or edge).
        """
        data = _read_json(path)
        src = str(path)
        try:
            p = data["problem"]
            nodes, edges = p["nodes"], p["edges"]
            costs = nodes["costs"]
            usages = nodes["usages"]
            intervals = nodes["intervals"]
            enodes, ecosts = edges["nodes"], edges["costs"]
            limit = p.get("usage_limit")
        except (KeyError, TypeError) as exc:
            raise FormatError(f"{src}: not an IOPDDL problem (missing {exc})") from None
        n = len(costs)
        if len(usages) != n or len(intervals) != n:
            raise FormatError(f"{src}: {n} cost lists but {len(usages)} usage lists and "
                              f"{len(intervals)} intervals; give one of each per node")
        for v in range(n):
            if len(usages[v]) != len(costs[v]):
                raise FormatError(f"{src}: node {v} has {len(costs[v])} costs but "
                                  f"{len(usages[v])} usages")
        if len(enodes) != len(ecosts):
            raise FormatError(f"{src}: {len(enodes)} edges but {len(ecosts)} edge cost lists")
        merged: dict[tuple[int, int], np.ndarray] = {}
        order: list[tuple[int, int]] = []
        for i, ((u, v), c) in enumerate(zip(enodes, ecosts)):
            if not (0 <= u < n and 0 <= v < n):
                raise FormatError(f"{src}: edge {i} ({u}, {v}) names a node out of range")
            ku, kv = len(costs[u]), len(costs[v])
            if len(c) != ku * kv:
                raise FormatError(f"{src}: edge {i} ({u}, {v}) has {len(c)} costs, expected "
                                  f"{ku} x {kv} = {ku * kv} (row-major)")
            tab = np.asarray(c, dtype=np.float64).reshape(ku, kv)
            if (u, v) in merged:
                merged[(u, v)] = merged[(u, v)] + tab
            elif (v, u) in merged:
                merged[(v, u)] = merged[(v, u)] + tab.T
            else:
                merged[(u, v)] = tab
                order.append((u, v))
        if len(order) < len(enodes):
            logger.info("%s: merged %d parallel edges", src, len(enodes) - len(order))
        return cls(
            [np.asarray(c, dtype=np.float64) for c in costs],
            order, [merged[e] for e in order],
            memory=[np.asarray(u, dtype=np.float64) for u in usages],
            memory_limit=limit,
            intervals=intervals,
            node_names=[str(v) for v in range(n)],
        )

    def to_iopddl(self, path: str | Path, *, name: str | None = None) -> None:
        """Write the problem in the IOPDDL contest format.

        Needs one memory column and intervals (the contest's model); numbers that are whole
        are written as integers, so an instance read with :meth:`from_iopddl` is written back
        exactly.

        Raises
        ------
        InvalidProblemError
            If the problem has several devices, no intervals, or an ``inf`` cost (the format
            has no forbidden marker).
        """
        if self._memory is None or self._intervals is None or self.n_devices != 1:
            raise InvalidProblemError(
                "the IOPDDL format needs one memory column and liveness intervals; save this "
                "problem with Problem.save instead")
        if any(np.isinf(t).any() for t in self._node_costs + self._edge_costs):
            raise InvalidProblemError("the IOPDDL format cannot express inf (forbidden) costs")
        doc = {"problem": {
            "name": name or Path(str(path)).name.split(".")[0],
            "nodes": {
                "intervals": [[int(a), int(b)] for a, b in self._intervals],
                "costs": [_num_list(c) for c in self._node_costs],
                "usages": [_num_list(m[:, 0]) for m in self._memory],
            },
            "edges": {
                "nodes": [[int(u), int(v)] for u, v in self._edges],
                "costs": [_num_list(t.ravel()) for t in self._edge_costs],
            },
        }}
        if self._memory_limit is not None:
            doc["problem"]["usage_limit"] = _num(self._memory_limit[0])
        _write_json(path, doc)


# ---------------------------------------------------------------------- helpers
def _float_array(x, what: str) -> np.ndarray:
    try:
        return np.array(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidProblemError(f"{what}: expected numbers, got {type(x).__name__}") from None


def _check_values(a: np.ndarray, what: str) -> None:
    if np.any(np.isnan(a)):
        raise InvalidProblemError(f"{what}: holds NaN at index "
                                  f"{tuple(int(i) for i in np.argwhere(np.isnan(a))[0])}")
    if np.any(a < 0):
        idx = tuple(int(i) for i in np.argwhere(a < 0)[0])
        raise InvalidProblemError(f"{what}: negative value {a[idx]} at index {idx}; costs must "
                                  "be >= 0 (use inf to forbid a choice)")


def _tables_equal(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def _opt_equal(a, b, eq) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return eq(a, b)


def _encode(a: np.ndarray):
    if a.ndim == 0:
        x = float(a)
        return "inf" if math.isinf(x) else x
    return [_encode(x) for x in a]


def _decode(x):
    if isinstance(x, list):
        return [_decode(y) for y in x]
    if x == "inf":
        return math.inf
    return x


def _num(x: float):
    x = float(x)
    return int(x) if x.is_integer() else x


def _num_list(a: np.ndarray) -> list:
    return [_num(x) for x in a]


def _read_json(path: str | Path):
    path = Path(path)
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise FormatError(f"{path}: not valid JSON ({exc})") from None


def _write_json(path: str | Path, doc) -> None:
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f, allow_nan=False)
