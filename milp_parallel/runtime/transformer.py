"""Run a transformer plan (:class:`~milp_parallel.pipeline.PipelinePlan`) on a Hugging Face
Llama or GPT-2 module, with PyTorch's own machinery.

:func:`parallelize_transformer` turns ``module`` (``LlamaForCausalLM`` or ``GPT2LMHeadModel``,
weights loaded, the same on every rank) into this rank's part of the plan's program, on a
``pipeline x data x tensor`` mesh (:func:`plan_mesh`: stage ``s`` on ranks ``[s N/p, (s + 1)
N/p)``, ``t`` consecutive ranks a tensor-parallel group, as the planner lays them out):

=========================== ==============================================================
the plan says               the program does
=========================== ==============================================================
``column`` / ``row``        ``ColwiseParallel`` / ``RowwiseParallel`` on the linears; one
                            ``PrepareModuleInput`` before the attention and the MLP, so the
                            projections that share an input share its one collective
                            (Megatron-LM's ``f``: one all-reduce backward)
``column_sp``, ``S`` norms  sequence parallelism: ``SequenceParallel`` norms, the attention's
                            and MLP's input all-gathered once, the row-parallel outputs
                            reduce-scattered to sequence pieces
``head``                    the attention core on the rank's heads (``q, k, v`` column split
                            by whole heads; GPT-2's packed ``c_attn`` reordered so each rank's
                            slice holds its heads' query, key and value)
``vocab`` embedding / loss  ``RowwiseParallel`` on the embedding (vocabulary rows, partial
                            sums reduced), the head column-parallel with ``Shard(-1)`` logits
                            and ``loss_parallel`` cross-entropy
ZeRO 0 / 1-2 / 3            ``replicate`` (all-reduce) / ``fully_shard`` without / with
                            resharding after the forward pass, over the data-parallel ranks
recompute ``full`` /        ``torch.utils.checkpoint`` of every block / of the attention core
``selective``               (a checkpointed SDPA registered with ``transformers``'
                            ``AttentionInterface``); with ``t > 1`` and replicated norms, a
                            block keeps only its rank's ``1/t`` sequence slice of its input,
                            all-gathered for the recompute (Megatron-LM's distributed
                            checkpoints)
stages, schedule, ``m``,    ``torch.distributed.pipelining``: one ``PipelineStage`` per chunk,
``v``                       ``ScheduleGPipe`` / ``Schedule1F1B`` / ``ScheduleInterleaved1F1B``
                            with the plan's micro-batches
=========================== ==============================================================

The returned :class:`ParallelTransformer` is an ``nn.Module`` whose ``forward(input_ids)``
runs the plan's whole step on the global batch (every rank passes the same ids: each data-
parallel replica takes its slice, the micro-batches go through the schedule, forward and
backward) and returns this rank's mean causal-LM loss (``nan`` off the last stage); the
gradients are then on its parameters, named as the original module's
(:meth:`ParallelTransformer.full_gradients` gathers them whole, in the original layout).

What the program does not do as the plan prices it is listed in ``docs/runtime_transformer.md``
(ZeRO-1 runs as ZeRO-2: FSDP2 shards the gradients too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidOptionError, UnsupportedProblemError, require
from .megatron_layouts import expected_kinds
from .tp_saves import keep_grads_sharded, regather_in_backward

torch = require("torch", "torch", "milp_parallel.runtime.transformer")
nn = torch.nn
F = torch.nn.functional

__all__ = ["parallelize_transformer", "plan_mesh", "ParallelTransformer", "expected_kinds",
           "causal_lm_loss", "runtime_hooks", "SUPPORTED"]

#: model_type -> the module class the runtime runs.
SUPPORTED = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}
_SELECTIVE_ATTENTION = "milp_parallel_checkpointed_sdpa"


# ====================================================================== the plan's layout
@dataclass(frozen=True)
class _Layout:
    """What the runtime reads from a plan: sizes, stages' chunks and their settings."""

    p: int
    d: int
    t: int
    m: int
    v: int
    b: int
    schedule: str
    sequence_parallel: bool
    vocab_loss: bool
    wpe_vocab: bool                           # GPT-2's position table vocabulary-parallel
    chunks: tuple[tuple[int, ...], ...]      # per global stage index r p + s: its blocks
    zero: tuple[int, ...]                     # per device stage
    recompute: tuple[str, ...]                # per device stage


