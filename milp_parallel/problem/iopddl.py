"""The IOPDDL contest's problem format (google/iopddl, ASPLOS/EuroSys 2025), read into the
arrays a :class:`~milp_parallel.problem.Problem` is made of and written from them.

May import: ``io``, ``errors``, numpy (the Problem class calls in; this module never imports
it).
"""

from __future__ import annotations

import gc
import logging
import os
from array import array
from itertools import chain
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import FormatError, InvalidProblemError
from ..io import Fields, loads, read_text

if TYPE_CHECKING:
    from .tables import Problem

__all__ = ["iopddl_arguments", "iopddl_document", "read_iopddl"]

logger = logging.getLogger(__name__)

#: The keys each object of the format may have (:meth:`Fields.keys` refuses others).
_IOPDDL_KEYS = frozenset({"name", "nodes", "edges", "usage_limit"})
_IOPDDL_NODE_KEYS = frozenset({"costs", "usages", "intervals"})
_IOPDDL_EDGE_KEYS = frozenset({"nodes", "costs"})


def read_iopddl(path: str | os.PathLike) -> dict[str, Any]:
    """:func:`iopddl_arguments` of the IOPDDL file ``path`` (``.json`` or ``.json.gz``).

    The cyclic garbage collector is paused while the document is parsed and read (the
    parse makes ~10**5 lists and no cycle; pausing saves a third of ``json.loads`` on D).

    Raises
    ------
    FormatError
        As :func:`~milp_parallel.io.read_json` and :func:`iopddl_arguments`.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        text = read_text(path, what="IOPDDL problem file")
        data = loads(text, source=str(path), what="IOPDDL problem file")
        return iopddl_arguments(data, source=str(path), text=text)
    finally:
        if was_enabled:
            gc.enable()


def iopddl_arguments(data: Any, *, source: str = "<dict>", text: str | None = None
                     ) -> dict[str, Any]:
    """The keyword arguments of ``Problem(...)`` for an IOPDDL document (see
    :meth:`Problem.from_iopddl <milp_parallel.problem.Problem.from_iopddl>`).

    A well-formed document takes one vectorized pass over flat lists (:func:`_fast_arguments`);
    anything it does not accept is read entry by entry, which names the first bad entry.

    Parameters
    ----------
    data : object
        The parsed JSON document.
    source : str
        The file, for messages.
    text : str, optional
        The JSON text ``data`` was parsed from. When it holds neither ``true`` nor ``false``
        the document has no boolean, and the number lists skip their per-entry type test.

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
    strings = [*data, *p, *nodes, *edges] + ([p["name"]] if isinstance(p.get("name"), str)
                                             else [])
    fast = _fast_arguments(source, raw_costs, raw_usages, raw_iv, enodes, ecosts,
                           check_types=text is None or not _no_booleans(text, strings))
    if fast is not None:
        limit = p.get("usage_limit")
        if limit is not None:
            limit = f.number(limit, "problem.usage_limit", finite=True, minimum=0)
        return {**fast, "memory_limit": limit}
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


