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
    memory_limits = ["device", "none", "16GiB"]   # each device's memory (the default),
    solvers = ["dp", "highs"]                     # no budget, or a size
    cross_check = false
    repeats = 1

    [[grid]]                       # problem items: solve_problem(Problem file, ...)
    problems = ["../data/iopddl_example.json"]   # relative to the sweep file
    solvers = ["dp", "brute", "highs"]
    # memory_limits: the file's own budget by default, "none" drops it, a size replaces it

Every plural key also accepts its singular form with one value (``model = "alexnet"``).
A file whose name ends in ``.json`` holds the same keys as a JSON object (``"grid"``: a list
of objects). Models and clusters are zoo / preset names or JSON files; relative file paths
(problems, models, clusters) resolve against the sweep file's folder.

Everything is checked when the file is loaded (:func:`load_sweep`), before anything runs:
an unknown key (refused naming the nearest known one), a ``time_limit`` of 0, a size that
does not parse, an unknown solver, model or cluster, a device count the cluster cannot
take, a problem or graph file that is missing or unreadable. One error lists every bad
grid and value with the items it spoils. An item that fails when it runs is recorded
``failed`` and the sweep goes on.
``memory_limit`` is read by :func:`milp_parallel.units.parse_memory_limit`, as on the command
line and in :func:`milp_parallel.solve`.

