"""The cross-check: two independent proofs of one optimum, compared.

The product rests on two separate computations (DESIGN.md, "Independence"): a MILP backend
proves its answer with its own solver, and the exact graph search (``dp``) proves it
separately. :func:`cross_check` runs the *other* method on the same problem and
:func:`compare` judges the two answers:

* the main solver is a MILP backend (``highs``, ``cbc``, ``cpsat``) or ``brute``: the check
  is ``dp``;
* the main solver is ``dp``, or a backend that used the exact search (``presolve="dp"``): the
  check is a MILP backend on its independent path (``presolve="milp"``).

Outcomes (:class:`CrossCheck`):

``agreed``
    Both proved the same optimum (within :data:`CROSS_CHECK_RTOL`, relative), or both proved
    the problem infeasible.
``bounded``
    One of them did not prove its answer, and what is known is consistent: the proved
    optimum lies within the other's bound and objective (the reason says how far).
``not_run``
    No check was possible (turned off, no checker installed, the checker refused the
    instance or ran out of time without an answer); the reason says why.

A contradiction is never an outcome: it raises :class:`~milp_parallel.errors.CrossCheckError`
with both assignments and objectives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import (
    CrossCheckError,
    ProblemTooLargeError,
    SolverUnavailableError,
    UnsupportedProblemError,
)
from ..problem import Problem
from ..solvers import MILP_SOLVERS, available_solvers, get_solver, solve_problem
from ..solvers.result import INFEASIBLE, OPTIMAL, SolveResult

__all__ = ["CrossCheck", "cross_check", "compare", "checker_for", "default_check_seconds",
           "CROSS_CHECK_RTOL",
           "AGREED", "BOUNDED", "NOT_RUN", "OUTCOMES"]

#: Relative tolerance of the cross-check: two proved optima must agree within it.
CROSS_CHECK_RTOL = 1e-6

AGREED = "agreed"
BOUNDED = "bounded"
NOT_RUN = "not_run"
OUTCOMES = (AGREED, BOUNDED, NOT_RUN)


@dataclass(frozen=True)
class CrossCheck:
    """The outcome of checking a solver's answer with an independent method.

    Attributes
    ----------
    outcome : str
        ``"agreed"``, ``"bounded"`` or ``"not_run"`` (see the module docstring).
    reason : str
        Why, in words (empty when agreed).
    checker : str or None
        The registry name of the method that checked (``None`` when none ran).
    checker_status : str or None
        Its status.
    checker_objective : float or None
        Its objective (``None`` without an assignment).
    checker_seconds : float or None
        Its wall-clock time.
    solver_seconds : float or None
        The main solver's wall-clock time, for the side-by-side.
    """

    outcome: str
    reason: str = ""
    checker: str | None = None
    checker_status: str | None = None
    checker_objective: float | None = None
    checker_seconds: float | None = None
    solver_seconds: float | None = None

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    @property
    def ran(self) -> bool:
        return self.outcome != NOT_RUN

    @property
    def agreed(self) -> bool:
        return self.outcome == AGREED

    @property
    def verdict(self) -> str:
        """One line: ``"agreed"``, ``"bounded: <reason>"`` or ``"not run: <reason>"``."""
        if self.outcome == AGREED:
            return "agreed"
        return f"{'not run' if self.outcome == NOT_RUN else 'bounded'}: {self.reason}"

    # The names of the first version (kept for scripts that read them).
    @property
    def exact_objective(self) -> float | None:
        return self.checker_objective

    @property
    def exact_seconds(self) -> float | None:
        return self.checker_seconds

    @property
    def exact_solver(self) -> str | None:
        return self.checker

    def to_dict(self) -> dict:
        """JSON-ready fields (with the one-line ``verdict`` for readers of the first
        version)."""
        return {"outcome": self.outcome, "reason": self.reason, "verdict": self.verdict,
                "checker": self.checker,
                "checker_status": self.checker_status,
                "checker_objective": self.checker_objective,
                "checker_seconds": self.checker_seconds,
                "solver_seconds": self.solver_seconds}

    @classmethod
    def from_dict(cls, data: Mapping) -> "CrossCheck":
        """Inverse of :meth:`to_dict`; also reads the first version's ``verdict`` form."""
        if "outcome" in data:
            return cls(**{k: data.get(k) for k in (
                "outcome", "reason", "checker", "checker_status", "checker_objective",
                "checker_seconds", "solver_seconds")})
        verdict = str(data.get("verdict", "not run: unknown"))
        outcome, _, reason = verdict.partition(":")
        outcome = {"not run": NOT_RUN, "bounded": BOUNDED}.get(outcome.strip(), AGREED)
        return cls(outcome, reason.strip(), data.get("exact_solver"), None,
                   data.get("exact_objective"), data.get("exact_seconds"), None)