def _fast_arguments(source: str, raw_costs, raw_usages, raw_iv, enodes, ecosts, *,
                    check_types: bool) -> dict[str, Any] | None:
    """The arguments of a well-formed document in one pass over flat lists, or ``None`` when
    anything is off (then the entry-by-entry reader names it). Accepts exactly what that
    reader accepts and gives the same tables: each node's and edge's table is a view of one
    float64 buffer, parallel edges are merged the same way, edges an ``(m, 2)`` array."""
    lists = (raw_costs, raw_usages, raw_iv, enodes, ecosts)
    if not all(type(x) is list for x in lists) or not (
            all(type(c) is list for c in raw_costs) and all(type(u) is list for u in raw_usages)
            and all(type(c) is list for c in ecosts)):
        return None
    n, m = len(raw_costs), len(enodes)
    k = np.fromiter(map(len, raw_costs), dtype=np.int64, count=n)
    if (len(raw_usages) != n or len(raw_iv) != n or len(ecosts) != m
            or not np.array_equal(k, np.fromiter(map(len, raw_usages), np.int64, count=n))):
        return None
    intervals, pairs = _int_pairs(raw_iv), _int_pairs(enodes)
    costs = _flat_numbers(raw_costs, check_types)
    usages = _flat_numbers(raw_usages, check_types)
    if intervals is None or pairs is None or costs is None or usages is None:
        return None
    u, v = pairs[:, 0], pairs[:, 1]
    if m and (pairs.min() < 0 or pairs.max() >= n or (u == v).any()):
        return None
    sizes = np.fromiter(map(len, ecosts), dtype=np.int64, count=m)
    if not np.array_equal(sizes, k[u] * k[v]):
        return None
    flat = _flat_numbers(ecosts, check_types)
    if flat is None:
        return None
    ends = np.cumsum(sizes)
    starts, rows, cols = ends - sizes, k[u], k[v]
    key = np.minimum(u, v) * n + np.maximum(u, v)
    keep = np.arange(m)
    if np.unique(key).size < m:      # parallel edges: summed into the first, as the reader
        first: dict[tuple[int, int], int] = {}
        for i, (a, b) in enumerate(pairs.tolist()):
            j, back = first.get((a, b)), first.get((b, a))
            if j is None and back is None:
                first[(a, b)] = i
                continue
            tab = flat[starts[i]:ends[i]].reshape(rows[i], cols[i])
            j = back if j is None else j
            into = flat[starts[j]:ends[j]].reshape(rows[j], cols[j])
            into += tab if j != back else tab.T
        keep = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        logger.info("%s: merged %d parallel edges", source, m - keep.size)
    for buf in (costs, usages, flat):
        buf.setflags(write=False)         # its tables are views Problem takes as they are
    cuts = zip(starts[keep].tolist(), ends[keep].tolist(), rows[keep].tolist(),
               cols[keep].tolist())
    node_ends = np.cumsum(k).tolist()
    node_bounds = list(zip([0] + node_ends[:-1], node_ends))
    return {"node_costs": [costs[b:e] for b, e in node_bounds], "edges": pairs[keep],
            "edge_costs": [flat[b:e].reshape(r, c) for b, e, r, c in cuts],
            "memory": [usages[b:e] for b, e in node_bounds], "intervals": intervals,
            "node_names": [str(i) for i in range(n)]}


def _no_booleans(text: str, strings: list[str]) -> bool:
    """Whether the JSON ``text`` holds no ``true`` and no ``false``: each ``u`` and ``f`` of
    the text lies in one of ``strings`` (its keys and string values). A ``true`` has a ``u``
    and a ``false`` an ``f``, and a string's JSON form has at least the ``u`` and ``f`` of its
    value (an escape has its ``u``), so equal counts leave none elsewhere. Each count is a few
    ``str.find`` calls (memchr over the text), not a pass in Python."""
    for ch in "uf":
        expected = sum(x.count(ch) for x in strings)
        pos, seen = text.find(ch), 0
        while pos >= 0 and seen <= expected:
            seen += 1
            pos = text.find(ch, pos + 1)
        if seen != expected:
            return False
    return True


def _flat_numbers(lists: list, check_types: bool) -> np.ndarray | None:
    """The finite numbers of ``lists`` (lists of JSON numbers) in one writable array, or
    ``None`` when an entry is not a number (a boolean only when ``check_types``), is NaN, an
    infinity, or beyond the float range."""
    if check_types and not set(map(type, chain.from_iterable(lists))) <= {int, float}:
        return None
    buf = array("d")
    put = buf.fromlist     # refuses strings, None, lists and objects; json gives no other
    try:
        for x in lists:
            put(x)
    except (TypeError, OverflowError):
        return None
    if not buf:
        return np.zeros(0)
    out = np.frombuffer(buf, dtype=np.float64)       # no copy: writable
    return out if np.isfinite(out).all() else None


def _int_pairs(raw: list) -> np.ndarray | None:
    """``raw`` as an ``(m, 2)`` int64 array when it is a list of pairs of JSON integers."""
    if not all(type(x) is list and len(x) == 2 for x in raw):
        return None
    flat = list(chain.from_iterable(raw))
    if not set(map(type, flat)) <= {int}:
        return None
    try:
        return np.array(flat, dtype=np.int64).reshape(len(raw), 2)
    except OverflowError:
        return None


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
