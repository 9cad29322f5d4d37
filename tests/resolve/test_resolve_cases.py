"""The answers users come for, on the clusters they run (the knowledge issue's cases).

Each case goes through the real matrix.yaml and the real resolver; refusals must carry the chain
of facts, with sources, that rules them out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import answer

from imagebuild import cli
from imagebuild.resolve import solver as R

ROOT = Path(__file__).resolve().parents[2]
MATRIX = str(ROOT / "matrix.yaml")


def _ok(k, wishes=None, **host):
    res = R.resolve(k, R.Host(**host), wishes or {})
    assert res.ok, res.explanation
    return res


def _refused(k, wishes=None, **host):
    res = R.resolve(k, R.Host(**host), wishes or {})
    assert not res.ok, res.stack
    assert res.explanation, "a refusal without its chain of facts"
    return "\n".join(res.explanation)


# --- cuDNN 9.10's 570.26 row is Blackwell's only --------------------------------------------------

@pytest.mark.parametrize("driver", ["535.104.05", "550.54.15"])
def test_torch_cu128_runs_on_r535_and_r550_up_to_hopper(k, driver):
    res = _ok(k, {"pytorch": "==2.8.0"}, driver=driver, gpu="H100")
    assert res.stack["cudnn"] == "9.10.2.21"
    assert res.stack["cuda"].startswith("12.8")
    assert res.mode.mode == "minor-version"
    assert res.min_driver == "525.60.13"


def test_torch_cu128_on_blackwell_needs_the_570_row(k):
    # a B200 on R570 (its first branch) takes cuDNN 9.10's Blackwell row
    res = _ok(k, {"pytorch": "==2.8.0"}, driver="570.133.20", gpu="B200")
    assert res.min_driver == "570.26"


def test_cu128_images_require_the_driver_of_the_hopper_row():
    text = (ROOT / "Dockerfiles" / "pytorch-2.10.0-cu128-ubuntu24.04-runtime" / "Dockerfile").read_text()
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.0,driver>=525.60.13"' in text
    # the Hopper row's floor is the image's; Blackwell's own is that arch's: cuDNN's sm_100 row
    # asks 570.26, and every sm_100 product (B200, GB200) asks 570.133.20 (MIG620), the higher
    require_arch = next(ln for ln in text.splitlines() if "NVIDIA_REQUIRE_ARCH=" in ln)
    assert "arch=9.0 " in require_arch and "arch=10.0,driver>=570.133.20" in require_arch
    assert "arch=12.0,driver>=570.26" in require_arch


# --- a GPU user gets a GPU stack ----------------------------------------------------------------

def test_v100_on_r470_gets_a_cuda_11_8_build_not_cpu(k):
    res = _ok(k, driver="470.82.01", gpu="V100")
    assert res.stack["cuda"].startswith("11.8") and res.stack["pytorch"] != "none"
    assert res.mode.mode == "minor-version"


@pytest.mark.parametrize("host,wishes", [({"driver": "470.82.01", "gpu": "none"}, {}),
                                         ({"driver": "470.82.01", "gpu": "V100"}, {"cuda": "none"})])
def test_a_cpu_stack_only_when_asked_for(k, host, wishes):
    res = _ok(k, wishes, **host)
    assert res.stack["cuda"] == "none" and res.stack["pytorch"] != "none"


def test_no_gpu_stack_says_so_and_points_at_the_cpu_one(k):
    # torch 2.13 has no CUDA build that runs on R470, only its CPU build would
    chain = _refused(k, {"pytorch": "==2.13.0"}, driver="470.82.01", gpu="V100")
    assert "--cuda none" in chain


# --- a GPU needs its driver ----------------------------------------------------------------------

@pytest.mark.parametrize("gpu,driver,branch", [("B200", "535.104.05", "R570"),
                                               ("B300", "575.57.08", "R580"),
                                               ("H200", "535.104.05", "R550"),
                                               ("H20", "525.147.05", "R535"),
                                               ("RTX PRO 6000 Blackwell", "570.124.06", "R575")])
def test_a_driver_that_cannot_drive_the_gpu_is_refused(k, gpu, driver, branch):
    chain = _refused(k, driver=driver, gpu=gpu)
    assert f"from {branch}" in chain and f"the host has driver {driver}" in chain
    assert "[MIG620]" in chain


def test_last_branch_still_refuses_newer_drivers_for_old_gpus(k):
    chain = _refused(k, driver="535.104.05", gpu="K80")
    assert "up to R470" in chain


def test_blackwell_on_its_first_branch_resolves(k):
    res = _ok(k, driver="570.133.20", gpu="B200")
    assert res.stack["cuda"] >= "12.8"


# --- forward compatibility as NVIDIA's table states it ------------------------------------------

def test_forward_compat_per_release_table(k):
    res = _ok(k, {"cuda": "13.0"}, driver="535.104.05", gpu="H100", date="2026-05-01")
    assert (res.mode.mode, res.mode.package) == ("forward-compat", "cuda-compat-13-0")
    chain = _refused(k, {"cuda": "13.0"}, driver="550.54.15", gpu="H100", date="2026-05-01")
    assert "cuda-compat-13-0 supports driver branches R570, R535, not the host's R550 [FWD615]" in chain
    chain = _refused(k, {"cuda": "13.0"}, driver="535.104.05", gpu="RTX 4090", date="2026-05-01")
    assert "not a data-center GPU" in chain


@pytest.mark.parametrize("driver,day,runs", [
    ("570.172.08", "2026-01-31", True),      # R570's end of life is February 2026 (S6)
    ("570.172.08", "2026-03-01", False),
    ("535.104.05", "2026-05-31", True),      # R535's is June 2026 (S6)
    ("535.104.05", "2026-07-01", False),
    ("580.95.05", "2026-11-21", True)])      # R580 is supported: CUDA 13.0 by minor-version
def test_forward_compat_ends_with_the_host_branch(k, driver, day, runs):
    """A forward-compatibility target is judged on --date against its branch's end of life: the
    compat libraries need a branch NVIDIA still supports (S4, S3), so past it the answer is no."""
    res = R.resolve(k, R.Host(driver=driver, gpu="H100", date=day), {"cuda": "13.0"})
    assert res.ok == runs, res.explanation
    if not runs:
        assert any("reached end of life" in line and "cuda-compat cannot help" in line
                   for line in res.explanation), res.explanation


# --- coverage ------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu,cc", [("H20", "9.0"), ("H800", "9.0"), ("A800", "8.0"), ("L20", "8.9"),
                                    ("L40", "8.9"), ("RTX 6000 Ada", "8.9"),
                                    ("RTX PRO 6000 Blackwell", "12.0"),
                                    ("RTX PRO 6000 Blackwell Server Edition", "12.0"),
                                    ("B300", "10.3"), ("GB300", "10.3"), ("GB10", "12.1")])
def test_gpus_are_known(k, gpu, cc):
    g = k.gpu_by_name(gpu)
    assert g is not None and g.cc == cc


@pytest.mark.parametrize("gpu", ["GH200", "GB200", "GB300", "GB10"])
def test_grace_nodes_resolve_to_aarch64_stacks(k, gpu):
    res = _ok(k, gpu=gpu)
    assert res.stack["platform"] == "aarch64"
    assert res.stack["pytorch"] >= "2.11"   # CUDA aarch64 wheels start at 2.11.0 (S10)


@pytest.mark.parametrize("printed,name", [("NVIDIA H100 80GB HBM3", "H100"),
                                          ("Tesla V100-SXM2-16GB", "V100"),
                                          ("A100-SXM4-80GB", "A100"), ("GH200 480GB", "GH200"),
                                          ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                                           "RTX PRO 6000 Blackwell"),
                                          ("NVIDIA GeForce RTX 5090", "RTX 5090"),
                                          ("NVIDIA GeForce RTX 4090", "RTX 4090"),
                                          ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
                                          ("NVIDIA GeForce RTX 5080", "RTX 5080"),
                                          ("NVIDIA RTX A6000", "RTX A6000"),
                                          ("NVIDIA RTX 4000 SFF Ada Generation", "RTX 4000 SFF Ada"),
                                          ("NVIDIA RTX PRO 4500 Blackwell Server Edition",
                                           "RTX PRO 4500 Blackwell Server Edition")])
def test_gpu_names_as_nvidia_smi_prints_them(k, printed, name):
    assert k.gpu_by_name(printed).name == name


@pytest.mark.parametrize("name,cc,datacenter", [("RTX 5080", "12.0", False), ("RTX A6000", "8.6", False),
                                                ("A16", "8.6", True), ("RTX 4060", "8.9", False),
                                                ("RTX PRO 4500 Blackwell Server Edition", "12.0", True)])
def test_workstation_and_consumer_gpus_from_nvidia_s_cuda_gpus_page(k, name, cc, datacenter):
    """GPUS (developer.nvidia.com/cuda-gpus): the cc and the column (Data Center, or
    Workstation/Consumer: no forward compatibility through cuda-compat) of each product."""
    g = k.gpus[name]
    assert (g.cc, g.datacenter, g.source) == (cc, datacenter, "GPUS")


def test_platform_aliases(k):
    assert _ok(k, {"platform": "arm64"}).stack["platform"] == "aarch64"


def test_x86_hopper_stays_x86(k):
    assert _ok(k, gpu="H100").stack["platform"] == "x86_64"


def test_newest_cuda_releases_and_torch_2_15_brings_13_2_2(k):
    for v in ("12.9.2", "13.2.2", "13.4.1", "13.4.2"):
        assert v in k.releases
    res = _ok(k, {"pytorch": "==2.15.0"}, driver="595.71.05", gpu="H100")
    assert res.stack["cuda"] == "13.2.2" and res.mode.mode == "native"


@pytest.mark.parametrize("nccl", ["2.31.2", "2.32.3"])
def test_a_newer_nccl_than_the_wheel_pins_is_a_stack(k, nccl):
    # cuda pinned: with no host facts the newest CUDA wins, the cu132 build (TORCHREL213)
    res = _ok(k, {"pytorch": "==2.13.0", "cuda": "==13.0.*", "nccl": f"=={nccl}"})
    assert res.stack["nccl"] == nccl
    assert any("newer than the 2.29.7 torch 2.13.0+cu130 bundles" in line for line in res.explanation)


def test_the_bundled_nccl_ranks_first(k):
    assert _ok(k, {"pytorch": "==2.13.0"}).stack["nccl"] == "2.29.7"


def test_every_nccl_release_to_2_32_is_selectable(k):
    doms = k.domain("nccl")
    for v in ("2.27.3", "2.28.3", "2.30.4", "2.31.2", "2.32.3"):
        assert v in doms


def test_wheel_cuda_is_not_bound_to_the_os_repository(k):
    # torch 2.6 cu124 on Ubuntu 24.04: CUDA comes from the wheels, so the repository's 12.5.1 floor
    # does not apply ...
    res = _ok(k, {"pytorch": "==2.6.0", "cuda": "12.4", "os": "ubuntu24.04"})
    assert res.stack["cuda"].startswith("12.4")
    # ... but an image recipe installing CUDA from NVIDIA's repository cannot have it
    res = R.resolve(k, R.Host(), {"pytorch": "==2.6.0", "cuda": "12.4", "os": "ubuntu24.04"},
                    repo_cuda=True)
    assert not res.ok
    assert any("repository for Ubuntu 24.04 carries CUDA >=12.5.1" in line for line in res.explanation)


@pytest.mark.parametrize("python,os_id", [("3.13", "debian13"), ("3.14", "ubuntu26.04")])
def test_new_pythons_come_with_an_os_that_ships_them(k, python, os_id):
    res = _ok(k, {"python": python}, driver="580.95.05", gpu="H100")
    assert res.stack["os"] == os_id


def test_python_ranges_read_from_the_wheels(k):
    assert _ok(k, {"pytorch": "==2.5.1", "python": "3.13"}).stack["os"] == "debian13"
    chain = _refused(k, {"pytorch": "==2.14.1", "python": "3.15"})
    assert "torch 2.14.1 supports Python >=3.10,<3.15" in chain or "python" in chain


def test_nccl_feature_dates(k):
    feats = {f.feature: f.since for f in k.nccl_features}
    assert feats["NVLS + IB SHARP for all-gather and reduce-scatter"] == "2.27.3"


def test_ucx_1_20_1_and_newer_are_selectable(k):
    assert {"1.20.1", "1.21.0", "1.22.0"} <= set(k.ucx)


# --- check: both copies, unnamed components free -------------------------------------------------

H100_HOST = ["--driver", "580.159.04", "--gpu", "H100", "--torch", "2.11.0", "--cuda", "13.0",
             "--cudnn", "9.19.0.56", "--nccl", "2.28.9"]


def test_check_a_real_h100_host_with_system_copies(capsys):
    rc = cli.main(["check", "--matrix", MATRIX, *H100_HOST, "--system-nccl", "2.28.3",
                   "--system-cudnn", "9.14.0", "--ucx", "1.16.0", "--openmpi", "4.1.6", "--json"])
    doc = answer(capsys.readouterr().out, "check")
    assert rc == 0 and doc["ok"], doc["explanation"]
    assert doc["stack"]["system_cudnn"] == "9.14.0" and doc["stack"]["system_nccl"] == "2.28.3"
    assert any("ucx >=1.20" in w for w in doc["warnings"])   # Ubuntu's UCX: not CUDA-aware


def test_check_names_only_the_torch_stack(capsys):
    assert cli.main(["check", "--matrix", MATRIX, *H100_HOST]) == 0


def test_check_refuses_a_system_cudnn_not_built_for_the_stacks_cuda(capsys):
    rc = cli.main(["check", "--matrix", MATRIX, *H100_HOST, "--system-cudnn", "8.9.2"])
    out = capsys.readouterr().out
    assert rc == 1 and "system cudnn 8.9.2" in out and "[S10]" in out


def test_check_refuses_an_unknown_system_copy_version(capsys):
    rc = cli.main(["check", "--matrix", MATRIX, *H100_HOST, "--system-nccl", "2.99.1"])
    assert rc == 1 and "not a nccl release the knowledge names" in capsys.readouterr().out


# --- resolve on a machine built like NGC's: the host's own cuDNN and NCCL ----------------------------

def _system_ok(k, system, wishes=None, **host):
    res = R.resolve(k, R.Host(**host), wishes or {}, system=system)
    assert res.ok, res.explanation
    return res


def test_resolve_keeps_a_system_cudnn_beside_the_best_stack(k):
    """cuDNN 9.14 is published for CUDA 12 and 13 [S10] and no support-matrix line binds it: the
    best stack is the one without the system copy, which the answer names beside its own."""
    host = {"driver": "580.95.05", "gpu": "H100"}
    plain = R.resolve(k, R.Host(**host))
    res = _system_ok(k, {"cudnn": "9.14.0"}, **host)
    assert res.stack == {**plain.stack, "system_cudnn": "9.14.0"}
    assert res.explanation[-1].startswith(f"system cudnn 9.14.0: consistent with CUDA {plain.stack['cuda']}")


def test_a_system_cudnn_8_9_narrows_cuda_to_what_it_was_built_for(k):
    """cuDNN 8.9.x runs with CUDA 11.0-11.8 or 12.0-12.2 [S9]: the stack's CUDA is one of those,
    whatever newer release the host's driver could run."""
    res = _system_ok(k, {"cudnn": "8.9.7"}, driver="580.95.05", gpu="H100")
    cuda = res.stack["cuda"]
    assert cuda.startswith("11.") or cuda.split(".")[:2] in (["12", "0"], ["12", "1"], ["12", "2"]), cuda
    assert res.stack["system_cudnn"] == "8.9.7"
    # every stack --all lists keeps to those CUDA releases too
    groups = R.enumerate_stacks(k, R.Host(driver="580.95.05", gpu="H100"), system={"cudnn": "8.9.7"})
    assert groups and all(g.head["cuda"].startswith(("11.", "12.0", "12.1", "12.2")) for g in groups)


