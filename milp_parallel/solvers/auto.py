"""``solver="auto"``: pick a backend by committed evidence.

Each :class:`Rule` covers one kind of problem, lists the backends in the order to try (the
first available one that accepts the problem is used) and cites the rows of
``benchmarks/results/solver_scaling.csv`` (``python -m benchmarks.solver_scaling``; machine
and date in the file) that support the order; ``tests/test_auto.py`` checks that every cited
row exists and says what the rule claims. Change a rule only with a new measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem import Problem

__all__ = ["choose", "choose_exact", "Rule", "RULES", "PREFERENCE", "problem_kind",
           "EVIDENCE", "PORTFOLIO_EVIDENCE", "PORTFOLIO_BETTER"]

#: The committed measurement the rules cite (relative to the repository root).
EVIDENCE = "benchmarks/results/solver_scaling.csv"


@dataclass(frozen=True)
class Rule:
    """How ``auto`` chooses for one kind of problem.

    Attributes
    ----------
    kind : str
        ``"no_budget"``, ``"all_live_budget"`` or ``"interval_budget"``
        (:func:`problem_kind`).
    order : tuple of str
        Backends to try, best first.
    faster : tuple of (case, solver, than)
        Rows of :data:`EVIDENCE`: on ``case``, ``solver`` proved the optimum and was faster
        than ``than`` (or ``than`` did not prove it within the limit).
    why : str
    """

    kind: str
    order: tuple[str, ...]
    faster: tuple[tuple[str, str, str], ...]
    why: str


RULES: tuple[Rule, ...] = (
    Rule("no_budget", ("dp", "highs", "cbc", "cpsat"),
         (("resnet50-16", "dp", "highs"), ("resnet152-64", "dp", "highs"),
          ("densenet121-64", "dp", "highs"), ("inception_v3-64", "dp", "highs")),
         "the exact search's eliminations take milliseconds on the zoo's series-parallel "
         "graphs; the MILP backends prove the same optima through the LP dual in about a "
         "second"),
    Rule("all_live_budget", ("dp", "highs", "cbc", "cpsat"),
         (("resnet50-16+budget", "dp", "highs"), ("resnet101-16+budget", "dp", "highs"),
          ("resnet152-16+budget", "dp", "highs"), ("resnet34-64+budget", "dp", "highs"),
          ("resnet50-64+budget", "dp", "highs"), ("densenet121-64+budget", "dp", "highs")),
         "root reduced-cost fixing and the exact (cost, memory) Pareto search prove every "
         "zoo budget at 16 GPUs in seconds and at 64 in under a minute (bert_base at 64 is "
         "left with a 0.9% gap, HiGHS 1.7%); HiGHS is slower on every binding budget"),
    Rule("interval_budget", ("dp", "highs", "cbc", "cpsat"),
         (("chain-200x16", "dp", "highs"), ("chain-200x16", "dp", "cpsat"),
          ("iopddl-G", "cbc", "cpsat"), ("iopddl-G", "highs", "cpsat")),
         "where every live set spans a few consecutive nodes the exact search's window "
         "programme proves the Alpa-style chain in about a second and no MILP backend proves "
         "it in 120 s; it refuses wider windows (IOPDDL's, the DAG's), where HiGHS and CBC "
         "prove instance G faster than CP-SAT"),
)

#: The committed measurement the portfolio cites (``python -m benchmarks.iopddl``).
PORTFOLIO_EVIDENCE = "benchmarks/results/iopddl.csv"
#: Rows of :data:`PORTFOLIO_EVIDENCE` (instance, solver, than): at the contest limit
#: ``solver``'s answer cost less than ``than``'s (auto's exact MILP path), so that on interval
#: budgets where ``auto`` would run a MILP backend, ``"portfolio"`` runs both side by side
#: (with ``threads >= 2``; the exact backend alone with one thread).
PORTFOLIO_BETTER: tuple[tuple[str, str, str], ...] = (
    ("M", "penalty", "auto"), ("K", "penalty", "auto"), ("U", "penalty", "auto"),
)

#: MILP backends in order of preference when the exact search cannot be used.
PREFERENCE = ("highs", "cbc", "cpsat")


def problem_kind(problem: Problem) -> str:
    """``"no_budget"``, ``"all_live_budget"`` or ``"interval_budget"``."""
    if not problem.has_budget:
        return "no_budget"
    return "interval_budget" if problem.intervals is not None else "all_live_budget"


def choose(problem: Problem) -> str:
    """The solver name ``"auto"`` stands for on this problem: :func:`choose_exact`'s, or
    ``"portfolio"`` for an interval budget where that is a MILP backend
    (:data:`PORTFOLIO_BETTER`; the portfolio runs that backend alone with ``threads=1``).

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0])], [], [])
    >>> choose(p)
    'dp'
    """
    name = choose_exact(problem)
    if problem_kind(problem) == "interval_budget" and name in PREFERENCE:
        return "portfolio"
    return name


def choose_exact(problem: Problem) -> str:
    """The backend of :data:`RULES` for this problem (what ``auto`` ran before the
    portfolio).

    Parameters
    ----------
    problem : Problem

    Returns
    -------
    str
        A registry name of an available solver that accepts the problem.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0])], [], [])
    >>> choose_exact(p)
    'dp'
    """
    from .registry import get_solver

    kind = problem_kind(problem)
    rule = next(r for r in RULES if r.kind == kind)
    for name in rule.order:
        backend = get_solver(name)
        if backend.available() and backend.accepts(problem) is None:
            return name
    return rule.order[0]
