"""``auto`` is decided by a committed measurement: every rule's cited rows exist in
benchmarks/results/solver_scaling.csv and say what the rule claims."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from milp_parallel.problem import Problem
from milp_parallel.solvers import get_solver
from milp_parallel.solvers.auto import EVIDENCE, RULES, choose, problem_kind

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows():
    path = ROOT / EVIDENCE
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    assert table and table[0]["machine"] and table[0]["date"]
    return {(r["case"], r["solver"]): r for r in table}


def test_every_kind_has_one_rule():
    assert sorted(r.kind for r in RULES) == ["all_live_budget", "interval_budget", "no_budget"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.kind)
def test_cited_rows_exist_and_support_the_rule(rows, rule):
    assert rule.faster, "a rule without evidence"
    for case, solver, than in rule.faster:
        assert (case, solver) in rows, f"{rule.kind}: no row ({case}, {solver})"
        assert (case, than) in rows, f"{rule.kind}: no row ({case}, {than})"
        win, lose = rows[(case, solver)], rows[(case, than)]
        assert win["status"] == "optimal", (case, solver, win["status"])
        assert lose["status"] != "optimal" or float(win["seconds"]) <= float(
            lose["seconds"]), (case, solver, than)
        # the rule prefers the winner to the loser
        assert rule.order.index(solver) < rule.order.index(than) if than in rule.order \
            else True


def test_choose_follows_the_rules():
    free = Problem([np.array([1.0, 2.0]), np.array([2.0, 1.0])], [(0, 1)], [np.zeros((2, 2))],
                   memory=[np.array([1.0, 2.0])] * 2)
    all_live = free.with_memory_limit(3.0)
    intervals = Problem(free.node_costs, free.edges, free.edge_costs, memory=free.memory,
                        memory_limit=3.0, intervals=[(0, 2), (1, 3)])
    for p, kind in ((free, "no_budget"), (all_live, "all_live_budget"),
                    (intervals, "interval_budget")):
        assert problem_kind(p) == kind
        rule = next(r for r in RULES if r.kind == kind)
        first = next(n for n in rule.order if get_solver(n).available()
                     and get_solver(n).accepts(p) is None)
        assert choose(p) == first
