"""The interface every solver backend implements (the way cvxpy's solver interfaces are built).

A backend is a thin adapter. It declares its name, the package it needs, its
:class:`Capabilities` and its own :class:`Option`\\ s; :meth:`Solver.solve` is a template
method that owns the flow every backend shares:

1. validate the options, the common ones (:data:`COMMON_OPTIONS`) and the backend's own, in
   one place (an unknown option or a bad value raises
   :class:`~milp_parallel.errors.InvalidOptionError`);
2. check that the backend accepts the problem (:meth:`Solver.accepts`, read from the declared
   capabilities; :class:`~milp_parallel.errors.UnsupportedProblemError` otherwise);
3. start the :class:`~milp_parallel.solvers.options.Deadline` of ``time_limit``;
4. replace forbidden (``>= 1e18``) entries by the lexicographic marker
   (:mod:`~milp_parallel.solvers.forbidden`), so no backend adds one to anything;
5. call the backend's :meth:`Solver._solve`, which returns a
   :class:`~milp_parallel.solvers.result.SolveResult` in the one status vocabulary, and
   re-evaluate its answer on the original problem.

``auto`` and :func:`~milp_parallel.solve` read the same :meth:`Solver.accepts`.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import InvalidAssignmentError, InvalidOptionError, UnsupportedProblemError
from ..problem import Problem
from .forbidden import lexicographic, restore
from .options import Deadline, validate_gap, validate_threads, validate_time_limit
from .result import SolveResult

__all__ = ["Capabilities", "Option", "Solver", "COMMON_OPTIONS", "check_bool", "check_int",
           "check_number", "check_choice"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- options
@dataclass(frozen=True)
class Option:
    """One option a backend accepts.

    Attributes
    ----------
    name : str
    default : Any
        The value when the option is not given (or given as ``None``).
    check : callable
        ``check(value) -> normalised value``; raises
        :class:`~milp_parallel.errors.InvalidOptionError` for a bad value.
    doc : str
        One line for error messages and documentation.
    """

    name: str
    default: Any
    check: Callable[[Any], Any]
    doc: str = ""


def check_bool(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise InvalidOptionError(f"{name} must be True or False, got {value!r}")
    return check


def check_int(name: str, lo: int = 0) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise InvalidOptionError(f"{name} must be a whole number >= {lo}, got {value!r}")
        return int(value)
    return check


def check_number(name: str, lo: float = 0.0, strict: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        ok = not isinstance(value, bool) and isinstance(value, (int, float, np.number))
        if ok:
            x = float(value)
            ok = np.isfinite(x) and (x > lo if strict else x >= lo)
        if not ok:
            raise InvalidOptionError(f"{name} must be a finite number {'>' if strict else '>='}"
                                     f" {lo:g}, got {value!r}")
        return x
    return check


def check_choice(name: str, choices: tuple) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in choices:
            raise InvalidOptionError(f"{name} must be one of {', '.join(map(repr, choices))}; "
                                     f"got {value!r}")
        return value
    return check


def _check_warm_start(value: Any) -> Any:
    try:
        a = np.asarray(value)
    except Exception:                                   # noqa: BLE001 - any bad object
        a = None
    if a is None or a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise InvalidOptionError("warm_start must be one configuration index per node (a "
                                 f"sequence of whole numbers), got {value!r}")
    return a.astype(np.int64)


def _check_callback(value: Any) -> Any:
    if not callable(value):
        raise InvalidOptionError(f"callback must be callable as callback(progress), got "
                                 f"{value!r}")
    return value


#: Options every backend accepts. A backend whose capabilities say it cannot use one
#: (``threads`` on a single-threaded search, ``gap`` on enumeration) notes that it was ignored
#: in ``stats["ignored_options"]`` rather than failing, so one sweep can pass the same options
#: to every backend.
COMMON_OPTIONS: tuple[Option, ...] = (
    Option("time_limit", None, validate_time_limit, "seconds for the whole solve (None: none)"),
    Option("gap", 0.0, validate_gap, "relative gap at which to stop (0: prove the optimum)"),
    Option("threads", None, validate_threads, "solver threads (None: the solver's default)"),
    Option("verbose", False, check_bool("verbose"), "log the solver's own output"),
    Option("warm_start", None, _check_warm_start, "an assignment to start from"),
    Option("callback", None, _check_callback,
           "called with a Progress (seconds, objective, bound) as the search improves"),
)


# ---------------------------------------------------------------------- capabilities
@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; :meth:`Solver.accepts` reads it.

    Attributes
    ----------
    exact : bool
        Proves optimality (given time).
    memory_all_live : bool
        Handles a memory budget with every node live at once.
    memory_intervals : bool
        Handles a budget on memory over liveness intervals (the IOPDDL model).
    time_limit : bool
        Honours ``time_limit`` (returning ``feasible``/``unknown`` when it runs out).
    threads : bool
        Uses ``threads``.
    gap : bool
        Can stop at a relative ``gap``.
    warm_start : bool
        Uses ``warm_start``.
    """

    exact: bool = True
    memory_all_live: bool = True
    memory_intervals: bool = True
    time_limit: bool = True
    threads: bool = True
    gap: bool = True
    warm_start: bool = True


