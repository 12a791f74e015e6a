"""The costs stage: configurations priced, and a model's problem built.

=====================  ===================================================================
module                 what lives there
=====================  ===================================================================
:mod:`.configs`        the configurations of a layer (a degree per dimension) and limits
:mod:`.model`          ``CostModel``: compute, gradient sync, redistribution and memory
:mod:`.saved`          what each op's backward keeps on a tile (the activation memory)
:mod:`.transfer`       the redistribution's tables (block boxes, intervals, levels)
:mod:`.build`          a graph on a topology -> ``Problem`` (``build_problem``)
:mod:`.simulator`      the step simulator: one training step of an assignment, event by event
=====================  ===================================================================

May import: ``graph``, ``machine``, ``measure.profile`` (measured layer times), ``problem``,
``units``, ``io``, ``errors``. This face re-exports :mod:`.model` (``milp_parallel.costs`` was
that module before the stage became a folder).
"""

from .model import BATCHNORM_STATS, COMPUTE_MODELS, DDP_BUCKET_BYTES, CostModel, replica_groups

__all__ = ["CostModel", "COMPUTE_MODELS", "BATCHNORM_STATS", "DDP_BUCKET_BYTES",
           "replica_groups"]
