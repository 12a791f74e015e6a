"""A BERT-shaped transformer encoder ("bert_base": 12 layers, hidden 768, 12 heads, FFN 3072,
vocab 30522, 512 positions, 2 token types; sequence length 128 by default).

The graph: three embeddings (``embeddings.word_embeddings`` on ``input_ids``,
``embeddings.position_embeddings`` on ``position_ids``, ``embeddings.token_type_embeddings`` on
``token_type_ids``), their sum, a layer-norm and a dropout; then per layer ``encoder.layer.i``:
query / key / value linears, multi-head attention written as reshape + transpose + ``matmul``
(scores ``(N, A, S, S)`` with dims ``nast``, scaled by 1/sqrt(head size) as an element-wise op,
softmax, dropout, ``matmul`` with the values), the output linear, dropout, residual add,
layer-norm, the feed-forward pair with GELU, dropout, residual add, layer-norm. A token
classifier ``classifier`` (hidden -> ``num_labels``) and a ``loss`` end the graph (no pooler).

Parameters (``encoder_params``): embeddings ``(V + P + T) H + 2H``; per layer
``4 (H^2 + H) + 2H + 2 F H + F + H + 2H`` (= 7,087,872 for BERT-base); BERT-base's encoder has
108,891,648 (Hugging Face's ``BertModel``, 109,482,240, adds a 590,592-parameter pooler).
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["bert", "bert_base", "encoder_params"]


def encoder_params(layers: int = 12, hidden: int = 768, ffn: int = 3072, vocab: int = 30522,
                   max_positions: int = 512, type_vocab: int = 2) -> int:
    """Parameters of the embeddings and encoder layers (everything but the classifier).

    Examples
    --------
    >>> encoder_params()
    108891648
    """
    H, F = hidden, ffn
    emb = (vocab + max_positions + type_vocab) * H + 2 * H
    per_layer = 4 * (H * H + H) + 2 * H + (H * F + F) + (F * H + H) + 2 * H
    return emb + layers * per_layer


def bert(batch_size: int = 32, *, seq_len: int = 128, layers: int = 12, hidden: int = 768,
         heads: int = 12, ffn: int = 3072, vocab: int = 30522, max_positions: int = 512,
         type_vocab: int = 2, num_labels: int = 2, loss: bool = True,
         name: str = "bert") -> LayerGraph:
    """Build a BERT-style encoder.

    Parameters
    ----------
    batch_size : int
        Sequences per step.
    seq_len : int
        Tokens per sequence (at most ``max_positions``).
    layers, hidden, heads, ffn : int
        Encoder layers, hidden size, attention heads (must divide ``hidden``), feed-forward
        size.
    vocab, max_positions, type_vocab : int
        Embedding table sizes.
    num_labels : int
        Outputs of the per-token classifier.
    loss : bool
        Append a cross-entropy ``loss`` layer.
    name : str
        The graph's name.

    Returns
    -------
    LayerGraph

    Raises
    ------
    ValueError
        ``heads`` does not divide ``hidden`` or ``seq_len > max_positions``.
    """
    if hidden % heads:
        raise ValueError(f"heads={heads} must divide hidden={hidden}")
    if not 0 < seq_len <= max_positions:
        raise ValueError(f"seq_len={seq_len} must be in 1..max_positions={max_positions}")
    S, H, A, D = seq_len, hidden, heads, hidden // heads
    g = LayerGraph(name)
    ids = g.input("input_ids", (batch_size, S), dims="ns")
    pos = g.input("position_ids", (batch_size, S), dims="ns")
    typ = g.input("token_type_ids", (batch_size, S), dims="ns")
    e = g.add("embeddings.add",
              g.embedding("embeddings.word_embeddings", ids, vocab, H),
              g.embedding("embeddings.position_embeddings", pos, max_positions, H),
              g.embedding("embeddings.token_type_embeddings", typ, type_vocab, H))
    x = g.dropout("embeddings.dropout", g.layernorm("embeddings.LayerNorm", e), p=0.1)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = f"{p}.attention.self"
        q = g.reshape(f"{a}.query.split", g.linear(f"{a}.query", x, H), (S, A, D),
                      dims="nsac")
        k = g.reshape(f"{a}.key.split", g.linear(f"{a}.key", x, H), (S, A, D), dims="ntac")
        v = g.reshape(f"{a}.value.split", g.linear(f"{a}.value", x, H), (S, A, D),
                      dims="ntac")
        q = g.transpose(f"{a}.query.heads", q, (0, 2, 1, 3))        # (N, A, S, D)
        k = g.transpose(f"{a}.key.heads", k, (0, 2, 3, 1))          # (N, A, D, S)
        v = g.transpose(f"{a}.value.heads", v, (0, 2, 1, 3))        # (N, A, S, D)
        s = g.matmul(f"{a}.scores", q, k)                           # (N, A, S, S)
        s = g.elementwise(f"{a}.scale", s, fn="scale")
        s = g.dropout(f"{a}.dropout", g.softmax(f"{a}.softmax", s), p=0.1)
        c = g.matmul(f"{a}.context", s, v)                          # (N, A, S, D)
        c = g.transpose(f"{a}.context.heads", c, (0, 2, 1, 3))      # (N, S, A, D)
        c = g.reshape(f"{a}.context.merge", c, (S, H), dims="nsc")
        o = f"{p}.attention.output"
        y = g.dropout(f"{o}.dropout", g.linear(f"{o}.dense", c, H), p=0.1)
        x = g.layernorm(f"{o}.LayerNorm", g.add(f"{o}.add", y, x))
        y = g.elementwise(f"{p}.intermediate.gelu", g.linear(f"{p}.intermediate.dense", x, ffn),
                          fn="gelu")
        y = g.dropout(f"{p}.output.dropout", g.linear(f"{p}.output.dense", y, H), p=0.1)
        x = g.layernorm(f"{p}.output.LayerNorm", g.add(f"{p}.output.add", y, x))
    x = g.linear("classifier", x, num_labels)
    if loss:
        g.loss("loss", x)
    return g


def bert_base(batch_size: int = 32, *, seq_len: int = 128, **kw) -> LayerGraph:
    """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522 (keywords as
    :func:`bert`).

    Examples
    --------
    >>> g = bert_base(1)
    >>> g.param_count() - g.layer("classifier").params
    108891648
    """
    kw.setdefault("name", "bert_base")
    return bert(batch_size, seq_len=seq_len, **kw)
