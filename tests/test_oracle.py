"""The oracle: ParaDL's published SUMMARY tables reproduced exactly (parsed from the logs),
and the default mode's projections behave as the formulas say."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from milp_parallel import oracle
from milp_parallel.errors import UnknownNameError
from milp_parallel.oracle import paradl_files as paradl

DATA = Path(__file__).resolve().parents[1] / "data" / "paradl"
LOGS = sorted((DATA / "logs").glob("*.log"))
RESNET = DATA / "RESNET50_ImageNet_profall.net_sc"
PLAT = DATA / "ABCI.plat"


def _run_log(path, plx):
    text = path.read_text()
    cmd = oracle.parse_command(text)
    net = DATA / Path(cmd["net"]).name
    model = "resnet" if "RESNET" in net.name else "vgg"
    codes = cmd["strategies"]
    lc = None
    if any(c in ("f", "c", "df") for c in codes):
        lc = DATA / f"filter_{model}.lc"
    if any(c in ("s", "ds") for c in codes):
        lc = DATA / f"spatial_{model}.lc"
    # the repository's published data+spatial log predates its current code
    src = "log" if path.name.startswith("upstream_") else "code"
    got = oracle.paradl_summary(net, PLAT, codes, max_devices=cmd["max_devices"],
                                max_batch=cmd["max_batch"],
                                batch_per_device=cmd["batch_per_device"], layer_mask=lc,
                                plx_cable_latency_s=plx, ds_source=src)
    return got, oracle.parse_summary(text)


def _assert_rows(got, expected, keys):
    assert [g["name"] for g in got] == [e["name"] for e in expected]
    for g, e in zip(got, expected):
        for k in keys:
            assert g[k] == pytest.approx(e[k], rel=1e-6), (g["name"], g["p"], k)


def test_logs_are_there():
    assert len([p for p in LOGS if p.name.startswith("ranking_")]) == 3
    assert len([p for p in LOGS if "scaling_proj" in p.name]) == 5


ALL = ("B", "p", "mem_bytes", "comp_s", "comm_s", "time_s", "cost_node_minutes")


@pytest.mark.parametrize("log", [p for p in LOGS if "scaling_proj" not in p.name],
                         ids=lambda p: p.stem)
def test_ranking_summaries_reproduce_exactly(log):
    got, expected = _run_log(log, oracle.PLX_CABLE_LATENCY_S)
    assert expected
    _assert_rows(got, expected, ALL)


@pytest.mark.parametrize("log", [p for p in LOGS if "scaling_proj" in p.name],
                         ids=lambda p: p.stem)
def test_scaling_logs(log):
    # compute and memory reproduce with today's constants ...
    got, expected = _run_log(log, oracle.PLX_CABLE_LATENCY_S)
    _assert_rows(got, expected, ("B", "p", "mem_bytes", "comp_s"))
    # ... and everything with the older 15 us PLX cable latency
    got, expected = _run_log(log, oracle.PLX_CABLE_LATENCY_OLD_S)
    _assert_rows(got, expected, ALL)
    # the two differ by 10 us per ring step beyond one node
    multi = [e for e in expected if e["p"] > 4]
    if multi:
        now, _ = _run_log(log, oracle.PLX_CABLE_LATENCY_S)
        assert all(n["comm_s"] > g["comm_s"] for n, g in zip(now, got) if n["p"] > 4)


def test_summary_order_and_unknown_code():
    rows = oracle.paradl_summary(RESNET, PLAT, "d,o", max_devices=4, max_batch=1e6,
                                 batch_per_device=64)
    assert [r["name"] for r in rows] == ["single", "data", "data"]
    with pytest.raises(UnknownNameError, match="pipeline"):
        oracle.paradl_summary(RESNET, PLAT, "p", max_devices=4, max_batch=1e6,
                              batch_per_device=64)


def test_abci_link_constants():
    assert oracle.abci_link(4) == (50e9, 9e-6)
    for p, lat in ((8, 40.31e-6), (68, 40.31e-6), (69, 40.49e-6), (136, 40.49e-6),
                   (137, 40.98e-6)):
        bw, got = oracle.abci_link(p)
        assert bw == 12.5e9 and got == pytest.approx(lat, rel=1e-12)
        assert oracle.abci_link(p, plx_cable_latency_s=15e-6)[1] == pytest.approx(lat - 10e-6)


def test_project_paradl_mode_equals_summary():
    pr = oracle.project(RESNET, PLAT, "data", devices=[2, 4, 8, 16], batch_per_device=64,
                        mode="paradl")
    rows = oracle.paradl_summary(RESNET, PLAT, "d", max_devices=16, max_batch=262144,
                                 batch_per_device=64)
    assert [r.total_s for r in pr.rows] == pytest.approx([r["time_s"] for r in rows])
    for r in pr.rows:
        assert r.comm_s == pytest.approx(r.allreduce_s)
        assert r.iterations == math.ceil(1_280_000 / r.batch)


@pytest.fixture(scope="module")
def abci():
    clusters = pytest.importorskip("milp_parallel.machine.clusters")
    return clusters.get("abci", nodes=64)


def test_default_mode_data_scaling(abci):
    pr = oracle.project(RESNET, abci, "data", devices=[1, 2, 4, 8, 16, 32, 64, 128],
                        batch_per_device=32)
    r = pr.rows
    # weak scaling: compute halves as devices double, memory stays, comm grows sub-linearly
    comp = np.array([x.compute_s for x in r])
    assert np.allclose(comp[1:] / comp[:-1], 0.5, rtol=2e-3)  # ceil(D/B) iterations
    assert len({x.memory_bytes for x in r}) == 1
    assert r[0].comm_s == 0 and all(x.comm_s == pytest.approx(x.allreduce_s) for x in r)
    # activation memory counts RELU and BNORM rows, unlike ParaDL
    pd = oracle.project(RESNET, abci, "data", devices=[2], batch_per_device=32, mode="paradl")
    assert r[1].memory_bytes > pd.rows[0].memory_bytes
    t = paradl.read_net(RESNET)
    expect = 2 * 4 * (32 * (t.x_elems.sum() + t.y_elems.sum()) + t.w_elems.sum())
    assert r[1].memory_bytes == pytest.approx(expect)


def test_not_applicable_rows_have_reasons(abci):
    pr = oracle.project(RESNET, abci, "filter", devices=[2, 64, 128], batch_per_device=8)
    assert [x.applicable for x in pr.rows] == [True, True, False]
    assert "min F = 64" in pr.rows[2].reason and math.isnan(pr.rows[2].total_s)
    pr = oracle.project(RESNET, abci, "spatial", devices=[4, 8], batch_per_device=8)
    assert not pr.rows[1].applicable and "min W = 7" in pr.rows[1].reason
    pr = oracle.project(RESNET, abci, "data", devices=[4096], batch_per_device=8)
    assert not pr.rows[0].applicable and "256 devices" in pr.rows[0].reason


def test_filter_memory_quirk_and_collectives(abci):
    mask = DATA / "filter_resnet.lc"
    d = oracle.project(RESNET, abci, "filter", devices=[4], batch_per_device=8,
                       layer_mask=mask).rows[0]
    q = oracle.project(RESNET, PLAT, "filter", devices=[4], batch_per_device=8,
                       layer_mask=mask, mode="paradl").rows[0]
    t = paradl.read_net(RESNET)
    m = paradl.read_mask(mask, names=t.names)
    w = t.w_elems
    # ParaDL divides the split weights by p twice; the default mode once
    keep = ~np.isin(t.kinds, ["RELU", "BNORM"])
    act = 8 * (t.x_elems[keep].sum() + t.y_elems[keep].sum())
    assert q.memory_bytes == pytest.approx(8 * (act + (w[m].sum() / 4 + w[~m].sum()) / 4))
    act_all = 8 * (t.x_elems.sum() + t.y_elems.sum())
    assert d.memory_bytes == pytest.approx(8 * (act_all + w[m].sum() / 4 + w[~m].sum()))
    # default mode: per split layer (the last row excepted) an all-gather of the output
    # forward and an all-reduce of the input gradient backward, on the 4 GPUs of a node
    iters = math.ceil(t.dataset_size / 8)
    idx = [i for i in np.flatnonzero(m) if i != len(m) - 1]
    ag = sum(abci.allgather_seconds(range(4), 8 * t.y_elems[i] * 4, algorithm="auto")
             for i in idx)
    ar = sum(abci.allreduce_seconds(range(4), 8 * t.x_elems[i] * 4, algorithm="auto")
             for i in idx)
    assert d.allgather_s == pytest.approx(iters * ag, rel=1e-9)
    assert d.allreduce_s == pytest.approx(iters * ar, rel=1e-9) and d.halo_s == 0


def test_rank_bottleneck_and_exports(abci, tmp_path):
    ranked = oracle.rank(RESNET, abci, ["data", "filter", "data+filter", "spatial"],
                         devices=[4, 64], batch_per_device=8,
                         layer_masks={"filter": DATA / "filter_resnet.lc",
                                      "data+filter": DATA / "filter_resnet.lc",
                                      "spatial": DATA / "spatial_resnet.lc"})
    for p, rows in ranked.items():
        ok = [r for r in rows if r.applicable and r.fits]
        assert [r.total_s for r in ok] == sorted(r.total_s for r in ok)
        assert all(r.devices == p for r in rows)
        assert not rows[-1].applicable or all(r.applicable for r in rows)
    assert ranked[64][0].strategy == "data"
    pr = oracle.project(RESNET, abci, "filter", devices=[2, 4, 8, 16], batch_per_device=8)
    note = pr.bottleneck()
    first = next(r.devices for r in pr.rows if r.comm_s > r.compute_s)
    assert note.startswith(f"communication exceeds compute from {first} devices")
    csv_text = pr.to_csv(tmp_path / "p.csv")
    assert csv_text.splitlines()[0].startswith("strategy,devices,batch")
    assert len(csv_text.splitlines()) == 5
    d = json.loads(pr.to_json())
    assert d["bottleneck"] == note and len(d["rows"]) == 4


def test_pipeline_and_hybrids(abci):
    pr = oracle.project(RESNET, abci, "pipeline", devices=[2, 4, 8], batch_per_device=8)
    for r in pr.rows:
        assert r.applicable and r.p2p_s > 0 and r.allreduce_s == 0
    ds = oracle.project(RESNET, abci, "data+spatial", devices=[8, 16], batch_per_device=8,
                        layer_mask=DATA / "spatial_resnet.lc")
    assert all(r.halo_s > 0 and r.allgather_s > 0 for r in ds.rows)
    bad = oracle.project(RESNET, abci, "data+filter", devices=[6], batch_per_device=8)
    assert not bad.rows[0].applicable


def test_unknown_strategy():
    with pytest.raises(UnknownNameError, match="known"):
        oracle.project(RESNET, PLAT, "tensor", devices=[2], batch_per_device=8)


def test_compare_with_layerwise(abci):
    pytest.importorskip("milp_parallel.plan")
    from milp_parallel import clusters
    g = paradl.to_layer_graph(paradl.read_net(DATA / "ALEXNET_ImageNet.net"), batch_size=64)
    r = oracle.compare_with_layerwise(g, clusters.get("abci", nodes=1), 4, strategy="data",
                                      batch_size=64, time_limit=30)
    assert r["oracle"].applicable and r["oracle"].iterations == 1
    assert r["oracle_step_seconds"] == pytest.approx(r["oracle"].total_s)
    # the MILP optimum is never worse than the uniform data-parallel plan it can also choose
    assert r["optimum_step_seconds"] <= r["layerwise_step_seconds"] * (1 + 1e-9)


def _ds_by_hand(t, mask, b, p):
    """ParaDL's current parallel_analysis.py, data+spatial communication, written out."""
    net_w = t.w_elems.sum()
    last = int(np.flatnonzero(mask)[-1])
    P1 = p / 4                                        # P2 = 4 GPUs per node
    iters = math.ceil(t.dataset_size / (b * P1))
    no_gd_bw, no_gd_lat = 16e9, 3e-3 + 110e-9        # PCIe switch without GPUDirect
    beta = 1 / (no_gd_bw / 8)                         # / (2 P2): halos
    halo = 0.0
    for i in range(last + 1):
        k = int(t.w_shapes[i, 2])
        if k > 1 and mask[i]:
            size = t.x_shapes[i, 0] * ((k - 1) // 2) * np.prod(t.x_shapes[i, 2:]) * b * 4
            halo += 4 * (no_gd_lat + size * beta)
    ag = 2 * 3 * (no_gd_lat + b * t.y_elems[last] * 4 / (no_gd_bw / 2) / 4)
    ar = 2 * 3 * (9e-6 + net_w * 4 / 50e9 / 4)        # NVLink inside the node
    bw_ib, lat_ib = oracle.abci_link(p)
    ar += 2 * (P1 - 1) * (lat_ib + net_w * 4 / (bw_ib / 8) / P1)
    return iters * (halo + ag + ar)


@pytest.mark.parametrize("b,p", [(64, 16), (256, 64), (16, 256)])
def test_data_spatial_follows_the_current_code(b, p):
    t = paradl.read_net(RESNET)
    mask = np.asarray(paradl.read_mask(DATA / "spatial_resnet.lc", names=t.names))
    rows = oracle.paradl_summary(t, PLAT, "ds", max_devices=p, max_batch=1e9,
                                 batch_per_device=b, layer_mask=mask)
    got = next(r for r in rows if r["p"] == p)
    assert got["comm_s"] == pytest.approx(_ds_by_hand(t, mask, b, p), rel=1e-9)
    old = oracle.paradl_summary(t, PLAT, "ds", max_devices=p, max_batch=1e9,
                                batch_per_device=b, layer_mask=mask, ds_source="log")
    assert next(r for r in old if r["p"] == p)["comm_s"] < got["comm_s"]
    with pytest.raises(UnknownNameError, match="ds_source"):
        oracle.paradl_summary(t, PLAT, "ds", max_devices=p, max_batch=1e9,
                              batch_per_device=b, layer_mask=mask, ds_source="paper")


@pytest.mark.parametrize("bad", [-8, 0, float("nan"), float("inf"), "8", True])
def test_bad_batches_and_device_counts_are_typed_errors(bad):
    from milp_parallel.errors import InvalidOptionError
    with pytest.raises(InvalidOptionError, match="batch_per_device"):
        oracle.project(RESNET, PLAT, "data", devices=[2], batch_per_device=bad)
    with pytest.raises(InvalidOptionError, match="batch_per_device"):
        oracle.paradl_summary(RESNET, PLAT, "d", max_devices=4, max_batch=1e6,
                              batch_per_device=bad)
    with pytest.raises(InvalidOptionError, match="devices"):
        oracle.project(RESNET, PLAT, "data", devices=[bad], batch_per_device=8)


def test_max_devices_and_zoo_names():
    from milp_parallel.errors import InvalidOptionError
    for bad in (0, 0.5, -4, float("nan")):
        with pytest.raises(InvalidOptionError, match="max_devices"):
            oracle.paradl_summary(RESNET, PLAT, "d", max_devices=bad, max_batch=1e6,
                                  batch_per_device=8)
    with pytest.raises(InvalidOptionError, match="devices is empty"):
        oracle.project(RESNET, PLAT, "data", devices=[], batch_per_device=8)
    # a zoo name works as on the command line (ImageNet's samples per epoch)
    pr = oracle.project("resnet50", "abci", "data", devices=[1, 4], batch_per_device=8)
    assert pr.dataset_size == 1_281_167 and pr.rows[1].applicable
    assert pr.rows[1].compute_s < pr.rows[0].compute_s
    with pytest.raises(UnknownNameError, match="resnet50"):
        oracle.project("resnet5O", "abci", "data", devices=[1], batch_per_device=8)


def test_default_data_spatial_halos_are_a_chain_of_host_staged_messages(abci):
    # ChainerMN-X: per masked kernel > 1 layer, the lower then the upper pass of blocking
    # sends along the 4 ranks of a node (3 transfers each, one after the other), forward
    # (input rows) and backward (output-gradient rows), through host memory: 3 ms + bytes /
    # (16 GB/s / 2) per message
    t = paradl.read_net(RESNET)
    mask = np.asarray(paradl.read_mask(DATA / "spatial_resnet.lc", names=t.names))
    b = 32
    r = oracle.project(RESNET, abci, "data+spatial", devices=[16], batch_per_device=b,
                       layer_mask=mask, gpudirect=False).rows[0]
    last = int(np.flatnonzero(mask)[-1])
    msg = 0.0
    for i in range(last + 1):
        k = int(t.w_shapes[i, 2])
        if k > 1 and mask[i]:
            for shape in (t.x_shapes[i], t.y_shapes[i]):
                size = shape[0] * np.prod(shape[2:]) * (k // 2) * b * 4
                msg += 2 * 3 * (3e-3 + 110e-9 + size / 8e9)
    iters = math.ceil(t.dataset_size / (b * 4))
    assert r.halo_s == pytest.approx(iters * msg, rel=1e-9)
    # device to device over NVLink instead: far less
    fast = oracle.project(RESNET, abci, "data+spatial", devices=[16], batch_per_device=b,
                          layer_mask=mask).rows[0]
    assert fast.halo_s < r.halo_s / 10 and fast.compute_s == pytest.approx(r.compute_s)


# ---------------------------------------------------------------------- issue 22.5
def test_a_preset_name_grows_in_the_api_as_on_the_command_line(capsys):
    from milp_parallel.cli import main
    pr = oracle.project("resnet50", "abci", "data", devices=[1024], batch_per_device=32)
    (row,) = pr.rows
    assert row.applicable and math.isfinite(row.total_s) and row.devices == 1024
    assert main(["oracle", "resnet50", "--cluster", "abci", "--devices", "1024",
                 "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["rows"][0] == pytest.approx(
        {k: v for k, v in json.loads(pr.to_json())["rows"][0].items()})
    assert doc["cluster"] == pr.cluster == "abci"


def test_a_topology_too_small_says_how_to_grow_it():
    from milp_parallel import clusters
    pr = oracle.project(RESNET, clusters.get("abci"), "data", devices=[1024],
                        batch_per_device=32)
    assert not pr.rows[0].applicable
    assert "has 16 devices" in pr.rows[0].reason and "for_devices('abci', 1024)" in \
        pr.rows[0].reason


def test_memory_says_what_it_counts_and_follows_the_dtype():
    from milp_parallel import clusters
    d = oracle.project(RESNET, "abci", "data", devices=[4], batch_per_device=32)
    q = oracle.project(RESNET, "abci", "data", devices=[4], batch_per_device=32, mode="paradl")
    assert "every layer" in d.memory_note and "RELU and BNORM" in q.memory_note
    assert "no optimizer state" in d.memory_note and "GB = 1e9 bytes" in d.memory_note
    # ParaDL's number, 7.81 GB, where the rule is ParaDL's; every row counted doubles it
    assert q.rows[0].memory_bytes == 7808358912.0
    assert d.rows[0].memory_bytes > 2 * q.rows[0].memory_bytes
    # default mode's delta is the topology's dtype size: bf16 halves every byte
    fp32 = oracle.project(RESNET, clusters.get("dgx_a100"), "data", devices=[8],
                          batch_per_device=32).rows[0]
    bf16 = oracle.project(RESNET, clusters.get("dgx_a100", dtype="bf16"), "data", devices=[8],
                          batch_per_device=32).rows[0]
    assert bf16.memory_bytes == pytest.approx(fp32.memory_bytes / 2)
    assert bf16.allreduce_s < fp32.allreduce_s          # half the gradient bytes


def test_the_cli_prints_the_memory_note_and_the_global_batch(capsys):
    from milp_parallel.cli import main
    assert main(["oracle", str(RESNET), "--cluster", "abci", "--devices", "4"]) == 0
    out = capsys.readouterr().out
    assert "global batch" in out and "memory per device = 2 x 4 B" in out


def test_default_mode_prices_one_device_with_the_same_roofline_as_more():
    # the 1-device row used FLOPs / speed while 2+ devices used the roofline (lenet5: 0.29 s
    # at 1 GPU, 4.8 s at 2): weak scaling now halves compute from 1 to 2 devices
    pr = oracle.project("lenet5", "abci", "data", devices=[1, 2], batch_per_device=32)
    one, two = pr.rows
    assert one.compute_s == pytest.approx(2 * two.compute_s, rel=1e-3)
    serial = oracle.project("lenet5", "abci", "serial", devices=[1], batch_per_device=32)
    assert serial.rows[0].compute_s == pytest.approx(one.compute_s)


def test_a_preset_grows_only_as_far_as_the_projection_can_walk():
    from milp_parallel.errors import InvalidOptionError
    with pytest.raises(InvalidOptionError, match="beyond the 1048576 devices a preset name"):
        oracle.project(RESNET, "abci", "data", devices=[4, 10**12], batch_per_device=32)
