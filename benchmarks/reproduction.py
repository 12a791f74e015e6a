"""Reproduce the papers' experiments and write ``RESULTS.md`` with its plots.

:func:`reproduce` runs three studies and writes one markdown report in which every number was
computed by that run; the published numbers it is compared with are read from the source
tree's ``data/`` (``optcnn_published.json``, ``search_times_published.csv``), each with its
source.

1. **Strategies** (OptCNN, Jia et al., ICML 2018, section 6): on the ``optcnn`` cluster preset
   with a batch of 32 per GPU, the predicted throughput, the speedup over one GPU and the bytes
   moved per step of data parallelism, model parallelism, OWT and the layer-wise optimum
   (:func:`milp_parallel.plan.solve` with the exact search ``dp``, cross-checked by a MILP).
2. **Search time** (OptCNN Table 3, PaSE Table I): each solver's wall time to a proved optimum
   on zoo models at several device counts, without a budget and with a *binding* memory
   budget (halfway between the least memory any plan needs and the unconstrained optimum's
   peak). Every solve runs in a process of its own that is killed at a hard limit; time-outs are
   reported with their status and gap, never dropped.
3. **ParaDL**: the oracle's scaling tables and projected-vs-measured epoch times (the
   ``oracle_report()`` of ``benchmarks/oracle_paradl.py``).

Bytes moved per step (:func:`bytes_moved`) are derived from the chosen degrees with the same
tile geometry as the cost model: every tensor element a device needs but does not hold
crosses a link once forward (the activation) and once backward (its gradient), and a gradient
all-reduce among ``r`` replicas moves ``2 (r - 1)`` times the layer's weight bytes in total
(ring all-reduce, summed over the rings).

It lives with the benchmarks (it reads ``data/`` and ``benchmarks/`` of the source tree), not
in the installed package; ``python -m benchmarks.reproduce [--quick]`` runs it from the
repository's root.

Examples
--------
>>> from benchmarks import reproduction as rp                   # doctest: +SKIP
>>> rp.ReproduceConfig.tiny().strategy_models                   # doctest: +SKIP
('lenet5',)
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from benchmarks.instances import DATA_DIR, ROOT, write_csv
from milp_parallel.errors import FormatError, MilpParallelError
from milp_parallel.io import write_json
from milp_parallel.isolation import FAILED, TIMEOUT, run_isolated

__all__ = ["ReproduceConfig", "reproduce", "run_strategies", "run_search", "bytes_moved",
           "render_markdown", "write_plots", "load_published",
           "STRATEGIES", "SECTION_TITLES"]

logger = logging.getLogger(__name__)

#: The strategies of section 1, in report order (``layerwise`` is the solver's plan).
STRATEGIES = ("data", "model", "owt", "layerwise")

#: The report's section headings (tests check that every one is present).
SECTION_TITLES = (
    "## 1. Layer-wise vs other strategies (OptCNN, section 6)",
    "## 2. Search time (OptCNN Table 3, PaSE Table I)",
    "## 3. ParaDL: scaling and accuracy of the oracle",
    "## 4. Plots",
    "## 5. The other benchmarks (committed measurements)",
    "## How this report was made",
)


#: Committed measurements this report does not recompute (each script writes its own table;
#: section 5 shows them as committed: path, what, and for a CSV the columns shown).
OTHER_RESULTS = (
    ("benchmarks/results/solver_scaling.csv", "every backend and the exact search on the zoo "
     "at 16 and 64 GPUs with and without a binding budget, and IOPDDL G "
     "(`benchmarks/solver_scaling.py`; the rows `solver=\"auto\"` cites)"),
    ("benchmarks/results/milp_backends.csv", "HiGHS, CBC and the CP-SAT models side by side "
     "on the independent MILP path (`benchmarks/milp_backends.py`)"),
    ("benchmarks/results/iopddl.csv", "the shared IOPDDL contest instances against the "
     "contest's best entries (`benchmarks/iopddl.py`)"),
    ("benchmarks/results/time_limits.csv", "whether every solver returns within its time "
     "limit (`benchmarks/time_limits.py`)"),
    ("benchmarks/results/ddp_cpu.csv", "PyTorch DDP measured on this machine's CPU (gloo, "
     "2 processes) against the step time predicted and simulated from a calibration "
     "(`benchmarks/ddp_cpu.py`)"),
    ("benchmarks/results/executed_plans.csv", "the programs of our own plans (the layer-wise "
     "runtime, gloo, 2 and 4 processes) timed on this machine's CPU against the step time "
     "predicted and simulated from a calibration (`benchmarks/executed_plans.py`)"),
    ("benchmarks/megatron.md", "Megatron-LM's measured GPT throughput against our prediction "
     "and our proven optimum (`benchmarks/megatron.py`)"),
    ("benchmarks/results/fidelity.md", "predicted vs simulated step times, OptCNN's "
     "experiment with the current cost model, sensitivity (`benchmarks/fidelity.py`)"),
)


# ---------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class ReproduceConfig:
    """What :func:`reproduce` runs.

    Attributes
    ----------
    cluster : str
        The cluster preset (grows to as many nodes as the device counts need).
    batch_per_gpu : int
        Samples per GPU; the global batch is ``batch_per_gpu * devices``.
    strategy_models, strategy_devices : tuple
        The grid of section 1.
    cross_check : bool
        Cross-check each section-1 optimum with a MILP backend.
    cross_check_time_limit_seconds : float
        Time limit of that check (a check that runs out is reported as not proved).
    picture_model : str
        The model whose optimal strategy is drawn and compared with OptCNN's Table 5.
    picture_devices : int
    search_models, search_devices : tuple
        The grid of section 2 for the exact search ``dp``.
    milp_devices : tuple
        The device counts (a subset of ``search_devices``) where the MILP backends run too.
    milp_budget_devices : tuple
        The device counts where they also run with the binding budget.
    large_devices : tuple
        Extra device counts for ``dp`` only ("where it finishes").
    search_solvers : tuple
        ``dp`` and the MILP backends.
    time_limit_seconds : float
        Each section-2 solve's own time limit.
    kill_after_seconds : float
        The hard wall-clock limit of a section-2 solve (its process is killed).
    budget_fraction : float
        Where the binding budget lies between the least memory any plan needs (0) and the
        unconstrained optimum's peak (1).
    threads : int
        Threads per MILP backend.
    oracle : bool
        Include the ParaDL oracle report.
    """

    cluster: str = "optcnn"
    batch_per_gpu: int = 32
    strategy_models: tuple[str, ...] = ("alexnet", "vgg16", "inception_v3")
    strategy_devices: tuple[int, ...] = (1, 2, 4, 8, 16)
    cross_check: bool = True
    cross_check_time_limit_seconds: float = 30.0
    picture_model: str = "vgg16"
    picture_devices: int = 4
    search_models: tuple[str, ...] = ("lenet5", "alexnet", "vgg16", "inception_v3",
                                      "resnet50")
    search_devices: tuple[int, ...] = (4, 8, 16, 32, 64)
    milp_devices: tuple[int, ...] = (4, 16, 64)
    milp_budget_devices: tuple[int, ...] = (4, 16)
    large_devices: tuple[int, ...] = (256,)
    search_solvers: tuple[str, ...] = ("dp", "highs", "cbc", "cpsat")
    time_limit_seconds: float = 8.0
    kill_after_seconds: float = 20.0
    budget_fraction: float = 0.5
    threads: int = 1
    oracle: bool = True
    mode: str = "full"

    def __post_init__(self) -> None:
        for name in ("strategy_devices", "search_devices", "milp_devices",
                     "milp_budget_devices", "large_devices"):
            v = getattr(self, name)
            if any(not isinstance(d, int) or d < 1 for d in v):
                raise MilpParallelError(f"ReproduceConfig.{name}: device counts must be "
                                        f"positive integers, got {v!r}")
        if not 0.0 <= self.budget_fraction < 1.0:
            raise MilpParallelError("ReproduceConfig.budget_fraction must lie in [0, 1), got "
                                    f"{self.budget_fraction!r}")

    @classmethod
    def full(cls) -> "ReproduceConfig":
        """The full run (about 15 minutes on 2 cores)."""
        return cls()

    @classmethod
    def quick(cls) -> "ReproduceConfig":
        """The CI run (under 2 minutes): fewer device counts, models and solvers."""
        return cls(strategy_devices=(1, 4, 16), cross_check_time_limit_seconds=10.0,
                   search_models=("lenet5", "alexnet", "vgg16"), search_devices=(4, 16),
                   milp_devices=(4,), milp_budget_devices=(4,), large_devices=(),
                   search_solvers=("dp", "highs"), time_limit_seconds=5.0,
                   kill_after_seconds=15.0, mode="quick")

    @classmethod
    def tiny(cls) -> "ReproduceConfig":
        """A few seconds of work (for tests): LeNet-5 on 1, 2 and 4 GPUs."""
        return cls(strategy_models=("lenet5",), strategy_devices=(1, 2, 4),
                   cross_check_time_limit_seconds=10.0, picture_model="lenet5",
                   picture_devices=4, search_models=("lenet5",), search_devices=(4,),
                   milp_devices=(4,), milp_budget_devices=(4,), large_devices=(),
                   search_solvers=("dp", "highs"), time_limit_seconds=5.0,
                   kill_after_seconds=20.0, mode="tiny")


# ---------------------------------------------------------------------- published data
def load_published(data_dir: str | Path | None = None) -> dict:
    """The published numbers: ``{"optcnn": dict, "search": list of rows}``.

    Raises
    ------
    FormatError
        If a file is missing or malformed (the message names it).
    """
    data_dir = Path(data_dir) if data_dir is not None else DATA_DIR
    path = data_dir / "optcnn_published.json"
    try:
        optcnn = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: cannot read the published OptCNN numbers ({exc}); run "
                          "from a source checkout or pass data_dir") from None
    path = data_dir / "search_times_published.csv"
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = []
            for r in csv.DictReader(f):
                rows.append({"source": r["source"], "method": r["method"],
                             "model": r["model"],
                             "gpus": int(r["gpus"]) if r["gpus"] else None,
                             "seconds": float(r["seconds"]), "note": r.get("note") or ""})
    except (OSError, KeyError, ValueError) as exc:
        raise FormatError(f"{path}: cannot read the published search times ({exc})") from None
    return {"optcnn": optcnn, "search": rows}


# ---------------------------------------------------------------------- bytes moved
def _full_degrees(layer, degrees: Mapping[str, int] | Sequence[int]) -> np.ndarray:
    if isinstance(degrees, Mapping):
        return np.array([int(degrees.get(d, 1)) for d in layer.dims], dtype=np.int64)
    return np.asarray(degrees, dtype=np.int64).reshape(len(layer.dims))


def bytes_moved(graph, degrees: Mapping[str, Any], *, bytes_per_element: int = 4
                ) -> dict[str, float]:
    """Total bytes that cross links in one training step under a per-layer strategy.

    Parameters
    ----------
    graph : LayerGraph
    degrees : mapping
        Layer name -> its degrees (``{dim: degree}`` or a sequence aligned with
        ``layer.dims``); a missing layer is serial.
    bytes_per_element : int

    Returns
    -------
    dict
        ``transfer_bytes`` (activations forward + their gradients backward between layers),
        ``sync_bytes`` (gradient all-reduce) and ``total_bytes``, summed over all devices.

    Notes
    -----
    Tiles follow :mod:`milp_parallel.costs.configs`' placement (tile ``t`` on device ``t``). A
    consumer tile needs the input region :meth:`Layer.input_region` gives; the part held by
    another device's producer tile crosses a link forward, and the same overlap carries the
    gradient back, so an edge moves ``2 * sum_{s != t} |need_s & tile_t|`` elements (once
    out of a graph input, which has no gradient). A layer
    whose ``r`` replicas all-reduce their weight gradients moves ``2 (r - 1) * params``
    elements (a ring all-reduce of ``m`` bytes sends ``2 (r - 1) m / r`` per member).

    Examples
    --------
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (4, 8))
    >>> _ = g.linear("fc", "x", 2)                      # 18 parameters
    >>> bytes_moved(g, {"x": {"n": 4}, "fc": {"n": 4}})["sync_bytes"]  # 2 * 3 * 18 * 4
    432.0
    >>> bytes_moved(g, {"x": {"n": 4}, "fc": {"n": 2}})["transfer_bytes"]  # 3 rows of 8, once
    96.0
    """
    from milp_parallel.costs.configs import tile_boxes

    deg = {lay.name: _full_degrees(lay, degrees.get(lay.name, {})) for lay in graph.layers}
    transfer = 0.0
    for u, v, i in graph.edges:
        prod, cons = graph.layer(u), graph.layer(v)
        p_lo, p_hi, _ = tile_boxes(prod.output_shape, deg[u][None, :])
        o_lo, o_hi, _ = tile_boxes(cons.output_shape, deg[v][None, :])
        r_lo, r_hi = cons.input_region(i, o_lo, o_hi)
        p_lo, p_hi, r_lo, r_hi = p_lo[0], p_hi[0], r_lo[0], r_hi[0]
        # overlap[s, t] = |need of consumer tile s  &  producer tile t|
        lo = np.maximum(r_lo[:, None, :], p_lo[None, :, :])
        hi = np.minimum(r_hi[:, None, :], p_hi[None, :, :])
        ov = np.clip(hi - lo, 0, None).astype(float).prod(axis=2)
        n = min(ov.shape)
        # forward and the gradient back, except out of a graph input (it has no gradient)
        passes = 1.0 if prod.op == "input" else 2.0
        transfer += passes * (float(ov.sum()) - float(np.trace(ov[:n, :n])))
    sync = 0.0
    for lay in graph.layers:
        if lay.params <= 0:
            continue
        d = deg[lay.name]
        split = np.array([x in lay.weight_split_dims for x in lay.dims], bool)
        replicas = int(d[~split].prod()) if (~split).any() else 1
        sync += 2.0 * (replicas - 1) * float(lay.params)
    b = float(bytes_per_element)
    return {"transfer_bytes": transfer * b, "sync_bytes": sync * b,
            "total_bytes": (transfer + sync) * b}


def _node_degrees(built, assignment) -> dict[str, np.ndarray]:
    """Layer name -> degrees for an assignment of a BuiltProblem's nodes."""
    out = {}
    for v, members in enumerate(built.members):
        cfg = built.configs[v][int(assignment[v])]
        head = built.graph.layer(members[0])
        for m in members:
            lay = built.graph.layer(m)
            dd = dict(zip(head.dims, cfg))
            out[m] = np.array([int(dd.get(x, 1)) for x in lay.dims], dtype=np.int64)
    return out


