"""Topology: links, collectives, with_devices, JSON, validation; cluster presets."""

import difflib
import json
import math
import re

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
from milp_parallel.machine.topology import Device, Level, Topology


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


def test_a_collective_with_its_own_measured_figures_uses_them_and_only_it():
    base = abci16()
    own = Level("nvlink", 4, 50e9, 9e-6, collectives=(("allreduce", 30e-6, 20e9),))
    t = Topology(base.device, (own,) + base.levels[1:], "measured")
    m = 4e6
    # the all-reduce inside a node is priced with its own alpha and bandwidth ...
    assert t.allreduce_seconds([0, 1, 2, 3], m) == pytest.approx(2 * 3 * (30e-6 + (m / 4) / 20e9))
    # ... the all-gather and the links are not, nor a ring across nodes, whose slowest
    # level is still InfiniBand
    assert t.allgather_seconds([0, 1, 2, 3], m) == pytest.approx(
        base.allgather_seconds([0, 1, 2, 3], m))
    assert t.allreduce_seconds([0, 4, 8, 12], m) == pytest.approx(
        base.allreduce_seconds([0, 4, 8, 12], m))
    assert t.p2p_seconds(0, 1, m) == pytest.approx(base.p2p_seconds(0, 1, m))
    # kept by to_dict / from_dict and by with_devices
    assert Topology.from_dict(t.to_dict()) == t
    assert t.with_devices(2).levels[0].collectives == own.collectives
    for bad, match in [((("bcast", 1e-5, 1e9),), "bcast"),
                       ((("allreduce", 1e-5, 1e9), ("allreduce", 2e-5, 1e9)), "twice"),
                       ((("allreduce", -1.0, 1e9),), "latency_s"),
                       ((("allreduce", 1e-5, 0.0),), "bandwidth"),
                       ((("allreduce", 1e-5),), "must be \\(kind")]:
        with pytest.raises(InvalidTopologyError, match=match):
            Level("nvlink", 4, 50e9, 9e-6, collectives=bad)


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


# ---------------------------------------------------------------------- strict reader (issue 22.3)
def _cluster_doc():
    """A document with every optional key present (latency_steps, uplinks, peak table, a
    collective's own figures)."""
    doc = abci16().to_dict()
    doc["levels"][0]["collectives"] = {"allreduce": {"latency_s": 2e-5,
                                                     "bandwidth_bytes_per_s": 4e10}}
    return doc


def _objects(doc):
    """(path, object) of every JSON object of a cluster document that takes fixed keys."""
    yield "", doc
    yield "device", doc["device"]
    for i, lv in enumerate(doc["levels"]):
        yield f"levels[{i}]", lv
        if "collectives" in lv:
            yield f"levels[{i}].collectives", lv["collectives"]
            for kind, c in lv["collectives"].items():
                yield f"levels[{i}].collectives.{kind}", c


def _typos(key):
    """Misspellings of a key: a letter dropped, two swapped, one doubled, case, a suffix."""
    out = {key[:-1], key[1:], key + "s" if not key.endswith("s") else key[:-1],
           key.upper(), key.capitalize(), key.replace("_", "")}
    if len(key) > 3:
        out.add(key[0] + key[2] + key[1] + key[3:])
        out.add(key[:2] + key[2] + key[2:])
    return sorted(k for k in out if k and k != key)


TYPO_CASES = [(path, key, typo) for path, obj in _objects(_cluster_doc()) for key in obj
              for typo in _typos(key)]


def _at(doc, path):
    return dict(_objects(doc))[path]


@pytest.mark.parametrize("path, key, typo", TYPO_CASES,
                         ids=[f"{p or 'top'}.{t}" for p, _, t in TYPO_CASES])
def test_a_misspelled_key_at_any_level_is_refused_naming_it(tmp_path, path, key, typo):
    doc = _cluster_doc()
    obj = _at(doc, path)
    obj[typo] = obj.pop(key)
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(FormatError) as e:
        Topology.load(f)
    msg = str(e.value)
    assert msg.startswith(str(f) + ": "), msg
    assert f"{path + '.' if path else ''}{typo} is not a known key" in msg, msg
    if difflib.get_close_matches(typo, list(obj) + [key], n=1, cutoff=0.6) or \
            typo.lower() == key.lower():
        assert "did you mean" in msg, msg


