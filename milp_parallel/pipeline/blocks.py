"""Repeated blocks of a transformer graph: the layers before them, the blocks, the rest.

May import: ``errors``, ``graph``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidGraphError
from ..graph import LayerGraph

__all__ = ["BlockStructure", "block_structure"]

_BLOCK_RE = re.compile(r"^(?P<prefix>(?:.*\.)?layers)\.(?P<index>\d+)\.(?P<rest>.+)$")


@dataclass(frozen=True)
class BlockStructure:
    """A model cut into the layers before its repeated blocks, the blocks, and the rest.

    Attributes
    ----------
    pre, post : tuple of str
        Layer names before the first block and after the last one.
    blocks : tuple of tuple of str
        The layer names of each block, in topological order.
    rest : tuple of str
        The block-relative names (``qkv``, ``attn``, ...), the same for every block.
    entry : tuple of (int, int)
        ``(layer position in the block, input index)`` of every use of the block's input.
    exit : int
        The position of the block's output layer.
    pre_exit : str
        The layer whose output is the first block's input.
    post_entry : tuple of (str, int)
        ``(post layer, input index)`` of every use of the last block's output.
    """

    pre: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    post: tuple[str, ...]
    rest: tuple[str, ...]
    entry: tuple[tuple[int, int], ...]
    exit: int
    pre_exit: str
    post_entry: tuple[tuple[str, int], ...]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)


def block_structure(graph: LayerGraph) -> BlockStructure:
    """Find the repeated blocks of a transformer graph (layers ``<prefix>layers.<i>.<rest>``).

    Raises
    ------
    InvalidGraphError
        No blocks, blocks that differ (ops, attributes, shapes or wiring), or a block with more
        than one input or output tensor.

    Examples
    --------
    >>> from milp_parallel.models.gpt import gpt
    >>> s = block_structure(gpt(1, layers=3, hidden=64, heads=4, vocab=128, seq_len=32))
    >>> s.n_blocks, s.rest[:3], s.pre_exit, s.post
    (3, ('ln1', 'qkv', 'attn'), 'embed.dropout', ('final_ln', 'logits', 'loss'))
    """
    names = graph.names
    where: dict[str, tuple[int, str]] = {}
    prefix = None
    for n in names:
        m = _BLOCK_RE.match(n)
        if m:
            if prefix is None:
                prefix = m["prefix"]
            if m["prefix"] == prefix:
                where[n] = (int(m["index"]), m["rest"])
    if not where:
        raise InvalidGraphError(
            f"graph {graph.name!r} has no repeated blocks (layers named '<prefix>layers.<i>."
            "<name>'); the pipeline planner needs a transformer-style model")
    n_blocks = max(i for i, _ in where.values()) + 1
    blocks: list[list[str]] = [[] for _ in range(n_blocks)]
    pre, post = [], []
    seen_block = False
    for n in names:
        if n in where:
            blocks[where[n][0]].append(n)
            seen_block = True
        elif not seen_block:
            pre.append(n)
        else:
            post.append(n)
    for i, b in enumerate(blocks):
        if not b:
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} has no layers")
    rest = tuple(where[n][1] for n in blocks[0])
    pos = [{n: j for j, n in enumerate(b)} for b in blocks]

    def signature(i: int):
        sig, outside = [], set()
        for n in blocks[i]:
            L = graph.layer(n)
            refs = []
            for u in L.inputs:
                if u in pos[i]:
                    refs.append(pos[i][u])
                else:
                    refs.append(-1)
                    outside.add(u)
            sig.append((where[n][1], L.op, tuple(sorted(L.attrs.items())), L.output_shape,
                        tuple(refs)))
        return sig, outside

    sig0, out0 = signature(0)
    if len(out0) != 1:
        raise InvalidGraphError(f"graph {graph.name!r}: block 0 takes {len(out0)} tensors "
                                f"from outside ({sorted(out0)}); a block must take one")
    pre_exit = next(iter(out0))
    for i in range(1, n_blocks):
        sig, outside = signature(i)
        if sig != sig0 or [r[0] for r in sig] != list(rest):
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} differs from block 0; "
                                    "blocks must be identical to be planned as a pipeline")
        if len(outside) != 1 or next(iter(outside)) not in pos[i - 1]:
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} must take exactly one "
                                    f"tensor, the output of block {i - 1}")
    if n_blocks > 1:
        exit_pos = pos[0][next(iter(signature(1)[1]))]
    else:
        # the output of the only block is what the post layers read
        used = {u for n in post for u in graph.layer(n).inputs if u in pos[-1]}
        if len(used) != 1:
            raise InvalidGraphError(f"graph {graph.name!r}: the layers after the blocks must "
                                    f"read exactly one block output, got {sorted(used)}")
        exit_pos = pos[-1][next(iter(used))]
    entry = tuple((j, k) for j, r in enumerate(sig0) for k, ref in enumerate(r[4]) if ref == -1)
    last_out = blocks[-1][exit_pos]
    post_entry = tuple((n, k) for n in post for k, u in enumerate(graph.layer(n).inputs)
                       if u == last_out)
    bad = [n for n in post for u in graph.layer(n).inputs
           if u in where and u != last_out]
    if bad or not post_entry:
        raise InvalidGraphError(f"graph {graph.name!r}: the layers after the blocks must read "
                                f"only the last block's output {last_out!r}")
    return BlockStructure(tuple(pre), tuple(tuple(b) for b in blocks), tuple(post), rest,
                          entry, int(exit_pos), pre_exit, post_entry)

