"""One contract for every backend, parametrized over the registry (a new backend is tested the
day it registers): the status vocabulary, declared options, unknown options and bad values,
time limits, warm starts, infeasibility, forbidden entries and the capabilities it declares.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from milp_parallel import Problem
from milp_parallel.errors import (
    InvalidAssignmentError,
    InvalidOptionError,
    UnsupportedProblemError,
)
from milp_parallel.solvers import STATUSES, available_solvers, get_solver, solve_problem
from milp_parallel.solvers.base import COMMON_OPTIONS, Capabilities, Solver

from checks import check_exact

BACKENDS = [n for n in available_solvers()]


def _chain(n: int = 5, k: int = 3, seed: int = 0, **kw) -> Problem:
    rng = np.random.default_rng(seed)
    edges = [(i, i + 1) for i in range(n - 1)]
    return Problem([rng.integers(0, 9, k).astype(float) for _ in range(n)], edges,
                   [rng.integers(0, 9, (k, k)).astype(float) for _ in edges], **kw)


def _budgeted(intervals: bool) -> Problem:
    rng = np.random.default_rng(3)
    n, k = 5, 3
    mem = [rng.integers(1, 9, k).astype(float) for _ in range(n)]
    limit = sum(m.min() for m in mem) + 4.0
    iv = [(i, i + 2) for i in range(n)] if intervals else None
    return _chain(n, k, seed=3, memory=mem, memory_limit=limit, intervals=iv)


@pytest.fixture(params=BACKENDS)
def backend(request) -> Solver:
    return get_solver(request.param)


def test_registration_declares_what_the_template_reads(backend):
    assert backend.name and backend.available()
    assert isinstance(backend.capabilities, Capabilities)
    names = [o.name for o in backend.options]
    assert len(names) == len(set(names))
    assert not set(names) & {o.name for o in COMMON_OPTIONS}     # declared once
    for o in backend.options:               # a declared default passes its own check
        assert o.default is None or o.check(o.default) == o.default, o.name


def test_answers_use_the_status_vocabulary_and_are_exact(backend):
    p = _chain()
    r = solve_problem(p, backend.name)
    assert r.status in STATUSES and r.solver == backend.name
    check_exact(r, p)
    assert r.seconds >= 0 and isinstance(r.stats, dict)


@pytest.mark.parametrize("intervals", [False, True])
def test_memory_models_are_solved_or_refused_as_declared(backend, intervals):
    p = _budgeted(intervals)
    why = backend.accepts(p)
    declared = (backend.capabilities.memory_intervals if intervals
                else backend.capabilities.memory_all_live)
    if why is not None:
        with pytest.raises(UnsupportedProblemError):
            solve_problem(p, backend.name)
        assert not declared or intervals        # dp refuses wide interval windows only
        return
    check_exact(solve_problem(p, backend.name), p)


def test_an_impossible_problem_is_infeasible(backend):
    p = Problem([np.array([1.0, 2.0]), np.array([1.0])], [(0, 1)],
                [np.array([[math.inf], [math.inf]])])
    r = solve_problem(p, backend.name)
    assert r.status == "infeasible" and r.assignment is None and math.isnan(r.objective)


def test_forbidden_entries_are_counted_not_added(backend):
    p = Problem([np.array([9.0, 3.0]), np.array([0.0, math.inf])], [(0, 1)],
                [np.array([[1e18, 16.0], [1e18, 6.0]])])
    r = solve_problem(p, backend.name)
    assert r.key == (1, 3.0)
    check_exact(r, p)


@pytest.mark.parametrize("bad", [{"no_such_option": 1}, {"time_limit": -1},
                                 {"time_limit": "ten"}, {"gap": -0.5}, {"threads": 0},
                                 {"verbose": "yes"}, {"warm_start": "abc"},
                                 {"callback": 3}])
def test_unknown_options_and_bad_values_are_typed(backend, bad):
    with pytest.raises(InvalidOptionError) as info:
        solve_problem(_chain(), backend.name, **bad)
    assert next(iter(bad)) in str(info.value)


def test_an_unknown_option_lists_the_known_ones(backend):
    with pytest.raises(InvalidOptionError) as info:
        solve_problem(_chain(), backend.name, tme_limit=3)
    assert "time_limit" in str(info.value)


def test_a_warm_start_is_used_or_noted_and_never_changes_the_optimum(backend):
    p = _chain()
    r = solve_problem(p, backend.name, warm_start=[0] * p.n_nodes)
    check_exact(r, p)
    if not backend.capabilities.warm_start:
        assert "warm_start" in r.stats.get("ignored_options", [])


@pytest.mark.parametrize("warm", [[0, 0], [0, 0, 0, 0, 7]])
def test_a_warm_start_that_does_not_fit_is_refused_by_every_backend(backend, warm):
    # even by those that do not use one: a wrong warm start is a mistake worth saying
    with pytest.raises(InvalidAssignmentError, match="warm_start"):
        solve_problem(_chain(), backend.name, warm_start=warm)


def test_a_tiny_time_limit_gives_an_honest_status(backend):
    # no wall-clock assert: whatever comes back within the limit must say what it proved
    p = _chain(n=8, k=4, seed=5)
    r = solve_problem(p, backend.name, time_limit=1e-6)
    assert r.status in STATUSES
    if r.status == "optimal":
        check_exact(r, p)
    elif r.status == "feasible":
        assert r.assignment is not None and r.gap >= 0 and r.bound <= r.objective
    else:
        assert r.assignment is None


@pytest.mark.parametrize("case", ["chain", "all_live", "intervals", "forbidden", "contracted"])
def test_every_stats_key_is_declared_once(backend, case):
    from milp_parallel.solvers.result import STATS_KEYS
    p = {"chain": _chain(), "all_live": _budgeted(False), "intervals": _budgeted(True),
         "forbidden": _chain(seed=5)}.get(case)
    opts = {}
    if case == "forbidden":
        p = p.with_costs(p.node_costs, [np.where(t > 6, 1e18, t) for t in p.edge_costs])
    if case == "contracted":
        if backend.name not in ("highs", "cbc", "cpsat"):
            pytest.skip("contraction is a MILP backend's option")
        same = np.where(np.eye(3, dtype=bool), 0.0, 1e18)
        p = Problem([np.arange(3.0)] * 3, [(0, 1), (1, 2)], [same, same])
        opts = {"contract": "on"}
    try:
        r = solve_problem(p, backend.name, time_limit=20, **opts)
    except UnsupportedProblemError:
        pytest.skip(f"{backend.name} does not take this memory model")
    undeclared = set(r.stats) - set(STATS_KEYS)
    assert not undeclared, f"{backend.name} writes undeclared stats keys {sorted(undeclared)}"
    r = solve_problem(p, "auto", time_limit=20)
    assert not set(r.stats) - set(STATS_KEYS)
