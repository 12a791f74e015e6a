"""Solver options: their declarations, the one validation, and the deadline they set.

Every entry point (:func:`~milp_parallel.solvers.solve_problem`, :func:`~milp_parallel.solve`,
the command line, sweep files) validates ``time_limit`` and ``gap`` with the functions here,
so a bad value raises the same :class:`~milp_parallel.errors.InvalidOptionError` everywhere.
"""

from __future__ import annotations

import math
import time
from numbers import Real
from typing import Any

from ..errors import InvalidOptionError

__all__ = ["validate_time_limit", "validate_gap", "validate_threads", "Deadline"]


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, str)):
        raise InvalidOptionError(f"{name} must be a number, got {value!r} "
                                 f"({type(value).__name__})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{name} must be a number, got {value!r}") from None
    except OverflowError:
        raise InvalidOptionError(f"{name} must be a number within the float range, got an "
                                 f"integer of {len(str(abs(int(value))))} digits") from None


def validate_time_limit(time_limit: Any) -> float | None:
    """``None`` (no limit) or seconds ``> 0``; ``inf`` means no limit.

    Raises
    ------
    InvalidOptionError
        For 0, a negative number, NaN, or something that is not a number.

    Examples
    --------
    >>> validate_time_limit(None) is None, validate_time_limit(2), validate_time_limit("1.5")
    (True, 2.0, 1.5)
    >>> validate_time_limit(0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: time_limit must be a number of seconds > 0 ...
    """
    if time_limit is None:
        return None
    tl = _number("time_limit", time_limit)
    if not tl > 0:                     # also catches NaN
        raise InvalidOptionError(f"time_limit must be a number of seconds > 0 (or None for "
                                 f"no limit), got {time_limit!r}")
    return None if math.isinf(tl) else tl


def validate_gap(gap: Any) -> float:
    """A relative gap: a finite number ``>= 0`` (``None`` means 0, prove the optimum).

    Examples
    --------
    >>> validate_gap(None), validate_gap(0.01)
    (0.0, 0.01)
    """
    if gap is None:
        return 0.0
    g = _number("gap", gap)
    if not (g >= 0 and math.isfinite(g)):
        raise InvalidOptionError(f"gap must be a finite relative gap >= 0 (0: prove the "
                                 f"optimum), got {gap!r}")
    return g


def validate_threads(threads: Any) -> int | None:
    """``None`` (the solver's default) or a whole number ``>= 1``."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, Real)) \
            or float(threads) != int(threads) or int(threads) < 1:
        raise InvalidOptionError(f"threads must be a whole number >= 1 (or None), got "
                                 f"{threads!r}")
    return int(threads)


class Deadline:
    """The moment a ``time_limit`` runs out, counted from when the solve started.

    Parameters
    ----------
    time_limit : float or None
        Seconds (already validated); ``None``: never.
    start : float, optional
        A :func:`time.perf_counter` value (default: now).

    Examples
    --------
    >>> d = Deadline(None)
    >>> d.left() is None, d.passed()
    (True, False)
    >>> 0 < Deadline(5.0).left() <= 5.0
    True
    """

    __slots__ = ("time_limit", "start", "at")

    def __init__(self, time_limit: float | None, start: float | None = None):
        self.time_limit = time_limit
        self.start = time.perf_counter() if start is None else start
        self.at = None if time_limit is None else self.start + time_limit

    def left(self) -> float | None:
        """Seconds left (never negative), ``None`` without a limit."""
        return None if self.at is None else max(0.0, self.at - time.perf_counter())

    def passed(self) -> bool:
        return self.at is not None and time.perf_counter() >= self.at

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def share(self, fraction: float) -> float | None:
        """A :func:`time.perf_counter` value ``fraction`` of the time left from now."""
        left = self.left()
        return None if left is None else time.perf_counter() + fraction * left

    def __repr__(self) -> str:
        return f"Deadline(time_limit={self.time_limit!r}, left={self.left()!r})"
