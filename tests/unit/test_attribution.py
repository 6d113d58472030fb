"""A shared GPU's activity split among its pods (streaming/attribution.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.attribution import DeviceReading, attribute, shares

A, B, C = ("ml", "a"), ("ml", "b"), ("ml", "c")


def test_a_gpu_of_its_own_keeps_its_figures_unestimated():
    got = attribute([DeviceReading(A, "GPU-1", {"gpu_util": 0.4, "sm_active": 0.27})])
    assert got[A].values == {"gpu_util": 0.4, "sm_active": 0.27} and not got[A].estimated


def test_no_uuid_counts_as_the_pods_own_gpu():
    got = attribute([DeviceReading(A, "", {"gpu_util": 0.4, "sm_active": 0.3}),
                     DeviceReading(B, "", {"gpu_util": 0.2, "sm_active": 0.1})])
    assert got[A].values["sm_active"] == 0.3 and got[B].values["sm_active"] == 0.1
    assert not got[A].estimated and not got[B].estimated


def test_time_slicing_splits_by_gpu_util():
    """The H200 pair resnet50-bs32 + bert-server under time-slicing: per-pod util 73 and 19, device SM active 0.25."""
    got = attribute([DeviceReading(A, "GPU-1", {"gpu_util": 0.73, "sm_active": 0.25, "dram_active": 0.08}),
                     DeviceReading(B, "GPU-1", {"gpu_util": 0.19, "sm_active": 0.25, "dram_active": 0.08})])
    assert got[A].values["sm_active"] == pytest.approx(0.25 * 73 / 92)
    assert got[B].values["dram_active"] == pytest.approx(0.08 * 19 / 92)
    assert got[A].values["gpu_util"] == 0.73  # the pod's own, never split
    assert got[A].estimated and got[B].estimated


def test_mps_clients_reading_zero_split_evenly():
    got = attribute([DeviceReading(p, "GPU-1", {"gpu_util": 0.0, "sm_active": 0.9}) for p in (A, B, C)])
    assert [got[p].values["sm_active"] for p in (A, B, C)] == pytest.approx([0.3, 0.3, 0.3])


def test_a_pod_on_a_shared_and_an_own_gpu_gets_the_mean():
    got = attribute([DeviceReading(A, "GPU-1", {"gpu_util": 0.5, "sm_active": 0.8}),
                     DeviceReading(B, "GPU-1", {"gpu_util": 0.5, "sm_active": 0.8}),
                     DeviceReading(A, "GPU-2", {"gpu_util": 0.9, "sm_active": 0.9})])
    assert got[A].values["sm_active"] == pytest.approx((0.4 + 0.9) / 2) and got[A].estimated
    assert got[A].values["gpu_util"] == pytest.approx(0.7)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=6), st.floats(0, 1))
def test_the_shares_add_up_to_the_gpu(utils, sm_active):
    pods = [("ns", f"p{i}") for i in range(len(utils))]
    assert sum(shares(dict(zip(pods, utils, strict=True))).values()) == pytest.approx(1.0)
    got = attribute([DeviceReading(p, "GPU-1", {"gpu_util": u, "sm_active": sm_active})
                     for p, u in zip(pods, utils, strict=True)])
    assert sum(f.values["sm_active"] for f in got.values()) == pytest.approx(sm_active)
