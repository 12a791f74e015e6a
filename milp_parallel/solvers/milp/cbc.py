"""CBC through PuLP's bundled binary (registry name ``"cbc"``): a thin adapter on
:mod:`.backend`.

PuLP 3.x bundles a CBC binary (PuLP 4.x, which pip picks on Python >= 3.12, changed its API
and bundles none: pin ``pulp<4``). The MPS file is written here with numpy (building PuLP's
per-variable objects took seconds on 200k columns) and the bundled binary is run directly,
so that it can be stopped: CBC checks ``-sec`` only between phases (a 213k-column root LP ran
33 s past a 5 s limit), so one second past the limit it is killed and the incumbent is the
answer. The status comes from the first line of CBC's solution file ("Optimal", "Stopped on
time - objective value ...", "Infeasible", ...; PuLP's ``LpProblem.status`` calls a stopped run
with an incumbent "Optimal"), and the proved lower bound from CBC's log: its final "Lower
bound" (or "Best possible") line, or, when CBC reports a proved optimum at gap 0, its
objective. A run stopped by ``gap`` is ``feasible`` with that bound.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

import numpy as np

from ...errors import SolverError
from ..base import Capabilities, Option
from ..options import Deadline
from .backend import MILP_OPTIONS, MilpBackend, NativeResult
from .model import MilpModel, merge_duplicate_entries, objective_scale

__all__ = ["CBCSolver", "write_mps", "cbc_path", "DEFAULT_CBC_OPTIONS"]

logger = logging.getLogger(__name__)

_BOUND_RE = re.compile(r"^(?:Lower bound|Best possible):\s*(-?[0-9.eE+-]+|-?inf)", re.M)
_GAP_RE = re.compile(r"^Gap:\s*(-?[0-9.eE+-]+)", re.M)
_RESULT_RE = re.compile(r"^Result - (.*)$", re.M)
#: CBC's own arguments by default, chosen by ``benchmarks/results/milp_backends.csv``
#: (``python -m benchmarks.milp_backends``, 1 thread, 120 s, with and without the MILP-side
#: presolve): without CBC's preprocessing it proved IOPDDL G in 4.5 s (its defaults 5.2 s),
#: resnet18@16 in 1.6 s (2.1 s) and resnet50@16 in 13.4 s (13.7 s) when the solver has to
#: prove them itself, and reached the best DAG answer; cuts off, strong branching off and
#: heuristics off were slower or worse on these cases.
DEFAULT_CBC_OPTIONS = "-preprocess off"
#: Seconds CBC may run past its limit before it is stopped (it checks the limit only
#: between phases, e.g. not inside its root LP).
_KILL_GRACE_SECONDS = 0.25


def cbc_path() -> str:
    """The CBC binary PuLP bundles."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # PuLP 3.3 warns about 4.0
        import pulp
        return pulp.PULP_CBC_CMD().path


def _read_bound(log_text: str) -> float:
    """CBC's final proved lower bound from its log (``-inf`` when it printed none)."""
    m = _BOUND_RE.findall(log_text)
    if m:
        try:
            return float(m[-1])
        except ValueError:
            pass
    return -math.inf


class _OutOfTime(Exception):
    """The deadline passed while the model file was written."""


#: Lines formatted per chunk of the MPS file; the deadline is checked between chunks.
_CHUNK_LINES = 1 << 16


def _write_lines(f, n: int, lines, deadline: Deadline | None) -> None:
    """Write ``lines(lo, hi)`` (a list of str) for ``0 <= lo < n`` chunk by chunk, checking
    ``deadline`` between chunks (:class:`_OutOfTime` when it passed)."""
    for lo in range(0, n, _CHUNK_LINES):
        if deadline is not None and deadline.passed():
            raise _OutOfTime
        f.write("".join(lines(lo, min(n, lo + _CHUNK_LINES))))


