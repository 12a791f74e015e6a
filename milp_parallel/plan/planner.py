"""The user-facing entry point: :func:`solve` a model on a cluster and get a
:class:`~milp_parallel.plan.Plan`; :func:`make_problem` (the problem ``solve`` would solve)
and :func:`explain` (what forcing one layer's configuration costs).

``solve`` runs the whole pipeline: the model and the cluster (:mod:`milp_parallel.inputs`)
become a :class:`~milp_parallel.Problem` (:mod:`.prepare`), a solver picks one configuration
per node (:func:`~milp_parallel.solvers.solve_problem`), the exact graph search checks the
answer (:mod:`.crosscheck`), and the result is mapped back to layers: per layer its
configuration, its predicted compute, gradient-synchronization and transfer time and its
memory; for the whole step the time, the memory per device against the budget, the solver's
statistics, and the same numbers for four baselines (:mod:`.baselines`), all evaluated by the
same problem.

May import: everything below the plan stage (``inputs``, ``problem``, ``solvers``, ``build``,
``models``, ``clusters``, ``simulate``), and the other modules of ``plan/``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from typing import Any, Mapping

import numpy as np

from ..errors import InfeasibleError, InvalidOptionError
from ..inputs import is_path, load_model
from ..problem import MEMORY_RTOL, Problem
from ..solvers import SolveResult, solve_problem
from ..solvers.memory import least_memory
from ..solvers.options import Deadline, validate_time_limit
from ..solvers.result import INFEASIBLE, OPTIMAL
from ..validation import check_whole
from .baselines import baseline_assignments, degrees_dict
from .constraints import _constrained, _constraints
from .crosscheck import NOT_RUN, CrossCheck
from .crosscheck import cross_check as run_cross_check
from .prepare import _Accounting, _build, _describe
from .result import Baseline, Explanation, LayerChange, LayerChoice, Plan, _json_safe, _SolveInputs

__all__ = ["solve", "make_problem", "explain", "MAX_RERANK"]

logger = logging.getLogger(__name__)


def _infeasible_error(problem: Problem, result: SolveResult | None, what: str
                      ) -> InfeasibleError:
    budget = problem.memory_limit
    known = None if result is None else result.stats.get("least_peak_memory")
    if known is not None and problem.memory is not None:
        least = np.broadcast_to(np.asarray(known, dtype=float), (problem.n_devices,))
    else:
        least = least_memory(problem)
    if least is None or budget is None:
        return InfeasibleError(f"{what}: no assignment has a finite cost (every choice of some "
                               "layer is forbidden); check the configuration options")
    over = least - budget
    d = int(np.argmax(over))
    need, have = float(least[d]), float(budget[d])
    if need > have * (1 + MEMORY_RTOL):
        msg = (f"{what}: no assignment fits in memory: the least memory any assignment needs "
               f"on device {d} is {need:.6g} bytes ({need / 2**30:.3f} GiB), the budget is "
               f"{have:.6g} bytes ({have / 2**30:.3f} GiB); raise memory_limit, use more "
               "devices or a smaller batch")
    else:
        need = float(np.max(least))
        have = float(np.min(budget))
        msg = (f"{what}: no assignment fits in memory on every device at once, although each "
               f"device alone can reach {need:.6g} bytes ({need / 2**30:.3f} GiB) against the "
               f"budget of {have:.6g} bytes ({have / 2**30:.3f} GiB); raise memory_limit, use "
               "more devices or a smaller batch")
    return InfeasibleError(msg, least_memory_bytes=need, budget_bytes=have)



def explain(plan: Plan, layer: str, config: str | Mapping[str, int], *, model: Any = None,
            cluster: Any = None) -> Explanation:
    """:meth:`Plan.explain` as a function (see there)."""
    from .. import models
    from ..errors import UnknownNameError
    from ..machine import clusters
    inputs: _SolveInputs | None = plan.inputs
    if model is not None or cluster is not None or inputs is None:
        m = model if model is not None else (inputs.model if inputs else plan.model)
        c = cluster if cluster is not None else (inputs.cluster if inputs else plan.cluster)
        if inputs is None:
            if (isinstance(m, str) and not is_path(m) and m not in models.names()) or \
                    (isinstance(c, str) and not is_path(c) and c not in clusters.names()):
                raise InvalidOptionError(
                    f"this plan ({plan.model} on {plan.cluster}) was not made by solve() in "
                    "this process and its model or cluster is not a zoo / preset name: pass "
                    "model=... and cluster=... to explain()")
            cons = plan.constraints or {}
            inputs = _SolveInputs(
                model=m, cluster=c, batch_size=plan.batch_size, devices=plan.devices,
                solver=plan.solver,
                memory_limit=plan.memory_limit_bytes,
                fixed=dict(cons.get("fixed", {})), forbid=dict(cons.get("forbid", {})))
        else:
            inputs = dataclasses.replace(inputs, model=m, cluster=c)
    try:
        before = plan.layer(layer)
    except KeyError:
        names = [lc.name for lc in plan.layers]
        raise UnknownNameError(f"explain: the plan has no layer {layer!r:.60}; its layers "
                               f"include {', '.join(names[:8])}"
                               f"{', ...' if len(names) > 8 else ''}") from None
    label = config if isinstance(config, str) else " ".join(
        f"{d}={int(k)}" for d, k in config.items() if int(k) > 1) or "serial"
    kw = dict(batch_size=inputs.batch_size, batch_per_device=inputs.batch_per_device,
              devices=inputs.devices, solver=inputs.solver,
              memory_limit=inputs.memory_limit, time_limit=inputs.time_limit,
              config_options=inputs.config_options, cost_model=inputs.cost_model,
              profile=inputs.profile, cross_check=False, **inputs.solver_options)
    node = before.node or before.name     # the forced choice replaces the node's own limits
    kw["forbid"] = {k: v for k, v in inputs.forbid.items() if k != node} or None
    fixed = {k: v for k, v in inputs.fixed.items() if k != node}
    fixed[layer] = config
    try:
        forced = solve(inputs.model, inputs.cluster, fixed=fixed, **kw)
    except InfeasibleError as exc:
        return Explanation(layer, label, before.config, False, str(exc), math.inf, math.inf,
                           math.inf, math.inf, math.inf, math.nan)
    after = {lc.name: lc for lc in forced.layers}
    graph, _ = load_model(inputs.model, batch_size=inputs.batch_size)
    near = set(graph.predecessors(layer)) | set(graph.successors(layer)) \
        if layer in graph else set()
    changes = [LayerChange(lc.name, lc.config, after[lc.name].config, lc.name in near,
                           after[lc.name].seconds - lc.seconds)
               for lc in plan.layers
               if lc.name != layer and lc.name in after and after[lc.name].config != lc.config]
    changes.sort(key=lambda ch: (not ch.neighbour, -abs(ch.delta_seconds)))
    return Explanation(
        layer=layer, config=after[layer].config, original_config=before.config, feasible=True,
        reason="", step_seconds=forced.step_seconds,
        delta_seconds=forced.step_seconds - plan.step_seconds,
        delta_compute_seconds=forced.compute_seconds - plan.compute_seconds,
        delta_sync_seconds=forced.sync_seconds - plan.sync_seconds,
        delta_transfer_seconds=forced.transfer_seconds - plan.transfer_seconds,
        delta_memory_bytes=forced.peak_memory_bytes - plan.peak_memory_bytes,
        changes=tuple(changes), plan=forced)


def make_problem(model, cluster, *, batch_size: int | None = None, devices: int | None = None,
                 memory_limit: float | str | None = "device",
                 config_options: Mapping[str, Any] | None = None, cost_model=None,
                 profile=None) -> Problem:
    """The :class:`~milp_parallel.Problem` that :func:`solve` would solve.

    Same inputs and defaults as :func:`solve` (the budget included), for exporting the
    problem, solving it with :func:`~milp_parallel.solve_problem` directly, or evaluating
    assignments such as a plan's ``assignment``.

    Raises
    ------
    UnknownNameError, FormatError, InvalidGraphError, InvalidTopologyError,
    InvalidProblemError
        As :func:`solve`.
    """
    return _build(model, cluster, batch_size=batch_size, devices=devices,
                  memory_limit=memory_limit, config_options=config_options,
                  cost_model=cost_model, profile=profile).built.problem


def solve(model, cluster, *, batch_size: int | None = None,
          batch_per_device: int | None = None, devices: int | None = None,
          solver: str = "auto", memory_limit: float | str | None = "device",
          time_limit: float | None = None, cross_check: bool = True,
          config_options: Mapping[str, Any] | None = None, cost_model=None,
          profile=None, fixed: Mapping[str, Any] | None = None,
          forbid: Mapping[str, Any] | None = None, simulate: bool = True,
          rerank: int | None = None, progress: bool | None = None,
          certify: int | None = 0, **solver_options: Any) -> Plan:
    """Find the fastest layer-wise parallelization of a model on a cluster.

    Parameters
    ----------
    model : str, LayerGraph or path
        A zoo name (``milp_parallel.models.names()``), a :class:`~milp_parallel.graph.
        LayerGraph`, or the path of a graph JSON file.
    cluster : str, Topology or path
        A preset name (``milp_parallel.clusters.names()``), a :class:`~milp_parallel.topology.
        Topology`, or the path of a cluster JSON file.
    batch_size : int, optional
        The global batch; default: the zoo model's default (or the graph's own).
    batch_per_device : int, optional
        The batch per device instead (the global batch is this times the devices); give
        ``batch_size`` or ``batch_per_device``, not both. With neither, the model's default
        global batch is used whatever the device count, and the plan says so.
    devices : int, optional
        Use the first ``devices`` devices of the cluster (default: all). A preset named by
        ``cluster`` grows to as many nodes as that takes.
    solver : str
        ``"auto"`` (default), ``"dp"``, ``"highs"``, ``"cbc"``, ``"cpsat"`` or ``"brute"``.
    memory_limit : float or str, optional
        The memory budget per device (read by :func:`~milp_parallel.units.
        parse_memory_limit`): bytes (``12e9``), a size (``"12GiB"``), ``"device"`` (each
        device's memory, the default), ``None``, ``"none"`` or ``math.inf`` (no budget).
    time_limit : float, optional
        Seconds for the solver (and the cross-check); a solver that runs out returns its
        best assignment with status ``"feasible"``, shown as not proved optimal.
    cross_check : bool
        Also run an independent exact solver and compare (default ``True``): the graph
        search ``dp``, or, when ``solver="dp"``, a MILP backend. Where it cannot run, the
        plan's ``cross_check.verdict`` says ``"not run: <why>"``.
    config_options : ConfigOptions or mapping, optional
        The configuration space (:class:`~milp_parallel.configs.ConfigOptions`, or a mapping
        of its fields such as ``{"power_of_two": False, "max_degree": {"h": 4}}``); the
        mapping may also raise the builder's size limits
        (:class:`~milp_parallel.configs.SizeLimits`: ``{"max_devices": 8192}``).
    cost_model : CostModel, optional
        Default: ``CostModel(topology)`` (it must be made for the same topology, after
        ``devices`` is applied).
    profile : ProfileTable or path, optional
        Measured layer times (:func:`milp_parallel.profile.profile_layers`) used for the
        compute cost instead of FLOP estimates where the table has the tile (the rest fall
        back to estimates). Not together with ``cost_model``.
    fixed : mapping, optional
        Pin layers to a configuration: ``{"conv5_3": "h=2 w=2", "fc6": {"c": 4}}`` (a label
        as :attr:`LayerChoice.config` writes it, or ``{dim: degree}``). A layer merged into
        its producer pins the producer's node (they share the layout).
    forbid : mapping, optional
        Forbid configurations: ``{"conv1": "serial", "fc6": ["c=4", "n=2 c=2"]}``.
    progress : bool, optional
        Show the solver's best cost, bound and gap while it works, on one line of stderr
        (:class:`~milp_parallel.progress.ProgressLine`); default: when stderr is a terminal.
        A ``callback`` in ``solver_options`` is used instead.
    simulate : bool, default True
        Also run the step simulator (:func:`milp_parallel.simulate`) on the plan and every
        baseline (``simulated_step_seconds``).
    rerank : int, optional
        Re-rank the ``rerank`` best distinct assignments (by predicted time,
        :func:`milp_parallel.kbest.k_best`) and the baselines by simulated time and return
        the fastest simulated one (``plan.rerank`` lists them). Costs about ``rerank`` x
        nodes exact solves. ``status``, ``objective`` and ``bound`` stay the solver's (of the
        predicted optimum); ``step_seconds`` is the chosen plan's prediction.
    certify : int or None, default 0
        With ``simulate`` (and no ``rerank``): return the fastest *simulated* of the solver's
        optimum, the baselines and the ``certify`` best assignments by a separable lower
        bound on the simulated step (:mod:`.certify`), stopping early when the bound proves
        the best one simulator-optimal; ``plan.simulator_certificate`` says proved or the
        remaining gap. ``0`` (default) simulates the solver's optimum and the baselines only
        (the plan is never slower under the simulator than a baseline it lists); ``None``
        keeps the solver's optimum whatever the simulator says (no certificate).
        ``status``, ``objective`` and ``bound`` stay the solver's.
    **solver_options
        Passed to the solver (``threads``, ``gap``, ``verbose``, ...).

    Returns
    -------
    Plan
        With ``plan.explain(layer, config)`` to see what another choice would cost.

    Raises
    ------
    UnknownNameError
        For an unknown model, cluster or solver name, or a layer of ``fixed`` / ``forbid``
        the model does not have (lists the known ones).
    FormatError
        For a model or cluster file that is missing or malformed.
    InvalidGraphError, InvalidTopologyError
        For a bad ``batch_size`` or ``devices`` (a device count the configuration space
        cannot use, e.g. 3 under power-of-two degrees).
    InvalidOptionError
        For a bad ``memory_limit``, ``time_limit``, ``config_options`` or a configuration of
        ``fixed`` / ``forbid`` the layer does not have (lists the ones it has).
    ProblemTooLargeError
        When a size exceeds the builder's limits (names the size and the option).
    InfeasibleError
        When no assignment fits in the memory budget: says the least memory any assignment
        needs and the budget.
    CrossCheckError
        When the solver and the exact search disagree.
    SolverError
        When the solver ends without any assignment (e.g. the time limit ran out first).

    Examples
    --------
    >>> from milp_parallel.plan import solve
    >>> plan = solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
    >>> plan.status, plan.devices, plan.layer("conv1").op
    ('optimal', 4, 'conv')
    >>> print(plan)                                         # doctest: +SKIP
    """
    inputs = _SolveInputs(model=model, cluster=cluster, batch_size=batch_size,
                          batch_per_device=batch_per_device,
                          devices=devices, solver=solver, memory_limit=memory_limit,
                          time_limit=time_limit, config_options=config_options,
                          cost_model=cost_model, profile=profile,
                          solver_options=dict(solver_options))
    try:
        time_limit = validate_time_limit(time_limit)
    except OverflowError:          # an int beyond the float range
        raise InvalidOptionError(f"time_limit={time_limit!r:.30}... is beyond the float range; "
                                 "give seconds > 0 or None") from None
    clock = Deadline(time_limit)          # time_limit covers the whole call
    built = _build(model, cluster, batch_size=batch_size, devices=devices,
                   memory_limit=memory_limit, config_options=config_options,
                   cost_model=cost_model, profile=profile, batch_per_device=batch_per_device)
    b = built.built
    graph, topo, problem, budget = b.graph, b.topology, b.problem, built.budget
    model_name, cluster_name = built.model_name, built.cluster_name
    constraints = _constraints(b, fixed, forbid)
    target = _constrained(b, constraints)       # the problem solved: pins and bans applied

    options = dict(solver_options)
    if time_limit is not None:            # what building left of it
        options["time_limit"] = max(clock.left(), _MIN_SOLVE_SECONDS)
    line = None
    if (sys.stderr.isatty() if progress is None else progress) and "callback" not in options:
        from .progress import ProgressLine
        line = ProgressLine(f"{model_name} on {cluster_name} ({topo.n_devices} devices)")
        options["callback"] = line
    try:
        result = solve_problem(target, solver, **options)
    finally:
        if line is not None:
            line.close()
    logger.info("%s on %s (%d devices): %r", model_name, cluster_name, topo.n_devices, result)

    check = CrossCheck(NOT_RUN, "cross_check=False", solver_seconds=float(result.seconds))
    if cross_check:
        left = clock.left()
        if left is not None and left < _MIN_SOLVE_SECONDS:
            check = CrossCheck(NOT_RUN, f"no time left of time_limit={time_limit:g} s for the "
                               "cross-check (raise time_limit to run it)",
                               solver_seconds=float(result.seconds))
        else:
            check, _ = run_cross_check(target, result, time_limit=left)
    what = f"{model_name} on {cluster_name} ({topo.n_devices} devices)"
    if constraints:
        n_fix, n_ban = len(constraints.get("fixed", {})), len(constraints.get("forbid", {}))
        what += f" with {n_fix} pinned and {n_ban} restricted layer(s)"
    if result.status == INFEASIBLE:
        raise _infeasible_error(target, result, what)
    if result.assignment is None:
        from ..errors import SolverError
        raise SolverError(f"{what}: solver {result.solver!r} ended {result.status} without an "
                          f"assignment after {result.seconds:.3g} s; raise time_limit or try "
                          "another solver")

    acc = _Accounting(b)
    a = np.asarray(result.assignment, dtype=np.int64)
    base_asg = baseline_assignments(problem, acc.nodes, topo.n_devices)
    left = None if time_limit is None else max(clock.left(), _MIN_SOLVE_SECONDS)
    sims, reranked = _simulations(b, target, a, simulate, rerank, left, base_asg)
    if reranked:
        a = np.asarray(next(c["assignment"] for c in reranked if c["chosen"]), dtype=np.int64)
        reranked = tuple({k: v for k, v in c.items() if k != "assignment"} for c in reranked)
    certificate = None
    if simulate and not reranked and certify is not None:
        from .certify import certify as run_certify
        n_cert = check_whole("certify", certify, 0, MAX_RERANK,
                             "each plan enumerated is one more exact solve")
        best, certificate = run_certify(b, target, sims, {"solver": a, **base_asg},
                                        max_enumerated=int(n_cert), time_limit=left)
        if best is not None:
            a = np.asarray(best, dtype=np.int64)
    ev = problem.evaluate(a)
    parts = acc.breakdown(a)
    layers = []
    for lay in acc.layers:
        v = acc.node_of[lay.name]
        d = acc.degrees(lay.name, a)
        comp, sync, xfer, mem = parts[lay.name]
        layers.append(LayerChoice(
            name=lay.name, op=lay.op, config=problem.config_labels[v][a[v]],
            degrees=degrees_dict(lay.dims, d), n_devices=int(np.prod(d)),
            compute_seconds=comp, sync_seconds=sync, transfer_seconds=xfer, memory_bytes=mem,
            node=acc.heads[v]))
    comp, sync, xfer = (float(sum(p[i] for p in parts.values())) for i in range(3))
    step = float(ev.cost)
    if abs(comp + sync + xfer - step) > 1e-6 * max(abs(step), 1e-300):
        logger.warning("%s: the per-layer split (%.6g s) does not add up to the problem's "
                       "objective (%.6g s)", what, comp + sync + xfer, step)

    baselines = {}
    for name, ba in base_asg.items():
        bev = problem.evaluate(ba)
        bc, bs, bx = acc.totals(ba)
        labels = [problem.config_labels[v][c] for v, c in enumerate(ba)]
        baselines[name] = Baseline(
            name=name, step_seconds=float(bev.cost), compute_seconds=bc, sync_seconds=bs,
            transfer_seconds=bx,
            peak_memory_bytes=float(np.max(bev.peak_memory)) if bev.peak_memory is not None
            else 0.0,
            feasible=bool(bev.feasible),
            speedup=float(bev.cost) / step if step > 0 else math.inf,
            description=_describe(labels), assignment=tuple(int(x) for x in ba),
            simulated_step_seconds=sims(ba))

    plan = Plan(
        model=model_name, cluster=cluster_name, devices=int(topo.n_devices),
        batch_size=int(graph.batch_size), layers=tuple(layers), step_seconds=step,
        compute_seconds=comp, sync_seconds=sync, transfer_seconds=xfer,
        throughput=float(graph.batch_size) / step if step > 0 else math.inf,
        memory_bytes=tuple(float(x) for x in ev.peak_memory) if ev.peak_memory is not None
        else (),
        memory_capacity_bytes=float(topo.device.memory_bytes), solver=result.solver,
        status=result.status, objective=float(result.objective), bound=float(result.bound),
        gap=float(result.gap), solve_seconds=float(result.seconds), cross_check=check,
        baselines=baselines, memory_limit_bytes=budget,
        assignment=tuple(int(x) for x in a), solver_stats=_json_safe(result.stats),
        problem_size={"n_layers": len(acc.layers), "n_nodes": int(problem.n_nodes),
                      "n_edges": int(problem.n_edges),
                      "n_configs": int(problem.n_configs.sum()),
                      "max_configs": int(problem.n_configs.max()),
                      "edge_table_entries": int(sum(t.size for t in problem.edge_costs)),
                      "build_seconds": float(b.build_seconds)},
        constraints=constraints, simulated_step_seconds=sims(a), rerank=tuple(reranked),
        budget_effect=_budget_effect(target, ev, budget, step),
        dtype=_priced_dtype(b.cost_model, topo), batch_origin=built.batch_origin,
        profile_coverage=_coverage(b.cost_model), simulator_certificate=certificate,
        runtime_options=_runtime_options(b.cost_model),
        inputs=dataclasses.replace(inputs, fixed=dict(constraints.get("fixed", {})),
                                   forbid=dict(constraints.get("forbid", {}))))
    return plan


def _priced_dtype(cost_model, topo) -> str:
    """The dtype the plan's compute is priced in: the cost model's own, else the cluster's."""
    return str(getattr(cost_model, "dtype", None) or getattr(topo, "dtype", "fp32"))


