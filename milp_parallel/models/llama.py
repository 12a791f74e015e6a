"""Llama-2 / Llama-3 style decoders: grouped-query attention, SwiGLU, RMSNorm, untied embeddings.

The graph: ``embed`` (vocabulary x hidden) on the token ids; per layer ``layers.i``:
``attn_norm`` (rmsnorm), ``qkv`` (one linear to ``(A + 2G) D`` features, no bias: the query,
key and value projections packed per key/value group, Megatron-LM's layout), ``attn``
(attention core, ``A`` query heads sharing ``G`` key/value heads, causal, rotary position
embedding inside, not counted as FLOPs), ``o_proj`` (linear ``A D -> h``), ``add1``,
``mlp_norm``, ``gate`` and ``up`` (``h -> f`` each), ``act`` (silu of the gate), ``mul``,
``down`` (``f -> h``), ``add2``; then ``final_norm``, ``lm_head`` (``h -> V``, its own weight)
and ``loss``.

Parameters: ``V h`` (embedding) + ``l (h (A + 2G) D + A D h + 3 h f + 2 h)`` + ``h`` +
``V h`` (head). The published totals (the models' cards; checked in the tests):
Llama-2-7B 6,738,415,616; Llama-2-70B 68,976,648,192; Llama-3-8B 8,030,261,248;
Llama-3-70B 70,553,706,496.

Examples
--------
>>> llama_params(**LLAMA_SHAPES["llama2_7b"])
6738415616
"""

from __future__ import annotations

from types import MappingProxyType

from ..errors import InvalidGraphError
from ..graph import LayerGraph
from .gpt import check_sizes

__all__ = ["llama", "llama_params", "LLAMA_SHAPES", "llama_named"]

#: name -> shape keywords of :func:`llama` (Touvron et al. 2023, Llama 2, table 1 and the
#: released configs; Meta's Llama 3 model card and configs).
LLAMA_SHAPES = MappingProxyType({
    "llama2_7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000),
    "llama2_70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000),
    "llama3_8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "llama3_70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                       vocab=128256),
})
#: Default sequence length of each (its training context).
LLAMA_SEQ_LEN = MappingProxyType({"llama2_7b": 4096, "llama2_70b": 4096, "llama3_8b": 8192,
                                  "llama3_70b": 8192})


def llama_params(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int
                 ) -> int:
    """Exact parameter count of :func:`llama`'s graph (embedding, layers, norm, head)."""
    d = hidden // heads
    per_layer = hidden * (heads + 2 * kv_heads) * d + heads * d * hidden + 3 * hidden * ffn \
        + 2 * hidden
    return 2 * vocab * hidden + layers * per_layer + hidden


def llama(batch_size: int = 8, *, layers: int = 32, hidden: int = 4096, heads: int = 32,
          kv_heads: int | None = None, ffn: int = 11008, vocab: int = 32000,
          seq_len: int = 4096, loss: bool = True, name: str = "llama") -> LayerGraph:
    """Build a Llama-style decoder (defaults: Llama-2-7B).

    Parameters
    ----------
    batch_size : int
        Sequences per step.
    layers, hidden, heads, kv_heads, ffn, vocab : int
        Shape; ``kv_heads`` (default ``heads``) must divide ``heads``, ``heads`` ``hidden``.
    seq_len : int
        Tokens per sequence.
    loss : bool
        Append the cross-entropy ``loss``.
    name : str

    Returns
    -------
    LayerGraph

    Raises
    ------
    InvalidGraphError
        Inconsistent head counts or a non-positive size.
    """
    kv = heads if kv_heads is None else kv_heads
    check_sizes("llama", layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn=ffn,
                vocab=vocab, seq_len=seq_len)
    if hidden % heads or heads % kv:
        raise InvalidGraphError(f"llama: heads={heads} must divide hidden={hidden} and be a "
                                f"multiple of kv_heads={kv}")
    h, d = hidden, hidden // heads
    g = LayerGraph(name)
    x = g.embedding("embed", g.input("input_ids", (batch_size, seq_len), dims="ns"), vocab, h)
    for i in range(layers):
        p = f"layers.{i}"
        y = g.linear(f"{p}.qkv", g.rmsnorm(f"{p}.attn_norm", x), (heads + 2 * kv) * d,
                     bias=False)
        y = g.attention(f"{p}.attn", y, heads, kv_heads=kv, causal=True)
        x = g.add(f"{p}.add1", g.linear(f"{p}.o_proj", y, h, bias=False), x)
        z = g.rmsnorm(f"{p}.mlp_norm", x)
        act = g.elementwise(f"{p}.act", g.linear(f"{p}.gate", z, ffn, bias=False), fn="silu")
        y = g.mul(f"{p}.mul", act, g.linear(f"{p}.up", z, ffn, bias=False))
        x = g.add(f"{p}.add2", g.linear(f"{p}.down", y, h, bias=False), x)
    x = g.linear("lm_head", g.rmsnorm("final_norm", x), vocab, bias=False)
    if loss:
        g.loss("loss", x)
    return g


def llama_named(name: str, batch_size: int = 8, **kw) -> LayerGraph:
    """One of :data:`LLAMA_SHAPES` at its training context (``seq_len=`` overrides)."""
    shape = dict(LLAMA_SHAPES[name])
    shape.update(kw)
    shape.setdefault("seq_len", LLAMA_SEQ_LEN[name])
    shape.setdefault("name", name)
    return llama(batch_size, **shape)
