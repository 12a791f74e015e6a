"""milp_parallel: optimal layer-wise parallelization of neural-network training.

For each layer, pick how its tensors are split over the devices, by solving a mixed-integer
program (CBC, HiGHS, CP-SAT) that an exact graph search cross-checks.

The public surface, in the order data flows::

    models.get("resnet50")              -> LayerGraph      (graph.py, models/, importers/)
    clusters.get("abci", nodes=4)       -> Topology        (topology.py, clusters.py)
    build_problem(graph, topology)      -> Problem         (configs.py, costs.py, build.py)
    solve_problem(problem, "highs")     -> SolveResult     (solvers/)
    solve("resnet50", "abci", devices=16) -> Plan          (plan.py: all of the above)

Examples
--------
>>> import milp_parallel as mp
>>> plan = mp.solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
>>> plan.status
'optimal'
"""

from . import clusters, models, oracle, paradl
from .build import BuiltProblem, build, build_problem
from .configs import ConfigOptions, config_label, enumerate_configs
from .costs import CostModel
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .graph import Layer, LayerGraph
from .importers import from_onnx, from_torch
from .oracle import paradl_summary, project, rank
from .plan import Baseline, CrossCheck, LayerChoice, Plan, make_problem, solve
from .problem import Evaluation, Problem
from .simulate import SimulationResult, simulate
from .profile import ProfileTable, profile_layers, profile_model
from .solvers import SolveResult, available_solvers, solve_problem, solver_names
from .solvers.dp import LagrangianBound, dp_lower_bound, solve_unconstrained
from .topology import Device, Level, Topology

__version__ = "0.1.0"

__all__ = [
    # the main entry points
    "solve", "solve_problem", "make_problem", "Plan", "LayerChoice", "Baseline", "CrossCheck",
    "simulate", "SimulationResult",
    # models and clusters
    "models", "clusters", "Layer", "LayerGraph", "from_onnx", "from_torch",
    "Device", "Level", "Topology",
    # problem building
    "ConfigOptions", "enumerate_configs", "config_label", "CostModel", "build", "build_problem",
    "BuiltProblem", "ProfileTable", "profile_layers", "profile_model",
    # the solver-facing core
    "Problem", "Evaluation", "SolveResult", "solver_names", "available_solvers",
    "solve_unconstrained", "dp_lower_bound", "LagrangianBound",
    # the oracle
    "oracle", "paradl", "project", "rank", "paradl_summary",
    "__version__", *_errors_all,
]
