"""Deprecated location of the papers' reproduction: it moved to ``benchmarks/reproduction.py``.

The reproduction reads the source tree (``data/``, ``benchmarks/``), so it lives with the
benchmarks; run ``python benchmarks/reproduce.py [--quick]`` or ``milp-parallel reproduce``
from a source checkout. The names this module had (``reproduce``, ``ReproduceConfig``, ...)
still resolve here, from the checkout, with a :class:`DeprecationWarning`; without a checkout
they raise :class:`~milp_parallel.errors.MissingDependencyError` saying so.
"""

from __future__ import annotations

import warnings
from typing import Any

#: The names this module had.
_NAMES = ("ReproduceConfig", "reproduce", "run_strategies", "run_search", "bytes_moved",
          "render_markdown", "write_plots", "load_published", "find_oracle_report",
          "STRATEGIES", "SECTION_TITLES")


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'milp_parallel.reproduce' has no attribute {name!r}")
    from ._checkout import load_benchmark
    module = load_benchmark("reproduction")
    warnings.warn("milp_parallel.reproduce moved to benchmarks/reproduction.py (run "
                  "python benchmarks/reproduce.py); import it from there",
                  DeprecationWarning, stacklevel=2)
    return getattr(module, name)
