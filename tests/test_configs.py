"""Configuration enumeration, labels, tile boxes and the placement rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel import clusters
from milp_parallel.costs.configs import (
    ConfigOptions,
    config_counts,
    config_label,
    config_labels,
    enumerate_configs,
    tile_boxes,
)
from milp_parallel.errors import InvalidGraphError, InvalidOptionError
from milp_parallel.graph import LayerGraph


def conv_layer(shape=(8, 3, 16, 16), out=16):
    g = LayerGraph()
    g.input("x", shape)
    g.conv("conv", "x", out, 3, padding=1)
    return g.layer("conv")


def test_default_space_is_power_of_two_divisors():
    layer = conv_layer()
    cfg = enumerate_configs(layer, 8)
    assert cfg.shape[1] == 4 and cfg.dtype == np.int64
    assert np.array_equal(cfg[0], [1, 1, 1, 1])
    assert np.all(cfg.prod(axis=1) <= 8)
    assert np.all(cfg & (cfg - 1) == 0)
    assert np.all(np.asarray(layer.output_shape) % cfg == 0)
    # exponents (a, b, c, d) with a + b + c + d <= 3: C(7, 4) = 35
    assert len(cfg) == 35
    assert len({tuple(r) for r in cfg}) == len(cfg)


def test_options():
    layer = conv_layer((6, 3, 12, 12), 12)
    any_div = enumerate_configs(layer, 6, options=ConfigOptions(power_of_two=False))
    assert [3, 1, 1, 1] in any_div.tolist() and [6, 1, 1, 1] in any_div.tolist()
    assert [3, 1, 1, 1] not in enumerate_configs(layer, 6).tolist()
    full = enumerate_configs(layer, 4, options=ConfigOptions(require_all_devices=True))
    assert np.all(full.prod(axis=1) == 4)
    capped = enumerate_configs(layer, 8, options=ConfigOptions(max_degree={"h": 2, "w": 1}))
    assert capped[:, 2].max() == 2 and capped[:, 3].max() == 1
    thick = enumerate_configs(layer, 8, options=ConfigOptions(min_tile={"h": 6}))
    assert thick[:, 2].max() == 2
    # a layer too small for all devices keeps its largest configurations
    g = LayerGraph()
    g.input("x", (2, 2))
    small = enumerate_configs(g.layer("x"), 16, options=ConfigOptions(require_all_devices=True))
    assert small.tolist() == [[2, 2]]
    with pytest.raises(InvalidGraphError):
        enumerate_configs(layer, 0)
    with pytest.raises(InvalidOptionError, match="max_degree"):   # an option, not the graph
        ConfigOptions(max_degree={"h": 0})


def test_non_parallel_dims_stay_whole():
    g = LayerGraph()
    g.input("x", (8, 4, 4, 4))
    g.flatten("f", "x")
    cfg = enumerate_configs(g.layer("f"), 8)
    assert cfg.tolist() == [[1, 1], [2, 1], [4, 1], [8, 1]]


def test_labels_and_counts():
    layer = conv_layer()
    assert config_label(layer, [2, 1, 2, 1]) == "n=2 h=2"
    assert config_label(layer, [1, 1, 1, 1]) == "serial"
    cfg = enumerate_configs(layer, 4)
    labels = config_labels(layer, cfg)
    assert labels[0] == "serial" and len(set(labels)) == len(labels)
    assert labels == tuple(config_label(layer, row) for row in cfg)
    g = LayerGraph()
    g.input("x", (8, 3, 16, 16))
    g.conv("conv", "x", 16, 3, padding=1)
    assert config_counts(g, 4) == {"x": len(enumerate_configs(g.layer("x"), 4)),
                                   "conv": len(cfg)}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(shape), st.lists(
        st.tuples(*[st.integers(1, s) for s in shape]), min_size=1, max_size=4))))
def test_tiles_partition_the_tensor(case):
    shape, degrees = case
    lo, hi, valid = tile_boxes(shape, np.array(degrees))
    for k, deg in enumerate(degrees):
        count = np.zeros(shape, dtype=int)
        for t in range(int(np.prod(deg))):
            assert valid[k, t]
            sl = tuple(slice(a, b) for a, b in zip(lo[k, t], hi[k, t]))
            count[sl] += 1
        assert np.all(count == 1)
        assert not valid[k, int(np.prod(deg)):].any()


def test_row_major_placement():
    lo, hi, _ = tile_boxes((4, 6), np.array([[2, 3]]))
    # tile t = row-coordinate * 3 + column-coordinate; the last dim varies fastest
    assert lo[0, 1].tolist() == [0, 2] and lo[0, 3].tolist() == [2, 0]
    assert hi[0, 5].tolist() == [4, 6]


def test_degree_four_stays_inside_one_node():
    t = clusters.get("optcnn", nodes=4)
    layer = conv_layer((16, 8, 8, 8), 8)
    for deg in enumerate_configs(layer, 16):
        used = np.arange(int(np.prod(deg)))
        levels = t.level_index(used[:, None], used[None, :])
        if len(used) <= 4:
            assert levels.max() <= 0   # NVLink only
        else:
            assert levels.max() == 1
