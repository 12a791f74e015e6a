"""Reports and plots: one plan, a sweep's results, the oracle's scaling projections.

matplotlib is an optional extra (``pip install milp_parallel[plot]``); it is imported only
when a plot is drawn, with the non-interactive Agg backend. Tables (markdown, CSV) need
nothing beyond the standard library.

Every function takes plain data (a :class:`~milp_parallel.plan.Plan` or its ``to_dict()``,
result records as written by :mod:`milp_parallel.sweep`, oracle rows as dicts), so a report
can be drawn from files long after the runs.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from ._optional import require
from .errors import FormatError
from .sweep import FAILED_STATUSES, INFEASIBLE, OK_STATUSES

__all__ = ["plot_plan", "plot_sweep", "plot_oracle_scaling", "summary_table", "write_report",
           "load_records"]

logger = logging.getLogger(__name__)

#: Colour of each split dimension, by strategy family (data, filter/channel, spatial, ...).
DIM_COLOURS = {"n": "#1f77b4", "c": "#ff7f0e", "h": "#2ca02c", "w": "#98df8a",
               "d": "#17becf", "s": "#9467bd"}
DIM_FAMILY = {"n": "sample (data)", "c": "channel (filter / model)", "h": "height (spatial)",
              "w": "width (spatial)", "d": "depth (spatial)", "s": "sequence"}
PART_COLOURS = {"compute": "#4c72b0", "sync": "#dd8452", "transfer": "#55a868"}
BASELINE_ORDER = ("data", "model", "owt", "best_uniform")


def _budget_label(mem) -> str:
    """A memory budget for a title: ``"290.0 MiB"`` from bytes, or the text as given."""
    try:
        from .units import format_bytes
        return format_bytes(float(mem))
    except (TypeError, ValueError):
        return str(mem)


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or MissingDependencyError naming the extra."""
    matplotlib = require("matplotlib", "plot", "plots")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: str | Path, fmt: str | None) -> Path:
    path = Path(path)
    fmt = fmt or (path.suffix.lstrip(".").lower() or "png")
    if fmt not in ("png", "svg", "pdf"):
        raise FormatError(f"{path}: unsupported image format {fmt!r}; use png, svg or pdf")
    if path.suffix.lstrip(".").lower() != fmt:
        path = path.with_suffix("." + fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt, dpi=120, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def _num(x: Any) -> float:
    """A float from a record value (``None``, ``"inf"`` strings included); nan if missing."""
    if x is None:
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):
        return math.nan


# ---------------------------------------------------------------------- one plan
def _plan_dict(plan) -> dict:
    if isinstance(plan, Mapping):
        return dict(plan)
    if hasattr(plan, "to_dict"):
        return plan.to_dict()
    raise TypeError(f"expected a Plan or its to_dict(), got {type(plan).__name__}")


