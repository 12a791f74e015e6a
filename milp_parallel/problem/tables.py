"""The solver-facing core: :class:`Problem`, :class:`Evaluation`, and our JSON format.

A :class:`Problem` is a min-sum labelling problem over a graph: each node ``v`` picks one of
``K_v`` configurations, paying ``node_costs[v][c]``; each edge ``(u, v)`` pays
``edge_costs[e][c_u, c_v]``. Optionally each configuration uses memory (per device), and the
total memory must stay within a budget, either with every node live at once (the training-peak
model) or over half-open liveness intervals (the IOPDDL contest model).

It is numpy only and knows nothing of layers: ``node_names`` and ``config_labels`` are plain
strings that map an answer back to whatever built the problem.

``inf`` in a cost means *impossible*: the configuration or the pair may not be chosen.

An entry at or above :attr:`Problem.forbidden_cost` (:data:`FORBIDDEN_COST`, ``1e18``, the
IOPDDL contest's "effectively forbidden" marker) but below ``inf`` is a *forbidden entry*: it
may be chosen, but it is counted, not added. Assignments compare lexicographically: fewest
forbidden entries first, then the exact sum of the other entries (the *allowed cost*).
Float64 cannot add ``1e18 + 6`` and ``1e18 + 58`` apart, so no solver adds a forbidden entry
to anything: each works on :func:`~milp_parallel.solvers.forbidden.lexicographic`'s copy,
where a forbidden entry costs a marker just above every difference of allowed costs.

The IOPDDL format lives in :mod:`.iopddl` (``Problem.from_iopddl`` / ``to_iopddl`` call it).
May import: ``io``, ``units``, ``errors``, numpy.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import FormatError, InvalidAssignmentError, InvalidProblemError
from ..io import Fields, encode, read_document, read_json, write_json

__all__ = ["Problem", "Evaluation", "load_problem", "PROBLEM_FORMAT", "PROBLEM_FORMAT_VERSION",
           "FORBIDDEN_COST"]

logger = logging.getLogger(__name__)

PROBLEM_FORMAT = "milp_parallel.problem"
PROBLEM_FORMAT_VERSION = 1

#: Relative tolerance used when comparing memory against a budget.
MEMORY_RTOL = 1e-9

#: Costs at or above this (and below ``inf``) are forbidden entries: counted, not added (the
#: IOPDDL contest's "effectively forbidden" ``1e18``).
FORBIDDEN_COST = 1e18


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class Evaluation:
    """The cost and memory of one assignment of a :class:`Problem`.

    Attributes
    ----------
    cost : float
        Total objective: ``node_cost + edge_cost`` (``inf`` if an impossible choice is made).
        With forbidden entries it is only approximate (float64 cannot add ``1e18 + 6``):
        compare assignments by :attr:`key`.
    node_cost, edge_cost : float
        The two parts of the objective.
    peak_memory : numpy.ndarray or None
        Peak memory per device (shape ``(n_devices,)``), ``None`` without memory tables.
    peak_time : numpy.ndarray or None
        With intervals: the time point at which each device's peak occurs.
    feasible : bool
        ``True`` when the cost is finite and every device's peak is within the budget.
    forbidden_entries : int
        How many chosen entries are forbidden (at or above the problem's
        :attr:`~Problem.forbidden_cost`).
    allowed_cost : float
        The exact sum (``math.fsum``) of the other chosen entries (``inf`` if one is ``inf``).
    """

    cost: float
    node_cost: float
    edge_cost: float
    peak_memory: np.ndarray | None
    peak_time: np.ndarray | None
    feasible: bool
    forbidden_entries: int = 0
    allowed_cost: float = math.nan

    @property
    def key(self) -> tuple[int, float]:
        """``(forbidden_entries, allowed_cost)``: the order in which assignments compare."""
        return (self.forbidden_entries, self.allowed_cost)


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
        forbidden_cost: float = FORBIDDEN_COST,
    ) -> None:
        node_costs = _sequence(node_costs, "node_costs", "one cost array per node")
        edges = _sequence(edges, "edges", "(u, v) pairs of node indices")
        edge_costs = _sequence(edge_costs, "edge_costs", "one cost table per edge")
        n = len(node_costs)
        if n == 0:
            raise InvalidProblemError("the problem is empty: give at least one node")
        # vectorized checks (_flat_tables); if one fails, the loop names the first bad table
        fast = _flat_tables(node_costs, 1)
        if fast is not None and (fast[1] > 0).all():
            costs = fast[0]
        else:
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
        e_arr = _fast_edges(edges, edge_costs, k)
        fast = None if e_arr is None else _flat_tables(edge_costs, 2)
        if fast is not None and np.array_equal(fast[1], k[e_arr]):
            etabs, slow = fast[0], ()
        else:
            e_arr, etabs, slow = np.zeros((len(edges), 2), dtype=np.int64), [], edges
        seen: dict[tuple[int, int], int] = {}
        for i, (e, tab) in enumerate(zip(slow, edge_costs)):
            u, v = _index_pair(e, f"edge {i}")
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

        if memory is not None:
            memory = _sequence(memory, "memory", "one memory table per node")
        if memory is None:
            if memory_limit is not None:
                raise InvalidProblemError("memory_limit was given without memory tables")
            self._memory = None
            self._memory_limit = None
        else:
            if len(memory) != n:
                raise InvalidProblemError(
                    f"got memory for {len(memory)} nodes, but the problem has {n} nodes")
            fast = _flat_tables(memory, 1, finite=True) or _flat_tables(memory, 2, finite=True)
            mems, n_dev, slow = [], None, memory
            if fast and np.array_equal(fast[1][:, 0], k) and np.ptp(fast[1][:, 1:], 0).sum() == 0:
                n_dev, slow = int(fast[1][0, 1]) if fast[1].shape[1] == 2 else 1, ()
                mems = [m if m.ndim == 2 else m[:, None] for m in fast[0]]
            for v, m in enumerate(slow):
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
            iv = _interval_array(intervals, n)
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
            names = tuple(str(s) for s in _sequence(node_names, "node_names", "one name per "
                                                                              "node"))
            if len(names) != n:
                raise InvalidProblemError(f"got {len(names)} node names for {n} nodes")
        self._node_names = names
        if config_labels is None:
            default = {kv: tuple(str(c) for c in range(kv)) for kv in set(k.tolist())}
            labels = tuple(default[kv] for kv in k.tolist())
        else:
            config_labels = _sequence(config_labels, "config_labels",
                                      "one list of labels per node")
            if len(config_labels) != n:
                raise InvalidProblemError(f"got config labels for {len(config_labels)} nodes, "
                                          f"the problem has {n}")
            labels = tuple(tuple(str(s) for s in _sequence(ls, f"config_labels[{v}]",
                                                           "one label per configuration"))
                           for v, ls in enumerate(config_labels))
            for v, ls in enumerate(labels):
                if len(ls) != k[v]:
                    raise InvalidProblemError(
                        f"node {v} ({names[v]}): {len(ls)} config labels for {k[v]} configs")
        self._config_labels = labels
        if (isinstance(forbidden_cost, bool) or not isinstance(forbidden_cost, (int, float))
                or not math.isfinite(forbidden_cost) or forbidden_cost <= 0):
            raise InvalidProblemError(f"forbidden_cost must be a positive finite number, got "
                                      f"{forbidden_cost!r}")
        self._forbidden_cost = float(forbidden_cost)
        self._has_forbidden: bool | None = None
        #: values derived from the (immutable) tables, computed once by the modules that
        #: need them (solvers.forbidden keeps its lexicographic copy here)
        self._cache: dict = {}

    # ------------------------------------------------------------------ accessors
    @property
    def forbidden_cost(self) -> float:
        """Entries at or above this (and below ``inf``) are forbidden: counted, not added."""
        return self._forbidden_cost

    @property
    def has_forbidden_entries(self) -> bool:
        """Whether any node or edge table holds a forbidden entry (computed once)."""
        if self._has_forbidden is None:
            flat = np.concatenate([t.ravel() for t in self._node_costs + self._edge_costs])
            self._has_forbidden = bool(np.any((flat >= self._forbidden_cost)
                                              & (flat < math.inf)))
        return self._has_forbidden

    def with_costs(self, node_costs: Sequence[np.ndarray], edge_costs: Sequence[np.ndarray],
                   *, forbidden_cost: float | None = None) -> "Problem":
        """A copy with other cost tables of the same shapes (and, optionally, another
        :attr:`forbidden_cost`); everything else is shared. Cheap on large problems: only the
        shapes are checked, so give tables derived from this problem's own (the values are not
        validated again).

        Raises
        ------
        InvalidProblemError
            A table of another shape.
        """
        import copy
        if len(node_costs) != self.n_nodes or len(edge_costs) != self.n_edges:
            raise InvalidProblemError("with_costs needs one table per node and per edge")
        for new, old in zip(list(node_costs) + list(edge_costs),
                            self._node_costs + self._edge_costs):
            if np.shape(new) != old.shape:
                raise InvalidProblemError(f"with_costs: a table of shape {np.shape(new)} "
                                          f"replaces one of shape {old.shape}")
        out = copy.copy(self)
        out._node_costs = tuple(_readonly(np.asarray(c, dtype=np.float64)) for c in node_costs)
        out._edge_costs = tuple(_readonly(np.asarray(t, dtype=np.float64)) for t in edge_costs)
        if forbidden_cost is not None:
            out._forbidden_cost = float(forbidden_cost)
        out._has_forbidden = None
        out._cache = {}
        return out

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
                and _opt_equal(self._intervals, other._intervals, np.array_equal)
                and self._forbidden_cost == other._forbidden_cost)

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
        nodes = np.array([c[a[v]] for v, c in enumerate(self._node_costs)])
        edges = np.array([t[a[i], a[j]] for t, (i, j) in zip(self._edge_costs, self._edges)])
        node, edge = float(nodes.sum()), float(edges.sum())
        cost = node + edge
        chosen = np.concatenate([nodes, edges])
        bad = (chosen >= self._forbidden_cost) & (chosen < math.inf)
        n_bad = int(bad.sum())
        allowed = math.fsum(chosen[~bad].tolist())
        peak = peak_t = None
        feasible = math.isfinite(cost)
        if self._memory is not None:
            peak, peak_t = self.memory_profile(a)
            if self._memory_limit is not None:
                feasible = feasible and bool(
                    np.all(peak <= self._memory_limit * (1 + MEMORY_RTOL)))
        return Evaluation(cost=cost, node_cost=node, edge_cost=edge, peak_memory=peak,
                          peak_time=peak_t, feasible=feasible, forbidden_entries=n_bad,
                          allowed_cost=allowed)

    def with_memory_limit(self, memory_limit: float | str | Sequence[float] | None
                          ) -> "Problem":
        """A copy of this problem with another memory budget.

        ``None`` or ``"none"`` removes it; a number, a size such as ``"16GiB"`` (read by
        :func:`~milp_parallel.units.parse_memory_limit`) or one number per device sets it.

        Raises
        ------
        InvalidOptionError
            For a size that does not parse, or ``"device"`` (a Problem has no device).
        InvalidProblemError
            For a negative budget or one of the wrong length.
        """
        if isinstance(memory_limit, str):
            from ..units import parse_memory_limit
            memory_limit = parse_memory_limit(memory_limit)
        return Problem(self._node_costs, self._edges, self._edge_costs, memory=self._memory,
                       memory_limit=memory_limit, intervals=self._intervals,
                       node_names=self._node_names, config_labels=self._config_labels,
                       forbidden_cost=self._forbidden_cost)

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

        Every node must have the same optional fields: a document where some nodes have
        ``"memory"`` (or ``"interval"``) and others do not is refused, naming the first node
        that differs (never read as a different memory model). ``name`` and ``labels`` may be
        left out (defaults ``"0", "1", ...``).

        Raises
        ------
        FormatError
            If the data is not a ``milp_parallel.problem`` document of a known version, a key
            is unknown (names it and the nearest known key, e.g. ``nodes[3].cost``: did you
            mean 'costs'?), or a field is missing or of the wrong type (names the source and
            the field, e.g. ``nodes[3].costs[1]``).
        InvalidProblemError
            If the tables are inconsistent (prefixed with the source).
        """
        doc = read_document(source, PROBLEM_FORMAT, PROBLEM_FORMAT_VERSION, data=data,
                            what="problem",
                            hint="IOPDDL contest files load with Problem.from_iopddl")
        f = Fields(source)
        f.keys(doc, _PROBLEM_KEYS, "", required=("nodes", "edges"))
        nodes = f.records(doc["nodes"], _NODE_KEYS, "nodes", required=("costs",))
        edges = f.records(doc["edges"], _EDGE_KEYS, "edges", required=_EDGE_KEYS)
        present = {}
        for key in ("memory", "interval"):
            has = [key in d for d in nodes]
            if any(has) and not all(has):
                v = has.index(not has[0])
                raise FormatError(
                    f"{source}: nodes[{v}] {'has' if has[v] else 'has no'} {key!r} but "
                    f"nodes[0] {'has' if has[0] else 'has none'}; give every node a {key!r} "
                    "or none")
            present[key] = bool(nodes) and has[0]
        costs = [f.numbers(d["costs"], f"nodes[{j}].costs") for j, d in enumerate(nodes)]
        names = [f.string(d.get("name", str(j)), f"nodes[{j}].name")
                 for j, d in enumerate(nodes)]
        labels = None
        if any("labels" in d for d in nodes):
            labels = []
            for j, d in enumerate(nodes):
                ls = f.array(f.get(d, "labels", f"nodes[{j}]"), f"nodes[{j}].labels",
                             length=len(costs[j]))
                labels.append([f.string(x, f"nodes[{j}].labels[{i}]")
                               for i, x in enumerate(ls)])
        memory = None
        if present["memory"]:
            memory = []
            for j, d in enumerate(nodes):
                m = d["memory"]
                nested = isinstance(m, list) and bool(m) and isinstance(m[0], list)
                memory.append(f.numbers(m, f"nodes[{j}].memory", ndim=2 if nested else 1,
                                        allow_inf=False))
        intervals = None
        if present["interval"]:
            intervals = []
            for j, d in enumerate(nodes):
                iv = f.array(d["interval"], f"nodes[{j}].interval", length=2)
                intervals.append((f.integer(iv[0], f"nodes[{j}].interval[0]"),
                                  f.integer(iv[1], f"nodes[{j}].interval[1]")))
        pairs, tables = [], []
        for i, d in enumerate(edges):
            pairs.append((f.integer(d["u"], f"edges[{i}].u"),
                          f.integer(d["v"], f"edges[{i}].v")))
            tables.append(f.numbers(d["costs"], f"edges[{i}].costs", ndim=2))
        limit = doc.get("memory_limit")
        if limit is not None:
            limit = (f.numbers(limit, "memory_limit") if isinstance(limit, list)
                     else f.number(limit, "memory_limit"))
        return _with_source(source, lambda: cls(
            costs, pairs, tables, memory=memory, memory_limit=limit, intervals=intervals,
            node_names=names, config_labels=labels))

    def save(self, path: str | Path) -> None:
        """Write the problem as JSON (gzip-compressed when the name ends in ``.gz``)."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "Problem":
        """Read a problem written by :meth:`save` (gzip-compressed or not).

        Raises
        ------
        FormatError
            If the file is missing, unreadable, not JSON or not a problem document (names
            the file and the field).
        InvalidProblemError
            If its tables are inconsistent (names the file).
        """
        return cls.from_dict(read_json(path, what="problem file"), source=str(path))

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
            If the file cannot be read, a key is missing or unknown (names the nearest known
            one), a value has the wrong type (a float node index, a number where a list
            belongs, an interval of one number), or a list has the wrong length; names the
            file and the node or edge.
        InvalidProblemError
            If the tables are inconsistent (a self-loop, a negative cost; names the file).
        """
        from .iopddl import read_iopddl
        args = read_iopddl(path)
        return _with_source(str(path), lambda: cls(**args))

    @classmethod
    def from_iopddl_dict(cls, data, *, source: str = "<dict>") -> "Problem":
        """:meth:`from_iopddl` of already-parsed JSON data."""
        from .iopddl import iopddl_arguments
        args = iopddl_arguments(data, source=source)
        return _with_source(source, lambda: cls(**args))

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
        from .iopddl import iopddl_document
        doc = iopddl_document(self, name or Path(str(path)).name.split(".")[0])
        write_json(path, doc)


