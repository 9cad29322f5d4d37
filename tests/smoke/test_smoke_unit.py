"""Unit tests for the smoke suite's pure parts: reports, JUnit, bandwidth maths, version rules,
the GPUDirect probe on fake /sys and /proc trees, NCCL log parsing, and process-group timeouts
(those with real processes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types
from xml.etree import ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

import imagebuild.smoke as smoke
from imagebuild.smoke import bandwidth, checks, expect, gdr, libs, nccltests, proc
from imagebuild.smoke.context import Context
from imagebuild.smoke.report import FAIL, PASS, SKIP, CheckResult, Report, combine, junit_path, junit_text, write_atomic
from imagebuild.smoke.workers import probe as probe_worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------------------- reports

def _report(*checks_: CheckResult) -> Report:
    return Report(image="imagebuild/x:1", checks=list(checks_))


def test_skip_is_never_a_pass_but_does_not_fail_the_report():
    rep = _report(CheckResult("versions", PASS, "ok"), CheckResult("torch.allreduce", SKIP, "torch absent by design"))
    data = json.loads(rep.to_json())
    assert data["passed"] is True
    assert data["summary"] == {"fail": 0, "pass": 1, "skip": 1}
    assert data["skipped"] == {"torch.allreduce": "torch absent by design"}
    assert [c["status"] for c in data["checks"]] == ["pass", "skip"]


def test_required_failure_fails_the_report_optional_one_does_not():
    assert _report(CheckResult("libraries", FAIL, "libfoo.so.1 not found")).passed is False
    assert _report(CheckResult("gpudirect", FAIL, "nccl job failed", required=False)).passed is True


def test_report_json_is_deterministic_with_sorted_keys():
    rep = _report(CheckResult("mpi.allreduce", PASS, "ok", {"z": 1, "a": 2.5}))
    text = rep.to_json()
    assert text == _report(CheckResult("mpi.allreduce", PASS, "ok", {"a": 2.5, "z": 1})).to_json()
    assert list(json.loads(text)["checks"][0]["metrics"]) == ["a", "z"]
    assert list(json.loads(text)) == sorted(json.loads(text))
    again = Report.from_dict(json.loads(text))
    assert again.to_json() == text


def test_metrics_must_be_finite_numbers():
    with pytest.raises(TypeError):
        CheckResult("x", PASS, metrics={"version": "1.2"})
    with pytest.raises(ValueError):
        CheckResult("x", PASS, metrics={"bw": float("nan")})
    with pytest.raises(ValueError):
        CheckResult("x", "ok")
    assert CheckResult("x", PASS, metrics={"flag": True}).metrics == {"flag": 1}


def test_combine_orders_failures_first_and_all_skips_skip():
    res = combine("libraries", [(PASS, "libucp ok"), (FAIL, "libmpi: libpmix.so.2 not found"),
                                (SKIP, "libnccl absent by design")])
    assert res.status == FAIL
    assert res.detail.startswith("FAIL: libmpi: libpmix.so.2 not found")
    assert "SKIP: libnccl absent by design" in res.detail
    assert combine("x", [(SKIP, "a"), (SKIP, "b")]).status == SKIP
    assert combine("x", [(PASS, "a"), (SKIP, "b")]).status == PASS
    assert combine("x", []).status == SKIP


def test_junit_one_testcase_per_check_with_skipped_and_failure():
    rep = _report(CheckResult("versions", PASS, "ok", {"seconds": 1.5}),
                  CheckResult("libraries", FAIL, "libtorch_cpu.so: libgomp.so.1 not found"),
                  CheckResult("torch.allreduce", SKIP, "torch absent by design"))
    root = ET.fromstring(rep.to_junit().split("\n", 1)[1])
    assert root.tag == "testsuite"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"versions", "libraries", "torch.allreduce"}
    assert cases["versions"].get("time") == "1.500"
    assert cases["libraries"].find("failure").get("message") == "libtorch_cpu.so: libgomp.so.1 not found"
    assert cases["torch.allreduce"].find("skipped").get("message") == "torch absent by design"
    assert cases["versions"].find("failure") is None and cases["versions"].find("skipped") is None
    many = ET.fromstring(junit_text([rep, rep]).split("\n", 1)[1])
    assert many.tag == "testsuites" and len(list(many)) == 2


def test_junit_path_sits_beside_the_report():
    assert junit_path("out/report.json") == "out/report.xml"
    assert junit_path("out/report") == "out/report.xml"


def test_write_atomic_never_leaves_half_a_file(tmp_path):
    target = tmp_path / "r.json"
    write_atomic(str(target), "old\n")

    with pytest.raises(TypeError):
        write_atomic(str(target), 12345)  # type: ignore[arg-type] - write() refuses a non-string
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# ----------------------------------------------------------------------------------- bandwidth

def test_bandwidth_as_nccl_tests_computes_it():
    assert bandwidth.algbw(1_000_000_000, 0.5) == 2e9
    # 8 ranks: busbw = algbw * 2*7/8 = 1.75 * algbw
    assert bandwidth.busbw(1_000_000_000, 1.0, 8) == pytest.approx(1.75e9)
    assert bandwidth.busbw(4096, 1e-3, 1) == 0.0  # one rank moves nothing over a bus
    assert bandwidth.busbw(1 << 20, 1.0, 2) == pytest.approx(1 << 20)  # factor 1 for two ranks
    with pytest.raises(ValueError):
        bandwidth.algbw(10, 0)
    with pytest.raises(ValueError):
        bandwidth.allreduce_bus_factor(0)


@given(st.integers(min_value=1, max_value=1 << 34), st.floats(min_value=1e-7, max_value=1e3),
       st.integers(min_value=1, max_value=4096))
def test_busbw_over_algbw_is_the_allreduce_factor(nbytes, seconds, ranks):
    ratio = bandwidth.busbw(nbytes, seconds, ranks) / bandwidth.algbw(nbytes, seconds)
    assert ratio == pytest.approx(2 * (ranks - 1) / ranks)
    assert 0 <= ratio < 2


def test_size_sweep_8_bytes_to_256_megabytes():
    sweep = bandwidth.sizes(8, 256 << 20, 2)
    assert sweep[0] == 8 and sweep[-1] == 256 << 20 and len(sweep) == 26
    assert bandwidth.sizes(8, 2 << 20, 8) == [8, 64, 512, 4096, 32768, 262144, 2097152]
    assert [bandwidth.human(s) for s in (8, 4096, 2 << 20, 1 << 30)] == ["8B", "4K", "2M", "1G"]


def test_bandwidth_metrics_per_size():
    m = checks.bandwidth_metrics({"2097152": 0.002, "8": 1e-5}, ranks=4)
    assert m["algbw_GBps.2M"] == pytest.approx(2097152 / 0.002 / 1e9, rel=1e-5)
    assert m["busbw_GBps.2M"] == pytest.approx(m["algbw_GBps.2M"] * 1.5, rel=1e-5)
    assert m["time_us.8B"] == 10.0


# -------------------------------------------------------------------------------- version rules

@pytest.mark.parametrize("installed,expected,ok", [
    ("3.11.2", "3.11", True),
    ("3.11.2", "3.11.2", True),
    ("3.11.2", "3.12", False),
    ("2.13.1", "2.13.0", False),
    ("12.4", "12.4.1", True),       # torch reports CUDA with two parts
    ("12.6", "12.4.1", False),
    ("4.1.4", "4.1.4", True),
    (None, "1.13.1", False),
    (None, "none", True),
    ("2.21.5", "none", False),
])
def test_version_rules(installed, expected, ok):
    assert expect.version_matches(installed, expected)[0] is ok


@pytest.mark.parametrize("installed,expected,cuda,ok", [
    ("2.13.0+cpu", "2.13.0", "none", True),
    ("2.13.0+cpu", "2.13.0", "12.4", False),      # a CPU wheel in a CUDA image
    ("2.4.1+cu124", "2.4.1", "12.4.1", True),
    ("2.4.1+cu121", "2.4.1", "12.4", False),      # built for another CUDA
    ("2.4.1+cu124", "2.4.1", "none", False),
    ("2.4.1+cu124", "2.4.1+cu124", "12.4", True),  # local part given: compared exactly
    ("2.4.1+cu124", "2.4.1+cu121", "12.4", False),
    ("2.4.1", "2.4.1", "12.4", True),
    ("2.4.1+rocm6.1", "2.4.1", "none", False),
    ("2.13.0+cpu", "2.12.0", "none", False),
])
def test_torch_local_part_rules(installed, expected, cuda, ok):
    assert expect.torch_version_matches(installed, expected, cuda)[0] is ok


def test_os_names_from_os_release(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    info = expect.os_release(str(tmp_path))
    assert expect.os_names(info) == ["debian-bookworm", "debian-12", "debian12"]
    assert expect.os_matches(info, "debian-bookworm")[0]
    assert expect.os_matches(info, "debian12")[0]
    assert expect.os_matches(info, "Debian-12")[0]
    assert not expect.os_matches(info, "ubuntu-22.04")[0]


def test_expectation_file_errors(tmp_path):
    with pytest.raises(expect.ExpectationError, match="cannot read"):
        expect.load(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(expect.ExpectationError, match="not valid JSON"):
        expect.load(str(bad))
    bad.write_text('{"stack": {"cuda": 12.4}}')
    with pytest.raises(expect.ExpectationError, match="stack.cuda must be a string"):
        expect.load(str(bad))


def test_context_reads_expectation():
    ctx = Context(expectation={"stack": {"cuda": "none", "pytorch": "2.13.0"}, "features": {"verbs": True}})
    assert ctx.expects_absent("cuda") and ctx.expects_absent("nccl")  # missing component = absent
    assert ctx.expects_present("pytorch") and ctx.feature("verbs")
    none = Context()
    assert not none.expects_absent("cuda") and not none.expects_present("cuda") and none.expected("cuda") is None


# -------------------------------------------------------------------------- library version codes

def test_library_version_codes():
    assert probe_worker.nccl_code(22105) == "2.21.5"
    assert probe_worker.nccl_code(2804) == "2.8.4"
    assert probe_worker.cudnn_code(90100) == "9.1.0"
    assert probe_worker.cudnn_code(8902) == "8.9.2"
    assert probe_worker.cuda_code(12040) == "12.4"
    assert probe_worker.cuda_code(13000) == "13.0"


def test_ldd_and_ucx_info_parsing():
    ldd = ("\tlinux-vdso.so.1 (0x00007ffd)\n\tlibpmix.so.2 => not found\n"
           "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\tlibcuda.so.1 => not found\n")
    assert libs.parse_ldd(ldd) == ["libcuda.so.1", "libpmix.so.2"]
    ucx = "#      Transport: self\n#         Device: memory0\n#      Transport: tcp\n#      Transport: tcp\n" \
          "#      Transport: rc_verbs\n"
    assert checks.parse_transports(ucx) == ["rc_verbs", "self", "tcp"]


# ------------------------------------------------------------------------------- GPUDirect probe

def _tree(tmp_path, *, version=None, modules=(), ib=()):
    for mod in modules:
        (tmp_path / "sys/module" / mod).mkdir(parents=True)
    for dev in ib:
        (tmp_path / "sys/class/infiniband" / dev).mkdir(parents=True)
    if version:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(version)
    return str(tmp_path)


OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\nGCC version:  gcc version 12.2.0\n")
PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
               "GCC version:  gcc version 12.2.0\n")


def test_gdr_none_without_driver(tmp_path):
    res = gdr.probe(_tree(tmp_path), kernel_release="6.1.0-18-amd64")
    assert res.path == "none" and res.available == [] and res.nvidia_driver is None
    assert res.nccl_env == {"NCCL_NET_GDR_LEVEL": "LOC"}
    assert any("host-staged" in n for n in res.notes)


def test_gdr_nvidia_peermem(tmp_path):
    res = gdr.probe(_tree(tmp_path, version=PROPRIETARY, modules=["nvidia_peermem"], ib=["mlx5_0"]),
                    kernel_release="5.15.0-91-generic")
    assert res.path == "nvidia-peermem" and res.nvidia_driver == "535.104.05"
    assert not res.open_kernel_module and res.rdma_devices == ["mlx5_0"]
    assert res.nccl_env["NCCL_NET_GDR_LEVEL"] == "PHB"


def test_gdr_nv_peer_mem(tmp_path):
    res = gdr.probe(_tree(tmp_path, version=PROPRIETARY, modules=["nv_peer_mem"]), kernel_release="5.4.0")
    assert res.path == "nv_peer_mem" and res.available == ["nv_peer_mem"]


def test_gdr_dmabuf_needs_open_modules_and_kernel_5_12(tmp_path):
    new = gdr.probe(_tree(tmp_path / "a", version=OPEN, modules=["nvidia_peermem"]), kernel_release="6.1.0-18-amd64")
    assert new.path == "dma-buf" and new.available == ["dma-buf", "nvidia-peermem"]
    assert new.nccl_env["NCCL_DMABUF_ENABLE"] == "1" and new.open_kernel_module
    assert new.nvidia_driver == "550.54.15"
    old = gdr.probe(_tree(tmp_path / "b", version=OPEN), kernel_release="5.10.0-28-amd64")
    assert old.path == "none" and any("older than 5.12" in n for n in old.notes)
    closed = gdr.probe(_tree(tmp_path / "c", version=PROPRIETARY), kernel_release="6.8.0")
    assert closed.path == "none"


def test_gdr_command_json(tmp_path):
    root = _tree(tmp_path, version=PROPRIETARY, modules=["nvidia_peermem"])
    out = subprocess.run([sys.executable, "-m", "imagebuild.smoke.gdrcli", "--json", "--root", root],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stderr == ""      # no runpy warning at the top of a node's log (issue 43)
    data = json.loads(out.stdout)
    assert data["path"] == "nvidia-peermem" and data["available"] == ["nvidia-peermem"]
    text = subprocess.run([sys.executable, "-m", "imagebuild.smoke.gdrcli", "--root", root],
                          capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert text.startswith("GPUDirect RDMA path: nvidia-peermem")


def test_nccl_log_transports():
    log = """node0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>
