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

from .errors import FileWriteError, FormatError, require
from .sweep import FAILED_STATUSES, INFEASIBLE, OK_STATUSES

__all__ = ["plot_plan", "plot_sweep", "plot_oracle_scaling", "summary_table", "write_report",
           "load_records", "check_record"]

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
    import matplotlib.pyplot as plt
    try:
        from .sweep import _make_folder
        _make_folder(path.parent, f"the plot {path}")
        if path.is_dir():
            raise FileWriteError(f"{path}: is a directory; give a file name for the plot "
                                 f"(e.g. {path / ('plot.' + fmt)})")
        fig.savefig(path, format=fmt, dpi=120, bbox_inches="tight")
    except FileWriteError:
        raise
    except OSError as exc:
        why = "permission denied" if isinstance(exc, PermissionError) else \
            exc.strerror or str(exc)
        raise FileWriteError(f"{path}: cannot write the plot ({why}); give another path"
                             ) from None
    finally:
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


def _measurement(x: Any) -> float | None:
    """A measurement of a record as a float: a JSON number or ``"inf"`` / ``"-inf"`` /
    ``"nan"`` (how :mod:`milp_parallel.io` writes them); None for anything else."""
    if isinstance(x, str) and x.strip().lower() in ("inf", "+inf", "-inf", "nan"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x)
    except OverflowError:  # an integer beyond float's range
        return None


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
    """The last record per item id of a sweep results file, in file order, checked.

    Each record is checked as :func:`check_record` does, naming the file and the line.

    Raises
    ------
    FormatError
        If the file does not exist, is not a results file, or a record has a field of the
        wrong shape (the message names the file, the line and the field). An empty file
        holds no results yet: ``[]``.
    """
    from .sweep import result_lines
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: no such results file")
    skipped: list[str] = []
    records = [check_record(rec, f"{path}, line {lineno}")
               for lineno, rec in result_lines(path, skipped).values()]
    if skipped:  # after the checks: a bad record's error is then the one line on stderr
        logger.warning("%s: skipped %d unreadable line(s)", path, len(skipped))
    return records


#: Fields of a result record that are measurements: a value that is not a number (or
#: "inf" / "nan") is shown blank and left out of the plots, with a warning.
_NUMBERS = ("objective", "bound", "gap", "solve_seconds", "wall_seconds", "least_memory_bytes",
            "budget_bytes")
_PLAN_NUMBERS = ("step_seconds", "throughput", "compute_seconds", "sync_seconds",
                 "transfer_seconds", "peak_memory_bytes", "memory_capacity_bytes",
                 "batch_size", "exact_objective", "exact_seconds")
_BASELINE_NUMBERS = ("step_seconds", "compute_seconds", "sync_seconds", "transfer_seconds",
                     "speedup")
#: What identifies a record's item, by kind: these must be there, of the right type.
_REQUIRED_PARAMS = {"model": ("model", "cluster", "devices"), "problem": ("problem",)}


