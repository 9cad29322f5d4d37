"""Issue 25's source audit: every PyTorch release x variant x platform with its evidence, recorded in
matrix.yaml and audited offline (`imagebuild knowledge evidence`); `knowledge sync pytorch` reads the
wheels again (their torch/version.py through HTTP ranges) and reports what changed.

The facts these tests name come from the wheels on the package index (source PYPIWHEEL: each
release's cp312 wheel for Linux x86_64 and aarch64, 2026-11-27), PyTorch's dev-discuss post on the
2.10 wheel variants (PT210WV) and PyTorch's previous-versions page (PTPREV). The reading path runs
for real against an index served over HTTP on 127.0.0.1 by this test; the real package index is
read in test_sync.py."""

from __future__ import annotations

import hashlib
import io
import os
import re
import zipfile

import pytest

from conftest import ROOT, answer
from range_server import RangeServer
from imagebuild import cli, knowledge
from imagebuild.errors import KnowledgeError
from imagebuild.knowledge import sync, wheelevidence
from imagebuild.versions import NONE, parse_version

MATRIX = ROOT / "matrix.yaml"

VERSION_PY_CUDA = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.10.0+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = '449b1768410104d3ed79d3bcfe4ba1d65c7f22c0'
hip: Optional[str] = None
"""


def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- reading torch/version.py ------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    (VERSION_PY_CUDA, ("12.8", "449b1768410104d3ed79d3bcfe4ba1d65c7f22c0")),
    (VERSION_PY_CUDA.replace("'12.8'", "None"), (NONE, "449b1768410104d3ed79d3bcfe4ba1d65c7f22c0")),
    ("cuda = '12.1'\ngit_version = '" + "a" * 40 + "'\n", ("12.1", "a" * 40)),   # the 2.1-era form
])
def test_version_py(text, want):
    assert wheelevidence.read_version_py(text, "w.whl") == want


@pytest.mark.parametrize("text", [
    VERSION_PY_CUDA.replace("git_version", "gitversion"),
    VERSION_PY_CUDA.replace("'12.8'", "'12.8; rm -rf /'"),
    "",
])
def test_version_py_that_says_too_little_is_refused(text):
    with pytest.raises(sync.SyncError, match="torch/version.py names no"):
        wheelevidence.read_version_py(text, "w.whl")


@pytest.mark.parametrize("library,want", [
    # 2.9.1's libtorch_python.so: the list follows another string with no NUL between
    (b"\0std::string ipc_hsm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120\0",
     ("7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0")),
    (b"\0sm_80 sm_90 sm_100 sm_110 sm_120\0", ("8.0", "9.0", "10.0", "11.0", "12.0")),
    (b"\0sm_90 sm_100 compute_100\0", ("9.0", "10.0+PTX")),
    (b"\0sm_80 sm_90a compute_120\0", ("8.0", "9.0", "12.0+PTX")),
])
def test_arch_list_from_the_library(library, want):
    assert wheelevidence.read_arch(library, "w.whl") == want


@pytest.mark.parametrize("library", [b"no list here sm_80\0", b"\0sm_80 sm_90\0sm_75 sm_86\0"])
def test_no_single_arch_list_is_refused(library):
    with pytest.raises(sync.SyncError, match="architecture lists in torch/lib/libtorch_python.so"):
        wheelevidence.read_arch(library, "w.whl")


# -- the records in matrix.yaml ------------------------------------------------------------------

def test_every_release_has_its_two_index_wheels_recorded(k):
    """PYPIWHEEL: each release's wheel for Linux x86_64 and aarch64, and the x86_64 one is the
    default variant (what `pip install torch==V` gets)."""
    for ver, rel in k.pytorch.items():
        plats = sorted(w.platform for w in rel.wheels)
        assert plats == ["aarch64", "x86_64"], ver
        default = next(v for (r, _), v in k.variants.items() if r == ver and v.default)
        x86 = next(w for w in rel.wheels if w.platform == "x86_64")
        assert x86.cuda == default.cuda and x86.source == "PYPIWHEEL", ver
        assert all(w.file.startswith(f"torch-{ver}-") for w in rel.wheels)


def test_the_index_aarch64_wheel_is_the_cpu_build_until_2_10(k):
    """PYPIWHEEL: torch/version.py of every aarch64 wheel up to 2.10.0 says cuda = None; from 2.11.0
    the aarch64 wheel is the default CUDA build. So each of those releases has a CPU variant for
    aarch64, and a plain `pip install torch` on a Grace host before 2.11 gets no CUDA."""
    for ver, rel in k.pytorch.items():
        arm = next(w for w in rel.wheels if w.platform == "aarch64")
        if parse_version(ver) < parse_version("2.11"):
            assert arm.cuda == NONE, ver
            assert "aarch64" in k.variants[(ver, NONE)].platforms, ver
        else:
            default = next(v for (r, _), v in k.variants.items() if r == ver and v.default)
            assert arm.cuda == default.cuda, ver


def test_the_wheels_architectures(k):
    """PYPIWHEEL, libtorch_python.so of each CUDA wheel: the x86_64 wheel carries its variant's
    list (2.6.0's and 2.15.0's were "?" before); the aarch64 wheels of 2.11 to 2.15 carry 8.0, 9.0,
    10.0, 11.0, 12.0 (no 7.5 or 8.6 cubins, and Thor's 11.0), a rule of their own."""
    for ver, rel in k.pytorch.items():
        for w in rel.wheels:
            if w.cuda == NONE:
                assert w.arch is None
            elif w.platform == "x86_64":
                assert sorted(w.arch) == sorted(k.variants[(ver, w.cuda)].arch), ver
            else:
                assert w.arch == ("8.0", "9.0", "10.0", "11.0", "12.0"), ver


def test_a_turing_gpu_on_an_arm_server_gets_no_aarch64_wheel_without_its_cubins(capsys):
    """A T4 (cc 7.5) in an aarch64 server: 2.13.0's aarch64 cu130 wheel has no sm_75 (PYPIWHEEL),
    so the answer was a stack that could not run; it is refused, citing the wheel. Its cu126
    aarch64 build is published (PTIAARCH) but its architectures are not recorded: an answer on it
    says so, and --strict refuses it."""
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "T4",
                        "--platform", "aarch64", "--torch", "2.13", "--json")
    res = answer(out, "resolve", code=code)
    assert code == 0 and res["stack"]["cuda"].startswith("12.6")
    assert any("the GPU architectures of its aarch64 wheels are not recorded" in u
               for u in res["unknown"]), res
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "T4",
                        "--platform", "aarch64", "--torch", "2.13", "--strict")
    assert code == 1 and "--strict: torch 2.13.0+cu126: the GPU architectures" in out
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "T4",
                        "--platform", "aarch64", "--torch", "2.13", "--cuda", "13.0")
    assert code == 1
    assert "torch 2.13.0+cu130 wheels for aarch64 are built for sm 8.0, 9.0, 10.0, 11.0, 12.0 " \
           "(the index's aarch64 wheel) [PYPIWHEEL]" in out