Item kinds
----------
``model`` and ``problem`` are built in; :func:`register_item_kind` adds others (a kind is a
marker key, its own keys and a runner function called in the item's process), which is how
the tests exercise the runner with items that sleep, crash or hang.

Execution
---------
Each item runs in its own Python process (:func:`milp_parallel.isolation.run_isolated`: a
crash, a memory blow-up or a ``SIGKILL`` of that process marks only that item ``failed``),
started by a thread of a local pool (``jobs``
at a time) or by a task on a Dask distributed cluster (``scheduler``), through the
:class:`concurrent.futures.Executor` interface either way. The parent alone appends results,
one line per item, each with one ``write`` + ``fsync`` under a lock.

Result lines carry ``status``, one of :data:`ITEM_STATUSES`: a solver status (``optimal``,
``feasible``, ``infeasible``, ``unknown``) or ``failed`` / ``timeout`` (:data:`FAILED`,
:data:`TIMEOUT`); readers take the last line per ``id``
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
import socket
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from .errors import (
    FileWriteError,
    FormatError,
    InfeasibleError,
    InvalidOptionError,
    MilpParallelError,
    UnknownNameError,
)
from .io import suggest
from .isolation import FAILED, TIMEOUT, function_ref, run_isolated
from .solvers.result import FEASIBLE, INFEASIBLE, OPTIMAL, STATUSES, UNKNOWN
from .units import DEVICE_MEMORY, NO_LIMIT, parse_int_range, parse_memory_limit, parse_seconds

__all__ = ["SweepItem", "Sweep", "SweepSummary", "ItemKind", "load_sweep", "expand_grid",
           "check_items", "run_sweep", "run_item", "run_item_isolated", "read_results",
           "result_lines", "register_item_kind",
           "item_kinds", "load_problem_file", "plan_summary",
           "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "FAILED", "TIMEOUT",
           "ITEM_STATUSES", "FAILED_STATUSES", "OK_STATUSES", "ITEM_KINDS"]

logger = logging.getLogger(__name__)

# One status vocabulary for sweep items: a solver status (OPTIMAL, FEASIBLE, INFEASIBLE,
# UNKNOWN from milp_parallel.solvers.result), or what became of the item's process: FAILED
# (it raised, crashed or was killed) or TIMEOUT (killed at its hard wall-clock limit), both
# from milp_parallel.isolation.
#: Every status a result line may carry.
ITEM_STATUSES = STATUSES + (FAILED, TIMEOUT)
#: The statuses ``--retry-failed`` re-runs.
FAILED_STATUSES = (FAILED, TIMEOUT)
#: The statuses of an item that produced an assignment.
OK_STATUSES = (OPTIMAL, FEASIBLE)

#: Grid keys any kind takes: plural name -> singular name.
_COMMON_KEYS = {"solvers": "solver", "time_limits": "time_limit", "repeats": "repeat",
                "memory_limits": "memory_limit"}
_TOP_KEYS = {"name", "description", "kill_after", "grid"}
#: Seconds a worker gets beyond its solver time limit (imports, building, cross-check).
_KILL_GRACE_SECONDS = 120.0
_KILL_FACTOR = 2.0


@dataclass(frozen=True)
class ItemKind:
    """A kind of sweep item: which grid keys say it, and the function that runs one.

    Attributes
    ----------
    name : str
        The kind (``"model"``, ``"problem"``, or a registered one).
    marker : str
        The plural grid key whose presence says a grid lists items of this kind.
    keys : Mapping[str, str]
        Its own grid keys, plural -> singular (the marker included); values must be JSON
        scalars (or lists of them, one axis each).
    runner : str
        ``"module:function"`` called in the item's worker process with the
        :class:`SweepItem`; it returns the record's fields (``status``, ``objective``, ...).
        It may raise: the item is then ``failed`` with the error.
    required : tuple of str
        Plural keys a grid of this kind must have (besides the marker).
    """

    name: str
    marker: str
    keys: Mapping[str, str]
    runner: str
    required: tuple[str, ...] = ()


_KINDS: dict[str, ItemKind] = {}


def register_item_kind(name: str, runner: Callable | str, *, keys: Mapping[str, str],
                       marker: str | None = None, required: Sequence[str] = ()) -> ItemKind:
    """Add a kind of sweep item (e.g. a test's own runner), or replace one of that name.

    Parameters
    ----------
    name : str
        The kind's name (``SweepItem.kind``).
    runner : callable or str
        A module-level function ``runner(item) -> dict`` (or its ``"module:function"``):
        it runs in the item's own process and returns the record's fields.
    keys : mapping
        Its grid keys, plural -> singular, e.g. ``{"sleeps": "sleep"}``.
    marker : str, optional
        The key that says a grid holds this kind (default: the first of ``keys``).
    required : sequence of str
        Keys a grid of this kind must give.

    Returns
    -------
    ItemKind

    Raises
    ------
    InvalidOptionError
        For a runner that another process could not import, or keys that clash with the
        built-in kinds' keys.

    Examples
    --------
    >>> kind = register_item_kind("noop", "builtins:dict", keys={"values": "value"})
    >>> [i.param("value") for i in expand_grid({"values": [1, 2]})]
    [1, 2]
    >>> _ = _KINDS.pop("noop")
    """
    keys = {str(k): str(v) for k, v in dict(keys).items()}
    if not keys:
        raise InvalidOptionError(f"item kind {name!r}: give at least one grid key")
    marker = marker or next(iter(keys))
    for other in _KINDS.values():
        if other.name == name:
            continue
        clash = (set(keys) | set(keys.values())) & (set(other.keys) | set(other.keys.values()))
        if clash:
            raise InvalidOptionError(f"item kind {name!r}: keys {sorted(clash)} are "
                                     f"already used by kind {other.name!r}")
    if set(keys) & set(_COMMON_KEYS) or set(keys.values()) & set(_COMMON_KEYS.values()):
        raise InvalidOptionError(f"item kind {name!r}: {sorted(_COMMON_KEYS)} are common "
                                 "keys of every kind")
    kind = ItemKind(str(name), marker, MappingProxyType(keys), function_ref(runner),
                    tuple(required))
    _KINDS[kind.name] = kind
    return kind


def item_kinds() -> tuple[str, ...]:
    """The names of the known item kinds."""
    return tuple(_KINDS)


@dataclass(frozen=True)
class SweepItem:
    """One run of a sweep.

    Attributes
    ----------
    kind : str
        ``"model"``, ``"problem"``, or a kind added by :func:`register_item_kind`.
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
            s = self.kind + " " + " ".join(f"{k}={v}" for k, v in sorted(p.items())
                                           if k not in ("repeat", "solver") and v is not None)
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
def _as_list(value: Any, where: str, key: str) -> list:
    from .io import describe_type
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if not isinstance(v, (str, int, float)):  # bool is an int
            raise FormatError(f"{where}: {key!r} must be a value or a list of values (strings, "
                              f"numbers, booleans), got {describe_type(v)}")
    if not values:
        raise FormatError(f"{where}: {key!r} is an empty list; give at least one value")
    return values


def _none(x: Any) -> bool:
    return x is None or (isinstance(x, str) and x.strip().lower() in ("none", "off", ""))


def _memory_param(value: Any, kind: str, where: str) -> int | str | None:
    """The canonical ``memory_limit`` parameter of an item.

    ``None`` (no key, or ``"device"``) for a model item is the device memory; for a problem
    item the file's own budget. ``"none"`` drops the budget; a size is whole bytes.
    """
    if value is None:
        return None
    try:
        if isinstance(value, str) and value.strip().lower() == DEVICE_MEMORY:
            if kind == "problem":
                raise InvalidOptionError("memory_limit 'device': a problem file has no "
                                         "device; give a size or 'none'")
            return None
        x = parse_memory_limit(value, device_bytes=1.0, default=NO_LIMIT)
    except InvalidOptionError as exc:
        raise FormatError(f"{where}: {exc}") from None
    return NO_LIMIT if x is None else int(x)


def _time_param(value: Any, where: str) -> float | None:
    from .solvers.options import validate_time_limit
    if _none(value) or (isinstance(value, str) and value.strip().lower() in ("inf",
                                                                            "unlimited")):
        return None
    try:
        return validate_time_limit(parse_seconds(value))
    except (FormatError, InvalidOptionError) as exc:
        raise FormatError(f"{where}: time_limit {value!r}: {exc}") from None


def _int_param(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(f"{where}: {key!r} must be a positive integer, got {value!r:.40}")
    return value


def expand_grid(grid: Mapping[str, Any], *, base_dir: str | Path = "",
                kill_after: float | None = None, where: str = "grid") -> list[SweepItem]:
    """Expand one grid (a mapping of plural keys to lists) into sweep items.

    Parameters
    ----------
    grid : mapping
        Keys from the module docstring (``models``, ``clusters``, ``devices``, ...), plural or
        singular; exactly one kind's marker key (``models``, ``problems``, or a registered
        kind's) says the item kind.
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
        For an unknown key, a missing required key, or a value that does not parse (a
        ``time_limit`` of 0, a ``memory_limit`` that is not a size, ...); names the grid.
    UnknownNameError
        For an unknown solver name.
    """
    if not isinstance(grid, Mapping):
        raise FormatError(f"{where}: a grid must be a table of keys, got {grid!r:.40}")
    known = dict(_COMMON_KEYS)
    owner: dict[str, str] = {}
    for kind in _KINDS.values():
        for plural, single in kind.keys.items():
            known[plural] = single
            owner[plural] = kind.name
    singular = {s: p for p, s in known.items()}
    norm: dict[str, list] = {}
    for key, value in grid.items():
        plural = key if key in known else singular.get(key)
        if plural is None:
            raise FormatError(f"{where}: unknown key {key!r}"
                              f"{suggest(key, [*known, *singular]) or ';'} known keys: "
                              f"{', '.join(sorted(known))} (or their singular forms)")
        if plural in norm:
            raise FormatError(f"{where}: {key!r} is given twice (plural and singular)")
        norm[plural] = _as_list(value, where, key)
    kinds = [k.name for k in _KINDS.values() if k.marker in norm]
    if len(kinds) != 1:
        markers = " or ".join(repr(k.marker) for k in _KINDS.values())
        raise FormatError(f"{where}: give exactly one of {markers} (got "
                          f"{', '.join(kinds) or 'none'})")
    kind = _KINDS[kinds[0]]
    for key in norm:
        if key in owner and owner[key] != kind.name:
            raise FormatError(f"{where}: key {key!r} applies to {owner[key]} items, but this "
                              f"grid lists {kind.name} items")
    for key in kind.required:
        if key not in norm:
            raise FormatError(f"{where}: {kind.name} items need {key!r}")

    from .solvers import solver_names
    builtin = kind.name in ("model", "problem")
    solvers = [str(s) for s in norm.get("solvers", ["auto" if builtin else "none"])]
    if builtin:
        for s in solvers:
            if s not in solver_names():
                raise UnknownNameError(f"{where}: unknown solver {s!r}"
                                       f"{suggest(s, solver_names()) or ';'} known solvers: "
                                       f"{', '.join(solver_names())}")
    memory = [_memory_param(m, kind.name, where) for m in norm.get("memory_limits", [None])]
    tlimits = [_time_param(t, where) for t in norm.get("time_limits", [None])]
    reps = norm.get("repeats", [1])
    if len(reps) != 1:
        raise FormatError(f"{where}: 'repeats' must be one positive integer, got {reps}")
    repeats = list(range(_int_param(reps[0], where, "repeats")))

    axes: list[tuple[str, list]]
    if kind.name == "model":
        devices: list[int] = []
        for d in norm["devices"]:
            if isinstance(d, (bool, float)):
                raise FormatError(f"{where}: 'devices' must be whole numbers or a range "
                                  f"string such as \"1..16\", got {d!r}")
            try:
                devices.extend(parse_int_range(d))
            except FormatError as exc:
                raise FormatError(f"{where}: devices: {exc}") from None
        batch = [None if _none(b) else _int_param(b, where, "batch_sizes")
                 for b in norm.get("batch_sizes", [None])]
        cross = norm.get("cross_check", [True])
        for c in cross:
            if not isinstance(c, bool):
                raise FormatError(f"{where}: 'cross_check' must be true or false, got {c!r}")
        axes = [("model", [str(m) for m in norm["models"]]),
                ("cluster", [str(c) for c in norm["clusters"]]),
                ("devices", devices), ("batch_size", batch), ("memory_limit", memory),
                ("solver", solvers), ("time_limit", tlimits), ("cross_check", cross),
                ("repeat", repeats)]
    elif kind.name == "problem":
        axes = [("problem", [str(p) for p in norm["problems"]]), ("memory_limit", memory),
                ("solver", solvers), ("time_limit", tlimits), ("repeat", repeats)]
    else:
        axes = [(kind.keys[k], [None if _none(v) else v for v in norm[k]])
                for k in kind.keys if k in norm]
        axes += [("time_limit", tlimits), ("repeat", repeats)]
        if "solvers" in norm:
            axes.append(("solver", solvers))
        if "memory_limits" in norm:
            axes.append(("memory_limit", memory))

    names = [n for n, _ in axes]
    items = []
    for values in itertools.product(*(v for _, v in axes)):
        params = dict(zip(names, values))
        params = {k: v for k, v in params.items() if v is not None or k in ("memory_limit",
                                                                            "time_limit")}
        kill = kill_after
        if kill is None and params.get("time_limit") is not None:
            kill = _KILL_FACTOR * params["time_limit"] + _KILL_GRACE_SECONDS
        items.append(SweepItem(kind.name, tuple(sorted(params.items())), str(base_dir), kill))
    return items


def load_sweep(path: str | Path) -> Sweep:
    """Read a sweep file and expand it into items, checking every item before any runs.

    The file is TOML, or JSON when its name ends in ``.json`` (or ``.json.gz``): the same
    keys either way. Keys at the top level (other than ``name``, ``description``,
    ``kill_after``) are defaults for every ``[[grid]]``; without any ``[[grid]]`` the top
    level is the one grid. Duplicate items (same id) are kept once.

    Everything is checked here, before anything runs: every key and value (a typo'd key is
    refused naming the nearest known one, a ``time_limit`` of 0 is refused when the file is
    loaded, not item by item), and every item's names and files (:func:`check_items`: the
    model, the cluster, the device count, the problem file). All that is wrong is reported
    at once, in one error that lists each bad grid or value with the items it spoils.

    Raises
    ------
    FormatError
        If the file is missing, unreadable, not TOML (JSON), or anything in it is wrong;
        the message names the file, the grid, the key or value, and the items.
    UnknownNameError
        When all that is wrong is unknown names (solver, model, cluster).

    Examples
    --------
    >>> sweep = load_sweep("sweeps/quick.toml")  # doctest: +SKIP
    >>> len(sweep.items)  # doctest: +SKIP
    24
    """
    path = Path(path)
    doc = _read_sweep_document(path)
    grid_keys = set(_COMMON_KEYS) | set(_COMMON_KEYS.values())
    for kind in _KINDS.values():
        grid_keys |= set(kind.keys) | set(kind.keys.values())
    for key in doc:
        if key not in _TOP_KEYS and key not in grid_keys:
            raise FormatError(f"{path}: unknown top-level key {key!r}"
                              f"{suggest(key, _TOP_KEYS | grid_keys) or ';'} known: "
                              f"{', '.join(sorted(_TOP_KEYS))} and the grid keys "
                              f"{', '.join(sorted(k for k in grid_keys if k.endswith('s')))}"
                              " (or their singular forms)")
    defaults = {k: v for k, v in doc.items() if k not in _TOP_KEYS}
    grids = doc.get("grid", [defaults])
    if not isinstance(grids, list) or not grids:
        raise FormatError(f"{path}: 'grid' must be an array of tables ([[grid]])")
    kill = doc.get("kill_after")
    if kill is not None:
        try:
            kill = parse_seconds(kill)
        except FormatError as exc:
            raise FormatError(f"{path}: kill_after: {exc}") from None
        if not kill > 0:
            raise FormatError(f"{path}: kill_after must be a duration > 0, got {kill!r}")
    for key in ("name", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise FormatError(f"{path}: {key!r} must be a string, got {doc[key]!r:.40}")
    items: dict[str, SweepItem] = {}
    problems: list[MilpParallelError] = []
    for i, g in enumerate(grids):
        where = f"{path}: grid {i + 1}"
        try:
            if not isinstance(g, dict):
                raise FormatError(f"{where} is not a table of keys")
            merged = {**defaults, **g} if "grid" in doc else dict(g)
            expanded = expand_grid(merged, base_dir=path.parent.resolve(), kill_after=kill,
                                   where=where)
        except (FormatError, UnknownNameError) as exc:
            problems.append(exc)
            continue
        problems += _item_problems(expanded, where)
        for it in expanded:
            items.setdefault(it.id, it)
    if problems:
        raise _one_error(problems, f"{path}: ")
    return Sweep(name=str(doc.get("name", path.stem)), items=tuple(items.values()),
                 path=str(path), description=str(doc.get("description", "")))


def _read_sweep_document(path: Path) -> dict:
    """The parsed sweep file: JSON by its name (``.json``, ``.json.gz``), else TOML."""
    from .io import describe_type, read_json, read_text
    if path.name.endswith((".json", ".json.gz")):
        doc = read_json(path, what="sweep file (JSON)")
        if not isinstance(doc, dict):
            raise FormatError(f"{path}: a sweep file must be a JSON object of keys (name, "
                              f"grid, ...), got {describe_type(doc)}")
        return doc
    text = read_text(path, what="sweep file (TOML)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{path}: not valid TOML ({exc})") from None


def check_items(items: Sequence[SweepItem], where: str = "sweep") -> None:
    """Check that every item can start: its names are known and its files can be read.

    Model items: the model is a zoo name or a readable graph file, the cluster a preset or a
    readable cluster file, and the device count one the cluster and the default
    configuration space can use. Problem items: the problem file exists, can be read and
    holds a JSON object. Relative paths resolve against each item's ``base_dir`` (the sweep
    file's folder), as when the item runs. Items of other kinds are not checked.

    Parameters
    ----------
    items : sequence of SweepItem
    where : str
        Names the items in the message (e.g. the sweep file and grid).

    Raises
    ------
    FormatError
        One error naming every bad value and the items it spoils (a missing or malformed
        file, a device count the cluster cannot take, ...).
    UnknownNameError
        When every bad value is an unknown model or cluster name.
    """
    problems = _item_problems(items, where)
    if problems:
        raise _one_error(problems)


def _item_problems(items: Sequence[SweepItem], where: str) -> list[MilpParallelError]:
    """One error per bad value among ``items`` (each checked once), naming its items."""
    seen: dict[tuple, MilpParallelError | None] = {}
    spoiled: dict[str, tuple[MilpParallelError, list[str]]] = {}
    for it in items:
        p = dict(it.params)
        if it.kind == "model":
            checks = [("model", p.get("model"), it.base_dir, None),
                      ("cluster", p.get("cluster"), it.base_dir, p.get("devices"))]
        elif it.kind == "problem":
            checks = [("problem", p.get("problem"), it.base_dir, None)]
        else:
            continue
        for check in checks:
            if check not in seen:
                seen[check] = _check_value(*check)
            exc = seen[check]
            if exc is not None:
                spoiled.setdefault(str(exc), (exc, []))[1].append(it.label())
    out = []
    for message, (exc, labels) in spoiled.items():
        shown = ", ".join(labels[:3]) + (f", +{len(labels) - 3} more" if len(labels) > 3
                                         else "")
        n = len(labels)
        out.append(type(exc)(f"{where}: {message} ({n} item{'s' if n > 1 else ''}: {shown})"))
    return out


def _item_path(value: str, base_dir: str) -> Path:
    """A file named by an item: relative paths resolve against the sweep file's folder."""
    path = Path(value)
    return path if path.is_absolute() else Path(base_dir or ".") / path


