"""milp_parallel: optimal layer-wise parallelization of neural-network training.

For each layer, pick how its tensors are split over the devices, by solving a mixed-integer
program (CBC, HiGHS, CP-SAT) that an exact graph search cross-checks.
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .problem import Evaluation, Problem
from .solvers import SolveResult, solve_problem

__version__ = "0.1.0"

__all__ = ["Problem", "Evaluation", "SolveResult", "solve_problem", "__version__",
           *_errors_all]
