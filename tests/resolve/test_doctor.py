"""imagebuild doctor and find: captured trees of real machine types (tests/fixtures/doctor/, see its
README), the GPUDirect probe's fabric settings, and find over an images.lock written by the real
`imagebuild lock` from real smoke reports."""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from pathlib import Path

import pytest

from imagebuild import cli
from imagebuild.deliver import doctor, hostfit, lockfile
from imagebuild.smoke import gdr
from imagebuild.smoke.report import CheckResult, Report
from imagebuild.versions import version_key

from conftest import ROOT, answer

TREES = ROOT / "tests" / "fixtures" / "doctor"
DGX, ROCE, CPU = (str(TREES / n) for n in ("dgx-h100-ib", "roce-h100-open", "cpu-node"))
MATRIX = str(ROOT / "matrix.yaml")
H100 = "NVIDIA H100 80GB HBM3"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def copy_tree(src: str, tmp_path: Path) -> Path:
    dest = tmp_path / Path(src).name
    shutil.copytree(src, dest)
    return dest


# ------------------------------------------------------------------------- the probe's fabric


def test_rdma_ports_and_fabric_settings_of_the_dgx_tree():
    ports = gdr.rdma_ports(DGX)
    assert [p.name for p in ports] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "mlx5_4:1"]
    assert [p.fabric for p in ports] == ["InfiniBand"] * 4 + ["RoCE"]
    assert [p.state for p in ports] == ["ACTIVE"] * 4 + ["DOWN"]
    assert ports[0].rate == "400 Gb/sec (4X NDR)" and ports[0].netdevs == ["ibp24s0"]
    env, notes = gdr.fabric_env(ports, DGX)
    # the DOWN storage port is left out; the IPoIB interface with a route carries the bootstrap
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                   "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                   "NCCL_SOCKET_IFNAME": "=ibp24s0"}
    assert notes == []


def test_probe_reads_peermem_from_proc_modules_and_the_tree_kernel():
    res = gdr.probe(DGX)
    assert not os.path.isdir(os.path.join(DGX, "sys/module/nvidia_peermem"))   # /proc/modules only
    assert res.path == "nvidia-peermem" and res.nvidia_driver == "580.159.04"
    assert res.kernel == "6.8.0-60-generic"               # the tree's, not this machine's
    assert res.nccl_env["NCCL_NET_GDR_LEVEL"] == "PHB" and res.nccl_env["NCCL_DMABUF_ENABLE"] == "0"
    roce = gdr.probe(ROCE)
    assert roce.path == "dma-buf" and roce.open_kernel_module and roce.kernel == "6.18.44-fc-v657-gpu"


def test_socket_ifname_falls_back_to_the_default_route(tmp_path):
    tree = copy_tree(ROCE, tmp_path)
    route = tree / "proc/net/route"
    route.write_text("".join(line + "\n" for line in route.read_text().splitlines()
                             if not line.startswith("ens")))
    env, notes = gdr.fabric_env(gdr.rdma_ports(str(tree)), str(tree))
    assert env["NCCL_SOCKET_IFNAME"] == "=eno1" and any("default route's eno1" in n for n in notes)


