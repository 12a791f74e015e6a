"""``"portfolio"``: the exact path and the penalty path side by side (issue 25.1).

For interval budgets where ``auto`` would run a MILP backend (the IOPDDL instances:
contraction and row generation, which on K, M, R, S, T, U does not finish a round), two
processes (``fork``) solve the same problem with the same deadline: the exact backend that
:func:`~milp_parallel.solvers.auto.choose_exact` picks, and ``"penalty"``. Each returns
plain arrays through a pipe; the better answer (fewest forbidden entries, then cost) is
returned, ``optimal`` only when the exact side proved it, with the better bound of the two.
A side that does not answer by the deadline (plus :data:`GRACE`) is terminated, and so is
the penalty side as soon as the exact side proves optimality or infeasibility.

``threads=1`` (or a machine of one core, ``threads`` unset) runs the exact backend alone,
in this process: what ``auto`` did before.

May import: ``problem``, ``solvers.base``, ``solvers.options``, ``solvers.result``,
``solvers.registry``, ``solvers.auto``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
from typing import Any

import numpy as np

from ...problem import Problem
from ..base import Capabilities, Solver
from ..options import Deadline
from ..result import (
    FEASIBLE,
    INFEASIBLE,
    OPTIMAL,
    UNKNOWN,
    Incumbent,
    SolveResult,
    best_incumbent,
    relative_gap,
)

__all__ = ["PortfolioSolver", "GRACE", "START_SECONDS"]

logger = logging.getLogger(__name__)

#: Seconds a side may overrun the deadline before it is terminated (and its answer lost).
GRACE = 2.0
#: Seconds kept back from each side's limit for starting the process and returning.
START_SECONDS = 0.5


def _child(conn, name: str, problem: Problem, options: dict) -> None:
    from ..registry import get_solver
    try:
        r = get_solver(name).solve(problem, **options)
        conn.send({"assignment": None if r.assignment is None else np.asarray(r.assignment),
                   "status": r.status, "bound": float(r.bound), "stats": dict(r.stats)})
    except Exception as exc:                    # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


class PortfolioSolver(Solver):
    name = "portfolio"
    package = None
    module = None
    capabilities = Capabilities(exact=True, gap=True, warm_start=True)
    options = ()

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        """Validate as every backend does, then run the exact side alone or both sides."""
        from ..auto import choose_exact
        from ..registry import get_solver
        if not isinstance(problem, Problem):
            raise TypeError(f"{self.name}: expected a Problem, got {type(problem).__name__}")
        opts = self.parse_options(options)
        deadline = Deadline(opts["time_limit"])
        exact = choose_exact(problem)
        threads = opts["threads"] or (os.cpu_count() or 1)
        both = (problem.has_budget and problem.intervals is not None and threads >= 2
                and get_solver("penalty").accepts(problem) is None)
        if not both:
            return dataclasses.replace(get_solver(exact).solve(problem, **options),
                                       solver=self.name)
        left = deadline.left()
        limit = None if left is None else max(0.1, left - START_SECONDS)
        sub = {k: v for k, v in options.items() if k not in ("callback", "threads")}
        sub["time_limit"] = limit
        sides = {exact: {**sub, "threads": max(1, threads // 2)},
                 "penalty": {k: v for k, v in sub.items() if k != "gap"}}
        ctx = mp.get_context("fork")
        procs = {}
        for name, o in sides.items():
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(send, name, problem, o), daemon=True)
            p.start()
            send.close()
            procs[name] = (p, recv)
        got: dict[str, dict] = {}
        waiting = {recv: name for name, (_, recv) in procs.items()}
        while waiting:
            left = deadline.left()
            ready = mp_connection.wait(list(waiting), None if left is None else left + GRACE)
            if not ready:
                break
            for recv in ready:
                name = waiting.pop(recv)
                try:
                    got[name] = recv.recv()
                except EOFError:
                    continue
            if got.get(exact, {}).get("status") in (OPTIMAL, INFEASIBLE):
                break                           # proved: the penalty side cannot do better
        for name, (p, _) in procs.items():
            p.join(timeout=0.1 if name in got else 0.5)
            if p.is_alive():
                logger.info("portfolio: stopping %s", name)
                p.terminate()
                p.join()
        return self._combine(problem, exact, got, deadline)

    def _combine(self, problem: Problem, exact: str, got: dict, deadline: Deadline
                 ) -> SolveResult:
        errors = {n: g["error"] for n, g in got.items() if "error" in g}
        ok = {n: g for n, g in got.items() if "error" not in g}
        if exact in errors and not ok:
            raise RuntimeError(f"portfolio: {errors}")
        incs = {n: Incumbent.of(problem, g["assignment"], n) for n, g in ok.items()}
        best = best_incumbent(incs.get(exact), incs.get("penalty"))
        bounds = [g["bound"] for g in ok.values() if g["status"] != INFEASIBLE]
        bound = max(bounds) if bounds else -math.inf
        if best is None:
            infeasible = any(g["status"] == INFEASIBLE for g in ok.values())
            stats = dict(ok[exact]["stats"]) if exact in ok else {}
            return SolveResult(None, math.nan, INFEASIBLE if infeasible else UNKNOWN,
                               math.inf if infeasible else bound, math.inf,
                               deadline.elapsed(), self.name, stats)
        src = best.source
        stats = dict(ok[src]["stats"])
        ev = problem.evaluate(best.assignment)
        proved = exact in ok and ok[exact]["status"] == OPTIMAL and \
            incs.get(exact) is not None and incs[exact].key == best.key
        bound = min(bound, float(ev.cost))
        status = OPTIMAL if proved else FEASIBLE
        gap = 0.0 if proved else relative_gap(float(ev.cost), bound)
        return SolveResult(best.assignment, float(ev.cost), status, float(ev.cost) if proved
                        else bound, gap, deadline.elapsed(), self.name, stats,
                        forbidden_entries=int(ev.forbidden_entries),
                        allowed_cost=float(ev.allowed_cost))