def test_a_platform_whose_wheel_architectures_are_not_recorded_is_said(capsys):
    """2.9.1's aarch64 CUDA builds are known from a release post (PT29), not from a wheel read
    here: the answer for a GH200 uses the x86_64 build's list and says so."""
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                        "GH200", "--torch", "2.9", "--json")
    res = answer(out, "resolve", code=code)
    assert res["stack"]["platform"] == "aarch64"
    assert any(w.startswith("torch 2.9.1+cu130: the GPU architectures of its aarch64 wheels are not "
                            "recorded; the x86_64 build's") for w in res["warnings"]), res["warnings"]
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                        "GH200", "--torch", "2.13", "--cuda", "13.0", "--json")
    assert not any("not recorded" in w for w in answer(out, "resolve", code=code)["warnings"])


def test_a_release_wheels_share_the_commit_they_were_built_from(k):
    for ver, rel in k.pytorch.items():
        assert len({w.commit for w in rel.wheels}) == 1, ver
    assert k.pytorch["2.10.0"].wheels[0].commit == "449b1768410104d3ed79d3bcfe4ba1d65c7f22c0"


def _record_line(text: str, ver: str, plat: str) -> int:
    lines = text.splitlines()
    start = lines.index(f'    - version: "{ver}"')
    return next(i + 1 for i, line in enumerate(lines) if i > start and f"platform: {plat}," in line)