def test_gdr_check_env_lines_carry_the_nic_settings(capsys):
    assert gdr.main(["--env", "--root", DGX]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1" in lines
    assert "export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1" in lines


# ------------------------------------------------------------------------- doctor: reading


def test_read_dgx_node():
    node = doctor.read_node(DGX)
    assert not node.live and node.driver == "580.159.04" and not node.open_kernel_module
    assert node.platform == "x86_64"
    assert len(node.gpus) == 8 and {(g.name, g.compute_cap) for g in node.gpus} == {(H100, "9.0")}
    assert node.gpu_source == "/nvidia-smi.csv"
    assert node.modules == {"nvidia_peermem": True, "nv_peer_mem": False, "gdrdrv": True}
    assert node.ofed is True and "ofed_info" in node.ofed_evidence
    assert node.commands["srun"] == "/usr/bin/srun" and node.commands["enroot"] == "/usr/bin/enroot"
    assert node.pyxis == "/etc/slurm/plugstack.conf.d/pyxis.conf"
    assert node.notes == []


def test_read_roce_node_platform_from_the_open_module_line():
    node = doctor.read_node(ROCE)
    assert node.open_kernel_module and node.platform == "x86_64"
    assert node.ofed is None and node.pyxis is None and node.commands["enroot"] is None


def test_host_facts_are_resolve_flags(k, capsys):
    facts = doctor.host_facts(k, doctor.read_node(DGX))
    flags = facts.flags()
    assert flags == ["--driver", "580.159.04", "--gpu", H100, "--kernel", "6.8.0",
                     "--open-kernel-modules", "no", "--ofed", "yes", "--platform", "x86_64"]
    # resolve takes them as they are
    code, out, err = run_cli(capsys, "resolve", "--matrix", MATRIX, *flags)
    assert code == 0 and err == "" and out.startswith("Best stack:")
    roce = doctor.host_facts(k, doctor.read_node(ROCE)).flags()
    assert roce[roce.index("--open-kernel-modules") + 1] == "yes" and "--ofed" not in roce
    assert doctor.host_facts(k, doctor.read_node(CPU)).flags() == ["--gpu", "none", "--kernel", "5.14.0"]


def test_unknown_gpu_name_falls_back_to_compute_capability(k, tmp_path):
    tree = copy_tree(DGX, tmp_path)
    (tree / "nvidia-smi.csv").write_text("NVIDIA Z9000 Prototype, 9.0, 580.159.04\n")
    facts = doctor.host_facts(k, doctor.read_node(str(tree)))
    assert facts.gpu == "sm_90" and "not in the knowledge base" in facts.notes[0]


# ------------------------------------------------------------------------- doctor: judging


def test_dgx_best_image_and_gpudirect_ready(k, specs):
    d = doctor.diagnose(k, specs, doctor.read_node(DGX))
    best = d.best
    assert best.spec.stack["cuda"] != "none" and best.mode in ("native", "minor-version")
    # best by the matrix's preference: no image that runs has a newer PyTorch, none with the same
    # PyTorch a better mode
    top = version_key(best.spec.stack["pytorch"])
    assert all(version_key(f.spec.stack["pytorch"]) <= top for f in d.fits)
    same = [f for f in d.fits if version_key(f.spec.stack["pytorch"]) == top]
    assert min(hostfit.MODE_RANK[f.mode] for f in same) == hostfit.MODE_RANK[best.mode]
    assert d.fits[-1].spec.id == "smoke-cpu"            # a GPU host: the CPU image last
    assert d.gpudirect == "ready: nvidia-peermem" and d.missing == []
    assert d.env == {"NCCL_DMABUF_ENABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB",
                     "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                     "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                     "NCCL_SOCKET_IFNAME": "=ibp24s0"}
    paths = {g["path"]: g["allowed"] for g in best.gpudirect}
    assert paths["nvidia-peermem"] == "yes" and paths["dma-buf"] == "no"


def test_dgx_without_peermem_says_what_to_load(k, specs, tmp_path):
    tree = copy_tree(DGX, tmp_path)
    mods = tree / "proc/modules"
    mods.write_text("".join(line + "\n" for line in mods.read_text().splitlines()
                            if not line.startswith("nvidia_peermem")))
    (tree / "usr/bin/ofed_info").unlink()
    d = doctor.diagnose(k, specs, doctor.read_node(str(tree)))
    assert d.gpudirect.startswith("missing")
    assert [m.optional for m in d.missing] == [False]
    assert "load nvidia-peermem: modprobe nvidia-peermem" in d.missing[0].fix
    assert d.env["NCCL_NET_GDR_LEVEL"] == "LOC"


def test_roce_open_module_takes_dma_buf(k, specs):
    d = doctor.diagnose(k, specs, doctor.read_node(ROCE))
    assert d.gpudirect == "ready: dma-buf"
    assert [(m.optional, m.fix.split(": ")[-1]) for m in d.missing] == [(True, "modprobe gdrdrv")]
    assert d.env["NCCL_DMABUF_ENABLE"] == "1" and d.env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert d.env["NCCL_SOCKET_IFNAME"] == "=ens1f0np0,ens1f1np1"
    assert {g["path"]: g["allowed"] for g in d.best.gpudirect}["dma-buf"] == "yes"
    assert d.fabric_notes == ["RoCE: NCCL_IB_GID_INDEX is left unset: NCCL >= 2.21 picks the "
                              "RoCE v2 GID itself"]


def test_roce_on_an_old_kernel_needs_a_newer_kernel_or_peermem(k, specs, tmp_path):
    tree = copy_tree(ROCE, tmp_path)
    (tree / "proc/sys/kernel/osrelease").write_text("5.4.0-216-generic\n")
    d = doctor.diagnose(k, specs, doctor.read_node(str(tree)))
    required = [m for m in d.missing if not m.optional]
    assert len(required) == 1 and "5.4.0-216-generic" in required[0].what
    assert "upgrade the kernel" in required[0].fix and "modprobe nvidia-peermem" in required[0].fix


def test_ports_down_are_reported_and_left_out_of_nccl(k, specs, tmp_path):
    tree = copy_tree(ROCE, tmp_path)
    for state in tree.glob("sys/class/infiniband/*/ports/1/state"):
        state.write_text("1: DOWN\n")
    d = doctor.diagnose(k, specs, doctor.read_node(str(tree)))
    assert "NCCL_IB_HCA" not in d.env and "UCX_NET_DEVICES" not in d.env
    assert any("ACTIVE RDMA port (mlx5_0:1 DOWN, mlx5_1:1 DOWN)" in m.what for m in d.missing)


def test_gpu_node_without_rdma_gets_no_gpudirect_settings(k, specs, tmp_path):
    tree = copy_tree(ROCE, tmp_path)
    shutil.rmtree(tree / "sys/class/infiniband")
    d = doctor.diagnose(k, specs, doctor.read_node(str(tree)))
    assert d.gpudirect.startswith("not possible: no RDMA device") and d.env == {}
    assert d.best.spec.stack["cuda"] != "none"


def test_cpu_node_gets_the_cpu_image(k, specs):
    d = doctor.diagnose(k, specs, doctor.read_node(CPU))
    assert [f.spec.id for f in d.fits] == ["smoke-cpu"] and d.best.mode == "n/a"
    assert d.gpudirect.startswith("not applicable") and d.env == {}


def test_doctor_command_text_and_json(capsys):
    code, out, err = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", DGX)
    assert code == 0 and err == ""
    assert f'--driver 580.159.04 --gpu "{H100}" --kernel 6.8.0' in out
    assert "GPUDirect RDMA: ready: nvidia-peermem" in out
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1" in out
    code, first, _ = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", DGX, "--json")
    code2, second, _ = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", DGX, "--json")
    assert code == code2 == 0 and first == second                   # deterministic
    data = answer(first, "doctor")
    assert data["host"]["gpu"] == H100 and data["best"]["image"] == data["runs"][0]["image"]
    assert data["node"]["gpudirect"]["path"] == "nvidia-peermem"


def test_doctor_cpu_tree_says_no_driver(capsys):
    code, out, err = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", CPU)
    assert code == 0 and err == ""
    assert "no NVIDIA driver" in out and "only CPU images run here" in out
    assert "Best image here: smoke-cpu (CPU only)" in out


def test_doctor_on_this_machine(capsys):
    code, out, err = run_cli(capsys, "doctor", "--matrix", MATRIX)
    assert code == 0 and out.startswith("Node (this node):")
    if os.path.exists("/proc/driver/nvidia/version"):
        assert "NVIDIA driver   none" not in out
    else:
        assert "NVIDIA driver   none: no NVIDIA driver" in out and "only CPU images run here" in out


def test_live_gpus_from_nvidia_smi_and_nvml(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0, 580.159.04'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    node = doctor.read_node("/", nvml=False)
    assert node.gpu_source == "nvidia-smi" and node.gpus == [doctor.GpuInfo(H100, "9.0", "580.159.04")]

    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: b"580.159.04", nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: H100.encode(),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    node = doctor.read_node("/")
    assert node.gpu_source == "nvml" and len(node.gpus) == 2 and calls == ["init", "shutdown"]
    assert node.gpus[0] == doctor.GpuInfo(H100, "9.0", "580.159.04")


@pytest.mark.parametrize("source", ["this-machine", DGX, ROCE])
def test_capture_gives_a_tree_doctor_reads_the_same(k, specs, tmp_path, capsys, source):
    root = "/" if source == "this-machine" else source
    dest = tmp_path / "captured"
    code, out, err = run_cli(capsys, "doctor", "--root", root, "--capture", str(dest))
    assert code == 0 and err == "" and out.startswith("captured ")
    assert (dest / "proc/sys/kernel/osrelease").is_file()
    before, after = doctor.read_node(root), doctor.read_node(str(dest))
    for field in ("kernel", "platform", "driver", "open_kernel_module", "gpus", "modules", "ofed",
                  "pyxis"):
        assert getattr(after, field) == getattr(before, field), field
    assert {c: bool(p) for c, p in after.commands.items()} == \
        {c: bool(p) for c, p in before.commands.items()}
    assert after.probe.ports == before.probe.ports and after.probe.nccl_env == before.probe.nccl_env
    a, b = doctor.diagnose(k, specs, before), doctor.diagnose(k, specs, after)
    assert a.facts.flags() == b.facts.flags() and a.best.spec.id == b.best.spec.id
    code, _, err = run_cli(capsys, "doctor", "--root", root, "--capture", str(dest))
    assert code == 2 and "argument --capture" in err and len(err.splitlines()) == 1


def test_smi_capture_with_header_and_malformed(tmp_path, capsys):
    assert doctor.parse_smi_csv("name, compute_cap, driver_version\nTesla V100-SXM2-16GB, 7.0, "
                                "535.104.05\n", "x") == [doctor.GpuInfo("Tesla V100-SXM2-16GB", "7.0",
                                                                        "535.104.05")]
    tree = copy_tree(DGX, tmp_path)
    (tree / "nvidia-smi.csv").write_text(f"{H100}, 9.0, 580.159.04\n{H100}, N/A\n")
    code, out, err = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", str(tree))
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert f"{tree}/nvidia-smi.csv:2:" in err and "Traceback" not in err


def test_doctor_bad_root(capsys, tmp_path):
    code, out, err = run_cli(capsys, "doctor", "--root", str(tmp_path / "nope"))
    assert code == 2 and len(err.splitlines()) == 1 and "argument --root" in err
    code, out, err = run_cli(capsys, "doctor", "--root", str(tmp_path))   # not a captured tree
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert f"{tmp_path}/proc/sys/kernel/osrelease:" in err


# ------------------------------------------------------------------------- find


PUBLISHED = ("pytorch-2.15.0-cu132-ubuntu24.04-runtime", "pytorch-2.6.0-cu124-ubuntu22.04-runtime",
             "smoke-cpu")
FAILED = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"


@pytest.fixture(scope="module")
def lock(tmp_path_factory):
    """images.lock written by the real `imagebuild lock` (no engine) from real smoke reports."""
    base = tmp_path_factory.mktemp("lock")
    reports = base / "reports"
    reports.mkdir()
    for image_id in (*PUBLISHED, FAILED):
        ok = image_id != FAILED
        report = Report(image=image_id, checks=[
            CheckResult("versions", "pass", "versions as expected"),
            CheckResult("mpi.allreduce", "pass" if ok else "fail", "2 ranks")],
            extra={"imagebuild_id": image_id})
        (reports / f"{image_id}.json").write_text(report.to_json())
    path = base / "images.lock"
    assert cli.main(["lock", "--no-engine", "--matrix", MATRIX, "--lock", str(path),
                     "--reports-dir", str(reports), *PUBLISHED, FAILED]) == 0
    return path


def test_find_lists_published_images_best_first(lock, capsys):
    code, out, err = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), "--json",
                             "--driver", "580.159.04", "--gpu", H100, "--no-check",
                             "--registry", "registry.example.org:5000/hpc")   # no such registry here
    assert code == 0 and err == ""
    data = answer(out, "find")
    ids = [i["image"] for i in data["images"]]
    assert set(ids) <= set(lockfile.read_lock(lock)) and FAILED not in ids
    assert ids == list(PUBLISHED)            # newest PyTorch first, the CPU image last
    assert {i["image"]: i["why"] for i in data["left_out"]}[FAILED].startswith("no passing smoke")
    first = data["images"][0]
    assert first["mode"] == "minor-version"
    dated = first["tags"][-1]
    assert first["commands"] == [
        f"docker pull registry.example.org:5000/hpc/{ids[0]}:{dated}",
        f"enroot import docker://registry.example.org:5000#hpc/{ids[0]}:{dated}",
        f"srun --container-image=registry.example.org:5000#hpc/{ids[0]}:{dated} imagebuild-smoke --tier gpu"]
    assert data["images"][-1]["commands"][-1].endswith("imagebuild-smoke --tier cpu")


