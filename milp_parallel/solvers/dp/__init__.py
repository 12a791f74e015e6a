"""The exact graph search (registry name ``"dp"``): one of the two proofs the product rests on.

=============  =========================================================================
module         what it holds
=============  =========================================================================
``engine``     OptCNN's eliminations, variable elimination along a tree decomposition,
               min-marginals (:class:`~.engine.Engine`, :func:`solve_unconstrained`)
``budget``     memory budgets: Lagrangian relaxation and branch-and-bound
               (:class:`~.budget.BudgetSearch`, :func:`dp_lower_bound`)
``pareto``     one binding device: (cost, memory) Pareto sets through the eliminations
``window``     interval budgets whose live sets span few consecutive nodes: a dynamic
               programme along the node order (:func:`~.window.window_search`)
=============  =========================================================================

Exact for: no memory, memory without a budget (any model), the all-live memory model with a
budget (any number of devices), and a budget over liveness intervals when every edge and
live set lies within a few consecutive nodes (the window's table, the product of their
configuration counts, at most ``max_table_size``; a chain of 200 layers x 16 strategies
whose tensors live up to 5 steps: 16^5 entries). Other interval budgets are refused (the
MILP backends handle them). The search never uses a MILP solver: its answer is independent
of them, which is what makes it a cross-check.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...problem import Problem
from ..base import Capabilities, Option, Solver, check_bool, check_choice, check_int, check_number
from ..heuristics import incumbent
from ..options import Deadline
from ..result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolveResult, relative_gap
from .budget import INTERVAL_MESSAGE, BudgetSearch, LagrangianBound, dp_lower_bound
from .engine import _ORDERINGS, DEFAULT_MAX_TABLE_SIZE, Engine, OutOfTime, solve_unconstrained
from .pareto import pareto_search
from .window import window_search, window_table_size, window_width

__all__ = ["DPSolver", "solve_unconstrained", "dp_lower_bound", "LagrangianBound", "Engine",
           "DEFAULT_MAX_TABLE_SIZE"]


def _merge_seconds(deadline: Deadline) -> float:
    """Time for one solution merge: 10% of the limit (2 s without one)."""
    return 2.0 if deadline.time_limit is None else 0.1 * deadline.time_limit


class DPSolver(Solver):
    """Exact graph search (registry name ``"dp"``); see :mod:`milp_parallel.solvers.dp`.

    Options (besides the common ones)
    ---------------------------------
    eliminations : bool
        OptCNN's leaf/node/edge eliminations before variable elimination (default ``True``).
    ordering : str
        ``"auto"`` (default), ``"min_weight"``, ``"min_degree"``, ``"min_fill"``.
    max_table_size : float
        Largest variable-elimination table allowed (default ``5e7`` entries).
    max_branch_nodes : int
        Branch-and-bound node limit of the budget search (default 200000).
    root_iterations, node_iterations : int
        Subgradient iterations at the root (default 60) and at other nodes (default 8).
    fixing : bool
        Reduced-cost fixing from min-marginals in the budget search (default ``True``;
        ``False`` only for comparison: same answers, slower).
    merge : bool
        Solution merging in the budget search (default ``False``): the problem restricted to
        the configurations of the relaxed solutions, solved by a nested search, for better
        incumbents. Measured: resnet50@16 with the halfway budget reaches 0.0430 instead of
        0.0432 in 30 s (the optimum is 0.0402); off by default for its cost elsewhere.

    ``warm_start`` (an assignment) seeds the budget search's incumbent when it meets the
    budget; ``gap`` lets the budget search stop early. ``threads`` does not apply (the search
    is single-threaded) and is noted in ``stats["ignored_options"]``.
    """

    name = "dp"
    package = None
    module = None
    # interval budgets: only within a window (accepts() says which)
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=False, gap=True, warm_start=True)
    options = (
        Option("eliminations", True, check_bool("eliminations")),
        Option("ordering", "auto", check_choice("ordering", _ORDERINGS)),
        Option("max_table_size", DEFAULT_MAX_TABLE_SIZE,
               check_number("max_table_size", 1.0)),
        Option("max_branch_nodes", 200_000, check_int("max_branch_nodes", 1)),
        Option("root_iterations", 60, check_int("root_iterations", 1)),
        Option("node_iterations", 8, check_int("node_iterations", 1)),
        Option("fixing", True, check_bool("fixing")),
        Option("shrink", True, check_bool("shrink"),
               "after the root's reduced-cost fixing, search the problem restricted to the "
               "configurations left (smaller tables for every later pass)"),
        Option("merge", False, check_bool("merge"),
               "solution merging in the budget search (a nested exact search over the "
               "configurations of the relaxed solutions)"),
    )

    def accepts(self, problem: Problem) -> str | None:
        if problem.has_budget and problem.intervals is not None:
            width = window_width(problem)
            size = window_table_size(problem, width)
            if size > DEFAULT_MAX_TABLE_SIZE:
                return (f"{INTERVAL_MESSAGE} (here they span {width} consecutive nodes: a "
                        f"table of {size:.3g} entries > {DEFAULT_MAX_TABLE_SIZE:.3g})")
        return super().accepts(problem)

    def _solve(self, problem: Problem, options: dict[str, Any],
               deadline: Deadline) -> SolveResult:
        """Solve exactly.

        Returns
        -------
        SolveResult
            ``stats``: ``leaf_eliminations``, ``node_eliminations``, ``edge_eliminations``,
            ``isolated``, ``single_config_eliminations``, ``nodes_left``, ``treewidth``,
            ``largest_table``, ``ordering``, and with a budget ``dp_runs``,
            ``lagrangian_iterations``, ``branch_nodes``, ``least_memory`` (per device),
            ``fixed_configs``, ``local_searches``, ``binding_devices``. When the time limit
            runs out before the search has an answer, the heuristic incumbent of
            :mod:`~milp_parallel.solvers.heuristics` comes back ``feasible`` (or ``unknown``).

        Raises
        ------
        ProblemTooLargeError
            If the largest table exceeds ``max_table_size``.
        """
        stats: dict[str, Any] = {}

        def done(status, a, bound):
            objective = problem.evaluate(a).cost if a is not None else math.nan
            if status == OPTIMAL:
                bound, gap = objective, 0.0
            elif a is None:
                gap = math.inf
            else:
                gap = relative_gap(objective, bound)
            return SolveResult(assignment=a, objective=objective, status=status, bound=bound,
                               gap=gap, seconds=deadline.elapsed(), solver="dp", stats=stats)

        def out_of_time(best=None):
            """The deadline passed first: the best assignment known, or a heuristic one."""
            stats["time_limit_reached"] = True
            if best is None:
                best, _ = incumbent(problem, deadline=Deadline(min(1.0, 0.05 * (
                    deadline.time_limit or 1.0))))
            if best is None:
                return done(UNKNOWN, None, -math.inf)
            return done(FEASIBLE, best, -math.inf)

        if problem.has_budget and problem.intervals is not None:
            return self._window(problem, options, deadline, stats, done, out_of_time)
        try:
            eng = Engine(problem, eliminations=options["eliminations"],
                         ordering=options["ordering"],
                         max_table_size=options["max_table_size"], deadline=deadline)
        except OutOfTime:
            return out_of_time()
        pl = eng.plan
        stats.update({
            "leaf_eliminations": pl.n_leaf, "node_eliminations": pl.n_node,
            "edge_eliminations": pl.n_edge, "isolated": pl.n_isolated,
            "single_config_eliminations": pl.n_single,
            "nodes_left": pl.nodes_left, "treewidth": pl.treewidth,
            "largest_table": pl.largest_table, "ordering": pl.ordering})

        if not problem.has_budget:
            try:
                val, a = eng.run(problem.node_costs, deadline=deadline)
            except OutOfTime:
                return out_of_time()
            if not math.isfinite(val):
                return done(INFEASIBLE, None, math.inf)
            return done(OPTIMAL, a, val)

        search = BudgetSearch(
            problem, eng, gap=options["gap"], deadline=deadline,
            max_branch_nodes=options["max_branch_nodes"],
            root_iterations=options["root_iterations"],
            node_iterations=options["node_iterations"], fixing=options["fixing"],
            merge_seconds=_merge_seconds(deadline) if options["merge"] else 0.0,
            callback=options["callback"], root_only=options["shrink"],
            solve_sub=lambda sub, seconds: DPSolver().solve(sub, time_limit=seconds,
                                                            merge=False))
        warm = options["warm_start"]
        if warm is not None:
            search.offer(problem.check_assignment(warm))
        try:
            least, argmins = search.least_memory()
        except OutOfTime:
            return out_of_time(search.best_a)
        stats["least_peak_memory"] = least
        budget = search.budget
        if not np.all(np.isfinite(least)) or np.any(least > budget):
            stats.update(dp_runs=search.dp_runs, lagrangian_iterations=0, branch_nodes=0)
            return done(INFEASIBLE, None, math.inf)
        for a in argmins:
            search.offer(a)                # D == 1: the least-memory assignment is feasible
        # Drop configurations that cannot fit even with every other node at its least memory.
        allowed0 = [np.isfinite(c) for c in problem.node_costs]
        if not search.tighten(allowed0):
            stats.update(dp_runs=search.dp_runs, lagrangian_iterations=0, branch_nodes=0)
            return done(INFEASIBLE, None, math.inf)
        search.reduce_devices(allowed0)
        for a in argmins:
            search.local_search(a, allowed0)
        status, bound, n_bb = search.run(allowed0)
        if options["shrink"] and status == FEASIBLE and search.root_allowed is not None \
                and not search.out_of_time():
            status, bound, best = self._shrunk(problem, search, options, deadline, stats,
                                               bound)
            search.best_a = best if best is not None else search.best_a
        stats.update(dp_runs=search.dp_runs, lagrangian_iterations=search.lagrangian_iterations,
                     branch_nodes=n_bb, fixed_configs=search.fixed,
                     local_searches=search.local_searches, merges=search.merges,
                     binding_devices=[int(d) for d in search.active])
        if status in (FEASIBLE, UNKNOWN) and search.out_of_time():
            stats["time_limit_reached"] = True
        return done(status, search.best_a, bound)

    @staticmethod
    def _window(problem: Problem, options: dict[str, Any], deadline: Deadline, stats: dict,
                done, out_of_time) -> SolveResult:
        """An interval budget: the window search (:mod:`.window`), exact."""
        width = window_width(problem)
        stats.update(window_width=width, window_table=window_table_size(problem, width))
        warm = options["warm_start"]
        try:
            cost, a = window_search(problem, deadline=deadline,
                                    max_table_size=options["max_table_size"])
        except OutOfTime:
            best = None
            if warm is not None:
                w = problem.check_assignment(warm)
                best = w if problem.evaluate(w).feasible else None
            return out_of_time(best)
        if a is None:
            return done(INFEASIBLE, None, math.inf)
        return done(OPTIMAL, a, cost)

    def _shrunk(self, problem: Problem, search: BudgetSearch, options: dict[str, Any],
                deadline: Deadline, stats: dict, root_bound: float
                ) -> tuple[str, float, np.ndarray | None]:
        """Search the problem restricted to the configurations the root's reduced-cost
        fixing left (exact: a removed configuration is in no assignment cheaper than the
        root's prune level, so the optimum is the better of the restricted optimum and the
        incumbent; a bound is the smaller of the restricted bound and that level)."""
        keep = [np.nonzero(al)[0] for al in search.root_allowed]
        stats["shrunk_configs"] = int(sum(k.size for k in keep))
        sub = Problem([c[k] for c, k in zip(problem.node_costs, keep)], problem.edges,
                      [t[np.ix_(keep[int(u)], keep[int(w)])]
                       for (u, w), t in zip(problem.edges, problem.edge_costs)],
                      memory=[m[k] for m, k in zip(problem.memory, keep)],
                      memory_limit=problem.memory_limit,
                      forbidden_cost=problem.forbidden_cost)
        inc, inc_f = search.best_a, search.best_f
        warm = None
        if inc is not None and all(np.isin(inc[v], keep[v]) for v in range(problem.n_nodes)):
            warm = np.array([int(np.searchsorted(keep[v], inc[v]))
                             for v in range(problem.n_nodes)])
        sub_opts = {k: options[k] for k in ("eliminations", "ordering", "max_table_size",
                                            "max_branch_nodes", "root_iterations",
                                            "node_iterations", "fixing", "merge", "gap")}
        if search.active.size == 1:
            # one binding device: the exact Pareto search over what fixing left
            try:
                pr = pareto_search(sub, int(search.active[0]), float(search.budget[0]),
                                   upper=inc_f, lam=float(search.root_lam[0])
                                   if search.root_lam.size else 0.0, deadline=deadline)
            except OutOfTime:
                pr = None
                stats["pareto"] = "out of time"
            if pr is not None:
                stats["pareto_points"] = pr.points
                best, best_f = inc, inc_f
                if pr.assignment is not None:
                    a = np.array([keep[v][i] for v, i in enumerate(pr.assignment)],
                                 dtype=np.int64)
                    ev = problem.evaluate(a)
                    if ev.feasible and ev.cost < best_f:
                        best, best_f = a, float(ev.cost)
                stats["shrunk_status"] = "pareto: exact"
                if best is not None:
                    return OPTIMAL, best_f, best
                return INFEASIBLE, math.inf, None
            elif "pareto" not in stats:
                stats["pareto"] = "not applicable or too many points"
        left = deadline.left()
        if left is not None and left < 0.01:
            stats["time_limit_reached"] = True
            return (FEASIBLE if inc is not None else UNKNOWN), root_bound, inc
        r = DPSolver().solve(sub, time_limit=left, warm_start=warm, shrink=False,
                             callback=options["callback"], **sub_opts)
        stats["shrunk_status"] = r.status
        for key in ("branch_nodes", "dp_runs", "fixed_configs"):
            stats[f"shrunk_{key}"] = r.stats.get(key)
        best, best_f = inc, inc_f
        if r.assignment is not None:
            a = np.array([keep[v][i] for v, i in enumerate(r.assignment)], dtype=np.int64)
            if r.objective < best_f:
                best, best_f = a, float(problem.evaluate(a).cost)
        if best is None:
            if r.status == INFEASIBLE:
                return INFEASIBLE, math.inf, None
            return UNKNOWN, r.bound, None
        level = search.root_level            # what the fixing removed costs at least this
        if r.status in (OPTIMAL, INFEASIBLE):
            bound = min(r.objective if r.status == OPTIMAL else math.inf, level)
        else:
            bound = min(r.bound, level)
        # the prune level sits a relative 1e-10 below the incumbent (the search's tolerance)
        if best_f - bound <= max(1e-9 * abs(best_f), options["gap"] * abs(best_f)):
            return OPTIMAL, best_f, best
        return FEASIBLE, bound, best