def plot_plan(plan, path: str | Path, *, fmt: str | None = None) -> Path:
    """Draw a plan: the degree of each layer along each dimension, and the step time split
    into compute / sync / transfer for the plan and each baseline.

    Parameters
    ----------
    plan : Plan or mapping
        A :class:`~milp_parallel.plan.Plan` or its ``to_dict()``.
    path : path
        The image file; its suffix gives the format unless ``fmt`` does.
    fmt : {"png", "svg", "pdf"}, optional

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ImportError
        If matplotlib is missing (``pip install milp_parallel[plot]``).
    """
    d = _plan_dict(plan)
    plt = _pyplot()
    import numpy as np
    layers = d.get("layers") or []
    names = [lc["name"] for lc in layers]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8.0, 0.28 * len(names) + 3), 8),
                                   gridspec_kw={"height_ratios": [3, 2]})
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    dims_used = [dim for dim in DIM_COLOURS
                 if any(int(lc.get("degrees", {}).get(dim, 1)) > 1 for lc in layers)]
    others = sorted({dim for lc in layers for dim in lc.get("degrees", {})} - set(DIM_COLOURS))
    for dim in dims_used + others:
        deg = np.array([float(lc.get("degrees", {}).get(dim, 1)) for lc in layers])
        h = np.log2(np.maximum(deg, 1.0))
        ax1.bar(x, h, bottom=bottom, color=DIM_COLOURS.get(dim, "#7f7f7f"),
                label=f"{dim}: {DIM_FAMILY.get(dim, dim)}")
        bottom += h
    serial = bottom == 0
    if serial.any():
        ax1.scatter(x[serial], np.zeros(int(serial.sum())), marker="_", color="k",
                    label="serial (1 device)")
    ax1.set_ylim(0, max(float(bottom.max()) if len(bottom) else 0.0, 1.0) * 1.35)
    ax1.set_xticks(x)
    ax1.set_xticklabels(names, rotation=90, fontsize=7)
    ax1.set_ylabel("log2(degree): devices per layer")
    ax1.set_xlabel("layer (topological order)")
    ax1.set_title(f"{d.get('model', '?')} on {d.get('cluster', '?')}, {d.get('devices', '?')} "
                  f"devices, batch {d.get('batch_size', '?')}: degree per dimension")
    if dims_used or others or serial.any():
        ax1.legend(fontsize=8, loc="upper right", ncol=2)

    bars = [("plan", d)]
    for name in BASELINE_ORDER + tuple(sorted(set(d.get("baselines", {})) -
                                              set(BASELINE_ORDER))):
        b = d.get("baselines", {}).get(name)
        if b is not None:
            bars.append((name if b.get("feasible", True) else f"{name}\n(infeasible)", b))
    labels = [n for n, _ in bars]
    bx = np.arange(len(bars))
    base = np.zeros(len(bars))
    for part in ("compute", "sync", "transfer"):
        v = np.array([_num(b.get(f"{part}_seconds")) * 1e3 for _, b in bars])
        v = np.where(np.isfinite(v), v, 0.0)
        ax2.bar(bx, v, bottom=base, color=PART_COLOURS[part], label=part)
        base += v
    ax2.set_xticks(bx)
    ax2.set_xticklabels(labels, fontsize=8)
    ax2.set_ylabel("time per step (ms)")
    ax2.set_title("step time: plan vs baselines")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path, fmt)


# ---------------------------------------------------------------------- sweeps
def load_records(path: str | Path) -> list[dict]:
    """The last record per item id of a sweep results file, in file order.

    Raises
    ------
    FormatError
        If the file does not exist.
    """
    from .sweep import read_results
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: no such results file")
    return list(read_results(path).values())


def _ok(r: Mapping) -> bool:
    return r.get("status") in OK_STATUSES


def _series_plot(ax, series: Mapping[str, Mapping[float, float]], *, logx=True, logy=False):
    styles = {"plan": dict(color="k", lw=2, marker="o")}
    for i, (name, pts) in enumerate(series.items()):
        xs = sorted(k for k, v in pts.items() if math.isfinite(v))
        if not xs:
            continue
        kw = styles.get(name, dict(ls="--", marker="."))
        ax.plot(xs, [pts[x] for x in xs], label=name, **kw)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)