def load_problem(path: str | Path) -> Problem:
    """Read a Problem file in our JSON format or the IOPDDL format, detected by content.

    Either may be gzip-compressed.

    Raises
    ------
    FormatError
        If the file is missing, unreadable, not JSON, neither format, or malformed (names
        the file and the field).
    InvalidProblemError
        If its tables are inconsistent (names the file).

    Examples
    --------
    >>> load_problem("data/iopddl_example.json").n_nodes
    5
    """
    doc = read_json(path, what="problem file")
    if isinstance(doc, dict) and "format" in doc:
        return Problem.from_dict(doc, source=str(path))
    if isinstance(doc, dict) and isinstance(doc.get("problem"), dict):
        return Problem.from_iopddl_dict(doc, source=str(path))
    raise FormatError(f"{path}: neither a milp_parallel problem (a 'format' key) nor an IOPDDL "
                      "problem (a 'problem' object)")


# ---------------------------------------------------------------------- helpers
#: The keys each object of the two formats may have (:meth:`Fields.keys` refuses others).
_PROBLEM_KEYS = frozenset({"format", "version", "nodes", "edges", "memory_limit"})
_NODE_KEYS = frozenset({"name", "labels", "costs", "memory", "interval"})
_EDGE_KEYS = frozenset({"u", "v", "costs"})