def _family(module) -> str:
    cfg = getattr(module, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt not in SUPPORTED or type(module).__name__ != SUPPORTED[mt]:
        raise UnsupportedProblemError(
            f"parallelize_transformer runs {', '.join(SUPPORTED.values())} modules; got "
            f"{type(module).__name__}" + (f" ({mt})" if mt else ""))
    return mt


def _n_blocks(module, family: str) -> int:
    return len(module.model.layers if family == "llama" else module.transformer.h)


def _layout(module, family: str, plan) -> _Layout:
    p, t, d = plan.pipeline, plan.tensor, plan.data
    n = _n_blocks(module, family)
    planned = sorted(b for s in plan.stages for b in s.blocks)
    if planned != list(range(n)):
        raise InvalidOptionError(
            f"the plan places blocks {planned[:3]}...{planned[-1:]} ({len(planned)} of them) "
            f"but the module has {n} blocks: plan the module's own graph "
            "(milp_parallel.from_hf(module))")
    sp = None
    vocab_loss = wpe_vocab = True
    for s in plan.stages:
        k = dict(s.kinds)
        if t > 1:
            norm = "input_layernorm" if family == "llama" else "ln_1"
            sp = k.get(norm) == "S" if sp is None else sp
            if "loss" in k:
                vocab_loss = k["loss"] == "vocab"
        want = expected_kinds(family, t, sequence_parallel=bool(sp), vocab_loss=vocab_loss)
        if family == "gpt2" and t > 1 and k.get("transformer.wpe") == "R":
            want["transformer.wpe"] = "R"       # a replicated position table: sliced with SP
            wpe_vocab = False
        # a fanout's kind follows its readers': name a reader first
        for name, kind in sorted(k.items(), key=lambda item: item[0].endswith("fanout")):
            if name in want and want[name] != kind:
                raise UnsupportedProblemError(
                    f"stage {s.index}: layer {name!r} has kind {kind!r}; the runtime runs "
                    f"Megatron's layouts ({'sequence-parallel' if sp else 'replicated'} "
                    f"norms: {name!r} = {want[name]!r}); evaluate this configuration with "
                    "kinds='megatron' or 'megatron_sp'")
        missing = [x for x in k if x not in want]
        if missing:
            raise InvalidOptionError(f"stage {s.index}: the plan names layers {missing[:3]} "
                                     f"that a {family} module does not have")
    v = plan.chunks
    per = [len(s.blocks) // v for s in plan.stages]
    chunks = []
    for r in range(v):
        for s in plan.stages:
            chunks.append(tuple(s.blocks[r * per[s.index]:(r + 1) * per[s.index]]))
    return _Layout(p, d, t, plan.micro_batches, v, plan.micro_batch_size, plan.schedule,
                   bool(sp), vocab_loss, wpe_vocab, tuple(chunks),
                   tuple(s.zero for s in plan.stages),
                   tuple(s.recompute for s in plan.stages))


def plan_mesh(plan, device_type: str = "cpu"):
    """The plan's ``("pp", "dp", "tp")`` device mesh over the initialized process group.

    Raises
    ------
    InvalidOptionError
        The world size is not the plan's device count.
    """
    dist = torch.distributed
    if not dist.is_initialized() or dist.get_world_size() != plan.devices:
        have = dist.get_world_size() if dist.is_initialized() else "no process group"
        raise InvalidOptionError(f"the plan runs on {plan.devices} ranks; the world has "
                                 f"{have}: launch {plan.devices} processes")
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device_type, (plan.pipeline, plan.data, plan.tensor),
                            mesh_dim_names=("pp", "dp", "tp"))


def _check_mesh(mesh, plan):
    if tuple(getattr(mesh, "mesh_dim_names", None) or ()) == ("pp", "dp", "tp"):
        shape = tuple(mesh.mesh.shape)
        if shape != (plan.pipeline, plan.data, plan.tensor):
            raise InvalidOptionError(f"the mesh is {shape} (pp, dp, tp) but the plan needs "
                                     f"{(plan.pipeline, plan.data, plan.tensor)}")
        return mesh
    if mesh is None or mesh.mesh.numel() == plan.devices:
        return plan_mesh(plan, getattr(mesh, "device_type", "cpu"))
    raise InvalidOptionError(f"the mesh has {mesh.mesh.numel()} ranks; the plan runs on "
                             f"{plan.devices}")


# ====================================================================== the loss
def causal_lm_loss(logits, input_ids, tp_mesh=None):
    """Mean next-token cross-entropy, as Hugging Face's ``labels=input_ids`` loss.

    ``tp_mesh``: the logits are this rank's vocabulary slice; call it, and run its backward,
    inside ``torch.distributed.tensor.parallel.loss_parallel()`` (not nested: leaving an
    inner one ends the outer)."""
    x = logits[:, :-1].reshape(-1, logits.shape[-1])
    y = input_ids[:, 1:].reshape(-1)
    if tp_mesh is None:
        return F.cross_entropy(x.float(), y)
    from torch.distributed.tensor import DTensor, Shard
    return F.cross_entropy(DTensor.from_local(x.float(), tp_mesh, (Shard(1),)), y)


def _vocab_parallel(on: bool):
    """``loss_parallel()`` (the vocabulary-parallel cross-entropy's backward) when ``on``."""
    import contextlib

    from torch.distributed.tensor.parallel import loss_parallel
    return loss_parallel() if on else contextlib.nullcontext()


# ====================================================================== stage modules
def _checkpointed_sdpa(*args, **kwargs):
    from torch.utils.checkpoint import checkpoint
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    return checkpoint(sdpa_attention_forward, *args, use_reentrant=False, **kwargs)


class _Stage(nn.Module):
    """One chunk of blocks (and the embeddings / head on the first / last), with the
    original module's attribute paths, so parameter names are the original's."""

    def __init__(self, hf, family: str, blocks: Sequence[int], first: bool, last: bool,
                 full_recompute: bool, t_seq: int):
        super().__init__()
        self.family, self.first, self.last = family, first, last
        self.full_recompute, self.t_seq = full_recompute, t_seq
        #: the tensor-parallel mesh when a replicated block input is checkpointed as this
        #: rank's sequence slice (Megatron-LM's distributed checkpoints), else None
        self.distribute_checkpoints = None
        #: the audit row of the distributed checkpoints' gathers
        self.recompute_label = ("stage", "recompute")
        #: the tensor-parallel mesh when a replicated stream travels between stages as this
        #: rank's sequence slice (Megatron-LM's scatter-gather, what the plan prices), else
        #: None; and the audit row of both re-layouts (the received, the sent)
        self.message_mesh = None
        self.message_label = ("stage", "p2p relayout")
        base_name = "model" if family == "llama" else "transformer"
        src = getattr(hf, base_name)
        base = nn.Module()
        setattr(self, base_name, base)
        layers = src.layers if family == "llama" else src.h
        box = nn.ModuleDict({str(i): layers[i] for i in blocks})
        if family == "llama":
            base.layers = box
            base.rotary_emb = src.rotary_emb
            if first:
                base.embed_tokens = src.embed_tokens
            if last:
                base.norm = src.norm
        else:
            base.h = box
            if first:
                base.wte, base.wpe, base.drop = src.wte, src.wpe, src.drop
            if last:
                base.ln_f = src.ln_f
        if last:
            self.lm_head = hf.lm_head

    def blocks(self) -> list:
        base = self.model if self.family == "llama" else self.transformer
        return list((base.layers if self.family == "llama" else base.h).values())

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

        from .audit import labelled_call
        if self.message_mesh is not None and not self.first:
            x = labelled_call(self.message_label, _gather_sequence, x, self.message_mesh)
        if self.family == "llama":
            base = self.model
            h = base.embed_tokens(x) if self.first else x
            seq = h.shape[1] * self.t_seq
            pos = torch.arange(seq, device=h.device).unsqueeze(0)
            kw = dict(position_embeddings=base.rotary_emb(h, position_ids=pos),
                      position_ids=pos)
            layers = base.layers.values()
        else:
            base = self.transformer
            if self.first:
                pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
                h = base.drop(base.wte(x) + base.wpe(pos))
            else:
                h = x
            kw = {}
            layers = base.h.values()
        for layer in layers:
            # a full recompute reruns the whole block, its last collective included, as
            # Megatron-LM's does and the plan prices (PyTorch's early stop would skip the
            # final reduction, whose result nothing saves)
            with set_checkpoint_early_stop(False):
                if self.full_recompute and self.distribute_checkpoints is not None:
                    h = _distributed_checkpoint(layer, h, self.distribute_checkpoints, kw,
                                                self.recompute_label)
                elif self.full_recompute:
                    h = checkpoint(layer, h, use_reentrant=False, **kw)
                else:
                    h = layer(h, **kw)
        if self.last:
            h = self.lm_head(base.norm(h) if self.family == "llama" else base.ln_f(h))
        elif self.message_mesh is not None:
            h = labelled_call(self.message_label, _cut_sequence, h, self.message_mesh)
        return h


def _distributed_checkpoint(layer, h, tp_mesh, kw, key):
    """Full recomputation of ``layer`` keeping only this rank's ``1/t`` sequence slice of
    its replicated input ``h`` (Megatron-LM's ``--distribute-saved-activations``, what the
    plan prices). The forward runs on ``h`` itself and the checkpoint keeps a copy of the
    slice (no collective); the recompute all-gathers it (counted under ``key`` in an audit)
    and reads it as a leaf that requires a gradient, so it saves what the forward saved;
    the input gradient flows through the forward's own graph."""
    from torch.utils.checkpoint import checkpoint

    from .audit import labelled_call
    piece = h.detach().chunk(tp_mesh.size(), dim=1)[tp_mesh.get_local_rank()].clone()
    box = [h]           # the forward's input, dropped once it ran: only the slice stays

    def run(x, **kwargs):
        whole = box.pop() if box else \
            labelled_call(key, _gather_sequence, x, tp_mesh).requires_grad_()
        return layer(whole, **kwargs)

    return checkpoint(run, piece, use_reentrant=False, **kw)


def _cut_sequence(x, tp_mesh):
    """This rank's sequence slice of a replicated ``x`` (``Replicate -> Shard(1)``: its
    backward all-gathers the gradient), in its own storage, so ``x`` can go (a stage's
    output, sent as slices)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    return DTensor.from_local(x, tp_mesh, (Replicate(),), run_check=False).redistribute(
        tp_mesh, (Shard(1),)).to_local().clone()


def _gather_sequence(x, tp_mesh):
    """The whole sequence from every rank's slice (``Shard(1) -> Replicate``: its backward
    takes the gradient's slice)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    return DTensor.from_local(x, tp_mesh, (Shard(1),), run_check=False).redistribute(
        tp_mesh, (Replicate(),)).to_local()