def check_record(rec: Any, where: str = "record") -> dict:
    """A result record checked field by field, as the report reads it.

    What identifies the run must be right, or the record is refused: the record and its
    ``params``, ``plan``, ``plan.baselines`` (and each baseline) and ``problem`` must be
    objects; ``status`` one of :data:`~milp_parallel.sweep.ITEM_STATUSES`; ``kind`` a
    string; each parameter a JSON value (string, number, boolean or null), with ``model``,
    ``cluster``, ``problem`` and ``solver`` strings, ``devices`` (and ``batch_size``) whole
    numbers >= 1 (a model record needs ``model``, ``cluster`` and ``devices``, a problem
    record ``problem``); ``feasible`` flags true or false. A measurement (objective, times,
    throughput, speedups, sizes) that is not a number is shown blank and left out of the
    plots, with a warning naming it; text fields (``error``, ``cross_check``) are shown as
    text.

    Parameters
    ----------
    rec : object
        One record (a parsed line of a results file).
    where : str
        Names the record in messages (``"r.jsonl, line 3"``).

    Returns
    -------
    dict
        A copy with every field as the report uses it (numbers as floats or None).

    Raises
    ------
    FormatError
        Naming ``where``, the field, what it holds and what it must be.

    Examples
    --------
    >>> check_record({"id": "a", "kind": "problem", "status": "optimal",
    ...               "params": {"problem": "x.json"}, "objective": "abc"})["objective"]
    >>> check_record({"id": "a", "status": "done"})
    Traceback (most recent call last):
    ...
    milp_parallel.errors.FormatError: record: status must be one of optimal, feasible, \
infeasible, unknown, failed, timeout, got a string ('done'); fix or delete that record
    """
    from .io import Fields
    from .sweep import ITEM_STATUSES
    f = Fields(where)
    fix = "; fix or delete that record"

    def err(field: str, must: str, x: Any) -> FormatError:
        from .io import describe_type
        return f.error(field, f"must be {must}, got {describe_type(x)}{fix}")

    def obj(x: Any, field: str) -> dict:
        if x is None:
            return {}
        if not isinstance(x, Mapping):
            raise err(field, "an object", x)
        return dict(x)

    junk: list[str] = []

    def numbers(d: dict, keys: Iterable[str], prefix: str) -> None:
        for k in keys:
            if d.get(k) is not None:
                d[k] = _measurement(d[k])
                if d[k] is None:
                    junk.append(f"{prefix}{k}")

    r = obj(rec, "the record")
    if not isinstance(r.get("status"), str) or r["status"] not in ITEM_STATUSES:
        raise err("status", f"one of {', '.join(ITEM_STATUSES)}", r.get("status"))
    for key in ("id", "kind"):
        if r.get(key) is not None and not isinstance(r[key], str):
            raise err(key, "a string", r[key])
    params = r["params"] = obj(r.get("params"), "params")
    for k, v in params.items():
        if v is not None and not isinstance(v, (str, int, float)):
            raise err(f"params.{k}", "a value (a string, a number, a boolean or null)", v)
    for k in _REQUIRED_PARAMS.get(r.get("kind"), ()):
        if params.get(k) is None:
            raise f.error(f"params.{k}", f"is missing (a {r['kind']} record names its "
                                         f"{', '.join(_REQUIRED_PARAMS[r['kind']])}){fix}")
    for k in ("model", "cluster", "problem", "solver"):
        if params.get(k) is not None and not isinstance(params[k], str):
            raise err(f"params.{k}", "a string", params[k])
    for k in ("devices", "batch_size"):
        v = params.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise err(f"params.{k}", "a whole number >= 1", v)
    numbers(r, _NUMBERS, "")
    r["problem"] = obj(r.get("problem"), "problem")
    numbers(r["problem"], ("n_nodes", "n_edges", "n_configs", "n_edge_pairs"), "problem.")
    for key in ("error", "solver_used"):
        if r.get(key) is not None and not isinstance(r[key], str):
            r[key] = str(r[key]) if key == "error" else None
    plan = r["plan"] = obj(r.get("plan"), "plan")
    numbers(plan, _PLAN_NUMBERS, "plan.")
    for key in ("cross_check", "exact_solver"):
        if plan.get(key) is not None and not isinstance(plan[key], str):
            plan[key] = str(plan[key])
    baselines = plan["baselines"] = obj(plan.get("baselines"), "plan.baselines")
    for name in list(baselines):
        b = baselines[name] = obj(baselines[name], f"plan.baselines.{name}")
        numbers(b, _BASELINE_NUMBERS, f"plan.baselines.{name}.")
        if not isinstance(b.get("feasible", True), bool):
            raise err(f"plan.baselines.{name}.feasible", "true or false", b["feasible"])
    if junk:
        logger.warning("%s: not a number, shown blank: %s", where, ", ".join(junk))
    return r


def _records(records: Iterable[Any]) -> list[dict]:
    """Records checked by :func:`check_record` (named by their position)."""
    return [check_record(r, f"record {i + 1}") for i, r in enumerate(records)]


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
    records = _records(records)
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
    rows = [_row(r) for r in _records(records)]
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
    from .io import write_text
    from .sweep import _make_folder
    records = load_records(results) if isinstance(results, (str, Path)) else _records(results)
    out_dir = Path(out_dir)
    _make_folder(out_dir, f"the report {out_dir}")
    md, text = summary_table(records)
    write_text(out_dir / "summary.md", "# Sweep summary\n\n" + md)
    write_text(out_dir / "summary.csv", text)
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
