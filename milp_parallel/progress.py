"""Moved to :mod:`milp_parallel.plan.progress` (this path works one release, with a warning)."""
from ._moved import alias

alias(__name__, "milp_parallel.plan.progress")
