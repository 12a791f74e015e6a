"""Plans you can run: a plan becomes a sharded PyTorch program, audited against the plan.

:func:`parallelize` and :func:`verify_plan` (:mod:`.verify`) dispatch on the plan's type;
:class:`PlanAudit` (:mod:`.audit`) is the audit. Importing this package does not import
torch; the runtimes do when they run.
"""

from __future__ import annotations

from .audit import CollectiveRow, MemoryRow, PlanAudit
from .verify import RuntimeHooks, audit_step, parallelize, verify_plan

__all__ = ["parallelize", "verify_plan", "PlanAudit", "CollectiveRow", "MemoryRow",
           "RuntimeHooks", "audit_step"]