node0:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node0:1:1 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
node0:1:1 [0] NCCL INFO Channel 02/0 : 1[1] -> 2[0] via SHM/direct/direct
some unrelated line mentioning NET/Socket without the tag
"""
    counts = gdr.parse_nccl_log(log)
    assert counts["net_ib"] == 2 and counts["gdrdma"] == 1 and counts["p2p"] == 1 and counts["shm"] == 1
    assert counts["net_socket"] == 0
    assert gdr.transport_summary(counts) == "gdrdma, net_ib, p2p, shm"
    sock = gdr.parse_nccl_log("h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:172.18.0.2<0>\n")
    assert sock["net_socket"] == 1 and sock["net_ib"] == 0


# ------------------------------------------------------------------- timeouts on real processes

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_run_kills_the_whole_group_at_the_timeout(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    start = time.monotonic()
    out = proc.run(["sh", "-c", script], timeout=1.5)
    assert out.timed_out and out.returncode is None
    assert time.monotonic() - start < 30
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild), "the grandchild outlived its process group"


def test_run_group_reports_hung_ranks_and_keeps_finished_ones():
    outs = proc.run_group([["sh", "-c", "echo done"], ["sleep", "300"]], [dict(os.environ)] * 2, timeout=1.5)
    assert outs[0].returncode == 0 and "done" in outs[0].output
    assert outs[1].timed_out


def test_run_reports_a_missing_program():
    out = proc.run(["/nonexistent/mpirun", "--version"], timeout=5)
    assert out.returncode == 127 and "cannot run /nonexistent/mpirun" in out.output


def test_a_hanging_check_fails_with_timed_out(monkeypatch):
    monkeypatch.setattr(smoke, "ALARM_MARGIN_S", 0.2)
    monkeypatch.setitem(checks.CHECKS, "gpudirect", lambda ctx: time.sleep(60))
    res = smoke.run_check("gpudirect", Context(timeout=1))
    assert res.status == FAIL and res.detail == "timed out after 1s"
    assert res.metrics["seconds"] < 30


def test_a_crashing_check_fails_naming_the_exception(monkeypatch):
    def broken(ctx):
        raise KeyError("ompi_info")

    monkeypatch.setitem(checks.CHECKS, "mpi.config", broken)
    res = smoke.run_check("mpi.config", Context(timeout=5))
    assert res.status == FAIL and "KeyError" in res.detail and "ompi_info" in res.detail


# --------------------------------------------------------------------------- command line

def _smoke(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "imagebuild.smoke", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_cli_rejects_unknown_check_and_bad_expectation(tmp_path):
    out = _smoke("--only", "bogus")
    assert out.returncode == 2 and "invalid choice: 'bogus'" in out.stderr
    out = _smoke("--expect", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "nope.json: cannot read the expectation" in out.stderr
    out = _smoke("--ranks", "0")
    assert out.returncode == 2 and "between 1 and 1024" in out.stderr


def test_cli_writes_json_and_junit(tmp_path):
    report = tmp_path / "sub" / "r.json"
    out = _smoke("--only", "gpudirect", "--report", str(report), "--image", "host")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(report.read_text())
    assert data["image"] == "host" and data["passed"] is True
    assert [c["name"] for c in data["checks"]] == ["gpudirect"]
    assert data["checks"][0]["required"] is False
    assert ET.parse(str(tmp_path / "sub" / "r.xml")).getroot().get("tests") == "1"
    assert sorted(p.name for p in report.parent.iterdir()) == ["r.json", "r.xml"]


# -------------------------------------------------------------------- host side (pure parts)

def _labels(**stack):
    base = {"os": "debian-bookworm", "python": "3.11", "cuda": "none", "cudnn": "none", "nccl": "none",
            "ucx": "1.13.1", "openmpi": "4.1.4", "pytorch": "2.13.0"}
    base.update(stack)
    labels = {f"io.imagebuild.stack.{k}": v for k, v in base.items()}
    labels.update({"io.imagebuild.image-id": "smoke-cpu", "io.imagebuild.flavor": "cpu"})
    return labels, base


def test_labels_must_equal_image_json():
    from imagebuild.testrun.runner import compare_labels

    labels, stack = _labels()
    same = {"id": "smoke-cpu", "flavor": "cpu", "stack": dict(stack)}
    assert compare_labels(labels, same)[0][0] == PASS
    other = {"id": "smoke-cpu", "flavor": "cpu", "stack": dict(stack, pytorch="2.12.0")}
    status, text = compare_labels(labels, other)[0]
    assert status == FAIL and "io.imagebuild.stack.pytorch='2.13.0' but image.json says '2.12.0'" in text
    assert compare_labels(labels, None)[0][0] == FAIL
    del labels["io.imagebuild.stack.ucx"]
    assert "label io.imagebuild.stack.ucx missing" in compare_labels(labels, same)[0][1]


def test_inspect_image_keeps_the_ref_beside_the_engines_image_info():
    from imagebuild.engines import ImageInfo
    from imagebuild.errors import SmokeError
    from imagebuild.testrun.runner import ImageUnderTest, inspect_image

    labels, _ = _labels()
    images = {"imagebuild/smoke-cpu:t": ImageInfo(id="sha256:" + "0" * 64, repo_digests=(), size=1, labels=labels),
              "ubuntu:24.04": ImageInfo(id="sha256:" + "1" * 64, repo_digests=(), size=1)}
    engine = types.SimpleNamespace(lookup=images.get)
    image = inspect_image(engine, "imagebuild/smoke-cpu:t")
    assert image == ImageUnderTest("imagebuild/smoke-cpu:t", images["imagebuild/smoke-cpu:t"])
    with pytest.raises(SmokeError, match="ubuntu:24.04 is not an imagebuild image"):
        inspect_image(engine, "ubuntu:24.04")
    with pytest.raises(SmokeError, match="unknown image other:1"):
        inspect_image(engine, "other:1")


@pytest.mark.parametrize("ref", ["imagebuild/smoke-cpu:2.13.0", "localhost:5000/a/b:tag", "ubuntu",
                                 "sha256:" + "a" * 64])
def test_image_refs_accepted(ref):
    from imagebuild.testrun.runner import validate_ref

    assert validate_ref(ref) == ref


@pytest.mark.parametrize("ref", ["bad;ref", "$(id)", "a b", "UPPER/case", "x:" + "t" * 200, "", "-rf",
                                 "img:tag\nrm"])
def test_hostile_image_refs_refused(ref):
    from imagebuild.errors import UsageError
    from imagebuild.testrun.runner import validate_ref

    with pytest.raises(UsageError):
        validate_ref(ref)


def test_only_names_checked():
    from imagebuild.errors import UsageError
    from imagebuild.testrun.runner import check_only

    assert check_only(["versions", "ddp.two-node"]) == ["versions", "ddp.two-node"]
    assert check_only(["nccl-tests"]) == ["nccl-tests"]
    with pytest.raises(UsageError, match="unknown check 'nccl'"):
        check_only(["nccl"])


class _SuiteSession:
    """A stand-in for the container session (pure logic: what the runner asks of the engine)."""

    def __init__(self, refuse_gpus: bool = False):
        self.started, self.refuse_gpus = [], refuse_gpus

    def start(self, image, argv, *, name, gpus=False, **_):
        from imagebuild.errors import SmokeError
        if gpus and self.refuse_gpus:
            raise SmokeError(f'cannot start a container of {image}: could not select device driver "" '
                             "with capabilities: [[gpu]]")
        self.started.append((list(argv), gpus))
        return "c"

    def wait(self, container, deadline):
        return 0

    def read_json(self, container, path):
        return None if path.endswith("image.json") else {"image": "a:1", "checks": [], "passed": True}


@pytest.mark.parametrize("tier, ranks, only, argv_tail, gpus", [
    ("cpu", 2, [], ["--tier", "cpu", "--ranks", "2", "--only", *smoke.CHECK_NAMES], False),
    ("gpu", None, [], ["--tier", "gpu", "--only", *smoke.CHECK_NAMES, "nccl.bandwidth", "nccl-tests"], True),
    ("gpu", 4, ["nccl-tests"], ["--tier", "gpu", "--ranks", "4", "--only", "nccl-tests"], True),
    ("cpu", 2, ["versions", "nccl-tests"], ["--tier", "cpu", "--ranks", "2", "--only", "versions", "nccl-tests"],
     False),
])
def test_the_suite_container_per_tier(tier, ranks, only, argv_tail, gpus):
    """Tier gpu asks the engine for every GPU and leaves the ranks to the suite (one per GPU)
    unless given; tier cpu asks for none; nccl.bandwidth and nccl-tests run on tier gpu or when
    named."""
    from imagebuild.testrun.runner import ImageUnderTest, TestOptions, _suite_in_container

    cs = _SuiteSession()
    opts = TestOptions(ranks=ranks, timeout=60, only=only, tier=tier)
    _suite_in_container(cs, ImageUnderTest("a:1", None), opts, None)
    [(argv, asked)] = cs.started
    assert asked is gpus
    flags = [a for a in argv if a not in ("--report", "--timeout", "--image", "a:1", "60")
             and not a.startswith("/")]
    assert flags == ["imagebuild-smoke", *argv_tail]


def test_tier_gpu_on_an_engine_without_gpus_says_what_is_missing():
    from imagebuild.errors import SmokeError
    from imagebuild.testrun.runner import ImageUnderTest, TestOptions, _suite_in_container

    with pytest.raises(SmokeError, match=r"tier gpu needs the engine to give containers GPUs .*"
                                         r"could not select device driver"):
        _suite_in_container(_SuiteSession(refuse_gpus=True), ImageUnderTest("a:1", None),
                            TestOptions(ranks=None, tier="gpu"), None)


def test_min_driver_label_must_match_image_json():
    from imagebuild.testrun.runner import compare_labels

    labels, stack = _labels()
    labels["io.imagebuild.min-driver"] = "none"
    assert compare_labels(labels, {"id": "smoke-cpu", "flavor": "cpu", "stack": stack, "min_driver": "none"})[0][0] == PASS
    status, text = compare_labels(labels, {"id": "smoke-cpu", "flavor": "cpu", "stack": stack, "min_driver": "535.54"})[0]
    assert status == FAIL and "min_driver='535.54'" in text


@pytest.mark.parametrize("require, problem", [
    ("cuda>=13.0 driver>=580.65.06", None),
    ("cuda>=13.0 driver>=535.54.03", "NVIDIA_REQUIRE_CUDA='cuda>=13.0 driver>=535.54.03' but image.json "
                                     "min_driver='580.65.06'"),
    ("cuda>=13.0", "NVIDIA_REQUIRE_CUDA='cuda>=13.0' but image.json min_driver='580.65.06'"),
    ("cuda>=13.0 driver>=580.65.06 driver>=470.57.02", "but image.json min_driver"),   # two floors: which?
    (None, "NVIDIA_REQUIRE_CUDA is not set, but image.json min_driver='580.65.06'"),
])
def test_nvidia_require_cuda_must_state_the_resolvers_driver_floor(require, problem):
    """A CUDA image's NVIDIA_REQUIRE_CUDA is what makes the NVIDIA runtime refuse a node whose
    driver is too old: it must carry image.json's min_driver (the resolver's), and nothing else."""
    from imagebuild.testrun.runner import compare_labels

    labels, stack = _labels()
    labels["io.imagebuild.min-driver"] = "580.65.06"
    image_json = {"id": "smoke-cpu", "flavor": "cpu", "stack": stack, "min_driver": "580.65.06"}
    env = {"PATH": "/usr/bin"} if require is None else {"NVIDIA_REQUIRE_CUDA": require}
    status, text = compare_labels(labels, image_json, env)[0]
    if problem is None:
        assert status == PASS and "min-driver, NVIDIA_REQUIRE_CUDA)" in text
    else:
        assert status == FAIL and problem in text
    cpu = dict(image_json, min_driver="none")
    labels["io.imagebuild.min-driver"] = "none"
    assert compare_labels(labels, cpu, {})[0][0] == PASS        # a CPU image asks nothing of the driver


@pytest.mark.parametrize("endpoint,rdzv_id", [("node0;reboot:29500", "a"), ("node0", "a"), ("node0:29500", "a b"),
                                              ("$(id):1", "a")])
def test_ddp_node_refuses_hostile_arguments(endpoint, rdzv_id, tmp_path):
    out = _smoke("ddp-node", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
                 "--out", str(tmp_path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "must be" in out.stderr.splitlines()[-1]


def _imagebuild(*args, env=None):
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env)


def test_imagebuild_test_without_an_engine_is_one_line(tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    out = _imagebuild("test", "imagebuild/smoke-cpu:x", env=env)
    assert out.returncode == 3 and "Traceback" not in out.stderr  # 3: a service is unavailable
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no container engine answers" in lines[0] and "no-engine.sock" in lines[0]


def test_imagebuild_test_argument_errors_are_one_line():
    out = _imagebuild("test", "a:1", "b:2", "--report", "r.json")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "give one IMAGE" in out.stderr
    out = _imagebuild("test", "a:1", "--only", "nccl")
    assert out.returncode == 2 and "unknown check 'nccl'" in out.stderr
    out = _imagebuild("test", "a:1", "--ranks", "0")
    assert out.returncode == 2 and "between 1 and 64" in out.stderr
    out = _imagebuild("test", "a;rm -rf /")
    assert out.returncode == 2 and "not an image reference" in out.stderr


def test_gdr_command_env_lines_can_be_evaluated(tmp_path):
    root = _tree(tmp_path, version=OPEN, modules=["nvidia_peermem"])
    out = subprocess.run([sys.executable, "-m", "imagebuild.smoke.gdrcli", "--env", "--root", root],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.splitlines() and all(line.startswith("export NCCL_") for line in out.splitlines())
    shown = subprocess.run(["bash", "-c", out + 'echo "$NCCL_DMABUF_ENABLE:$NCCL_NET_GDR_LEVEL"'],
                           capture_output=True, text=True, check=True).stdout.strip()
    # the kernel release comes from the machine running the test: DMA-BUF needs >= 5.12
    expected = gdr.probe(root)
    assert shown == f"{expected.nccl_env.get('NCCL_DMABUF_ENABLE', '')}:{expected.nccl_env['NCCL_NET_GDR_LEVEL']}"


# ------------------------------------------------------- cuDNN: torch's copy vs. the system's

def test_cudnn_codes_decode_both_encodings():
    # cuDNN 9: major*10000 + minor*100 + patch; cuDNN 8 and older: major*1000 + minor*100 + patch
    assert probe_worker.cudnn_code(91900) == "9.19.0"
    assert probe_worker.cudnn_code(91400) == "9.14.0"
    assert probe_worker.cudnn_code(90100) == "9.1.0"
    assert probe_worker.cudnn_code(8902) == "8.9.2"
    assert probe_worker.cudnn_code(7605) == "7.6.5"
    # cudnnGetVersion() answers 0 when its sub-libraries cannot be loaded: not a version
    with pytest.raises(ValueError):
        probe_worker.cudnn_code(0)


_FAKE_TORCH = {
    "torch/__init__.py": '__version__ = "2.11.0+cu130"\nfrom . import version, backends, cuda\n',
    "torch/version.py": 'cuda = "13.0"\n',
    "torch/backends/__init__.py": "from . import cudnn\n",
    # like torch: a libcudnn.so.9 that the process loaded before torch takes the soname, torch
    # binds to that copy and its compatibility check raises (seen on an H100 host: system 9.14,
    # torch's wheel 9.19)
    "torch/backends/cudnn.py": (
        "import os\n"
        "def is_available():\n    return True\n"
        "def version():\n"
        "    if os.environ.get('FAKE_CUDNN_RAISE'):\n"
        "        raise RuntimeError('cuDNN version incompatibility: PyTorch was compiled against (9, 19, 0) '\n"
        "                           'but found runtime version (9, 14, 0)')\n"
        "    with open('/proc/self/maps') as fh:\n"
        "        if os.environ['FAKE_SYSTEM_CUDNN'] in fh.read():\n"
        "            raise RuntimeError('cuDNN version incompatibility: found runtime version (9, 14, 0)')\n"
        "    return int(os.environ['FAKE_CUDNN_CODE'])\n"),
    "torch/cuda/__init__.py": "from . import nccl\ndef is_available():\n    return False\n"
                              "def device_count():\n    return 0\n",
    "torch/cuda/nccl.py": "def version():\n    return (2, 27, 7)\n",
}


@pytest.fixture
def fake_torch_and_system_cudnn(tmp_path, monkeypatch):
    """A fake torch on PYTHONPATH and a 'system' libcudnn.so.9 on LD_LIBRARY_PATH (a copy of an
    ELF library that the probe can load, without cudnnGetVersion)."""
    import _ctypes

    for rel, text in _FAKE_TORCH.items():
        path = tmp_path / "site" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    libdir = tmp_path / "syslib"
    libdir.mkdir()
    fake = libdir / "libcudnn.so.9"
    fake.write_bytes(open(_ctypes.__file__, "rb").read())
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libdir))
    monkeypatch.setenv("FAKE_SYSTEM_CUDNN", os.path.realpath(fake))
    monkeypatch.delenv("FAKE_CUDNN_RAISE", raising=False)
    return os.path.realpath(fake)


def _probed(expectation=None) -> tuple[dict, CheckResult]:
    ctx = Context(timeout=120, expectation=expectation)
    ctx.start_clock()
    return ctx.probe(), checks.check_versions(ctx)


@pytest.mark.parametrize("code, version", [(91900, "9.19.0"), (8902, "8.9.2")])
def test_torch_cudnn_comes_from_torch_even_with_a_system_copy(fake_torch_and_system_cudnn, monkeypatch,
                                                              code, version):
    monkeypatch.setenv("FAKE_CUDNN_CODE", str(code))
    probe, result = _probed({"stack": {"cudnn": version}})
    assert probe["paths"]["cudnn"] == fake_torch_and_system_cudnn
    assert probe["torch"]["present"] and probe["torch"]["cudnn"] == version
    assert f"torch's cuDNN: {version} matches {version}" in result.detail
    # the system copy is read through ctypes on its own: this one has no cudnnGetVersion
    assert "cudnnGetVersion" in probe["system"]["errors"]["cudnn"]
    assert "FAIL: system cuDNN (libcudnn): found but unreadable" in result.detail


def test_torch_raising_on_cudnn_is_reported_not_called_missing(fake_torch_and_system_cudnn, monkeypatch):
    monkeypatch.setenv("FAKE_CUDNN_CODE", "91900")
    monkeypatch.setenv("FAKE_CUDNN_RAISE", "1")
    _, result = _probed({"stack": {"cudnn": "9.19.0"}})
    assert result.status == FAIL
    assert "torch's cuDNN: torch raised RuntimeError: cuDNN version incompatibility" in result.detail
    assert "torch's cuDNN: not found" not in result.detail


def test_cudnn_from_an_nvidia_wheel_is_labelled_as_such():
    wheel = os.path.join("/venv/lib/python3.12/site-packages", "nvidia", "cudnn", "lib", "libcudnn.so.9")
    assert checks._lib_origin(wheel, "cudnn") == "wheel nvidia-cudnn's"
    assert checks._lib_origin("/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "cudnn") == "system"
    assert checks._lib_origin(None, "nccl") == "system"


# ------------------------------------------------------------------------------- nccl-tests

def _nccl_table(sizes, *, ranks=1, wrong=None, oob=None, busbw_factor=None, verified=True) -> str:
    """nccl-tests 2.17's all_reduce_perf output (the format strings of src/util.cu)."""
    wrong = wrong or {}
    factor = 2 * (ranks - 1) / ranks if busbw_factor is None else busbw_factor
    lines = ["# nccl-tests version 2.17.6 nccl-headers=22803 nccl-library=22803",
             "# Collective test starting: all_reduce_perf",
             f"# nThread 1 nGpus {ranks} minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 1 "
             "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid   1234 on       host device {r:2d} [0000:18:00] NVIDIA H100 80GB HBM3"
              for r in range(ranks)]
    lines += ["#", "#                                                              out-of-place                       "
              "in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
              "   busbw  #wrong "]
    for size in sizes:
        t = 10.0 + size / 2e5
        alg = size / 1e9 / (t * 1e-6)
        w = wrong.get(size, 0)
        check = f"{w:6g}" if verified else "   N/A"
        side = f"  {t:7.2f}  {alg:6.2f}  {alg * factor:6.2f}  {check}"
        lines.append(f"  {size:10d}  {size // 4:12d}     float     sum      -1{side}{side}")
    errors = sum(1 for v in wrong.values() if v) if oob is None else oob
    lines += [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
              "# Avg bus bandwidth    : 1.234 ", "#", "# Collective test concluded: all_reduce_perf", ""]
    return "\n".join(lines)