def write_mps(model: MilpModel, path: str, cost_scale: float = 1.0,
              deadline: Deadline | None = None) -> None:
    """Write the model as an MPS file for CBC (values with 17 digits).

    Columns are ``C<j>``, rows ``R<i>``; the ``x`` columns (first, contiguous) sit between
    integer markers and get ``BV`` bounds, the ``y`` columns ``UP 1``. Written in chunks
    (millions of entries take seconds): with a ``deadline``, raises :class:`_OutOfTime`
    once it passed.
    """
    n_cols, n_rows = model.n_cols, model.n_rows
    start, index, value = merge_duplicate_entries(model.row_start, model.row_index,
                                                  model.row_value)
    row_of = np.repeat(np.arange(n_rows), np.diff(start))
    kind = np.where(model.row_lower == model.row_upper, "E",
                    np.where(np.isfinite(model.row_upper), "L", "G")).tolist()
    rhs = np.where(np.array(kind) == "G", model.row_lower, model.row_upper)
    # Entries sorted by column; a column's objective entry (row -1) before its rows.
    obj_cols = np.nonzero(model.col_cost != 0)[0]
    ent_col = np.concatenate([obj_cols, index])
    ent_row = np.concatenate([np.full(obj_cols.size, -1), row_of])
    ent_val = np.concatenate([model.col_cost[obj_cols] * cost_scale, value])
    srt = np.lexsort((ent_row, ent_col))
    ent_col, ent_row, ent_val = ent_col[srt], ent_row[srt], ent_val[srt]

    def entries(lo: int, hi: int) -> list[str]:
        return [f"    {'C' + str(c):<8}  {'R' + str(r) if r >= 0 else 'OBJ':<8}  {v!r}\n"
                for c, r, v in zip(ent_col[lo:hi].tolist(), ent_row[lo:hi].tolist(),
                                   ent_val[lo:hi].tolist())]

    n_x = model.n_x
    split = int(np.searchsorted(ent_col, n_x))
    n_ent = ent_col.size
    seen = np.zeros(n_cols, dtype=bool)
    seen[ent_col] = True
    unseen = np.nonzero(~seen)[0].tolist()
    nz = np.nonzero(rhs != 0)[0].tolist()
    with open(path, "w") as f:
        f.write("NAME          MILPPARALLEL\nROWS\n N  OBJ\n")
        _write_lines(f, n_rows, lambda lo, hi: [f" {kind[i]}  {'R' + str(i):<8}\n"
                                                for i in range(lo, hi)], deadline)
        f.write("COLUMNS\n")
        if n_x:
            f.write("    MARK      'MARKER'                 'INTORG'\n")
        _write_lines(f, split, entries, deadline)
        if n_x:
            f.write("    MARK      'MARKER'                 'INTEND'\n")
        _write_lines(f, n_ent - split, lambda lo, hi: entries(split + lo, split + hi),
                     deadline)
        # A column in no row and without cost still has to be declared.
        f.write("".join(f"    {'C' + str(c):<8}  OBJ       0\n" for c in unseen))
        f.write("RHS\n")
        f.write("".join(f"    RHS       {'R' + str(i):<8}  {float(rhs[i])!r}\n" for i in nz))
        f.write("BOUNDS\n")
        _write_lines(f, n_x, lambda lo, hi: [f" BV BND       {'C' + str(c):<8}\n"
                                             for c in range(lo, hi)], deadline)
        _write_lines(f, n_cols - n_x, lambda lo, hi: [f" UP BND       {'C' + str(c):<8}  1\n"
                                                      for c in range(n_x + lo, n_x + hi)],
                     deadline)
        f.write("ENDATA\n")


def _write_start(model: MilpModel, col: np.ndarray, path: str,
                 deadline: Deadline | None = None) -> None:
    values = col.tolist()
    with open(path, "w") as f:
        f.write("Stopped on time - objective value 0\n")
        _write_lines(f, len(values), lambda lo, hi: [f"{i:>7} C{i} {float(values[i])!r} 0\n"
                                                     for i in range(lo, hi)], deadline)


