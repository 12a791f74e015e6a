"""A solver's progress shown while it works: best cost, proved bound and gap.

Every backend accepts a ``callback`` option and calls it with a
:class:`~milp_parallel.solvers.result.Progress` as its incumbent or bound improves (the exact
search on every branch-and-bound node and new incumbent, HiGHS from its MIP callbacks,
CP-SAT from its solution callback, the MILP template once presolve is done).
:class:`ProgressLine` is such a callback for people: one line on a terminal (a tqdm status
bar when tqdm is installed), redrawn at most every ``min_interval`` seconds, or log records
when the stream is not a terminal.

Examples
--------
>>> import io
>>> from milp_parallel.solvers.result import Progress
>>> out = io.StringIO()
>>> line = ProgressLine("highs", stream=out, min_interval=0.0, use_tqdm=False)
>>> line(Progress("highs", 1.5, 0.0402, 0.0380))
>>> line.close()
>>> "gap 5.47%" in out.getvalue()
True
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import TextIO

from ..solvers.result import Progress

__all__ = ["ProgressLine", "describe"]

logger = logging.getLogger(__name__)


def describe(p: Progress, unit_scale: float = 1e3, unit: str = "ms") -> str:
    """``"12.3 s  best 40.2 ms  bound 38.0 ms  gap 5.47%"`` (costs in ``unit``)."""
    best = "-" if not math.isfinite(p.objective) else f"{p.objective * unit_scale:.4g} {unit}"
    bound = "-" if not math.isfinite(p.bound) else f"{p.bound * unit_scale:.4g} {unit}"
    gap = "-" if not math.isfinite(p.gap) else f"{100 * p.gap:.3g}%"
    return f"{p.seconds:6.1f} s  best {best}  bound {bound}  gap {gap}"


class ProgressLine:
    """Show a solver's :class:`~milp_parallel.solvers.result.Progress` on one line.

    Parameters
    ----------
    label : str
        What is being solved (shown first).
    stream : file, optional
        Default ``sys.stderr``.
    min_interval : float
        Seconds between redraws (the last update is always drawn by :meth:`close`).
    use_tqdm : bool, optional
        A tqdm status bar (default: when tqdm is installed and the stream is a terminal).
    unit_scale, unit : float, str
        Costs are seconds per training step; shown in milliseconds by default.
    """

    def __init__(self, label: str, *, stream: TextIO | None = None, min_interval: float = 0.25,
                 use_tqdm: bool | None = None, unit_scale: float = 1e3, unit: str = "ms"):
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.min_interval = min_interval
        self.unit_scale, self.unit = unit_scale, unit
        self.last: Progress | None = None
        self._drawn = -math.inf
        self._pending = False
        self._bar = None
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if use_tqdm is None:
            use_tqdm = tty
        if use_tqdm:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=None, bar_format="{desc}{postfix}", desc=label,
                                 file=self.stream, leave=False, dynamic_ncols=True)
            except ImportError:
                self._bar = None
        self._tty = tty

    def __call__(self, progress: Progress) -> None:
        self.last = progress
        now = time.perf_counter()
        if now - self._drawn < self.min_interval:
            self._pending = True
            return
        self._drawn = now
        self._pending = False
        self._draw(progress)

    def _draw(self, progress: Progress) -> None:
        text = describe(progress, self.unit_scale, self.unit)
        if self._bar is not None:
            self._bar.set_postfix_str(f"[{progress.solver}] {text}", refresh=True)
        elif self._tty:
            self.stream.write(f"\r{self.label} [{progress.solver}] {text}")
            self.stream.flush()
        else:
            self.stream.write(f"{self.label} [{progress.solver}] {text}\n")

    def close(self) -> None:
        """Draw the last update and end the line."""
        if self.last is not None and self._bar is None:
            if self._pending:
                self._draw(self.last)
            if self._tty:
                self.stream.write("\n")
        if self._bar is not None:
            self._bar.close()
        self._bar = None
