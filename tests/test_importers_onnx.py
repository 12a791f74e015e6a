"""from_onnx: ONNX graphs (hand-built with onnx.helper, and exported by torch) into LayerGraphs."""

from __future__ import annotations

import io
import logging
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from milp_parallel.errors import FormatError, InvalidGraphError  # noqa: E402
from milp_parallel.importers import MissingDependencyError, from_onnx  # noqa: E402


def _init(name, *shape, dtype=np.float32):
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _x(name="x", shape=("N", 3, 8, 8), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _y(name="y"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def _cnn():
    """conv(bias) -> bn -> relu -> maxpool -> conv(stride 2, no bias) + residual-free
    -> global pool -> flatten -> gemm -> softmax, with a symbolic batch."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4,
                         kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"],
                         name="bn1"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu1"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv2", strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["gp"], name="gap"),
        helper.make_node("Flatten", ["gp"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["fc"], name="fc", transB=1),
        helper.make_node("Softmax", ["fc"], ["y"], name="softmax", axis=-1),
    ]
    inits = [_init("w1", 8, 3, 3, 3), _init("b1", 8), _init("s", 8), _init("bb", 8),
             _init("m", 8), _init("v", 8), _init("w2", 16, 8, 3, 3), _init("wf", 10, 16),
             _init("bf", 10)]
    return _model(nodes, [_x()], [_y()], inits)


def test_hand_built_cnn():
    g = from_onnx(_cnn(), batch_size=4)
    assert [L.op for L in g.layers] == ["input", "conv", "batchnorm", "elementwise", "pool",
                                        "conv", "global_pool", "flatten", "linear", "softmax"]
    assert g.batch_size == 4
    assert g.layer("conv1").params == 8 * 27 + 8
    assert g.layer("conv2").params == 16 * 8 * 9
    assert g.layer("conv2").output_shape == (4, 16, 2, 2)
    assert g.layer("fc").params == 16 * 10 + 10
    assert g.param_count() == 8 * 28 + 16 + 16 * 72 + 170
    assert g.edges[-1] == ("fc", "softmax", 0)


def test_batch_size_default_and_static_rebatch(tmp_path):
    assert from_onnx(_cnn()).batch_size == 1  # symbolic batch, no batch_size
    model = _cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    assert from_onnx(path).batch_size == 2
    rebatched = from_onnx(str(path), batch_size=6)
    assert rebatched.batch_size == 6 and rebatched.layer("fc").output_shape == (6, 10)
    assert from_onnx(path.read_bytes(), batch_size=3).layer("conv1").output_shape[0] == 3


def test_matmul_add_fuses_into_biased_linear_and_gather_is_embedding():
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        helper.make_node("MatMul", ["e", "w"], ["mm"], name="proj"),
        helper.make_node("Add", ["mm", "b"], ["a"], name="proj_bias"),
        helper.make_node("Transpose", ["a"], ["t"], name="tr", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["a", "t"], ["y"], name="scores"),
    ]
    inits = [_init("table", 100, 12), _init("w", 12, 6), _init("b", 6)]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 5])
    g = from_onnx(_model(nodes, [ids], [_y()], inits), batch_size=2)
    assert g.layer("ids").dims == ("n", "s")
    assert g.layer("embed").op == "embedding" and g.layer("embed").params == 1200
    assert g.layer("proj").op == "linear" and g.layer("proj").params == 12 * 6 + 6
    assert "proj_bias" not in g  # fused
    assert g.layer("tr").op == "transpose"
    assert g.layer("scores").op == "matmul" and g.layer("scores").output_shape == (2, 5, 5)
    assert g.layer("scores").inputs == ("proj", "tr")


def test_elementwise_binary_and_concat():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Sigmoid", ["x"], ["b"], name="b"),
        helper.make_node("Mul", ["b", "half"], ["c"], name="scale"),
        helper.make_node("Add", ["a", "c"], ["d"], name="sum"),
        helper.make_node("Concat", ["d", "a"], ["e"], name="cat", axis=1),
        helper.make_node("Dropout", ["e"], ["y"], name="drop"),
    ]
    g = from_onnx(_model(nodes, [_x()], [_y()], [_init("half", 1)]))
    assert g.layer("scale").op == "elementwise" and g.layer("scale").attrs["fn"] == "mul"
    assert g.layer("sum").op == "add" and g.layer("sum").inputs == ("a", "scale")
    assert g.layer("cat").output_shape == (1, 6, 8, 8) and g.layer("cat").attrs["dim"] == "c"
    assert g.layer("drop").op == "dropout"


def _unsupported_model():
    nodes = [
        helper.make_node("LRN", ["x"], ["a"], name="lrn1", size=3),
        helper.make_node("InstanceNormalization", ["a", "s", "b"], ["c"], name="inorm"),
        helper.make_node("LRN", ["c"], ["y"], name="lrn2", size=3),
    ]
    return _model(nodes, [_x()], [_y()], [_init("s", 3), _init("b", 3)])


def test_unsupported_ops_are_all_listed():
    with pytest.raises(InvalidGraphError) as info:
        from_onnx(_unsupported_model())
    msg = str(info.value)
    assert "InstanceNormalization: inorm" in msg and "LRN: lrn1, lrn2" in msg


def test_unknown_elementwise(caplog):
    with caplog.at_level(logging.WARNING, logger="milp_parallel.importers.onnx"):
        g = from_onnx(_unsupported_model(), unknown="elementwise")
    assert [g.layer(n).attrs["fn"] for n in ("lrn1", "inorm", "lrn2")] == [
        "lrn", "instancenormalization", "lrn"]
    assert "lrn1" in caplog.text
    # a custom op has no shape after inference: the error names the tensor
    nodes = [helper.make_node("Blur", ["x"], ["y"], name="blur", domain="my.ops")]
    model = _model(nodes, [_x()], [_y()])
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(InvalidGraphError, match="'y'.*unknown after shape inference"):
        from_onnx(model, unknown="elementwise")


def test_symbolic_non_batch_dim_and_bad_inputs(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    with pytest.raises(InvalidGraphError, match="'L' at axis 2"):
        from_onnx(_model(nodes, [_x(shape=("N", 3, "L"))], [_y()]))
    with pytest.raises(FormatError, match="does not exist"):
        from_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 not a protobuf")
    with pytest.raises(FormatError, match="bad.onnx"):
        from_onnx(bad)
    with pytest.raises(FormatError, match="unknown"):
        from_onnx(_cnn(), unknown="ignore")
    with pytest.raises(FormatError, match="batch_size"):
        from_onnx(_cnn(), batch_size=0)


def test_missing_onnx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(MissingDependencyError, match=r"milp_parallel\[onnx\]"):
        from_onnx("model.onnx")


def test_importer_modules_do_not_shadow_the_real_packages():
    import importlib

    import milp_parallel.importers.onnx  # noqa: F401
    import milp_parallel.importers.torch  # noqa: F401

    assert importlib.import_module("onnx") is onnx and hasattr(onnx, "ModelProto")
    assert importlib.import_module("milp_parallel.importers.onnx").__name__ != "onnx"


# ----------------------------------------------------------------------------- torch export
torch = pytest.importorskip("torch")


def _export(module, x):
    buf = io.BytesIO()
    module.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}}, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    return buf.getvalue()


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU())
        self.branch = nn.Conv2d(8, 8, 1)
        self.down = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                                  nn.Linear(16, 10))

    def forward(self, x):
        x = self.stem(x)
        y = torch.cat([x, torch.relu(self.branch(x))], dim=1)
        y = self.pool(self.down(y)) + 1.0
        return self.head(y)


def test_exported_cnn_equals_from_torch():
    from milp_parallel.importers import from_torch

    net = SmallCNN()
    x = torch.randn(2, 3, 16, 16)
    gt = from_torch(net, x)
    go = from_onnx(_export(net, x), batch_size=2)
    assert go.param_count() == gt.param_count() == sum(p.numel() for p in net.parameters())
    assert go.matmul_flops() == gt.matmul_flops()
    assert go.flops() == gt.flops()
    assert [(L.op, L.output_shape) for L in go.layers] == \
        [(L.op, L.output_shape) for L in gt.layers]
    assert [(gt.names.index(u), gt.names.index(v), i) for u, v, i in gt.edges] == \
        [(go.names.index(u), go.names.index(v), i) for u, v, i in go.edges]


@pytest.mark.slow
def test_exported_resnet18_equals_from_torch():
    from test_importers_torch import ResNet

    from milp_parallel.importers import from_torch

    net = ResNet()
    x = torch.randn(1, 3, 64, 64)
    gt = from_torch(net, x)
    go = from_onnx(_export(net, x), batch_size=8)
    assert go.batch_size == 8
    assert go.param_count() == gt.param_count() == 11_689_512
    assert go.matmul_flops() == gt.matmul_flops()
    assert [L.op for L in go.layers] == [L.op for L in gt.layers]