@pytest.fixture(scope="module")
def cpu_only_lock(tmp_path_factory):
    """A lock whose only published image is the CPU one: what a GPU pool finds on day one."""
    base = tmp_path_factory.mktemp("cpulock")
    (base / "reports").mkdir()
    report = Report(image="smoke-cpu", checks=[CheckResult("versions", "pass", "as expected")],
                    extra={"imagebuild_id": "smoke-cpu"})
    (base / "reports" / "smoke-cpu.json").write_text(report.to_json())
    assert cli.main(["lock", "--no-engine", "--matrix", MATRIX, "--lock", str(base / "images.lock"),
                     "--reports-dir", str(base / "reports"), "smoke-cpu"]) == 0
    return base / "images.lock"


def test_find_on_a_gpu_node_says_no_gpu_image_is_published(cpu_only_lock, capsys):
    """Eight H100s and only the CPU image in the registry: the CPU image is still offered, and
    the answer says what is missing and the commands that would make it (issue 46)."""
    argv = ("find", "--matrix", MATRIX, "--lock", str(cpu_only_lock), "--driver", "580.159.04",
            "--gpu", H100)
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "1. smoke-cpu (CPU only)" in out
    assert "Missing: no published image here uses this node's GPUs" in out
    code, out, err = run_cli(capsys, *argv, "--json")
    gap = answer(out, "find")["gpu_gap"]
    assert gap["build"].startswith("pytorch-") and gap["commands"][0] == f"imagebuild build {gap['build']}"
    assert any("no published image here uses this node's GPUs" in w["message"]
               for w in json.loads(out)["warnings"])
    code, out, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(cpu_only_lock), "--gpu", "none")
    assert code == 0 and "Missing" not in out


