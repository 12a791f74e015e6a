"""Hypothesis strategies that generate random :class:`~milp_parallel.Problem` instances.

Import these in any test that needs random problems::

    from hypothesis import given, settings
    from strategies import problems

    @given(problems(kinds=("chain", "series_parallel"), memory="all_live", budget=True))
    @settings(max_examples=80, deadline=None)
    def test_something(problem): ...

(``tests/`` is on ``sys.path`` when pytest runs from the repository root with the default
rootdir-based imports; the tests import it as ``from strategies import ...``.)

Graph shapes (the ``kind`` names):

``"chain"``
    A path ``0 - 1 - ... - n-1`` (a plain CNN such as AlexNet or VGG).
``"tree"``
    A random tree (each node ``i > 0`` joins a random earlier node).
``"series_parallel"``
    A two-terminal series-parallel graph grown from one edge by random series steps (subdivide
    an edge) and parallel steps (add a two-edge detour beside an edge): residual and
    Inception-like blocks. Treewidth at most 2.
``"partial_ktree"``
    A random partial k-tree with ``k`` in {2, 3}: every new node joins a random subset of an
    existing k-clique. Treewidth at most 3; these are *not* reducible by OptCNN's node/edge
    eliminations alone, so they exercise variable elimination.
``"dag"``
    A random DAG on ``n`` nodes (each forward pair is an edge with a drawn probability):
    anything from a forest with isolated nodes to a dense graph.

Edge directions are randomly flipped (a :class:`Problem` is a min-sum labelling problem; the
direction only decides which axis of an edge table is which), so solvers must handle
transposes.

Numbers come from a numpy generator seeded by a drawn integer (fast, reproducible from the
failing example that hypothesis prints); the structure (graph, config counts, which features)
is drawn by hypothesis and shrinks well.

Costs are either small integers (many ties: tests argmin recovery) or floats over several
orders of magnitude. With ``inf``, a drawn fraction of node and edge costs is ``inf``
(impossible), which can make every assignment impossible (an infeasible problem). With
``forbidden``, a drawn fraction is a forbidden entry (:data:`FORBIDDEN_VALUES`: IOPDDL's
``1e18`` and larger), alone or beside ``inf``; at a high rate every feasible assignment uses
some, so the lexicographic order (fewest forbidden entries, then the cost of the rest) is
what decides.

Memory models: ``"none"`` (no tables), ``"all_live"`` (``(K_v, D)`` tables, additive, D in
1..``max_devices``), ``"intervals"`` (one column, random half-open liveness intervals, some
empty). A budget, when present, is drawn between the least and the largest possible memory
(slightly outside on both sides too, so some instances are infeasible and some unconstrained).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from hypothesis import strategies as st

from milp_parallel.problem import Problem

__all__ = ["KINDS", "MEMORY_MODELS", "FORBIDDEN_VALUES", "graphs", "config_counts", "problems",
           "tiny_problems"]

#: Graph shapes :func:`graphs` knows.
KINDS = ("chain", "tree", "series_parallel", "partial_ktree", "dag")
#: Memory models :func:`problems` knows (``"any"`` picks one of them).
MEMORY_MODELS = ("none", "all_live", "intervals")
#: The forbidden entries drawn (every value at or above 1e18 counts as one).
FORBIDDEN_VALUES = (1e18, 1e18, 1e18, 1e18 + 2**40, 3e18, 1e19)


# ---------------------------------------------------------------------- graphs
def _chain(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(n - 1)]


def _tree(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    return [(int(rng.integers(0, i)), i) for i in range(1, n)]


def _series_parallel(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    if n == 1:
        return []
    edges = [(0, 1)]
    nxt = 2
    while nxt < n:
        i = int(rng.integers(0, len(edges)))
        u, v = edges[i]
        w = nxt
        nxt += 1
        if rng.random() < 0.5:          # series: u - w - v replaces u - v
            edges[i] = (u, w)
            edges.append((w, v))
        else:                           # parallel: keep u - v, add the detour u - w - v
            edges.append((u, w))
            edges.append((w, v))
    return edges


def _partial_ktree(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    k = int(rng.integers(2, 4))
    base = min(n, k + 1)
    edges = {(i, j) for i in range(base) for j in range(i + 1, base)}
    cliques = [tuple(range(base))]
    for w in range(base, n):
        c = cliques[int(rng.integers(0, len(cliques)))]
        sub = tuple(int(x) for x in rng.choice(c, size=min(k, len(c)), replace=False))
        cliques.append(tuple(sorted(sub + (w,))))
        keep = [x for x in sub if rng.random() < 0.85] or [sub[0]]
        edges.update((x, w) for x in keep)
    return sorted(edges)


def _dag(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    p = rng.uniform(0.0, 0.7)
    return [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]


_BUILDERS = {"chain": _chain, "tree": _tree, "series_parallel": _series_parallel,
             "partial_ktree": _partial_ktree, "dag": _dag}


@st.composite
def graphs(draw, kinds: Sequence[str] = KINDS, min_nodes: int = 1, max_nodes: int = 8):
    """A random undirected-ish graph as ``(n_nodes, edges)``.

    Parameters
    ----------
    kinds : sequence of str
        Shapes to pick from (see :data:`KINDS`).
    min_nodes, max_nodes : int
        Node count range.

    Returns
    -------
    tuple of (int, list of (int, int))
        Edges have no self-loops and no duplicates in either direction; directions are
        randomly flipped.
    """
    kind = draw(st.sampled_from(tuple(kinds)))
    n = draw(st.integers(min_nodes, max_nodes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    edges = _BUILDERS[kind](n, rng)
    flip = rng.random(len(edges)) < 0.3
    edges = [(v, u) if f else (u, v) for (u, v), f in zip(edges, flip)]
    perm = rng.permutation(len(edges))
    return n, [edges[i] for i in perm]


@st.composite
def config_counts(draw, n_nodes: int, max_configs: int = 4,
                  max_assignments: int | None = 4000):
    """Configuration counts ``K_v`` in ``1..max_configs`` whose product is bounded.

    The largest counts are lowered until ``prod(K_v) <= max_assignments``, so brute force stays
    cheap; ``None`` leaves them alone.
    """
    k = np.array(draw(st.lists(st.integers(1, max_configs), min_size=n_nodes,
                               max_size=n_nodes)), dtype=np.int64)
    if max_assignments is not None:
        while float(np.prod(k.astype(float))) > max_assignments:
            k[int(np.argmax(k))] -= 1
    return [int(x) for x in k]


# ---------------------------------------------------------------------- problems
def _costs(rng: np.random.Generator, shape, integer: bool, inf_rate: float,
           forbidden_rate: float = 0.0) -> np.ndarray:
    if integer:
        a = rng.integers(0, 20, size=shape).astype(np.float64)
    else:
        a = rng.lognormal(mean=0.0, sigma=2.0, size=shape)
    if forbidden_rate > 0:
        hit = rng.random(shape) < forbidden_rate
        a[hit] = rng.choice(FORBIDDEN_VALUES, size=int(hit.sum()))
    if inf_rate > 0:
        a[rng.random(shape) < inf_rate] = np.inf
    return a


@st.composite
def problems(draw, kinds: Sequence[str] = KINDS, *, min_nodes: int = 1, max_nodes: int = 7,
             max_configs: int = 4, max_assignments: int | None = 4000,
             inf: bool | None = None, forbidden: bool | None = None, memory: str = "any",
             budget: bool | None = None, max_devices: int = 3):
    """A random :class:`~milp_parallel.Problem`.

    Parameters
    ----------
    kinds : sequence of str
        Graph shapes (see :data:`KINDS`).
    min_nodes, max_nodes : int
        Node count range.
    max_configs : int
        Largest ``K_v``.
    max_assignments : int or None
        Bound on ``prod(K_v)`` (keep it small when brute force checks the answer).
    inf : bool or None
        Whether some costs are ``inf`` (impossible); ``None`` draws it.
    forbidden : bool or None
        Whether some costs are forbidden entries (``>= 1e18``); ``None`` draws it.
    memory : str
        ``"none"``, ``"all_live"``, ``"intervals"``, or ``"any"`` (drawn).
    budget : bool or None
        Whether a memory budget is set (needs memory tables); ``None`` draws it.
    max_devices : int
        Largest number of memory columns for the all-live model.

    Returns
    -------
    Problem
    """
    n, edges = draw(graphs(kinds, min_nodes, max_nodes))
    k = draw(config_counts(n, max_configs, max_assignments))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    integer = draw(st.booleans())
    use_inf = draw(st.booleans()) if inf is None else inf
    inf_rate = float(rng.uniform(0.05, 0.3)) if use_inf else 0.0
    use_forbidden = draw(st.booleans()) if forbidden is None else forbidden
    forbidden_rate = float(rng.choice([0.1, 0.3, 0.7])) if use_forbidden else 0.0
    node_costs = [_costs(rng, (kv,), integer, inf_rate, forbidden_rate) for kv in k]
    edge_costs = [_costs(rng, (k[u], k[v]), integer, inf_rate, forbidden_rate)
                  for u, v in edges]

    model = draw(st.sampled_from(MEMORY_MODELS)) if memory == "any" else memory
    if model not in MEMORY_MODELS:
        raise ValueError(f"memory must be one of {MEMORY_MODELS} or 'any', got {memory!r}")
    mem = limit = intervals = None
    if model != "none":
        d = 1 if model == "intervals" else draw(st.integers(1, max_devices))
        if integer:
            mem = [rng.integers(0, 30, size=(kv, d)).astype(np.float64) for kv in k]
        else:
            mem = [rng.uniform(0.0, 100.0, size=(kv, d)) for kv in k]
        if model == "intervals":
            starts = rng.integers(0, 2 * n, size=n)
            lengths = rng.integers(0, n + 1, size=n)
            lengths[rng.random(n) < 0.1] = 0
            intervals = np.stack([starts, starts + lengths], axis=1)
        want_budget = draw(st.booleans()) if budget is None else budget
        if want_budget:
            lo = sum(m.min(axis=0) for m in mem)
            hi = sum(m.max(axis=0) for m in mem)
            frac = float(rng.uniform(-0.1, 1.1))
            limit = np.maximum(lo + frac * (hi - lo), 0.0)
            if integer:
                limit = np.floor(limit)
    elif budget:
        raise ValueError("budget=True needs memory tables (memory != 'none')")
    return Problem(node_costs, edges, edge_costs, memory=mem, memory_limit=limit,
                   intervals=intervals)


def tiny_problems(**kwargs):
    """:func:`problems` sized for brute force (<= 7 nodes, <= 4000 assignments)."""
    kwargs.setdefault("max_nodes", 7)
    kwargs.setdefault("max_assignments", 4000)
    return problems(**kwargs)
