"""One sweep item: :func:`run_item` runs it, in this process or its own; the built-in kinds.

Imports :mod:`.kinds` only, of ``sweep/`` (never :mod:`.runner`, which imports this module;
it has its own logger); ``__version__`` from :mod:`milp_parallel._version`, not the package
face; and, lazily, :mod:`milp_parallel.inputs`, :mod:`milp_parallel.plan` and
:mod:`milp_parallel.solvers` to run one.

The built-in kinds, registered when ``milp_parallel.sweep`` is imported: ``model`` items
(:func:`milp_parallel.solve` a model on a cluster, a :func:`plan_summary` kept) and
``problem`` items (:func:`milp_parallel.solvers.solve_problem` on a Problem file).
"""

from __future__ import annotations

import logging
import math
import platform
import socket
import time
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import FormatError, InfeasibleError, MilpParallelError
from ..isolation import run_isolated
from ..units import DEVICE_MEMORY, NO_LIMIT
from .kinds import (
    _KINDS,
    FAILED,
    INFEASIBLE,
    ITEM_STATUSES,
    SweepItem,
    _item_path,
    register_item_kind,
)

logger = logging.getLogger(__name__)


def _finite(x: Any) -> float | None:
    """A JSON-safe float: ``None`` for NaN, +/-inf, or missing."""
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None



def _problem_size(problem) -> dict:
    k = problem.n_configs
    return {"n_nodes": int(problem.n_nodes), "n_edges": int(problem.n_edges),
            "n_configs": int(k.sum()),
            "n_edge_pairs": int(sum(k[u] * k[v] for u, v in problem.edges))}


def load_problem_file(path: str | Path):
    """Read a Problem file, ours or IOPDDL (:func:`milp_parallel.problem.load_problem`)."""
    from ..problem import load_problem
    return load_problem(path)


def plan_summary(plan) -> dict:
    """The numbers of a :class:`~milp_parallel.plan.Plan` that a result line keeps."""
    cc = getattr(plan, "cross_check", None)
    baselines = {}
    for name, b in (getattr(plan, "baselines", None) or {}).items():
        baselines[name] = {"step_seconds": _finite(b.step_seconds),
                           "compute_seconds": _finite(b.compute_seconds),
                           "sync_seconds": _finite(b.sync_seconds),
                           "transfer_seconds": _finite(b.transfer_seconds),
                           "feasible": bool(b.feasible), "speedup": _finite(b.speedup)}
    mem = getattr(plan, "memory_bytes", None) or ()
    configs: dict[str, int] = {}
    for layer in plan.layers:
        configs[layer.config] = configs.get(layer.config, 0) + 1
    return {
        "step_seconds": _finite(plan.step_seconds),
        "throughput": _finite(plan.throughput),
        "compute_seconds": _finite(plan.compute_seconds),
        "sync_seconds": _finite(plan.sync_seconds),
        "transfer_seconds": _finite(plan.transfer_seconds),
        "peak_memory_bytes": _finite(max(mem)) if len(mem) else None,
        "memory_capacity_bytes": _finite(getattr(plan, "memory_capacity_bytes", None)),
        "n_layers": len(plan.layers),
        "configs": configs,
        "batch_size": getattr(plan, "batch_size", None),
        "baselines": baselines,
        "cross_check": getattr(cc, "verdict", None),
        "exact_objective": _finite(getattr(cc, "exact_objective", None)),
        "exact_seconds": _finite(getattr(cc, "exact_seconds", None)),
    }


def _run_problem_item(item: SweepItem) -> dict:
    """Runner of ``problem`` items: :func:`~milp_parallel.solvers.solve_problem` on a file."""
    from ..solvers import solve_problem
    p = dict(item.params)
    problem = load_problem_file(_item_path(p["problem"], item.base_dir))
    limit = p.get("memory_limit")
    if limit is not None:
        problem = problem.with_memory_limit(None if limit == NO_LIMIT else limit)
    size = _problem_size(problem)
    opts = {} if p.get("time_limit") is None else {"time_limit": p["time_limit"]}
    res = solve_problem(problem, p["solver"], **opts)
    return {"problem": size, "status": res.status, "objective": _finite(res.objective),
            "bound": _finite(res.bound), "gap": _finite(res.gap),
            "solve_seconds": _finite(res.seconds), "solver_used": res.solver}


