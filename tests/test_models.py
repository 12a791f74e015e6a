"""Tests of the model zoo (milp_parallel.models).

Reference numbers
-----------------
``tests/data/torchvision_reference.json`` holds torchvision 0.28.0's parameter counts and
``torch.utils.flop_counter.FlopCounterMode`` totals at batch 1, measured beside torch 2.13.0+cpu
(see its ``provenance``). The script, run with the unpacked torchvision wheel on PYTHONPATH::

    import sys, types, torch
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("x")  # C ops won't load
    import torchvision.models as M
    from torch.utils.flop_counter import FlopCounterMode
    m = M.resnet50().eval()   # inception_v3(aux_logits=False, init_weights=False), 299x299
    with FlopCounterMode(display=False) as f, torch.no_grad():
        m(torch.zeros(1, 3, 224, 224))
    f.get_total_flops(), sum(p.numel() for p in m.parameters())

Independently of that file, every zoo model is also run layer by layer with torch functional ops
on the meta device (:func:`run_in_torch`): each layer's output shape must equal torch's, the
parameters created must equal ``param_count()``, and FlopCounterMode's total must equal
``matmul_flops()``; this covers the models torchvision does not have (LeNet-5, CosmoFlow,
BERT-base).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from milp_parallel import models
from milp_parallel.errors import InvalidGraphError, UnknownNameError
from milp_parallel.graph import LayerGraph
from milp_parallel.models.transformer import bert, encoder_params

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:  # pragma: no cover
    torch = None

TORCHVISION_PARAMS = {
    "alexnet": 61_100_840, "vgg16": 138_357_544, "vgg19": 143_667_240,
    "resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032,
    "resnet101": 44_549_160, "resnet152": 60_192_808, "inception_v3": 23_834_568,
    "densenet121": 7_978_856, "mobilenet_v2": 3_504_872,
}
PARADL = Path(__file__).resolve().parents[1] / "data" / "paradl"
#: The transformers of issue 16 (their own tests: tests/test_transformer_models.py).
TRANSFORMERS = {"gpt_1.7b", "gpt_18.4b", "gpt_145.6b", "llama2_7b", "llama2_70b", "llama3_8b",
                "llama3_70b", "vit_b_16", "vit_l_16", "vit_h_14"}


@pytest.fixture(scope="session")
def zoo() -> dict[str, LayerGraph]:
    """Every zoo model at batch 1, built once."""
    return {n: models.get(n, batch_size=1) for n in models.names()}


@pytest.fixture(scope="session")
def reference() -> dict:
    text = (Path(__file__).parent / "data" / "torchvision_reference.json").read_text()
    return json.loads(text)


# ------------------------------------------------------------------ registry
def test_names_cover_the_brief():
    assert set(models.names()) == set(TORCHVISION_PARAMS) | {
        "lenet5", "cosmoflow", "cosmoflow512", "bert_base"} | TRANSFORMERS


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownNameError, match="'resnet51'.*resnet50.*bert_base") as e:
        models.get("resnet51")
    assert isinstance(e.value, KeyError)
    with pytest.raises(UnknownNameError):
        models.default_batch_size("nope")


def test_batch_size_default_and_errors():
    assert models.get("lenet5").batch_size == models.default_batch_size("lenet5") == 32
    assert models.get("lenet5", batch_size=3).batch_size == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidGraphError, match="lenet5"):
            models.get("lenet5", batch_size=bad)
    with pytest.raises(TypeError, match="alexnet"):
        models.get("alexnet", colour=True)


def test_options_reach_the_builder():
    g = models.get("resnet18", batch_size=2, num_classes=10, loss=False)
    assert g.layer("fc").output_shape == (2, 10)
    assert "loss" not in g
    with pytest.raises(InvalidGraphError, match="'features.12'|<= 0"):
        models.get("alexnet", image_size=32)


# ------------------------------------------------------------------ exact torchvision numbers
@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_param_counts_equal_torchvision(zoo, name):
    assert zoo[name].param_count() == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_matmul_flops_equal_flop_counter_on_torchvision(zoo, reference, name):
    ref = reference["models"][name]
    assert ref["params"] == TORCHVISION_PARAMS[name]
    g = zoo[name]
    assert g.layers[0].output_shape == tuple(ref["input"])
    assert g.matmul_flops() == ref["flops"]
    conv = sum(L.flops for L in g.layers if L.op == "conv")
    assert conv == ref["by_op"]["aten.convolution"]


def test_published_sanity_values(zoo):
    """Well-known MAC counts (GMACs = FLOPs / 2), approximate by nature."""
    for name, gmacs in {"resnet50": 4.09, "vgg16": 15.47, "alexnet": 0.71,
                        "mobilenet_v2": 0.30, "inception_v3": 5.71}.items():
        assert zoo[name].matmul_flops() / 2e9 == pytest.approx(gmacs, rel=0.02)


def test_readable_torchvision_names(zoo):
    r = zoo["resnet50"]
    for n in ("conv1", "bn1", "maxpool", "layer3.2.conv2", "layer2.0.downsample.0", "fc"):
        assert n in r
    assert r.layer("layer4.2.conv3").output_shape == (1, 2048, 7, 7)
    assert "Mixed_6e.branch7x7dbl_5.conv" in zoo["inception_v3"]
    assert zoo["inception_v3"].layer("Mixed_7c.concat").output_shape == (1, 2048, 8, 8)
    assert "features.denseblock4.denselayer16.conv2" in zoo["densenet121"]
    assert zoo["mobilenet_v2"].layer("features.17.conv.1.0").attrs["groups"] == 960


# ------------------------------------------------------------------ other models
def test_lenet_by_hand(zoo):
    g = zoo["lenet5"]
    assert g.param_count() == 156 + 2416 + 48120 + 10164 + 850
    assert g.layer("flatten").output_shape == (1, 400)


def test_bert_params_match_formula(zoo):
    g = zoo["bert_base"]
    assert encoder_params() == 108_891_648
    assert g.param_count() - g.layer("classifier").params == encoder_params()
    assert g.layer("classifier").params == 768 * 2 + 2
    small = bert(2, seq_len=16, layers=3, hidden=64, heads=4, ffn=128, vocab=100,
                 max_positions=32)
    assert small.param_count() - small.layer("classifier").params == encoder_params(
        3, 64, 128, 100, 32)
    assert g.layer("encoder.layer.0.attention.self.scores").output_shape == (1, 12, 128, 128)
    # per layer: 4 HxH projections, 2 attention matmuls, FFN, per token; plus the classifier
    S, H, F = 128, 768, 3072
    per_layer = 2 * S * (4 * H * H + 2 * H * F) + 2 * 2 * S * S * H
    assert g.matmul_flops() == 12 * per_layer + 2 * S * H * 2
    assert models.get("bert_base", batch_size=1, seq_len=512).layer(
        "loss").input_shapes == ((1, 512, 2),)
    with pytest.raises(ValueError):
        bert(1, seq_len=513)


def _paradl_rows(path: Path) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 4 or line.startswith("#"):
            continue
        shape = tuple(int(v) for v in parts[3].split("x"))
        weights = tuple(int(v) for v in parts[2].split("x"))
        rows.append((parts[0], weights, shape))
    return rows


@pytest.mark.skipif(not (PARADL / "COSMOFLOW.net").exists(), reason="ParaDL tables absent")
def test_cosmoflow512_reproduces_paradl_table(zoo):
    g = zoo["cosmoflow512"]
    assert g.layers[0].output_shape == (1, 4, 512, 512, 512)
    convs = [L for L in g.layers if L.op in ("conv", "pool", "linear")]
    rows = [r for r in _paradl_rows(PARADL / "COSMOFLOW.net") if not r[0].startswith("RELU")]
    assert len(convs) == len(rows)
    for L, (name, weights, shape) in zip(convs, rows):
        assert L.name.split("_")[0] == name.split("_")[0]
        got = L.output_shape[1:]
        assert got + (1,) * (len(shape) - len(got)) == shape, L.name
        if L.op == "conv":
            assert (L.input_shapes[0][1], L.attrs["out_channels"]) + L.attrs["kernel"] == weights


def test_cosmoflow128_shapes(zoo):
    g = zoo["cosmoflow"]
    assert g.layers[0].output_shape == (1, 4, 128, 128, 128)
    assert g.layer("CONV_7").output_shape == (1, 128, 1, 1, 1)
    assert g.layer("FC_3").output_shape == (1, 4)
    assert g.layer("CONV_1").dims == ("n", "c", "d", "h", "w")
    assert g.layer("CONV_1").parallel_dims == ("n", "c", "d", "h", "w")
    assert g.param_count() == zoo["cosmoflow512"].param_count()


# ------------------------------------------------------------------ generic properties
@pytest.mark.parametrize("name", models.names())
def test_json_round_trip(zoo, name, tmp_path):
    g = zoo[name]
    p = tmp_path / f"{name}.json"
    g.save(p)
    assert LayerGraph.load(p) == g


@pytest.mark.parametrize("name", ["resnet18", "inception_v3", "bert_base", "cosmoflow"])
def test_with_batch_size(zoo, name):
    g = zoo[name]
    h = g.with_batch_size(16)
    assert h.batch_size == 16
    assert all(L.output_shape[0] == 16 for L in h.layers)
    assert h.param_count() == g.param_count() and h.matmul_flops() == g.matmul_flops()
    assert models.get(name, batch_size=16) == h


def test_every_layer_well_formed(zoo):
    for g in zoo.values():
        assert g.output_names == ("loss",)
        for L in g.layers:
            assert len(L.dims) == len(L.output_shape) == len(set(L.dims))
            assert set(L.parallel_dims) <= set(L.dims)
            assert set(L.weight_split_dims) <= set(L.parallel_dims)
            assert L.params == 0 or L.weight_split_dims or L.op in ("layernorm", "rmsnorm")


# ------------------------------------------------------------------ torch cross-check
def run_in_torch(g: LayerGraph) -> tuple[dict, int, int]:
    """Run ``g`` with torch functional ops on the meta device.

    Returns
    -------
    (shapes, params, flops) : per-layer output shapes, parameters created, FlopCounterMode's
    total.
    """
    meta = {"device": "meta"}
    out: dict[str, torch.Tensor] = {}
    weights: dict[str, torch.Tensor] = {}
    params = 0

    def w(*shape):
        nonlocal params
        params += math.prod(shape)
        return torch.empty(shape, **meta)

    with FlopCounterMode(display=False) as fc, torch.no_grad():
        for L in g.layers:
            xs = [out[v] for v in L.inputs]
            x = xs[0] if xs else None
            a = L.attrs
            op = L.op
            if op == "input":
                dt = torch.long if L.dims[-1] == "s" else torch.float32
                y = torch.zeros(L.output_shape, dtype=dt, **meta)
            elif op == "conv":
                nd = len(a["kernel"])
                cw = w(a["out_channels"], x.shape[1] // a["groups"], *a["kernel"])
                cb = w(a["out_channels"]) if a["bias"] else None
                y = getattr(F, f"conv{nd}d")(x, cw, cb, a["stride"], a["padding"],
                                             a["dilation"], a["groups"])
            elif op == "pool":
                nd = len(a["kernel"])
                fn = getattr(F, f"{a['kind']}_pool{nd}d")
                y = fn(x, a["kernel"], a["stride"], a["padding"], ceil_mode=a["ceil_mode"])
            elif op in ("adaptive_pool", "global_pool"):
                nd = x.dim() - 2
                size = a["output_size"] if op == "adaptive_pool" else (1,) * nd
                y = getattr(F, f"adaptive_{a['kind']}_pool{nd}d")(x, size)
            elif op == "linear":
                weight = weights[a["tied_to"]] if "tied_to" in a else \
                    w(a["out_features"], a["in_features"])
                y = F.linear(x, weight, w(a["out_features"]) if a["bias"] else None)
            elif op == "rmsnorm":
                y = F.rms_norm(x, (x.shape[-1],), w(x.shape[-1]))
            elif op == "attention":
                n, s_, _ = x.shape
                hq, g_, d = a["heads"], a["kv_heads"], a["head_dim"]
                packed = x.reshape(n, s_, g_, hq // g_ + 2, d)
                q = packed[:, :, :, :-2].reshape(n, s_, hq, d).transpose(1, 2)
                k = packed[:, :, :, -2:-1].expand(n, s_, g_, hq // g_, d).reshape(
                    n, s_, hq, d).transpose(1, 2)
                v = k
                y = torch.matmul(torch.softmax(torch.matmul(q, k.transpose(2, 3)), -1), v)
                y = y.transpose(1, 2).reshape(n, s_, hq * d)
            elif op == "slice":
                y = x.narrow(L.dims.index(a["dim"]), a["start"], a["stop"] - a["start"])
            elif op == "batchnorm":
                c = x.shape[1]
                y = F.batch_norm(x, torch.empty(c, **meta), torch.empty(c, **meta), w(c), w(c))
            elif op == "layernorm":
                c = x.shape[-1]
                y = F.layer_norm(x, (c,), w(c), w(c))
            elif op in ("elementwise", "dropout"):
                y = F.relu(x)
            elif op in ("add", "mul"):
                y = xs[0]
                for z in xs[1:]:
                    y = y + z if op == "add" else y * z
            elif op == "concat":
                y = torch.cat(xs, dim=L.dims.index(a["dim"]))
            elif op == "flatten":
                y = torch.flatten(x, 1)
            elif op == "reshape":
                y = x.reshape(x.shape[0], *a["shape"])
            elif op == "transpose":
                y = x.permute(*a["perm"])
            elif op == "softmax":
                y = F.softmax(x, dim=-1)
            elif op == "loss":
                y = torch.logsumexp(x, dim=-1).reshape(x.shape[0], -1).sum(1)
            elif op == "embedding":
                weights[L.name] = w(a["vocab"], a["dim"])
                y = F.embedding(x, weights[L.name])
            elif op == "matmul":
                y = torch.matmul(xs[0], xs[1])
            else:  # pragma: no cover
                raise AssertionError(f"no torch rule for {op}")
            out[L.name] = y
    return {k: tuple(v.shape) for k, v in out.items()}, params, fc.get_total_flops()


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name", models.names())
def test_zoo_shapes_params_flops_match_torch(zoo, name):
    g = zoo[name]
    shapes, params, flops = run_in_torch(g)
    for L in g.layers:
        assert shapes[L.name] == L.output_shape, L.name
    assert params == g.param_count()
    assert flops == g.matmul_flops()