def _float_array(x, what: str) -> np.ndarray:
    if isinstance(x, (str, bytes, Mapping)):
        raise InvalidProblemError(f"{what}: expected numbers, got {type(x).__name__} {x!r:.40}")
    try:
        return np.array(x, dtype=np.float64)
    except OverflowError:
        raise InvalidProblemError(f"{what}: a number is beyond the float range (about "
                                  "1.8e308)") from None
    except (TypeError, ValueError):
        raise InvalidProblemError(f"{what}: expected numbers (a regular array), got "
                                  f"{type(x).__name__}") from None


def _sequence(x, what: str, expected: str):
    """``x`` as an indexable sequence (list, tuple, array), or InvalidProblemError."""
    if isinstance(x, (str, bytes, Mapping)) or not hasattr(x, "__len__") \
            or not hasattr(x, "__getitem__"):
        raise InvalidProblemError(f"{what}: expected a sequence ({expected}), got "
                                  f"{type(x).__name__}")
    return x


def _as_index(x, what: str, kind: str = "an integer") -> int:
    """An integer node index or time point (integral floats accepted, bools not)."""
    if isinstance(x, (bool, np.bool_)):
        raise InvalidProblemError(f"{what}: expected {kind}, got {x!r}")
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and math.isfinite(x) and float(x).is_integer():
        return int(x)
    raise InvalidProblemError(f"{what}: expected {kind}, got {x!r:.40}")


