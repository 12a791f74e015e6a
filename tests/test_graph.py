"""Tests of milp_parallel.graph: shape inference, params, FLOPs, input regions, validation,
JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel.errors import FormatError, InvalidGraphError
from milp_parallel.graph import OPS, Layer, LayerGraph

try:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def img(shape=(2, 3, 32, 32)):
    g = LayerGraph("t")
    g.input("x", shape)
    return g


# ------------------------------------------------------------------ shape inference
def test_conv2d_shape_params_flops_by_hand():
    g = img((2, 3, 224, 224))
    g.conv("conv1", "x", 64, 7, stride=2, padding=3, bias=False)
    L = g.layer("conv1")
    assert L.output_shape == (2, 64, 112, 112)
    assert L.dims == ("n", "c", "h", "w")
    assert L.params == 64 * 3 * 7 * 7
    assert L.flops == 2 * 64 * 112 * 112 * 3 * 49
    assert L.parallel_dims == ("n", "c", "h", "w")
    assert L.weight_split_dims == ("c",)
    assert L.input_shapes == ((2, 3, 224, 224),)


def test_conv_dilation_groups_bias():
    g = img((1, 8, 20, 20))
    g.conv("c", "x", 16, 3, dilation=2, groups=4)
    L = g.layer("c")
    assert L.output_shape == (1, 16, 16, 16)  # 20 - 2*2 = 16
    assert L.params == 16 * 2 * 9 + 16
    assert L.flops == 2 * 16 * 16 * 16 * 2 * 9


def test_conv1d_and_conv3d():
    g = LayerGraph()
    g.input("x", (1, 4, 50))
    g.conv("c", "x", 8, 5, stride=3)
    assert g.layer("c").output_shape == (1, 8, 16)
    assert g.layer("c").dims == ("n", "c", "w")
    h = LayerGraph()
    h.input("x", (1, 4, 10, 12, 14))
    h.conv("c", "x", 2, (3, 1, 2), padding=(1, 0, 0))
    assert h.layer("c").output_shape == (1, 2, 10, 12, 13)
    assert h.layer("c").dims == ("n", "c", "d", "h", "w")
    assert h.layer("c").params == 2 * 4 * 6 + 2


def test_pool_ceil_mode_and_defaults():
    g = img((1, 64, 148, 148))
    g.pool("p", "x", 3, stride=2)
    assert g.layer("p").output_shape == (1, 64, 73, 73)
    g.pool("q", "x", 3, stride=2, ceil_mode=True)
    assert g.layer("q").output_shape == (1, 64, 74, 74)
    g.pool("r", "x", 2, kind="avg")  # stride defaults to kernel
    assert g.layer("r").output_shape == (1, 64, 74, 74)
    assert g.layer("r").flops == 64 * 74 * 74 * 4
    assert g.layer("r").params == 0 and g.layer("r").weight_split_dims == ()


def test_adaptive_and_global_pool():
    g = img((1, 256, 6, 6))
    g.adaptive_pool("a", "x", (6, 6))
    assert g.layer("a").output_shape == (1, 256, 6, 6)
    assert g.layer("a").flops == 256 * 36
    g2 = img((1, 2, 5, 7))
    g2.adaptive_pool("a", "x", 3)
    # windows over 5 -> [0,2),[1,4),[3,5) sizes 2,3,2; over 7 -> [0,3),[2,5),[4,7) sizes 3,3,3
    assert g2.layer("a").flops == 2 * 7 * 9
    g2.global_pool("gp", "x")
    assert g2.layer("gp").output_shape == (1, 2, 1, 1)
    assert g2.layer("gp").parallel_dims == ("n", "c")


def test_linear_on_last_dim_and_sequence_inputs():
    g = LayerGraph()
    g.input("x", (2, 7, 16), dims="nsc")
    g.linear("fc", "x", 32)
    L = g.layer("fc")
    assert L.output_shape == (2, 7, 32)
    assert L.dims == ("n", "s", "c")
    assert L.params == 16 * 32 + 32
    assert L.flops == 2 * 7 * 16 * 32
    assert L.weight_split_dims == ("c",)


def test_norms_elementwise_and_friends():
    g = img((2, 8, 4, 4))
    g.batchnorm("bn", "x")
    assert g.layer("bn").params == 16
    assert g.layer("bn").weight_split_dims == ("c",)
    g.elementwise("r", "bn", fn="gelu")
    assert g.layer("r").flops == 8 * 16
    g.add("s", "r", "bn", "x")
    assert g.layer("s").flops == 2 * 8 * 16
    g.dropout("d", "s", p=0.1)
    g.flatten("f", "d")
    assert g.layer("f").output_shape == (2, 128)
    assert g.layer("f").parallel_dims == ("n",)
    g.linear("fc", "f", 10)
    g.softmax("sm", "fc")
    assert g.layer("sm").parallel_dims == ("n",)
    g.loss("loss", "fc")
    assert g.layer("loss").output_shape == (2,)
    h = LayerGraph()
    h.input("x", (2, 5, 12), dims="nsc")
    h.layernorm("ln", "x")
    assert h.layer("ln").params == 24
    assert h.layer("ln").parallel_dims == ("n", "s")
    assert h.layer("ln").weight_split_dims == ()


def test_concat_reshape_transpose_mul():
    g = img((2, 3, 8, 8))
    g.conv("a", "x", 4, 1)
    g.conv("b", "x", 5, 1)
    g.concat("cat", ["a", "b", "x"])
    assert g.layer("cat").output_shape == (2, 12, 8, 8)
    g.concat("cat_w", ["a", "a"], dim="w")
    assert g.layer("cat_w").output_shape == (2, 4, 8, 16)
    g.reshape("r", "cat", (12, -1), dims="nsc")
    assert g.layer("r").output_shape == (2, 12, 64)
    g.transpose("t", "r", (0, 2, 1))
    assert g.layer("t").output_shape == (2, 64, 12)
    assert g.layer("t").dims == ("n", "c", "s")
    g.global_pool("gp", "a")
    g.mul("m", "a", "gp")  # squeeze-excite style broadcast
    assert g.layer("m").output_shape == (2, 4, 8, 8)


def test_embedding_and_attention_matmul():
    g = LayerGraph()
    g.input("ids", (2, 10), dims="ns")
    g.embedding("emb", "ids", 100, 12)
    assert g.layer("emb").output_shape == (2, 10, 12)
    assert g.layer("emb").dims == ("n", "s", "c")
    assert g.layer("emb").params == 1200
    g.reshape("q", "emb", (10, 3, 4), dims="nsac")
    g.transpose("qt", "q", (0, 2, 1, 3))                    # (N, A, S, Dh)
    g.transpose("kt", "q", (0, 2, 3, 1), dims="nact")       # (N, A, Dh, S)
    g.matmul("scores", "qt", "kt")
    L = g.layer("scores")
    assert L.output_shape == (2, 3, 10, 10)
    assert L.dims == ("n", "a", "s", "t")
    assert L.flops == 2 * 3 * 10 * 4 * 10
    assert g.matmul_flops() == L.flops


def test_matmul_dims_never_repeat():
    g = LayerGraph()
    g.input("a", (1, 3, 4), dims="nsc")
    g.input("b", (1, 4, 3), dims="ncs")
    g.matmul("m", "a", "b")
    assert len(set(g.layer("m").dims)) == 3


@needs_torch
@settings(max_examples=40, deadline=None)
@given(nd=st.integers(1, 3), size=st.integers(5, 14), cin=st.sampled_from([2, 4]),
       g=st.sampled_from([1, 2]), k=st.integers(1, 4), s=st.integers(1, 3),
       p=st.integers(0, 2), d=st.integers(1, 2), bias=st.booleans())
def test_conv_matches_torch_shape_params_and_flops(nd, size, cin, g, k, s, p, d, bias):
    if size + 2 * p - d * (k - 1) - 1 < 0:
        return
    conv = [torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d][nd - 1](
        cin, 4, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
    x = torch.zeros((1, cin) + (size,) * nd)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        y = conv(x)
    lg = LayerGraph()
    lg.input("x", tuple(x.shape))
    lg.conv("c", "x", 4, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
    L = lg.layer("c")
    assert L.output_shape == tuple(y.shape)
    assert L.params == sum(t.numel() for t in conv.parameters())
    assert L.flops == fc.get_total_flops()


@needs_torch
@settings(max_examples=40, deadline=None)
@given(nd=st.integers(2, 3), size=st.integers(3, 15), k=st.integers(1, 4),
       s=st.integers(1, 3), p=st.integers(0, 2), ceil=st.booleans(),
       kind=st.sampled_from(["max", "avg"]))
def test_pool_matches_torch_shape(nd, size, k, s, p, ceil, kind):
    if p > k // 2 or size < k:  # torch rejects inputs smaller than the kernel
        return
    cls = {("max", 2): torch.nn.MaxPool2d, ("max", 3): torch.nn.MaxPool3d,
           ("avg", 2): torch.nn.AvgPool2d, ("avg", 3): torch.nn.AvgPool3d}[kind, nd]
    y = cls(k, stride=s, padding=p, ceil_mode=ceil)(torch.zeros((1, 2) + (size,) * nd))
    lg = LayerGraph()
    lg.input("x", (1, 2) + (size,) * nd)
    lg.pool("p", "x", k, kind=kind, stride=s, padding=p, ceil_mode=ceil)
    assert lg.layer("p").output_shape == tuple(y.shape)


@needs_torch
@settings(max_examples=25, deadline=None)
@given(i=st.integers(1, 20), o=st.integers(1, 8))
def test_adaptive_pool_matches_torch_shape(i, o):
    y = torch.nn.AdaptiveAvgPool2d((o, o))(torch.zeros(1, 1, i, i + 1))
    lg = LayerGraph()
    lg.input("x", (1, 1, i, i + 1))
    lg.adaptive_pool("a", "x", o)
    assert lg.layer("a").output_shape == tuple(y.shape)


# ------------------------------------------------------------------ input regions
def test_conv_region_stride_padding_dilation_halo():
    g = img((1, 3, 20, 20))
    g.conv("c", "x", 8, 3, stride=2, padding=1, dilation=2)  # out (20+2-4-1)//2+1 = 9
    L = g.layer("c")
    assert L.output_shape == (1, 8, 9, 9)
    lo, hi = L.input_region(0, [0, 2, 3, 0], [1, 4, 5, 9])
    # rows [3*2-1, 4*2-1+2*2+1) = [5, 12); cols [-1 -> 0, 8*2-1+5=20); all input channels
    assert lo.tolist() == [0, 0, 5, 0]
    assert hi.tolist() == [1, 3, 12, 20]


def test_conv_region_groups_and_depthwise():
    g = img((1, 8, 6, 6))
    g.conv("dw", "x", 8, 3, padding=1, groups=8)
    g.conv("g2", "x", 4, 1, groups=2)
    lo, hi = g.layer("dw").input_region(0, [0, 3, 0, 0], [1, 5, 6, 6])
    assert (lo[1], hi[1]) == (3, 5)
    lo, hi = g.layer("g2").input_region(0, [0, 1, 0, 0], [1, 3, 6, 6])
    assert (lo[1], hi[1]) == (0, 8)  # output channels 1, 2 span both groups
    lo, hi = g.layer("g2").input_region(0, [0, 2, 0, 0], [1, 4, 6, 6])
    assert (lo[1], hi[1]) == (4, 8)


def test_region_vectorized_matches_scalar_calls():
    g = img((2, 3, 17, 17))
    g.conv("c", "x", 4, 5, stride=2, padding=2)
    L = g.layer("c")
    rng = np.random.default_rng(0)
    lo = rng.integers(0, 4, size=(5, 7, 4))
    hi = lo + rng.integers(1, 5, size=(5, 7, 4))
    hi = np.minimum(hi, L.output_shape)
    vlo, vhi = L.input_region(0, lo, hi)
    assert vlo.shape == (5, 7, 4)
    for idx in np.ndindex(5, 7):
        slo, shi = L.input_region(0, lo[idx], hi[idx])
        assert slo.tolist() == vlo[idx].tolist() and shi.tolist() == vhi[idx].tolist()


def test_region_is_what_the_output_needs_numerically():
    """Perturbing the input outside the region never changes the output box (conv, pool)."""
    if torch is None:
        pytest.skip("torch not installed")
    g = img((1, 2, 11, 11))
    g.conv("c", "x", 2, 3, stride=2, padding=1, dilation=2)
    g.pool("p", "x", 3, stride=2, padding=1, kind="avg")
    mods = {"c": torch.nn.Conv2d(2, 2, 3, stride=2, padding=1, dilation=2),
            "p": torch.nn.AvgPool2d(3, stride=2, padding=1)}
    x = torch.randn(1, 2, 11, 11)
    for name, mod in mods.items():
        L = g.layer(name)
        lo, hi = np.array([0, 0, 1, 2]), np.array([1, 2, 3, 4])
        ilo, ihi = L.input_region(0, lo, hi)
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[tuple(slice(a, b) for a, b in zip(ilo, ihi))] = False
        x2 = torch.where(mask, torch.randn_like(x), x)
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        with torch.no_grad():
            assert torch.allclose(mod(x)[box], mod(x2)[box])


def test_pool_linear_concat_flatten_regions():
    g = img((2, 4, 8, 8))
    g.pool("p", "x", 2)
    lo, hi = g.layer("p").input_region(0, [0, 1, 1, 0], [2, 3, 3, 4])
    assert lo.tolist() == [0, 1, 2, 0] and hi.tolist() == [2, 3, 6, 8]
    g.flatten("f", "x")
    lo, hi = g.layer("f").input_region(0, [1, 5], [2, 9])
    assert lo.tolist() == [1, 0, 0, 0] and hi.tolist() == [2, 4, 8, 8]
    g.linear("fc", "f", 10)
    lo, hi = g.layer("fc").input_region(0, [0, 3], [1, 7])
    assert lo.tolist() == [0, 0] and hi.tolist() == [1, 256]
    g.conv("a", "x", 3, 1)
    g.concat("cat", ["x", "a"])
    cat = g.layer("cat")
    lo, hi = cat.input_region(1, [0, 2, 0, 0], [2, 6, 8, 8])
    assert lo.tolist() == [0, 0, 0, 0] and hi.tolist() == [2, 2, 8, 8]
    lo, hi = cat.input_region(0, [0, 2, 0, 0], [2, 6, 8, 8])
    assert lo.tolist() == [0, 2, 0, 0] and hi.tolist() == [2, 4, 8, 8]
    lo, hi = cat.input_region(1, [0, 0, 0, 0], [2, 3, 8, 8])  # not touching input 1
    assert np.all(hi[1] == lo[1])
    g.elementwise("r", "x")
    lo, hi = g.layer("r").input_region(0, [0, 1, 2, 3], [1, 2, 3, 4])
    assert lo.tolist() == [0, 1, 2, 3] and hi.tolist() == [1, 2, 3, 4]
    g.loss("l", "fc")
    lo, hi = g.layer("l").input_region(0, [1], [2])
    assert lo.tolist() == [1, 0] and hi.tolist() == [2, 10]


def test_matmul_embedding_transpose_regions():
    g = LayerGraph()
    g.input("a", (1, 6, 4), dims="nsc")
    g.input("b", (1, 4, 5), dims="nct")
    g.matmul("m", "a", "b")
    L = g.layer("m")
    lo, hi = L.input_region(0, [0, 1, 2], [1, 3, 4])
    assert lo.tolist() == [0, 1, 0] and hi.tolist() == [1, 3, 4]
    lo, hi = L.input_region(1, [0, 1, 2], [1, 3, 4])
    assert lo.tolist() == [0, 0, 2] and hi.tolist() == [1, 4, 4]
    g.transpose("t", "a", (0, 2, 1))
    lo, hi = g.layer("t").input_region(0, [0, 1, 2], [1, 3, 5])
    assert lo.tolist() == [0, 2, 1] and hi.tolist() == [1, 5, 3]
    h = LayerGraph()
    h.input("ids", (2, 7), dims="ns")
    h.embedding("e", "ids", 50, 8)
    lo, hi = h.layer("e").input_region(0, [1, 2, 0], [2, 5, 4])
    assert lo.tolist() == [1, 2] and hi.tolist() == [2, 5]


def test_empty_box_and_bad_index():
    g = img((1, 3, 8, 8))
    g.conv("c", "x", 4, 3, padding=1)
    lo, hi = g.layer("c").input_region(0, [0, 0, 3, 0], [1, 4, 3, 8])
    assert np.all(hi == lo)
    with pytest.raises(InvalidGraphError, match="'c'"):
        g.layer("c").input_region(1, [0, 0, 0, 0], [1, 1, 1, 1])
    with pytest.raises(InvalidGraphError, match="'c'"):
        g.layer("c").input_region(0, [0, 0, 0], [1, 1, 1])


# ------------------------------------------------------------------ validation
def test_duplicate_unknown_op_unknown_input():
    g = img()
    with pytest.raises(InvalidGraphError, match="duplicate layer name 'x'"):
        g.input("x", (2, 3))
    with pytest.raises(InvalidGraphError, match="'z'.*unknown op 'frobnicate'"):
        g.add_layer("z", "frobnicate", ("x",))
    with pytest.raises(InvalidGraphError, match="'c'.*unknown input layer 'nope'"):
        g.conv("c", "nope", 3, 3)


def test_shape_mismatch_errors_name_layer_and_input():
    g = img((1, 3, 8, 8))
    g.conv("a", "x", 4, 3)
    with pytest.raises(InvalidGraphError, match=r"'s' \(add\): input 1 has shape "
                                                r"\(1, 4, 6, 6\), expected \(1, 3, 8, 8\)"):
        g.add("s", "x", "a")
    with pytest.raises(InvalidGraphError, match=r"'cat'.*input 1 has shape"):
        g.concat("cat", ["x", "a"])
    with pytest.raises(InvalidGraphError, match=r"'fc'.*has 8 features.*in_features=10"):
        g.linear("fc", "x", 5, in_features=10)
    with pytest.raises(InvalidGraphError, match=r"'c2'.*3 channels.*in_channels=5"):
        g.conv("c2", "x", 5, 1, in_channels=5)
    g.input("y", (1, 3, 5, 8))
    with pytest.raises(InvalidGraphError, match=r"'mm'.*K=8.*K=5"):
        g.matmul("mm", "x", "y")
    with pytest.raises(InvalidGraphError, match=r"'r'.*192 elements"):
        g.reshape("r", "x", (5, 5))


def test_non_positive_dims():
    g = img((1, 3, 4, 4))
    with pytest.raises(InvalidGraphError, match="'big'.*<= 0"):
        g.conv("big", "x", 4, 7)
    with pytest.raises(InvalidGraphError, match="'fc'.*out_features 0"):
        g.linear("fc", "x", 0)
    with pytest.raises(InvalidGraphError, match="'y'.*positive"):
        g.input("y", (1, 0, 3))
    with pytest.raises(InvalidGraphError, match="'g'.*groups=2"):
        g.conv("g", "x", 4, 1, groups=2)
    with pytest.raises(InvalidGraphError, match="'p'.*padding"):
        g.pool("p", "x", 2, padding=2)


def test_concat_bad_dim_and_arity():
    g = img()
    with pytest.raises(InvalidGraphError, match="'cat'.*dim 'q'"):
        g.concat("cat", ["x", "x"], dim="q")
    with pytest.raises(InvalidGraphError, match="'cat'.*batch"):
        g.concat("cat", ["x", "x"], dim=0)
    with pytest.raises(InvalidGraphError, match="'s'.*at least 2"):
        g.add("s", "x")


def test_from_dict_cycle_and_stored_shape_mismatch():
    g = img((1, 3, 8, 8))
    g.elementwise("a", "x")
    g.elementwise("b", "a")
    d = g.to_dict()
    d["layers"][1]["inputs"] = ["b"]
    with pytest.raises(InvalidGraphError, match="cycle"):
        LayerGraph.from_dict(d)
    d = g.to_dict()
    d["layers"][2]["output_shape"] = [1, 3, 8, 9]
    with pytest.raises(InvalidGraphError, match="'b'.*output_shape"):
        LayerGraph.from_dict(d)
    with pytest.raises(FormatError):
        LayerGraph.from_dict({"format": "nope"})
    with pytest.raises(FormatError, match="version"):
        LayerGraph.from_dict({**g.to_dict(), "version": 99})


def test_batch_mismatch_between_inputs():
    g = img((2, 3, 4, 4))
    with pytest.raises(InvalidGraphError, match="'y'.*batch size"):
        g.input("y", (3, 3, 4, 4))


# ------------------------------------------------------------------ graph level
def small_net() -> LayerGraph:
    g = LayerGraph("small")
    g.input("x", (4, 3, 16, 16))
    g.conv("conv1", "x", 8, 3, padding=1, bias=False)
    g.batchnorm("bn1", "conv1")
    g.elementwise("relu1", "bn1")
    g.conv("conv2", "relu1", 8, 3, padding=1)
    g.add("add", "conv2", "relu1")
    g.pool("pool", "add", 2)
    g.flatten("flat", "pool")
    g.linear("fc", "flat", 10)
    g.loss("loss", "fc")
    return g


def test_queries():
    g = small_net()
    assert len(g) == 10 and g.names[0] == "x"
    assert [L.name for L in g.layers] == list(g.names)
    assert g.predecessors("add") == ("conv2", "relu1")
    assert g.successors("relu1") == ("conv2", "add")
    assert ("relu1", "add", 1) in g.edges and len(g.edges) == 10
    assert g.batch_size == 4
    assert g.output_names == ("loss",)
    assert g.nx.number_of_edges() == 10
    assert g.param_count() == 8 * 27 + 16 + 8 * 72 + 8 + 512 * 10 + 10
    assert g.matmul_flops() == 2 * 8 * 256 * 27 + 2 * 8 * 256 * 72 + 2 * 512 * 10
    assert g.flops() > g.matmul_flops()
    g.validate()
    assert set(OPS) >= {L.op for L in g.layers}


def test_with_batch_size():
    g = small_net()
    h = g.with_batch_size(32)
    assert h.batch_size == 32
    assert all(L.output_shape[0] == 32 for L in h.layers)
    assert h.param_count() == g.param_count() and h.flops() == g.flops()
    assert h.with_batch_size(4) == g
    with pytest.raises(InvalidGraphError):
        g.with_batch_size(0)


def test_json_round_trip(tmp_path):
    g = small_net()
    p = tmp_path / "g.json"
    g.save(p)
    assert LayerGraph.load(p) == g
    assert json.loads(p.read_text())["version"] == 1
    p.write_text("{not json")
    with pytest.raises(FormatError, match="g.json"):
        LayerGraph.load(p)


def test_layer_is_frozen_and_hashable():
    L = small_net().layer("conv1")
    assert isinstance(L, Layer)
    with pytest.raises(Exception):
        L.name = "other"
    with pytest.raises(TypeError):
        L.attrs["kernel"] = (1, 1)
    assert hash(L) == hash(small_net().layer("conv1"))
    assert L.attrs["kernel"] == (3, 3)


def test_paradl_layer_kinds_are_representable():
    """ParaDL's CONV/BNORM/RELU/MPOOL/APOOL/ADD/FC/DROPOUT rows (AlexNet + ResNet + CosmoFlow)."""
    g = LayerGraph("paradl")
    g.input("Input", (16, 3, 226, 226))
    g.conv("CONV1", "Input", 96, 11, stride=4, padding=2)
    g.batchnorm("BNORM", "CONV1")
    g.elementwise("RELU", "BNORM")
    g.pool("MPOOL", "RELU", 3, stride=2)
    g.add("ADD", "MPOOL", "MPOOL")
    g.pool("APOOL", "ADD", 2, kind="avg")
    g.flatten("flat", "APOOL")
    g.linear("FC6", "flat", 4096)
    g.dropout("DROPOUT", "FC6")
    assert g.layer("CONV1").output_shape == (16, 96, 55, 55)
    assert g.layer("ADD").input_shapes == ((16, 96, 27, 27),) * 2
    assert [e for e in g.edges if e[1] == "ADD"] == [("MPOOL", "ADD", 0), ("MPOOL", "ADD", 1)]


