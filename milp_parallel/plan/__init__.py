"""The plan stage: :func:`solve` a model on a cluster and get a :class:`Plan`.

=====================  ===================================================================
module                 what lives there
=====================  ===================================================================
:mod:`.planner`        ``solve``, ``make_problem``, ``explain``: the entry point
:mod:`.prepare`        one call's problem: inputs resolved, options checked, budget, layers
:mod:`.constraints`    ``fixed=`` / ``forbid=`` read against the built problem
:mod:`.result`         the values: ``Plan``, ``LayerChoice``, ``Baseline``, ``Explanation``
:mod:`.simulation`     ``simulate(plan)``: the step simulator run on a plan
:mod:`.crosscheck`     the second, independent proof of a plan's optimum
:mod:`.baselines`      the uniform strategies a plan is compared with
:mod:`.progress`       the one-line progress display of a long solve
=====================  ===================================================================

The plan stage may import every stage below it (inputs, graph, machine, costs, problem,
solvers); nothing below imports it.
"""

from __future__ import annotations

import warnings
from typing import Any

from .crosscheck import CROSS_CHECK_RTOL, CrossCheck
from .crosscheck import compare as cross_check_results
from .planner import MAX_RERANK, explain, make_problem, solve
from .result import (
    PLAN_FORMAT,
    PLAN_FORMAT_VERSION,
    Baseline,
    Explanation,
    LayerChange,
    LayerChoice,
    Plan,
    format_plan,
)
from .simulation import simulate

__all__ = ["solve", "make_problem", "explain", "simulate", "Plan", "LayerChoice", "Baseline",
           "CrossCheck", "Explanation", "LayerChange", "cross_check_results", "format_plan",
           "PLAN_FORMAT", "PLAN_FORMAT_VERSION", "CROSS_CHECK_RTOL", "MAX_RERANK"]

#: Names this module had before the plan stage became a folder: ``name -> (module, new name,
#: where to look now)``. They work one release, with a DeprecationWarning.
_MOVED = {
    "least_memory_bytes": ("milp_parallel.solvers.memory", "least_memory",
                           "milp_parallel.solvers.memory.least_memory (exact for intervals)"),
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'milp_parallel.plan' has no attribute {name!r}")
    import importlib
    module, attr, where = _MOVED[name]
    warnings.warn(f"milp_parallel.plan.{name} is deprecated: use {where}",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), attr)