def _rel_diff(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def compare(problem: Problem, result: SolveResult, check: SolveResult, *,
            rtol: float = CROSS_CHECK_RTOL) -> CrossCheck:
    """Judge a solver's result against an independent method's on the same problem.

    Both results are re-evaluated on ``problem`` (an objective that does not match its own
    assignment is a contradiction too). Rules:

    - both proved optimal: the objectives must agree within ``rtol`` (``agreed``);
    - both proved infeasible: ``agreed``; one proved infeasible while the other has an
      assignment: contradiction;
    - one proved optimal, the other not: the optimum must not exceed the other's objective
      nor lie below its proved bound (``bounded``, saying how far);
    - neither proved: ``not_run`` (nothing to compare), unless their answers contradict
      each other's bounds.

    Raises
    ------
    CrossCheckError
        On a contradiction; it carries both assignments and objectives.
    """
    def fail(why: str):
        raise CrossCheckError(
            f"cross-check failed: {why} (solver {result.solver!r}: status {result.status}, "
            f"objective {result.objective!r}, bound {result.bound!r}; checker "
            f"{check.solver!r}: status {check.status}, objective {check.objective!r}, bound "
            f"{check.bound!r})",
            solver_assignment=result.assignment, exact_assignment=check.assignment,
            solver_objective=result.objective, exact_objective=check.objective)

    done = dict(checker=check.solver, checker_status=check.status,
                checker_objective=None if check.assignment is None else float(check.objective),
                checker_seconds=float(check.seconds), solver_seconds=float(result.seconds))
    for r, who in ((result, "solver"), (check, "checker")):
        if r.assignment is not None:
            ev = problem.evaluate(r.assignment)
            if not ev.feasible:
                fail(f"the {who}'s assignment is not feasible (cost {ev.cost!r}, memory over "
                     "budget or a forbidden choice)")
            if _rel_diff(ev.cost, r.objective) > rtol:
                fail(f"the {who} reports objective {r.objective!r} but its assignment costs "
                     f"{ev.cost!r}")
    # Infeasibility.
    for a, b, who in ((result, check, "solver"), (check, result, "checker")):
        if a.status == INFEASIBLE and b.assignment is not None:
            fail(f"the {who} proved the problem infeasible, the other found an assignment")
    if result.status == INFEASIBLE and check.status == INFEASIBLE:
        return CrossCheck(AGREED, "", **done)
    # Bounds: nobody's proved bound may exceed anybody's feasible objective. With forbidden
    # entries the order is the key (forbidden entries, then the rest), not the plain sum: a
    # proved optimum's key may not exceed the other's.
    for a, b in ((result, check), (check, result)):
        if a.forbidden_entries or b.forbidden_entries:
            if a.status == OPTIMAL and b.assignment is not None and (
                    a.forbidden_entries > b.forbidden_entries
                    or (a.forbidden_entries == b.forbidden_entries
                        and a.allowed_cost > b.allowed_cost
                        + rtol * max(abs(b.allowed_cost), 1e-300))):
                fail(f"{a.solver!r} proved an optimum with key {a.key} above the key "
                     f"{b.key} of an assignment {b.solver!r} found")
            continue
        if b.assignment is not None and math.isfinite(a.bound) \
                and a.bound > b.objective + rtol * max(abs(b.objective), 1e-300):
            fail(f"{a.solver!r} proved a lower bound {a.bound!r} above the cost "
                 f"{b.objective!r} of an assignment {b.solver!r} found")
    if result.status == OPTIMAL and check.status == OPTIMAL:
        # lexicographic: the same count of forbidden (>= 1e18) entries, then the same cost
        if result.forbidden_entries != check.forbidden_entries:
            fail(f"the proved optima use {result.forbidden_entries} and "
                 f"{check.forbidden_entries} forbidden entries")
        d = _rel_diff(result.allowed_cost, check.allowed_cost)
        if d > rtol:
            fail(f"the proved optima differ by {d:.3g} (relative), above {rtol:g}")
        return CrossCheck(AGREED, "", **done)
    if result.status == INFEASIBLE or check.status == INFEASIBLE:
        who = result if result.status == INFEASIBLE else check
        other = check if who is result else result
        return CrossCheck(BOUNDED, f"{who.solver} proved infeasibility; {other.solver} ended "
                          f"{other.status} without an assignment", **done)
    if check.status == OPTIMAL:
        opt, other = float(check.objective), result
    elif result.status == OPTIMAL:
        opt, other = float(result.objective), check
    else:
        return CrossCheck(NOT_RUN, f"neither proved its answer ({result.solver} ended "
                          f"{result.status}, {check.solver} ended {check.status})", **done)
    if other.assignment is None:
        return CrossCheck(BOUNDED, f"{other.solver} found no assignment ({other.status}); the "
                          f"optimum proved by the other is {opt!r}", **done)
    if _rel_diff(float(other.objective), opt) <= rtol:
        how = "it equals the optimum the other proved"
    else:
        gap = (float(other.objective) / opt - 1) * 100 if opt else math.inf
        how = f"it is {gap:.3g}% above the optimum the other proved"
    return CrossCheck(BOUNDED, f"{other.solver} did not prove its answer ({other.status}); "
                      f"{how}", **done)


def default_check_seconds(solver_seconds: float) -> float:
    """The checker's time limit when none is given: 3x the main solver's time, at least 10 s.

    Examples
    --------
    >>> default_check_seconds(0.2), default_check_seconds(40.0)
    (10.0, 120.0)
    """
    return max(10.0, 3.0 * float(solver_seconds))


def checker_for(result: SolveResult, problem: Problem) -> str | None:
    """The registry name of the method independent of ``result``'s (``None``: none)."""
    used_dp = (result.solver == "dp" or result.stats.get("presolve") == "dp"
               or bool(result.stats.get("used_exact_search")))
    if not used_dp:
        return "dp" if get_solver("dp").accepts(problem) is None else None
    avail = set(available_solvers())
    for name in MILP_SOLVERS:
        if name in avail and get_solver(name).accepts(problem) is None:
            return name
    return None


def cross_check(problem: Problem, result: SolveResult, *, time_limit: float | None = None,
                checker: str | None = None, **options: Any
                ) -> tuple[CrossCheck, SolveResult | None]:
    """Run the independent method on ``problem`` and compare (see the module docstring).

    Parameters
    ----------
    problem : Problem
    result : SolveResult
        The main solver's result.
    time_limit : float, optional
        Seconds for the checker; default :func:`default_check_seconds` of the main solver's
        time (a check must not take hours where the main solver took seconds: without a
        proof in time it says ``bounded`` or ``not_run``).
    checker : str, optional
        Override the choice of :func:`checker_for` (it must be independent of ``result``).
    **options
        Passed to the checker.

    Returns
    -------
    tuple
        ``(CrossCheck, the checker's SolveResult or None)``.

    Raises
    ------
    CrossCheckError
        When the two contradict each other.
    """
    name = checker or checker_for(result, problem)
    if name is None:
        why = ("no MILP backend is installed to check the exact search (pip install "
               "highspy)") if result.solver == "dp" else (
               "the exact search does not handle this problem (a memory budget over liveness "
               "intervals)")
        return CrossCheck(NOT_RUN, why, solver_seconds=float(result.seconds)), None
    opts = dict(options)
    opts["time_limit"] = default_check_seconds(result.seconds) if time_limit is None \
        else time_limit
    if name in MILP_SOLVERS:
        opts["presolve"] = "milp"              # never lean on the exact search to check it
        opts.pop("reductions", None)           # (nor on a step of it named explicitly)
    try:
        check = solve_problem(problem, name, **opts)
    except (ProblemTooLargeError, UnsupportedProblemError, SolverUnavailableError) as exc:
        return CrossCheck(NOT_RUN, f"{name} cannot solve this instance ({exc})", name,
                          solver_seconds=float(result.seconds)), None
    return compare(problem, result, check), check
