"""The checks of the public API's options, in one place and with one message form.

Every option of :func:`~milp_parallel.solve` (``config_options``, ``fixed``, ``forbid``,
``rerank``, ``cost_model``, ``batch_size`` / ``batch_per_device``, ...) and every zoo keyword
(:func:`milp_parallel.models.get`) is checked by the functions below, so a bad value reads
the same wherever it is given:

* a bad value: ``"<option> must be <what is allowed>, got <value>"``
  (:class:`~milp_parallel.errors.InvalidOptionError`);
* an unknown key or keyword: ``"<option>: unknown key 'C'; did you mean 'c'? known: ..."``
  (:class:`~milp_parallel.errors.UnknownOptionError`);
* an unknown name (a layer, a model): ``"<where>: no <what> 'conv9'; the nearest: 'conv1',
  'conv2' (of 12)"`` (:class:`~milp_parallel.errors.UnknownNameError`).

The value checks are those of :mod:`milp_parallel.solvers.base` (``check_bool``,
``check_int``, ...) that solver options use, so ``threads`` and ``power_of_two`` read alike;
the nearest spelling is :func:`milp_parallel.io.suggest`, as in every file reader.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import InvalidOptionError, UnknownNameError, UnknownOptionError
from .io import suggest

__all__ = ["show", "nearest", "check_bool", "check_whole", "check_mapping", "check_keys",
           "unknown_name", "check_exclusive"]


def show(value: Any, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters (a huge value stays readable)."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def nearest(word: Any, known: Iterable[Any], n: int = 5) -> list[str]:
    """The known words nearest ``word`` (case-insensitive first), at most ``n``.

    Examples
    --------
    >>> nearest("C", ["n", "c", "h"])
    ['c']
    >>> nearest("conv9", ["conv1", "conv2", "fc"], n=2)
    ['conv2', 'conv1']
    """
    known = [str(k) for k in known]
    w = str(word)
    same = [k for k in known if k.lower() == w.lower()]
    close = difflib.get_close_matches(w, known, n=n, cutoff=0.5)
    return list(dict.fromkeys(same + close))[:n]


def check_bool(option: str, value: Any) -> bool:
    """``value`` when it is ``True`` or ``False`` (a string such as ``"false"`` is refused).

    Examples
    --------
    >>> check_bool("power_of_two", "false")
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: power_of_two must be True or False, got 'false'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidOptionError(f"{option} must be True or False, got {show(value)}")


def check_whole(option: str, value: Any, lo: int = 1, hi: int | None = None,
                why: str = "") -> int:
    """``value`` when it is a whole number from ``lo`` to ``hi`` (``why`` explains ``hi``).

    ``True``, ``2.0`` and ``"2"`` are refused.

    Examples
    --------
    >>> check_whole("rerank", 10**9, 1, 100, "the most plans re-ranking takes")
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: rerank must be a whole number from 1 to 100 \
(the most plans re-ranking takes), got 1000000000
    """
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if ok and lo <= value and (hi is None or value <= hi):
        return int(value)
    span = f">= {lo}" if hi is None else f"from {lo} to {hi}"
    raise InvalidOptionError(f"{option} must be a whole number {span}"
                             f"{f' ({why})' if why else ''}, got {show(value)}")


def check_mapping(option: str, value: Any, what: str) -> Mapping:
    """``value`` when it is a mapping (``what`` says of what, for the message)."""
    if isinstance(value, Mapping):
        return value
    raise InvalidOptionError(f"{option} must be a mapping {what}, got "
                             f"{type(value).__name__} {show(value, 40)}")


def check_keys(option: str, value: Mapping, known: Iterable[str], *, what: str = "key",
               describe: Mapping[str, str] | None = None) -> Mapping:
    """``value`` when every key is ``known``; else :class:`UnknownOptionError` naming the
    first unknown key, the nearest known one and all known ones (``describe`` adds a few
    words to each).

    Examples
    --------
    >>> check_keys("config_options", {"max_degre": {}}, ["max_degree", "min_tile"])
    Traceback (most recent call last):
    ...
    milp_parallel.errors.UnknownOptionError: config_options: unknown key 'max_degre'; did \
you mean 'max_degree'? known: max_degree, min_tile
    """
    known = list(known)
    for key in value:
        if key not in known:
            listed = ", ".join(f"{k} ({describe[k]})" if describe and k in describe else k
                               for k in known)
            raise UnknownOptionError(f"{option}: unknown {what} {show(key, 40)}"
                                     f"{suggest(key, known) or ';'} known: {listed}")
    return value


def unknown_name(where: str, what: str, name: Any, known: Iterable[str]) -> UnknownNameError:
    """The :class:`UnknownNameError` of a name that is not among ``known``, with the nearest.

    Examples
    --------
    >>> print(unknown_name("fixed", "layer", "conv9", ["conv1", "conv2", "fc"]))
    fixed: no layer 'conv9'; the nearest: 'conv2', 'conv1' (of 3 layers)
    """
    known = list(known)
    close = nearest(name, known) if isinstance(name, str) else []
    if close:
        hint = "the nearest: " + ", ".join(map(repr, close))
    else:
        hint = "they include " + ", ".join(map(repr, known[:8])) + (
            ", ..." if len(known) > 8 else "")
    return UnknownNameError(f"{where}: no {what} {show(name, 40)}; {hint} (of {len(known)} "
                            f"{what}s)")


def check_exclusive(**given: Any) -> None:
    """Refuse more than one of the keyword options that mean the same thing.

    Examples
    --------
    >>> check_exclusive(batch_size=64, batch_per_device=None)
    >>> check_exclusive(batch_size=64, batch_per_device=16)
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: give batch_size or batch_per_device, not both \
(got batch_size=64, batch_per_device=16)
    """
    set_ = {k: v for k, v in given.items() if v is not None}
    if len(set_) > 1:
        raise InvalidOptionError(f"give {' or '.join(given)}, not both (got "
                                 + ", ".join(f"{k}={show(v, 30)}" for k, v in set_.items())
                                 + ")")
