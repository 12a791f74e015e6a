"""Sweep items: :class:`SweepItem`, the kinds of item (:func:`register_item_kind`), statuses.

Imports no other module of ``sweep/`` (:mod:`.spec`, :mod:`.items` and :mod:`.runner` import
it); outside it :mod:`milp_parallel.errors`, :mod:`milp_parallel.isolation` and the status
names of :mod:`milp_parallel.solvers.result`.

Item kinds
----------
``model`` and ``problem`` are built in (:mod:`milp_parallel.sweep.items`);
:func:`register_item_kind` adds others (a kind is a marker key, its own keys and a runner
function called in the item's process), which is how the tests exercise the runner with items
that sleep, crash or hang.

Statuses
--------
Result lines carry ``status``, one of :data:`ITEM_STATUSES`: a solver status (``optimal``,
``feasible``, ``infeasible``, ``unknown``) or ``failed`` / ``timeout`` (:data:`FAILED`,
:data:`TIMEOUT`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from ..errors import InvalidOptionError
from ..isolation import FAILED, TIMEOUT, function_ref
from ..solvers.result import FEASIBLE, INFEASIBLE, OPTIMAL, STATUSES, UNKNOWN

__all__ = ["ItemKind", "SweepItem", "register_item_kind", "item_kinds",
           "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "FAILED", "TIMEOUT",
           "ITEM_STATUSES", "FAILED_STATUSES", "OK_STATUSES"]

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
    >>> from milp_parallel.sweep import expand_grid
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



def _item_path(value: str, base_dir: str) -> Path:
    """A file named by an item: relative paths resolve against the sweep file's folder."""
    path = Path(value)
    return path if path.is_absolute() else Path(base_dir or ".") / path

