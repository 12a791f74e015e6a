"""OR-Tools CP-SAT (registry name ``"cpsat"``): a thin adapter on :mod:`.backend`.

CP-SAT works over integers, so the float model is scaled:

* **memory rows** (per row, by a power of two ``s``): coefficients rounded **up**, the budget
  rounded **down**, so every CP-SAT-feasible assignment is feasible for the float problem.
  When the coefficients are integers (IOPDDL) ``s = 1`` and only the budget is floored (exact:
  an integer sum is at most the budget exactly when it is at most its floor). Otherwise ``s`` makes
  the row's largest sum about ``2**40``, and the rounding can only exclude assignments whose
  usage is within about ``n_row_nodes * 2**-40`` (relative) of the budget: CP-SAT's
  "optimal" is then optimal among the others (``stats["memory_rounded"]`` says so).
* **costs** are scaled by one power of two ``s`` (so the largest possible objective is about
  ``2**50``) and rounded to the nearest integer; with integer costs ``s = 1`` and nothing is
  rounded. With rounding, every assignment's scaled cost is off by at most ``N/2`` (``N`` =
  free nodes + edges left: the terms of one assignment), so the bound given back is CP-SAT's
  bound minus that, divided by ``s``: a proved bound for the float problem.
* ``y`` becomes Boolean (with integral ``x`` the marginal constraints force ``y`` integral).

OR-Tools 9.15's CP-SAT can certify a wrong optimum on linear rows over exactly-one groups with
large coefficients (or-tools issue 5293): the offending presolve step is switched off with
``presolve_inclusion_work_limit = 0``.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ...errors import InvalidOptionError, SolverError
from ..base import Capabilities, Option, check_int
from ..options import Deadline
from ..result import Progress
from .backend import MILP_OPTIONS, MilpBackend, NativeResult
from .model import MilpModel

__all__ = ["CPSATSolver", "scale_costs", "scale_memory_row", "build_cp_model", "clip_costs",
           "MODELS",
           "DEFAULT_MODEL"]

logger = logging.getLogger(__name__)

_COST_BITS = 50
_MEMORY_BITS = 40

#: The CP-SAT models (:func:`build_cp_model`).
MODELS = ("linear", "bool", "table", "element")
#: The model and the LP linearization level CP-SAT runs with by default, chosen by
#: ``benchmarks/results/milp_backends.csv`` (``python -m benchmarks.milp_backends``, with
#: ``--presolve lite`` for the zoo; 1 worker, 120 s): at CP-SAT's own level 1 every model left
#: the 200 x 16 interval chain 14-16% from its bound, the 60-node DAG 18%, IOPDDL G unproven
#: (the linear model: proven in 90 s) and resnet50@16 unproven (28%); at level 2 (the full LP
#: relaxation of the marginal constraints) the table model proved resnet18@16 in 5.8 s,
#: resnet50@16 in 26 s and G in 16 s (the linear model: 10, 61 and 19 s) and left the chain at
#: 1.2% and the DAG at 5.4% (linear: 0.4% and 5.1%).
DEFAULT_MODEL = "table"
LINEARIZATION_LEVEL = 2


def _is_integral(a: np.ndarray) -> bool:
    return bool(np.all(a == np.round(a)))


def scale_costs(costs: np.ndarray, max_total: float) -> tuple[np.ndarray, float, bool]:
    """Integer costs for CP-SAT.

    Parameters
    ----------
    costs : numpy.ndarray
        Float objective coefficients (finite, ``>= 0``).
    max_total : float
        The largest objective any assignment can have (sets the scale).

    Returns
    -------
    tuple
        ``(integer costs, scale s, exact)``: ``int_costs ~= s * costs``; ``exact`` when no
        rounding happened.

    Examples
    --------
    >>> scale_costs(np.array([3.0, 5.0]), 8.0)
    (array([3, 5]), 1.0, True)
    """
    if costs.size == 0:
        return costs.astype(np.int64), 1.0, True
    if _is_integral(costs) and max_total <= 2.0 ** _COST_BITS:
        return costs.astype(np.int64), 1.0, True
    s = 2.0 ** min(_COST_BITS - math.ceil(math.log2(max(max_total, 1e-300))), 900)
    scaled = costs * s
    out = np.round(scaled)
    return out.astype(np.int64), s, bool(np.all(out == scaled))


def scale_memory_row(coefs: np.ndarray, rhs: float) -> tuple[np.ndarray, int, bool]:
    """Integer memory row ``coefs . x <= rhs`` such that integer-feasible implies feasible.

    Coefficients are rounded up and the budget down, after scaling both by one power of two.

    Returns
    -------
    tuple
        ``(integer coefs, integer rhs, exact)``.

    Examples
    --------
    >>> c, r, exact = scale_memory_row(np.array([0.3, 0.7]), 1.0)
    >>> bool(np.all(c / 2.0**40 >= [0.3, 0.7])), r <= 2**40, exact
    (True, True, False)
    >>> scale_memory_row(np.array([3.0, 4.0]), 7.5)
    (array([3, 4]), 7, True)
    """
    total = float(coefs.sum())
    big = max(total, rhs, 1e-300)
    if _is_integral(coefs) and big <= 2.0 ** _COST_BITS:
        # Integer coefficients: an integer sum is <= rhs exactly when it is <= floor(rhs),
        # so nothing is excluded (the presolve's budget tolerance makes rhs fractional).
        return coefs.astype(np.int64), int(math.floor(rhs)), True
    s = 2.0 ** min(_MEMORY_BITS - math.ceil(math.log2(big)), 900)
    # rounded up, and a positive coefficient that underflows the scale stays positive
    c = np.where(coefs > 0, np.maximum(np.ceil(coefs * s), 1.0), np.ceil(coefs * s))
    r = math.floor(rhs * s)
    exact = bool(np.all(c == coefs * s)) and r == rhs * s
    return c.astype(np.int64), int(r), exact



def clip_costs(model: MilpModel, upper: float) -> tuple[np.ndarray, float]:
    """The model's costs with every entry above ``upper`` lowered to ``upper`` (with margin).

    ``upper`` is the cost (in the model's terms) of a known feasible assignment. With costs
    that are all ``>= 0``, an assignment that uses an entry dearer than ``upper`` costs more
    than the known one, and still does after the clipping: the optimum and its value are
    unchanged, and a lower bound of the clipped model is one of the original. What changes is
    the coefficient range (zoo tables hold entries 10^4 times the optimum), which CP-SAT's LP
    and the integer scaling handle better. Returns ``(costs, cap)`` (``cap = inf``: nothing
    was clipped).

    Examples
    --------
    >>> class M:
    ...     col_cost = np.array([1.5, 500.0, 2.0])
    >>> clip_costs(M, 10.0)[0].tolist()
    [1.5, 10.0078125, 2.0]
    """
    costs = np.asarray(model.col_cost, dtype=float)
    if not (math.isfinite(upper) and upper > 0) or costs.size == 0 or costs.min() < 0:
        return costs, math.inf
    # A margin above ``upper``: at least one unit on integer data (which stays integral).
    cap = float(math.floor(upper) + 1.0) if _is_integral(costs) else \
        float(upper + 2.0 ** (math.floor(math.log2(upper)) - 10))
    if costs.max() <= cap:
        return costs, math.inf
    return np.minimum(costs, cap), cap


def _check_model(value: Any) -> str:
    if value not in MODELS:
        raise InvalidOptionError(f"model must be one of {MODELS}, got {value!r}")
    return str(value)


def _check_parameters(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidOptionError("cpsat_parameters must be CP-SAT parameters in protobuf text "
                                 f"format (e.g. 'linearization_level: 2'), got {value!r}")
    from google.protobuf import text_format
    from ortools.sat import sat_parameters_pb2
    try:
        text_format.Parse(value, sat_parameters_pb2.SatParameters())
    except text_format.ParseError as exc:
        raise InvalidOptionError(f"cpsat_parameters: {exc}") from None
    return value


class _Built:
    """A CP-SAT model and how to read its answer (see :func:`build_cp_model`)."""

    def __init__(self, cp, x: list, hint_vars: list, hint_values: list, s: float,
                 cost_exact: bool, memory_exact: bool, n_terms: int,
                 cost_cap: float = math.inf) -> None:
        self.cp = cp
        self.x = x
        self.hint_vars = hint_vars
        self.hint_values = hint_values
        self.s = s
        self.cost_exact = cost_exact
        self.memory_exact = memory_exact
        self.n_terms = n_terms
        self.cost_cap = cost_cap

    def to_problem(self, scaled: float, offset: float) -> float:
        """A model objective (integer, scaled) as a cost of the float problem (approximate)."""
        return scaled / self.s + offset

    def proved_bound(self, scaled_bound: float) -> float:
        """A proved lower bound on the float model's objective from CP-SAT's bound."""
        return (scaled_bound - (0.0 if self.cost_exact else 0.5 * self.n_terms)) / self.s


def build_cp_model(model: MilpModel, warm: np.ndarray | None, kind: str = "linear") -> _Built:
    """The CP-SAT model of a MILP model (``kind`` one of :data:`MODELS`).

    Every model has a Boolean literal per (node, kept configuration) with an exactly-one per
    node, memory rows as linear constraints over those literals (scaled by
    :func:`scale_memory_row`), and the node costs on the literals. The edges differ:

    * ``"linear"``: a literal per allowed pair ``y``, the marginal rows as linear equalities
      ``sum_c' y[c, c'] - x[u, c] = 0`` (the local polytope, as the LP solvers get it);
    * ``"bool"``: the same rows written as Boolean constraints,
      ``exactly_one(not x[u, c], y[c, 0], y[c, 1], ...)`` (the same polytope for CP-SAT's LP,
      but native clauses for its propagation);
    * ``"table"``: an integer per node (``add_map_domain`` to its literals) and per edge an
      integer cost ``w`` with ``add_allowed_assignments([z_u, z_v, w], allowed pairs)``;
    * ``"element"``: the product index ``p = z_u * K_v + z_v`` over the allowed pairs and
      ``w = costs[p]`` by ``add_element``.
    """
    from ortools.sat.python import cp_model

    red = model.reduced
    free = red.free_nodes
    n_x = model.n_x
    costs, cap = clip_costs(model, red.upper_bound - model.offset)
    # Largest objective: per node its dearest config, per edge its dearest pair (clipped).
    max_total = 0.0
    for v in free:
        st = int(model.x_start[v])
        max_total += float(costs[st:st + red.configs[v].size].max())
    for e, pairs in enumerate(model.y_pairs):
        if pairs.shape[0]:
            st = int(model.y_start[e])
            max_total += float(costs[st:st + pairs.shape[0]].max())
    icost, s, cost_exact = scale_costs(costs, max_total)
    m = cp_model.CpModel()
    x = [m.new_bool_var(f"x{i}") for i in range(n_x)]
    ks = [int(red.configs[int(v)].size) for v in free]
    starts = [int(model.x_start[int(v)]) for v in free]
    for st, k in zip(starts, ks):
        m.add_exactly_one(x[st:st + k])
    memory_exact = True
    first_mem = model.n_onehot + model.n_marginal
    rs = model.row_start
    for r in range(first_mem, model.n_rows):
        idx = model.row_index[rs[r]:rs[r + 1]]
        val = model.row_value[rs[r]:rs[r + 1]]
        c, rhs, exact = scale_memory_row(val, float(model.row_upper[r]))
        memory_exact &= exact
        nz = c != 0
        m.add(cp_model.LinearExpr.weighted_sum([x[int(i)] for i in idx[nz]],
                                               c[nz].tolist()) <= rhs)
    obj_vars: list = [x[int(i)] for i in np.nonzero(icost[:n_x])[0]]
    obj_coefs: list = icost[:n_x][icost[:n_x] != 0].tolist()
    col = model.encode(warm) if warm is not None else None
    hint_vars: list = list(x)
    hint_values: list = [] if col is None else np.round(col[:n_x]).astype(int).tolist()
    local = {}
    if col is not None:
        for v, st, k in zip(free, starts, ks):
            local[int(v)] = int(np.argmax(col[st:st + k]))
    node_pos = {int(v): i for i, v in enumerate(free)}

    if kind in ("linear", "bool"):
        n_y = model.n_cols - n_x
        y = [m.new_bool_var(f"y{i}") for i in range(n_y)]
        for e, (u, v) in enumerate(red.edges):
            pairs = model.y_pairs[e]
            cols = model.y_start[e] - n_x + np.arange(pairs.shape[0])
            for side, node in ((0, int(u)), (1, int(v))):
                k = ks[node_pos[node]]
                order = np.argsort(pairs[:, side], kind="stable")
                bounds = np.searchsorted(pairs[order, side], np.arange(k + 1))
                xs = model.x_start[node]
                for c in range(k):
                    group = [y[int(j)] for j in cols[order[bounds[c]:bounds[c + 1]]]]
                    if kind == "bool":
                        m.add_exactly_one([x[xs + c].Not()] + group)
                    else:
                        m.add(sum(group) - x[xs + c] == 0)
        nz = np.nonzero(icost[n_x:])[0]
        obj_vars += [y[int(i)] for i in nz]
        obj_coefs += icost[n_x:][nz].tolist()
        hint_vars += y
        if col is not None:
            hint_values += np.round(col[n_x:]).astype(int).tolist()
    elif kind in ("table", "element"):
        z = []
        for v, st, k in zip(free, starts, ks):
            zv = m.new_int_var(0, k - 1, f"z{int(v)}")
            m.add_map_domain(zv, x[st:st + k])
            z.append(zv)
        hint_vars += z
        if col is not None:
            hint_values += [local[int(v)] for v in free]
        for e, (u, v) in enumerate(red.edges):
            pairs = model.y_pairs[e]
            wc = icost[model.y_start[e]:model.y_start[e] + pairs.shape[0]]
            zu, zv = z[node_pos[int(u)]], z[node_pos[int(v)]]
            if wc.size == 0:      # no pair allowed: the model is infeasible
                m.add_allowed_assignments([zu, zv], [])
                continue
            lo, hi = int(wc.min()), int(wc.max())
            if lo == hi:          # a constant cost: only the allowed pairs matter
                m.add_allowed_assignments([zu, zv], pairs.tolist())
                obj_vars.append(1)
                obj_coefs.append(lo)
                continue
            w = m.new_int_var(lo, hi, f"w{e}")
            if kind == "table":
                m.add_allowed_assignments(
                    [zu, zv, w], np.column_stack([pairs, wc]).tolist())
            else:
                kv = ks[node_pos[int(v)]]
                flat = pairs[:, 0] * kv + pairs[:, 1]
                p = m.new_int_var_from_domain(
                    cp_model.Domain.from_values(flat.tolist()), f"p{e}")
                m.add(p == zu * kv + zv)
                table = np.full(ks[node_pos[int(u)]] * kv, hi, dtype=np.int64)
                table[flat] = wc
                m.add_element(p, table.tolist(), w)
            obj_vars.append(w)
            obj_coefs.append(1)
            hint_vars.append(w)
            if col is not None:
                hit = np.nonzero((pairs[:, 0] == local[int(u)])
                                 & (pairs[:, 1] == local[int(v)]))[0]
                hint_values.append(int(wc[hit[0]]))
    else:
        raise InvalidOptionError(f"model must be one of {MODELS}, got {kind!r}")
    m.minimize(cp_model.LinearExpr.weighted_sum(obj_vars, obj_coefs))
    return _Built(m, x, hint_vars, hint_values if col is not None else [], s, cost_exact,
                  memory_exact, int(free.size + len(red.edge_costs)))


class CPSATSolver(MilpBackend):
    """OR-Tools CP-SAT (registry name ``"cpsat"``).

    Options (besides the common and MILP ones)
    ------------------------------------------
    model : str
        The CP-SAT model, one of :data:`MODELS` (default :data:`DEFAULT_MODEL`).
    cpsat_parameters : str
        Extra CP-SAT parameters in protobuf text format (e.g. ``"linearization_level: 2"``),
        applied after this backend's own (time limit, workers, gap, seed).
    random_seed : int
    """

    name = "cpsat"
    package = "ortools"
    module = "ortools"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=True, gap=True, warm_start=True)
    #: Building the CP-SAT model in Python and CP-SAT's loading and presolve of it, which
    #: it does not interrupt at its time limit (inception_v3 at 64 GPUs with a budget: 3e6
    #: nonzeros, 1.0 s to build, then 2.3 s past a 0.7 s limit).
    startup_seconds_per_nonzero = 1.2e-6
    options = MILP_OPTIONS + (
        Option("model", DEFAULT_MODEL, _check_model, f"the CP-SAT model, one of {MODELS}"),
        Option("cpsat_parameters", "", _check_parameters,
               "extra CP-SAT parameters (protobuf text format)"),
        Option("random_seed", 0, check_int("random_seed")),
    )

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:
        from google.protobuf import text_format
        from ortools.sat import sat_parameters_pb2
        from ortools.sat.python import cp_model

        gap, threads = options["gap"], options["threads"]
        t0 = time.perf_counter()
        built = build_cp_model(model, warm, options["model"])
        m = built.cp
        for var, val in zip(built.hint_vars, built.hint_values):
            m.add_hint(var, val)
        cp_build = time.perf_counter() - t0
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.presolve_inclusion_work_limit = 0      # or-tools issue 5293
        prm.linearization_level = LINEARIZATION_LEVEL
        prm.log_search_progress = bool(options["verbose"])
        prm.random_seed = int(options["random_seed"])
        prm.relative_gap_limit = float(gap)
        if gap == 0:
            prm.absolute_gap_limit = 0.5 if built.cost_exact else 0.0
        left = deadline.left()
        if left is not None:
            prm.max_time_in_seconds = max(0.01, float(left))
        if threads is not None:
            prm.num_workers = int(threads)
        if options["cpsat_parameters"]:
            extra = sat_parameters_pb2.SatParameters()
            text_format.Parse(options["cpsat_parameters"], extra)
            for fd, value in extra.ListFields():
                if fd.label == fd.LABEL_REPEATED:
                    getattr(prm, fd.name).extend(value)
                else:
                    setattr(prm, fd.name, value)
        prm.presolve_inclusion_work_limit = 0      # never let extra parameters undo it
        callback = options["callback"]
        observer = None
        if callback is not None:
            offset = model.offset
            name = self.name

            class _Observer(cp_model.CpSolverSolutionCallback):
                def on_solution_callback(self) -> None:
                    # The objective is the scaled integer one mapped back (exact on
                    # integer data, else within the rounding slack), the bound is proved.
                    b = float(self.best_objective_bound)
                    obj = built.to_problem(float(self.objective_value), offset)
                    bound = built.proved_bound(b) + offset if math.isfinite(b) else -math.inf
                    callback(Progress(name, deadline.elapsed(), obj, min(bound, obj)))

            observer = _Observer()
        t1 = time.perf_counter()
        st = solver.solve(m, observer)
        solve_seconds = time.perf_counter() - t1
        if st == cp_model.MODEL_INVALID:
            raise SolverError(f"cpsat: CP-SAT rejected the model: {m.validate()}")
        values = None
        bound = -math.inf
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # The response lists every variable's value in creation order (the x literals
            # first): one array copy instead of a Python call per literal.
            raw = np.asarray(solver.response_proto.solution, dtype=float)
            values = np.zeros(model.n_cols)
            n_x = len(built.x)
            if raw.size >= n_x and (n_x == 0 or (built.x[0].index == 0
                                                 and built.x[-1].index == n_x - 1)):
                values[:n_x] = raw[:n_x]
            else:
                values[:n_x] = [solver.value(v) for v in built.x]
            b = float(solver.best_objective_bound)
            if math.isfinite(b):
                bound = built.proved_bound(b)
        return NativeResult(
            values=values, claimed_optimal=st == cp_model.OPTIMAL, bound=bound,
            infeasible=st == cp_model.INFEASIBLE, native_status=solver.status_name(st),
            solve_seconds=solve_seconds,
            stats={"cost_scale": built.s, "cost_rounded": not built.cost_exact,
                   "memory_rounded": not built.memory_exact, "solver_time_limit": left,
                   "cost_cap": built.cost_cap,
                   "cpsat_model": options["model"], "cpsat_build_seconds": cp_build})