def test_find_forward_compat_mode_on_an_old_driver(lock, capsys):
    """While R535 is supported (until June 2026, S6) its hosts run CUDA 13.2 through cuda-compat;
    after its end of life the compat libraries no longer serve it (S4) and that image is not
    offered there."""
    argv = ("find", "--matrix", MATRIX, "--lock", str(lock), "--driver", "535.104.05", "--gpu", "A100")
    code, out, _ = run_cli(capsys, *argv, "--date", "2026-05-01")
    assert code == 0
    assert f"1. {PUBLISHED[0]} (forward-compat, needs cuda-compat-13-2)" in out
    assert f"2. {PUBLISHED[1]} (minor-version)" in out
    assert "give --registry" in out
    code, out, _ = run_cli(capsys, *argv)                # the matrix's as_of: 2026-11-21
    assert code == 0 and f"1. {PUBLISHED[1]} (minor-version)" in out and PUBLISHED[0] not in out


def test_find_from_doctor_equals_flags(lock, capsys, tmp_path):
    code, doc, _ = run_cli(capsys, "doctor", "--matrix", MATRIX, "--root", ROCE, "--json")
    report = tmp_path / "doctor.json"
    report.write_text(doc)
    flags = answer(doc, "doctor")["resolve_flags"]   # the envelope is what --from-doctor reads
    _, via_file, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), "--json",
                             "--from-doctor", str(report))
    _, via_flags, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), "--json",
                              *flags)
    assert answer(via_file, "find")["images"] == answer(via_flags, "find")["images"] != []