def _runtime_options(cost_model) -> dict:
    """:attr:`Plan.runtime_options`: what the plan's program must do as it was priced."""
    out = {}
    for key in ("gradient_bucket_bytes", "bucket_copies", "batchnorm_stats"):
        if hasattr(cost_model, key):
            out[key] = getattr(cost_model, key)
    return out


def _coverage(cost_model) -> dict:
    """:attr:`Plan.profile_coverage` from the cost model's lookups (empty without a profile)."""
    cov = getattr(cost_model, "profile_coverage", None)
    if cov is None:
        return {}
    return {"table": str(cov.table), "matched": list(cov.matched),
            "partial": list(cov.partial), "unmatched": list(cov.unmatched)}



#: The least time a solve or the cross-check is started with under ``time_limit`` (a
#: limit used up by the build still gives the solver this, so it returns an answer).
_MIN_SOLVE_SECONDS = 0.05

#: The most plans ``solve(..., rerank=k)`` re-ranks (each is one more exact solve).
MAX_RERANK = 1000

#: The budget binds when the plan leaves less than this share of it free on some device.
_BINDING_SHARE = 0.01


def _budget_effect(problem: Problem, ev, budget: float | None, step: float) -> dict:
    """What the memory budget costs the plan (see :attr:`Plan.budget_effect`)."""
    if budget is None or ev.peak_memory is None:
        return {}
    d = int(np.argmax(ev.peak_memory))
    headroom = float(budget - ev.peak_memory[d])
    if headroom > _BINDING_SHARE * budget:
        return {}
    out: dict[str, Any] = {"device": d, "headroom_bytes": headroom,
                           "unconstrained_step_seconds": None, "cost_of_budget": None}
    try:
        free = solve_problem(problem.with_memory_limit(None), "dp", time_limit=10.0)
    except Exception as exc:          # noqa: BLE001 - a diagnosis only
        logger.info("the unconstrained optimum was not computed: %s", exc)
        return out
    if free.status == OPTIMAL and free.objective > 0:
        out["unconstrained_step_seconds"] = float(free.objective)
        out["cost_of_budget"] = step / float(free.objective) - 1.0
    return out


