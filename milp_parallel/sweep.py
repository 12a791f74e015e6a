"""Benchmark sweeps: a TOML grid of runs, executed in parallel, results as JSON lines.

A sweep file declares one or more grids; each grid expands to the cross product of its lists.
Every item has a stable id (a hash of its canonical parameters), so re-running the same sweep
skips what is already in the results file and a crash loses at most the items in flight.

Sweep file (TOML)
-----------------
::

    name = "quick"                 # optional, for reports
    time_limit = 60                # keys at the top apply to every [[grid]] below
    kill_after = 300               # optional: hard wall-clock limit per item, seconds

    [[grid]]                       # model items: solve(model, cluster, ...)
    models = ["lenet5", "alexnet"]
    clusters = ["optcnn"]
    devices = "1..16"              # a list, or a range string (see milp_parallel.units)
    batch_sizes = [64]             # optional (default: the model's own batch size)
    memory_limits = ["none", "16GiB"]
    solvers = ["dp", "highs"]
    cross_check = false
    repeats = 1

    [[grid]]                       # problem items: solve_problem(Problem file, ...)
    problems = ["../data/iopddl_example.json"]   # relative to the sweep file
    solvers = ["dp", "brute", "highs"]

Every plural key also accepts its singular form with one value (``model = "alexnet"``).

Execution
---------
Each item runs in its own Python process (so a crash, a memory blow-up or a ``SIGKILL`` of
that process marks only that item ``failed``), started by a thread of a local pool (``jobs``
at a time) or by a task on a Dask distributed cluster (``scheduler``), through the
:class:`concurrent.futures.Executor` interface either way. The parent alone appends results,
one line per item, each with one ``write`` + ``fsync`` under a lock.

Result lines carry ``status`` = a solver status (``optimal``, ``feasible``, ``infeasible``,
``unknown``) or ``failed`` / ``timeout``; readers take the last line per ``id``
(:func:`read_results`), so a retried item's new line supersedes the old one.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import json
import logging
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import FormatError, InfeasibleError, MilpParallelError, UnknownNameError
from .units import parse_bytes, parse_int_range, parse_seconds

__all__ = ["SweepItem", "Sweep", "SweepSummary", "load_sweep", "expand_grid", "run_sweep",
           "run_item", "read_results", "FAILED", "TIMEOUT", "FAILED_STATUSES", "ITEM_KINDS"]

logger = logging.getLogger(__name__)

FAILED = "failed"    #: the item raised, crashed or was killed
TIMEOUT = "timeout"  #: the item ran past its hard wall-clock limit and was killed
FAILED_STATUSES = (FAILED, TIMEOUT)

#: Item kinds: ``model`` (solve a zoo model on a cluster), ``problem`` (solve a Problem file),
#: ``sleep`` (sleeps, then reports; for testing the runner itself: with ``pid_dir`` it writes
#: its pid to ``<pid_dir>/<id>.pid`` and stops sleeping once ``<pid_dir>/<id>.release`` exists).
ITEM_KINDS = ("model", "problem", "sleep")

# Grid keys: plural name -> (singular name, kind it belongs to or None for any kind).
_GRID_KEYS = {
    "models": ("model", "model"),
    "clusters": ("cluster", "model"),
    "devices": ("device", "model"),
    "batch_sizes": ("batch_size", "model"),
    "cross_check": ("cross_check", "model"),
    "problems": ("problem", "problem"),
    "sleeps": ("sleep", "sleep"),
    "exit_codes": ("exit_code", "sleep"),
    "pid_dir": ("pid_dir", "sleep"),
    "memory_limits": ("memory_limit", None),
    "solvers": ("solver", None),
    "time_limits": ("time_limit", None),
    "repeats": ("repeat", None),
}
_TOP_KEYS = {"name", "description", "kill_after", "grid"}
#: Seconds a worker gets beyond its solver time limit (imports, building, cross-check).
_KILL_GRACE_SECONDS = 120.0
_KILL_FACTOR = 2.0


@dataclass(frozen=True)
class SweepItem:
    """One run of a sweep.

    Attributes
    ----------
    kind : str
        ``"model"``, ``"problem"`` or ``"sleep"``.
    params : tuple of (str, value)
        The canonical parameters, sorted by name; values are JSON scalars. They alone define
        :attr:`id`.
    base_dir : str
        The directory that relative problem paths are resolved against (not part of the id).
    kill_after : float or None
        Hard wall-clock limit in seconds for the worker process (not part of the id).
    """

    kind: str
    params: tuple[tuple[str, Any], ...]
    base_dir: str = ""
    kill_after: float | None = None

    @property
    def id(self) -> str:
        """A stable 16-hex-digit id: a SHA-256 of the kind and canonical parameters."""
        doc = json.dumps({"kind": self.kind, **dict(self.params)}, sort_keys=True,
                         separators=(",", ":"))
        return hashlib.sha256(doc.encode()).hexdigest()[:16]

    def param(self, name: str, default: Any = None) -> Any:
        """The value of one parameter (``default`` when absent)."""
        return dict(self.params).get(name, default)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "params": dict(self.params), "base_dir": self.base_dir,
                "kill_after": self.kill_after}

    @classmethod
    def from_dict(cls, d: Mapping) -> "SweepItem":
        return cls(d["kind"], tuple(sorted(d["params"].items())), d.get("base_dir", ""),
                   d.get("kill_after"))

    def label(self) -> str:
        """A short human description, e.g. ``alexnet@optcnn x4 dp``."""
        p = dict(self.params)
        if self.kind == "model":
            s = f"{p['model']}@{p['cluster']} x{p['devices']} {p['solver']}"
        elif self.kind == "problem":
            s = f"{Path(p['problem']).name} {p['solver']}"
        else:
            s = f"sleep {p['sleep']}s"
        if p.get("repeat"):
            s += f" #{p['repeat']}"
        return s


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file: its name and its expanded items (in file order)."""

    name: str
    items: tuple[SweepItem, ...]
    path: str | None = None
    description: str = ""