def _read_solution(path: str, n_cols: int) -> tuple[str, np.ndarray | None]:
    """CBC's solution file: its first line, and the column values (``None`` without)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().splitlines()
    except OSError:
        return "no solution file", None
    if not text:
        return "empty solution file", None
    head = text[0].strip()
    values = np.zeros(n_cols)
    for line in text[1:]:
        parts = line.split()
        if parts and parts[0] == "**":
            parts = parts[1:]
        if len(parts) >= 3 and parts[1].startswith("C"):
            try:
                values[int(parts[1][1:])] = float(parts[2])
            except ValueError:
                continue
    return head, values


class CBCSolver(MilpBackend):
    """CBC through PuLP's bundled binary (registry name ``"cbc"``).

    Options (besides the common and MILP ones)
    ------------------------------------------
    cbc_options : str
        CBC command-line arguments placed before ``-solve`` (default
        :data:`DEFAULT_CBC_OPTIONS`; e.g. ``"-cuts off"``, ``""`` for CBC's own defaults).
    """

    name = "cbc"
    package = "pulp"
    module = "pulp"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=True, gap=True, warm_start=True)
    #: Writing the MPS file (about 1.5 us per nonzero) and CBC reading it, which it does
    #: not interrupt at its time limit (inception_v3 at 64 GPUs with a budget: 3e6
    #: nonzeros, 4.5 s to write).
    startup_seconds_per_nonzero = 2.5e-6
    options = MILP_OPTIONS + (
        Option("cbc_options", DEFAULT_CBC_OPTIONS, lambda x: str(x),
               f"CBC arguments before -solve (default {DEFAULT_CBC_OPTIONS!r})"),
    )

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:
        gap, threads = options["gap"], options["threads"]
        tmp = tempfile.mkdtemp(prefix="milp_parallel_cbc_")
        mps, sol, mst = (os.path.join(tmp, n) for n in ("model.mps", "model.sol", "start.mst"))
        try:
            scale = objective_scale(model.col_cost)
            path = cbc_path()
            args = [path, mps]
            try:
                write_mps(model, mps, scale, deadline)
                if warm is not None:
                    col = model.encode(warm)
                    if col is not None:
                        _write_start(model, col, mst, deadline)
                        args += ["-mips", mst]
            except _OutOfTime:
                return NativeResult(None, False, -math.inf, False,
                                    "time limit reached while writing CBC's model file", 0.0,
                                    {"solver_time_limit": 0.0, "time_limit_reached": True})
            left = deadline.left()          # after writing the MPS file
            if left is not None:
                args += ["-sec", repr(max(0.01, float(left) - 0.1)), "-timeMode", "elapsed"]
            args += ["-ratio", repr(float(gap))]
            if threads is not None:
                args += ["-threads", str(int(threads))]
            args += options["cbc_options"].split()
            args += ["-solve", "-solution", sol]
            t1 = time.perf_counter()
            killed = False
            try:
                grace = None if left is None else left + _KILL_GRACE_SECONDS
                proc = subprocess.run(args, capture_output=True, text=True, timeout=grace,
                                      cwd=tmp)
                log_text = proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                killed = True
                log_text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) \
                    else (exc.stdout or "")
            except OSError as exc:
                raise SolverError(f"cbc: could not run CBC at {path} ({exc})") from None
            solve_seconds = time.perf_counter() - t1
            head, values = (("killed at the time limit", None) if killed
                            else _read_solution(sol, model.n_cols))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if options["verbose"]:
            logger.info("CBC log:\n%s", log_text)
        if not killed and not head:
            raise SolverError(f"cbc: CBC gave no answer; its log ends with: {log_text[-300:]}")
        word = head.split()[0] if head else ""
        infeasible = word == "Infeasible" or head.startswith("Integer infeasible")
        has_sol = values is not None and (word == "Optimal" or "objective value" in head) \
            and not infeasible
        result = _RESULT_RE.findall(log_text)
        result = result[-1].strip() if result else ""
        bound = _read_bound(log_text) / scale
        gap_line = _GAP_RE.findall(log_text)
        claimed = word == "Optimal" and result.startswith("Optimal") and not gap_line
        if claimed and not math.isfinite(bound) and has_sol and gap == 0:
            # CBC proved the optimum (gap 0 requested, no gap left in its summary): its
            # bound is the objective it reports.
            bound = float(values @ model.col_cost)
        return NativeResult(
            values=values if has_sol else None, claimed_optimal=claimed, bound=bound,
            infeasible=infeasible and not has_sol,
            native_status=head + (f" ({result})" if result else ""),
            solve_seconds=solve_seconds,
            stats={"solver_time_limit": left, "killed_at_time_limit": killed,
                   "cost_scale": scale})