def test_find_from_a_real_hosts_doctor_output(lock, capsys):
    """doctor --json as it ran on a lent H100 host (NVML, open kernel module 580.159.04)."""
    real = TREES / "h100-host.doctor.json"
    data = json.loads(real.read_text())
    assert data["node"]["gpu_source"] == "nvml" and data["host"]["gpu"] == H100
    code, out, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), "--json",
                           "--from-doctor", str(real))
    assert code == 0 and answer(out, "find")["host"]["open_kernel_modules"] is True
    assert [i["image"] for i in answer(out, "find")["images"]] == list(PUBLISHED)


def test_find_cpu_host_and_no_fit(lock, capsys, tmp_path):
    code, out, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), "--json",
                           "--gpu", "none")
    assert code == 0 and [i["image"] for i in answer(out, "find")["images"]] == ["smoke-cpu"]
    entries = lockfile.read_lock(lock)
    gpu_only = tmp_path / "images.lock"
    lockfile.write_lock(gpu_only, {i: e for i, e in entries.items() if i != "smoke-cpu"})
    code, out, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(gpu_only), "--gpu", "none")
    assert code == 1 and out.startswith("No published image")


def test_find_leaves_out_a_drifted_entry(lock, capsys, tmp_path):
    entries = lockfile.read_lock(lock)
    entries[PUBLISHED[1]]["stack"]["nccl"] = "2.20.5"
    drifted = tmp_path / "images.lock"
    lockfile.write_lock(drifted, entries)
    code, out, _ = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(drifted), "--json",
                           "--driver", "580.159.04", "--gpu", H100)
    data = answer(out, "find")
    assert PUBLISHED[1] not in [i["image"] for i in data["images"]]
    why = {i["image"]: i["why"] for i in data["left_out"]}[PUBLISHED[1]]
    assert "nccl 2.20.5 ->" in why and "imagebuild lock" in why


