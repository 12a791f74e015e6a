"""The presolve steps that use the exact graph search (``presolve="dp"`` only).

They make a MILP backend faster on some problems and its answer no longer independent of
the exact search, so they live apart from :mod:`.presolve`, which imports this module only
when one of them is asked for (:data:`.presolve.DP_REDUCTIONS`), and a result that ran them
says so (``stats["used_exact_search"]``): the cross-check then uses another MILP backend.

``dp_incumbent``
    The exact search's optimum with memory ignored becomes the incumbent ``U`` when it is
    feasible and cheaper.
``dp_marginal``
    Configuration ``c`` of ``v`` goes when the least cost of any assignment with ``a_v = c``
    (memory ignored, the exact min-marginal) exceeds ``U``.

Both take the presolve's working state and change it in place.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from ..dp.engine import Engine, OutOfTime, solve_unconstrained

if TYPE_CHECKING:
    from .presolve import _State

__all__ = ["dp_incumbent", "dp_marginal"]

logger = logging.getLogger(__name__)


def dp_incumbent(state: _State) -> None:
    """Take the exact unconstrained optimum as the incumbent when it is feasible and better."""
    problem = state.p
    try:
        a, _ = solve_unconstrained(problem, deadline=state.deadline)
    except OutOfTime:
        return
    except Exception as exc:  # noqa: BLE001 - an optimisation only (tables too large)
        logger.info("dp_incumbent skipped: %s", exc)
        return
    ev = problem.evaluate(a)
    if ev.feasible and ev.cost < state.U:
        state.warm, state.U = a.copy(), ev.cost
        state.stats["warm_start_source"] = "dp"


def dp_marginal(state: _State) -> bool:
    """Remove configurations whose exact min-marginal (memory ignored) exceeds ``U``.

    Runs on the untouched problem (original indices), before any other step. Returns whether
    something was removed.
    """
    problem = state.p
    try:
        res = Engine(problem, deadline=state.deadline).min_marginals(
            problem.node_costs, deadline=state.deadline)
    except OutOfTime:
        return False
    except Exception as exc:  # noqa: BLE001 - an optimisation only (tables too large)
        logger.info("dp_marginal step skipped: %s", exc)
        return False
    if res is None:
        return False
    value, _, mm = res
    margin = 1e-9 * max(abs(state.U), abs(value) if math.isfinite(value) else 0.0) + 1e-12
    changed = False
    state.stats.setdefault("dp_marginal_configs", 0)
    for v in range(problem.n_nodes):
        if not state.free(v):
            continue
        ok = np.asarray(mm[v])[state.conf[v]] <= state.U + margin
        changed |= state.keep(v, ok, "dp_marginal_configs")
        if state.infeasible:
            return True
    return changed
