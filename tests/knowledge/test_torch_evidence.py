"""benchmarks/gpu_proof/torch_evidence.py, the GPU node's own PyTorch against matrix.yaml: its
comparison, on what the lent H100's torch 2.11.0+cu130 reported (docs/benchmarks.md, 2026-11-27),
and on the same with one fact changed. Pure logic: no torch, no GPU."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("torch_evidence",
                                              ROOT / "benchmarks" / "gpu_proof" / "torch_evidence.py")
te = importlib.util.module_from_spec(spec)
spec.loader.exec_module(te)

H100_2_11 = {
    "version": "2.11.0+cu130", "cuda": "13.0", "git_version": "70d99e998b4955e0049d13a98d77ae1b14db1f45",
    "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "device": "NVIDIA H100 80GB HBM3", "capability": "9.0", "cudnn_loaded": "9.19.0",
    "nccl_loaded": "2.28.9",
    "pins": {"nvidia-cudnn-cu13": "9.19.0.56", "nvidia-nccl-cu13": "2.28.9", "cuda-toolkit": "13.0.2"},
}


def test_the_h100_build_agrees_on_every_fact():
    rows = te.compare(H100_2_11, str(ROOT / "matrix.yaml"))
    assert len(rows) == 8 and all(ok for *_, ok in rows), rows


@pytest.mark.parametrize("key,value,what", [
    ("git_version", "0" * 40, "commit"),
    ("arch_list", ["sm_80", "sm_90"], "architectures"),
    ("nccl_loaded", "2.27.5", "NCCL loaded"),
    ("pins", {"nvidia-cudnn-cu13": "9.17.1.4", "nvidia-nccl-cu13": "2.28.9",
              "cuda-toolkit": "13.0.2"}, "cuDNN pin"),
])
def test_one_fact_that_differs_is_named(key, value, what):
    rows = te.compare({**H100_2_11, key: value}, str(ROOT / "matrix.yaml"))
    differ = [r[0] for r in rows if not r[3]]
    assert len(differ) == 1 and differ[0].startswith(what), differ


def test_a_build_the_matrix_lacks_is_refused():
    with pytest.raises(SystemExit, match="has no variant 2.11.0"):
        te.compare({**H100_2_11, "cuda": "12.9"}, str(ROOT / "matrix.yaml"))
