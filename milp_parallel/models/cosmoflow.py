"""CosmoFlow (Mathuriya et al., SC'18) as ParaDL models it: a 3-D CNN on 4-channel volumes.

Seven 3-D convolutions (16, 32, 64, 128, 256, 256, 128 channels; kernels 3, 3, 3, 3, 2, 2, 2),
each followed by a ReLU, the first six by a 2x2x2 average pool, then three fully connected layers
(2048, 256, 4; ReLU between). The layer sequence is ParaDL's ``COSMOFLOW.net`` table.

ParaDL's tables are hand-written and their shapes are not all consistent with one padding rule
(``COSMOFLOW.net_256`` keeps 8^3 through a 2x2x2 conv). We pick, per input size, the paddings
and strides that reproduce a table exactly and end at 1x1x1 before ``FC_1``:

* 512^3 (``cosmoflow512``): no padding, ``CONV_3`` with stride 2 -- every output shape of
  ``COSMOFLOW.net`` (510, 255, 253, 126, 62, 31, 29, 14, 13, 6, 5, 2, 1);
* 128^3 (``cosmoflow``): padding 1 on the 3x3x3 convs and on ``CONV_5``/``CONV_6``, none on
  ``CONV_7``: 128, 64, 64, 32, 32, 16, 16, 8, 9, 4, 5, 2, 1.

Layer names are ParaDL's (``CONV_1`` ... ``FC_3``), with ``RELU_i``/``APOOL_i`` numbered.
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["cosmoflow", "VARIANTS"]

_CHANNELS = (16, 32, 64, 128, 256, 256, 128)
_KERNELS = (3, 3, 3, 3, 2, 2, 2)
#: input size -> (padding per conv, stride per conv)
VARIANTS = {
    512: ((0, 0, 0, 0, 0, 0, 0), (1, 1, 2, 1, 1, 1, 1)),
    128: ((1, 1, 1, 1, 1, 1, 0), (1, 1, 1, 1, 1, 1, 1)),
}


def cosmoflow(batch_size: int = 8, *, input_size: int = 128, loss: bool = True
              ) -> LayerGraph:
    """Build CosmoFlow for a ``4 x input_size^3`` input.

    Parameters
    ----------
    batch_size : int
        Samples per step.
    input_size : int
        128 or 512 (see the module docstring).
    loss : bool
        Append a ``loss`` layer on the 4 outputs (ParaDL's model is a regression; the loss
        layer stands for its cost, FLOPs counted as for cross-entropy).

    Returns
    -------
    LayerGraph

    Raises
    ------
    KeyError
        Unsupported ``input_size``.

    Examples
    --------
    >>> cosmoflow(1, input_size=512).layer("CONV_7").output_shape
    (1, 128, 1, 1, 1)
    """
    pads, strides = VARIANTS[input_size]
    name = "cosmoflow" if input_size == 128 else f"cosmoflow{input_size}"
    g = LayerGraph(name)
    x = g.input("Input", (batch_size, 4, input_size, input_size, input_size))
    for i, (c, k, p, s) in enumerate(zip(_CHANNELS, _KERNELS, pads, strides), start=1):
        x = g.elementwise(f"RELU_{i}", g.conv(f"CONV_{i}", x, c, k, stride=s, padding=p))
        if i < len(_CHANNELS):
            x = g.pool(f"APOOL_{i}", x, 2, kind="avg")
    x = g.flatten("flatten", x)
    x = g.elementwise("RELU_8", g.linear("FC_1", x, 2048))
    x = g.elementwise("RELU_9", g.linear("FC_2", x, 256))
    x = g.linear("FC_3", x, 4)
    if loss:
        g.loss("loss", x)
    return g