MISTAKES = [
    ("a CPU wheel whose release has no CPU variant",
     lambda t: _drop_variant(t, "2.8.0", "{cpu: true"), "2.8.0", "aarch64",
     "is the CPU build, which no variant of the release names"),
    ("a wheel of another release",
     lambda t: _in_record(t, "2.8.0", "aarch64", "torch-2.8.0-", "torch-2.7.1-"), "2.8.0", "aarch64",
     "is no wheel of torch 2.8.0"),
    ("a wheel of another platform",
     lambda t: _in_record(t, "2.8.0", "aarch64", "platform: aarch64,", "platform: x86_64,"), "2.8.0",
     "aarch64", "manylinux_2_28_aarch64.whl is no x86_64 wheel"),
    ("a sha256 that is no sha256",
     lambda t: _in_record(t, "2.8.0", "aarch64", 'sha256: "e2fab', 'sha256: "XYZ'), "2.8.0", "aarch64",
     "sha256 is 64 lowercase hex digits"),
    ("a commit that is no commit",
     lambda t: _in_record(t, "2.8.0", "aarch64", 'commit: "a1cb3', 'commit: "$(id)'), "2.8.0",
     "aarch64", "commit is a 40-hex-digit git commit"),
    ("the x86_64 wheel is not the default variant",
     lambda t: _in_record(t, "2.8.0", "x86_64", 'cuda: "12.8"', 'cuda: "12.6"'), "2.8.0", "x86_64",
     "but the default variant is cu128"),
    ("an x86_64 wheel whose architectures are not its variant's",
     lambda t: _in_record(t, "2.8.0", "x86_64", '"7.0", "7.5", ', ''), "2.8.0", "x86_64",
     "carries 8.0, 8.6, 9.0, 10.0, 12.0, but the variant says 7.0, 7.5"),
    ("a CPU wheel with architectures",
     lambda t: _in_record(t, "2.8.0", "aarch64", "cuda: none", 'cuda: none, arch: ["8.0"]'), "2.8.0",
     "aarch64", "a CPU build carries no GPU architectures"),
    ("a CUDA wheel for a platform its variant does not list",
     lambda t: _in_record(t, "2.8.0", "aarch64", "cuda: none", 'cuda: "12.8"'), "2.8.0", "aarch64",
     "but that variant lists only x86_64"),
]


def _drop_variant(text: str, ver: str, start: str) -> str:
    lines = text.splitlines(keepends=True)
    first = lines.index(f'    - version: "{ver}"\n')
    i = next(i for i, line in enumerate(lines) if i > first and line.strip().startswith("- " + start))
    return "".join(lines[:i] + lines[i + 1:])