def test_a_wish_the_system_copy_cannot_sit_beside_is_refused_with_the_fact(k):
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="H100"), {"pytorch": "2.9"}, system={"cudnn": "8.9.7"})
    text = "\n".join(res.explanation)
    assert not res.ok
    assert "system cudnn 8.9.7: cuDNN >=8.9,<8.10 runs with cuda >=12.0,<12.3" in text and "[S9]" in text
    assert "pytorch 2.9 (your wish)" in text


def test_a_system_nccl_built_for_cuda_11_only_keeps_cuda_11(k):
    """NCCL 2.13.4 has wheels for CUDA 11 only [S10] (its CUDA 12 builds start at 2.16.2). (An
    A100: Hopper needs NCCL 2.15.1 or newer, NCCLHIST.)"""
    res = _system_ok(k, {"nccl": "2.13.4"}, driver="580.95.05", gpu="A100")
    assert res.stack["cuda"].startswith("11.") and res.stack["system_nccl"] == "2.13.4"


def test_resolve_takes_system_copies_on_the_command_line(capsys):
    rc = cli.main(["resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "H100",
                   "--system-cudnn", "8.9.7", "--system-nccl", "2.18.3", "--json"])
    doc = answer(capsys.readouterr().out, "resolve")
    assert rc == 0 and doc["stack"]["system_cudnn"] == "8.9.7" and doc["stack"]["system_nccl"] == "2.18.3"
    assert doc["stack"]["cuda"].startswith(("11.", "12.0", "12.1", "12.2"))   # cuDNN 8.9's lines [S9]
    assert cli.main(["resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "H100",
                     "--system-cudnn", "7.6"]) == 1
    assert "system cudnn 7.6: not a cudnn release the knowledge names" in capsys.readouterr().out
    assert cli.main(["resolve", "--matrix", MATRIX, "--gpu", "H100", "--system-nccl", "2.x"]) == 2
    assert "argument --system-nccl" in capsys.readouterr().err
