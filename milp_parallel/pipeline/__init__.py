"""Pipeline, tensor, sequence and data parallelism, recomputation and ZeRO for transformers,
solved exactly over a declared space.

The declared space
------------------
A model with repeated blocks (``layers.<i>.`` or ``encoder.layers.<i>.`` layers, identical up
to their index: :func:`block_structure`) trains with a global batch of ``B`` samples on ``N``
devices:

- ``p`` pipeline stages (``p`` divides ``N``); stage ``s`` runs on devices ``[s N/p, (s+1)
  N/p)``; the layers before the first block go to stage 0, those after the last to stage
  ``p - 1``; every stage holds ``k_s >= 1`` consecutive blocks (any cut).
- inside every stage a ``d x t`` mesh: tensor-parallel groups of ``t`` consecutive devices
  (``t`` divides the GPUs of a node), ``d = N / (p t)`` data-parallel replicas.
- ``m`` micro-batches of ``B / m`` samples (``b = B / (m d)`` per group), a schedule (GPipe or
  1F1B; ``v`` interleaved chunks per device with 1F1B: device ``s`` then holds ``v`` chunks of
  ``k_s`` blocks, the model being ``v`` rounds of the stage cut);
- per stage: each layer's tensor-parallel kind (:mod:`.tensor_parallel`), the recomputation
  mode of its blocks and its ZeRO stage (:mod:`.training_memory`).

With ``tie_blocks`` (the default, and the only space searched at scale) the blocks of one stage
share one assignment of kinds: the problem then shrinks by the number of blocks, and the plan
says so.

Step time (seconds per iteration)
---------------------------------
``t_s`` is device ``s``'s time per micro-batch: forward, backward and recomputed forward of
its layers (compute and the collectives inside their groups), the re-layouts between layers
(a tensor with several readers is re-laid out once and their gradients are summed once: the
``fanout`` layers :func:`.fanout.with_fanouts` inserts, whose kind is part of the assignment)
and the point-to-point messages to the next stage (forward activation, backward gradient;
Megatron-LM's scatter/gather: each of the ``t`` devices sends ``1/t``); ``y_s`` its work once
per iteration: the data-parallel gradient reduction (bucketed: bandwidth per layer, latency
once per bucket) and the optimizer update. Then

``T = (m - 1/v) max_s t_s + (1/v) sum_s t_s + max_s y_s``

which is ``(m + p - 1) t`` for ``p`` balanced stages (GPipe and 1F1B: bubble ``(p - 1) / m``)
and ``(m + (p - 1)/v) t`` with ``v`` interleaved chunks. Memory per device: model state of
its layers, the activations of the micro-batches in flight (GPipe ``m``; 1F1B ``min(m, p -
s)``; interleaved, in chunks, ``min(m v, 2 (p - s - 1) + (v - 1) p + 1)``) and the working set
of recomputation, at most the device memory (or ``memory_limit``).

How it is solved
----------------
1. For each ``(N/p, t, b)`` the tied block's assignments are enumerated exactly with
   dominance: a dynamic program over the block's layers keeps, for each choice of the layers
   that still matter (the block's input consumers, its output, layers with consumers not yet
   seen), only assignments not dominated in (time per micro-batch, flush time, model-state
   bytes, activation bytes per micro-batch in flight, working-set bytes). The same for the
   layers before and after the blocks.
2. For each ``(p, m, v, t)`` every stage's options are listed: a block count, a
   non-dominated block assignment (with its ZeRO stage and recomputation mode) and, on the
   first / last stage, compatible pre / post assignments, that fit the memory; per block count
   only those not dominated in (time per micro-batch, flush time) are kept, and options that
   no choice faster than the incumbent could use are dropped (a min-plus bound over the other
   stages). A MILP (HiGHS; UniAP-style stage variables) picks one option per stage with the
   block counts adding up and ``T >= t_s``, ``Y >= y_s`` as rows. Any assignment can be
   replaced by one that dominates it without raising the objective or breaking a memory row,
   so the MILP's optimum is the optimum of the declared space for that ``(p, m, v, t)``.
3. The outer search visits ``(p, m, v, t)`` by increasing lower bound (the bubble bound with
   the fastest kind of every layer and no re-layouts) and stops when the bound reaches the best
   step time found: the answer is proven optimal over the declared space.

The independent cross-checks (tests): the dominance program against brute-force enumeration
of a block's assignments, and the MILP against enumeration of every stage cut with every
stage assignment.

The folder
----------
This is the face of the folder: it re-exports what the one ``pipeline.py`` had. The modules,
each importing only those above it (data flows one way; code outside the folder imports this
face, not the modules):

=====================  ===================================================================
module                 what it holds
=====================  ===================================================================
``training_memory``    mixed-precision bytes, ZeRO stages, activations, recomputation
``tensor_parallel``    the split kinds of every layer, re-layouts, Megatron-LM's kinds
``step_costs``         seconds of compute, collectives, messages, optimizer (StepPricer)
``blocks``             the repeated blocks of a graph (:func:`block_structure`)
``fanout``             a tensor with several readers, re-laid out once (``with_fanouts``)
``space``              the declared space (:class:`PipelineOptions`), in-flight counts
``result``             :class:`PipelinePlan` and :class:`StagePlan`
``pricing``            one stage shape's per-layer criteria, re-layouts and messages
``accounting``         a plan's bytes by layer and its memory split, in the audit's units
``dominance``          the dominance and min-sum programs over a group of layers
``stages``             one stage shape's non-dominated block / pre / post assignments
``milp``               a small sparse MILP solved by ``solvers.milp.highs.run_highs``
``combo``              one ``(p, m, v, t)``: stage options, the stage MILP, bounds
``search``             the outer search, :func:`solve_pipeline`, :func:`evaluate_configuration`
=====================  ===================================================================

Examples
--------
>>> from milp_parallel.models.gpt import gpt
>>> g = gpt(8, layers=4, hidden=64, heads=4, vocab=128, seq_len=32)
>>> plan = solve_pipeline(g, "selene", global_batch=8, devices=4)
>>> plan.status, plan.pipeline * plan.tensor * plan.data
('optimal', 4)
"""

