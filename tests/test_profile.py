"""profile: measured tile costs, the ProfileTable format, and their use by the cost model."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from milp_parallel.errors import FormatError, InvalidGraphError
from milp_parallel.graph import LayerGraph
from milp_parallel.importers import MissingDependencyError
from milp_parallel.measure.profile import (
    ProfileEntry,
    ProfileTable,
    layer_signature,
    needed_tiles,
    profile_layers,
)


def _small():
    g = LayerGraph("small")
    x = g.input("x", (4, 3, 8, 8))
    c1 = g.conv("conv1", x, 4, 3, padding=1)
    c2 = g.conv("conv2", x, 4, 3, padding=1)  # same work as conv1: shares its entries
    a = g.add("add", c1, c2)
    b = g.batchnorm("bn", a)
    p = g.pool("pool", b, 2)
    f = g.flatten("flat", p)
    y = g.linear("fc", f, 6)
    g.loss("loss", y)
    return g


def _entry(op="conv", tile=(2, 3), seconds=1e-3, **kw):
    return ProfileEntry(op, kw.pop("signature", "{}"), tile, kw.pop("dtype", "float32"),
                        kw.pop("device", "cpu"), seconds)


# ----------------------------------------------------------------------------- table format
def test_table_json_round_trip_and_files(tmp_path):
    t = ProfileTable([_entry(), _entry(op="linear", tile=(4, 4), seconds=2e-4)],
                     meta={"device_name": "x", "repeats": 3})
    again = ProfileTable.from_json(t.to_json())
    assert again == t and len(again) == 2 and again.meta["repeats"] == 3
    path = tmp_path / "p.json"
    t.save(path)
    assert ProfileTable.load(path) == t
    assert json.loads(path.read_text())["format"] == "milp_parallel.profile"


def test_a_table_and_a_plan_solved_with_it_pickle(tmp_path):
    # verify_plan sends the plan (and its profiled cost model) to spawned processes
    import pickle

    import milp_parallel as mp
    from milp_parallel.costs import CostModel
    t = ProfileTable([_entry(), _entry(op="linear", tile=(4, 4), seconds=2e-4)],
                     meta={"repeats": 3})
    again = pickle.loads(pickle.dumps(t))
    assert again == t and again.meta["repeats"] == 3
    assert dict(again._index) == dict(t._index)
    topo = mp.clusters.get("abci", nodes=1).with_devices(2)
    g = mp.models.get("lenet5", batch_size=4)
    table = ProfileTable([ProfileEntry(lay.op, layer_signature(lay, lay.output_shape),
                                       tuple(lay.output_shape), "float32", "cpu", 1e-4)
                          for lay in g.layers if lay.op != "input"])
    plan = mp.solve(g, topo, solver="dp", cross_check=False,
                    cost_model=CostModel(topo, profile=table))
    assert pickle.loads(pickle.dumps(plan)).step_seconds == plan.step_seconds


def test_table_rejects_bad_input(tmp_path):
    with pytest.raises(FormatError, match="seconds"):
        ProfileTable([_entry(seconds=float("nan"))])
    with pytest.raises(FormatError, match="not a milp_parallel.profile document"):
        ProfileTable.from_dict({"format": "other"})
    with pytest.raises(FormatError, match="version"):
        ProfileTable.from_dict({"format": "milp_parallel.profile", "version": 99})
    with pytest.raises(FormatError, match=r"entries\[0\]\.\w+ is missing"):
        ProfileTable.from_dict({"format": "milp_parallel.profile", "version": 1,
                                "entries": [{"op": "conv"}]})
    with pytest.raises(FormatError, match="no such file"):
        ProfileTable.load(tmp_path / "none.json")
    with pytest.raises(FormatError, match="JSON"):
        ProfileTable.from_json("{", source="p.json")


def test_later_entries_replace_earlier_and_merge():
    a = ProfileTable([_entry(seconds=1.0), _entry(seconds=2.0)])
    assert len(a) == 1 and a.entries[0].seconds == 2.0
    b = ProfileTable([_entry(seconds=3.0), _entry(tile=(1, 1))])
    merged = a.merge(b)
    assert len(merged) == 2 and {e.seconds for e in merged.entries} == {3.0, 1e-3}


def test_signature_depends_on_work_not_name():
    g = _small()
    s1 = layer_signature(g.layer("conv1"), (4, 4, 8, 8))
    assert s1 == layer_signature(g.layer("conv2"), (4, 4, 8, 8))
    empty = ProfileTable()
    assert empty.key(g.layer("conv1"), (4, 4, 8, 8)) != empty.key(g.layer("conv1"),
                                                                   (4, 2, 8, 8))
    assert s1 != layer_signature(g.layer("fc"), (4, 6))
    # a height split of a 3x3 conv needs a halo: the input tile has 2 more rows
    sig = json.loads(layer_signature(g.layer("conv1"), (4, 4, 4, 8)))
    assert sig["in"] == [[4, 3, 6, 8]]
    with pytest.raises(InvalidGraphError, match="tile shape"):
        layer_signature(g.layer("conv1"), (4, 4, 9, 8))


# ----------------------------------------------------------------------------- measuring
torch = pytest.importorskip("torch")


def test_profile_covers_every_needed_tile_with_positive_times():
    g = _small()
    threads_before = torch.get_num_threads()
    pairs = needed_tiles(g, 2)
    assert {layer.name for layer, _ in pairs} == set(g.names) - {"x"}
    table = profile_layers(g, 2, repeats=2, warmup=0, threads=1)
    assert table.missing(pairs, graph=g) == []
    assert all(e.seconds > 0 for e in table.entries)
    # conv1 and conv2 share entries: fewer entries than needed pairs
    assert len(table) < len(pairs)
    data = (True,)       # both read the graph's input: timed without the data's gradient
    assert table.lookup(g.layer("conv1"), (4, 4, 8, 8), graph_inputs=data) == \
        table.lookup(g.layer("conv2"), (4, 4, 8, 8), graph_inputs=data)
    assert table.lookup(g.layer("conv1"), (4, 4, 8, 8)) is None   # not timed with it
    assert ("conv1", (4, 4, 8, 8)) in table.missing(pairs)
    assert all('"data":[0]' in e.signature for e in table.entries if e.op == "conv")
    assert table.lookup(g.layer("x"), (4, 3, 8, 8)) == 0.0
    assert table.lookup(g.layer("conv1"), (3, 4, 8, 8), graph_inputs=data) is None
    assert table.lookup(g.layer("conv1"), (4, 4, 8, 8), graph_inputs=data,
                        dtype="bfloat16") is None
    meta = table.meta
    assert meta["torch_version"] == torch.__version__ and meta["repeats"] == 2
    assert meta["device_name"] and meta["threads"] == 1
    assert torch.get_num_threads() == threads_before
    assert ProfileTable.from_json(table.to_json()) == table


def test_explicit_pairs_and_reuse_of_a_previous_table():
    g = _small()
    first = profile_layers(g, [("fc", (4, 6)), ("fc", (2, 6))], repeats=1, warmup=0)
    assert len(first) == 2
    both = profile_layers(g, [("fc", (4, 6)), (g.layer("fc"), (4, 3))], repeats=1, warmup=0,
                          table=first)
    assert len(both) == 3
    kept = {e.key: e.seconds for e in first.entries}
    assert all(both._index[k] == s for k, s in kept.items())  # not re-timed


def test_profile_rejects_bad_arguments():
    g = _small()
    with pytest.raises(InvalidGraphError, match="dtype"):
        profile_layers(g, 1, dtype="int8")
    with pytest.raises(InvalidGraphError, match="repeats"):
        profile_layers(g, 1, repeats=0)
    with pytest.raises(InvalidGraphError, match="device"):
        profile_layers(g, 1, device="tpu")
    with pytest.raises(InvalidGraphError, match="pairs"):
        profile_layers(g, [("fc",)])


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"milp_parallel\[torch\]"):
        profile_layers(_small(), 1)


def test_cost_model_uses_the_measured_numbers():
    from milp_parallel import clusters
    from milp_parallel.costs import CostModel
    from milp_parallel.costs.build import build
    from milp_parallel.costs.configs import tile_extent

    g = _small()
    topo = clusters.get("pcie_box", gpus_per_node=2)
    table = profile_layers(g, topo, repeats=1, warmup=0)
    model = CostModel(topo, profile=table)
    built = build(g, topo, cost_model=model)
    node = built.node_of["conv1"]
    (costs,) = [m for m in built.member_costs[node] if m.name == "conv1"]
    ext = tile_extent(np.asarray(g.layer("conv1").output_shape), built.configs[node])
    # conv1 reads the graph's input: the tiles timed without the data's gradient
    data = (True,)
    expected = [table.lookup(g.layer("conv1"), tuple(row), graph_inputs=data) for row in ext]
    # measured forward+backward, plus the measured optimizer update (Adam, the default)
    update = model.compute_phases(g.layer("conv1"), built.configs[node], graph_inputs=data)[2]
    assert np.array_equal(update, [table.lookup_update(g.layer("conv1"), tuple(row),
                                                       graph_inputs=data) for row in ext])
    assert np.array_equal(costs.compute_seconds, np.asarray(expected, dtype=float) + update)
    serial = built.problem.config_labels[node].index("serial")
    members = built.member_costs[node]
    assert built.problem.node_costs[node][serial] == pytest.approx(
        sum(m.compute_seconds[serial] + m.sync_seconds[serial] for m in members))
    assert model.profile_stats["fallbacks"] == 0 and model.profile_stats["hits"] > 0
    # a partial table: the rest falls back to the FLOP estimate and is counted
    partial = ProfileTable(table.entries[:3], meta=table.meta)
    fallback = CostModel(topo, profile=partial)
    build(g, topo, cost_model=fallback)
    assert fallback.profile_stats["fallbacks"] > 0


def test_a_tile_that_reads_the_graphs_input_is_timed_without_the_datas_gradient():
    # a training step computes no gradient of the data: a 5x5 convolution of one channel
    # (LeNet-5's first) took 0.3 ms without it and 3 ms with it on this CPU
    from milp_parallel.measure.operators import _build, tile_runner

    g = _small()
    conv = g.layer("conv1")
    tile = tuple(conv.output_shape)
    _, leaves, weights = _build(torch, conv, tile, torch.float32, "cpu", (True,))
    assert [tuple(t.shape) for t in leaves] == [(4, 3, 3, 3), (4,)]     # weights only
    assert [tuple(t.shape) for t in weights] == [(4, 3, 3, 3), (4,)]
    _, leaves, _ = _build(torch, conv, tile, torch.float32, "cpu")
    assert [tuple(t.shape) for t in leaves][0] == (4, 3, 8, 8)         # the input too
    # nothing to differentiate (an op with no weights on the data): the forward alone
    relu = LayerGraph("r")
    relu.input("x", (2, 3))
    relu.elementwise("relu", "x")
    run = tile_runner(torch, relu.layer("relu"), (2, 3), torch.float32, "cpu", (True,))
    run()
    # a table timed before graph inputs were told apart still prices them (with the data's
    # gradient, the entry it has)
    old = profile_layers(g, [("conv2", tile)], repeats=1, warmup=0, optimizer=None)
    assert old.lookup(conv, tile, graph_inputs=(True,)) is not None
    legacy = ProfileTable(tuple(ProfileEntry(e.op, e.signature.replace(',"data":[0]', ""),
                                             e.tile_shape, e.dtype, e.device, e.seconds)
                                for e in old.entries))
    assert legacy.lookup(conv, tile, graph_inputs=(True,)) == legacy.entries[0].seconds


def test_the_optimizer_step_of_a_tiles_weights_is_measured_and_priced_for_its_optimizer():
    # a CPU's torch.optim.Adam updates one tensor at a time; the profile times what a tile's
    # weight shard adds to a step, and a cost model with that optimizer's state prices it
    import torch

    from milp_parallel import clusters
    from milp_parallel.costs import CostModel
    from milp_parallel.measure.operators import update_runner

    g = _small()
    topo = clusters.get("pcie_box", gpus_per_node=2)
    table = profile_layers(g, topo, repeats=3, warmup=1, optimizer="momentum")
    assert table.optimizer == "momentum" and table.optimizer_state_factor == 1.0
    for e in table.entries:
        has_weights = e.op in ("conv", "linear", "batchnorm")
        assert (e.update_seconds is not None) == has_weights, e
        assert e.update_seconds is None or e.update_seconds >= 0
    conv = g.layer("conv1")
    tile = tuple(conv.output_shape)
    # the step it timed runs over the shard the forward used: weight and bias
    step = update_runner(torch, conv, tile, torch.float32, "cpu", "momentum", copies=3)
    params = step.__self__.param_groups[0]["params"]
    assert [tuple(p.shape) for p in params] == [(4, 3, 3, 3), (4,)] * 3
    measured = table.lookup_update(conv, tile, graph_inputs=(True,))
    same = CostModel(topo, profile=table, optimizer_state_factor=1.0)
    other = CostModel(topo, profile=table)                    # Adam's state: not timed
    assert same.compute_phases(conv, [[1, 1, 1, 1]], graph_inputs=(True,))[2][0] == measured
    assert other.compute_phases(conv, [[1, 1, 1, 1]], graph_inputs=(True,))[2][0] == \
        CostModel(topo).compute_phases(conv, [[1, 1, 1, 1]], graph_inputs=(True,))[2][0]
    # the format keeps both, and refuses what is not one of them
    again = ProfileTable.from_json(table.to_json())
    assert again == table and again.optimizer == "momentum"
    doc = json.loads(table.to_json())
    doc["entries"][0]["update_seconds"] = "fast"
    with pytest.raises(FormatError, match=r"entries\[0\]\.update_seconds"):
        ProfileTable.from_dict(doc)
    doc = json.loads(table.to_json())
    doc["optimizer"] = "adamw"
    with pytest.raises(FormatError, match="optimizer"):
        ProfileTable.from_dict(doc)
    with pytest.raises(FormatError, match="update_seconds"):
        ProfileTable([ProfileEntry("conv", "{}", (2, 3), "float32", "cpu", 1e-3, -1.0)])
    from milp_parallel.errors import InvalidOptionError
    with pytest.raises(InvalidOptionError, match="optimizer"):
        profile_layers(g, topo, optimizer="adamw")
    with pytest.raises(InvalidOptionError, match="momentum"):
        profile_layers(g, topo, table=table, optimizer="adam")
    with pytest.raises(InvalidOptionError, match="merge"):
        table.merge(ProfileTable(optimizer="adam"))
    # no optimizer: no update timed, the estimate prices it
    plain = profile_layers(g, [("conv1", tile)], repeats=1, warmup=0, optimizer=None)
    assert plain.optimizer is None
    assert plain.lookup_update(conv, tile, graph_inputs=(True,)) is None


def test_profile_model_writes_a_table_for_a_zoo_model(tmp_path):
    from milp_parallel.costs import CostModel
    from milp_parallel.measure.profile import profile_model
    from milp_parallel.plan import solve

    out = tmp_path / "lenet.json"
    table = profile_model("lenet5", "pcie_box", out, devices=2, batch_size=4, repeats=1,
                          warmup=0, threads=1)
    loaded = ProfileTable.load(out)
    assert loaded == table and len(table) > 0
    from milp_parallel import clusters, models

    topo = clusters.get("pcie_box").with_devices(2)
    model = CostModel(topo, profile=loaded)
    plan = solve(models.get("lenet5", batch_size=4), topo, cost_model=model,
                 cross_check=False)
    assert model.profile_stats["fallbacks"] == 0 and plan.step_seconds > 0
