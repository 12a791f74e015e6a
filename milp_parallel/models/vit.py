"""Vision Transformers as torchvision defines them (``vit_b_16``, ``vit_l_16``, ``vit_h_14``).

The graph: ``conv_proj`` (patchify: a ``p x p`` convolution with stride ``p``), ``patches``
(reshape to ``(N, h, S)``) and ``tokens`` (transpose to ``(N, S, h)``); the class token
``class_token`` (an embedding of one row on a constant id) concatenated in front
(``with_class``), the position embedding ``pos_embedding`` (``S + 1`` rows) added, ``dropout``;
per layer ``encoder.layers.i``: ``ln_1``, ``qkv`` (torch's ``in_proj``, ``h -> 3h``), ``attn``
(attention core, not causal), ``out_proj``, ``drop1``, ``add1``, ``ln_2``, ``fc1`` (``h ->
m``), ``gelu``, ``fc2``, ``drop2``, ``add2``; then ``encoder.ln``, ``cls`` (slice of token 0),
``heads`` (``h -> classes``) and ``loss``.

Parameter counts and matrix-product FLOPs equal torchvision 0.28's models at batch 1
(``milp_parallel/data/torchvision_reference.json``): vit_b_16 86,567,656 parameters,
vit_l_16 304,326,632, vit_h_14 632,045,800.

Examples
--------
>>> vit_named("vit_b_16", 1).param_count()
86567656
"""

from __future__ import annotations

from types import MappingProxyType

from ..errors import InvalidGraphError
from ..graph import LayerGraph
from .gpt import pre_ln_block

__all__ = ["vit", "VIT_SHAPES", "vit_named"]

_TORCHVISION_NAMES = {"ln1": "ln_1", "proj": "out_proj", "ln2": "ln_2"}

#: torchvision's ``vit_*`` builders: patch, layers, heads, hidden, mlp.
VIT_SHAPES = MappingProxyType({
    "vit_b_16": dict(patch=16, layers=12, heads=12, hidden=768, mlp=3072),
    "vit_l_16": dict(patch=16, layers=24, heads=16, hidden=1024, mlp=4096),
    "vit_h_14": dict(patch=14, layers=32, heads=16, hidden=1280, mlp=5120),
})


def vit(batch_size: int = 32, *, image_size: int = 224, patch: int = 16, layers: int = 12,
        heads: int = 12, hidden: int = 768, mlp: int = 3072, num_classes: int = 1000,
        dropout: float = 0.0, loss: bool = True, name: str = "vit") -> LayerGraph:
    """Build a torchvision-style ViT (defaults: ViT-B/16).

    Raises
    ------
    InvalidGraphError
        ``patch`` does not divide ``image_size`` or ``heads`` does not divide ``hidden``.
    """
    if image_size % patch or hidden % heads:
        raise InvalidGraphError(f"vit: patch={patch} must divide image_size={image_size} and "
                                f"heads={heads} must divide hidden={hidden}")
    n_patch = (image_size // patch) ** 2
    S = n_patch + 1
    g = LayerGraph(name)
    img = g.input("images", (batch_size, 3, image_size, image_size))
    x = g.conv("conv_proj", img, hidden, patch, stride=patch)
    x = g.reshape("patches", x, (hidden, n_patch), dims="ncs")
    x = g.transpose("tokens", x, (0, 2, 1))                         # (N, S - 1, h)
    cls = g.embedding("class_token", g.input("class_id", (batch_size, 1), dims="ns"), 1,
                      hidden)
    x = g.concat("with_class", (cls, x), dim="s")
    pos = g.embedding("pos_embedding", g.input("position_ids", (batch_size, S), dims="ns"),
                      S, hidden)
    x = g.dropout("dropout", g.add("add_pos", x, pos), p=dropout)
    for i in range(layers):
        x = pre_ln_block(g, f"encoder.layers.{i}", x, heads=heads, ffn=mlp, dropout=dropout,
                         attn_dropout=0.0, causal=False, names=_TORCHVISION_NAMES)
    x = g.slice("cls", g.layernorm("encoder.ln", x), "s", 0, 1)
    x = g.linear("heads", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g


def vit_named(name: str, batch_size: int = 32, **kw) -> LayerGraph:
    """One of :data:`VIT_SHAPES` (keywords as :func:`vit`)."""
    shape = dict(VIT_SHAPES[name])
    shape.update(kw)
    shape.setdefault("name", name)
    return vit(batch_size, **shape)