def plot_sweep(records: Iterable[Mapping], out_dir: str | Path, *, fmt: str = "png"
               ) -> list[Path]:
    """Draw a sweep's plots into ``out_dir``.

    - ``throughput.<fmt>``: predicted samples/s vs devices, one panel per model and cluster,
      the plan (best over solvers) and each baseline;
    - ``speedup.<fmt>``: the plan's speedup over data parallelism vs devices, per model;
    - ``solver_time.<fmt>``: solver seconds vs problem size (log-log), one line per backend,
      the exact search's cross-check included.

    A plot with no data to show is skipped. Returns the files written.

    Raises
    ------
    ImportError
        If matplotlib is missing.
    """
    records = list(records)
    out_dir = Path(out_dir)
    plt = _pyplot()
    written: list[Path] = []

    # (model, cluster, memory) -> series name -> devices -> throughput
    thr: dict[tuple, dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    spd: dict[str, dict[float, float]] = defaultdict(dict)
    for r in records:
        if r.get("kind") != "model" or not _ok(r) or not r.get("plan"):
            continue
        p, plan = r["params"], r["plan"]
        key = (p["model"], p["cluster"], p.get("batch_size"), p.get("memory_limit"))
        dev = float(p["devices"])
        cur = thr[key]["plan"].get(dev, -math.inf)
        t = _num(plan.get("throughput"))
        if math.isfinite(t) and t > cur:
            thr[key]["plan"][dev] = t
            batch = plan.get("batch_size")
            for name, b in (plan.get("baselines") or {}).items():
                step = _num(b.get("step_seconds"))
                if batch and math.isfinite(step) and step > 0 and b.get("feasible", True):
                    thr[key][name][dev] = batch / step
            data = (plan.get("baselines") or {}).get("data")
            if data is not None and _num(data.get("speedup")) > 0:
                label = f"{p['model']} ({p['cluster']})"
                spd[label][dev] = _num(data.get("speedup"))
    if thr:
        keys = sorted(thr, key=str)
        n = len(keys)
        cols = min(3, n)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
        for ax, key in zip(axes.flat, keys):
            series = dict(thr[key])
            ordered = {k: series[k] for k in ("plan", *BASELINE_ORDER) if k in series}
            ordered.update({k: v for k, v in series.items() if k not in ordered})
            _series_plot(ax, ordered, logy=True)
            model, cluster, batch, mem = key
            title = f"{model} on {cluster}"
            if batch:
                title += f", batch {batch}"
            if mem not in (None, "", "none"):
                title += f", budget {_budget_label(mem)}"
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("devices")
            ax.set_ylabel("predicted throughput (samples/s)")
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"throughput.{fmt}", fmt))
    if spd:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        _series_plot(ax, {k: spd[k] for k in sorted(spd)})
        ax.axhline(1.0, color="grey", lw=1, ls=":")
        ax.set_xlabel("devices")
        ax.set_ylabel("speedup over data parallelism (x)")
        ax.set_title("plan vs data parallelism (predicted step time ratio)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"speedup.{fmt}", fmt))

    # solver -> size -> [seconds]
    times: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("status") not in OK_STATUSES + (INFEASIBLE,):
            continue
        size = r.get("problem") or {}
        x = _num(size.get("n_edge_pairs", size.get("n_configs", size.get("n_nodes"))))
        s = _num(r.get("solve_seconds"))
        name = r.get("solver_used") or r.get("params", {}).get("solver")
        if math.isfinite(x) and math.isfinite(s) and name:
            times[name][x].append(max(s, 1e-6))
        plan = r.get("plan") or {}
        es = _num(plan.get("exact_seconds"))
        if math.isfinite(x) and math.isfinite(es):
            times[f"{plan.get('exact_solver') or 'dp'} (cross-check)"][x].append(max(es, 1e-6))
    if times:
        import numpy as np
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        series = {name: {x: float(np.median(v)) for x, v in pts.items()}
                  for name, pts in sorted(times.items())}
        _series_plot(ax, series, logx=False, logy=True)
        ax.set_xscale("log")
        xlabel = "problem size"
        if any("n_edge_pairs" in (r.get("problem") or {}) for r in records):
            xlabel = "problem size (edge configuration pairs)"
        ax.set_xlabel(xlabel)
        ax.set_ylabel("solver time (s, median)")
        ax.set_title("solver time vs problem size")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"solver_time.{fmt}", fmt))
    return written


_COLUMNS = ("id", "kind", "what", "devices", "memory_limit", "solver", "status", "objective",
            "gap", "solve_seconds", "step_seconds", "throughput", "speedup_vs_data",
            "cross_check", "error")


def _row(r: Mapping) -> dict:
    p = r.get("params", {})
    plan = r.get("plan") or {}
    if r.get("kind") == "model":
        what = f"{p.get('model')}@{p.get('cluster')}"
        if p.get("batch_size"):
            what += f" b={p['batch_size']}"
    elif r.get("kind") == "problem":
        what = Path(str(p.get("problem"))).name
    else:
        what = str(r.get("kind"))
    if p.get("repeat"):
        what += f" #{p['repeat']}"
    data = (plan.get("baselines") or {}).get("data") or {}
    return {"id": r.get("id"), "kind": r.get("kind"), "what": what,
            "devices": p.get("devices", ""), "memory_limit": p.get("memory_limit") or "",
            "solver": p.get("solver", ""), "status": r.get("status"),
            "objective": r.get("objective"), "gap": r.get("gap"),
            "solve_seconds": r.get("solve_seconds"), "step_seconds": plan.get("step_seconds"),
            "throughput": plan.get("throughput"), "speedup_vs_data": data.get("speedup"),
            "cross_check": plan.get("cross_check") or "",
            "error": (r.get("error") or "").replace("\n", " ").replace("|", "/")}