@needs_torch
@settings(max_examples=30, deadline=None)
@given(size=st.integers(6, 12), k=st.integers(1, 4), s=st.integers(1, 3), p=st.integers(0, 2),
       d=st.integers(1, 2), groups=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_conv_region_is_sufficient(size, k, s, p, d, groups, seed):
    """Changing the input outside the region never changes the output box."""
    if size + 2 * p - d * (k - 1) - 1 < 0:
        return
    gen = torch.Generator().manual_seed(seed)
    conv = torch.nn.Conv2d(4, 4, k, stride=s, padding=p, dilation=d, groups=groups)
    g = img((1, 4, size, size))
    g.conv("c", "x", 4, k, stride=s, padding=p, dilation=d, groups=groups)
    L = g.layer("c")
    out = np.array(L.output_shape)
    rng = np.random.default_rng(seed)
    lo = np.array([0] + [int(rng.integers(0, o)) for o in out[1:]])
    hi = np.array([1] + [int(rng.integers(a + 1, o + 1)) for a, o in zip(lo[1:], out[1:])])
    ilo, ihi = L.input_region(0, lo, hi)
    x = torch.randn(1, 4, size, size, generator=gen)
    outside = torch.ones_like(x, dtype=torch.bool)
    outside[tuple(slice(a, b) for a, b in zip(ilo, ihi))] = False
    x2 = torch.where(outside, torch.randn(x.shape, generator=gen), x)
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    with torch.no_grad():
        assert torch.allclose(conv(x)[box], conv(x2)[box], atol=1e-5)


def test_a_loss_shift_needs_positions_left_to_score():
    g = LayerGraph("shift")
    g.input("logits", (2, 8, 16), dims="nsc")
    for bad in (8, -1, 1.5):
        with pytest.raises(InvalidGraphError, match="shift"):
            g.loss(f"loss{bad}", "logits", shift=bad)
    g.input("flat", (2, 16))
    with pytest.raises(InvalidGraphError, match="rank"):
        g.loss("loss_flat", "flat", shift=1)
    assert g.layer(g.loss("loss", "logits", shift=1)).flops == 3 * 7 * 16
