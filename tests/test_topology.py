"""Topology: links, collectives, with_devices, JSON, validation; cluster presets."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel import clusters
from milp_parallel.errors import (
    FormatError,
    InvalidOptionError,
    InvalidTopologyError,
    UnknownNameError,
)
from milp_parallel.topology import Device, Level, Topology


def abci16():
    return clusters.get("abci", nodes=4)


def test_links_follow_the_lowest_common_ancestor():
    t = abci16()
    assert t.n_devices == 16
    assert t.link(0, 3).name == "nvlink"
    assert t.link(3, 4).name == "infiniband"
    assert t.link(5, 6).name == "nvlink"
    assert t.bandwidth(1, 2) == 50e9 and t.bandwidth(1, 13) == 12.5e9
    assert t.bandwidth(7, 7) == math.inf and t.latency(7, 7) == 0.0
    with pytest.raises(InvalidTopologyError, match="itself"):
        t.link(2, 2)
    with pytest.raises(InvalidTopologyError, match="out of range"):
        t.link(0, 16)


def test_matrices_agree_with_pairwise_queries():
    t = Topology(Device("g", 1e9, 1e12),
                 [Level("a", 2, 100e9, 1e-6), Level("b", 3, 10e9, 5e-6),
                  Level("c", 2, 1e9, 20e-6)])
    bw, lat = t.bandwidth_matrix(), t.latency_matrix()
    assert bw.shape == (12, 12)
    assert np.array_equal(bw, bw.T)
    for i in range(12):
        for j in range(12):
            assert bw[i, j] == t.bandwidth(i, j)
            assert lat[i, j] == t.latency(i, j)
    assert t.link(0, 1).name == "a" and t.link(1, 2).name == "b" and t.link(5, 6).name == "c"


def test_allreduce_on_one_node_and_across_nodes():
    t = abci16()
    m = 4e6
    inside = t.allreduce_seconds([0, 1, 2, 3], m)
    assert inside == pytest.approx(2 * 3 * (9e-6 + (m / 4) / 50e9))
    across = t.allreduce_seconds([0, 4, 8, 12], m)
    assert across == pytest.approx(2 * 3 * (40.31e-6 + (m / 4) / 12.5e9))
    # one device crossing the node boundary puts the whole ring on InfiniBand
    assert t.allreduce_seconds([0, 1, 2, 4], m) == pytest.approx(across)
    assert t.allreduce_seconds([5], m) == 0.0
    assert t.allgather_seconds([0, 1, 2, 3], m) == pytest.approx(inside / 2)
    both = t.allreduce_seconds([[0, 1, 2, 3], [0, 4, 8, 12]], m)
    assert both == pytest.approx([inside, across])


def test_abci_latency_grows_with_the_ring():
    big = clusters.get("abci", nodes=64)
    m = 1e6
    for r, alpha in ((64, 40.31e-6), (128, 40.49e-6), (256, 40.98e-6)):
        got = big.allreduce_seconds(np.arange(r), m)
        assert got == pytest.approx(2 * (r - 1) * (alpha + (m / r) / 12.5e9))


def test_with_devices():
    t = abci16()
    t8 = t.with_devices(8)
    assert t8.n_devices == 8 and [lv.fanout for lv in t8.levels] == [4, 2]
    t2 = t.with_devices(2)
    assert t2.n_devices == 2 and len(t2.levels) == 1 and t2.levels[0].name == "nvlink"
    assert t.with_devices(16) == t
    with pytest.raises(InvalidTopologyError, match="multiple of 4"):
        t.with_devices(6)
    with pytest.raises(InvalidTopologyError, match="16 devices"):
        t.with_devices(32)


@pytest.mark.parametrize("name", clusters.names())
def test_presets_round_trip_through_json(name, tmp_path):
    t = clusters.get(name, nodes=2)
    path = tmp_path / "t.json"
    t.save(path)
    back = clusters.load(path)
    assert back == t and back.to_dict() == t.to_dict()
    assert t.n_devices == 2 * t.levels[0].fanout
    assert name in repr(t)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.floats(1e6, 1e12), st.floats(0, 1e-3)),
                min_size=1, max_size=3),
       st.floats(1e6, 1e12), st.floats(1e9, 1e15), st.floats(0.01, 1.0))
def test_json_round_trip_is_exact(levels, mem, flops, eff):
    t = Topology(Device("d", mem, flops, eff),
                 [Level(f"l{i}", f, bw, lat) for i, (f, bw, lat) in enumerate(levels)])
    assert Topology.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("make, field", [
    (lambda: Level("x", 4, 0.0, 1e-6), "bandwidth"),
    (lambda: Level("x", 0, 1e9, 1e-6), "fanout"),
    (lambda: Level("x", 4, 1e9, -1.0), "latency"),
    (lambda: Device("d", -1, 1e12), "memory_bytes"),
    (lambda: Device("d", 1e9, 0), "peak_flops"),
    (lambda: Device("d", 1e9, 1e12, 1.5), "efficiency"),
    (lambda: Device("d", 1e9, 1e12, 0.0), "efficiency"),
    (lambda: Topology(Device("d", 1e9, 1e12), []), "no levels"),
])
def test_invalid_values_name_the_field(make, field):
    with pytest.raises(InvalidTopologyError, match=field):
        make()


def test_bad_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{")
    with pytest.raises(FormatError, match="JSON"):
        Topology.load(p)
    with pytest.raises(FormatError, match="format"):
        Topology.from_dict({"format": "other"})
    d = abci16().to_dict()
    d["version"] = 99
    with pytest.raises(FormatError, match="version"):
        Topology.from_dict(d)
    d = abci16().to_dict()
    d["levels"][0]["bandwidth_bytes_per_s"] = -1
    with pytest.raises(InvalidTopologyError, match="bandwidth"):
        Topology.from_dict(d)


def test_cluster_registry():
    assert set(clusters.names()) == {"optcnn", "abci", "dgx_a100", "dgx_h100", "dgx_h200",
                                     "pcie_box", "selene", "eos"}
    with pytest.raises(UnknownNameError, match="abci"):
        clusters.get("summit")
    assert len(clusters.describe()) == len(clusters.names())
    assert clusters.get("optcnn").n_devices == 16
    assert clusters.get("dgx_h200", nodes=2).n_devices == 16
    assert clusters.get("dgx_h200").device.memory_bytes == 141e9
    assert clusters.get("pcie_box", gpus_per_node=8).n_devices == 8
    bf = clusters.get("dgx_h100", dtype="bf16")
    assert bf.device.peak_flops > clusters.get("dgx_h100").device.peak_flops
    # preset keywords are options, checked in one place (issue 22): InvalidOptionError
    with pytest.raises(InvalidOptionError, match="nodes"):
        clusters.get("abci", nodes=0)
    with pytest.raises(InvalidOptionError, match="dtype"):
        clusters.get("abci", dtype="fp8")


def test_selene_and_eos_presets_carry_the_published_figures():
    s = clusters.get("selene", nodes=192, dtype="bf16")
    assert s.n_devices == 1536 and s.device.peak_flops == 312e12
    assert s.device.memory_bytes == 80e9
    assert [lv.bandwidth_bytes_per_s for lv in s.levels] == [300e9, 25e9]   # NVSwitch, HDR
    e = clusters.get("eos", nodes=2, dtype="bf16")
    assert e.n_devices == 16 and e.device.peak_flops == 989.4e12
    assert [lv.bandwidth_bytes_per_s for lv in e.levels] == [450e9, 50e9]   # NVSwitch, NDR
    assert clusters.get("selene").device.peak_flops == 19.5e12     # the default dtype, fp32