def _check_value(what: str, value: Any, base_dir: str, devices: Any
                 ) -> MilpParallelError | None:
    """The error that the item's ``what`` (model, cluster, problem) would stop it with."""
    from .plan import _is_path
    if not isinstance(value, str):
        return FormatError(f"{what} {value!r:.40} must be a name or a file path")
    try:
        if what == "problem":
            _sniff_problem_file(_item_path(value, base_dir))
        elif what == "model":
            if _is_path(value):
                from .graph import LayerGraph
                LayerGraph.load(_item_path(value, base_dir))
            else:
                from . import models
                if value not in models.names():
                    return UnknownNameError(
                        f"unknown model {value!r}{suggest(value, models.names()) or ';'} "
                        f"known models: {', '.join(models.names())} (or a graph JSON file)")
        elif _is_path(value):
            from .configs import check_device_count
            from .topology import Topology
            topo = Topology.load(_item_path(value, base_dir))
            if devices is not None and devices > topo.n_devices:
                return FormatError(f"cluster file {value!r} has {topo.n_devices} devices, "
                                   f"not {devices}; give at most {topo.n_devices} devices or "
                                   "a larger cluster (a cluster file does not grow)")
            if devices is not None:
                check_device_count(devices, where=f"cluster {value!r}")
        else:
            from . import clusters
            from .configs import check_device_count
            if value not in clusters.names():
                return UnknownNameError(
                    f"unknown cluster {value!r}{suggest(value, clusters.names()) or ';'} "
                    f"known clusters: {', '.join(clusters.names())} (or a cluster JSON file)")
            if devices is not None:
                check_device_count(devices, where=f"cluster {value!r}")
    except MilpParallelError as exc:
        return exc
    return None


