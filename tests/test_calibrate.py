"""Calibration: the fit recovers known alpha-beta from synthetic timings; calibrate runs end
to end with 2 gloo processes on CPU."""

import json

import numpy as np
import pytest

from milp_parallel.cli import main
from milp_parallel.errors import InvalidTopologyError
from milp_parallel.machine.topology import Topology
from milp_parallel.measure.calibrate import (
    Measurement,
    fit_alpha_beta,
    load_report,
    overlap_efficiency,
)


def synthetic(alpha, bw, r, noise=0.0, seed=0):
    """Timings of the three kinds from the formulas of milp_parallel.machine.collectives."""
    rng = np.random.default_rng(seed)
    out = []
    for m in (4096 * 4 ** i for i in range(7)):
        exact = {"allreduce": 2 * (r - 1) * (alpha + m / r / bw),
                 "allgather": (r - 1) * (alpha + m / r / bw),
                 "p2p": alpha + m / bw}
        for kind, sec in exact.items():
            out.append(Measurement(kind, r, float(m), sec * (1 + noise * rng.standard_normal())))
    return out


@pytest.mark.parametrize("alpha,bw,r", [(50e-6, 1.2e9, 2), (9e-6, 50e9, 4), (3e-3, 2e8, 8)])
def test_fit_recovers_alpha_beta(alpha, bw, r):
    fit = fit_alpha_beta(synthetic(alpha, bw, r))
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-9)
    assert fit.rms_relative_error < 1e-9 and fit.n == 21
    noisy = fit_alpha_beta(synthetic(alpha, bw, r, noise=0.05, seed=1))
    assert noisy.alpha_s == pytest.approx(alpha, rel=0.2)
    assert noisy.bandwidth_bytes_per_s == pytest.approx(bw, rel=0.1)
    assert 0.01 < noisy.rms_relative_error < 0.1


def test_fit_checks_its_input():
    with pytest.raises(InvalidTopologyError, match="two sizes"):
        fit_alpha_beta([Measurement("p2p", 2, 1e3, 1e-5)])
    with pytest.raises(InvalidTopologyError, match="bad measurement"):
        fit_alpha_beta([Measurement("p2p", 2, 1e3, -1.0), Measurement("p2p", 2, 1e6, 1e-3)])
    with pytest.raises(InvalidTopologyError, match="kind"):
        fit_alpha_beta([Measurement("bcast", 2, 1e3, 1e-5), Measurement("bcast", 2, 1e6, 1e-3)])
    # pure latency: no bandwidth can be fitted
    with pytest.raises(InvalidTopologyError, match="bandwidth"):
        fit_alpha_beta([Measurement("p2p", 2, 1e3, 1e-5), Measurement("p2p", 2, 1e4, 1e-5)])


def test_overlap_efficiency():
    assert overlap_efficiency([(1.0, 1.0, 1.0)]) == 1.0          # fully hidden
    assert overlap_efficiency([(1.0, 1.0, 2.0)]) == 0.0          # serialized
    assert overlap_efficiency([(2.0, 1.0, 2.5), (2.0, 1.0, 2.5)]) == pytest.approx(0.5)


def test_calibrate_end_to_end_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "cpu2.json"
    prof = tmp_path / "prof.json"
    code = main(["calibrate", "--out", str(out), "--repeats", "3", "--max-bytes", "4MiB",
                 "--profile", str(prof), "--model", "lenet5", "--batch-size", "4"])
    assert code == 0
    text = capsys.readouterr().out
    assert "alpha" in text and "bandwidth" in text
    topo = Topology.load(out)
    assert topo.n_devices == 2 and topo.levels[0].name == "gloo"
    assert topo.levels[0].bandwidth_bytes_per_s > 0 and topo.levels[0].latency_s >= 0
    assert topo.device.peak_flops > 0 and topo.device.memory_bandwidth_bytes_per_s > 0
    rep = load_report(out)
    assert rep["world_size"] == 2 and len(rep["measurements"]) == 4 * 6
    assert 0.0 <= rep["overlap_efficiency"] <= 1.0
    # the link is the point-to-point fit, the collectives keep their own
    assert rep["statistic"] == "median" and rep["timing"] == "loop"
    fits = rep["fits_by_kind"]
    lv = topo.levels[0]
    # (three repetitions on a busy machine may leave a kind with no fit: then the link is
    # the joint fit, and the kind is left to it)
    link = rep["fit"] if "error" in fits["p2p"] else fits["p2p"]
    assert lv.bandwidth_bytes_per_s == link["bandwidth_bytes_per_s"]
    assert lv.latency_s == link["alpha_s"]
    assert {k: (a, b) for k, a, b in lv.collectives} == {
        k: (fits[k]["alpha_s"], fits[k]["bandwidth_bytes_per_s"])
        for k in ("allreduce", "allgather", "alltoall") if "error" not in fits[k]}
    table = json.loads(prof.read_text())
    assert table["entries"] and table["meta"]["concurrent_processes"] == 2
    assert table["optimizer"] == "adam" and any("update_seconds" in e
                                                for e in table["entries"])
    # the calibrated cluster solves like any other
    import milp_parallel as mp
    plan = mp.solve("lenet5", str(out), batch_size=4, solver="dp", cross_check=False,
                    profile=str(prof))
    assert plan.devices == 2 and plan.simulated_step_seconds > 0
    assert main(["calibrate", "--out", str(out), "--max-bytes", "8KiB"]) == 2


@pytest.mark.parametrize("timing", ["loop", "aligned"])
def test_collectives_are_timed_in_a_loop_of_compute_or_aligned(timing):
    # "loop": what each collective adds to rounds of compute issued back to back, as a
    # program issues it; "aligned": each after a barrier
    pytest.importorskip("torch")
    from milp_parallel.measure.calibrate import measure_collectives
    ms = measure_collectives(2, (4096, 65536), repeats=3, warmup=1, timing=timing)
    assert sorted({m.kind for m in ms}) == ["allgather", "allreduce", "alltoall", "p2p"]
    assert len(ms) == 8 and all(m.seconds > 0 and m.world_size == 2 for m in ms)


def test_an_unknown_timing_is_refused():
    pytest.importorskip("torch")
    from milp_parallel.errors import InvalidTopologyError
    from milp_parallel.measure.calibrate import measure_collectives
    with pytest.raises(InvalidTopologyError, match="timing"):
        measure_collectives(2, (4096, 65536), timing="barrier")
