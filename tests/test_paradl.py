"""ParaDL file readers: the reference tables parse to the documented totals; bad lines fail
with the file and line number."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel.errors import FormatError
from milp_parallel.oracle import paradl_files as paradl

DATA = Path(__file__).resolve().parents[1] / "data" / "paradl"


def test_resnet_table_totals():
    t = paradl.read_net(DATA / "RESNET50_ImageNet_profall.net_sc")
    assert (t.model, t.dataset, t.dataset_size, t.sample_shape) == (
        "ResNet50", "ImageNet", 1_280_000, (3, 226, 226))
    assert t.n_layers == 166 and t.spatial_ndim == 2
    assert int(t.w_elems.sum()) == 22_734_016
    # ParaDL's log: totals without RELU and BNORM rows
    keep = ~np.isin(t.kinds, ["RELU", "BNORM"])
    assert int(t.x_elems[keep].sum()) == 14_971_596
    assert int(t.y_elems[keep].sum()) == 14_819_368
    assert t.has_time.all() and t.t_seconds[0] == pytest.approx(0.003119502)


def test_vgg_layer_seconds_match_paradl_log():
    t = paradl.read_net(DATA / "VGG_ImageNet_profall.net_sc")
    assert int(t.w_elems.sum()) == 169_801_408
    sec = t.layer_seconds(7.8e12)
    # values printed by ParaDL in ranking_vgg_df.log
    assert sec[0] == pytest.approx(4.34765322602e-05, rel=1e-9)
    assert sec[2] == pytest.approx(0.000927499354885, rel=1e-9)
    assert sec[31] == pytest.approx(4.95864824011e-05, rel=1e-9)
    assert sec.sum() == pytest.approx(0.008245589, rel=1e-12)


def test_3d_table_and_missing_times():
    t = paradl.read_net(DATA / "COSMOFLOW.net")
    assert t.spatial_ndim == 3 and t.w_shapes.shape[1] == 5
    a = paradl.read_net(DATA / "ALEXNET_ImageNet.net")
    assert a.has_time.sum() == 2  # only MPOOL and FC6 carry a t column
    sec = a.layer_seconds(7.8e12)
    own = np.where(a.has_time, 0.0, a.flops() / 7.8e12)
    assert sec.sum() == pytest.approx(own.sum())


def test_platform():
    p = paradl.read_platform(DATA / "ABCI.plat")
    assert (p.memory_bytes, p.speed_flops, p.max_devices, p.devices_per_node) == (
        16e9, 7.8e12, 4096, 4)


@pytest.mark.parametrize("model,mask,n", [
    ("RESNET50_ImageNet_profall.net_sc", "filter_resnet", 49),
    ("RESNET50_ImageNet_profall.net_sc", "spatial_resnet", 49),
    ("VGG_ImageNet_profall.net_sc", "filter_vgg", 13),
    ("VGG_ImageNet_profall.net_sc", "spatial_vgg", 18),
    ("ALEXNET_ImageNet.net", "filter_alexnet", 5),
    ("COSMOFLOW.net", "spatial_cosmolow", 2)])
def test_masks_match_tables(model, mask, n):
    t = paradl.read_net(DATA / model)
    m = paradl.read_mask(DATA / f"{mask}.lc", names=t.names)
    assert m.dtype == bool and m.shape == (t.n_layers,) and int(m.sum()) == n


GOOD = "Dataset|D\nInput|10x3x8x8\nModel|M\nCONV1|3x8x8|3x4x3x3|4x8x8|0.1\n"


@pytest.mark.parametrize("bad,line,what", [
    ("CONV2|4x8x8|4x4x3x3|4x8x8|0|9", 5, "fields"),
    ("CONV2|4x8x8|4x4x3|4x8x8", 5, "ranks"),
    ("CONV2|4x8y8|4x4x3x3|4x8x8", 5, "shape"),
    ("SOFTMAX|4x8x8|0x0x0x0|4x8x8", 5, "unknown layer kind"),
    ("CONV2|4x8x8|4x4x3x3|4x8x8|fast", 5, "not a number"),
    ("Model|again", 5, "second"),
])
def test_malformed_row_names_file_and_line(bad, line, what):
    with pytest.raises(FormatError, match=rf"toy\.net, line {line}: .*{what}"):
        paradl.parse_net(GOOD + bad, source="toy.net")


def test_missing_header_and_bad_platform_and_mask():
    with pytest.raises(FormatError, match="no Model"):
        paradl.parse_net("Dataset|D\nInput|1x3x8x8\nCONV1|3x8x8|3x4x3x3|4x8x8")
    with pytest.raises(FormatError, match="line 2: .*NODE_SPEED"):
        paradl.parse_platform("MEM_PER_NODE|16e9\nNODE_SPEED|fast", source="x.plat")
    with pytest.raises(FormatError, match="missing"):
        paradl.parse_platform("MEM_PER_NODE|16e9")
    with pytest.raises(FormatError, match="line 2"):
        paradl.parse_mask("A|1\nB|2")
    with pytest.raises(FormatError, match="does not match"):
        paradl.parse_mask("0 CONV1 |1\n1 RELU |0", names=("CONV1", "POOL"))
    with pytest.raises(FormatError, match="2 mask lines"):
        paradl.parse_mask("CONV1|1\nRELU|0", names=("CONV1", "RELU", "FC"))


shape = st.lists(st.integers(1, 64), min_size=3, max_size=3)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(shape, st.integers(1, 9), st.integers(1, 64),
                          st.floats(0, 1, allow_nan=False)), min_size=1, max_size=6))
def test_round_trip_random_tables(rows):
    lines = ["Dataset|R", "Input|100x1x1x1", "Model|Rand"]
    for i, (x, k, f, t) in enumerate(rows):
        lines.append(f"CONV{i}|{'x'.join(map(str, x))}|{x[0]}x{f}x{k}x{k}|{f}x{x[1]}x{x[2]}|{t!r}")
    lines[1] = f"Input|100x{'x'.join(map(str, rows[0][0]))}"
    t = paradl.parse_net("\n".join(lines))
    assert t.n_layers == len(rows)
    assert t.x_elems.tolist() == [int(np.prod(r[0])) for r in rows]
    assert t.w_elems.tolist() == [r[0][0] * r[2] * r[1] ** 2 for r in rows]
    assert np.allclose(t.t_seconds, [r[3] for r in rows])
    # flops of a conv: 2 * (2 C F K^2 W H) + |w|
    fw = [2 * r[0][0] * r[2] * r[1] ** 2 * r[0][1] * r[0][2] for r in rows]
    assert np.allclose(t.flops(), [2 * a + w for a, w in zip(fw, t.w_elems)])


@pytest.mark.parametrize("name", ["VGG_ImageNet_profall.net_sc", "ALEXNET_ImageNet.net",
                                  "RESNET50_ImageNet_profall.net_sc"])
def test_to_layer_graph(name):
    pytest.importorskip("milp_parallel.graph")
    t = paradl.read_net(DATA / name)
    g = paradl.to_layer_graph(t)
    g.validate()
    convs = [lay for lay in g.layers if lay.op == "conv"]
    n_conv = sum(k == "CONV" for k in t.kinds)
    # ResNet-50's table has no rows for its 4 projection shortcuts; the graph adds them
    assert len(convs) == n_conv + (4 if "RESNET" in name else 0)
    if "RESNET" not in name:
        # no batch-norm, no biases, no projections: the weights are exactly the table's
        assert g.param_count() == int(t.w_elems.sum())
