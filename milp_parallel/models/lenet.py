"""LeNet-5 (LeCun et al., 1998) on 1x32x32 images, with ReLU and max pooling.

conv1 (6, 5x5) -> pool -> conv2 (16, 5x5) -> pool -> fc1 120 -> fc2 84 -> fc3 10: 61,706
parameters.
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["lenet5"]


def lenet5(batch_size: int = 32, *, num_classes: int = 10, loss: bool = True) -> LayerGraph:
    """Build LeNet-5.

    Parameters
    ----------
    batch_size : int
        Samples per step.
    num_classes : int
        Outputs of the last layer.
    loss : bool
        Append a cross-entropy ``loss`` layer.

    Returns
    -------
    LayerGraph

    Examples
    --------
    >>> lenet5(1).param_count()
    61706
    """
    g = LayerGraph("lenet5")
    x = g.input("input", (batch_size, 1, 32, 32))
    x = g.elementwise("relu1", g.conv("conv1", x, 6, 5))
    x = g.pool("pool1", x, 2)
    x = g.elementwise("relu2", g.conv("conv2", x, 16, 5))
    x = g.pool("pool2", x, 2)
    x = g.flatten("flatten", x)
    x = g.elementwise("relu3", g.linear("fc1", x, 120))
    x = g.elementwise("relu4", g.linear("fc2", x, 84))
    x = g.linear("fc3", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g
