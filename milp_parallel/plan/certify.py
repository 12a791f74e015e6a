"""The simulator-optimal plan, with a certificate: a separable lower bound on the simulated
step and Lawler-Murty enumeration in the order of that bound.

The bound
---------
The step simulator (:mod:`milp_parallel.costs.simulator`) gives every device a compute stream
and a communication stream, each running its tasks one after the other; the step ends when
the last stream of any device is free. Device 0 holds tile 0 of *every* layer (tiles are
numbered from 0 and a layer on ``t`` devices uses devices ``0 .. t-1``), so for every
assignment ``a``

- its compute stream runs, for every layer, the forward, the backward (not for graph inputs)
  and, at the end, the update of the layer's tile, whose durations ``f_v(a_v), b_v(a_v),
  u_v(a_v)`` depend on the layer's own configuration only:
  ``C(a) = sum_v f_v + b_v + u_v`` (plus the program's fixed time per step, the cost
  model's ``step_overhead_seconds``, a constant);
- its communication stream receives, per graph edge ``(u, w)``, the remote part of the input
  region of tile 0 of ``w`` (forward) and, when ``u`` is not a graph input, the gradients of
  what the tiles of ``w`` read from tile 0 of ``u`` (backward): durations that depend on
  ``(a_u, a_w)`` only (the slow-down of shared network cards counts the receivers of the same
  transfer, which the pair of configurations fixes); and, per layer whose gradient is
  all-reduced over replicas, the bucket that holds its gradient, whose all-reduce takes
  ``min_alg (latency_alg + bytes * per_byte_alg) >= bytes * min_alg per_byte_alg``: summed
  over the layers of the bucket, ``>= sum_v grad_bytes_v * min_alg per_byte_alg(groups_v)``
  (the layers of one bucket share their replica groups). So device 0's communication stream
  is busy at least ``M(a) = sum_v m_v(a_v) + sum_e x_e(a_u, a_w)``.

Tasks on one stream do not overlap, so ``simulated(a) >= max(C(a), M(a)) >= lam * C(a) +
(1 - lam) * M(a)`` for every ``lam`` in ``[0, 1]``: :func:`lower_bound_problem` is that
separable function as a :class:`~milp_parallel.problem.Problem` (same nodes, edges, memory and
budget as the planner's), tested against the simulator on random assignments.

The search
----------
:func:`certify` enumerates assignments in increasing bound (:func:`~milp_parallel.solvers.
kbest`'s Lawler-Murty), simulates each, and stops when the bound of the next one is at least
the best simulated time found so far (the baselines' included): no assignment left can be
faster under the simulator, so the best one found is simulator-optimal over the whole
configuration space (``proved``). When ``max_enumerated`` assignments were simulated first,
it stops with the best found and the remaining gap (best simulated vs the bound of the next
one, a lower bound on every assignment not simulated).

May import: ``costs``, ``machine``, ``problem``, ``solvers``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import numpy as np

from ..costs.configs import tile_boxes
from ..costs.simulator import _ALGS, _Links, _pair_volumes
from ..machine.collectives import cost_table
from ..problem import Problem

__all__ = ["SimulatorCertificate", "lower_bound_problem", "certify", "DEFAULT_MAX_ENUMERATED"]

logger = logging.getLogger(__name__)

#: Default cap on the assignments :func:`certify` enumerates and simulates.
DEFAULT_MAX_ENUMERATED = 200

#: Weights ``lam`` of compute vs communication tried for the bound (the one with the highest
#: minimum is used).
LAMBDAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)

PROVED = "proved"
GAP = "gap"


@dataclass(frozen=True)
class SimulatorCertificate:
    """Why the plan is the fastest under the step simulator (or how far it may be from it).

    Attributes
    ----------
    status : str
        ``"proved"``: no assignment of the configuration space (under the plan's constraints
        and budget) simulates faster than the plan; ``"gap"``: the enumeration was capped
        before the proof, see ``bound_seconds``.
    simulated_seconds : float
        The plan's simulated step.
    bound_seconds : float
        A lower bound on the simulated step of every assignment not enumerated (the
        separable bound of the next one in order; ``inf`` when none is left).
    gap : float
        ``simulated / bound - 1`` (0 when proved).
    enumerated : int
        Assignments enumerated by bound and simulated.
    lam : float
        The compute weight of the bound ``lam * compute + (1 - lam) * communication``.
    chosen : str
        ``"enumerated"`` or the name of the baseline returned.
    seconds : float
        Wall time of the bound's construction, the enumeration and the simulations.
    """

    status: str
    simulated_seconds: float
    bound_seconds: float
    gap: float
    enumerated: int
    lam: float
    chosen: str
    seconds: float

    @property
    def proved(self) -> bool:
        return self.status == PROVED

    def to_dict(self) -> dict:
        return {"status": self.status, "simulated_seconds": self.simulated_seconds,
                "bound_seconds": self.bound_seconds, "gap": self.gap,
                "enumerated": self.enumerated, "lam": self.lam, "chosen": self.chosen,
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: Mapping) -> "SimulatorCertificate":
        return cls(str(d["status"]), float(d["simulated_seconds"]), float(d["bound_seconds"]),
                   float(d["gap"]), int(d["enumerated"]), float(d["lam"]), str(d["chosen"]),
                   float(d["seconds"]))


@dataclass(frozen=True)
class _Parts:
    compute: tuple          # per node, (K,) device 0's compute
    allreduce: tuple        # per node, (K,) device 0's all-reduce lower bound
    transfer: tuple         # per problem edge, (K_u, K_v) device 0's receive time


class _Tiles:
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi


def _parts(built, transfers: bool = True) -> _Parts:
    """Device 0's per-node compute and all-reduce, and per-edge receive times (zero when
    ``transfers`` is false: still a lower bound, much cheaper to build)."""
    from ..costs.model import replica_groups
    cm, graph, topo, problem = built.cost_model, built.graph, built.topology, built.problem
    links = _Links(topo, cm.bytes_per_element)
    inputs = {lay.name for lay in graph.layers if lay.op == "input"}
    comp = [np.zeros(int(k)) for k in problem.n_configs]
    ar = [np.zeros(int(k)) for k in problem.n_configs]
    tiles: dict[str, list] = {}
    for lay in graph.layers:
        v = built.node_of[lay.name]
        rows = np.asarray(built.configs[v], dtype=np.int64)
        gi = tuple(x in inputs for x in lay.inputs)
        f, b, u = (np.asarray(x, float) for x in cm.compute_phases(
            lay, rows, graph_inputs=gi, count_profile=False))
        comp[v] += f + u + (0.0 if lay.op == "input" else b)
        lo, hi, _ = tile_boxes(lay.output_shape, rows)
        t = rows.prod(axis=1)
        tiles[lay.name] = [_Tiles(lo[k, :t[k]], hi[k, :t[k]]) for k in range(len(rows))]
        if lay.params > 0 and lay.op != "input":
            split = tuple(d in lay.weight_split_dims for d in lay.dims)
            for k, row in enumerate(rows):
                groups = replica_groups(row, split)
                if groups.shape[1] <= 1:
                    continue
                shards = int(np.prod([x for x, s in zip(row, split) if s]) or 1)
                gbytes = float(lay.params) * cm.bytes_per_element / shards
                _, per_byte = cost_table(topo, groups, "allreduce", _ALGS)
                g0 = int(np.nonzero((groups == 0).any(axis=1))[0][0])
                ar[v][k] += gbytes * float(per_byte[:, g0].min())
    xfer = []
    for e, (pu, pv) in enumerate(problem.edges):
        tab = np.zeros((int(problem.n_configs[pu]), int(problem.n_configs[pv])))
        for src, dst, i in (built.edge_members[e] if transfers else ()):
            a, b = built.node_of[src], built.node_of[dst]
            lay = graph.layer(dst)
            back = src not in inputs
            for ka, P in enumerate(tiles[src]):
                for kb, W in enumerate(tiles[dst]):
                    vol = _pair_volumes(P, W, lay, i)          # (T_w, T_src)
                    t = _recv0(links, vol) + (_recv0(links, vol.T) if back else 0.0)
                    if a == pu:
                        tab[ka, kb] += t
                    else:
                        tab[kb, ka] += t
        xfer.append(tab)
    return _Parts(tuple(comp), tuple(ar), tuple(xfer))


def _recv0(links: _Links, vol: np.ndarray) -> float:
    """Device 0's receive time of ``vol`` (receivers x senders, the diagonal local), as the
    simulator times it."""
    remote = vol.copy()
    c = min(remote.shape)
    remote[np.arange(c), np.arange(c)] = 0.0
    if remote[0].sum() <= 0:
        return 0.0
    return float(links.receive(remote, np.arange(remote.shape[0]),
                               np.arange(remote.shape[1]))[0])


def lower_bound_problem(built, target: Problem | None = None, lam: float = 1.0,
                        parts: _Parts | None = None) -> Problem:
    """The separable lower bound ``lam * C + (1 - lam) * M`` on the simulated step (see the
    module's docstring) as a Problem with ``target``'s nodes, edges, memory and budget
    (configurations forbidden in ``target``, cost ``inf``, stay forbidden).

    Parameters
    ----------
    built : BuiltProblem
    target : Problem, optional
        Default ``built.problem``.
    lam : float
        In ``[0, 1]``.
    parts : optional
        Cached :func:`_parts` of ``built``.

    Returns
    -------
    Problem
        ``problem.evaluate(a).cost <= simulate_assignment(built, a).step_seconds`` for every
        assignment ``a`` (with the cost model's default buckets and overlap, or any other).
    """
    target = built.problem if target is None else target
    parts = _parts(built) if parts is None else parts
    lam = float(lam)
    costs = []
    for v, tc in enumerate(target.node_costs):
        c = lam * parts.compute[v] + (1.0 - lam) * parts.allreduce[v]
        costs.append(np.where(np.isfinite(np.asarray(tc, float)), c, math.inf))
    # the program's fixed time per step runs on device 0's compute stream too: a constant,
    # carried by the first node
    if costs:
        costs[0] = costs[0] + lam * float(getattr(built.cost_model, "step_overhead_seconds",
                                                  0.0))
    edges = [(1.0 - lam) * t for t in parts.transfer]
    return Problem(costs, target.edges, edges, memory=target.memory,
                   memory_limit=target.memory_limit, intervals=target.intervals,
                   node_names=target.node_names, config_labels=target.config_labels)


def certify(built, target: Problem, simulate: Callable[[tuple], float],
            candidates: Mapping[str, Iterable[int]], *,
            max_enumerated: int = DEFAULT_MAX_ENUMERATED,
            time_limit: float | None = None, transfers: bool | None = None
            ) -> tuple[tuple[int, ...], SimulatorCertificate]:
    """The simulator-fastest assignment of ``target`` and its certificate.

    Parameters
    ----------
    built : BuiltProblem
    target : Problem
        The problem solved (constraints and budget applied).
    simulate : callable
        Assignment -> simulated step seconds (cached by the caller).
    candidates : mapping
        Named assignments always simulated (the solver's optimum, the baselines); the
        fastest one is returned when the enumeration finds nothing faster.
    max_enumerated : int
        The most assignments enumerated by bound.
    time_limit : float, optional
        Seconds per partition solve.
    transfers : bool, optional
        Price device 0's receives in the bound (tighter, slow to build: a minute for
        ResNet-50 on 16 devices); default: only when enumerating.

    Returns
    -------
    assignment, SimulatorCertificate
    """
    from ..solvers.kbest import _murty
    start = time.perf_counter()
    if transfers is None:
        transfers = max_enumerated > 0
    parts = _parts(built, transfers)
    best_a, best_t, chosen = None, math.inf, "enumerated"
    for name, a in candidates.items():
        key = tuple(int(x) for x in a)
        ev = target.evaluate(key)
        if not ev.feasible or not math.isfinite(ev.cost):
            continue
        t = simulate(key)
        if t < best_t:
            best_a, best_t, chosen = key, t, name
    lam, lb, lbmin = 1.0, None, -math.inf
    from ..solvers import solve_problem
    for x in LAMBDAS:
        p = lower_bound_problem(built, target, x, parts).with_memory_limit(None)
        r = solve_problem(p, "dp")
        if r.assignment is not None and float(r.objective) > lbmin + 1e-15:
            lam, lb, lbmin = x, p, float(r.objective)
    options = {"time_limit": time_limit} if time_limit is not None else {}
    n, skipped, bound = 0, 0, math.inf
    if lb is not None:
        for sol in _murty(lb, "dp", None, options):
            if sol.objective >= best_t * (1 - 1e-12):
                bound = sol.objective
                break
            if n + skipped >= max_enumerated:
                bound = sol.objective
                break
            if not target.evaluate(sol.assignment).feasible:
                skipped += 1                   # over the budget: skipped, not simulated
                continue
            n += 1
            t = simulate(sol.assignment)
            if t < best_t:
                best_a, best_t, chosen = sol.assignment, t, "enumerated"
    proved = bound >= best_t * (1 - 1e-12)
    gap = 0.0 if proved else best_t / bound - 1.0 if bound > 0 else math.inf
    cert = SimulatorCertificate(PROVED if proved else GAP, float(best_t), float(bound),
                                float(gap), n, lam, chosen, time.perf_counter() - start)
    logger.info("simulator certificate: %s", cert)
    return best_a, cert