def _sniff_problem_file(path: Path) -> None:
    """Refuse a problem file that cannot be opened or does not start as a JSON object.

    Only the first bytes are read (a problem file may be hundreds of megabytes); the item's
    own process reads it in full.
    """
    import gzip
    import zlib
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as f:
                head = f.read(4096)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such problem file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, not a problem file") from None
    except PermissionError:
        raise FormatError(f"{path}: permission denied (cannot read this problem file)"
                          ) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(f"{path}: cannot read this problem file ({exc})") from None
    if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise FormatError(f"{path}: not a problem file (ours or IOPDDL's, a JSON object "
                          "starting with '{')")


def _one_error(problems: Sequence[MilpParallelError], prefix: str = "") -> MilpParallelError:
    """One error for several: each message once (the common ``prefix`` dropped), joined.

    An :class:`UnknownNameError` when every problem is one, else a :class:`FormatError`.
    """
    if len(problems) == 1:
        return problems[0]
    parts = [str(p).removeprefix(prefix) for p in problems]
    cls = UnknownNameError if all(isinstance(p, UnknownNameError) for p in problems) \
        else FormatError
    return cls(f"{prefix}{len(problems)} problems, nothing was run: {'; '.join(parts)}; fix "
               "them and load the sweep again")


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
    """Read a Problem file, ours or IOPDDL (:func:`milp_parallel.problem.load_problem`)."""
    from .problem import load_problem
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
    from .solvers import solve_problem
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
    from .plan import _is_path, make_problem, solve
    p = dict(item.params)
    model, cluster = (str(_item_path(x, item.base_dir)) if _is_path(x) else x
                      for x in (p["model"], p["cluster"]))
    kw = dict(devices=p["devices"], batch_size=p.get("batch_size"),
              memory_limit=p.get("memory_limit"))
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
    from .isolation import _resolve
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
    rec.update(wall_seconds=time.perf_counter() - t0, started=started, version=_version(),
               host=socket.gethostname(), python=platform.python_version())
    return rec


