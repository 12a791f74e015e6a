"""GPT as Megatron-LM trains it, at the granularity where tensor-parallel choices are visible.

The graph (pre-layer-norm GPT-2 architecture, Megatron-LM's ``GPTModel``): ``embed.word``
(vocabulary ``V`` x hidden ``h``) on the token ids and ``embed.position`` (sequence ``s`` x
``h``) on the positions, their sum and a dropout; then per layer ``layers.i``:

========================= ========================= ==============================================
layer                     op                        tensor-parallel choice it exposes
========================= ========================= ==============================================
``layers.i.ln1``          layernorm                 replicated or sequence-split
``layers.i.qkv``          linear h -> 3h            column-parallel (split of its output features)
``layers.i.attn``         attention (a heads)       head split
``layers.i.proj``         linear h -> h             row-parallel (split of its reduction dim)
``layers.i.drop1``        dropout                   replicated or sequence-split
``layers.i.add1``         add (residual)            replicated or sequence-split
``layers.i.ln2``          layernorm
``layers.i.fc1``          linear h -> 4h            column-parallel
``layers.i.gelu``         elementwise gelu          follows fc1
``layers.i.fc2``          linear 4h -> h            row-parallel
``layers.i.drop2``        dropout
``layers.i.add2``         add (residual)
========================= ========================= ==============================================

and ``final_ln``, ``logits`` (h -> V, its weight tied to ``embed.word``, no bias) and ``loss``.

Counts (Narayanan et al., SC'21, appendix / equations 2 and 3; ``l`` layers, batch ``B``):

- parameters ``P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h))`` (:func:`megatron_params`);
  the graph has ``P + 2h``: the formula leaves out the final layer-norm.
- FLOPs per iteration with full activation recomputation
  ``F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))`` (:func:`megatron_flops`): four times the
  forward matrix products of the layers (forward, recomputation, two for the backward) and
  three times the logits' (not recomputed); :func:`megatron_flops_from_graph` computes the same
  number from the graph's layers.

Examples
--------
>>> g = gpt(1, layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
>>> g.param_count() == megatron_params(2, 64, 128, 32) + 2 * 64
True
"""

from __future__ import annotations

from ..errors import InvalidGraphError
from ..graph import LayerGraph

__all__ = ["gpt", "megatron_params", "megatron_flops", "megatron_flops_from_graph",
           "GPT_SIZES", "gpt_named", "pre_ln_block", "check_sizes"]

#: Layer names of :func:`pre_ln_block` (GPT's); ViT passes torchvision's.
GPT_BLOCK_NAMES = {"ln1": "ln1", "proj": "proj", "ln2": "ln2"}


def check_sizes(model: str, **sizes) -> None:
    """Raise :class:`InvalidGraphError` unless every size is a positive integer."""
    for what, v in sizes.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InvalidGraphError(f"{model}: {what} must be a positive integer, got {v!r}")


def pre_ln_block(g: LayerGraph, p: str, x: str, *, heads: int, ffn: int, dropout: float,
                 causal: bool, attn_dropout: float | None = None,
                 names: dict | None = None) -> str:
    """One pre-layer-norm transformer layer (GPT-2 / ViT) on ``x``, layers named
    ``<p>.<name>``; returns its output. ``names`` renames ``ln1``, ``proj`` and ``ln2``."""
    n = {**GPT_BLOCK_NAMES, **(names or {})}
    h = g.layer(x).output_shape[-1]
    a_drop = dropout if attn_dropout is None else attn_dropout
    y = g.linear(f"{p}.qkv", g.layernorm(f"{p}.{n['ln1']}", x), 3 * h)
    y = g.attention(f"{p}.attn", y, heads, causal=causal, dropout=a_drop)
    y = g.dropout(f"{p}.drop1", g.linear(f"{p}.{n['proj']}", y, h), p=dropout)
    x = g.add(f"{p}.add1", y, x)
    y = g.elementwise(f"{p}.gelu", g.linear(f"{p}.fc1", g.layernorm(f"{p}.{n['ln2']}", x),
                                            ffn), fn="gelu")
    y = g.dropout(f"{p}.drop2", g.linear(f"{p}.fc2", y, h), p=dropout)
    return g.add(f"{p}.add2", y, x)

#: Megatron-LM's Table 1 (SC'21) model shapes: name -> (heads, hidden, layers).
GPT_SIZES: dict[str, tuple[int, int, int]] = {
    "1.7b": (24, 2304, 24), "3.6b": (32, 3072, 30), "7.5b": (32, 4096, 36),
    "18.4b": (48, 6144, 40), "39.1b": (64, 8192, 48), "76.1b": (80, 10240, 60),
    "145.6b": (96, 12288, 80), "310.1b": (128, 16384, 96), "529.6b": (128, 20480, 105),
    "1008.0b": (160, 25600, 128),
}