@dataclass(frozen=True)
class SweepSummary:
    """What :func:`run_sweep` did."""

    total: int
    skipped: int
    done: int
    failed: int
    seconds: float
    out: str

    def __str__(self) -> str:
        return (f"{self.total} items: {self.done} ran, {self.failed} of them failed, "
                f"{self.skipped} already done; {self.seconds:.1f}s; results in {self.out}")


# ---------------------------------------------------------------------- parsing
def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _none(x: Any) -> bool:
    return x is None or (isinstance(x, str) and x.strip().lower() in ("none", "off", ""))


def expand_grid(grid: Mapping[str, Any], *, base_dir: str | Path = "",
                kill_after: float | None = None, where: str = "grid") -> list[SweepItem]:
    """Expand one grid (a mapping of plural keys to lists) into sweep items.

    Parameters
    ----------
    grid : mapping
        Keys from the module docstring (``models``, ``clusters``, ``devices``, ...), plural or
        singular; exactly one of ``models``, ``problems`` or ``sleeps`` says the item kind.
    base_dir : path
        Where relative problem paths resolve.
    kill_after : float, optional
        Hard limit per item (seconds); default ``2 * time_limit + 120`` or none.
    where : str
        Names the grid in error messages.

    Returns
    -------
    list of SweepItem

    Raises
    ------
    FormatError
        For an unknown key, a missing required key, or a value that does not parse.
    UnknownNameError
        For an unknown solver name.
    """
    norm: dict[str, list] = {}
    singular = {s: p for p, (s, _) in _GRID_KEYS.items()}
    for key, value in grid.items():
        plural = key if key in _GRID_KEYS else singular.get(key)
        if plural is None:
            raise FormatError(f"{where}: unknown key {key!r}; known keys: "
                              f"{', '.join(sorted(_GRID_KEYS))} (or their singular forms)")
        if plural in norm:
            raise FormatError(f"{where}: {key!r} is given twice (plural and singular)")
        norm[plural] = _as_list(value)
    kinds = [k for k, key in (("model", "models"), ("problem", "problems"), ("sleep", "sleeps"))
             if key in norm]
    if len(kinds) != 1:
        raise FormatError(f"{where}: give exactly one of 'models', 'problems' or 'sleeps' "
                          f"(got {', '.join(kinds) or 'none'})")
    kind = kinds[0]
    for key in norm:
        owner = _GRID_KEYS[key][1]
        if owner is not None and owner != kind:
            raise FormatError(f"{where}: key {key!r} applies to {owner} items, but this grid "
                              f"lists {kind} items")
    if kind == "model":
        for key in ("clusters", "devices"):
            if key not in norm:
                raise FormatError(f"{where}: model items need {key!r}")

    from .solvers import solver_names
    solvers = [str(s) for s in norm.get("solvers", ["auto" if kind != "sleep" else "none"])]
    if kind != "sleep":
        for s in solvers:
            if s not in solver_names():
                raise UnknownNameError(f"{where}: unknown solver {s!r}; known solvers: "
                                       f"{', '.join(solver_names())}")
    try:
        memory = [None if _none(m) else parse_bytes(m) for m in norm.get("memory_limits",
                                                                          [None])]
        tlimits = [None if _none(t) else parse_seconds(t) for t in norm.get("time_limits",
                                                                             [None])]
        reps = norm.get("repeats", [1])
        if len(reps) != 1 or not isinstance(reps[0], int) or reps[0] < 1:
            raise FormatError(f"{where}: 'repeats' must be one positive integer, got {reps}")
        repeats = range(int(reps[0]))
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None

    axes: list[tuple[str, list]] = []
    if kind == "model":
        devices: list[int] = []
        for d in norm["devices"]:
            devices.extend(parse_int_range(d))
        batch = [None if _none(b) else int(b) for b in norm.get("batch_sizes", [None])]
        cross = norm.get("cross_check", [True])
        axes = [("model", [str(m) for m in norm["models"]]),
                ("cluster", [str(c) for c in norm["clusters"]]),
                ("devices", devices), ("batch_size", batch), ("memory_limit", memory),
                ("solver", solvers), ("time_limit", tlimits),
                ("cross_check", [bool(c) for c in cross]), ("repeat", list(repeats))]
    elif kind == "problem":
        axes = [("problem", [str(p) for p in norm["problems"]]), ("memory_limit", memory),
                ("solver", solvers), ("time_limit", tlimits), ("repeat", list(repeats))]
    else:
        for s in norm["sleeps"]:
            parse_seconds(s)
        axes = [("sleep", [float(parse_seconds(s)) for s in norm["sleeps"]]),
                ("exit_code", [None if _none(e) else int(e) for e in norm.get("exit_codes",
                                                                            [None])]),
                ("pid_dir", [None if _none(p) else str(p) for p in norm.get("pid_dir", [None])]),
                ("time_limit", tlimits), ("repeat", list(repeats))]

    names = [n for n, _ in axes]
    items = []
    for values in itertools.product(*(v for _, v in axes)):
        params = dict(zip(names, values))
        params = {k: v for k, v in params.items() if v is not None or k in ("memory_limit",
                                                                            "time_limit")}
        kill = kill_after
        if kill is None and params.get("time_limit") is not None:
            kill = _KILL_FACTOR * params["time_limit"] + _KILL_GRACE_SECONDS
        items.append(SweepItem(kind, tuple(sorted(params.items())), str(base_dir), kill))
    return items