def _index_pair(e, what: str) -> tuple[int, int]:
    if isinstance(e, (str, bytes, Mapping)) or not hasattr(e, "__len__") or len(e) != 2:
        raise InvalidProblemError(f"{what}: expected a pair (u, v) of node indices, got "
                                  f"{e!r:.40}")
    return _as_index(e[0], f"{what}: u"), _as_index(e[1], f"{what}: v")


def _interval_array(intervals, n: int) -> np.ndarray:
    """Intervals as an ``(n, 2)`` int64 array of integer time points."""
    intervals = _sequence(intervals, "intervals", "one (start, end) pair per node")
    if len(intervals) != n:
        raise InvalidProblemError(f"intervals must be one (start, end) pair per node: "
                                  f"expected shape ({n}, 2), got {len(intervals)} pairs")
    arr = np.asarray(intervals) if isinstance(intervals, np.ndarray) else None
    if arr is not None and arr.shape == (n, 2) and np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    out = np.empty((n, 2), dtype=np.int64)
    for v, pair in enumerate(intervals):
        if isinstance(pair, (str, bytes, Mapping)) or not hasattr(pair, "__len__") \
                or len(pair) != 2:
            raise InvalidProblemError(f"node {v}: interval must be a pair (start, end) of "
                                      f"integer time points, got {pair!r:.40}")
        for j in (0, 1):
            t = _as_index(pair[j], f"node {v}: interval {'start' if j == 0 else 'end'}",
                          "integer time points")
            if abs(t) >= 2**62:
                raise InvalidProblemError(f"node {v}: interval time point {t} is out of range "
                                          "(|t| < 2**62)")
            out[v, j] = t
    return out


