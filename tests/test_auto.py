"""``solver="auto"``: every rule cites committed measurements that say what the rule claims,
and ``choose`` follows the rules."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.auto import EVIDENCE, RULES, choose, problem_kind

ROOT = Path(__file__).resolve().parents[1]


def _rows() -> dict[tuple[str, str], dict]:
    """Rows of the committed benchmark by ``(case, solver)``; ``auto=X`` rows also count as
    rows of ``X`` (auto ran that backend)."""
    with open(ROOT / EVIDENCE, newline="") as f:
        rows = list(csv.DictReader(f))
    out: dict[tuple[str, str], dict] = {}
    for r in rows:
        out[(r["case"], r["solver"])] = r
        if r["solver"].startswith("auto="):
            out.setdefault((r["case"], r["solver"][5:]), r)
    return out


def test_the_evidence_is_committed_with_machine_and_date():
    rows = list(_rows().values())
    assert rows, f"{EVIDENCE} has no rows"
    assert all(r["machine"] and r["date"] for r in rows)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.kind)
def test_every_cited_row_says_what_the_rule_claims(rule):
    rows = _rows()
    assert rule.faster, f"rule {rule.kind} cites no evidence"
    for case, solver, than in rule.faster:
        assert solver in rule.order and than in rule.order
        # the rule puts the faster solver first
        assert rule.order.index(solver) < rule.order.index(than), (case, solver, than)
        win = rows.get((case, solver))
        lose = rows.get((case, than))
        assert win is not None, f"{EVIDENCE} has no row for {case} / {solver}"
        assert lose is not None, f"{EVIDENCE} has no row for {case} / {than}"
        assert win["status"] == "optimal", (case, solver, win["status"])
        if lose["status"] == "optimal":
            assert float(win["seconds"]) < float(lose["seconds"]), (case, solver, than)
            rel = abs(float(win["objective"]) - float(lose["objective"]))
            assert rel <= 1e-6 * max(1.0, abs(float(win["objective"])))


def _problem(intervals=None, budget=None) -> Problem:
    costs = [np.array([1.0, 2.0]), np.array([3.0, 1.0]), np.array([2.0, 2.0])]
    edges = [(0, 1), (1, 2)]
    tables = [np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[0.0, 2.0], [2.0, 0.0]])]
    if budget is None:
        return Problem(costs, edges, tables)
    memory = [np.array([2.0, 1.0]), np.array([1.0, 2.0]), np.array([1.0, 1.0])]
    return Problem(costs, edges, tables, memory=memory, memory_limit=budget,
                   intervals=intervals)


def test_choose_follows_the_rule_of_each_kind():
    for p in (_problem(), _problem(budget=3.5), _problem(intervals=[(0, 2), (1, 3), (2, 4)],
                                                         budget=3.5)):
        rule = next(r for r in RULES if r.kind == problem_kind(p))
        assert choose(p) == rule.order[0]
        r = solve_problem(p, "auto")
        assert r.stats["auto"] and r.solver == rule.order[0]
        assert r.status == "optimal"
        assert r.objective == pytest.approx(solve_problem(p, "brute").objective)


def test_the_portfolio_cites_rows_where_the_penalty_path_beat_auto():
    from milp_parallel.solvers.auto import PORTFOLIO_BETTER, PORTFOLIO_EVIDENCE
    with open(ROOT / PORTFOLIO_EVIDENCE, newline="") as f:
        rows = {(r["instance"], r["solver"]): r for r in csv.DictReader(f)
                if str(r.get("threads") or "1") == "1" and r.get("cost")}
    assert PORTFOLIO_BETTER
    for inst, solver, than in PORTFOLIO_BETTER:
        win, lose = rows.get((inst, solver)), rows.get((inst, than))
        assert win is not None and lose is not None, (inst, solver, than)
        assert win["machine"] and win["date"] and win["held"] == "True"
        assert float(win["cost"]) < float(lose["cost"]), (inst, solver, than)


def test_auto_runs_the_portfolio_where_it_would_run_a_milp_backend():
    from milp_parallel.solvers.auto import PREFERENCE, choose_exact
    rng = np.random.default_rng(0)
    n, k = 40, 3
    edges = [(i, j) for i in range(n) for j in (i + 1, i + 5) if j < n]
    wide = Problem([rng.random(k) for _ in range(n)], edges, [rng.random((k, k)) for _ in edges],
                   memory=[rng.random(k) + 1 for _ in range(n)], memory_limit=1.5 * n,
                   intervals=[(i, i + n // 2) for i in range(n)])
    assert choose_exact(wide) in PREFERENCE          # windows too wide for the exact search
    assert choose(wide) == "portfolio"
    r = solve_problem(wide, "auto", threads=1, time_limit=30)
    alone = solve_problem(wide, choose_exact(wide), threads=1, time_limit=30)
    assert r.stats["auto"] == "portfolio" and r.status == alone.status
    assert r.key == alone.key
    for p in (_problem(), _problem(budget=3.5)):           # no interval budget: unchanged
        assert choose(p) == choose_exact(p)
