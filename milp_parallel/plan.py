"""The user-facing entry point: :func:`solve` a model on a cluster and get a :class:`Plan`.

``solve`` runs the whole pipeline: the model (a zoo name, a :class:`~milp_parallel.graph.
LayerGraph` or a graph JSON file) and the cluster (a preset name, a :class:`~milp_parallel.
topology.Topology` or a cluster JSON file) become a :class:`~milp_parallel.Problem`
(:func:`~milp_parallel.build.build_problem`), a solver picks one configuration per node
(:func:`~milp_parallel.solvers.solve_problem`), the exact graph search checks the answer, and
the result is mapped back to layers: per layer its configuration, its predicted compute,
gradient-synchronization and transfer time and its memory; for the whole step the time, the
memory per device against the budget, the solver's statistics, and the same numbers for four
baselines (:mod:`milp_parallel.baselines`), all evaluated by the same problem.

A :class:`Plan` is a frozen value: ``str(plan)`` is a readable table, ``plan.to_json()`` and
:meth:`Plan.from_json` round-trip it exactly.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .baselines import NodeConfigs, baseline_assignments, degrees_dict
from .errors import (CrossCheckError, FormatError, InfeasibleError, InvalidGraphError,
                     InvalidProblemError, InvalidTopologyError, ProblemTooLargeError,
                     SolverUnavailableError, UnsupportedProblemError)
from .problem import MEMORY_RTOL, Problem
from .solvers import SolveResult, available_solvers, solve_problem
from .solvers.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN

__all__ = ["solve", "make_problem", "Plan", "LayerChoice", "Baseline", "CrossCheck", "cross_check_results",
           "least_memory_bytes", "PLAN_FORMAT", "PLAN_FORMAT_VERSION", "CROSS_CHECK_RTOL"]

logger = logging.getLogger(__name__)

PLAN_FORMAT = "milp_parallel.plan"
PLAN_FORMAT_VERSION = 1

#: Relative tolerance of the cross-check: the solver's and the exact search's optima must
#: agree within it.
CROSS_CHECK_RTOL = 1e-6

#: MILP backends tried, in order, when the main solver is the exact search itself.
_MILP_ORDER = ("highs", "cpsat", "cbc")


# ---------------------------------------------------------------------- values
@dataclass(frozen=True)
class LayerChoice:
    """The chosen configuration of one layer and what it costs.

    Attributes
    ----------
    name, op : str
        The layer's name and op.
    config : str
        The configuration, readable: ``"n=2 h=2"`` or ``"serial"``.
    degrees : dict
        ``{dim: degree}`` of the split dimensions (empty when serial).
    n_devices : int
        Devices the layer runs on (the product of its degrees).
    compute_seconds, sync_seconds, transfer_seconds : float
        Predicted forward+backward compute of the largest tile, gradient all-reduce, and the
        redistribution of the layer's inputs (attributed to the consumer) per step.
    memory_bytes : float
        The layer's memory on its most loaded device (weights, gradients, optimizer state,
        kept activations).
    node : str
        The problem node the layer belongs to: its own name, or, for an element-wise layer
        merged into its producer, the producer's name (it follows the producer's layout).
    """

    name: str
    op: str
    config: str
    degrees: Mapping[str, int]
    n_devices: int
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    memory_bytes: float
    node: str = ""

    @property
    def seconds(self) -> float:
        """Compute + sync + transfer."""
        return self.compute_seconds + self.sync_seconds + self.transfer_seconds

    @property
    def merged(self) -> bool:
        """Whether the layer was merged into its producer (follows it)."""
        return bool(self.node) and self.node != self.name


@dataclass(frozen=True)
class CrossCheck:
    """The outcome of checking the solver's answer against an independent exact solver.

    Attributes
    ----------
    verdict : str
        ``"agreed"`` (same optimum within :data:`CROSS_CHECK_RTOL`); ``"not run: <reason>"``
        (cross-check off, or the exact search cannot handle this instance); or, when the main
        solver did not prove optimality, ``"bounded: ..."`` (the exact optimum lies between
        the solver's bound and objective; the text says how far the solver's answer is from
        it). A disagreement is never a verdict: it raises
        :class:`~milp_parallel.errors.CrossCheckError`.
    exact_objective : float or None
        The checking solver's optimum (``None`` when not run).
    exact_seconds : float or None
        Its wall-clock time.
    exact_solver : str or None
        Which solver checked (``"dp"``, or a MILP backend when the main solver is ``dp``).
    """

    verdict: str
    exact_objective: float | None = None
    exact_seconds: float | None = None
    exact_solver: str | None = None

    @property
    def ran(self) -> bool:
        return not self.verdict.startswith("not run")


@dataclass(frozen=True)
class Baseline:
    """A hand-written strategy evaluated by the same problem as the plan.

    Attributes
    ----------
    name : str
        ``"data"``, ``"model"``, ``"owt"`` or ``"best_uniform"`` (see
        :mod:`milp_parallel.baselines`).
    step_seconds, compute_seconds, sync_seconds, transfer_seconds : float
        Predicted step time (``inf`` if the strategy makes a forbidden choice) and its split.
    peak_memory_bytes : float
        The largest per-device peak memory.
    feasible : bool
        Whether it fits within the memory budget (and makes no forbidden choice).
    speedup : float
        ``baseline step time / plan step time`` (> 1: the plan is faster).
    description : str
        The strategy in a few words (e.g. ``"n=4"`` for a uniform one).
    assignment : tuple of int
        The configuration index of each problem node.
    simulated_step_seconds : float or None
        The step simulator's time of the same assignment (:func:`milp_parallel.simulate`;
        ``None`` when not simulated).
    """

    name: str
    step_seconds: float
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    peak_memory_bytes: float
    feasible: bool
    speedup: float
    description: str = ""
    assignment: tuple[int, ...] = ()
    simulated_step_seconds: float | None = None


@dataclass(frozen=True)
class Plan:
    """An optimized parallelization plan: one configuration per layer, with its costs.

    Attributes
    ----------
    model, cluster : str
        Names of the model and the cluster.
    devices : int
        Devices used.
    batch_size : int
        Global batch (samples per step).
    layers : tuple of LayerChoice
        Every layer of the graph, in topological order (merged element-wise layers included).
    step_seconds : float
        Predicted time of one training step (the problem's objective for the assignment).
    compute_seconds, sync_seconds, transfer_seconds : float
        Its split (sums over the layers).
    throughput : float
        Samples per second, ``batch_size / step_seconds``.
    memory_bytes : tuple of float
        Peak memory per device.
    memory_capacity_bytes : float
        Memory of one device of the cluster.
    solver, status : str
        The solver that produced the plan and its status (``"optimal"`` only when proved).
    objective, bound, gap : float
        The solver's objective, proved lower bound and relative gap.
    solve_seconds : float
        Wall-clock time of the solver.
    cross_check : CrossCheck
    baselines : dict
        ``name -> Baseline``.
    memory_limit_bytes : float or None
        The budget per device the problem was solved under (``None``: no budget).
    assignment : tuple of int
        The configuration index of each problem node (to re-evaluate the plan on the
        problem).
    solver_stats : dict
        The solver's statistics (JSON-ready).
    problem_size : dict
        ``n_layers``, ``n_nodes``, ``n_edges``, ``n_configs`` (total), ``max_configs``,
        ``edge_table_entries``, ``build_seconds``.
    simulated_step_seconds : float or None
        The step simulator's time of the plan (:func:`milp_parallel.simulate`: transfers,
        bucketed all-reduces overlapped with the backward pass, concurrent branches); ``None``
        when not simulated. ``step_seconds`` is the solver's separable prediction.
    rerank : tuple of dict
        With ``solve(..., rerank=k)``: the candidates, the ``k`` best assignments by predicted
        time then the baselines not among them, each ``{"rank", "baseline",
        "predicted_seconds", "simulated_seconds", "chosen"}`` (``rank`` by prediction for
        the k best, ``baseline`` the baseline's name otherwise; the plan is the chosen one:
        the fastest simulated). Empty otherwise.
    """

    model: str
    cluster: str
    devices: int
    batch_size: int
    layers: tuple[LayerChoice, ...]
    step_seconds: float
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    throughput: float
    memory_bytes: tuple[float, ...]
    memory_capacity_bytes: float
    solver: str
    status: str
    objective: float
    bound: float
    gap: float
    solve_seconds: float
    cross_check: CrossCheck
    baselines: Mapping[str, Baseline]
    memory_limit_bytes: float | None = None
    assignment: tuple[int, ...] = ()
    solver_stats: Mapping[str, Any] = field(default_factory=dict)
    problem_size: Mapping[str, Any] = field(default_factory=dict)
    simulated_step_seconds: float | None = None
    rerank: tuple[Mapping[str, Any], ...] = ()

    # -------------------------------------------------------------- queries
    @property
    def is_optimal(self) -> bool:
        """Whether the solver proved the plan optimal."""
        return self.status == OPTIMAL

    @property
    def peak_memory_bytes(self) -> float:
        """The largest per-device peak memory."""
        return max(self.memory_bytes) if self.memory_bytes else 0.0

    def layer(self, name: str) -> LayerChoice:
        """The :class:`LayerChoice` of the layer called ``name``.

        Raises
        ------
        KeyError
            If the plan has no such layer.
        """
        for lc in self.layers:
            if lc.name == name:
                return lc
        raise KeyError(f"the plan has no layer {name!r}")

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """The plan as JSON-ready data (``inf``/``nan`` written as strings).

        :meth:`from_dict` gives back an equal plan.
        """
        out = {"format": PLAN_FORMAT, "version": PLAN_FORMAT_VERSION}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "layers":
                v = [_enc({g.name: getattr(lc, g.name) for g in fields(lc)}) for lc in v]
            elif f.name == "baselines":
                v = {k: _enc({g.name: getattr(b, g.name) for g in fields(b)})
                     for k, b in v.items()}
            elif f.name == "cross_check":
                v = _enc({g.name: getattr(v, g.name) for g in fields(v)})
            else:
                v = _enc(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, data: Mapping, *, source: str = "<dict>") -> "Plan":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        FormatError
            If the data is not a plan document of a known version.
        """
        if not isinstance(data, Mapping) or data.get("format") != PLAN_FORMAT:
            raise FormatError(f"{source}: not a {PLAN_FORMAT} document (missing or wrong "
                              "'format' key)")
        if data.get("version") != PLAN_FORMAT_VERSION:
            raise FormatError(f"{source}: unsupported plan version {data.get('version')!r}; "
                              f"this library reads version {PLAN_FORMAT_VERSION}")
        try:
            kw = {f.name: _dec(data[f.name]) for f in fields(cls) if f.name in data}
            kw["layers"] = tuple(
                LayerChoice(**{**d, "degrees": {k: int(x) for k, x in d["degrees"].items()}})
                for d in kw["layers"])
            kw["baselines"] = {k: Baseline(**{**d, "assignment": tuple(d["assignment"])})
                               for k, d in kw["baselines"].items()}
            kw["cross_check"] = CrossCheck(**kw["cross_check"])
            kw["memory_bytes"] = tuple(kw["memory_bytes"])
            kw["assignment"] = tuple(kw.get("assignment", ()))
            kw["rerank"] = tuple(kw.get("rerank", ()))
            return cls(**kw)
        except (KeyError, TypeError) as exc:
            raise FormatError(f"{source}: malformed plan document ({exc})") from None

    def to_json(self, *, indent: int | None = 2) -> str:
        """The plan as a JSON string (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Inverse of :meth:`to_json`.

        Raises
        ------
        FormatError
            If the text is not JSON or not a plan document.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"not a JSON plan: {exc}") from None
        return cls.from_dict(data, source="<json>")

    def save(self, path: str | os.PathLike) -> None:
        """Write the plan as JSON to ``path``."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Plan":
        """Read a plan written by :meth:`save`.

        Raises
        ------
        FormatError
            If the file is missing, not JSON, or not a plan.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise FormatError(f"{path}: cannot read ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_dict(data, source=str(path))

    # -------------------------------------------------------------- text
    def __str__(self) -> str:
        return format_plan(self)


# ---------------------------------------------------------------------- JSON helpers
def _enc(x):
    if isinstance(x, Mapping):
        return {str(k): _enc(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_enc(v) for v in x]
    if isinstance(x, np.ndarray):
        return _enc(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if x is None or isinstance(x, str):
        return x
    return repr(x)


_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _dec(x):
    if isinstance(x, dict):
        return {k: _dec(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if isinstance(x, str) and x in _SPECIAL:
        return _SPECIAL[x]
    return x


def _json_safe(stats: Mapping) -> dict:
    """Solver stats as plain JSON data (arrays become lists, objects their repr)."""
    return _dec(_enc(dict(stats)))


# ---------------------------------------------------------------------- text table
def _ms(s: float) -> str:
    return "inf" if not math.isfinite(s) else f"{s * 1e3:.4g}"


def _gib(b: float) -> str:
    return "inf" if not math.isfinite(b) else f"{b / 2**30:.3f}"


def format_plan(plan: Plan) -> str:
    """The plan as a readable text table (what ``str(plan)`` returns)."""
    lines = []
    status = plan.status.upper()
    if plan.status != OPTIMAL:
        status += f" (NOT proved optimal; bound {_ms(plan.bound)} ms, gap {plan.gap:.3g})"
    lines.append(f"Plan for {plan.model} on {plan.cluster}: {plan.devices} devices, "
                 f"batch {plan.batch_size}")
    lines.append(f"solver {plan.solver}: {status}, objective {_ms(plan.objective)} ms, "
                 f"{plan.solve_seconds:.3f} s")
    lines.append(f"step {_ms(plan.step_seconds)} ms = compute {_ms(plan.compute_seconds)} + "
                 f"sync {_ms(plan.sync_seconds)} + transfer {_ms(plan.transfer_seconds)} ms; "
                 f"throughput {plan.throughput:.1f} samples/s")
    if plan.simulated_step_seconds is not None:
        lines.append(f"simulated step {_ms(plan.simulated_step_seconds)} ms (overlap, buckets "
                     "and concurrency; the line above is the solver's separable prediction)")
    if plan.rerank:
        chosen = next(c for c in plan.rerank if c["chosen"])
        which = (f"the #{chosen['rank'] + 1} by prediction" if chosen["rank"] is not None
                 else f"the {chosen['baseline']} baseline")
        k = sum(c["rank"] is not None for c in plan.rerank)
        lines.append(f"re-ranked the {k} best plans and the baselines by simulated time: "
                     f"chose {which}")
    budget = ("no budget" if plan.memory_limit_bytes is None
              else f"budget {_gib(plan.memory_limit_bytes)} GiB")
    lines.append(f"memory: peak {_gib(plan.peak_memory_bytes)} GiB per device "
                 f"(capacity {_gib(plan.memory_capacity_bytes)} GiB, {budget})")
    lines.append("")
    w = max([len("layer")] + [len(lc.name) for lc in plan.layers])
    wo = max([len("op")] + [len(lc.op) for lc in plan.layers])
    wc = max([len("config")] + [len(lc.config) for lc in plan.layers])
    head = (f"{'layer':<{w}}  {'op':<{wo}}  {'config':<{wc}}  {'dev':>4}  {'compute ms':>10}  "
            f"{'sync ms':>9}  {'xfer ms':>9}  {'mem MiB':>9}")
    lines += [head, "-" * len(head)]
    for lc in plan.layers:
        cfg = lc.config + ("" if not lc.merged else "")
        note = f"  (follows {lc.node})" if lc.merged else ""
        lines.append(f"{lc.name:<{w}}  {lc.op:<{wo}}  {cfg:<{wc}}  {lc.n_devices:>4}  "
                     f"{_ms(lc.compute_seconds):>10}  {_ms(lc.sync_seconds):>9}  "
                     f"{_ms(lc.transfer_seconds):>9}  {lc.memory_bytes / 2**20:>9.2f}{note}")
    if plan.baselines:
        lines += ["", f"{'baseline':<12}  {'step ms':>10}  {'sim ms':>9}  {'compute':>9}  "
                      f"{'sync':>9}  {'xfer':>9}  {'peak GiB':>8}  {'fits':>4}  {'speedup':>7}  "
                      "strategy"]
        for b in plan.baselines.values():
            sim = "-" if b.simulated_step_seconds is None else _ms(b.simulated_step_seconds)
            lines.append(f"{b.name:<12}  {_ms(b.step_seconds):>10}  {sim:>9}  "
                         f"{_ms(b.compute_seconds):>9}"
                         f"  {_ms(b.sync_seconds):>9}  {_ms(b.transfer_seconds):>9}  "
                         f"{_gib(b.peak_memory_bytes):>8}  {'yes' if b.feasible else 'NO':>4}  "
                         f"{b.speedup:>6.2f}x  {b.description}")
    cc = plan.cross_check
    extra = ""
    if cc.exact_objective is not None:
        extra = (f" ({cc.exact_solver}: {_ms(cc.exact_objective)} ms in "
                 f"{cc.exact_seconds:.3f} s)")
    lines += ["", f"cross-check: {cc.verdict}{extra}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------- cross-check
def _rel_diff(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def cross_check_results(problem: Problem, result: SolveResult, exact: SolveResult, *,
                        rtol: float = CROSS_CHECK_RTOL) -> CrossCheck:
    """Compare a solver's result with an exact solver's on the same problem.

    Both results are re-evaluated on ``problem`` (an objective that does not match its own
    assignment is a disagreement too). Rules:

    - both proved optimal: the objectives must agree within ``rtol`` (relative);
    - the solver only ``feasible``: the exact optimum must not exceed its objective (beyond
      ``rtol``) nor lie below its proved bound (verdict ``"bounded: ..."``);
    - the exact solver says infeasible: the solver must have no feasible assignment either;
    - the exact solver did not prove optimality: verdict ``"not run: ..."``.

    Parameters
    ----------
    problem : Problem
    result : SolveResult
        The main solver's result.
    exact : SolveResult
        The checking solver's result.
    rtol : float
        Relative tolerance (default :data:`CROSS_CHECK_RTOL`).

    Returns
    -------
    CrossCheck

    Raises
    ------
    CrossCheckError
        On a disagreement; it carries both assignments and objectives.
    """
    def fail(why: str):
        raise CrossCheckError(
            f"cross-check failed: {why} (solver {result.solver!r}: status {result.status}, "
            f"objective {result.objective!r}; exact {exact.solver!r}: status {exact.status}, "
            f"objective {exact.objective!r})",
            solver_assignment=result.assignment, exact_assignment=exact.assignment,
            solver_objective=result.objective, exact_objective=exact.objective)

    done = dict(exact_seconds=float(exact.seconds), exact_solver=exact.solver)
    for r, who in ((result, "solver"), (exact, "exact search")):
        if r.assignment is not None:
            ev = problem.evaluate(r.assignment)
            if not ev.feasible:
                fail(f"the {who}'s assignment is not feasible (cost {ev.cost!r}, "
                     "memory over budget or a forbidden choice)")
            if _rel_diff(ev.cost, r.objective) > rtol:
                fail(f"the {who} reports objective {r.objective!r} but its assignment costs "
                     f"{ev.cost!r}")
    if exact.status == INFEASIBLE:
        if result.assignment is not None:
            fail("the exact search proved the problem infeasible, the solver found an "
                 "assignment")
        return CrossCheck("agreed", None, **done)
    if exact.status != OPTIMAL:
        return CrossCheck(f"not run: the exact search ended {exact.status} (not proved)",
                          None if exact.assignment is None else float(exact.objective), **done)
    x = float(exact.objective)
    if result.status == INFEASIBLE or result.assignment is None:
        if result.status == INFEASIBLE:
            fail("the solver says infeasible, the exact search found an optimum")
        return CrossCheck(f"bounded: the solver found no assignment ({result.status}); the "
                          f"exact optimum is {x!r}", x, **done)
    obj = float(result.objective)
    if result.status == OPTIMAL:
        if _rel_diff(obj, x) > rtol:
            fail(f"the optima differ by {_rel_diff(obj, x):.3g} (relative), above {rtol:g}")
        return CrossCheck("agreed", x, **done)
    # solver feasible only: exact <= obj, and bound <= exact
    if x > obj * (1 + rtol) + 1e-300:
        fail("the exact optimum is worse than an assignment the solver found")
    if math.isfinite(result.bound) and result.bound > x * (1 + rtol) + 1e-300:
        fail(f"the solver's proved bound {result.bound!r} is above the exact optimum")
    if _rel_diff(obj, x) <= rtol:
        return CrossCheck("agreed", x, **done)
    return CrossCheck(f"bounded: the solver's answer is {(obj / x - 1) * 100:.3g}% above the "
                      f"exact optimum", x, **done)


# ---------------------------------------------------------------------- memory diagnosis
def least_memory_bytes(problem: Problem) -> np.ndarray | None:
    """Per device, the least memory any assignment needs (all-live model).

    The sum over nodes of each node's least memory among its configurations of finite cost:
    exact per device for the all-live model (every node live at once), a lower bound for the
    interval model. ``None`` without memory tables.
    """
    if problem.memory is None:
        return None
    total = np.zeros(problem.n_devices)
    for c, m in zip(problem.node_costs, problem.memory):
        fin = np.isfinite(c)
        total += (m[fin] if fin.any() else m).min(axis=0)
    return total


def _infeasible_error(problem: Problem, result: SolveResult | None, what: str
                      ) -> InfeasibleError:
    budget = problem.memory_limit
    least = None
    for key in ("least_memory", "least_peak_memory"):     # dp's and brute's stats
        if result is not None and key in result.stats and problem.memory is not None:
            least = np.broadcast_to(np.asarray(result.stats[key], dtype=float),
                                    (problem.n_devices,))
            break
    if least is None:
        least = least_memory_bytes(problem)
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


# ---------------------------------------------------------------------- inputs
def _is_path(x) -> bool:
    if isinstance(x, os.PathLike):
        return True
    return isinstance(x, str) and (x.endswith((".json", ".json.gz")) or os.sep in x)


def _load_model(model, batch_size: int | None):
    """``(graph, name)`` from a zoo name, a LayerGraph or a graph JSON path."""
    from .graph import LayerGraph
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidGraphError(f"batch_size must be a positive integer, got "
                                    f"{batch_size!r}")
        batch_size = int(batch_size)
    if isinstance(model, LayerGraph):
        graph, name = model, getattr(model, "name", None) or "graph"
    elif _is_path(model):
        path = Path(model)
        if not path.exists():
            raise FormatError(f"{path}: no such model file (give a zoo name such as 'alexnet', "
                              "a LayerGraph, or the path of a graph JSON file)")
        graph = LayerGraph.load(path)
        name = getattr(graph, "name", None) or path.name.split(".")[0]
    elif isinstance(model, str):
        from . import models
        graph = models.get(model, batch_size=batch_size)
        return graph, model
    else:
        raise TypeError(f"model must be a zoo name, a LayerGraph or a path, got "
                        f"{type(model).__name__}")
    if batch_size is not None and batch_size != graph.batch_size:
        graph = graph.with_batch_size(batch_size)
    return graph, str(name)


def _load_cluster(cluster, devices: int | None):
    """``(topology, name)`` from a preset name, a Topology or a cluster JSON path."""
    from .topology import Topology
    if isinstance(cluster, Topology):
        topo = cluster
    elif _is_path(cluster):
        path = Path(cluster)
        if not path.exists():
            raise FormatError(f"{path}: no such cluster file (give a preset name, a Topology, "
                              "or the path of a cluster JSON file)")
        topo = Topology.load(path)
    elif isinstance(cluster, str):
        from . import clusters
        topo = clusters.get(cluster)
    else:
        raise TypeError(f"cluster must be a preset name, a Topology or a path, got "
                        f"{type(cluster).__name__}")
    name = getattr(topo, "name", None) or (cluster if isinstance(cluster, str) else "cluster")
    if (devices is not None and isinstance(cluster, str) and not _is_path(cluster)
            and isinstance(devices, (int, np.integer)) and not isinstance(devices, bool)
            and devices > topo.n_devices):
        # a preset grows to as many nodes as the devices asked for need
        from . import clusters
        per_node = topo.levels[0].fanout if len(topo.levels) > 1 else topo.n_devices
        topo = clusters.get(cluster, nodes=-(-int(devices) // per_node))
    if devices is not None:
        if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) \
                or not 1 <= devices <= topo.n_devices:
            raise InvalidTopologyError(
                f"devices={devices!r}: give a whole number from 1 to {topo.n_devices} (the "
                f"devices of cluster {name!r}), or a larger cluster")
        if devices != topo.n_devices:
            topo = topo.with_devices(int(devices))
    return topo, str(name)


def _memory_budget(memory_limit, topo) -> float | None:
    """The budget per device in bytes: ``None`` -> the device memory; ``inf`` -> no budget."""
    if memory_limit is None:
        return float(topo.device.memory_bytes)
    if isinstance(memory_limit, str):
        from .units import parse_bytes
        return float(parse_bytes(memory_limit))
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, float, np.number)):
        raise InvalidProblemError(f"memory_limit must be a number of bytes, a size such as "
                                  f"'16GiB', or None (the device memory); got {memory_limit!r}")
    x = float(memory_limit)
    if math.isnan(x) or x <= 0:
        raise InvalidProblemError(f"memory_limit must be positive bytes, got {memory_limit!r}")
    return None if math.isinf(x) else x


# ---------------------------------------------------------------------- layer accounting
class _Accounting:
    """Maps assignments of a built problem back to layers and splits their costs.

    Per-layer compute, sync and memory are the rows of the builder's per-member tables for the
    chosen configuration (the very numbers summed into the problem's node costs); transfers
    are the cost model's ``t_x`` of each graph edge between two nodes, attributed to the
    consumer (the Problem's edge tables are sums of these). So the split adds up to the
    objective.
    """

    def __init__(self, built):
        self.built = built
        self.problem: Problem = built.problem
        self.graph = built.graph
        self.cm = built.cost_model
        self.layers = tuple(self.graph.layers)
        self.node_of = dict(built.node_of)
        self.heads = tuple(m[0] for m in built.members)
        self.member_index = {name: (v, j) for v, ms in enumerate(built.members)
                             for j, name in enumerate(ms)}
        self.edges = [(u, w, i) for e in built.edge_members for (u, w, i) in e]
        self.nodes = [NodeConfigs(self.graph.layer(h).op, tuple(self.graph.layer(h).dims),
                                  np.asarray(c, dtype=np.int64))
                      for h, c in zip(self.heads, built.configs)]

    def degrees(self, name: str, a: np.ndarray) -> np.ndarray:
        v = self.node_of[name]
        return np.asarray(self.built.configs[v][a[v]], dtype=np.int64)

    def breakdown(self, a: np.ndarray) -> dict[str, list[float]]:
        """Per layer ``[compute, sync, transfer, memory on its most loaded device]``."""
        res = {}
        for lay in self.layers:
            v, j = self.member_index[lay.name]
            mc = self.built.member_costs[v][j]
            c = a[v]
            res[lay.name] = [float(mc.compute_seconds[c]), float(mc.sync_seconds[c]), 0.0,
                             float(np.max(mc.memory_bytes[c]))]
        configs = self.built.configs
        for u, w, i in self.edges:
            # the build's (cached) table of this graph edge: one lookup, not a new t_x
            nu, nw = self.node_of[u], self.node_of[w]
            t = self.cm.transfer_table(self.graph.layer(u), self.graph.layer(w), i,
                                       configs[nu], configs[nw])
            res[w][2] += float(t[a[nu], a[nw]])
        return res

    def totals(self, a: np.ndarray) -> tuple[float, float, float]:
        parts = np.array([x[:3] for x in self.breakdown(a).values()]).reshape(-1, 3)
        return tuple(float(s) for s in parts.sum(axis=0))


# ---------------------------------------------------------------------- solve
def _describe(labels: Sequence[str]) -> str:
    """``"n=4"`` when every node has the same label, else the labels with their counts."""
    uniq: dict[str, int] = {}
    for s in labels:
        uniq[s] = uniq.get(s, 0) + 1
    if len(uniq) == 1:
        return next(iter(uniq))
    return ", ".join(f"{s} x{k}" for s, k in sorted(uniq.items(), key=lambda t: -t[1]))


def _checker_for(main: str) -> str | None:
    if main != "dp":
        return "dp"
    avail = set(available_solvers())
    return next((s for s in _MILP_ORDER if s in avail), None)


def _run_check(problem: Problem, result: SolveResult, checker: str | None,
               options: Mapping[str, Any]) -> tuple[CrossCheck, SolveResult | None]:
    if checker is None:
        return CrossCheck("not run: no MILP backend is installed to check the exact search "
                          "(pip install highspy)"), None
    try:
        exact = solve_problem(problem, checker, **options)
    except (ProblemTooLargeError, UnsupportedProblemError, SolverUnavailableError) as exc:
        return CrossCheck(f"not run: {checker} cannot solve this instance ({exc})",
                          exact_solver=checker), None
    return cross_check_results(problem, result, exact), exact


@dataclass(frozen=True)
class _Built:
    built: Any                      # build.BuiltProblem (budget applied)
    budget: float | None
    model_name: str
    cluster_name: str


def _build(model, cluster, *, batch_size=None, devices=None, memory_limit=None,
           config_options=None, cost_model=None, profile=None) -> _Built:
    from .build import build
    from .configs import ConfigOptions

    graph, model_name = _load_model(model, batch_size)
    topo, cluster_name = _load_cluster(cluster, devices)
    if profile is not None:
        if cost_model is not None:
            raise TypeError("give either cost_model or profile, not both (a CostModel takes "
                            "its profile table itself)")
        from .costs import CostModel
        from .profile import ProfileTable
        if not isinstance(profile, ProfileTable):
            profile = ProfileTable.load(profile)
        cost_model = CostModel(topo, profile=profile)
    budget = _memory_budget(memory_limit, topo)
    if isinstance(config_options, ConfigOptions):
        kw = {"config_options": config_options}
    elif config_options is None or isinstance(config_options, Mapping):
        kw = dict(config_options or {})
    else:
        raise TypeError(f"config_options must be a ConfigOptions or a mapping of its fields, "
                        f"got {type(config_options).__name__}")
    b = build(graph, topo, cost_model=cost_model, memory_limit=budget, **kw)
    return _Built(b, budget if b.problem.has_budget else None, model_name, cluster_name)


def make_problem(model, cluster, *, batch_size: int | None = None, devices: int | None = None,
                 memory_limit: float | str | None = None,
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


def solve(model, cluster, *, batch_size: int | None = None, devices: int | None = None,
          solver: str = "auto", memory_limit: float | str | None = None,
          time_limit: float | None = None, cross_check: bool = True,
          config_options: Mapping[str, Any] | None = None, cost_model=None,
          profile=None, simulate: bool = True, rerank: int | None = None,
          **solver_options: Any) -> Plan:
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
    devices : int, optional
        Use the first ``devices`` devices of the cluster (default: all). A preset named by
        ``cluster`` grows to as many nodes as that takes.
    solver : str
        ``"auto"`` (default), ``"dp"``, ``"highs"``, ``"cbc"``, ``"cpsat"`` or ``"brute"``.
    memory_limit : float or str, optional
        The memory budget per device: bytes (``12e9``) or a size (``"12GiB"``). ``None``
        (default): each device's memory; ``math.inf``: no budget.
    time_limit : float, optional
        Seconds for the solver (and the cross-check); a solver that runs out returns its
        best assignment with status ``"feasible"``, shown as not proved optimal.
    cross_check : bool
        Also run an independent exact solver and compare (default ``True``): the graph
        search ``dp``, or, when ``solver="dp"``, a MILP backend. Where it cannot run, the
        plan's ``cross_check.verdict`` says ``"not run: <why>"``.
    config_options : ConfigOptions or mapping, optional
        The configuration space (:class:`~milp_parallel.configs.ConfigOptions`, or a mapping
        of its fields such as ``{"power_of_two": False, "max_degree": {"h": 4}}``).
    cost_model : CostModel, optional
        Default: ``CostModel(topology)`` (it must be made for the same topology, after
        ``devices`` is applied).
    profile : ProfileTable or path, optional
        Measured layer times (:func:`milp_parallel.profile.profile_layers`) used for the
        compute cost instead of FLOP estimates where the table has the tile (the rest fall
        back to estimates). Not together with ``cost_model``.
    simulate : bool, default True
        Also run the step simulator (:func:`milp_parallel.simulate`) on the plan and every
        baseline (``simulated_step_seconds``).
    rerank : int, optional
        Re-rank the ``rerank`` best distinct assignments (by predicted time,
        :func:`milp_parallel.kbest.k_best`) and the baselines by simulated time and return
        the fastest simulated one (``plan.rerank`` lists them). Costs about ``rerank`` x
        nodes exact solves. ``status``, ``objective`` and ``bound`` stay the solver's (of the
        predicted optimum); ``step_seconds`` is the chosen plan's prediction.
    **solver_options
        Passed to the solver (``threads``, ``gap``, ``verbose``, ...).

    Returns
    -------
    Plan

    Raises
    ------
    UnknownNameError
        For an unknown model, cluster or solver name (lists the known ones).
    FormatError
        For a model or cluster file that is missing or malformed.
    InvalidGraphError, InvalidTopologyError, InvalidProblemError
        For a bad ``batch_size``, ``devices`` or ``memory_limit``.
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
    built = _build(model, cluster, batch_size=batch_size, devices=devices,
                   memory_limit=memory_limit, config_options=config_options,
                   cost_model=cost_model, profile=profile)
    b = built.built
    graph, topo, problem, budget = b.graph, b.topology, b.problem, built.budget
    model_name, cluster_name = built.model_name, built.cluster_name

    options = dict(solver_options)
    if time_limit is not None:
        options["time_limit"] = time_limit
    result = solve_problem(problem, solver, **options)
    logger.info("%s on %s (%d devices): %r", model_name, cluster_name, topo.n_devices, result)

    check = CrossCheck("not run: cross_check=False")
    if cross_check:
        check_opts = {"time_limit": time_limit} if time_limit is not None else {}
        check, _ = _run_check(problem, result, _checker_for(result.solver), check_opts)
    what = f"{model_name} on {cluster_name} ({topo.n_devices} devices)"
    if result.status == INFEASIBLE:
        raise _infeasible_error(problem, result, what)
    if result.assignment is None:
        from .errors import SolverError
        raise SolverError(f"{what}: solver {result.solver!r} ended {result.status} without an "
                          f"assignment after {result.seconds:.3g} s; raise time_limit or try "
                          "another solver")

    acc = _Accounting(b)
    a = np.asarray(result.assignment, dtype=np.int64)
    base_asg = baseline_assignments(problem, acc.nodes, topo.n_devices)
    sims, reranked = _simulations(b, a, simulate, rerank, time_limit, base_asg)
    if reranked:
        a = np.asarray(next(c["assignment"] for c in reranked if c["chosen"]), dtype=np.int64)
        reranked = tuple({k: v for k, v in c.items() if k != "assignment"} for c in reranked)
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
    if _rel_diff(comp + sync + xfer, step) > 1e-6:
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

    return Plan(
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
        simulated_step_seconds=sims(a), rerank=tuple(reranked))


def _simulations(built, a: np.ndarray, simulate: bool, rerank: int | None,
                 time_limit: float | None, baselines: Mapping[str, np.ndarray]):
    """``(simulated time of an assignment or None, re-ranked candidates)`` for solve().

    The candidates are the ``rerank`` best assignments by predicted time and the baselines
    (feasible ones, not already among them), so the plan is never slower in simulation than
    a baseline."""
    from .simulate import simulate_assignment
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
    from .kbest import k_best
    if isinstance(rerank, bool) or not isinstance(rerank, (int, np.integer)) or rerank < 1:
        raise InvalidProblemError(f"rerank must be a positive number of plans, got {rerank!r}")
    opts = {"time_limit": time_limit} if time_limit is not None else {}
    sols = k_best(built.problem, int(rerank), first=a, **opts)
    cands = [{"rank": i, "baseline": None, "predicted_seconds": s.objective,
              "simulated_seconds": sim(s.assignment), "assignment": s.assignment}
             for i, s in enumerate(sols)]
    seen = {c["assignment"] for c in cands}
    for name, ba in baselines.items():
        key = tuple(int(x) for x in ba)
        ev = built.problem.evaluate(key)
        if key in seen or not ev.feasible or not np.isfinite(ev.cost):
            continue
        seen.add(key)
        cands.append({"rank": None, "baseline": name, "predicted_seconds": float(ev.cost),
                      "simulated_seconds": sim(key), "assignment": key})
    best = min(cands, key=lambda c: (c["simulated_seconds"], c["predicted_seconds"],
                                     c["rank"] if c["rank"] is not None else len(cands)))
    return sim, [{**c, "chosen": c is best} for c in cands]