from .blocks import BlockStructure, block_structure
from .combo import _REL_TOL as _REL_TOL
from .combo import _Choice as _Choice
from .combo import _Combo as _Combo
from .combo import _ComboProblem as _ComboProblem
from .combo import _minplus as _minplus
from .dominance import _assignment_criteria as _assignment_criteria
from .dominance import _dominance_program as _dominance_program
from .dominance import _min_program as _min_program
from .dominance import _pareto_mask as _pareto_mask
from .dominance import _prune as _prune
from .pricing import _N_CRIT as _N_CRIT
from .pricing import _MeshPricing as _MeshPricing
from .pricing import _share as _share
from .pricing import _weight_elements as _weight_elements
from .result import PipelinePlan, StagePlan
from .search import _combos as _combos
from .search import _least_memory as _least_memory
from .search import _node_size as _node_size
from .search import _plan as _plan
from .search import _prepare as _prepare
from .search import _Search as _Search
from .search import evaluate_configuration, solve_pipeline
from .space import SCHEDULES, PipelineOptions, in_flight_micro_batches
from .space import _divisors as _divisors
from .stages import _RECOMPUTE_INDEX as _RECOMPUTE_INDEX
from .stages import _kind_index as _kind_index
from .stages import _Points as _Points
from .stages import _StageTables as _StageTables
from .tensor_parallel import megatron_kinds

__all__ = ["solve_pipeline", "evaluate_configuration", "PipelineOptions", "PipelinePlan",
           "StagePlan", "BlockStructure", "block_structure", "SCHEDULES",
           "megatron_kinds", "in_flight_micro_batches"]