# ---------------------------------------------------------------------- section 1
def _topology(cluster: str, devices: int):
    from milp_parallel import clusters
    topo = clusters.get(cluster)
    if devices > topo.n_devices:
        per_node = topo.levels[0].fanout if len(topo.levels) > 1 else topo.n_devices
        topo = clusters.get(cluster, nodes=-(-devices // per_node))
    return topo.with_devices(devices)


def run_strategies(config: ReproduceConfig) -> tuple[list[dict], dict]:
    """Section 1: every strategy of every model at every device count.

    Returns
    -------
    rows : list of dict
        One per (model, devices, strategy): ``step_seconds``, ``throughput``, ``feasible``,
        ``description``, ``transfer_bytes``, ``sync_bytes``, ``total_bytes``, and for the
        layer-wise row the plan's ``status``, ``solve_seconds`` and ``cross_check``.
    plans : dict
        ``(model, devices) -> Plan``.
    """
    from milp_parallel import models
    from milp_parallel.costs.build import build
    from milp_parallel.plan import solve

    rows, plans = [], {}
    for model in config.strategy_models:
        for d in config.strategy_devices:
            batch = config.batch_per_gpu * d
            graph = models.get(model, batch_size=batch)
            topo = _topology(config.cluster, d)
            t0 = time.perf_counter()
            plan = solve(graph, topo, solver="dp", cross_check=config.cross_check,
                         time_limit=config.cross_check_time_limit_seconds)
            wall = time.perf_counter() - t0
            plans[(model, d)] = plan
            built = build(graph, topo)
            check = built.problem.evaluate(np.asarray(plan.assignment))
            if not math.isclose(check.cost, plan.step_seconds, rel_tol=1e-9):
                raise MilpParallelError(
                    f"{model}@{d}: the plan's assignment costs {check.cost!r} on a rebuilt "
                    f"problem, the plan says {plan.step_seconds!r}; the build is not "
                    "deterministic")
            cc = plan.cross_check
            lw = bytes_moved(graph, {lc.name: lc.degrees for lc in plan.layers})
            rows.append({"model": model, "devices": d, "batch": batch,
                         "strategy": "layerwise", "step_seconds": plan.step_seconds,
                         "throughput": plan.throughput, "feasible": True,
                         "description": "per-layer optimum", "status": plan.status,
                         "solve_seconds": plan.solve_seconds, "wall_seconds": wall,
                         "cross_check": cc.verdict, "cross_check_solver": cc.exact_solver,
                         "peak_memory_bytes": plan.peak_memory_bytes, **lw})
            for name in ("data", "model", "owt", "best_uniform"):
                b = plan.baselines[name]
                bb = bytes_moved(graph, _node_degrees(built, b.assignment))
                rows.append({"model": model, "devices": d, "batch": batch, "strategy": name,
                             "step_seconds": b.step_seconds,
                             "throughput": batch / b.step_seconds
                             if b.step_seconds > 0 and math.isfinite(b.step_seconds)
                             else 0.0,
                             "feasible": b.feasible, "description": b.description,
                             "peak_memory_bytes": b.peak_memory_bytes, **bb})
            logger.info("%s@%d: layer-wise %.1f samples/s (%s)", model, d, plan.throughput,
                        plan.status)
    return rows, plans


def _picture_rows(plan, published: Mapping) -> list[dict]:
    """Our plan's conv / linear / loss layers next to OptCNN's Table 5 groups."""
    groups = (published.get("vgg16_4gpu_strategy") or {}).get("groups", [])
    counters: dict[str, int] = {}
    out = []
    for lc in plan.layers:
        if lc.op not in ("conv", "linear", "loss"):
            continue
        counters[lc.op] = counters.get(lc.op, 0) + 1
        k = counters[lc.op]
        theirs = next((g for g in groups if g["kind"] == lc.op and g["first"] <= k
                       <= g["last"]), None)
        ours = {d: int(x) for d, x in lc.degrees.items() if int(x) > 1}
        out.append({"layer": lc.name, "op": lc.op, "index": k, "ours": ours,
                    "theirs": None if theirs is None else
                    {d: int(x) for d, x in theirs["degrees"].items() if int(x) > 1},
                    "their_group": None if theirs is None else theirs["layers"]})
    return out


# ---------------------------------------------------------------------- section 2
def _solve_row(problem, solver: str, options: Mapping[str, Any]) -> dict:
    """One section-2 solve (run in a process of its own by :func:`_solve_killable`)."""
    from milp_parallel.solvers import solve_problem
    t0 = time.perf_counter()
    r = solve_problem(problem, solver, **options)
    return {"status": r.status, "objective": float(r.objective), "bound": float(r.bound),
            "gap": float(r.gap), "solver_seconds": float(r.seconds),
            "wall_seconds": time.perf_counter() - t0,
            "assignment": None if r.assignment is None else [int(x) for x in r.assignment]}


def _solve_killable(problem, solver: str, options: Mapping[str, Any], kill_after: float
                    ) -> dict:
    """Solve in a process of its own (:func:`milp_parallel.isolation.run_isolated`), killed
    after ``kill_after`` seconds.

    A killed solve has status ``timeout`` (no objective, infinite gap), one that crashed or
    raised ``failed``, with the reason in ``error``: the statuses of sweep items.
    """
    out = run_isolated(_solve_row, problem, solver, dict(options), kill_after=kill_after)
    if out.ok:
        row = dict(out.value)
        row["wall_seconds"] = min(row["wall_seconds"], out.seconds)
        row["killed"] = False
        return row
    return {"status": out.status, "objective": math.nan, "bound": -math.inf, "gap": math.inf,
            "killed": out.status == TIMEOUT, "error": out.error, "wall_seconds": out.seconds}


def run_search(config: ReproduceConfig) -> list[dict]:
    """Section 2: each solver's time on each (model, devices), with and without a budget.

    Returns
    -------
    list of dict
        One per (model, devices, budget, solver): ``status``, ``objective``, ``bound``,
        ``gap``, ``wall_seconds`` (the whole ``solve_problem`` call, formulation included),
        ``killed``, ``error``, ``agrees`` (the objective matches the best proved optimum
        of that problem, when one is known), and the problem's size and ``build_seconds``.
    """
    from milp_parallel import models
    from milp_parallel.costs.build import build
    from milp_parallel.solvers.memory import least_memory

    rows: list[dict] = []
    cases = [(m, d) for m in config.search_models
             for d in sorted(set(config.search_devices) | set(config.large_devices))]
    for model, d in cases:
        graph = models.get(model, batch_size=config.batch_per_gpu * d)
        topo = _topology(config.cluster, d)
        t0 = time.perf_counter()
        try:
            built = build(graph, topo, memory_limit=None)
        except (MemoryError, MilpParallelError) as exc:
            rows.append({"model": model, "devices": d, "budget": "none", "solver": "build",
                         "status": FAILED, "error": f"{type(exc).__name__}: {exc}"})
            continue
        build_seconds = time.perf_counter() - t0
        free = built.problem
        size = {"n_nodes": free.n_nodes, "n_configs": int(free.n_configs.sum()),
                "edge_entries": int(sum(t.size for t in free.edge_costs)),
                "build_seconds": build_seconds}
        if d in config.large_devices and d not in config.search_devices:
            solvers = ("dp",)
        elif d in config.milp_devices:
            solvers = config.search_solvers
        else:
            solvers = tuple(s for s in config.search_solvers if s == "dp")
        opts = {"time_limit": config.time_limit_seconds}
        problems = [("none", free, None)]
        case_rows: list[dict] = []
        for budget_kind, problem, budget in problems:
            for solver in solvers:
                if (budget_kind == "binding" and solver != "dp"
                        and d not in config.milp_budget_devices):
                    continue
                o = dict(opts)
                if solver != "dp":
                    o["threads"] = config.threads
                r = _solve_killable(problem, solver, o, config.kill_after_seconds)
                case_rows.append({"model": model, "devices": d, "budget": budget_kind,
                                  "budget_bytes": budget, "solver": solver, **size, **r})
            if budget_kind == "none":
                # the binding budget: halfway from the least memory to the optimum's peak
                opt = next((r for r in case_rows if r["solver"] == "dp"
                            and r["status"] == "optimal" and r.get("assignment")), None)
                least = least_memory(free)
                if opt is None or least is None:
                    continue
                peak = float(np.max(free.evaluate(np.asarray(opt["assignment"])).peak_memory))
                lo = float(np.max(least))
                if peak <= lo * (1 + 1e-9):
                    case_rows.append({"model": model, "devices": d, "budget": "binding",
                                      "solver": "-", "status": "n/a", **size,
                                      "error": "no binding budget: the unconstrained optimum "
                                               "already needs the least memory"})
                    continue
                budget = lo + config.budget_fraction * (peak - lo)
                problems.append(("binding", free.with_memory_limit(budget), budget))
        _mark_agreement(case_rows)
        rows += case_rows
        logger.info("search %s@%d: %s", model, d,
                    ", ".join(f"{r['solver']}/{r['budget']} {r['status']}" for r in case_rows))
    for r in rows:
        r.pop("assignment", None)
    return rows


def _mark_agreement(rows: list[dict]) -> None:
    """Set ``agrees`` on each row: its objective vs the best proved optimum of its problem."""
    for kind in {r["budget"] for r in rows}:
        same = [r for r in rows if r["budget"] == kind]
        proved = [r["objective"] for r in same if r.get("status") == "optimal"]
        best = min(proved) if proved else None
        for r in same:
            obj = r.get("objective")
            if best is None or obj is None or not math.isfinite(obj):
                r["agrees"] = None
            else:
                r["agrees"] = bool(math.isclose(obj, best, rel_tol=1e-6))


# ---------------------------------------------------------------------- plots
def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def write_plots(results: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Draw ``throughput.png``, ``search_time.png`` and the strategy picture into ``out_dir``.

    Returns
    -------
    dict
        Plot name -> file written.
    """
    from milp_parallel.report import plot_plan

    plt = _pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    rows = results["strategies"]
    model_names = list(dict.fromkeys(r["model"] for r in rows))
    if model_names:
        fig, axes = plt.subplots(1, len(model_names), figsize=(4.2 * len(model_names), 3.6),
                                 squeeze=False)
        styles = {"layerwise": dict(color="k", lw=2, marker="o"),
                  "data": dict(ls="--", marker="s"), "model": dict(ls="--", marker="^"),
                  "owt": dict(ls="--", marker="v")}
        for ax, m in zip(axes.flat, model_names):
            for s in STRATEGIES:
                pts = sorted((r["devices"], r["throughput"]) for r in rows
                             if r["model"] == m and r["strategy"] == s and r["throughput"] > 0)
                if pts:
                    ax.plot(*zip(*pts), label=s, **styles[s])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("GPUs")
            ax.set_title(m, fontsize=10)
            ax.grid(True, alpha=0.3)
        axes.flat[0].set_ylabel("predicted images/s")
        axes.flat[0].legend(fontsize=8)
        fig.suptitle("Predicted throughput on OptCNN's cluster (32 images per GPU)",
                     fontsize=10)
        fig.tight_layout()
        written["throughput"] = out_dir / "throughput.png"
        fig.savefig(written["throughput"], dpi=90)
        plt.close(fig)

    search = [r for r in results["search"] if r.get("edge_entries") and r["solver"] != "-"]
    if search:
        kinds = [k for k in ("none", "binding") if any(r["budget"] == k for r in search)]
        fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 3.9),
                                 squeeze=False, sharey=True)
        marks = {"dp": "o", "highs": "s", "cbc": "^", "cpsat": "D"}
        for ax, kind in zip(axes.flat, kinds):
            for s in dict.fromkeys(r["solver"] for r in search):
                pts = [r for r in search if r["solver"] == s and r["budget"] == kind]
                done = [(r["edge_entries"], r["wall_seconds"]) for r in pts
                        if r["status"] == "optimal"]
                late = [(r["edge_entries"], r["wall_seconds"]) for r in pts
                        if r["status"] != "optimal" and r.get("wall_seconds")]
                line = None
                if done:
                    line, = ax.plot(*zip(*sorted(done)), ls="", marker=marks.get(s, "x"),
                                    label=f"{s} (proved)")
                if late:
                    ax.plot(*zip(*late), ls="", marker=marks.get(s, "x"),
                            mfc="none", color=None if line is None else line.get_color(),
                            label=f"{s} (not proved)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("problem size (edge-table entries)")
            ax.set_title("no memory budget" if kind == "none" else "binding memory budget",
                         fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        axes.flat[0].set_ylabel("wall seconds (this machine)")
        fig.tight_layout()
        written["search_time"] = out_dir / "search_time.png"
        fig.savefig(written["search_time"], dpi=90)
        plt.close(fig)

    plan = results.get("picture_plan")
    if plan is not None:
        name = f"{plan.model}_{plan.devices}gpu_strategy.png"
        written["strategy"] = plot_plan(plan, out_dir / name)
    return written


# ---------------------------------------------------------------------- markdown
def _f(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def _deg(d: Mapping[str, int] | None) -> str:
    if d is None:
        return "-"
    return " ".join(f"{k}={v}" for k, v in d.items()) or "serial"


def _ratio_range(values: Sequence[float]) -> str:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return "-"
    lo, hi = min(v), max(v)

    def show(x: float) -> str:
        return "inf" if math.isinf(x) else f"{x:.2f}"
    return f"{show(lo)}x" if lo == hi else f"{show(lo)}-{show(hi)}x"


def _strategy_summary(rows: list[dict]) -> dict[str, dict]:
    """Per model: gain at the largest device count, speedups, communication ratios."""
    out = {}
    for m in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == m]
        devs = sorted({r["devices"] for r in mine})
        top, one = devs[-1], devs[0]

        def thr(s, d):
            r = next(r for r in mine if r["strategy"] == s and r["devices"] == d)
            return r["throughput"] if r["feasible"] else 0.0

        others = ("data", "model", "owt")
        best_other = max(others, key=lambda s: thr(s, top))
        summary = {"top": top, "one": one, "best_other": best_other,
                   "gain": thr("layerwise", top) / thr(best_other, top)
                   if thr(best_other, top) > 0 else math.inf}
        if one == 1:
            summary["speedup_layerwise"] = thr("layerwise", top) / thr("layerwise", 1)
            summary["speedup_best_other"] = thr(best_other, top) / thr(best_other, 1)
            summary["speedup_each"] = {s: thr(s, top) / thr(s, 1) for s in others}
        ratios: dict[str, list[float]] = {s: [] for s in others}
        for d in devs:
            if d == 1:
                continue
            lw = next(r for r in mine if r["strategy"] == "layerwise" and r["devices"] == d)
            for s in others:
                b = next(r for r in mine if r["strategy"] == s and r["devices"] == d)
                if lw["total_bytes"] > 0:
                    ratios[s].append(b["total_bytes"] / lw["total_bytes"])
                elif b["total_bytes"] > 0:
                    ratios[s].append(math.inf)
        summary["comm_ratios"] = ratios
        out[m] = summary
    return out


def _section1(results: Mapping[str, Any], published: Mapping) -> list[str]:
    cfg: ReproduceConfig = results["config"]
    rows = results["strategies"]
    pub = published["optcnn"]
    summ = _strategy_summary(rows)
    md = [SECTION_TITLES[0], "",
          f"Setting: cluster preset `{cfg.cluster}` (OptCNN's: nodes of 4 P100 on NVLink, "
          "100 Gb/s EDR InfiniBand between nodes; see `milp_parallel/clusters.py` for the "
          f"constants), batch {cfg.batch_per_gpu} per GPU, GPUs "
          f"{', '.join(map(str, cfg.strategy_devices))}. Every number below is a "
          "**prediction** of our cost model (the paper's are **measurements**). The "
          "layer-wise optimum is the exact search `dp`; baselines are assignments of the same "
          "problem, so all strategies are priced by one cost model.", "",
          f"Source of the published numbers: {pub['source']} ({pub['transcribed_from']}; "
          "file `data/optcnn_published.json`).", "",
          "### Predicted throughput (images/s), step time and bytes moved per step", "",
          "| model | GPUs | strategy | images/s | step ms | speedup vs 1 GPU | MB moved "
          "(transfer + sync) | fits | solver status / cross-check |",
          "|---|---:|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        if r["strategy"] == "best_uniform":
            continue
        base = next((x for x in rows if x["model"] == r["model"] and x["devices"] == 1
                     and x["strategy"] == r["strategy"]), None)
        sp = (r["throughput"] / base["throughput"]) if base and base["throughput"] > 0 \
            else math.nan
        extra = ""
        if r["strategy"] == "layerwise":
            extra = f"{r['status']} in {r['solve_seconds']:.3f} s; {r['cross_check']}"
            if r.get("cross_check_solver"):
                extra += f" ({r['cross_check_solver']})"
        name = r["strategy"] if r["strategy"] != "layerwise" else "**layer-wise**"
        md.append(f"| {r['model']} | {r['devices']} | {name} | {r['throughput']:.1f} | "
                  f"{1e3 * r['step_seconds']:.2f} | {_f(sp, '.2f')} | "
                  f"{_mb(r['total_bytes'])} ({_mb(r['transfer_bytes'])} + "
                  f"{_mb(r['sync_bytes'])}) | {'yes' if r['feasible'] else 'NO'} | {extra} |")
    md += ["", "### Against the published numbers", "",
           "| model | gain of layer-wise over the best other at the most GPUs: ours (best "
           "other) / OptCNN | speedup 1 -> most GPUs, layer-wise: ours / OptCNN | best other: "
           "ours / OptCNN |", "|---|---|---|---|"]
    gain_pub = pub["gain_at_16_gpus"]
    sp_pub = pub["speedup_1_to_16_gpus"]
    for m in ("alexnet", "vgg16", "inception_v3"):
        s = summ.get(m)
        if s is None:
            md.append(f"| {m} | not run in this mode / {gain_pub[m]}x | not run / "
                      f"{sp_pub['layerwise'][m]}x | not run / {sp_pub['best_other'][m]}x |")
            continue
        at = f" at {s['top']} GPUs" if s["top"] != 16 else ""
        lw = s.get("speedup_layerwise")
        bo = s.get("speedup_best_other")
        md.append(f"| {m} | {s['gain']:.2f}x ({s['best_other']}){at} / up to {gain_pub[m]}x | "
                  f"{_f(lw, '.1f')}x / {sp_pub['layerwise'][m]}x | {_f(bo, '.1f')}x / "
                  f"{sp_pub['best_other'][m]}x |")
    for m in summ:
        if m not in gain_pub:
            s = summ[m]
            md.append(f"| {m} (not in the paper) | {s['gain']:.2f}x ({s['best_other']}) / - | "
                      f"{_f(s.get('speedup_layerwise'), '.1f')}x / - | "
                      f"{_f(s.get('speedup_best_other'), '.1f')}x / - |")
    cr = pub["communication_reduction"]
    md += ["", "Communication (bytes moved per step by a strategy / by the layer-wise optimum, "
           "over the GPU counts above 1; < 1 means the optimum moves more bytes, which it may "
           "do since it minimizes time, not bytes):", "",
           "| model | data | model | OWT |", "|---|---|---|---|"]
    for m, s in summ.items():
        md.append(f"| {m} | {_ratio_range(s['comm_ratios']['data'])} | "
                  f"{_ratio_range(s['comm_ratios']['model'])} | "
                  f"{_ratio_range(s['comm_ratios']['owt'])} |")
    md += ["", f"OptCNN reports {cr['vs_data_and_model'][0]}-{cr['vs_data_and_model'][1]}x "
           f"less communication than data and model parallelism and {cr['vs_owt'][0]}-"
           f"{cr['vs_owt'][1]}x less than OWT, and a cost model within "
           f"{100 * pub['cost_model_error_max']:.0f}% of measured step times."]

    # the strategy picture
    pic = results.get("picture_rows") or []
    plan = results.get("picture_plan")
    md += ["", f"### Optimal strategy: {cfg.picture_model} on {cfg.picture_devices} GPUs, ours "
           "vs OptCNN's Table 5 (VGG-16, 4 GPUs of one node)", ""]
    if plan is not None:
        md.append(f"Our plan: {plan.throughput:.1f} images/s predicted, status {plan.status}; "
                  f"data parallelism {plan.baselines['data'].speedup:.3f}x slower, OWT "
                  f"{plan.baselines['owt'].speedup:.3f}x slower.")
        if pic and any(p["theirs"] is not None for p in pic) and cfg.picture_model == "vgg16" \
                and cfg.picture_devices == 4:
            md += ["", "| layer | ours | OptCNN (group) | same |", "|---|---|---|---|"]
            for p in pic:
                same = "yes" if p["ours"] == p["theirs"] else "no"
                md.append(f"| {p['layer']} ({p['op']} {p['index']}) | {_deg(p['ours'])} | "
                          f"{_deg(p['theirs'])} ({p['their_group']}) | {same} |")
            n_same = sum(p["ours"] == p["theirs"] for p in pic)
            md += ["", f"{n_same} of {len(pic)} conv / linear / loss layers take the same "
                   "degrees as OptCNN's strategy."]
            theirs_cost = results.get("picture_theirs")
            if theirs_cost is not None:
                md.append(f"OptCNN's strategy priced by our cost model: "
                          f"{1e3 * theirs_cost['step_seconds']:.2f} ms per step "
                          f"({theirs_cost['step_seconds'] / plan.step_seconds:.3f}x our "
                          f"optimum's {1e3 * plan.step_seconds:.2f} ms), "
                          f"{_mb(theirs_cost['total_bytes'])} MB moved per step vs our "
                          f"{_mb(results['picture_bytes']['total_bytes'])} MB.")
        else:
            md += ["", "| layer | ours |", "|---|---|"]
            md += [f"| {p['layer']} ({p['op']} {p['index']}) | {_deg(p['ours'])} |"
                   for p in pic]
            md += ["", "(OptCNN's Table 5 is for VGG-16 on 4 GPUs; this run drew another "
                   "model, so there is nothing to set side by side.)"]
    md += ["", "### Discussion", ""] + _discussion(summ, pub, results)
    return md


def _discussion(summ: Mapping[str, dict], pub: Mapping, results: Mapping) -> list[str]:
    lines = []
    gain_pub = pub["gain_at_16_gpus"]
    sp_pub = pub["speedup_1_to_16_gpus"]
    for m, s in summ.items():
        if m not in gain_pub:
            continue
        cmp_gain = "smaller than" if s["gain"] < gain_pub[m] * 0.95 else (
            "larger than" if s["gain"] > gain_pub[m] * 1.05 else "close to")
        txt = (f"- **{m}**: we predict layer-wise {s['gain']:.2f}x faster than the best other "
               f"strategy ({s['best_other']}) at {s['top']} GPUs, {cmp_gain} OptCNN's measured "
               f"{gain_pub[m]}x.")
        if "speedup_layerwise" in s:
            txt += (f" Scaling 1 -> {s['top']} GPUs: layer-wise {s['speedup_layerwise']:.1f}x "
                    f"(measured {sp_pub['layerwise'][m]}x), best other "
                    f"{s['speedup_best_other']:.1f}x (measured {sp_pub['best_other'][m]}x); "
                    "per strategy: " + ", ".join(f"{k} {v:.1f}x"
                                                 for k, v in s["speedup_each"].items()) + ".")
        lines.append(txt)
    lines += [
        "- **What differs, and why.** (1) *Measured vs predicted*: OptCNN ran every strategy "
        "on the cluster (Legion runtime, cuDNN kernels); we price them with an analytical cost "
        "model. Our compute time is FLOPs / (peak x 0.5) for every layer, so small layers "
        "(pooling, element-wise, thin FC tiles), which run far below peak on a real GPU, are "
        "cheaper here than there, and splitting a layer never loses kernel efficiency: "
        "parallel compute scales perfectly, which favours the strategies that keep all GPUs "
        "busy on every layer (data parallelism) more than the paper's measurements did. "
        "(2) *Hardware constants*: 20 GB/s per direction per NVLink pair and 12.5 GB/s "
        "InfiniBand are spec-sheet figures; latencies (9 us, 40 us) are ParaDL's ABCI "
        "calibration, not measurements of OptCNN's cluster; the real all-reduce and "
        "transfers of 2018 (Legion's copies, no NCCL rings) were slower than these ideal "
        "rings, so the paper's data and model parallelism paid more for communication than "
        "ours, which is where most of its gain comes from. (3) *Baselines*: ours are priced "
        "with the same ideal costs as the optimum (ring all-reduce on the slowest link, "
        "transfers in parallel with latency once per level), so the gap between the optimum "
        "and the best baseline is a property of the cost model, not of an implementation. "
        "(4) *Memory*: the plan respects each GPU's 16 GB (weights, gradients, Adam state and "
        "kept activations); the paper does not state an optimizer state, so its memory "
        "accounting may differ.",
        "- **Bytes moved** are not a measurement either: they are the volumes the cost model "
        "prices (see `bytes_moved`): activations and their gradients between differently "
        "split layers, and ring all-reduce traffic of replicated weights. The optimum "
        "minimizes time, not bytes, so it can move more bytes than a baseline when those "
        "bytes go over NVLink or overlap nothing else; OptCNN's reduction factors were "
        "measured on its own transfers.",
        "- **Strategies**: the optimum is not unique where several configurations cost the "
        "same (e.g. degrees that split a layer the same number of ways over the same link), "
        "so a layer that differs from Table 5 can still be as fast; the line above prices "
        "OptCNN's published strategy with our cost model to show how far it is from ours.",
    ]
    return lines


def _section2(results: Mapping[str, Any], published: Mapping) -> list[str]:
    cfg: ReproduceConfig = results["config"]
    rows = results["search"]
    pub = published["search"]
    md = [SECTION_TITLES[1], "",
          f"On this machine ({results['machine']}); the published times ran on other "
          "hardware (OptCNN: the authors' 2018 machine; PaSE: its own), so only the trend and "
          "the order of magnitude compare. Each solve: time limit "
          f"{cfg.time_limit_seconds:g} s, killed at {cfg.kill_after_seconds:g} s (status "
          f"`{TIMEOUT}`, marked *killed*); MILP backends use "
          f"{cfg.threads} thread(s), at {', '.join(map(str, cfg.milp_devices))} GPUs (with the "
          f"budget at {', '.join(map(str, cfg.milp_budget_devices))}); `dp` alone elsewhere. "
          "Seconds are the wall time of the whole `solve_problem` "
          "call (the MILP formulation included), not the build of the cost tables, shown "
          "separately. Binding budget: the least memory any plan needs plus "
          f"{cfg.budget_fraction:g} of the way to the unconstrained optimum's peak. "
          f"Clusters beyond 16 GPUs are the `{cfg.cluster}` preset grown to more nodes "
          "(hypothetical for OptCNN's 4-node machine). `agrees` = the objective equals the "
          "best proved optimum of that problem (relative 1e-6); a `feasible` row with "
          "`agrees` yes found the optimum but did not prove it.", "",
          "| model | GPUs | nodes / configs / edge entries | build s | budget GB | solver | "
          "status | seconds | gap | agrees | note |",
          "|---|---:|---|---:|---|---|---|---:|---:|---|---|"]
    for r in rows:
        size = (f"{r['n_nodes']} / {r['n_configs']} / {r['edge_entries']}"
                if "n_nodes" in r else "-")
        bud = "none" if r["budget"] == "none" else (
            f"{r['budget_bytes'] / 1e9:.3f}" if r.get("budget_bytes") else "binding")
        note = "killed" if r.get("killed") else (r.get("error") or "")
        agrees = {True: "yes", False: "NO", None: "-"}[r.get("agrees")]
        md.append(f"| {r['model']} | {r['devices']} | {size} | "
                  f"{_f(r.get('build_seconds'), '.2f')} | {bud} | {r['solver']} | "
                  f"{r['status']} | {_f(r.get('wall_seconds'), '.3f')} | "
                  f"{_f(r.get('gap'), '.2g')} | {agrees} | {note} |")
    md += ["", "### Against the published search times", "",
           "| source | method | model | GPUs | published s | ours: dp s (status) | ours: "
           "fastest MILP to a proof |", "|---|---|---|---:|---:|---|---|"]
    for p in pub:
        ours = [r for r in rows if r["model"] == p["model"] and r["devices"] == p["gpus"]
                and r["budget"] == "none"]
        dp = next((r for r in ours if r["solver"] == "dp"), None)
        milp = [r for r in ours if r["solver"] not in ("dp", "-") and r["status"] == "optimal"]
        best = min(milp, key=lambda r: r["wall_seconds"]) if milp else None
        dps = (f"{dp['wall_seconds']:.3f} ({dp['status']})" if dp is not None
               else "not run")
        ms = (f"{best['wall_seconds']:.3f} ({best['solver']})" if best is not None
              else ("none proved" if any(r["solver"] not in ("dp", "-") for r in ours)
                    else "not run"))
        gpus = p["gpus"] if p["gpus"] is not None else "-"
        extra = f" ({p['note']})" if p["note"] else ""
        md.append(f"| {p['source']} | {p['method']} | {p['model']} | {gpus} | "
                  f"{p['seconds']:g}{extra} | {dps} | {ms} |")
    return md


def _section3(results: Mapping[str, Any]) -> list[str]:
    md = [SECTION_TITLES[2], ""]
    rep = results.get("oracle")
    if rep is None:
        md.append("Not run: " + results.get("oracle_missing", "oracle disabled") + ".")
        return md
    md.append("From `benchmarks/oracle_paradl.py` (`oracle_report()`), run by this script; "
              "measured epoch times from `data/paradl_measured.csv` (sources there).")
    md += ["", rep["markdown"].replace("### ", "#### ")]
    return md


def _section4(results: Mapping[str, Any], out_dir: Path, report_dir: Path) -> list[str]:
    md = [SECTION_TITLES[3], ""]
    for name, path in (results.get("plots") or {}).items():
        rel = os.path.relpath(path, report_dir)
        md += [f"![{name}]({rel})", ""]
    if not results.get("plots"):
        md.append("No plots (matplotlib missing).")
    return md


def render_markdown(results: Mapping[str, Any], published: Mapping, *,
                    report_dir: str | Path = ".") -> str:
    """The whole report as markdown (plots linked relative to ``report_dir``)."""
    cfg: ReproduceConfig = results["config"]
    md = ["# Reproduction of OptCNN, PaSE and ParaDL results", "",
          "Generated by `python -m benchmarks.reproduce"
          f"{' --quick' if cfg.mode == 'quick' else ''}`"
          f" ({cfg.mode} mode) in {results['seconds']:.0f} s on {results['machine']}; load "
          f"average {results['load_before']} before, {results['load_after']} after (the "
          "machine may have been shared: timings are noisy). Every number below was computed "
          "by that run, except the published numbers, which come from `data/` with their "
          "sources.", ""]
    md += _section1(results, published) + [""]
    md += _section2(results, published) + [""]
    md += _section3(results) + [""]
    md += _section4(results, Path(report_dir), Path(report_dir))
    md += _section5() + [""]
    md += [SECTION_TITLES[5], "",
           "```", "python -m benchmarks.reproduce            # full (this file)",
           "python -m benchmarks.reproduce --quick    # CI", "```", "",
           f"Configuration: `{json.dumps(dataclasses.asdict(cfg), sort_keys=True)}`.", ""]
    return "\n".join(md + [""])


#: The columns section 5 shows of each committed CSV (the file has more).
_CSV_COLUMNS = {
    "solver_scaling.csv": ("case", "solver", "status", "objective", "gap", "seconds", "proof"),
    "milp_backends.csv": ("case", "solver", "variant", "presolve", "time_limit_s", "status",
                          "objective", "bound", "gap", "wall_s", "proof"),
    "iopddl.csv": ("instance", "solver", "time_limit_s", "load_s", "wall_s", "peak_rss_mib",
                   "status", "cost", "bound", "gap", "best_contest_cost", "ratio_to_best",
                   "uses_sentinel", "held", "copies"),
    "time_limits.csv": ("case", "solver", "limit", "status", "seconds", "overrun", "held"),
    "ddp_cpu.csv": ("model", "measured_s", "predicted_s", "simulated_s", "spread"),
    "executed_plans.csv": ("model", "world", "plan", "measured_s", "predicted_s",
                           "simulated_s", "max_rel_error"),
}


def _csv_table(path: Path, columns: Sequence[str]) -> list[str]:
    """A committed CSV as a markdown table of ``columns`` (numbers to 6 digits)."""
    def cell(x: str) -> str:
        try:
            v = float(x)
        except ValueError:
            return x.replace("|", "/")
        return x if v.is_integer() and abs(v) < 1e15 and "." not in x else f"{v:.6g}"

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    stamp = sorted({f"{r.get('machine', '')}, {r.get('date', '')}" for r in rows})
    md = [f"Measured on {'; '.join(stamp)}." if stamp else "No rows.", "",
          "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return md


def _section5() -> list[str]:
    """The other benchmarks' committed results, shown as they are in the repository (their
    numbers come from those runs, with the machine and date each file records, not from
    this one)."""
    md = [SECTION_TITLES[4], "",
          "Not computed by this run: each table below is the committed output of its own "
          "script (named in each part), shown here so that one file holds every result.", ""]
    for i, (rel, what) in enumerate(OTHER_RESULTS, start=1):
        path = ROOT / rel
        md += [f"### 5.{i}. `{rel}`", "", what[0].upper() + what[1:] + ".", ""]
        if not path.is_file():
            md += ["(not committed)", ""]
        elif path.suffix == ".csv":
            md += _csv_table(path, _CSV_COLUMNS[path.name]) + [""]
        else:
            # a committed markdown report, its headings moved under this one
            for line in path.read_text().splitlines():
                md.append("###" + line if line.startswith("#") else line)
            md.append("")
    return md


# ---------------------------------------------------------------------- driver
def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), " \
           f"Python {platform.python_version()}"


def _load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platforms without getloadavg
        return "n/a"


def reproduce(out_dir: str | Path, config: ReproduceConfig | None = None, *,
              report_name: str = "RESULTS.md", plots_dir: str | Path | None = None,
              data_dir: str | Path | None = None,
              oracle_report: Callable[[], dict] | None = None, plots: bool = True
              ) -> dict[str, Any]:
    """Run every study and write ``<out_dir>/<report_name>`` and the plots.

    Parameters
    ----------
    out_dir : path
        Where the report goes.
    config : ReproduceConfig, optional
        Default :meth:`ReproduceConfig.full`.
    report_name : str
    plots_dir : path, optional
        Default ``<out_dir>/results``.
    data_dir : path, optional
        The published numbers (default: the repository's ``data/``).
    oracle_report : callable, optional
        Returns the oracle report dict (``"markdown"`` key); default:
        :func:`benchmarks.oracle_paradl.oracle_report`.
    plots : bool
        Draw the plots (needs matplotlib).

    Returns
    -------
    dict
        ``config``, ``strategies`` (rows), ``search`` (rows), ``oracle``, ``plots``,
        ``report`` (the path written), ``markdown``, ``seconds`` and more.

    Raises
    ------
    FormatError
        If the published data cannot be read.
    """
    config = config or ReproduceConfig.full()
    out_dir = Path(out_dir)
    plots_dir = Path(plots_dir) if plots_dir is not None else out_dir / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    published = load_published(data_dir)
    t0 = time.perf_counter()
    results: dict[str, Any] = {"config": config, "machine": _machine(),
                               "load_before": _load()}
    rows, plans = run_strategies(config)
    results["strategies"] = rows
    pic = plans.get((config.picture_model, config.picture_devices))
    if pic is None:
        from milp_parallel.plan import solve
        pic = solve(config.picture_model, config.cluster, devices=config.picture_devices,
                    batch_size=config.batch_per_gpu * config.picture_devices, solver="dp",
                    cross_check=False)
    results["picture_plan"] = pic
    results["picture_rows"] = _picture_rows(pic, published["optcnn"])
    results["picture_bytes"] = bytes_moved(_graph_of(config),
                                           {lc.name: lc.degrees for lc in pic.layers})
    results["picture_theirs"] = _price_published(config, published["optcnn"])
    results["search"] = run_search(config)
    if config.oracle:
        if oracle_report is None:
            from benchmarks.oracle_paradl import oracle_report
        results["oracle"] = oracle_report()
    else:
        results["oracle"] = None
        results["oracle_missing"] = "disabled in this configuration"
    results["plots"] = write_plots(results, plots_dir) if plots else {}
    results["seconds"] = time.perf_counter() - t0
    results["load_after"] = _load()
    md = render_markdown(results, published, report_dir=out_dir)
    report = out_dir / report_name
    report.write_text(md, encoding="utf-8")
    results["markdown"] = md
    results["report"] = report
    write_json(plots_dir / "reproduce.json",
               {"strategies": rows, "search": results["search"],
                "config": dataclasses.asdict(config)}, indent=1)
    return results


def _graph_of(config: ReproduceConfig):
    from milp_parallel import models
    return models.get(config.picture_model,
                      batch_size=config.batch_per_gpu * config.picture_devices)


def _price_published(config: ReproduceConfig, pub: Mapping) -> dict | None:
    """OptCNN's Table 5 strategy evaluated by our cost model (VGG-16 on 4 GPUs only).

    Layers between the listed ones (ReLU, pooling, flatten, dropout) take the degrees of the
    layer before them when their dims allow it (else they stay serial).
    """
    if config.picture_model != "vgg16" or config.picture_devices != 4:
        return None
    from milp_parallel.costs.build import build
    groups = (pub.get("vgg16_4gpu_strategy") or {}).get("groups", [])
    graph = _graph_of(config)
    topo = _topology(config.cluster, config.picture_devices)
    built = build(graph, topo)
    counters: dict[str, int] = {}
    wanted: dict[str, dict] = {}
    last: dict = {}
    for lay in graph.layers:
        if lay.op in ("conv", "linear", "loss"):
            counters[lay.op] = counters.get(lay.op, 0) + 1
            k = counters[lay.op]
            g = next((g for g in groups if g["kind"] == lay.op and g["first"] <= k
                      <= g["last"]), None)
            last = dict(g["degrees"]) if g is not None else {}
        wanted[lay.name] = {d: x for d, x in last.items() if d in lay.parallel_dims}
    assignment = []
    for v, members in enumerate(built.members):
        head = graph.layer(members[0])
        target = [int(wanted[head.name].get(d, 1)) for d in head.dims]
        hits = np.nonzero((built.configs[v] == np.array(target)).all(axis=1))[0]
        assignment.append(int(hits[0]) if len(hits) else 0)
    ev = built.problem.evaluate(np.asarray(assignment))
    b = bytes_moved(graph, _node_degrees(built, assignment))
    return {"step_seconds": float(ev.cost), "feasible": bool(ev.feasible), **b}


# ---------------------------------------------------------------------- issue 26.5
#: The presets of :func:`compare_clusters`: OptCNN's machine and two of today's.
COMPARE_CLUSTERS = ("optcnn", "dgx_a100", "dgx_h100")


def compare_clusters(config: ReproduceConfig,
                     cluster_names: Sequence[str] = COMPARE_CLUSTERS) -> list[dict]:
    """Section 1's table on several presets: does the layer-wise gain survive?

    For every preset, model and device count of ``config`` (batch ``batch_per_gpu`` per GPU,
    no cross-check: the exact search ``dp`` alone), one row: the layer-wise optimum's and
    the best of data / model / OWT's throughput, their ratio (``gain``), the ratio to data
    parallelism alone (``gain_vs_data``), each one's speedup
    over the same preset's one GPU, and the share of the best other strategy's step spent
    on gradient synchronization and transfers (``comm_share_best_other``).
    """
    rows = []
    for name in cluster_names:
        cfg = dataclasses.replace(config, cluster=name, cross_check=False)
        got, plans = run_strategies(cfg)
        one = {(r["model"], r["strategy"]): r["throughput"] for r in got
               if r["devices"] == 1}
        for (model, d), plan in plans.items():
            here = {r["strategy"]: r for r in got if r["model"] == model
                    and r["devices"] == d}
            others = [s for s in ("data", "model", "owt") if here[s]["feasible"]]
            best = max(others, key=lambda s: here[s]["throughput"]) if others else None
            lw = here["layerwise"]["throughput"]
            bo = here[best]["throughput"] if best else 0.0
            bb = plan.baselines[best] if best else None
            comm = ((bb.sync_seconds + bb.transfer_seconds) / bb.step_seconds
                    if bb is not None and bb.step_seconds > 0 else None)
            rows.append({"cluster": name, "model": model, "devices": d,
                         "layerwise_per_s": round(lw, 1), "best_other": best,
                         "best_other_per_s": round(bo, 1),
                         "gain": round(lw / bo, 3) if bo else None,
                         "data_per_s": round(here["data"]["throughput"], 1),
                         "gain_vs_data": round(lw / here["data"]["throughput"], 3)
                         if here["data"]["throughput"] else None,
                         "speedup_layerwise": round(lw / one[(model, "layerwise")], 2),
                         "speedup_best_other": round(
                             bo / max(one[(model, s)] for s in ("data", "model", "owt")), 2),
                         "comm_share_best_other": None if comm is None else round(comm, 3)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.reproduction --clusters [--csv OUT]``: :func:`compare_clusters`."""
    import argparse
    ap = argparse.ArgumentParser(description="section 1 on OptCNN's and today's presets")
    ap.add_argument("--clusters", default=",".join(COMPARE_CLUSTERS))
    ap.add_argument("--devices", default="1,4,16")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = dataclasses.replace(ReproduceConfig(), strategy_devices=tuple(
        int(x) for x in args.devices.split(",")))
    rows = compare_clusters(cfg, tuple(args.clusters.split(",")))
    for r in rows:
        logger.info("%s", r)
    if args.csv:
        write_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
