"""``simulate(plan)``: the step simulator (:mod:`milp_parallel.simulate`) run on a plan, or on
an assignment of a built problem.

May import: ``simulate``, ``build``, ``errors``, ``plan.prepare``, ``plan.result``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

from ..costs.simulator import _USE_MODEL, SimulationResult, simulate_assignment
from ..errors import InvalidAssignmentError, InvalidOptionError
from .prepare import _build
from .result import Plan

__all__ = ["simulate"]


def simulate(target, assignment=None, *, model=None, cluster=None, cost_model=None,
             config_options: Mapping[str, Any] | None = None,
             bucket_bytes: Any = _USE_MODEL, overlap: bool | None = None,
             trace: bool = False) -> SimulationResult:
    """Simulate one training step of a plan (or of an assignment of a built problem).

    Parameters
    ----------
    target : Plan or BuiltProblem
        A :class:`~milp_parallel.plan.Plan` (its problem is rebuilt, at the plan's batch and
        device count, from what :func:`~milp_parallel.plan.solve` was given when the plan
        was solved in this session, else from ``plan.model`` and ``plan.cluster``; ``model``,
        ``cluster``, ``cost_model`` and ``config_options`` override) or a
        :class:`~milp_parallel.build.BuiltProblem`.
    assignment : sequence of int, optional
        Needed with a BuiltProblem; default for a Plan: ``plan.assignment``.
    model, cluster, cost_model, config_options
        What :func:`milp_parallel.plan.solve` was given, when the plan's names are not a zoo
        model and a preset (or another cost model or configuration space was used).
    bucket_bytes, overlap, trace
        As :func:`simulate_assignment`.

    Returns
    -------
    SimulationResult

    Raises
    ------
    InvalidAssignmentError
        When the plan's configurations are not those of the rebuilt problem (pass the same
        ``config_options`` / ``model`` / ``cluster`` as to ``solve``).
    UnknownNameError, FormatError
        When the plan's model or cluster cannot be found again.
    """
    from ..costs.build import BuiltProblem
    if isinstance(target, BuiltProblem):
        if assignment is None:
            raise InvalidAssignmentError("simulate(built_problem) needs an assignment")
        return simulate_assignment(target, assignment, bucket_bytes=bucket_bytes,
                                   overlap=overlap, trace=trace)
    if isinstance(target, (str, os.PathLike)):
        target = Plan.load(target)                 # a saved plan (FormatError if it is not)
    if not isinstance(target, Plan):
        raise InvalidOptionError(f"simulate() takes a Plan, the path of a saved plan or a "
                                 f"BuiltProblem with an assignment, got "
                                 f"{type(target).__name__}")
    plan = target
    given = plan.inputs      # what solve() was given, in the session that solved the plan

    def pick(value, name, default):
        if value is not None:
            return value
        kept = getattr(given, name, None) if given is not None else None
        return kept if kept is not None else default
    built = _build(pick(model, "model", plan.model), pick(cluster, "cluster", plan.cluster),
                   batch_size=plan.batch_size, devices=plan.devices, memory_limit=math.inf,
                   config_options=pick(config_options, "config_options", None),
                   cost_model=pick(cost_model, "cost_model", None)).built
    a = plan.assignment if assignment is None else assignment
    labels = {lc.node or lc.name: lc.config for lc in plan.layers}
    p = built.problem
    def same(v: int, name: str) -> bool:
        k = int(a[v])
        return 0 <= k < p.n_configs[v] and labels.get(name) == p.config_labels[v][k]
    if len(a) != p.n_nodes or not all(same(v, nm) for v, nm in enumerate(p.node_names)):
        raise InvalidAssignmentError(
            f"the plan's configurations are not those of the problem rebuilt for "
            f"{plan.model!r} on {plan.cluster!r}; pass the model, cluster and config_options "
            "given to solve(), or simulate a BuiltProblem")
    return simulate_assignment(built, a, bucket_bytes=bucket_bytes, overlap=overlap,
                               trace=trace)
