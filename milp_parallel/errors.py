"""Typed errors of milp_parallel.

Every error the library raises on purpose derives from :class:`MilpParallelError`, so a
script can catch them all with one ``except``; each subclass names one kind of problem, and
each message says what was wrong, where, and how to fix it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "MilpParallelError",
    "InvalidProblemError",
    "InvalidGraphError",
    "InvalidTopologyError",
    "InvalidAssignmentError",
    "InvalidOptionError",
    "UnknownOptionError",
    "FormatError",
    "FileWriteError",
    "SolverError",
    "SolverUnavailableError",
    "ProblemTooLargeError",
    "UnsupportedProblemError",
    "InfeasibleError",
    "CrossCheckError",
    "UnknownNameError",
    "MissingDependencyError",
    "PlanMismatchError",
]


class MilpParallelError(Exception):
    """Base class of every error raised by milp_parallel on purpose."""


class InvalidProblemError(MilpParallelError, ValueError):
    """A :class:`~milp_parallel.Problem` was given inconsistent or invalid tables."""


class InvalidGraphError(MilpParallelError, ValueError):
    """A layer graph is malformed: a cycle, an unknown op, a shape mismatch, ..."""


class InvalidTopologyError(MilpParallelError, ValueError):
    """A cluster description is malformed: non-positive bandwidth, memory, speed, ..."""


class InvalidAssignmentError(MilpParallelError, ValueError):
    """An assignment has the wrong length or a configuration index out of range."""


class InvalidOptionError(MilpParallelError, ValueError):
    """An option has a bad value (``time_limit``, ``gap``, ``threads``, ... or a solver's own).

    The message names the option, the value given and what is allowed. One type for every
    entry point (``solve``, ``solve_problem``, the command line, sweep files).
    """


class UnknownOptionError(InvalidOptionError, TypeError):
    """An option (keyword argument) that the function does not take; lists the known ones.

    Also a :class:`TypeError`, as Python's own unknown-keyword error is.
    """


class FormatError(MilpParallelError, ValueError):
    """A file is not in the expected format (names the file and what is wrong)."""


class FileWriteError(FormatError, OSError):
    """A file cannot be written where asked: the path is a directory, its folder is missing,
    there is no permission, the disk is full (names the path and what to do).

    A :class:`FormatError` (a bad file argument: exit 2 on the command line) and an
    :class:`OSError`, as the raw error it replaces was.
    """


class UnknownNameError(MilpParallelError, KeyError):
    """A model, cluster, solver or strategy name is not known (lists the known ones)."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class SolverError(MilpParallelError, RuntimeError):
    """A solver failed in a way that is not the problem's fault."""


class SolverUnavailableError(SolverError):
    """The package behind a solver is not installed (names the package to install)."""


class ProblemTooLargeError(MilpParallelError, ValueError):
    """A solver refuses an instance beyond its size limit (says which limit and what to use)."""


class UnsupportedProblemError(MilpParallelError, ValueError):
    """A solver cannot handle a feature of this problem (e.g. a memory model)."""


class InfeasibleError(MilpParallelError):
    """No assignment satisfies the memory budget.

    Attributes
    ----------
    least_memory_bytes : float or None
        The least peak memory any assignment needs (on the binding device), when known.
    budget_bytes : float or None
        The budget that could not be met.
    """

    def __init__(self, message: str, *, least_memory_bytes=None, budget_bytes=None):
        super().__init__(message)
        self.least_memory_bytes = least_memory_bytes
        self.budget_bytes = budget_bytes


class CrossCheckError(MilpParallelError):
    """A solver's optimum disagrees with the exact search's.

    Attributes
    ----------
    solver_assignment, exact_assignment : numpy.ndarray
    solver_objective, exact_objective : float
    """

    def __init__(self, message: str, *, solver_assignment=None, exact_assignment=None,
                 solver_objective=None, exact_objective=None):
        super().__init__(message)
        self.solver_assignment = solver_assignment
        self.exact_assignment = exact_assignment
        self.solver_objective = solver_objective
        self.exact_objective = exact_objective


class MissingDependencyError(MilpParallelError, ImportError):
    """An optional package needed by a feature is not installed.

    The message names the package and the ``pip install 'milp_parallel[extra]'`` command that
    installs it. It is an :class:`ImportError`, so ``except ImportError`` catches it too.
    """


class PlanMismatchError(MilpParallelError, ValueError):
    """A plan does not fit the program it is applied to: a layer of the plan the module does
    not have (or the reverse), a shape or batch that differs from the plan's, a world size
    other than the plan's device count, or a configuration the runtime cannot run (the message
    names the layer and what to change)."""


# not in __all__: a helper of the package's modules, not part of the surface
def require(package: str, extra: str, feature: str) -> ModuleType:
    """Import ``package`` or raise :class:`MissingDependencyError`.

    Parameters
    ----------
    package : str
        The module to import, e.g. ``"onnx"``.
    extra : str
        The milp_parallel extra that installs it, e.g. ``"onnx"``.
    feature : str
        What needs it, for the message, e.g. ``"from_onnx()"``.

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    MissingDependencyError
        When ``package`` cannot be imported.
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the '{package}' package, which is not installed ({exc}); "
            f"install it with: pip install 'milp_parallel[{extra}]'") from exc
