"""Clusters mean one thing each (issue 22.5): every preset carries the dtype of its peak, one
default dtype for all, preset keywords checked in one place, and the README's budget example
binds."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import milp_parallel as mp
from milp_parallel import clusters, models
from milp_parallel.costs import CostModel
from milp_parallel.errors import InvalidOptionError, UnknownNameError, UnknownOptionError
from milp_parallel.machine.topology import DTYPE_BYTES, Topology

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- dtype on every preset
@pytest.mark.parametrize("name", clusters.names())
def test_every_preset_carries_its_dtype_and_round_trips_it(tmp_path, name):
    t = clusters.get(name)
    assert t.dtype == clusters.DEFAULT_DTYPE == "fp32"
    assert t.device.peak_flops == t.device.peak_flops_for("fp32")
    for dt in clusters.dtypes(name):
        assert dt in DTYPE_BYTES
        u = clusters.get(name, dtype=dt)
        assert u.dtype == dt and u.device.peak_flops == u.device.peak_flops_for(dt)
        u.save(tmp_path / f"{dt}.json")
        back = Topology.load(tmp_path / f"{dt}.json")
        assert back == u and back.dtype == dt
        assert u.with_devices(1).dtype == dt
        assert f"TFLOP/s {dt}" in repr(u)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "tf32"])
def test_the_same_a100_at_the_same_dtype_gives_the_same_compute_time(dtype):
    g = models.get("resnet50")
    a, s = clusters.get("dgx_a100", dtype=dtype), clusters.get("selene", dtype=dtype)
    assert a.device.peak_flops == s.device.peak_flops
    for name in ("conv1", "fc"):
        layer = g.layer(name)
        cfg = np.ones((1, len(layer.dims)), dtype=np.int64)
        ta = CostModel(a).compute_seconds(layer, cfg)
        ts = CostModel(s).compute_seconds(layer, cfg)
        assert ta == pytest.approx(ts, rel=1e-12)


def test_the_defaults_no_longer_mix_dtypes():
    peaks = {n: clusters.get(n).device.peak_flops for n in ("dgx_a100", "selene")}
    assert peaks["dgx_a100"] == peaks["selene"] == 19.5e12
    assert clusters.get("selene", dtype="bf16").device.peak_flops == 312e12
    assert clusters.get("eos", dtype="bf16").device.peak_flops == 989.4e12
    # abci keeps ParaDL's measured fp32 speed (7.8 TFLOP/s)
    assert clusters.get("abci").device.effective_flops == pytest.approx(7.8e12)


def test_precision_still_works_one_release_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="use dtype='bf16'"):
        t = clusters.get("dgx_h100", precision="bf16")
    assert t == clusters.get("dgx_h100", dtype="bf16")
    # the old 'bf16' of a GPU without bf16 meant its 16-bit (fp16) peak
    with pytest.warns(DeprecationWarning, match="use dtype='fp16'"):
        assert clusters.abci(precision="bf16").dtype == "fp16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clusters.get("abci", dtype="fp16")           # the new keyword warns nothing
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidOptionError, match="disagree"):
        clusters.get("selene", precision="fp32", dtype="bf16")


# ---------------------------------------------------------------------- preset keywords
BAD_OPTIONS = [
    ("abci", {"dtype": "bf16"}, InvalidOptionError,
     r"cluster 'abci': dtype must be one of 'fp64', 'fp32', 'fp16'; got 'bf16' .*no bf16"),
    ("abci", {"dtype": "fp8"}, InvalidOptionError, "dtype must be one of"),
    ("dgx_a100", {"dtype": "int8"}, InvalidOptionError, "'tf32', 'bf16'"),
    ("selene", {"dtype": 16}, InvalidOptionError, "got 16"),
    ("abci", {"nodes": 0}, InvalidOptionError, r"cluster 'abci': nodes must be a whole number"
                                               " >= 1, got 0"),
    ("abci", {"nodes": -2}, InvalidOptionError, "nodes"),
    ("abci", {"nodes": 1.5}, InvalidOptionError, "nodes"),
    ("abci", {"nodes": True}, InvalidOptionError, "nodes"),
    ("optcnn", {"nodes": "2"}, InvalidOptionError, "nodes"),
    ("abci", {"gpus_per_node": 8}, InvalidOptionError, r"gpus_per_node must be a whole number "
                                                       r"in 1\.\.4, got 8"),
    ("dgx_h100", {"gpus_per_node": 16}, InvalidOptionError, r"1\.\.8"),
    ("pcie_box", {"gpus_per_node": 0}, InvalidOptionError, "gpus_per_node"),
    ("abci", {"node": 2}, UnknownOptionError, "unknown option.*node; did you mean 'nodes'"),
    ("abci", {"dtpye": "fp32"}, UnknownOptionError, "did you mean 'dtype'"),
    ("eos", {"gpus": 4}, UnknownOptionError, "known: dtype, gpus_per_node, nodes"),
    ("selene", {"efficiency": 0.4}, UnknownOptionError, "efficiency"),
]


@pytest.mark.parametrize("name, kw, exc, match", BAD_OPTIONS,
                         ids=[f"{n}-{next(iter(k))}={next(iter(k.values()))!r}"
                              for n, k, _, _ in BAD_OPTIONS])
def test_a_bad_preset_keyword_is_a_typed_error_listing_what_is_allowed(name, kw, exc, match):
    with pytest.raises(exc, match=match):
        clusters.get(name, **kw)
    fn = getattr(clusters, name)               # the builders check in the same place
    with pytest.raises(exc, match=match):
        fn(**kw)


def test_unknown_cluster_names_suggest_the_nearest():
    with pytest.raises(UnknownNameError, match="did you mean 'selene'"):
        clusters.get("selen")
    with pytest.raises(UnknownNameError, match="known clusters"):
        clusters.get(42)


def test_preset_options_are_the_ones_get_checks():
    opts = {o.name: o for o in clusters.preset_options("abci")}
    assert set(opts) == {"nodes", "gpus_per_node", "dtype"}
    assert (opts["nodes"].default, opts["gpus_per_node"].default,
            opts["dtype"].default) == (4, 4, "fp32")
    assert clusters.dtypes("eos") == ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


def test_for_devices_grows_a_preset_to_whole_nodes():
    assert clusters.for_devices("abci", 1024).n_devices == 1024
    assert clusters.for_devices("abci", 6).n_devices == 16          # the default is enough
    assert clusters.for_devices("dgx_a100", 20).n_devices == 24      # 3 nodes of 8
    assert clusters.for_devices("selene", 16, dtype="bf16").dtype == "bf16"
    with pytest.raises(InvalidOptionError,
                       match="cluster 'abci': devices must be a whole number >= 1"):
        clusters.for_devices("abci", 0)


def test_the_cli_lists_each_preset_with_its_dtype(capsys):
    from milp_parallel.cli import main
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert "dtype" in out.splitlines()[0]
    for name in clusters.names():
        (line,) = [x for x in out.splitlines() if x.startswith(name + " ")]
        assert " fp32 " in line


# ---------------------------------------------------------------------- README
BUDGET_CALL = ('mp.solve("resnet50", "abci", devices=16, batch_size=512, '
               'memory_limit="4.25GiB",\n         solver="highs", time_limit=60)')


def test_the_readme_budget_example_binds():
    assert BUDGET_CALL in (ROOT / "README.md").read_text()
    budget = 4.25 * 2**30
    free = mp.solve("resnet50", "abci", devices=16, batch_size=512, memory_limit="none",
                    solver="highs", time_limit=60)
    bound = mp.solve("resnet50", "abci", devices=16, batch_size=512, memory_limit="4.25GiB",
                     solver="highs", time_limit=60)
    assert free.peak_memory_bytes > budget >= bound.peak_memory_bytes
    assert bound.step_seconds > free.step_seconds             # the budget costs time
    assert bound.assignment is not None and not np.array_equal(bound.assignment,
                                                               free.assignment)


def test_the_readme_oracle_commands_run_from_the_root():
    text = (ROOT / "README.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("milp-parallel oracle --paradl"))
    for path in re.findall(r"(data/\S+)", line):
        assert (ROOT / path).exists(), path
