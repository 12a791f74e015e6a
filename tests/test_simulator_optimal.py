"""Issue 26.1: the plan is the best under the simulator among what it lists, with a
certificate; the separable bound of :mod:`milp_parallel.plan.certify` never exceeds the
simulated step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import milp_parallel as mp
from milp_parallel.costs.simulator import simulate_assignment
from milp_parallel.plan import certify as C
from milp_parallel.plan.prepare import _build

CASES = [("lenet5", "abci", 4), ("lenet5", "optcnn", 8)]


@pytest.mark.parametrize("model,cluster,devices", CASES)
def test_bound_below_simulated_on_random_assignments(model, cluster, devices):
    b = _build(model, cluster, devices=devices, memory_limit=None).built
    parts = C._parts(b)
    rng = np.random.default_rng(0)
    for lam in C.LAMBDAS:
        lb = C.lower_bound_problem(b, None, lam, parts)
        for _ in range(15):
            a = [int(rng.integers(k)) for k in b.problem.n_configs]
            for overlap in (True, False):
                sim = simulate_assignment(b, a, overlap=overlap).step_seconds
                assert lb.evaluate(a).cost <= sim * (1 + 1e-9)


def test_proved_plan_is_simulator_optimal_by_brute_force():
    from milp_parallel.solvers.kbest import restricted
    b = _build("lenet5", "abci", devices=4, memory_limit=None).built
    p = b.problem
    rng = np.random.default_rng(1)
    keep = [sorted(rng.choice(int(k), size=min(int(k), 2), replace=False).tolist())
            for k in p.n_configs]
    forbidden = {v: set(range(int(k))) - set(keep[v]) for v, k in enumerate(p.n_configs)}
    target = restricted(p, {}, forbidden)
    n_all = int(np.prod([len(k) for k in keep]))
    assert n_all <= 5000
    cache = {}

    def sim(a):
        a = tuple(int(x) for x in a)
        if a not in cache:
            cache[a] = simulate_assignment(b, a).step_seconds
        return cache[a]
    best, cert = C.certify(b, target, sim, {}, max_enumerated=n_all + 1)
    brute = min(sim(a) for a in itertools.product(*keep))
    assert cert.proved
    assert sim(best) <= brute * (1 + 1e-12)
    assert cert.enumerated <= n_all


@pytest.mark.parametrize("model,cluster,devices", [("lenet5", "abci", 4),
                                                   ("resnet50", "abci", 16)])
def test_plan_never_slower_than_a_listed_baseline(model, cluster, devices):
    plan = mp.solve(model, cluster, devices=devices, cross_check=False)
    assert plan.simulator_certificate is not None
    for bl in plan.baselines.values():
        if bl.feasible and bl.simulated_step_seconds is not None:
            assert plan.simulated_step_seconds <= bl.simulated_step_seconds * (1 + 1e-12)
    text = str(plan)
    first = text.splitlines()[1]
    assert "predicted step" in first and "simulated" in first
    if "simulated speedup" in first:
        best = min(bl.simulated_step_seconds for bl in plan.baselines.values()
                   if bl.feasible and bl.simulated_step_seconds is not None)
        assert best > plan.simulated_step_seconds
    again = mp.Plan.from_json(plan.to_json())
    assert again.simulator_certificate == plan.simulator_certificate