def _flat_tables(items, ndim: int, *, finite: bool = False):
    """``(tables, (n, ndim) shapes)``: ``items`` as read-only float64 views of one buffer (taken
    as they are if they already are, else copied) when all are ``ndim``-D without NaN, negative
    (or, if ``finite``, infinite) values; else ``None`` (per-table checks name the bad one)."""
    try:
        arrs = [x if type(x) is np.ndarray and x.dtype == np.float64
                else np.asarray(x, dtype=np.float64) for x in items]
    except (TypeError, ValueError, OverflowError):
        return None
    if any(a.ndim != ndim for a in arrs):
        return None
    shapes = np.array([a.shape for a in arrs], dtype=np.int64).reshape(len(arrs), ndim)
    base = arrs[0].base if arrs else None       # the one buffer all views read (checked whole)
    shared = (type(base) is np.ndarray and base.dtype == np.float64 and not base.flags.writeable
              and all(a.base is base and not a.flags.writeable for a in arrs))
    flat = base if shared else np.concatenate([a.ravel() for a in arrs] + [np.zeros(0)])
    if (not np.isfinite(flat).all() if finite else np.isnan(flat).any()) or (flat < 0).any():
        return None
    if shared:
        return arrs, shapes
    flat.setflags(write=False)
    ends = np.cumsum(shapes.prod(axis=1)).tolist()
    cuts = zip([0] + ends[:-1], ends, map(tuple, shapes.tolist()))
    return [flat[b:e].reshape(s) for b, e, s in cuts], shapes


def _fast_edges(edges, edge_costs, k: np.ndarray) -> np.ndarray | None:
    """``edges`` as ``(m, 2)`` int64 when an integer array of distinct valid pairs with one
    table each; else ``None`` (the per-edge checks then name the first problem)."""
    if (type(edges) is not np.ndarray or edges.dtype.kind not in "iu"
            or edges.shape != (len(edges), 2) or len(edges) != len(edge_costs)):
        return None
    e = edges.astype(np.int64)
    lo, hi = e.min(axis=1), e.max(axis=1)
    if e.size and (lo.min() < 0 or hi.max() >= k.size or (lo == hi).any()
                   or np.unique(lo * k.size + hi).size < len(e)):
        return None
    return e


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
    return encode(a)


def _with_source(source: str, make):
    """``make()``, with the source prefixed to an InvalidProblemError's message."""
    try:
        return make()
    except InvalidProblemError as exc:
        raise InvalidProblemError(f"{source}: {exc}") from None