def _fmt(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def summary_table(records: Iterable[Mapping]) -> tuple[str, str]:
    """A summary of sweep records as ``(markdown, csv)``.

    The markdown has one table of the runs that produced an answer and a list of the
    failures with their error text; the CSV has every run, one row each.

    Examples
    --------
    >>> md, text = summary_table([{"id": "a1", "kind": "problem", "status": "optimal",
    ...     "params": {"problem": "x.json", "solver": "dp"}, "objective": 445.0}])
    >>> "| a1 | problem | x.json" in md
    True
    """
    rows = [_row(r) for r in records]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _fmt(v) for k, v in row.items()})
    good = [r for r in rows if r["status"] not in FAILED_STATUSES]
    bad = [r for r in rows if r["status"] in FAILED_STATUSES]
    cols = [c for c in _COLUMNS if c != "error" and any(_fmt(r[c]) for r in good)] or ["id"]
    lines = [f"{len(rows)} runs: {len(good)} answered, {len(bad)} failed.", ""]
    if good:
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in good]
    lines += ["", "## Failures", ""]
    if bad:
        lines += [f"- `{r['id']}` {r['what']} {r['solver']} ({r['status']}): {r['error']}"
                  for r in bad]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n", buf.getvalue()


def write_report(results: str | Path | Iterable[Mapping], out_dir: str | Path, *,
                 fmt: str = "png", plots: bool = True) -> list[Path]:
    """Write ``summary.md``, ``summary.csv`` and (with ``plots``) the sweep plots.

    Parameters
    ----------
    results : path or iterable of records
        A results file (last line per id is taken) or the records themselves.
    out_dir : path
    fmt : {"png", "svg", "pdf"}
    plots : bool
        Draw the plots (needs matplotlib).

    Returns
    -------
    list of Path
    """
    records = load_records(results) if isinstance(results, (str, Path)) else list(results)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, text = summary_table(records)
    (out_dir / "summary.md").write_text("# Sweep summary\n\n" + md, encoding="utf-8")
    (out_dir / "summary.csv").write_text(text, encoding="utf-8")
    written = [out_dir / "summary.md", out_dir / "summary.csv"]
    if plots:
        written += plot_sweep(records, out_dir, fmt=fmt)
    return written


# ---------------------------------------------------------------------- oracle
def plot_oracle_scaling(rows: Iterable[Mapping], path: str | Path, *, fmt: str | None = None,
                        title: str = "") -> Path:
    """ParaDL-style scaling plot: time per epoch split into compute and communication vs
    devices, one panel per strategy.

    Parameters
    ----------
    rows : iterable of mapping
        Each with ``strategy``, ``devices``, ``compute_seconds``, ``communication_seconds``
        (per epoch; ``comm_seconds`` is accepted too) and optionally ``feasible`` (rows with
        ``feasible=False`` are drawn hatched).
    path : path
    fmt : {"png", "svg", "pdf"}, optional
    title : str

    Returns
    -------
    Path
    """
    rows = list(rows)
    if not rows:
        raise FormatError("no oracle rows to plot")
    plt = _pyplot()
    import numpy as np
    by: dict[str, list[Mapping]] = defaultdict(list)
    for r in rows:
        by[str(r["strategy"])].append(r)
    n = len(by)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False, sharey=True)
    for ax, (strategy, rs) in zip(axes.flat, by.items()):
        rs = sorted(rs, key=lambda r: r["devices"])
        x = np.arange(len(rs))
        comp = np.array([_num(r.get("compute_seconds")) for r in rs])
        comm = np.array([_num(r.get("communication_seconds", r.get("comm_seconds")))
                         for r in rs])
        comp, comm = np.nan_to_num(comp), np.nan_to_num(comm)
        hatch = ["//" if r.get("feasible", True) is False else "" for r in rs]
        ax.bar(x, comp, color=PART_COLOURS["compute"], label="compute", hatch=None)
        ax.bar(x, comm, bottom=comp, color=PART_COLOURS["sync"], label="communication")
        for i, h in enumerate(hatch):
            if h:
                ax.bar(x[i], comp[i] + comm[i], fill=False, hatch=h, edgecolor="grey")
        ax.set_xticks(x)
        ax.set_xticklabels([str(r["devices"]) for r in rs], rotation=45, fontsize=8)
        ax.set_yscale("log")
        ax.set_xlabel("devices (GPUs)")
        ax.set_title(strategy)
        ax.grid(True, axis="y", alpha=0.3)
    axes.flat[0].set_ylabel("time per epoch (s)")
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path, fmt)