# ====================================================================== tensor parallelism
def _gpt2_to_linear(block, t: int) -> None:
    """GPT-2's ``Conv1D`` projections as ``nn.Linear`` (weight transposed); ``c_attn``'s rows
    reordered so that each of ``t`` contiguous slices holds its heads' q, k and v."""
    for mod, names in ((block.attn, ("c_attn", "c_proj")), (block.mlp, ("c_fc", "c_proj"))):
        for n in names:
            conv = getattr(mod, n)
            nx, nf = conv.weight.shape
            lin = nn.Linear(nx, nf, device=conv.weight.device, dtype=conv.weight.dtype)
            with torch.no_grad():
                w, b = conv.weight.t(), conv.bias
                if n == "c_attn" and mod is block.attn:
                    idx = _qkv_order(nf // 3, t, conv.weight.device)
                    w, b = w[idx], b[idx]
                lin.weight.copy_(w)
                lin.bias.copy_(b)
            setattr(mod, n, lin)
    block.attn.split_size = block.attn.embed_dim // t


def _qkv_order(h: int, t: int, device):
    """Row order of a packed ``[q; k; v]`` (``h`` rows each) grouped per rank: ``[q_0; k_0;
    v_0; q_1; ...]``."""
    w = h // t
    return torch.cat([torch.arange(j * h + r * w, j * h + (r + 1) * w, device=device)
                      for r in range(t) for j in range(3)])


def _tp_block(block, family: str, tp_mesh, sp: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    src = Shard(1) if sp else Replicate()

    def gather(kw: str | None):
        if kw is None:
            return PrepareModuleInput(input_layouts=(src,), desired_input_layouts=(Replicate(),))
        return PrepareModuleInput(input_kwarg_layouts={kw: src},
                                  desired_input_kwarg_layouts={kw: Replicate()})

    row = RowwiseParallel(output_layouts=src)
    if family == "llama":
        plan = {"self_attn": gather("hidden_states"), "self_attn.q_proj": ColwiseParallel(),
                "self_attn.k_proj": ColwiseParallel(), "self_attn.v_proj": ColwiseParallel(),
                "self_attn.o_proj": row, "mlp": gather(None),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": row}
        norms = ("input_layernorm", "post_attention_layernorm")
    else:
        plan = {"attn": gather(None), "attn.c_attn": ColwiseParallel(), "attn.c_proj": row,
                "mlp": gather(None), "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": row}
        norms = ("ln_1", "ln_2")
    if sp:
        plan.update({n: SequenceParallel(use_local_output=True) for n in norms})
    parallelize_module(block, tp_mesh, plan)


def _tp_ends(stage: _Stage, family: str, tp_mesh, sp: bool, vocab_loss: bool,
             wpe_vocab: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    src = Shard(1) if sp else Replicate()
    plan: dict[str, Any] = {}
    if stage.first:
        embeds = ("model.embed_tokens",) if family == "llama" else (
            ("transformer.wte", "transformer.wpe") if wpe_vocab else ("transformer.wte",))
        for e in embeds:
            plan[e] = RowwiseParallel(input_layouts=Replicate(), output_layouts=src)
        if family == "gpt2" and not wpe_vocab and sp:
            # a replicated table on a sequence-split sum: R -> S is a slice forward, and the
            # gradient is all-gathered backward (the weight then gets all of it)
            plan["transformer.wpe"] = PrepareModuleOutput(
                output_layouts=Replicate(), desired_output_layouts=Shard(1),
                use_local_output=True)
    if stage.last:
        norm = "model.norm" if family == "llama" else "transformer.ln_f"
        if sp:
            plan[norm] = SequenceParallel(use_local_output=True)
        plan["lm_head"] = ColwiseParallel(input_layouts=src,
                                          output_layouts=Shard(-1) if vocab_loss
                                          else Replicate())
    parallelize_module(stage, tp_mesh, plan)


#: Per family: (block module, where, graph layer its collectives re-lay the input of). A
#: redistribution into a module is the consumer's; a row-parallel output's reduction is
#: its consumer's (the residual add, or GPT-2's dropout before it), as the cost model
#: attributes a re-layout to its consumer.
_BLOCK_LABELS = {
    # the MLP's input: the gate and up projections' shared input (its fanout's gathers under
    # sequence parallelism, else its gradient sum)
    "llama": (("self_attn", "input", "self_attn.qkv_proj"),
              ("self_attn.o_proj", "output", "attn_residual"),
              ("mlp", "input", "post_attention_layernorm.fanout"),
              ("mlp.down_proj", "output", "mlp_residual")),
    "gpt2": (("attn", "input", "attn.c_attn"),
             ("attn.c_proj", "output", "attn.resid_dropout"),
             ("mlp", "input", "mlp.c_fc"),
             ("mlp.c_proj", "output", "mlp.dropout")),
}


def _label_collectives(stage: _Stage, family: str) -> None:
    """Name the tensor-parallel collectives of ``stage``'s modules by the graph layers the
    plan prices them on (they count only under an active audit counter)."""
    from .audit import labelled_module
    base_name = "model" if family == "llama" else "transformer"
    base = getattr(stage, base_name)
    box = base.layers if family == "llama" else base.h
    for i, block in box.items():
        prefix = f"{base_name}.layers.{i}"         # the graph's block names (from_hf)
        for path, where, layer in _BLOCK_LABELS[family]:
            labelled_module(block.get_submodule(path), (f"{prefix}.{layer}", "transfer"),
                            where)
    if stage.first:
        if family == "llama":
            first = next(iter(box))
            labelled_module(base.embed_tokens,
                            (f"model.layers.{first}.input_fanout", "transfer"), "output")
        else:
            for e in (base.wte, base.wpe):
                labelled_module(e, ("transformer.embed_add", "transfer"), "output")
    if stage.last:
        for where in ("input", "output"):
            labelled_module(stage.lm_head, ("lm_head", "transfer"), where)


def _sequence_parallel_saves(stage: _Stage, family: str, tp_mesh, *, blocks: bool) -> None:
    """:func:`.tp_saves.regather_in_backward` on every module whose input a sequence-parallel column
    linear gathers: the head's, and the blocks' unless they are fully recomputed (the
    recompute gathers the input again, and the block's backward uses that gather)."""
    base_name = "model" if family == "llama" else "transformer"
    base = getattr(stage, base_name)
    box = base.layers if family == "llama" else base.h
    for i, block in (box.items() if blocks else ()):
        for path, where, layer in _BLOCK_LABELS[family]:
            if where == "input":
                regather_in_backward(block.get_submodule(path), tp_mesh,
                                      (f"{base_name}.layers.{i}.{layer}", "transfer"))
    if stage.last:
        regather_in_backward(stage.lm_head, tp_mesh, ("lm_head", "transfer"))


# ====================================================================== data parallelism
def _data_parallel(stage: _Stage, zero: int, mesh) -> None:
    dp = mesh["dp"]
    if zero == 0:
        from torch.distributed._composable import replicate
        replicate(stage, process_group=dp.get_group(), init_sync=False)
        return
    from torch.distributed.fsdp import fully_shard
    reshard = zero == 3
    for block in stage.blocks():
        fully_shard(block, mesh=dp, reshard_after_forward=reshard)
    fully_shard(stage, mesh=dp, reshard_after_forward=reshard)


# ====================================================================== the module
class ParallelTransformer(nn.Module):
    """This rank's part of a transformer plan (see the module docstring).

    Attributes
    ----------
    chunks : nn.ModuleList
        The rank's stage modules (one, or ``v`` interleaved chunks), parameters named as the
        original module's under ``chunks.<k>.``.
    plan : PipelinePlan
    """

    def __init__(self, chunks: Sequence[_Stage], plan, layout: _Layout, mesh, family: str,
                 stage_ids: Sequence[int]):
        super().__init__()
        self.chunks = nn.ModuleList(chunks)
        self.plan, self._layout, self._mesh, self.family = plan, layout, mesh, family
        self._stage_ids = tuple(stage_ids)
        self._schedule = None

    @property
    def is_last_stage(self) -> bool:
        return self._layout.p * self._layout.v - 1 in self._stage_ids

    @property
    def is_first_stage(self) -> bool:
        return 0 in self._stage_ids

    def _tp_mesh(self):
        return self._mesh["tp"] if self._layout.t > 1 and self._layout.vocab_loss else None

    def _loss(self, logits, ids):
        from .audit import labelled_call
        return labelled_call(("loss", "transfer"),
                             lambda x: causal_lm_loss(x, ids, self._tp_mesh()), logits)

    def _local_batch(self, input_ids):
        lay = self._layout
        B = input_ids.shape[0]
        if B != lay.b * lay.m * lay.d:
            raise InvalidOptionError(f"the plan's step takes {lay.b * lay.m * lay.d} sequences "
                                     f"({lay.m} micro-batches of {lay.b} on {lay.d} "
                                     f"replicas); got {B}")
        k = self._mesh["dp"].get_local_rank()
        return input_ids[k * lay.b * lay.m:(k + 1) * lay.b * lay.m]

    def forward(self, input_ids):
        """The plan's training step on the global batch ``input_ids`` (forward and backward):
        returns this rank's mean loss (``nan`` off the last stage)."""
        with _vocab_parallel(self._tp_mesh() is not None):
            return self._step(input_ids)

    def _step(self, input_ids):
        lay = self._layout
        ids = self._local_batch(input_ids)
        if lay.p == 1:
            total = 0.0
            for mb in ids.chunk(lay.m):
                loss = self._loss(self.chunks[0](mb), mb)
                (loss / lay.m).backward()
                total += float(_local(loss.detach())) / lay.m
            self._reduce_partial_gradients()
            return torch.tensor(total)
        losses: list = []
        kw = {}
        if self.is_first_stage:
            args = (ids,)
        else:
            args = ()
        if self.is_last_stage:
            kw = dict(target=ids, losses=losses)
        # return_outputs=False: the last stage would otherwise keep every micro-batch's
        # logits (``PipelineStage.output_chunks``) until the step ends, to merge them into an
        # output nobody reads (the losses come through ``losses``); the plan prices only
        # the in-flight micro-batches' logits
        self._pipeline_schedule().step(*args, return_outputs=False, **kw)
        self._reduce_partial_gradients()
        if not self.is_last_stage:
            return torch.tensor(math.nan)
        return torch.stack([_local(x.detach()).float() for x in losses]).mean()

    def _reduce_partial_gradients(self) -> None:
        """Sum the partial gradients of replicated weights used on sequence slices (the
        SP norms') over the group, once per step after the last micro-batch, as
        Megatron-LM does and the plan prices; left partial, every optimizer op that reads
        one would all-reduce it again."""
        from torch.distributed.tensor import DTensor, Partial, Replicate
        for chunk in self.chunks:
            for prm in chunk.parameters():
                g = prm.grad
                if isinstance(g, DTensor) and any(isinstance(a, Partial) for a in g.placements):
                    prm.grad = g.redistribute(g.device_mesh,
                                              [Replicate() if isinstance(a, Partial) else a
                                               for a in g.placements])

    def _pipeline_schedule(self):
        if self._schedule is not None:
            return self._schedule
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import (
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
        )
        lay = self._layout
        n = lay.p * lay.v
        group = self._mesh["pp"].get_group()
        dev = torch.device("cpu")
        stages = []
        for chunk, sid in zip(self.chunks, self._stage_ids):
            inp, out = self._io_shapes(chunk)
            stages.append(PipelineStage(chunk, sid, n, dev, input_args=inp, output_args=out,
                                        group=group))
        loss_fn = self._loss
        if lay.v > 1:
            self._schedule = ScheduleInterleaved1F1B(stages, lay.m, loss_fn=loss_fn)
        elif lay.schedule == "gpipe":
            self._schedule = ScheduleGPipe(stages[0], lay.m, loss_fn=loss_fn)
        else:
            self._schedule = Schedule1F1B(stages[0], lay.m, loss_fn=loss_fn)
        return self._schedule

    def _io_shapes(self, chunk: _Stage):
        cfg = self._hf_config
        lay = self._layout
        S = self._seq_len
        h = cfg.hidden_size
        s_loc = S // lay.t        # messages travel as sequence slices
        meta = torch.device("meta")
        dtype = next(chunk.parameters()).dtype
        if chunk.first:
            inp = torch.empty(lay.b, S, dtype=torch.long, device=meta)
        else:
            # the received activation needs its gradient sent back
            inp = torch.empty(lay.b, s_loc, h, dtype=dtype, device=meta, requires_grad=True)
        if chunk.last:
            V = cfg.vocab_size // (lay.t if lay.vocab_loss else 1)
            out = torch.empty(lay.b, S, V, dtype=dtype, device=meta)
        else:               # its gradient comes back
            out = torch.empty(lay.b, s_loc, h, dtype=dtype, device=meta, requires_grad=True)
        return inp, out

    # ------------------------------------------------------------------ after the step
    def full_gradients(self) -> dict[str, Any]:
        """Every local parameter's whole gradient (gathered over the tensor- and data-
        parallel ranks), named and laid out as in the original module (GPT-2's ``Conv1D``
        weights transposed back, ``c_attn``'s rows back in ``[q; k; v]`` order)."""
        from torch.distributed.tensor import DTensor
        out = {}
        for k, chunk in enumerate(self.chunks):
            for name, prm in chunk.named_parameters():
                g = prm.grad
                if g is None:
                    continue
                if isinstance(g, DTensor):
                    g = g.full_tensor()
                out[_original_name(name)] = self._original_layout(name, g.detach().clone())
        tied = getattr(getattr(self, "_hf_config", None), "tie_word_embeddings", True)
        if self.family == "gpt2" and tied and "lm_head.weight" in out:
            tied = "transformer.wte.weight"
            if tied in out:
                out.pop("lm_head.weight")
        return out

    def _original_layout(self, name: str, g):
        if self.family != "gpt2" or ".h." not in name:
            return g
        if any(name.endswith(f"{n}.weight") for n in ("c_attn", "c_proj", "c_fc")):
            if name.endswith("attn.c_attn.weight"):
                g = g[_inverse(_qkv_order(g.shape[0] // 3, self._layout.t, g.device))]
            return g.t().contiguous()
        if name.endswith("attn.c_attn.bias"):
            return g[_inverse(_qkv_order(g.shape[0] // 3, self._layout.t, g.device))]
        return g


def _local(x):
    """A replicated DTensor's local value (a plain tensor as it is)."""
    return x.to_local() if hasattr(x, "to_local") else x


def _inverse(idx):
    inv = torch.empty_like(idx)
    inv[idx] = torch.arange(len(idx), device=idx.device)
    return inv


def _original_name(name: str) -> str:
    for wrapper in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "module."):
        name = name.replace(wrapper, "")
    return name


def parallelize_transformer(module, plan, mesh=None, *, seq_len: int | None = None
                            ) -> ParallelTransformer:
    """This rank's part of ``plan`` run on ``module`` (module docstring).

    Parameters
    ----------
    module : transformers.LlamaForCausalLM or transformers.GPT2LMHeadModel
        The same weights on every rank; its submodules are parallelized in place (keep a
        copy for a reference run).
    plan : PipelinePlan
        From :func:`~milp_parallel.pipeline.solve_pipeline` or
        :func:`~milp_parallel.pipeline.evaluate_configuration` on ``from_hf(module)``.
    mesh : DeviceMesh, optional
        ``("pp", "dp", "tp")`` of the plan's shape (:func:`plan_mesh`), or a 1-D mesh / None
        over the world (reshaped).
    seq_len : int, optional
        Tokens per sequence of the steps (default: the config's positions); pipeline
        stages need it to size their messages.

    Returns
    -------
    ParallelTransformer

    Raises
    ------
    UnsupportedProblemError
        A module class the runtime does not run, or a kind it does not run (it runs
        Megatron's layouts, with or without sequence parallelism).
    InvalidOptionError
        A plan for another model (block count, layer names), a world or mesh of another
        size, or sizes the module cannot split (heads, vocabulary, sequence by ``t``).
    """
    family = _family(module)
    lay = _layout(module, family, plan)
    cfg = module.config
    S = seq_len or getattr(cfg, "max_position_embeddings", None) or cfg.n_positions
    heads = cfg.num_attention_heads if family == "llama" else cfg.n_head
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    # sequence slices: SP, the messages between stages, the distributed checkpoints
    slices = lay.sequence_parallel or lay.p > 1 or "full" in lay.recompute
    for what, n in (("key/value heads", kv), ("vocabulary", cfg.vocab_size),
                    ("sequence", S if slices else lay.t)):
        if n % lay.t:
            raise InvalidOptionError(f"the plan splits the {what} ({n}) {lay.t} ways; it "
                                     f"does not divide")
    if lay.d > 1 and lay.t > 1 and 0 in lay.zero:
        raise UnsupportedProblemError(
            "ZeRO stage 0 with tensor parallelism: PyTorch's replicate (DDP) does not take "
            "tensor-parallel DTensor parameters; plan ZeRO >= 1 (fully_shard), or t = 1")
    if family == "gpt2" and lay.p > 1 and cfg.tie_word_embeddings:
        raise UnsupportedProblemError(
            "a GPT-2 with tied embeddings over several pipeline stages needs the embedding "
            "group's gradient all-reduce, which the runtime does not run yet; untie the head "
            "(tie_word_embeddings=False) or plan one stage")
    mesh = _check_mesh(mesh, plan)
    cfg._attn_implementation = "sdpa"
    s = mesh["pp"].get_local_rank()
    rec = lay.recompute[s]
    if rec == "selective":
        from transformers import AttentionInterface
        AttentionInterface.register(_SELECTIVE_ATTENTION, _checkpointed_sdpa)
        cfg._attn_implementation = _SELECTIVE_ATTENTION
    tp_mesh = mesh["tp"]
    ids = [r * lay.p + s for r in range(lay.v)]
    chunks = []
    n_stages = lay.p * lay.v
    for sid in ids:
        stage = _Stage(module, family, lay.chunks[sid], sid == 0, sid == n_stages - 1,
                       rec == "full", lay.t if lay.sequence_parallel else 1)
        if family == "gpt2":
            for blk in stage.blocks():
                _gpt2_to_linear(blk, lay.t)
                if getattr(cfg, "activation_function", None) == "gelu_new":
                    # the tanh gelu as one op (Megatron-LM's fused bias-gelu, what the plan
                    # prices): ``gelu_new`` is the same function as seven element-wise ops,
                    # each of whose intermediates autograd keeps
                    blk.mlp.act = nn.GELU(approximate="tanh")
        if lay.t > 1:
            for blk in stage.blocks():
                _tp_block(blk, family, tp_mesh, lay.sequence_parallel)
            _tp_ends(stage, family, tp_mesh, lay.sequence_parallel, lay.vocab_loss,
                     lay.wpe_vocab)
            if rec == "full" and not lay.sequence_parallel:
                stage.distribute_checkpoints = tp_mesh
            if not lay.sequence_parallel:
                stage.message_mesh = tp_mesh
                stage.message_label = (f"stage {s}", "p2p relayout")
            stage.recompute_label = (f"stage {s}", "recompute")
            _label_collectives(stage, family)
            if lay.sequence_parallel:
                _sequence_parallel_saves(stage, family, tp_mesh, blocks=rec != "full")
            if family == "gpt2" and stage.first and stage.last and cfg.tie_word_embeddings:
                stage.lm_head.weight = stage.transformer.wte.weight
            keep_grads_sharded(stage)
        if lay.d > 1:
            _data_parallel(stage, lay.zero[s], mesh)
        chunks.append(stage)
    out = ParallelTransformer(chunks, plan, lay, mesh, family, ids)
    out._hf_config, out._seq_len = cfg, S
    return out


# ====================================================================== the audit
def _tf_parallelize(module, plan, mesh, inputs):
    return parallelize_transformer(module, plan, mesh, seq_len=int(inputs[0].shape[1]))


def _tf_graph(module, inputs):
    from ..importers.hf import from_hf
    ids = inputs[0]
    return from_hf(module, batch_size=int(ids.shape[0]), seq_len=int(ids.shape[1]))


def _tf_check(plan, module, inputs) -> None:
    if len(inputs) != 1 or not isinstance(inputs[0], torch.Tensor) or inputs[0].dim() != 2:
        raise InvalidOptionError("a transformer plan's step takes one (batch, sequence) "
                                 "tensor of token ids; pass example_inputs=input_ids")
    _layout(module, _family(module), plan)            # before any process is spawned
    n = plan.micro_batch_size * plan.micro_batches * plan.data
    if inputs[0].shape[0] != n:
        raise InvalidOptionError(f"the plan's step takes {n} sequences; got "
                                 f"{inputs[0].shape[0]}")


def _tf_collectives(plan, module, inputs):
    from ..pipeline.accounting import plan_traffic
    _tf_check(plan, module, inputs)
    return plan_traffic(plan, _tf_graph(module, inputs))


def _tf_memory(plan, module, inputs, optimizer):
    from ..pipeline.accounting import stage_memory
    from .layout import OPTIMIZER_STATE_FACTOR
    stages = stage_memory(plan, _tf_graph(module, inputs),
                          optimizer_state_factor=OPTIMIZER_STATE_FACTOR[optimizer])
    per = plan.devices // plan.pipeline
    return [stages[r // per] for r in range(plan.devices)]


def _tf_local_loss(y, pm):
    """This rank's share of the global mean loss: the last stage's ranks each hold their
    replica's mean (``d t`` of them), the others nothing."""
    if not pm.is_last_stage:
        return torch.zeros(())
    return y.detach().float() / (pm._layout.d * pm._layout.t)


def _tf_full_output(y, pm):
    total = _tf_local_loss(y, pm).clone()
    torch.distributed.all_reduce(total)
    return total


def _tf_reference_loss(out, inputs):
    return causal_lm_loss(out.logits, inputs[0])


def _tf_reference_output(out, inputs):
    return _tf_reference_loss(out, inputs).detach()


def _tf_full_gradients(pm):
    return pm.full_gradients()


def _tf_group_labels(pm):
    """The data-parallel group's collectives are the stage's gradient traffic, the
    pipeline group's its messages; a tensor-parallel collective outside every labelled
    region is the reduction of a replicated weight's partial gradient (a
    sequence-parallel norm's), which the plan prices as gradient traffic too."""
    s = pm._mesh["pp"].get_local_rank()
    name = {k: pm._mesh[k].get_group().group_name for k in ("pp", "dp", "tp")}
    return ({name["dp"]: (f"stage {s}", "sync"), name["pp"]: (f"stage {s}", "p2p")},
            {name["tp"]: (f"stage {s}", "sync")})


def runtime_hooks():
    """What :func:`milp_parallel.runtime.verify.verify_plan` asks of a transformer plan: the
    step is :meth:`ParallelTransformer.forward` (forward and backward), compared on its
    loss (next-token cross-entropy of ``input_ids``) and every gradient; the collectives
    are predicted by :func:`milp_parallel.pipeline.accounting.plan_traffic`, the memory by
    :func:`~milp_parallel.pipeline.accounting.stage_memory`."""
    from .verify import RuntimeHooks
    return RuntimeHooks(_tf_parallelize, _tf_collectives, _tf_memory, _tf_local_loss,
                        _tf_reference_loss, _tf_full_output, _tf_full_gradients,
                        reference_output=_tf_reference_output, step_runs_backward=True,
                        # the saved-tensor peak; MemoryMeter.allocating's whole-step peak
                        # shows the working sets the model does not price yet (docs)
                        activations="saved",
                        group_labels=_tf_group_labels)


def _describe(layout: _Layout) -> Mapping[str, Any]:  # pragma: no cover - debugging aid
    return dict(layout.__dict__)