def megatron_params(layers: int, hidden: int, vocab: int = 51200, seq_len: int = 2048) -> int:
    """Megatron-LM's parameter count (SC'21, equation 2), as an exact integer
    ``12 l h^2 + 13 l h + (V + s) h``.

    Examples
    --------
    >>> round(megatron_params(80, 12288) / 1e9, 1)
    145.6
    """
    l, h = int(layers), int(hidden)  # noqa: E741 (the paper's symbols)
    return 12 * l * h * h + 13 * l * h + (int(vocab) + int(seq_len)) * h


def megatron_flops(batch: int, layers: int, hidden: int, vocab: int = 51200,
                   seq_len: int = 2048) -> float:
    """FLOPs of one training iteration with full recomputation (SC'21, equation 3):
    ``96 B s l h^2 (1 + s / (6 h) + V / (16 l h))``.

    Examples
    --------
    >>> megatron_flops(1, 1, 64, 128, 32) == 96 * 32 * 64**2 * (1 + 32 / 384 + 128 / 1024)
    True
    """
    B, s, l, h, V = (float(v)  # noqa: E741 (the paper's symbols)
                      for v in (batch, seq_len, layers, hidden, vocab))
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def megatron_flops_from_graph(graph: LayerGraph, batch: int | None = None) -> float:
    """Equation 3 counted from a :func:`gpt` graph's layers: 4 x the forward FLOPs of every
    matrix product inside ``layers.*`` plus 3 x those of ``logits``, times the batch."""
    b = graph.batch_size if batch is None else batch
    per_sample = 0.0
    for L in graph.layers:
        if L.op not in ("linear", "attention", "matmul"):
            continue
        if L.name.startswith("layers."):
            per_sample += 4.0 * L.flops
        elif L.name == "logits":
            per_sample += 3.0 * L.flops
    return per_sample * b


def gpt(batch_size: int = 8, *, layers: int = 24, hidden: int = 2304, heads: int = 24,
        vocab: int = 51200, seq_len: int = 2048, ffn: int | None = None, dropout: float = 0.1,
        loss: bool = True, name: str = "gpt") -> LayerGraph:
    """Build a Megatron-LM GPT (defaults: Table 1's 1.7B model).

    Parameters
    ----------
    batch_size : int
        Sequences per step.
    layers, hidden, heads : int
        Transformer layers, hidden size, attention heads (must divide ``hidden``).
    vocab, seq_len : int
        Vocabulary (Megatron pads GPT-2's 50,257 to 51,200) and sequence length.
    ffn : int, optional
        Feed-forward size (default ``4 hidden``).
    dropout : float
        Hidden and attention dropout probability.
    loss : bool
        Append the cross-entropy ``loss``.
    name : str

    Returns
    -------
    LayerGraph

    Raises
    ------
    InvalidGraphError
        ``heads`` does not divide ``hidden`` or a size is not positive.
    """
    check_sizes("gpt", layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                seq_len=seq_len)
    if hidden % heads:
        raise InvalidGraphError(f"gpt: heads={heads} must divide hidden={hidden}")
    h, f = hidden, ffn or 4 * hidden
    g = LayerGraph(name)
    ids = g.input("input_ids", (batch_size, seq_len), dims="ns")
    pos = g.input("position_ids", (batch_size, seq_len), dims="ns")
    x = g.add("embed.add", g.embedding("embed.word", ids, vocab, h),
              g.embedding("embed.position", pos, seq_len, h))
    x = g.dropout("embed.dropout", x, p=dropout)
    for i in range(layers):
        x = pre_ln_block(g, f"layers.{i}", x, heads=heads, ffn=f, dropout=dropout,
                         causal=True)
    x = g.linear("logits", g.layernorm("final_ln", x), vocab, bias=False, tied_to="embed.word")
    if loss:
        g.loss("loss", x)
    return g


def gpt_named(size: str, batch_size: int = 8, **kw) -> LayerGraph:
    """One of Table 1's models by its size (a key of :data:`GPT_SIZES`, e.g. ``"145.6b"``).

    Raises
    ------
    InvalidGraphError
        An unknown size (the message lists the known ones).
    """
    try:
        heads, hidden, layers = GPT_SIZES[size]
    except KeyError:
        raise InvalidGraphError(f"unknown GPT size {size!r}; known: "
                                f"{', '.join(GPT_SIZES)}") from None
    kw.setdefault("name", f"gpt_{size}")
    return gpt(batch_size, layers=layers, hidden=hidden, heads=heads, **kw)