SIZES = bandwidth.sizes(8, 256 << 20, 2)  # all_reduce_perf -b 8 -e 256M -f 2


def test_nccl_tests_table_is_parsed():
    assert checks.NCCL_TESTS_ARGS == ("-b", "8", "-e", "256M", "-f", "2")
    assert bandwidth.sizes(*checks.NCCL_TESTS_SIZES) == SIZES
    found = checks.parse_nccl_tests(_nccl_table(SIZES, ranks=2))
    assert [r["size"] for r in found["rows"]] == SIZES and len(SIZES) == 26
    assert found["out_of_bounds"] == (0, "OK") and found["devices"] == 2 and found["nccl_library"] == 22803
    last = found["rows"][-1]
    assert last["type"] == "float" and last["redop"] == "sum" and last["count"] == (256 << 20) // 4
    assert last["oop"]["wrong"] == 0 and last["oop"]["busbw"] == pytest.approx(last["oop"]["algbw"], abs=0.01)
    assert checks.judge_nccl_tests(found, 2, SIZES) == []


def test_nccl_tests_judge_finds_what_is_wrong():
    judge = checks.judge_nccl_tests
    assert judge(checks.parse_nccl_tests(_nccl_table(SIZES)), 1, SIZES) == []
    errs = judge(checks.parse_nccl_tests(_nccl_table(SIZES, wrong={1 << 20: 7})), 1, SIZES)
    assert any("wrong elements at 1M: 14" in e for e in errs)
    assert "# Out of bounds values : 1 FAILED" in errs
    errs = judge(checks.parse_nccl_tests(_nccl_table(SIZES, verified=False)), 1, SIZES)
    assert any(e.startswith("results not verified (#wrong N/A)") for e in errs)
    cut = _nccl_table(SIZES).replace("# Out of bounds values : 0 OK\n", "")
    assert "no '# Out of bounds values' line" in judge(checks.parse_nccl_tests(cut), 1, SIZES)
    errs = judge(checks.parse_nccl_tests(_nccl_table(SIZES[:-3])), 1, SIZES)
    assert any("23 rows), expected 8B..256M (26 rows)" in e for e in errs)
    # a two-rank table judged as one rank: wrong rank count and busbw that does not follow
    errs = judge(checks.parse_nccl_tests(_nccl_table(SIZES, ranks=2)), 1, SIZES)
    assert any("2 rank(s) listed" in e for e in errs) and any("busbw is not algbw*2(n-1)/n" in e for e in errs)
    errs = judge(checks.parse_nccl_tests(_nccl_table(SIZES, ranks=2, busbw_factor=0)), 2, SIZES)
    assert "busbw 0 at 256M with 2 ranks" in errs
    assert judge(checks.parse_nccl_tests("NCCL WARN something\n"), 1, SIZES) == ["no result table in the output"]


