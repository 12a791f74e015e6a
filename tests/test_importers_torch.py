"""from_torch: torch.fx tracing into LayerGraphs, checked against torch itself and the zoo."""

from __future__ import annotations

import logging
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from milp_parallel.errors import FormatError, InvalidGraphError  # noqa: E402
from milp_parallel.importers import MissingDependencyError, from_torch  # noqa: E402


# ----------------------------------------------------------------------------- models
# torchvision's ResNet-18 and AlexNet, written out (torchvision is not a dependency).
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000, width=64):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(2 * width, layers[1], 2)
        self.layer3 = self._make_layer(4 * width, layers[2], 2)
        self.layer4 = self._make_layer(8 * width, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width, num_classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class AlexNet(nn.Module):
    def __init__(self, num_classes=1000, dropout=0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(p=dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


class Functional(nn.Module):
    """Functional calls, methods and operators rather than modules."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.fc = nn.Linear(8 * 4 * 4, 6)

    def forward(self, x):
        y = torch.cat([F.relu(self.a(x)), torch.sigmoid(self.b(x))], dim=1)
        y = F.max_pool2d(y, 2) * 0.5
        y = y.view(y.size(0), -1)
        y = self.fc(y)
        z = y.reshape(y.shape[0], 2, 3)
        w = torch.matmul(z.transpose(1, 2), z)  # (N, 3, 3)
        return F.softmax(w.flatten(1), dim=-1)


def _flop_count(module, x):
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(x)
    return counter.get_total_flops()


# ----------------------------------------------------------------------------- tests
def test_resnet18_matches_torch_params_and_flop_counter():
    net = ResNet()
    x = torch.randn(1, 3, 64, 64)
    g = from_torch(net, x)
    assert g.param_count() == sum(p.numel() for p in net.parameters()) == 11_689_512
    assert g.matmul_flops() == _flop_count(net, x)
    ops = [L.op for L in g.layers]
    assert ops.count("conv") == 20 and ops.count("batchnorm") == 20
    assert ops.count("add") == 8 and ops.count("linear") == 1
    # the residual add consumes the block input (or the downsample) as its second input
    add = g.layer("add")
    assert add.inputs == ("layer1.0.bn2", "maxpool")
    assert g.layer("fc").output_shape == (1, 1000)


def test_alexnet_matches_torch_params_and_flop_counter():
    net = AlexNet()
    x = torch.randn(2, 3, 224, 224)
    g = from_torch(net, x)
    assert g.batch_size == 2
    assert g.param_count() == sum(p.numel() for p in net.parameters()) == 61_100_840
    assert g.matmul_flops() * 2 == _flop_count(net, x)
    assert g.layer("avgpool").op == "adaptive_pool"
    assert [L.op for L in g.layers].count("dropout") == 2


def test_functional_calls_methods_and_operators():
    net = Functional()
    x = torch.randn(3, 3, 8, 8)
    g = from_torch(net, x)
    by_op = {}
    for L in g.layers:
        by_op.setdefault(L.op, []).append(L)
    assert {"concat", "pool", "elementwise", "reshape", "transpose", "matmul",
            "softmax", "flatten", "linear"} <= set(by_op)
    cat = by_op["concat"][0]
    assert cat.attrs["dim"] == "c" and cat.output_shape == (3, 8, 8, 8)
    assert {L.attrs["fn"] for L in by_op["elementwise"]} >= {"relu", "sigmoid", "mul"}
    mm = by_op["matmul"][0]
    assert mm.output_shape == (3, 3, 3) and mm.flops == 2 * 3 * 2 * 3
    assert by_op["transpose"][0].attrs["perm"] == (0, 2, 1)
    assert g.param_count() == sum(p.numel() for p in net.parameters())
    assert g.matmul_flops() * 3 == _flop_count(net, x)
    g.validate()


def test_embedding_input_gets_sequence_dims():
    class Tok(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.norm = nn.LayerNorm(16)
            self.fc = nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(F.gelu(self.norm(self.emb(ids))))

    g = from_torch(Tok(), torch.randint(0, 50, (2, 7)))
    assert g.layer("ids").dims == ("n", "s")
    assert g.layer("emb").output_shape == (2, 7, 16)
    assert g.layer("fc").output_shape == (2, 7, 4)
    assert g.param_count() == 50 * 16 + 2 * 16 + 16 * 4 + 4


def test_training_flag_is_restored():
    net = AlexNet(num_classes=10).train()
    from_torch(net, torch.randn(1, 3, 96, 96))
    assert net.training
    net.eval()
    from_torch(net, torch.randn(1, 3, 96, 96))
    assert not net.training


class _Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, 4)
        self.gn2 = nn.GroupNorm(2, 4)
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):
        return self.up(self.gn2(self.gn1(self.conv(x))))


def test_unsupported_modules_are_all_listed():
    with pytest.raises(InvalidGraphError) as info:
        from_torch(_Unsupported(), torch.randn(1, 3, 8, 8))
    msg = str(info.value)
    assert "GroupNorm: gn1, gn2" in msg and "Upsample: up" in msg
    assert "unknown='elementwise'" in msg


def test_unknown_elementwise_imports_shape_preserving_and_rejects_others(caplog):
    class OnlyGN(_Unsupported):
        def forward(self, x):
            return self.gn2(self.gn1(self.conv(x)))

    with caplog.at_level(logging.WARNING, logger="milp_parallel.importers.torch"):
        g = from_torch(OnlyGN(), torch.randn(1, 3, 8, 8), unknown="elementwise")
    assert [g.layer(n).attrs["fn"] for n in ("gn1", "gn2")] == ["groupnorm", "groupnorm"]
    assert "unsupported" in caplog.text
    with pytest.raises(InvalidGraphError, match="changes the shape"):
        from_torch(_Unsupported(), torch.randn(1, 3, 8, 8), unknown="elementwise")


def test_untraceable_model_suggests_onnx():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(InvalidGraphError, match="from_onnx"):
        from_torch(Branchy(), torch.randn(1, 3))


def test_bad_arguments():
    with pytest.raises(FormatError, match="torch.nn.Module"):
        from_torch(lambda x: x, torch.randn(1, 3))
    with pytest.raises(FormatError, match="tensor"):
        from_torch(nn.ReLU(), [1, 2, 3])
    with pytest.raises(FormatError, match="unknown"):
        from_torch(nn.ReLU(), torch.randn(1, 3), unknown="skip")


def test_batch_merging_reshape_is_rejected():
    class Merge(nn.Module):
        def forward(self, x):
            return x.reshape(-1, 3)

    with pytest.raises(InvalidGraphError, match="batch"):
        from_torch(Merge(), torch.randn(2, 2, 3))


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"milp_parallel\[torch\]") as info:
        from_torch(object(), None)
    assert isinstance(info.value, ImportError)


# ----------------------------------------------------------------------------- zoo parity
def _zoo(name):
    models = pytest.importorskip("milp_parallel.models")
    from milp_parallel.errors import UnknownNameError

    try:
        return models.get(name)
    except UnknownNameError as exc:
        pytest.skip(f"zoo has no {name}: {exc}")


@pytest.mark.parametrize("name, factory", [("resnet18", ResNet), ("alexnet", AlexNet)])
def test_imported_models_match_the_zoo(name, factory):
    zoo = _zoo(name)
    (inp,) = [L for L in zoo.layers if L.op == "input"]
    g = from_torch(factory(), torch.randn(1, *inp.output_shape[1:]))
    assert g.param_count() == zoo.param_count()
    assert g.matmul_flops() == zoo.matmul_flops()
    assert sorted(L.output_shape[1:] for L in g.layers if L.op in ("conv", "linear")) == \
        sorted(L.output_shape[1:] for L in zoo.layers if L.op in ("conv", "linear"))


@pytest.mark.parametrize("name", ["resnet18", "alexnet"])
def test_torchvision_models_when_available(name):
    tv = pytest.importorskip("torchvision")
    net = getattr(tv.models, name)(weights=None)
    x = torch.randn(1, 3, 224, 224)
    g = from_torch(net, x)
    assert g.param_count() == sum(p.numel() for p in net.parameters())
    assert g.matmul_flops() == _flop_count(net, x)
