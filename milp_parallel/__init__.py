"""milp_parallel: optimal layer-wise parallelization of neural-network training.

For each layer, pick how its tensors are split over the devices, by solving a mixed-integer
program (CBC, HiGHS, CP-SAT) that an exact graph search cross-checks.

The public surface, in the order data flows (what the README teaches)::

    models.get("resnet50")              -> LayerGraph      (graph.py, models/, importers/)
    clusters.get("abci", nodes=4)       -> Topology        (topology.py, clusters.py)
    build_problem(graph, topology)      -> Problem         (configs.py, costs.py, build.py)
    solve_problem(problem, "highs")     -> SolveResult     (solvers/)
    solve("resnet50", "abci", devices=16) -> Plan          (plan.py: all of the above)
    oracle.project(...), oracle.rank(...)                  (oracle.py, paradl.py)

and the typed errors (:mod:`milp_parallel.errors`). Everything else lives in its module
(``milp_parallel.costs.CostModel``, ``milp_parallel.configs.ConfigOptions``, ...); the names
that used to be exported here too still work, with a :class:`DeprecationWarning` naming their
module.

Examples
--------
>>> import milp_parallel as mp
>>> plan = mp.solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
>>> plan.status
'optimal'
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import _moved, models, oracle  # _moved first: old module paths, one release
from ._version import __version__
from .costs.build import build_problem
from .errors import *  # noqa: F403 - the typed errors are part of the top-level surface
from .errors import __all__ as _errors_all
from .graph import LayerGraph
from .importers import from_onnx, from_torch
from .machine import clusters
from .machine.topology import Topology
from .measure.profile import profile_model
from .plan import Plan, make_problem, simulate, solve
from .problem import Problem
from .solvers import SolveResult, available_solvers, solve_problem, solver_names

__all__ = [
    # the main entry point and its result
    "solve", "Plan", "make_problem", "simulate",
    # the pieces, in the order data flows
    "models", "clusters", "LayerGraph", "from_onnx", "from_torch", "from_hf", "Topology",  # noqa: F405 - from_hf is lazy (__getattr__)
    "build_problem", "Problem", "solve_problem", "SolveResult", "solver_names",
    "available_solvers", "oracle", "profile_model",
    "__version__", *_errors_all,
]

#: Names exported here before the public surface was narrowed: name -> the module that has
#: it. They still resolve, with a DeprecationWarning.
_MOVED = {
    "LayerChoice": "plan", "Baseline": "plan", "CrossCheck": "plan",
    "Layer": "graph", "Device": "topology", "Level": "topology",
    "ConfigOptions": "configs", "enumerate_configs": "configs", "config_label": "configs",
    "CostModel": "costs", "build": "build", "BuiltProblem": "build",
    "ProfileTable": "profile", "profile_layers": "profile",
    "Evaluation": "problem",
    "solve_unconstrained": "solvers.dp", "dp_lower_bound": "solvers.dp",
    "LagrangianBound": "solvers.dp",
    "project": "oracle", "rank": "oracle", "paradl_summary": "oracle",
}


def __getattr__(name: str) -> Any:
    if name in ("parallelize", "verify_plan", "PlanAudit"):  # lazily: no torch at import
        return getattr(importlib.import_module(f"{__name__}.runtime"), name)
    if name == "from_hf":  # lazily: importing the package must not import torch/transformers
        return importlib.import_module(f"{__name__}.importers.hf").from_hf
    if f"{__name__}.{name}" in _moved.MOVED_MODULES:      # a module that moved into a folder
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _MOVED:
        raise AttributeError(f"module 'milp_parallel' has no attribute {name!r}")
    where = _MOVED[name]
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    warnings.warn(f"milp_parallel.{name} is deprecated at the top level: use "
                  f"milp_parallel.{where}.{name}",
                  DeprecationWarning, stacklevel=2)
    return value