def _run_item_dict(item: dict, runner: str | None) -> dict:
    """Worker-process entry (through :func:`~milp_parallel.isolation.run_isolated`)."""
    return run_item(SweepItem.from_dict(item), runner)


def _failure(item: SweepItem, status: str, error: str, seconds: float) -> dict:
    return {"id": item.id, "kind": item.kind, "params": dict(item.params), "status": status,
            "objective": None, "bound": None, "gap": None, "solve_seconds": None,
            "error": error, "wall_seconds": seconds, "started": time.time() - seconds,
            "version": _version(), "host": socket.gethostname(),
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


# ---------------------------------------------------------------------- results file
def read_results(path: str | Path) -> dict[str, dict]:
    """The last record per item id in a results file (``{}`` if the file does not exist).

    Lines that do not parse (a torn write of a killed process) are skipped with a warning.

    Raises
    ------
    FormatError
        If the path exists but cannot be read as text (a directory, a binary file), or no
        line of a non-empty file is a result record.
    """
    return {key: rec for key, (_, rec) in result_lines(path).items()}


def result_lines(path: str | Path, skipped: list[str] | None = None
                 ) -> dict[str, tuple[int, dict]]:
    """As :func:`read_results`, with the line number of each record: ``{id: (line, rec)}``.

    For readers whose messages name the line of a bad field (:mod:`milp_parallel.report`).
    Given a list ``skipped``, the unreadable lines are appended to it instead of logged.
    """
    from .io import loads, read_text
    path = Path(path)
    out: dict[str, tuple[int, dict]] = {}
    if not path.exists():
        return out
    what = "results file (JSON lines)"
    bad: list[str] = []
    for lineno, line in enumerate(read_text(path, what=what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = loads(line, source=f"{path}, line {lineno}", what=what)
        except FormatError as exc:
            bad.append(str(exc))
            continue
        if isinstance(rec, dict) and isinstance(rec.get("id"), str):
            out[rec["id"]] = (lineno, rec)
        else:
            bad.append(f"{path}, line {lineno}: not a result record (an object with an 'id')")
    if bad and not out:
        raise FormatError(f"{path}: not a results file: no line is a result record ({bad[0]}); "
                          "give another file")
    if bad and skipped is not None:
        skipped.extend(bad)
    elif bad:
        logger.warning("%s: skipped %d unreadable line(s)", path, len(bad))
    return out


def _make_folder(folder: Path, what: str) -> None:
    """``mkdir -p folder``, or a :class:`FileWriteError` naming the folder and why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):  # the folder or one above it is a file
        file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
                    folder)
        why = f"{file} is a file, not a folder"
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise FileWriteError(f"{folder}: cannot create the folder for {what} ({why}); give "
                         "another path") from None


class _Appender:
    """Appends one JSON line per record: one write, flush, fsync, under a thread lock and an
    advisory file lock (so two sweeps on one file do not interleave)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        _make_folder(path.parent, f"the results file {path}")
        # A killed writer may have left a torn last line: start ours on a fresh line.
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self._write(b"\n")
        else:
            self._write(b"")  # the results file can be written: found before any item runs

    def _write(self, data: bytes) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            why = "permission denied" if isinstance(exc, PermissionError) else \
                exc.strerror or str(exc)
            raise FileWriteError(f"{self.path}: cannot write the results file ({why}); give "
                                 "another --out path") from None
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
        from .io import dumps
        line = dumps(record) + "\n"
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
            try:
                client = Client(scheduler)
            except (ValueError, TypeError, OSError) as exc:  # a bad address, no scheduler
                raise InvalidOptionError(
                    f"scheduler {scheduler!r:.80}: cannot connect ({exc}); give the address "
                    "of a running Dask scheduler, e.g. tcp://HOST:8786") from None
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
