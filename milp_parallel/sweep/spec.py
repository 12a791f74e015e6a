"""Sweep files: :func:`load_sweep` reads one, :func:`expand_grid` expands a grid, all checked.

Imports :mod:`.kinds` only, of ``sweep/`` (not :mod:`.items` nor :mod:`.runner`); outside it
the readers and parsers of :mod:`milp_parallel.io` and :mod:`milp_parallel.units`, and,
lazily, the names it checks (solvers, models, clusters, graph and cluster files).

A sweep file declares one or more grids; each grid expands to the cross product of its lists.

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
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import FormatError, InvalidOptionError, MilpParallelError, UnknownNameError
from ..io import suggest
from ..units import DEVICE_MEMORY, NO_LIMIT, parse_int_range, parse_memory_limit, parse_seconds
from .kinds import _COMMON_KEYS, _KINDS, SweepItem, _item_path

_TOP_KEYS = {"name", "description", "kill_after", "grid"}
#: Seconds a worker gets beyond its solver time limit (imports, building, cross-check).
_KILL_GRACE_SECONDS = 120.0
_KILL_FACTOR = 2.0


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file: its name and its expanded items (in file order)."""

    name: str
    items: tuple[SweepItem, ...]
    path: str | None = None
    description: str = ""



# ---------------------------------------------------------------------- parsing
def _as_list(value: Any, where: str, key: str) -> list:
    from ..io import describe_type
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
        x = parse_memory_limit(value, device_bytes=1.0)
    except InvalidOptionError as exc:
        raise FormatError(f"{where}: {exc}") from None
    return NO_LIMIT if x is None else int(x)


def _time_param(value: Any, where: str) -> float | None:
    from ..solvers.options import validate_time_limit
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

    from ..solvers import solver_names
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
    from ..io import describe_type, read_json, read_text
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



def _check_value(what: str, value: Any, base_dir: str, devices: Any
                 ) -> MilpParallelError | None:
    """The error that the item's ``what`` (model, cluster, problem) would stop it with."""
    from ..inputs import is_path
    if not isinstance(value, str):
        return FormatError(f"{what} {value!r:.40} must be a name or a file path")
    try:
        if what == "problem":
            _sniff_problem_file(_item_path(value, base_dir))
        elif what == "model":
            if is_path(value):
                from ..graph import LayerGraph
                LayerGraph.load(_item_path(value, base_dir))
            else:
                from .. import models
                if value not in models.names():
                    return UnknownNameError(
                        f"unknown model {value!r}{suggest(value, models.names()) or ';'} "
                        f"known models: {', '.join(models.names())} (or a graph JSON file)")
        elif is_path(value):
            from ..costs.configs import check_device_count
            from ..machine.topology import Topology
            topo = Topology.load(_item_path(value, base_dir))
            if devices is not None and devices > topo.n_devices:
                return FormatError(f"cluster file {value!r} has {topo.n_devices} devices, "
                                   f"not {devices}; give at most {topo.n_devices} devices or "
                                   "a larger cluster (a cluster file does not grow)")
            if devices is not None:
                check_device_count(devices, where=f"cluster {value!r}")
        else:
            from ..costs.configs import check_device_count
            from ..machine import clusters
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