def _in_record(text: str, ver: str, plat: str, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    i = _record_line(text, ver, plat) - 1
    assert old in lines[i], (old, lines[i])
    lines[i] = lines[i].replace(old, new, 1)
    return "".join(lines)


@pytest.mark.parametrize("what,edit,ver,plat,needle", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_record_that_contradicts_itself_or_the_variants_is_refused_at_its_line(
        tmp_path, what, edit, ver, plat, needle):
    original = MATRIX.read_text(encoding="utf-8")
    path = tmp_path / "matrix.yaml"
    path.write_text(edit(original), encoding="utf-8")
    with pytest.raises(KnowledgeError) as exc:
        knowledge.load(path)
    assert needle in exc.value.message, exc.value.message
    # the records stand before the variants, so no edit moves them: the record's line in the file
    assert exc.value.line == _record_line(original, ver, plat), (exc.value.line, exc.value.message)


# -- the audit -----------------------------------------------------------------------------------

def test_the_audit_covers_every_build_and_platform_once(k, capsys):
    code, out, err = _cli(capsys, "knowledge", "evidence", "--matrix", MATRIX, "--json")
    res = answer(out, "knowledge evidence", code=code)
    assert code == 0 and res["refused"] == []
    rows = {(r["release"], r["build"], r["platform"]): r for r in res["rows"]}
    want = {(v.pytorch, v.tag, p) for v in k.variants.values() for p in v.platforms}
    assert set(rows) == want and len(res["rows"]) == len(want)
    arm = rows[("2.10.0", "cpu", "aarch64")]
    assert arm["kind"] == "wheel" and arm["source"] == "PYPIWHEEL"
    assert "torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl sha256:5fd4117d89ff" in arm["detail"]
    # 2.10's aarch64 CUDA builds rest on PyTorch's own post (PT210WV), its x86_64 cu126 on RELEASE.md
    assert rows[("2.10.0", "cu126", "aarch64")]["source"] == "PT210WV"
    assert rows[("2.10.0", "cu126", "x86_64")]["source"] == "S14"
    assert all(r["first_party"] for r in res["rows"] if r["verified"])
    code, out, _ = _cli(capsys, "knowledge", "evidence", "--matrix", MATRIX)
    assert code == 0 and re.search(r"\d+ builds x platforms: 30 shown by a wheel on the index", out)


def test_the_audit_refuses_a_verified_build_on_third_party_copies_alone(tmp_path, capsys):
    text = MATRIX.read_text(encoding="utf-8")
    old = 'platforms: [x86_64, aarch64], platforms_source: PT210WV, source: S14}'
    assert old in text
    path = tmp_path / "matrix.yaml"
    path.write_text(text.replace(old, old.replace("PT210WV", "TORCHREL29BM"), 1), encoding="utf-8")
    code, out, _ = _cli(capsys, "knowledge", "evidence", "--matrix", path)
    assert code == 1
    assert "refused: torch 2.10.0+cu126 on aarch64: verified, but its only evidence is third-party " \
           "(TORCHREL29BM)" in out


# -- the answers these facts change ---------------------------------------------------------------

def test_grace_hosts_get_torch_2_10(capsys):
    """PT210WV: 2.10.0's CUDA 12.6, 12.8 and 13.0 builds for Linux aarch64."""
    code, out, err = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                          "GH200", "--torch", "2.10", "--json")
    res = answer(out, "resolve", code=code)
    stack = res["stack"]
    assert (stack["platform"], stack["pytorch"], stack["cuda"]) == ("aarch64", "2.10.0", "13.0.2")


def test_grace_hosts_get_torch_2_8_only_under_allow_unverified(capsys):
    """TORCH28SBSA: the 2.8 cycle's aarch64 CUDA build was 12.9, known from nightly build-matrix
    pull requests only: refused by default with the reason, offered under --allow-unverified."""
    base = ["resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "GB200", "--torch", "2.8"]
    code, out, _ = _cli(capsys, *base)
    assert code == 1 and "torch 2.8.0 is built for CUDA 12.8, 12.6 (builds for 12.9 are not confirmed)" in out
    code, out, _ = _cli(capsys, *base, "--allow-unverified", "--json")
    stack = answer(out, "resolve", code=code)["stack"]
    assert (stack["platform"], stack["pytorch"], stack["cuda"][:5]) == ("aarch64", "2.8.0", "12.9.")


def test_a_host_without_gpu_gets_the_cpu_build_of_an_older_torch(capsys):
    """PTPREV: 2.6.0's '# CPU only' command; before, only 2.13.0 had a CPU build recorded."""
    code, out, err = _cli(capsys, "resolve", "--matrix", MATRIX, "--gpu", "none", "--torch", "2.6",
                          "--platform", "x86_64", "--json")
    stack = answer(out, "resolve", code=code)["stack"]
    assert (stack["pytorch"], stack["cuda"], stack["platform"]) == ("2.6.0", "none", "x86_64")


def test_the_cpu_build_known_only_for_aarch64_is_refused_on_x86_64_with_its_source(capsys):
    """PYPIWHEEL: 2.8.0's aarch64 wheel is the CPU build; no first-party page seen lists the x86_64
    CPU build of 2.8.0, so that answer is a refusal that says why."""
    code, out, err = _cli(capsys, "resolve", "--matrix", MATRIX, "--gpu", "none", "--torch", "2.8",
                          "--platform", "x86_64")
    assert code == 1
    assert "torch 2.8.0+cpu wheels are published for aarch64 [PYPIWHEEL]" in out


# -- sync against an index on 127.0.0.1 ------------------------------------------------------------

SMALL = '''\
schema: 1
as_of: "2026-11-21"
sources:
  S1: {title: "release notes", url: "https://example.invalid/s1"}
  S10: {title: "wheel metadata", url: "https://example.invalid/s10"}
  PYPIWHEEL: {title: "the index's wheels", url: "https://example.invalid/w"}
platforms:
  - {id: x86_64, cuda_repo: x86_64, oci: linux/amd64, source: S1}
  - {id: aarch64, cuda_repo: sbsa, oci: linux/arm64, source: S1}
cuda:
  modes:
    - {id: native, driver_floor: release, source: S1}
  majors:
    - {major: 12, minor_compat_driver: "525.60.13", source: S1}
  releases:
    - {version: "12.1.1", driver: "530.30.02", source: S1}
drivers:
  branches:
    - {branch: 580, type: LTSB, eol: "2028-06", source: S1}
architectures:
  - {cc: "9.0", name: Hopper, first_cuda: "11.8", source: S1}
gpus:
  - {name: H100, cc: "9.0", datacenter: true, source: S1}
pytorch:
  releases:
    - version: "2.4.1"
      python: ">=3.8,<3.13"   # a comment that must stay
      source: S10
      variants:
        - {cuda: "12.1", cudnn: "9.1.0.70", nccl: "2.20.5", default: true, source: S10}
        - {cpu: true, platforms: [aarch64], source: PYPIWHEEL}
os:
  - {id: ubuntu22.04, name: "Ubuntu 22.04", family: ubuntu, python: ["3.10"], cuda: ">=11.7", source: S1}
'''

COMMIT = "38b96d3399a695e704ed39b60dac733c3fbf20e2"
META = ('Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\nRequires-Python: >=3.8\n'
        'Requires-Dist: nvidia-cuda-runtime-cu12==12.1.105; platform_machine == "x86_64"\n'
        'Requires-Dist: nvidia-cudnn-cu12==9.1.0.70; platform_machine == "x86_64"\n'
        'Requires-Dist: nvidia-nccl-cu12==2.20.5; platform_machine == "x86_64"\n')


LIBRARY = os.urandom(2 << 20) + b"\0sm_80 sm_90\0" + os.urandom(1 << 20)


def _wheel(cuda: str, filler: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        # stored, incompressible: the wheel is far larger than what sync may read of it
        zf.writestr("torch/lib/libtorch_filler.so", bytes([filler]) + os.urandom(8 << 20),
                    zipfile.ZIP_STORED)
        if cuda != "None":
            zf.writestr("torch/lib/libtorch_python.so", LIBRARY)
        zf.writestr("torch/version.py", f"cuda: Optional[str] = {cuda}\ngit_version = '{COMMIT}'\n")
        zf.writestr("torch-2.4.1.dist-info/METADATA", META)
    return buf.getvalue()


class _Index(RangeServer):
    """/simple/torch/ with 2.4.1's x86_64 (CUDA 12.1) and aarch64 (CPU) wheels, byte ranges served,
    every byte sent counted."""

    def __init__(self):
        super().__init__()
        self.set_wheels(_wheel("'12.1'", 1), _wheel("None", 2))

    def set_wheels(self, x86: bytes, arm: bytes, page_x86: bytes | None = None):
        """``page_x86``: the bytes whose sha256 the page names for the x86_64 wheel (a mirror
        that serves other bytes under the name and sha256 of the real wheel)."""
        links = []
        for plat, body, named in (("manylinux1_x86_64", x86, page_x86 or x86),
                                  ("manylinux2014_aarch64", arm, arm)):
            name = f"torch-2.4.1-cp312-cp312-{plat}.whl"
            self.files[f"/files/{name}"] = body
            links.append(f'<a href="../../files/{name}#sha256={hashlib.sha256(named).hexdigest()}">'
                         f'{name}</a>')
        self.files["/simple/torch/"] = ("<html><body>" + "".join(links) + "</body></html>").encode()


@pytest.fixture
def index():
    idx = _Index()
    yield idx
    idx.close()


def test_sync_records_reports_and_refuses_what_would_not_load(tmp_path, index, capsys):
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL, encoding="utf-8")
    base = ["knowledge", "sync", "pytorch", "--matrix", path, "--index-url", index.url, "--quiet"]

    code, out, _ = _cli(capsys, *base)
    assert code == 1 and "torch 2.4.1 aarch64: not recorded; the index has " \
        "torch-2.4.1-cp312-cp312-manylinux2014_aarch64.whl (CPU build" in out
    assert path.read_text() == SMALL
    whole = sum(len(v) for key, v in index.files.items() if key.endswith(".whl"))
    assert index.sent < whole / 4, (index.sent, whole)      # ranges, not the wheels

    code, out, _ = _cli(capsys, *base, "--write")
    assert code == 1 and "updated" in out
    text = path.read_text()
    assert "# a comment that must stay" in text
    k = knowledge.load(path)
    recs = {w.platform: w for w in k.pytorch["2.4.1"].wheels}
    assert recs["aarch64"].cuda == NONE and recs["x86_64"].cuda == "12.1"
    assert recs["x86_64"].sha256 == hashlib.sha256(
        index.files["/files/torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"]).hexdigest()
    assert recs["x86_64"].commit == COMMIT and recs["x86_64"].source == "PYPIWHEEL"
    assert recs["x86_64"].arch == ("8.0", "9.0") and recs["aarch64"].arch is None
    sent = index.sent
    assert _cli(capsys, *base)[0] == 0                      # now they agree
    # the same sha256 again: its architectures are the record's, the library is not read again
    assert index.sent - sent < len(LIBRARY) / 2, index.sent - sent

    # the index now serves other bytes under the same name: reported, sha256 named
    index.set_wheels(_wheel("'12.1'", 3), _wheel("None", 2))
    code, out, _ = _cli(capsys, *base)
    assert code == 1 and re.search(r"torch 2.4.1 x86_64: sha256 [0-9a-f]{64} -> [0-9a-f]{64}", out)

    # an aarch64 CUDA wheel contradicts the variants: --write refuses, the file stays
    before = path.read_text()
    index.set_wheels(_wheel("'12.1'", 1), _wheel("'12.1'", 2))
    code, out, err = _cli(capsys, *base, "--write")
    assert code == 2 and "would not load" in err and len(err.strip().splitlines()) == 1
    assert path.read_text() == before


def test_a_mirror_that_alters_the_library_is_caught(tmp_path, index, capsys):
    """A lying mirror: the wheel's directory (and its sha256 on the page) say one thing, the bytes
    of libtorch_python.so another. The library is stored, so the list can be edited in place; its
    CRC-32 no longer holds, and sync says so in one line and writes nothing."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("torch/version.py", f"cuda: Optional[str] = '12.1'\ngit_version = '{COMMIT}'\n")
        zf.writestr("torch/lib/libtorch_python.so", LIBRARY, zipfile.ZIP_STORED)
        zf.writestr("torch-2.4.1.dist-info/METADATA", META)
    body = buf.getvalue()
    assert body.count(b"sm_80 sm_90") == 1
    index.set_wheels(body.replace(b"sm_80 sm_90", b"sm_80 sm_75"), _wheel("None", 2))
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL, encoding="utf-8")
    code, out, err = _cli(capsys, "knowledge", "sync", "pytorch", "--matrix", path, "--index-url",
                          index.url, "--quiet", "--write")
    assert code == 2 and "libtorch_python.so is not what the wheel's directory says" in err
    assert len(err.strip().splitlines()) == 1 and path.read_text() == SMALL


def test_a_mirror_that_also_fixes_the_crc_is_caught_before_anything_is_written(tmp_path, index, capsys):
    """The mirror serves a whole, valid wheel whose library names other architectures (its CRC-32
    right), under the real wheel's name and sha256. Read by ranges it cannot be told apart; what
    --write records is read from the whole wheel, whose sha256 is not the page's: refused, in one
    line, the matrix untouched. The audit without --write still reads ranges only."""
    real = _wheel("'12.1'", 1)
    buf = io.BytesIO()          # the same wheel written again, its library edited: CRC-32s right
    with zipfile.ZipFile(io.BytesIO(real)) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "torch/lib/libtorch_python.so":
                data = data.replace(b"sm_80 sm_90", b"sm_80 sm_75")
            dst.writestr(info, data)
    forged = buf.getvalue()
    index.set_wheels(forged, _wheel("None", 2), page_x86=real)
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL, encoding="utf-8")
    base = ["knowledge", "sync", "pytorch", "--matrix", path, "--index-url", index.url, "--quiet"]
    code, out, err = _cli(capsys, *base)
    assert code == 1 and "x86_64: not recorded" in out, err    # read by ranges, it is believed
    sent = index.sent
    code, out, err = _cli(capsys, *base, "--write")
    assert code == 2 and "is not the" in err and "the index's page names; nothing recorded" in err
    assert len(err.strip().splitlines()) == 1 and path.read_text() == SMALL
    assert index.sent - sent >= len(forged)                # the whole wheel was read to check it


def test_what_write_records_comes_from_the_whole_wheel(tmp_path, index, capsys):
    """An honest index: --write downloads each wheel it records whole, once, and records the same
    facts the ranges gave; a second --write finds nothing to do and downloads nothing."""
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL, encoding="utf-8")
    base = ["knowledge", "sync", "pytorch", "--matrix", path, "--index-url", index.url, "--quiet"]
    sent = index.sent
    code, out, _ = _cli(capsys, *base, "--write")
    wheels = sum(len(v) for key, v in index.files.items() if key.endswith(".whl"))
    assert code == 1 and "updated" in out and index.sent - sent >= wheels
    sent = index.sent
    assert _cli(capsys, *base, "--write")[0] == 0 and index.sent - sent < wheels / 4


def test_nothing_unsafe_is_written_as_a_record():
    ev = wheelevidence.WheelEvidence("2.4.1", "x86_64", 'torch"; x.whl', "a" * 64, "12.1", "b" * 40,
                                     "PYPIWHEEL")
    with pytest.raises(sync.SyncError, match="refusing to write"):
        wheelevidence.record_line(ev, "  ")