_FAKE_PERF = """#!{python}
import os, sys
sys.path[:0] = {tests!r}
from test_smoke_unit import _nccl_table
from imagebuild.smoke import bandwidth
a = sys.argv[1:]
arg = lambda flag: a[a.index(flag) + 1]
unit = {{"M": 1 << 20, "K": 1 << 10}}
size = lambda s: int(s[:-1]) * unit[s[-1]] if s[-1] in unit else int(s)
wrong = {{1 << 20: int(os.environ.get("FAKE_WRONG", "0"))}}
print(_nccl_table(bandwidth.sizes(size(arg("-b")), size(arg("-e")), int(arg("-f"))), ranks=int(arg("-g")), wrong=wrong))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_nccl_tests(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "all_reduce_perf"
    exe.parent.mkdir()
    exe.write_text(_FAKE_PERF.format(python=sys.executable, tests=[os.path.dirname(os.path.abspath(__file__)), os.path.join(ROOT, "tests")]))
    exe.chmod(0o755)
    monkeypatch.setenv(checks.NCCL_TESTS_ENV, str(exe.parent))
    monkeypatch.setenv("PYTHONPATH", ROOT)
    monkeypatch.delenv("FAKE_WRONG", raising=False)
    monkeypatch.delenv("FAKE_EXIT", raising=False)
    return str(exe)


def _gpu_ctx(tmp_path, gpus=1, expectation=None, tier="gpu"):
    torch = {"present": True, "version": "2.11.0+cu130", "cuda_available": gpus > 0, "device_count": gpus}
    ctx = Context(tier=tier, ranks=max(gpus, 1), timeout=60, expectation=expectation, workdir=str(tmp_path),
                  _probe={"torch": torch, "system": {"versions": {}, "errors": {}}, "paths": {}})
    ctx.start_clock()
    return ctx


def test_nccl_tests_check_runs_the_binary_and_passes(fake_nccl_tests, tmp_path):
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, gpus=1))
    assert res.status == PASS, res.detail
    assert f"all_reduce_perf ({fake_nccl_tests}, one process, -g 1, NCCL 2.28.3)" in res.detail
    assert "'# Out of bounds values : 0 OK'" in res.detail and "one rank: busbw" in res.detail
    assert res.metrics["ranks"] == 1 and res.metrics["sizes"] == 26 and res.metrics["out_of_bounds"] == 0
    assert res.metrics["peak_busbw_GBps"] == 0 and res.metrics["peak_algbw_GBps"] > 0
    assert res.metrics["algbw_GBps.256M"] == res.metrics["peak_algbw_GBps"]
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, gpus=2))
    assert res.status == PASS and res.metrics["ranks"] == 2 and res.metrics["peak_busbw_GBps"] > 0


def test_nccl_tests_check_fails_on_wrong_values_and_exit_codes(fake_nccl_tests, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WRONG", "3")
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path))
    assert res.status == FAIL and "wrong elements at 1M: 6" in res.detail and "1 FAILED" in res.detail
    monkeypatch.setenv("FAKE_WRONG", "0")
    monkeypatch.setenv("FAKE_EXIT", "3")
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path))
    assert res.status == FAIL and "all_reduce_perf exited 3" in res.detail


def test_nccl_tests_check_skips_or_fails_without_the_binary(tmp_path, monkeypatch):
    monkeypatch.delenv(checks.NCCL_TESTS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nccltests, "NCCL_TESTS_DIRS", (str(tmp_path / "none"),))
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path))
    assert res.status == SKIP and res.detail.startswith("nccl-tests not installed: all_reduce_perf is not on PATH")
    cuda_image = {"stack": {"cuda": "13.0.2", "nccl": "2.28.3"}}
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, expectation=cuda_image))
    assert res.status == FAIL and "the image should have nccl-tests (CUDA 13.0.2, NCCL 2.28.3)" in res.detail
    # an image that says what it compiled is held to that list: the registry-built one has none
    compiled = {**cuda_image, "built": ["/opt/ucx", "/opt/openmpi", "/opt/nccl-tests"]}
    assert checks.check_nccl_tests(_gpu_ctx(tmp_path, expectation=compiled)).status == FAIL
    registry = {**cuda_image, "features": {"nccl_bench": True}}
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, expectation=registry))
    assert res.status == SKIP and res.detail.startswith("nccl-tests not installed")
    monkeypatch.setenv(checks.NCCL_TESTS_ENV, str(tmp_path / "nowhere"))
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path))
    assert res.status == FAIL and "no executable all_reduce_perf there" in res.detail
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, tier="cpu"))
    assert res.status == SKIP and res.detail.startswith("tier cpu")


def test_nccl_tests_check_skips_without_a_gpu(fake_nccl_tests, tmp_path):
    res = checks.check_nccl_tests(_gpu_ctx(tmp_path, gpus=0))
    assert res.status == SKIP and res.detail.startswith("tier gpu: no CUDA device visible")


def test_tier_gpu_adds_nccl_tests_and_tier_cpu_does_not(monkeypatch):
    for name in list(checks.CHECKS):
        monkeypatch.setitem(checks.CHECKS, name, lambda ctx, n=name: CheckResult(n, PASS, "ok"))
    gpu = smoke.run_suite(tier="gpu", ranks=1)
    assert [c.name for c in gpu.checks] == list(smoke.CHECK_NAMES) + ["nccl.bandwidth", "nccl-tests"]
    cpu = smoke.run_suite(tier="cpu", ranks=1)
    assert [c.name for c in cpu.checks] == list(smoke.CHECK_NAMES)
    only = smoke.run_suite(tier="cpu", ranks=1, only=["nccl-tests", "versions"])
    assert [c.name for c in only.checks] == ["versions", "nccl-tests"]


# -- one copy of each library -------------------------------------------------------------------

def _real_library(soname: str) -> str:
    from imagebuild.smoke import libs

    path = libs.locate(soname)
    if path is None:
        pytest.fail(f"{soname} is not installed on this machine (scripts/setup installs Open MPI and UCX)")
    return path


def test_elf_soname_reads_the_dynamic_section():
    from imagebuild.smoke import libs

    assert libs.elf_soname(_real_library("libmpi.so.40")) == "libmpi.so.40"
    assert libs.elf_soname(_real_library("libucp.so.0")) == "libucp.so.0"
    assert libs.elf_soname(sys.executable) is None or not libs.elf_soname(sys.executable).startswith("libmpi")
    assert libs.elf_soname(__file__) is None


def test_soname_copies_finds_a_library_shipped_twice(tmp_path):
    from imagebuild.smoke import libs

    mpi = _real_library("libmpi.so.40")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    shutil.copy(mpi, a / "libmpi.so.40.1")
    (a / "libmpi.so.40").symlink_to("libmpi.so.40.1")   # a link to a copy is the same copy
    assert libs.soname_copies([str(a)]) == {}
    shutil.copy(mpi, b / "libmpi.so.40")
    twice = libs.soname_copies([str(a), str(b)])
    assert twice == {"libmpi.so.40": sorted([str(a / "libmpi.so.40.1"), str(b / "libmpi.so.40")])}
    # a library outside the watched families is not the check's business
    assert libs.soname_copies([str(a), str(b)], prefixes=("libcudnn",)) == {}


# -- UCX build configuration --------------------------------------------------------------------

# `ucx_info -b` lines of a CUDA build with gdrcopy (as EasyBuild's UCX-CUDA modules record them)
# and of Debian bookworm's UCX 1.13.1 (seen in smoke-cpu)
UCX_CUDA_BUILD = '#define uct_MODULES               ":ib:rdmacm:cma:cuda"\n#define uct_cuda_MODULES          ":gdrcopy"\n#define HAVE_IB 1\n'
UCX_DEBIAN_BUILD = '#define HAVE_IB                   1\n#define uct_MODULES               ":ib:rdmacm:cma"\n#define uct_cuda_MODULES          ""\n'
ALL_FEATURES = {"verbs": True, "rdmacm": True, "ucx_cuda": True, "gdrcopy": True}


def test_ucx_modules_are_read_from_the_build_configuration():
    assert checks.parse_ucx_modules(UCX_CUDA_BUILD) == {"ib", "rdmacm", "cma", "cuda", "cuda/gdrcopy"}
    assert checks.parse_ucx_modules(UCX_DEBIAN_BUILD) == {"ib", "rdmacm", "cma"}
    assert checks.parse_ucx_modules("UCX 1.13.1 built without defines") == set()


def test_ucx_modules_judged_against_the_promised_features():
    good = checks.judge_ucx_modules(checks.parse_ucx_modules(UCX_CUDA_BUILD), ALL_FEATURES, True)
    assert [status for status, _ in good] == ["pass", "pass"]
    bad = checks.judge_ucx_modules(checks.parse_ucx_modules(UCX_DEBIAN_BUILD), ALL_FEATURES, True)
    assert bad[-1] == ("fail", "UCX was built without cuda (for ucx_cuda), cuda/gdrcopy (for gdrcopy), "
                               "but the image should have them")
    no_ib = checks.judge_ucx_modules({"rdmacm", "cma"}, {"verbs": True}, False)
    assert no_ib[-1][0] == "fail" and "ib (for verbs)" in no_ib[-1][1] and "HAVE_IB" in no_ib[-1][1]
    assert checks.judge_ucx_modules(set(), {}, False)[0][0] == "fail"