@pytest.mark.parametrize("path", ["", "device", "levels[0]", "levels[1]"])
@pytest.mark.parametrize("extra", ["nodes", "gpus_per_node", "comment", "efficency"])
def test_an_unknown_key_is_refused_at_every_level(path, extra):
    doc = _cluster_doc()
    _at(doc, path)[extra] = 4
    with pytest.raises(FormatError, match=rf"c\.json: {re.escape(path + '.' if path else '')}"
                                          rf"{extra} is not a known key"):
        Topology.from_dict(doc, source="c.json")


_STRINGS = {"name", "dtype"}
TYPE_CASES = [(path, key, bad) for path, obj in _objects(_cluster_doc()) for key in obj
              if key not in ("format", "version")
              for bad in ("x", [1], {"a": 1}, True, None)
              if not (key in _STRINGS and bad == "x") and not (path == "" and key == "name"
                                                                 and bad is None)]


@pytest.mark.parametrize("path, key, bad", TYPE_CASES,
                         ids=[f"{p or 'top'}.{k}={b!r}" for p, k, b in TYPE_CASES])
def test_a_value_of_the_wrong_type_is_refused_naming_its_path(path, key, bad):
    doc = _cluster_doc()
    _at(doc, path)[key] = bad
    with pytest.raises(FormatError) as e:
        Topology.from_dict(doc, source="c.json")
    assert str(e.value).startswith(f"c.json: {path + '.' if path else ''}{key}"), str(e.value)


@pytest.mark.parametrize("key, value, match", [
    ("dtype", "bf61", "dtype must be a known dtype.*did you mean 'bf16'"),
    ("dtype", "FP32", "did you mean 'fp32'"),
])
def test_a_bad_dtype_value_is_refused(key, value, match):
    doc = _cluster_doc()
    doc[key] = value
    with pytest.raises(FormatError, match=match):
        Topology.from_dict(doc, source="c.json")


def test_peak_table_keys_are_dtypes_and_missing_required_keys_are_named():
    doc = _cluster_doc()
    doc["device"]["peak_flops_by_dtype"]["fp23"] = 1e12
    with pytest.raises(FormatError, match=r"peak_flops_by_dtype\.fp23 is not a known dtype; "
                                          "did you mean 'fp32'"):
        Topology.from_dict(doc, source="c.json")
    for path, key in (("device", "peak_flops"), ("levels[1]", "fanout"), ("", "levels")):
        doc = _cluster_doc()
        del _at(doc, path)[key]
        with pytest.raises(FormatError, match=rf"{re.escape(path + '.' if path else '')}{key} "
                                              "is missing"):
            Topology.from_dict(doc, source="c.json")


def test_declared_defaults_fill_only_omitted_keys():
    doc = {"format": "milp_parallel.topology", "version": 1,
           "device": {"name": "g", "memory_bytes": 1e9, "peak_flops": 1e12},
           "levels": [{"name": "l", "fanout": 2, "bandwidth_bytes_per_s": 1e9}]}
    t = Topology.from_dict(doc)
    assert (t.name, t.dtype, t.device.efficiency, t.levels[0].latency_s,
            t.levels[0].uplinks) == ("custom", "fp32", 1.0, 0.0, 0)


def test_dtype_round_trips_and_must_match_the_stated_peak(tmp_path):
    t = clusters.get("selene", dtype="bf16")
    t.save(tmp_path / "s.json")
    assert Topology.load(tmp_path / "s.json") == t and t.dtype == "bf16"
    d = t.to_dict()
    del d["dtype"]                 # a file saved before dtype existed: its peak is bf16's
    with pytest.raises(InvalidTopologyError, match="it is the bf16 peak: set dtype='bf16'"):
        Topology.from_dict(d, source="old.json")
    with pytest.raises(InvalidTopologyError, match="unknown dtype"):
        Topology(t.device, t.levels, "x", "int4")