def _run_model_item(item: SweepItem) -> dict:
    """Runner of ``model`` items: :func:`~milp_parallel.plan.solve` a model on a cluster."""
    from ..inputs import is_path
    from ..plan import make_problem, solve
    p = dict(item.params)
    model, cluster = (str(_item_path(x, item.base_dir)) if is_path(x) else x
                      for x in (p["model"], p["cluster"]))
    kw = dict(devices=p["devices"], batch_size=p.get("batch_size"),
              memory_limit=p.get("memory_limit") or DEVICE_MEMORY)
    plan = solve(model, cluster, solver=p["solver"], time_limit=p.get("time_limit"),
                 cross_check=p.get("cross_check", True), **kw)
    rec = {"status": plan.status, "objective": _finite(plan.objective),
           "bound": _finite(plan.bound), "gap": _finite(plan.gap),
           "solve_seconds": _finite(plan.solve_seconds), "solver_used": plan.solver,
           "plan": plan_summary(plan)}
    try:  # the size of the problem solved (built again, outside the timings)
        rec["problem"] = _problem_size(make_problem(model, cluster, **kw))
    except MilpParallelError:  # the size is a nicety; the result stands
        rec["problem"] = {"n_nodes": len(plan.assignment) or len(plan.layers)}
    return rec


register_item_kind("model", _run_model_item, marker="models",
                   keys={"models": "model", "clusters": "cluster", "devices": "device",
                         "batch_sizes": "batch_size", "cross_check": "cross_check"},
                   required=("clusters", "devices"))
register_item_kind("problem", _run_problem_item, marker="problems",
                   keys={"problems": "problem"})

#: The built-in item kinds (more may be added with :func:`register_item_kind`).
ITEM_KINDS = ("model", "problem")


def run_item(item: SweepItem, runner: str | None = None) -> dict:
    """Run one item in this process and return its result record (never raises for a
    failure of the item itself: the record's ``status`` says ``failed`` and ``error`` why).

    The record holds ``id``, ``kind``, ``params``, ``status``, ``objective``, ``bound``,
    ``gap``, ``solve_seconds``, ``wall_seconds``, ``problem`` (size), ``plan`` (model
    items: :func:`plan_summary`), ``error``, ``version``, ``host``, ``started``.

    Parameters
    ----------
    item : SweepItem
    runner : str, optional
        The kind's runner reference (default: looked up in the registry).
    """
    from ..isolation import _resolve
    p = dict(item.params)
    rec: dict[str, Any] = {"id": item.id, "kind": item.kind, "params": p, "status": FAILED,
                           "objective": None, "bound": None, "gap": None,
                           "solve_seconds": None, "error": None}
    t0 = time.perf_counter()
    started = time.time()
    try:
        if runner is None:
            if item.kind not in _KINDS:
                raise FormatError(f"unknown item kind {item.kind!r}; known: "
                                  f"{', '.join(_KINDS)}")
            runner = _KINDS[item.kind].runner
        out = _resolve(runner)(item)
        rec.update(out)
        if rec["status"] not in ITEM_STATUSES:
            raise FormatError(f"the {item.kind} runner returned status {rec['status']!r}; "
                              f"expected one of {', '.join(ITEM_STATUSES)}")
    except InfeasibleError as exc:
        rec.update(status=INFEASIBLE, error=str(exc),
                   least_memory_bytes=_finite(exc.least_memory_bytes),
                   budget_bytes=_finite(exc.budget_bytes))
    except MilpParallelError as exc:
        rec.update(status=FAILED, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a sweep records any failure and goes on
        logger.debug("item %s failed", item.id, exc_info=True)
        rec.update(status=FAILED, error=f"{type(exc).__name__}: {exc}")
    rec.update(wall_seconds=time.perf_counter() - t0, started=started, version=__version__,
               host=socket.gethostname(), python=platform.python_version())
    return rec


def _run_item_dict(item: dict, runner: str | None) -> dict:
    """Worker-process entry (through :func:`~milp_parallel.isolation.run_isolated`)."""
    return run_item(SweepItem.from_dict(item), runner)


def _failure(item: SweepItem, status: str, error: str, seconds: float) -> dict:
    return {"id": item.id, "kind": item.kind, "params": dict(item.params), "status": status,
            "objective": None, "bound": None, "gap": None, "solve_seconds": None,
            "error": error, "wall_seconds": seconds, "started": time.time() - seconds,
            "version": __version__, "host": socket.gethostname(),
            "python": platform.python_version()}


def run_item_isolated(item: SweepItem) -> dict:
    """Run one item in a fresh Python process, killing it after ``item.kill_after`` seconds.

    Through :func:`milp_parallel.isolation.run_isolated`: a crash, a non-zero exit or a kill
    of the child (e.g. ``SIGKILL`` from the OOM killer) gives a ``failed`` record naming the
    signal or exit code and the end of its stderr; a timeout gives a ``timeout`` record. This
    is the function the executors run.
    """
    kind = _KINDS.get(item.kind)
    runner = kind.runner if kind is not None else None
    out = run_isolated(_run_item_dict, item.to_dict(), runner, kill_after=item.kill_after)
    if out.ok:
        return out.value
    return _failure(item, out.status, out.error, out.seconds)

