"""Issue 26.4: the oracle's accuracy against ParaDL's measured ResNet-50 runs, on ParaDL's
metric (projected / measured, which rewards over-projection) and on the symmetric one
(min / max). ParaDL reports 86.74% on its own metric; the default mode does not reach that
on the symmetric metric yet, so the floors below are today's values (a regression floor,
not the target; see benchmarks/RESULTS.md, ParaDL section)."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.oracle_paradl import measured_comparison

PARADL_REPORTED = 0.8674


@pytest.fixture(scope="module")
def rows():
    return measured_comparison()


def test_symmetric_is_reported_next_to_paradls_metric(rows):
    for r in rows:
        for tag in ("paradl", "paradl_log", "default"):
            ratio, sym = r[f"{tag}_ratio"], r[f"{tag}_accuracy"]
            assert sym == pytest.approx(min(ratio, 1 / ratio))


def test_default_mode_floor(rows):
    sym = statistics.mean(r["default_accuracy"] for r in rows)
    ratio = statistics.mean(r["default_ratio"] for r in rows)
    assert ratio >= 0.939            # ParaDL's metric: 93.95% today
    assert sym >= 0.804              # symmetric: 80.48% today, below ParaDL's 86.74%
    assert sym < PARADL_REPORTED     # when this fails, the gap is closed: raise the floor
    # the under-projection of data+filter is where the gap is (0.64-0.82 per row)
    df = [r["default_accuracy"] for r in rows if r["strategy"] == "data+filter"]
    assert max(df) < 0.83