def _simulations(built, problem: Problem, a: np.ndarray, simulate: bool,
                 rerank: int | None, time_limit: float | None,
                 baselines: Mapping[str, np.ndarray]):
    """``(simulated time of an assignment or None, re-ranked candidates)`` for solve().

    The candidates are the ``rerank`` best assignments of ``problem`` by predicted time and
    the baselines (feasible ones, not already among them), so the plan is never slower in
    simulation than a baseline."""
    from ..costs.simulator import simulate_assignment
    cache: dict[tuple, float] = {}

    def sim(assignment) -> float | None:
        if not simulate and not rerank:
            return None
        key = tuple(int(x) for x in assignment)
        if key not in cache:
            cache[key] = float(simulate_assignment(built, key).step_seconds)
        return cache[key]
    if rerank is None:
        return sim, ()
    from ..solvers.kbest import k_best
    rerank = check_whole("rerank", rerank, 1, MAX_RERANK,
                         "each plan re-ranked is one more exact solve")
    opts = {"time_limit": time_limit} if time_limit is not None else {}
    sols = k_best(problem, int(rerank), first=a, **opts)
    cands = [{"rank": i, "baseline": None, "predicted_seconds": s.objective,
              "simulated_seconds": sim(s.assignment), "assignment": s.assignment}
             for i, s in enumerate(sols)]
    seen = {c["assignment"] for c in cands}
    for name, ba in baselines.items():
        key = tuple(int(x) for x in ba)
        ev = problem.evaluate(key)
        if key in seen or not ev.feasible or not np.isfinite(ev.cost):
            continue
        seen.add(key)
        cands.append({"rank": None, "baseline": name, "predicted_seconds": float(ev.cost),
                      "simulated_seconds": sim(key), "assignment": key})
    best = min(cands, key=lambda c: (c["simulated_seconds"], c["predicted_seconds"],
                                     c["rank"] if c["rank"] is not None else len(cands)))
    return sim, [{**c, "chosen": c is best} for c in cands]