# ---------------------------------------------------------------------- the template
class Solver:
    """Base class of solver backends.

    Subclasses set ``name``, ``package`` (the pip package that provides it, or ``None``),
    ``module`` (the import that must succeed), ``capabilities`` and ``options`` (their own
    :class:`Option` tuple), and implement :meth:`_solve`.
    """

    name: str = ""
    package: str | None = None
    module: str | None = None
    capabilities: Capabilities = Capabilities()
    options: tuple[Option, ...] = ()

    def available(self) -> bool:
        """Whether the package behind this backend can be imported."""
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def accepts(self, problem: Problem) -> str | None:
        """``None`` when this backend can solve ``problem``, else the reason it cannot."""
        if problem.has_budget:
            if problem.intervals is not None and not self.capabilities.memory_intervals:
                return (f"{self.name} does not handle a memory budget over liveness "
                        "intervals (the IOPDDL memory model); use solver='auto', 'highs', "
                        "'cbc' or 'cpsat', or drop the budget with "
                        "problem.with_memory_limit(None)")
            if problem.intervals is None and not self.capabilities.memory_all_live:
                return f"{self.name} does not handle a memory budget"
        return None

    def parse_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option of this backend, validated, with defaults filled in.

        Raises
        ------
        InvalidOptionError
            For an unknown option (lists the known ones) or a bad value.
        """
        declared = {o.name: o for o in COMMON_OPTIONS + tuple(self.options)}
        unknown = sorted(set(options) - set(declared))
        if unknown:
            raise InvalidOptionError(
                f"{self.name}: unknown option(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(declared))}")
        out: dict[str, Any] = {}
        for name, opt in declared.items():
            value = options.get(name)
            out[name] = opt.default if value is None else opt.check(value)
        return out

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        """Validate, check the problem, start the clock, solve.

        Raises
        ------
        InvalidOptionError
            For an unknown option or a bad value.
        UnsupportedProblemError
            When this backend cannot handle the problem (says which backend can).
        """
        if not isinstance(problem, Problem):
            raise TypeError(f"{self.name}: expected a Problem, got {type(problem).__name__}")
        opts = self.parse_options(options)
        if opts["warm_start"] is not None:
            try:
                problem.check_assignment(opts["warm_start"])
            except InvalidAssignmentError as exc:
                raise InvalidAssignmentError(f"{self.name}: warm_start does not fit the "
                                             f"problem: {exc}") from None
        why = self.accepts(problem)
        if why is not None:
            raise UnsupportedProblemError(why)
        ignored = [n for n in ("threads", "gap", "warm_start")
                   if not getattr(self.capabilities, n) and n in options
                   and options[n] is not None and options[n] != 0]
        if ignored:
            logger.info("%s: option(s) %s do not apply to this solver and were ignored",
                        self.name, ", ".join(ignored))
        deadline = Deadline(opts["time_limit"])
        lex = lexicographic(problem)
        result = restore(lex, self._solve(lex.problem, opts, deadline))
        if ignored:
            result.stats["ignored_options"] = ignored
        return result

    def _solve(self, problem: Problem, options: dict[str, Any],
               deadline: Deadline) -> SolveResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} available={self.available()}>"
