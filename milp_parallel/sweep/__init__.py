"""Benchmark sweeps: a TOML grid of runs, executed in parallel, results as JSON lines.

A sweep file declares one or more grids; each grid expands to the cross product of its lists.
Every item has a stable id (a hash of its canonical parameters), so re-running the same sweep
skips what is already in the results file and a crash loses at most the items in flight.

This is the face of the folder; it re-exports the names that used to live in one
``sweep.py``. The modules, each importing only those above it:

- :mod:`.kinds`: :class:`SweepItem`, the kinds of item (:func:`register_item_kind`) and the
  statuses of a result line (:data:`ITEM_STATUSES`);
- :mod:`.spec`: the sweep file format, :func:`load_sweep`, :func:`expand_grid` and the checks
  made when a file is loaded (:func:`check_items`);
- :mod:`.items`: one item, :func:`run_item` (in this process) or :func:`run_item_isolated`
  (in its own), :func:`plan_summary`, and the built-in ``model`` and ``problem`` kinds;
- :mod:`.runner`: :func:`run_sweep` and the results file (:func:`read_results`).
"""

# _make_folder is not in __all__ but stays importable from here, as from the one sweep.py
# before (the command line and the report create their output folders with it).
from .items import (
    ITEM_KINDS,
    load_problem_file,
    plan_summary,
    run_item,
    run_item_isolated,
)
from .kinds import (
    FAILED,
    FAILED_STATUSES,
    FEASIBLE,
    INFEASIBLE,
    ITEM_STATUSES,
    OK_STATUSES,
    OPTIMAL,
    TIMEOUT,
    UNKNOWN,
    ItemKind,
    SweepItem,
    item_kinds,
    register_item_kind,
)
from .runner import SweepSummary, read_results, result_lines, run_sweep
from .runner import _make_folder as _make_folder
from .spec import Sweep, check_items, expand_grid, load_sweep

__all__ = ["SweepItem", "Sweep", "SweepSummary", "ItemKind", "load_sweep", "expand_grid",
           "check_items", "run_sweep", "run_item", "run_item_isolated", "read_results",
           "result_lines", "register_item_kind",
           "item_kinds", "load_problem_file", "plan_summary",
           "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "FAILED", "TIMEOUT",
           "ITEM_STATUSES", "FAILED_STATUSES", "OK_STATUSES", "ITEM_KINDS"]