def load_sweep(path: str | Path) -> Sweep:
    """Read a TOML sweep file and expand it into items.

    Keys at the top level (other than ``name``, ``description``, ``kill_after``) are
    defaults for every ``[[grid]]``; without any ``[[grid]]`` the top level is the one grid.
    Duplicate items (same id) are kept once.

    Raises
    ------
    FormatError
        If the file is missing, is not TOML, or a grid is malformed (names the grid and key).
    UnknownNameError
        For an unknown solver name.

    Examples
    --------
    >>> sweep = load_sweep("sweeps/quick.toml")  # doctest: +SKIP
    >>> len(sweep.items)  # doctest: +SKIP
    24
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such sweep file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not valid TOML ({exc})") from None
    defaults = {k: v for k, v in doc.items() if k not in _TOP_KEYS}
    grids = doc.get("grid", [defaults])
    if not isinstance(grids, list) or not grids:
        raise FormatError(f"{path}: 'grid' must be an array of tables ([[grid]])")
    kill = doc.get("kill_after")
    kill = None if kill is None else parse_seconds(kill)
    items: dict[str, SweepItem] = {}
    for i, g in enumerate(grids):
        if not isinstance(g, dict):
            raise FormatError(f"{path}: grid {i + 1} is not a table")
        merged = {**defaults, **g} if "grid" in doc else dict(g)
        for it in expand_grid(merged, base_dir=path.parent.resolve(), kill_after=kill,
                              where=f"{path}: grid {i + 1}"):
            items.setdefault(it.id, it)
    return Sweep(name=str(doc.get("name", path.stem)), items=tuple(items.values()),
                 path=str(path), description=str(doc.get("description", "")))


# ---------------------------------------------------------------------- one item
def _finite(x: Any) -> float | None:
    """A JSON-safe float: ``None`` for NaN, +/-inf, or missing."""
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _version() -> str:
    try:
        from . import __version__
        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


def _problem_size(problem) -> dict:
    k = problem.n_configs
    return {"n_nodes": int(problem.n_nodes), "n_edges": int(problem.n_edges),
            "n_configs": int(k.sum()),
            "n_edge_pairs": int(sum(k[u] * k[v] for u, v in problem.edges))}


def load_problem_file(path: str | Path):
    """Read a Problem file in our JSON format or the IOPDDL format, detected by content.

    Raises
    ------
    FormatError
        If the file is missing, not JSON, or neither format.
    """
    from .problem import PROBLEM_FORMAT, Problem, _read_json
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("format") == PROBLEM_FORMAT:
        return Problem.from_dict(doc, source=str(path))
    if isinstance(doc, dict) and isinstance(doc.get("problem"), dict):
        return Problem.from_iopddl(path)
    raise FormatError(f"{path}: neither a milp_parallel problem (a 'format' key) nor an IOPDDL "
                      "problem (a 'problem' key)")


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


def run_item(item: SweepItem) -> dict:
    """Run one item in this process and return its result record (never raises for a
    failure of the item itself: the record's ``status`` says ``failed`` and ``error`` why).

    The record holds ``id``, ``kind``, ``params``, ``status``, ``objective``, ``bound``,
    ``gap``, ``solve_seconds``, ``wall_seconds``, ``problem`` (size), ``plan`` (model
    items: :func:`plan_summary`), ``error``, ``version``, ``host``, ``started``.
    """
    p = dict(item.params)
    rec: dict[str, Any] = {"id": item.id, "kind": item.kind, "params": p, "status": FAILED,
                           "objective": None, "bound": None, "gap": None,
                           "solve_seconds": None, "error": None}
    t0 = time.perf_counter()
    started = time.time()
    try:
        if item.kind == "sleep":
            # Test hooks: announce the pid in pid_dir, stop early once "<id>.release" appears.
            release = None
            if p.get("pid_dir"):
                Path(p["pid_dir"], f"{item.id}.pid").write_text(str(os.getpid()))
                release = Path(p["pid_dir"], f"{item.id}.release")
            deadline = time.monotonic() + p["sleep"]
            while time.monotonic() < deadline and not (release and release.exists()):
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if p.get("exit_code") is not None:
                os._exit(int(p["exit_code"]))
            rec.update(status="optimal", objective=p["sleep"], bound=p["sleep"], gap=0.0,
                       solve_seconds=p["sleep"])
        elif item.kind == "problem":
            from .solvers import solve_problem
            path = Path(p["problem"])
            if not path.is_absolute():
                path = Path(item.base_dir or ".") / path
            problem = load_problem_file(path)
            if p.get("memory_limit") is not None:
                problem = problem.with_memory_limit(p["memory_limit"])
            rec["problem"] = _problem_size(problem)
            opts = {} if p.get("time_limit") is None else {"time_limit": p["time_limit"]}
            res = solve_problem(problem, p["solver"], **opts)
            rec.update(status=res.status, objective=_finite(res.objective),
                       bound=_finite(res.bound), gap=_finite(res.gap),
                       solve_seconds=_finite(res.seconds), solver_used=res.solver)
        elif item.kind == "model":
            from .plan import solve
            plan = solve(p["model"], p["cluster"], devices=p["devices"],
                         batch_size=p.get("batch_size"), solver=p["solver"],
                         memory_limit=p.get("memory_limit"), time_limit=p.get("time_limit"),
                         cross_check=p.get("cross_check", True))
            rec.update(status=plan.status, objective=_finite(plan.objective),
                       bound=_finite(plan.bound), gap=_finite(plan.gap),
                       solve_seconds=_finite(plan.solve_seconds), solver_used=plan.solver,
                       plan=plan_summary(plan))
            try:  # the size of the problem solved (built again, outside the timings)
                from .plan import make_problem
                rec["problem"] = _problem_size(make_problem(
                    p["model"], p["cluster"], devices=p["devices"],
                    batch_size=p.get("batch_size"), memory_limit=p.get("memory_limit")))
            except Exception:  # noqa: BLE001 - the size is a nicety; the result stands
                rec["problem"] = {"n_nodes": len(plan.assignment) or len(plan.layers)}
        else:
            raise FormatError(f"unknown item kind {item.kind!r}; known: {', '.join(ITEM_KINDS)}")
    except InfeasibleError as exc:
        rec.update(status="infeasible", error=str(exc),
                   least_memory_bytes=_finite(exc.least_memory_bytes),
                   budget_bytes=_finite(exc.budget_bytes))
    except MilpParallelError as exc:
        rec.update(status=FAILED, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a sweep records any failure and goes on
        logger.debug("item %s failed", item.id, exc_info=True)
        rec.update(status=FAILED, error=f"{type(exc).__name__}: {exc}")
    rec.update(wall_seconds=time.perf_counter() - t0, started=started, version=_version(),
               host=socket.gethostname(), python=platform.python_version())
    return rec


def _worker_main() -> None:  # pragma: no cover - runs in the child process
    """Child-process entry: read an item as JSON on stdin, write its record to argv[1]."""
    out = sys.argv[1]
    item = SweepItem.from_dict(json.load(sys.stdin))
    logging.basicConfig(level=logging.WARNING)
    rec = run_item(item)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rec, f, allow_nan=False)
    os.replace(tmp, out)


def _failure(item: SweepItem, status: str, error: str, seconds: float) -> dict:
    return {"id": item.id, "kind": item.kind, "params": dict(item.params), "status": status,
            "objective": None, "bound": None, "gap": None, "solve_seconds": None,
            "error": error, "wall_seconds": seconds, "started": time.time() - seconds,
            "version": _version(), "host": socket.gethostname(),
            "python": platform.python_version()}


def run_item_isolated(item: SweepItem) -> dict:
    """Run one item in a fresh Python process, killing it after ``item.kill_after`` seconds.

    A crash, a non-zero exit or a kill of the child (e.g. ``SIGKILL`` from the OOM killer)
    gives a ``failed`` record naming the signal or exit code and the end of its stderr; a
    timeout gives a ``timeout`` record. This is the function the executors run.
    """
    t0 = time.perf_counter()
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (pkg_parent, env.get("PYTHONPATH")) if x)
    with tempfile.TemporaryDirectory(prefix="milp_parallel_item_") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-c",
               "from milp_parallel.sweep import _worker_main; _worker_main()", out]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env, cwd=tmp)
        try:
            _, err = proc.communicate(json.dumps(item.to_dict()).encode(),
                                      timeout=item.kill_after)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return _failure(item, TIMEOUT, f"killed after the hard limit of {item.kill_after:g}s",
                            time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        if proc.returncode != 0 or not os.path.exists(out):
            if proc.returncode < 0:
                try:
                    sig = signal.Signals(-proc.returncode).name
                except ValueError:
                    sig = str(-proc.returncode)
                why = f"worker process killed by {sig}"
            else:
                why = f"worker process exited with code {proc.returncode}"
            if tail:
                why += ": " + " | ".join(tail)
            return _failure(item, FAILED, why, seconds)
        with open(out, encoding="utf-8") as f:
            return json.load(f)


# ---------------------------------------------------------------------- results file
def read_results(path: str | Path) -> dict[str, dict]:
    """The last record per item id in a results file (``{}`` if the file does not exist).

    Lines that do not parse (a torn write of a killed process) are skipped with a warning.
    """
    path = Path(path)
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
                out[rec["id"]] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                bad += 1
    if bad:
        logger.warning("%s: skipped %d unreadable line(s)", path, bad)
    return out


class _Appender:
    """Appends one JSON line per record: one write, flush, fsync, under a thread lock and an
    advisory file lock (so two sweeps on one file do not interleave)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        # A killed writer may have left a torn last line: start ours on a fresh line.
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self._write(b"\n")

    def _write(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            try:
                import fcntl
                fcntl.flock(fd, fcntl.LOCK_EX)
            except ImportError:  # pragma: no cover - not POSIX
                pass
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, record: Mapping) -> None:
        line = json.dumps(record, allow_nan=False, default=str) + "\n"
        with self._lock:
            self._write(line.encode())


# ---------------------------------------------------------------------- the runner
class _Progress:
    def __init__(self, total: int, enabled: bool | None):
        self.total, self.done, self.failed = total, 0, 0
        self.t0 = time.perf_counter()
        self.bar = None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="item", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                logger.info("tqdm is not installed (pip install milp_parallel[progress]); "
                            "logging progress instead")

    def update(self, item: SweepItem, rec: Mapping) -> None:
        self.done += 1
        if rec["status"] in FAILED_STATUSES:
            self.failed += 1
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)
        else:
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * (self.total - self.done)
            obj = rec.get("objective")
            logger.info("[%d/%d] %s %s: %s%s (%.1fs; elapsed %.0fs, eta %.0fs)%s", self.done,
                        self.total, item.id, item.label(), rec["status"],
                        "" if obj is None else f" objective={obj:.6g}",
                        rec.get("wall_seconds") or 0.0, elapsed, eta,
                        f" error: {rec['error']}" if rec["status"] in FAILED_STATUSES else "")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_sweep(items: Sweep | Sequence[SweepItem], out: str | Path, *, jobs: int | None = None,
              scheduler: Any = None, retry_failed: bool = False,
              progress: bool | None = None,
              on_result: Callable[[dict], None] | None = None) -> SweepSummary:
    """Run the items not yet in ``out``, in parallel, appending one JSON line each.

    Parameters
    ----------
    items : Sweep or sequence of SweepItem
    out : path
        The results file (JSON lines). Items whose id already has a line there are skipped,
        except failed ones when ``retry_failed``.
    jobs : int, optional
        Items at once on the local pool; default the number of CPU cores.
    scheduler : str or distributed.Client, optional
        A Dask scheduler address (``tcp://host:port``) or a Client: run the items as tasks on
        that cluster (each still in its own process on the worker) instead of locally. Needs
        ``pip install milp_parallel[dask]``.
    retry_failed : bool
        Re-run items whose last record is ``failed`` or ``timeout``.
    progress : bool, optional
        A tqdm bar (``True``), log lines (``False``), or a bar only on a terminal (``None``).
    on_result : callable, optional
        Called with each new record (in the parent), after it is written.

    Returns
    -------
    SweepSummary

    Raises
    ------
    SolverUnavailableError
        If ``scheduler`` is given but dask.distributed is not installed.
    """
    all_items = list(items.items if isinstance(items, Sweep) else items)
    out = Path(out)
    previous = read_results(out)
    todo = []
    for it in all_items:
        rec = previous.get(it.id)
        if rec is None or (retry_failed and rec.get("status") in FAILED_STATUSES):
            todo.append(it)
    skipped = len(all_items) - len(todo)
    if skipped:
        logger.info("%s: %d of %d items already done, skipping them", out, skipped,
                    len(all_items))
    t0 = time.perf_counter()
    appender = _Appender(out)
    bar = _Progress(len(todo), progress)
    client = None
    own_client = False
    if scheduler is not None and todo:
        try:
            from distributed import Client
        except ImportError:
            from .errors import SolverUnavailableError
            raise SolverUnavailableError("running a sweep on a Dask cluster needs "
                                         "dask.distributed: pip install milp_parallel[dask]"
                                         ) from None
        if isinstance(scheduler, Client):
            client = scheduler
        else:
            client = Client(scheduler)
            own_client = True
        executor: cf.Executor = client.get_executor(pure=False)
        logger.info("running %d items on the Dask cluster at %s", len(todo),
                    client.scheduler.address)
    else:
        n = jobs or os.cpu_count() or 1
        executor = cf.ThreadPoolExecutor(max_workers=max(1, n),
                                         thread_name_prefix="milp_parallel-sweep")
        if todo:
            logger.info("running %d items, %d at a time", len(todo), n)
    failed = 0
    try:
        futures = {executor.submit(run_item_isolated, it): it for it in todo}
        for fut in cf.as_completed(futures):
            it = futures[fut]
            try:
                rec = fut.result()
            except Exception as exc:  # noqa: BLE001 - e.g. a Dask worker lost
                rec = _failure(it, FAILED, f"{type(exc).__name__}: {exc}", 0.0)
            appender.append(rec)
            if rec["status"] in FAILED_STATUSES:
                failed += 1
            bar.update(it, rec)
            if on_result is not None:
                on_result(rec)
    finally:
        bar.close()
        if client is not None:
            executor.shutdown(wait=True)
        else:
            executor.shutdown(wait=True, cancel_futures=True)
        if own_client:
            client.close()
    return SweepSummary(total=len(all_items), skipped=skipped, done=len(todo), failed=failed,
                        seconds=time.perf_counter() - t0, out=str(out))
