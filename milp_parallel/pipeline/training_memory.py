"""Memory of mixed-precision training: parameters, gradients and optimizer state under ZeRO
stages 0-3, activations kept for the backward pass, and activation recomputation.

Model state (Rajbhandari et al., *ZeRO*, SC'20, section 3.1: mixed-precision Adam keeps
``2 + 2 + 12 = 16`` bytes per parameter): 16-bit weights and gradients, and fp32 master
weights plus Adam's two fp32 moments (:class:`MixedPrecision`). ZeRO divides by the
data-parallel group ``G`` of a parameter (:meth:`MixedPrecision.state_bytes_per_param`):

====== ====================================================
stage  bytes per parameter on one device
====== ====================================================
0      ``w + g + (master + optimizer)``
1      ``w + g + (master + optimizer) / G``
2      ``w + (g + master + optimizer) / G``
3      ``(w + g + master + optimizer) / G``
====== ====================================================

Activations (Korthikanti et al., *Reducing Activation Recomputation in Large Transformer
Models*, MLSys 2023, section 4.1), per micro-batch, of what each layer keeps for its backward
pass (:func:`saved_activation_bytes`): a norm, a linear, an element-wise function keep their
input (16-bit); an element-wise product keeps both inputs; a dropout keeps its 1-byte mask;
the attention core keeps its packed ``q, k, v`` input and, per head, the ``S x S`` softmax
output (2 bytes), dropout mask (1) and dropout output (2) (only the softmax output without
dropout; nothing of the square with flash attention); the cross-entropy keeps its logits in
fp32; adds, embeddings and layout ops keep nothing. For a GPT layer this is the paper's
``s b h (34 + 5 a s / h)`` bytes, and ``s b h (10 + 24 / t + 5 a s / (h t))`` with ``t``-way
tensor parallelism (norms, dropouts and the projections' inputs replicated), ``s b h (34 +
5 a s / h) / t`` with sequence parallelism (checked in the tests).

The backward pass of the attention core also holds the gradient of its ``S x S``
probabilities for a moment (:func:`backward_working_bytes`): once per stage, beside what the
stage keeps.

Pipeline boundary tensors (:func:`pipeline_boundary_bytes`): ``torch.distributed.pipelining``
keeps each in-flight micro-batch's chunk input and output until its backward pass; priced per
in-flight micro-batch of each chunk, beside what the layers keep. Its receive buffers, one per
micro-batch and chunk for the step (:func:`pipeline_receive_bytes`), beside them.

Recomputation (:data:`RECOMPUTE_MODES`), per transformer layer: ``none`` keeps everything;
``selective`` drops the attention core's ``S x S`` tensors and recomputes that core in the
backward pass; ``full`` keeps only the layer's input (split over the tensor-parallel group,
Megatron-LM's ``--distribute-checkpointed-activations``) and re-runs the layer's forward
pass, holding one layer's activations at a time.

May import: ``errors``.

Examples
--------
>>> MixedPrecision().state_bytes_per_param(0, 8), MixedPrecision().state_bytes_per_param(3, 8)
(16.0, 2.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidOptionError

__all__ = ["MixedPrecision", "RECOMPUTE_MODES", "ZERO_STAGES", "saved_activation_bytes",
           "saved_input_bytes", "backward_working_bytes", "zero3_gathered_bytes",
           "pipeline_boundary_bytes", "pipeline_receive_bytes", "RECEIVE_BUFFERS", "check_zero",
           "check_recompute"]

#: Per-layer recomputation choices (see the module docstring).
RECOMPUTE_MODES = ("none", "selective", "full")
#: ZeRO stages.
ZERO_STAGES = (0, 1, 2, 3)


def check_zero(stages) -> tuple[int, ...]:
    """Validate a collection of ZeRO stages; returns them as a sorted tuple."""
    try:
        out = tuple(sorted({int(z) for z in stages}))
    except (TypeError, ValueError):
        raise InvalidOptionError(f"zero stages must be integers among {ZERO_STAGES}, got "
                                 f"{stages!r}") from None
    if not out or any(z not in ZERO_STAGES for z in out):
        raise InvalidOptionError(f"zero stages must be a non-empty subset of {ZERO_STAGES}, "
                                 f"got {stages!r}")
    return out


def check_recompute(modes) -> tuple[str, ...]:
    """Validate a collection of recomputation modes (kept in :data:`RECOMPUTE_MODES` order)."""
    if isinstance(modes, str):
        modes = (modes,)
    modes = tuple(modes)
    bad = [m for m in modes if m not in RECOMPUTE_MODES]
    if not modes or bad:
        raise InvalidOptionError(f"recompute modes must be a non-empty subset of "
                                 f"{RECOMPUTE_MODES}, got {modes!r}")
    return tuple(m for m in RECOMPUTE_MODES if m in modes)


@dataclass(frozen=True)
class MixedPrecision:
    """Bytes per element of mixed-precision training with Adam.

    Sources of the defaults: Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training
    Trillion Parameter Models*, SC'20, section 3.1 ("mixed-precision training of a model
    with Psi parameters ... 2 Psi + 2 Psi bytes for the fp16 parameters and gradients ...
    Adam ... fp32 copy of the parameters, momentum and variance ... 4 Psi + 4 Psi + 4 Psi",
    K = 12, 16 bytes in all) for the four model-state sizes; Korthikanti et al., *Reducing
    Activation Recomputation in Large Transformer Models*, MLSys 2023, section 4.1 ("we
    assume activations are stored in 16-bit floating point ... dropout masks need only one
    byte per element") for the activation and mask sizes; Megatron-LM's cross-entropy
    (``vocab_parallel_cross_entropy`` upcasts the logits, ``--fp16-lm-cross-entropy`` off by
    default) for the fp32 logits.

    Parameters
    ----------
    param_bytes, grad_bytes : int, default 2
        16-bit weights and gradients (ZeRO section 3.1: ``2 Psi + 2 Psi``).
    master_bytes : int, default 4
        fp32 master weights (ZeRO section 3.1: ``4 Psi`` of the ``K = 12``).
    optimizer_bytes : int, default 8
        Adam's two fp32 moments, momentum and variance (ZeRO section 3.1: ``4 Psi + 4 Psi``
        of the ``K = 12``).
    activation_bytes : int, default 2
        Activations kept for the backward pass (16-bit: Korthikanti et al. section 4.1).
    mask_bytes : int, default 1
        Dropout masks (one byte per element: Korthikanti et al. section 4.1, the ``s b h``
        and ``a s^2 b`` mask terms of equation (1)).
    loss_bytes : int, default 4
        The cross-entropy's logits (kept in fp32: Megatron-LM's vocabulary-parallel
        cross-entropy upcasts them; Korthikanti et al. leave the loss out of equation (1)).
    attention_mask_bytes : int, optional
        The attention core's dropout mask per score element (default: ``mask_bytes``, the
        byte mask of Megatron-LM's fused softmax-dropout). PyTorch's math attention
        (``scaled_dot_product_attention`` with dropout, as the runtime runs on CPU) draws a
        float mask of the scores' dtype (``aten.bernoulli_`` on ``empty_like`` of the
        probabilities): 4 in float32.

    Raises
    ------
    InvalidOptionError
        A negative size (or a non-positive weight / activation size).
    """

    param_bytes: int = 2
    grad_bytes: int = 2
    master_bytes: int = 4
    optimizer_bytes: int = 8
    activation_bytes: int = 2
    mask_bytes: int = 1
    loss_bytes: int = 4
    attention_mask_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.attention_mask_bytes is None:
            object.__setattr__(self, "attention_mask_bytes", self.mask_bytes)
        for k, v in self.__dict__.items():
            pos = k in ("param_bytes", "activation_bytes")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (
                    pos and v <= 0):
                raise InvalidOptionError(f"MixedPrecision.{k} must be a "
                                         f"{'positive' if pos else 'non-negative'} number, "
                                         f"got {v!r}")

    @property
    def state_bytes(self) -> float:
        """All model-state bytes per parameter without ZeRO."""
        return float(self.param_bytes + self.grad_bytes + self.master_bytes
                     + self.optimizer_bytes)

    def state_bytes_per_param(self, zero: int, group: int) -> float:
        """Model-state bytes per parameter on one device under ZeRO stage ``zero`` with a
        data-parallel group of ``group`` devices.

        Raises
        ------
        InvalidOptionError
            An unknown stage or a non-positive group.
        """
        return float(sum(self.state_split(zero, group)))

    def state_split(self, zero: int, group: int) -> tuple[float, float, float]:
        """``(weights, gradients, optimizer state)`` bytes per parameter on one device
        (:meth:`state_bytes_per_param` is their sum; the master weights count as optimizer
        state)."""
        if zero not in ZERO_STAGES:
            raise InvalidOptionError(f"ZeRO stage must be one of {ZERO_STAGES}, got {zero!r}")
        if not isinstance(group, int) or group < 1:
            raise InvalidOptionError(f"data-parallel group must be a positive integer, "
                                     f"got {group!r}")
        w, g = float(self.param_bytes), float(self.grad_bytes)
        opt = float(self.master_bytes + self.optimizer_bytes)
        return (w / (group if zero >= 3 else 1), g / (group if zero >= 2 else 1),
                opt / (group if zero >= 1 else 1))


def zero3_gathered_bytes(params: float, precision: MixedPrecision | None = None, *,
                         root: bool = False) -> float:
    """Bytes a ZeRO-3 device holds beyond its shards for ``params`` of its own (after the
    tensor-parallel split) while they are in use: the all-gathered weights and the
    gradients before their reduce-scatter.

    A block's weights are gathered while it runs and while the unit before it runs (its
    all-gather is prefetched: PyTorch FSDP's documentation of ``limit_all_gathers`` holds
    memory to "two consecutive FSDP instances (the current instance running computation and
    the next instance whose all-gather is prefetched)"), so two blocks' weights and one
    block's gradients are alive at once: ``2 W + G`` per block parameter. The stage's
    ``root`` layers (embedding, final norm, head; FSDP's root unit) stay gathered from their
    forward to their backward: ``W + G``.

    Parameters
    ----------
    params : float
        The layer's weights on one device before the data-parallel sharding.
    precision : MixedPrecision, optional
    root : bool
        A layer outside the blocks.
    """
    pr = precision or MixedPrecision()
    copies = 1.0 if root else 2.0
    return float(params) * (copies * float(pr.param_bytes) + float(pr.grad_bytes))


#: Ops that keep their (first) input itself for the backward pass, and those that keep
#: every input (:func:`saved_input_bytes`).
_KEEPS_FIRST_INPUT = frozenset({"layernorm", "rmsnorm", "elementwise", "conv", "batchnorm",
                                "linear", "attention"})
_KEEPS_INPUTS = frozenset({"mul", "matmul"})


def _share(layout: str | None, t: int) -> float:
    return 1.0 / t if layout in ("S", "C", "N") else 1.0


def saved_activation_bytes(layer, kind, t: int, micro_batch: int,
                           precision: MixedPrecision | None = None, *, flash: bool = False,
                           recomputed: bool = False) -> tuple[float, float]:
    """Bytes one device keeps for the backward pass of ``layer`` under ``kind``.

    Parameters
    ----------
    layer : Layer
    kind : tensor_parallel.Kind
    t : int
        Tensor-parallel group size.
    micro_batch : int
        Samples the group processes at once.
    precision : MixedPrecision, optional
    flash : bool
        Attention keeps no ``S x S`` tensor (a fused kernel recomputes it).
    recomputed : bool
        What the recomputed forward of a fully recomputed block keeps: a
        sequence-parallel linear's gathered input, where the stored forward keeps only its
        ``1/t`` slice and gathers it again in the backward pass.

    Returns
    -------
    (kept, scores) : tuple of float
        ``kept``: everything except the attention core's ``S x S`` tensors, which are
        ``scores`` (what selective recomputation drops).
    """
    pr = precision or MixedPrecision()
    op = layer.op
    a_b = float(pr.activation_bytes) * micro_batch
    ins = layer.input_elements
    if op in ("linear", "fanout") and kind.gathers_input:
        # the slice, which the backward gathers again; a recomputed forward's gather
        return a_b * ins[0] * (1.0 if recomputed else 1.0 / t), 0.0
    if op in _KEEPS_INPUTS or op in _KEEPS_FIRST_INPUT and op != "attention":
        return sum(saved_input_bytes(layer, kind, i, t, micro_batch, pr)
                   for i in range(len(ins))), 0.0
    if op == "dropout":
        p = float(layer.attrs.get("p", 0.0))
        return (float(pr.mask_bytes) * micro_batch * layer.output_elements
                * _share(kind.out, t) if p > 0 else 0.0), 0.0
    if op == "softmax":
        return a_b * layer.output_elements * _share(kind.out, t), 0.0
    if op == "loss":
        return float(pr.loss_bytes) * micro_batch * ins[0] * _share(kind.ins[0], t), 0.0
    if op == "attention":
        at = layer.attrs
        kept = saved_input_bytes(layer, kind, 0, t, micro_batch, pr)
        if flash:
            return kept, 0.0
        s = layer.output_shape[1]
        per = float(pr.activation_bytes)
        if at.get("dropout", 0.0) > 0:
            per += float(pr.attention_mask_bytes) + float(pr.activation_bytes)
        share = 1.0 / t if kind.split_compute else 1.0
        return kept, per * micro_batch * at["heads"] * s * s * share
    return 0.0, 0.0


def saved_input_bytes(layer, kind, index: int, t: int, micro_batch: int,
                      precision: MixedPrecision | None = None) -> float:
    """Bytes of ``layer``'s input ``index`` itself among what it keeps under ``kind``
    (:func:`saved_activation_bytes`): a norm's, a pointwise function's, a linear's or the
    attention core's first input, both factors of a product; nothing for a layer that keeps
    another tensor (a loss, a dropout's mask) or none (an add)."""
    pr = precision or MixedPrecision()
    if layer.op in _KEEPS_INPUTS or index == 0 and layer.op in _KEEPS_FIRST_INPUT:
        return float(pr.activation_bytes) * micro_batch * layer.input_elements[index] \
            * _share(kind.ins[index], t)
    return 0.0


def backward_working_bytes(layer, kind, t: int, micro_batch: int,
                           precision: MixedPrecision | None = None, *, flash: bool = False
                           ) -> float:
    """Bytes one device holds only while ``layer``'s backward pass runs, beyond what it
    kept: the gradient of the attention core's ``S x S`` probabilities (one at a time,
    in the activations' dtype: Megatron-LM's fused softmax backward writes its result in
    place of it, PyTorch's ``_softmax_backward_data`` frees it as it returns; measured under
    ``MemTracker``: 4 bytes per score element in float32). Nothing for a flash kernel or
    another layer.

    Counted once per stage (one layer's backward runs at a time), not per micro-batch in
    flight.
    """
    if layer.op != "attention" or flash:
        return 0.0
    pr = precision or MixedPrecision()
    s = layer.output_shape[1]
    share = 1.0 / t if kind.split_compute else 1.0
    return float(pr.activation_bytes) * micro_batch * layer.attrs["heads"] * s * s * share


#: How a pipeline's received messages are held (:func:`pipeline_receive_bytes`).
RECEIVE_BUFFERS = ("preallocated", "in_flight")


def pipeline_receive_bytes(stream_bytes: float, t: int, *, micro_batches: int,
                           receiving_chunks: int, in_flight: int,
                           buffers: str = "preallocated") -> float:
    """Bytes a rank's receive buffers hold beyond the boundary tensors and what its layers
    keep.

    ``torch.distributed.pipelining``'s ``PipelineStage`` (``buffers="preallocated"``)
    allocates, before the first step, one receive buffer per micro-batch for each chunk's
    input activation (every chunk but the model's first) and for its output's gradient
    (every chunk but the model's last), and keeps them: ``micro_batches x
    receiving_chunks`` buffers of one message, the rank's ``1/t`` sequence slice of the
    stream (:func:`pipeline_boundary_bytes`). The ``in_flight`` non-first-chunk micro-batches'
    received inputs are those buffers, already counted (by the layers that keep them, or as
    boundary tensors). Megatron-LM allocates each message as it arrives
    (``buffers="in_flight"``): nothing beyond.

    Examples
    --------
    >>> pipeline_receive_bytes(8.0, 2, micro_batches=4, receiving_chunks=2, in_flight=1)
    28.0
    >>> pipeline_receive_bytes(8.0, 2, micro_batches=4, receiving_chunks=2, in_flight=1,
    ...                        buffers="in_flight")
    0.0
    """
    if buffers not in RECEIVE_BUFFERS:
        raise InvalidOptionError(f"receive buffers must be among {RECEIVE_BUFFERS}, got "
                                 f"{buffers!r}")
    if buffers == "in_flight":
        return 0.0
    return (micro_batches * receiving_chunks - in_flight) * float(stream_bytes) / t


def pipeline_boundary_bytes(stream_bytes: float, t: int, in_layouts) -> tuple[float, float]:
    """Bytes per in-flight micro-batch that a pipeline chunk's boundary tensors hold beside
    what its layers keep: ``(received input, sent output)``.

    ``torch.distributed.pipelining``'s ``PipelineStage`` keeps, for every micro-batch whose
    forward pass ran and whose backward pass has not, the chunk's input (the received
    activation, which needs its gradient sent back) and its output (``fwd_cache``: the
    backward pass calls ``torch.autograd.backward(output, grad)``, which checks the output's
    shape, so Megatron-LM's trick of freeing the sent output's data, ``deallocate_output_
    tensor``, does not carry over cleanly). Messages travel as each rank's ``1/t`` sequence
    slice of the ``s b h`` stream (``stream_bytes`` in bytes, whole; Megatron-LM's
    scatter-gather): a sequence-split stream as it is, a replicated one cut on sending (in
    its own storage) and all-gathered on receiving. So a rank holds, of each in-flight
    micro-batch, one slice of each:

    * the output: the slice sent, which no layer of the chunk keeps: always extra, except on
      the model's last chunk, whose output is the logits the loss already keeps (not called
      here);
    * the input: the slice received, which the chunk's first layers keep themselves when
      they read it as it arrives (a sequence-split stream, or ``t = 1``); a replicated
      stream's first layers keep the gathered copy (or, fully recomputed, a slice of their
      own), so the received slice is extra.

    A rank of stage ``s`` holds, at the schedule's peak, ``f_s`` chunk micro-batches
    (:func:`~milp_parallel.pipeline.space.in_flight_micro_batches`); the caller counts how
    many of them belong to the model's first chunk (no received activation: the token ids)
    and to its last one.

    Examples
    --------
    >>> pipeline_boundary_bytes(8.0, 2, ["R"]), pipeline_boundary_bytes(8.0, 2, ["S"])
    ((4.0, 4.0), (0.0, 4.0))
    """
    message = float(stream_bytes) / t
    kept = t == 1 or all(L == "S" for L in in_layouts)
    return (0.0 if kept else message), message