@pytest.mark.parametrize("argv, names", [
    (["--gpu", H100, "--platform", "sparc"], "argument --platform"),
    (["--gpu", H100, "--registry", "no namespace"], "argument --registry"),
    (["--from-doctor", "/nonexistent/doctor.json"], "argument --from-doctor"),
    ([], "argument --driver"),
    (["--gpu", "Z9000"], "argument --gpu"),
])
def test_find_bad_input_is_one_line(lock, capsys, argv, names):
    code, out, err = run_cli(capsys, "find", "--matrix", MATRIX, "--lock", str(lock), *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and names in err
    assert "Traceback" not in err


def test_find_bad_doctor_file_and_missing_lock(capsys, tmp_path):
    bad = tmp_path / "doctor.json"
    bad.write_text('{"host": {"driver": 580}}')
    code, _, err = run_cli(capsys, "find", "--matrix", MATRIX, "--from-doctor", str(bad),
                           "--lock", str(tmp_path / "images.lock"))
    assert code == 2 and "not `imagebuild doctor --json` output" in err
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "find", "--from-doctor", str(bad))
    assert code == 2 and "malformed JSON (" in err and "line 1 column 2" in err
    code, _, err = run_cli(capsys, "find", "--matrix", MATRIX, "--gpu", "none",
                           "--lock", str(tmp_path / "images.lock"))
    assert code == 2 and len(err.splitlines()) == 1 and "images.lock: no lock file" in err


# ------------------------------------------------------------------------- a hostile captured tree (issue 23)

def _hostile_tree(tmp_path):
    """dgx-h100-ib with links out of the tree to a host file, /dev/zero and a FIFO in it."""
    root = tmp_path / "tree"
    shutil.copytree(TREES / "dgx-h100-ib", root, symlinks=True)
    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-not-in-the-tree\n")
    version = root / "proc/driver/nvidia/version"
    version.unlink()
    version.symlink_to(secret)                                   # absolute, out of the tree
    arch = root / "proc/sys/kernel/arch"
    arch.parent.mkdir(parents=True, exist_ok=True)
    arch.unlink(missing_ok=True)
    arch.symlink_to("../../../" * 6 + str(secret).lstrip("/"))    # climbing out with ..
    modules = root / "proc/modules"
    modules.unlink(missing_ok=True)
    modules.symlink_to("/dev/zero")
    route = root / "proc/net/route"
    route.parent.mkdir(parents=True, exist_ok=True)
    route.unlink(missing_ok=True)
    os.mkfifo(route)                                            # a reader that opens it blocks
    return root, secret


def test_doctor_reads_only_regular_files_inside_the_root(tmp_path):
    import subprocess
    root, _secret = _hostile_tree(tmp_path)
    dest = tmp_path / "captured"
    for extra in ([], ["--capture", str(dest)]):
        proc = subprocess.run([sys.executable, "-m", "imagebuild", "doctor", "--root", str(root), "--json",
                               "--matrix", str(ROOT / "matrix.yaml"), *extra],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-2000:]
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "HOST-SECRET" not in proc.stdout + proc.stderr
    copied = [p for p in dest.rglob("*") if p.is_file()]
    assert copied and not any("HOST-SECRET" in p.read_text(errors="replace") for p in copied)
    assert not (dest / "proc/modules").exists() and not (dest / "proc/driver/nvidia/version").exists()


def test_links_inside_the_root_resolve_as_a_chroot_would(tmp_path):
    from imagebuild.smoke import rootfs
    root = tmp_path / "tree"
    (root / "etc").mkdir(parents=True)
    (root / "etc/real").write_text("inside\n")
    (root / "a").symlink_to("/etc/real")                # absolute: starts again at the root
    (root / "b").symlink_to("../../../../etc/real")     # .. stops at the root
    (root / "c").symlink_to("c")                        # a loop
    assert rootfs.read_text(str(root), "a") == rootfs.read_text(str(root), "b") == "inside\n"
    assert rootfs.read_text(str(root), "c") is None
    (root / "big").write_bytes(b"x" * (rootfs.MAX_BYTES + 1))
    assert rootfs.read_text(str(root), "big") is None
    assert rootfs.listdir(str(root), "../../..") == ["a", "b", "big", "c", "etc"]
