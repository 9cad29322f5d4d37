"""`imagebuild knowledge sync pytorch` and friends.

Pure logic (pins from Requires-Dist, comparison, the report, in-place patching) runs on fixture
metadata. The network path runs for real twice: against a small PEP 503 index served over HTTP on
127.0.0.1 by this test (a real wheel zip, byte ranges and PEP 658 metadata files), and against the
real package index for torch 2.4.1 (skipped when it is unreachable, failed under CI=true).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import re
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, need
from range_server import RangeServer
from imagebuild import cli, knowledge
from imagebuild.knowledge import sync
from imagebuild.errors import KnowledgeError

# A small knowledge base: one release in flow style, one in block style (and one without a
# default variant), with comments that must survive --write.
MATRIX = '''\
# a comment that must stay
schema: 1
as_of: "2026-11-21"
sources:
  S1: {title: "release notes", url: "https://example.invalid/s1"}
  S10: {title: "wheel metadata", url: "https://example.invalid/s10"}
cuda:
  modes:
    - {id: native, driver_floor: release, source: S1}
  majors:
    - {major: 12, minor_compat_driver: "525.60.13", source: S1}
    - {major: 13, minor_compat_driver: "580.65.06", source: S1}
  releases:
    - {version: "12.1.1", driver: "530.30.02", source: S1}
    - {version: "13.0.2", driver: "580.95.05", source: S1}
drivers:
  branches:
    - {branch: 580, type: LTSB, eol: "2028-06", source: S1}
architectures:
  - {cc: "9.0", name: Hopper, first_cuda: "11.8", source: S1}
gpus:
  - {name: H100, cc: "9.0", datacenter: true, source: S1}
pytorch:
  releases:
    - version: "2.11.0"
      python: ">=3.10,<3.15"   # upper bound from RELEASE.md
      source: S10
      variants:
        - {cuda: "13.0", cudnn: "9.19.0.56", nccl: "2.28.9", default: true, source: S10}  # keep me
    - version: "2.4.1"
      python: '>=3.8,<3.13'
      source: S10
      variants:
        - cuda: "12.1"
          cudnn: "9.1.0.70"
          nccl: "2.20.5"
          cuda_runtime: "12.1.105"
          default: true
          source: S10
    - version: "2.3.1"
      python: ">=3.8"
      source: S10
      variants:
        - {cuda: "12.1", cudnn: "8.9.2.26", nccl: "2.20.5", source: S10}
os:
  - {id: ubuntu22.04, name: "Ubuntu 22.04", family: ubuntu, python: ["3.10"], cuda: ">=11.7", source: S1}
'''

META_2_4_1 = [
    'filelock',
    'sympy',
    'nvidia-cuda-runtime-cu12 (==12.1.105) ; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cudnn-cu12 (==9.1.0.70) ; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-nccl-cu12 (==2.20.5) ; platform_system == "Linux" and platform_machine == "x86_64"',
    'opt-einsum (>=3.3) ; extra == "opt-einsum"',
]
META_2_11_0 = [
    'cuda-toolkit[cublas,cudart,cufft]==13.0.2; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"',
    'nvidia-nccl-cu12==2.27.5; platform_system == "Windows"',  # another platform: ignored
]


@pytest.fixture
def matrix(tmp_path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    knowledge.load(path)  # the fixture itself must be valid
    return path


def pins(version, lines, requires_python=">=3.8"):
    return sync.pins_from_metadata(version, f"torch-{version}-cp312-cp312-manylinux1_x86_64.whl",
                                   requires_python, lines)


# --------------------------------------------------------------------------------------------------
# pins from metadata


def test_old_style_pins_with_markers_and_extras():
    p = pins("2.4.1", META_2_4_1, ">=3.8.0")
    assert (p.cudnn, p.nccl, p.cuda_runtime, p.cuda) == ("9.1.0.70", "2.20.5", "12.1.105", "12.1")
    assert p.value("python") == "3.8.0"


def test_cuda_toolkit_pin_and_other_platforms_ignored():
    p = pins("2.11.0", META_2_11_0, ">=3.10")
    assert (p.cudnn, p.nccl, p.cuda_runtime, p.cuda) == ("9.19.0.56", "2.28.9", "13.0.2", "13.0")


def test_runtime_pin_wins_over_cuda_toolkit_and_ranges_are_kept_as_text():
    p = pins("9.9.9", ["cuda-toolkit==13.1.0", "nvidia-cuda-runtime-cu13==13.0.96",
                       "nvidia-cudnn-cu13>=9.1"])
    assert p.cuda_runtime == "13.0.96"
    assert p.cudnn == ">=9.1"


def test_cpu_wheel_pins_nothing():
    p = pins("2.13.0", ["filelock", "networkx"])
    assert (p.cudnn, p.nccl, p.cuda_runtime, p.cuda) == (None, None, None, None)


def test_unreadable_requirement_is_one_clear_error():
    with pytest.raises(sync.SyncError, match="unreadable Requires-Dist"):
        pins("2.4.1", ["nvidia-cudnn-cu12 (==9.1.0.70"])


def test_pins_from_a_pip_report():
    report = {"version": "1", "install": [{
        "download_info": {"url": "https://files.example.invalid/torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"},
        "metadata": {"name": "torch", "version": "2.4.1", "requires_python": ">=3.8.0",
                     "requires_dist": META_2_4_1}}]}
    p = sync.pins_from_pip_report(report, "2.4.1")
    assert p.wheel == "torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"
    assert p.cudnn == "9.1.0.70"
    with pytest.raises(sync.SyncError, match="names no torch 2.5.1"):
        sync.pins_from_pip_report(report, "2.5.1")


@pytest.mark.parametrize("rp,pythons,floor", [
    (">=3.8", ("3.9", "3.10", "3.12"), "3.9"),     # torch 2.5.1: no cp38 wheel despite >=3.8
    (">=3.10", ("3.8", "3.10"), "3.10"),
    (">=3.8.0", (), "3.8.0"),
    (None, ("3.11",), "3.11"),
    (None, (), None),
])
def test_effective_python_floor(rp, pythons, floor):
    assert sync.effective_python_floor(rp, pythons) == floor


def test_wheel_pythons_from_a_project_page():
    page = "".join(f'<a href="/f/{n}#sha256={"0" * 64}">{n}</a>' for n in (
        "torch-2.5.1-cp313-cp313-manylinux1_x86_64.whl", "torch-2.5.1-cp39-cp39-manylinux1_x86_64.whl",
        "torch-2.5.1-cp38-cp38-macosx_11_0_arm64.whl", "torch-2.5.1-cp38-cp38-win_amd64.whl",
        "torch-2.5.1-cp310-cp310-manylinux1_x86_64.whl", "torch-2.5.0-cp38-cp38-manylinux1_x86_64.whl",
        "torch-2.5.1.tar.gz"))
    links = sync.parse_project_page(page, "text/html", "https://index.invalid/simple/torch/")
    assert links[0].url == "https://index.invalid/f/torch-2.5.1-cp313-cp313-manylinux1_x86_64.whl"
    assert links[0].sha256 == "0" * 64 and links[0].metadata is None
    assert sync.wheel_pythons(links, "2.5.1") == ("3.9", "3.10", "3.13")
    link, py = sync.pick_wheel(links, "2.5.1")
    assert py == "cp310" and link.filename == "torch-2.5.1-cp310-cp310-manylinux1_x86_64.whl"
    p = sync.pins_from_metadata("2.5.1", link.filename, ">=3.8", [], wheel_pythons=("3.9", "3.10"))
    assert p.value("python") == "3.9"


def test_pep691_json_page():
    body = ('{"files": [{"filename": "torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl", '
            '"url": "../../f/torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl", '
            '"hashes": {"sha256": "' + "a" * 64 + '"}, "core-metadata": {"sha256": "' + "b" * 64 + '"}}]}')
    (link,) = sync.parse_project_page(body, "application/vnd.pypi.simple.v1+json",
                                      "https://index.invalid/simple/torch/")
    assert link.url == "https://index.invalid/f/torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"
    assert (link.sha256, link.metadata) == ("a" * 64, "b" * 64)


@pytest.mark.parametrize("spec,floor", [(">=3.10,<3.15", "3.10"), ("<3.13, >=3.8", "3.8"),
                                        ("<3.13", None), (None, None)])
def test_python_floor(spec, floor):
    assert sync.python_floor(spec) == floor


# --------------------------------------------------------------------------------------------------
# comparison and report


def test_agreeing_releases(matrix):
    k = knowledge.load(matrix)
    reports = sync.compare(k, {"2.4.1": pins("2.4.1", META_2_4_1, ">=3.8.0")})
    assert [r.differences for r in reports] == [[]]
    lines = sync.format_report(reports, "m.yaml", "IDX")
    assert lines == ["--- m.yaml", "+++ IDX (default torch wheels, Linux x86_64)",
                     "  torch 2.4.1: agrees (cuda 12.1, cudnn 9.1.0.70, nccl 2.20.5, "
                     "cuda_runtime 12.1.105, python 3.8.0)"]


def test_differences_are_listed_per_release(matrix):
    k = knowledge.load(matrix)
    got = {
        "2.11.0": pins("2.11.0", [l.replace("9.19.0.56", "9.20.0.48") for l in META_2_11_0], ">=3.11"),
        "2.4.1": pins("2.4.1", [l.replace("2.20.5", "2.21.5") for l in META_2_4_1], ">=3.8"),
    }
    reports = sync.compare(k, got)
    diffs = [(d.release, d.field, d.matrix, d.index, d.writable) for r in reports for d in r.differences]
    assert diffs == [
        ("2.11.0", "cudnn", "9.19.0.56", "9.20.0.48", True),
        ("2.11.0", "cuda_runtime", None, "13.0.2", True),
        ("2.11.0", "python", "3.10", "3.11", True),
        ("2.4.1", "nccl", "2.20.5", "2.21.5", True),
    ]
    lines = sync.format_report(reports, "m.yaml", "IDX")
    assert lines[2] == f"@@ torch 2.11.0 (m.yaml:{k.variants[('2.11.0', '13.0')].line}; " \
                       "torch-2.11.0-cp312-cp312-manylinux1_x86_64.whl) @@"
    assert lines[3:9] == ["-cudnn: 9.19.0.56", "+cudnn: 9.20.0.48", "-cuda_runtime: (absent)",
                          "+cuda_runtime: 13.0.2", "-python >= 3.10", "+python >= 3.11"]
    assert lines[-2:] == ["-nccl: 2.20.5", "+nccl: 2.21.5"]


def test_a_different_cuda_or_a_range_is_reported_but_not_writable(matrix):
    k = knowledge.load(matrix)
    other = pins("2.4.1", ["nvidia-cuda-runtime-cu12==12.4.127", "nvidia-cudnn-cu12>=9",
                           "nvidia-nccl-cu12==2.20.5"])
    (rep,) = sync.compare(k, {"2.4.1": other})
    by_field = {d.field: d for d in rep.differences}
    assert by_field["cuda"].writable is False and by_field["cuda"].index == "12.4"
    assert by_field["cudnn"].writable is False and by_field["cudnn"].index == ">=9"
    assert by_field["cuda_runtime"].writable is True
    assert any("fix by hand" in l for l in sync.format_report([rep], "m", "i"))


def test_release_without_default_variant_and_unknown_release(matrix):
    k = knowledge.load(matrix)
    (rep,) = sync.compare(k, {"2.3.1": pins("2.3.1", ["nvidia-cudnn-cu12==8.9.2.26"], ">=3.8")})
    assert [(d.field, d.matrix, d.index) for d in rep.differences] == [("cudnn", None, "8.9.2.26")]
    with pytest.raises(sync.SyncError, match="2.0.1 is not in"):
        sync.compare(k, {"2.0.1": pins("2.0.1", [])})


# --------------------------------------------------------------------------------------------------
# patching


def _changed_lines(before: str, after: str) -> list[str]:
    return [l for l in difflib.ndiff(before.splitlines(), after.splitlines()) if l[:1] in "+-"]


def test_write_edits_only_the_values(matrix):
    before = matrix.read_text()
    k = knowledge.load(matrix)
    reports = sync.compare(k, {
        "2.11.0": pins("2.11.0", [l.replace("9.19.0.56", "9.20.0.48") for l in META_2_11_0], ">=3.11"),
        "2.4.1": pins("2.4.1", [l.replace("9.1.0.70", "9.1.0.71").replace("12.1.105", "12.1.106")
                                for l in META_2_4_1], ">=3.9")})
    assert sync.write_matrix(str(matrix), [d for r in reports for d in r.differences])
    after = matrix.read_text()
    assert _changed_lines(before, after) == [
        '-       python: ">=3.10,<3.15"   # upper bound from RELEASE.md',
        '+       python: ">=3.11,<3.15"   # upper bound from RELEASE.md',
        '-         - {cuda: "13.0", cudnn: "9.19.0.56", nccl: "2.28.9", default: true, source: S10}  # keep me',
        '+         - {cuda: "13.0", cudnn: "9.20.0.48", nccl: "2.28.9", default: true, source: S10, '
        'cuda_runtime: "13.0.2"}  # keep me',
        "-       python: '>=3.8,<3.13'",
        "+       python: '>=3.9,<3.13'",
        '-           cudnn: "9.1.0.70"',
        '+           cudnn: "9.1.0.71"',
        '-           cuda_runtime: "12.1.105"',
        '+           cuda_runtime: "12.1.106"',
    ]
    k2 = knowledge.load(matrix)
    assert k2.variants[("2.11.0", "13.0")].cudnn == "9.20.0.48"
    assert k2.variants[("2.11.0", "13.0")].cuda_runtime == "13.0.2"
    assert k2.variants[("2.11.0", "13.0")].source == "S10"
    assert k2.pytorch["2.4.1"].python == ">=3.9,<3.13"
    # synced again: nothing left to do
    again = sync.compare(k2, {
        "2.11.0": pins("2.11.0", [l.replace("9.19.0.56", "9.20.0.48") for l in META_2_11_0], ">=3.11")})
    assert again[0].differences == []
    assert sorted(os.listdir(matrix.parent)) == ["matrix.yaml"]


def test_block_mapping_insert(matrix):
    text = matrix.read_text().replace('          cuda_runtime: "12.1.105"\n', "")
    matrix.write_text(text)
    k = knowledge.load(matrix)
    (rep,) = sync.compare(k, {"2.4.1": pins("2.4.1", META_2_4_1, ">=3.8")})
    assert [(d.field, d.matrix) for d in rep.differences] == [("cuda_runtime", None)]
    assert sync.write_matrix(str(matrix), rep.differences)
    assert _changed_lines(text, matrix.read_text()) == ['+           cuda_runtime: "12.1.105"']
    assert knowledge.load(matrix).variants[("2.4.1", "12.1")].cuda_runtime == "12.1.105"


def test_nothing_unsafe_is_ever_written(matrix):
    doc = knowledge.load_yaml(matrix)
    bad = sync.Difference("2.4.1", "cudnn", "9.1.0.70", '9"; rm -rf /', None, True)
    with pytest.raises(Exception, match="malformed version"):
        sync.patch_text(matrix.read_text(), doc, [bad])
    not_writable = sync.Difference("2.4.1", "cuda", "12.1", "12.4", None, False)
    assert sync.write_matrix(str(matrix), [not_writable]) is False


def test_write_keeps_the_file_when_the_result_would_not_load(matrix, monkeypatch):
    before = matrix.read_bytes()
    k = knowledge.load(matrix)
    (rep,) = sync.compare(k, {"2.4.1": pins("2.4.1", [l.replace("2.20.5", "2.21.5") for l in META_2_4_1])})

    real_load = knowledge.load

    def load_then_object(path):
        real_load(path)  # the patched text is valid; pretend a later rule refused it
        raise KnowledgeError("contradicting facts", file=str(path), line=3)

    monkeypatch.setattr(knowledge, "load", load_then_object)
    with pytest.raises(sync.SyncError, match="would not load .*unchanged"):
        sync.write_matrix(str(matrix), rep.differences)
    assert matrix.read_bytes() == before
    assert sorted(os.listdir(matrix.parent)) == ["matrix.yaml"]


# --------------------------------------------------------------------------------------------------
# a real index over HTTP on 127.0.0.1


def _wheel_bytes(version: str, requires_dist: list[str], requires_python: str) -> tuple[bytes, bytes]:
    meta = (f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
            f"Requires-Python: {requires_python}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires_dist)).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        # filler so the wheel is far larger than what sync may read
        zf.writestr("torch/lib/libtorch_filler.so", os.urandom(3 << 20), zipfile.ZIP_STORED)
        for i in range(200):
            zf.writestr(f"torch/mod{i}.py", f"x = {i}\n")
        zf.writestr(f"torch-{version}.dist-info/METADATA", meta)
        zf.writestr(f"torch-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buf.getvalue(), meta


class _Index(RangeServer):
    """A PEP 503 index: /simple/torch/ links one wheel per release; 2.11.0 advertises a PEP 658
    metadata file, 2.4.1 does not (so only byte ranges can read it). Every byte sent is counted."""

    def __init__(self, root: Path):
        super().__init__()
        links = []
        for ver, lines, rp, pep658 in (("2.11.0", META_2_11_0, ">=3.10", True),
                                       ("2.4.1", META_2_4_1, ">=3.8.0", False),
                                       ("2.3.1", ["nvidia-cudnn-cu12==8.9.2.26"], ">=3.8", False)):
            name = f"torch-{ver}-cp312-cp312-manylinux1_x86_64.whl"
            whl, meta = _wheel_bytes(ver, lines, rp)
            self.files[f"/files/{name}"] = whl
            attr = ""
            if pep658:
                self.files[f"/files/{name}.metadata"] = meta
                attr = f' data-dist-info-metadata="sha256={hashlib.sha256(meta).hexdigest()}"'
            links.append(f'<a href="../../files/{name}#sha256={hashlib.sha256(whl).hexdigest()}"'
                         f' data-requires-python="{rp}"{attr}>{name}</a>')
            # the same wheel for older interpreters (the Python floor counts them; the cp312 one is read)
            for py in ("cp38", "cp310"):
                other = name.replace("cp312-cp312", f"{py}-{py}")
                self.files[f"/files/{other}"] = whl
                links.append(f'<a href="../../files/{other}">{other}</a>')
            # a wheel for another platform, which must not be picked
            self.files[f"/files/torch-{ver}-cp312-cp312-manylinux2014_aarch64.whl"] = b"not a zip"
            links.append(f'<a href="../../files/torch-{ver}-cp312-cp312-manylinux2014_aarch64.whl">x</a>')
        self.files["/simple/torch/"] = ("<html><body>" + "<br/>".join(links) + "</body></html>").encode()


@pytest.fixture
def local_index(tmp_path):
    idx = _Index(tmp_path)
    yield idx
    idx.close()


def test_local_index_reads_metadata_without_the_wheel(local_index):
    index = sync.Index(local_index.url, settings={})
    p = index.pins("2.4.1")
    assert (p.cudnn, p.nccl, p.cuda_runtime) == ("9.1.0.70", "2.20.5", "12.1.105")
    assert p.wheel == "torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"
    assert "HTTP ranges" in p.how
    wheel_size = len(local_index.files["/files/" + p.wheel])
    assert local_index.ranges >= 1
    assert local_index.sent < wheel_size / 2, (local_index.sent, wheel_size)
    sent = local_index.sent
    p = index.pins("2.11.0")
    assert "PEP 658" in p.how and p.cudnn == "9.19.0.56"
    assert local_index.sent - sent < 1000  # only the metadata file (and no page: it is cached)


def test_cli_sync_agree_differ_and_write(local_index, matrix, capsys):
    base = ["knowledge", "sync", "pytorch", "--matrix", str(matrix), "--index-url", local_index.url,
            "--quiet", "--no-wheels"]
    assert cli.main(base + ["--versions", "2.4.1"]) == 0
    out = capsys.readouterr().out
    assert "torch 2.4.1: agrees" in out and "all 1 releases agree" in out

    assert cli.main(base + ["--versions", "2.11.0,2.4.1"]) == 1
    out = capsys.readouterr().out
    assert "@@ torch 2.11.0" in out and "+cuda_runtime: 13.0.2" in out
    assert matrix.read_text() == MATRIX  # no --write: untouched

    assert cli.main(base + ["--versions", "2.11.0", "--write"]) == 1
    assert "updated" in capsys.readouterr().out
    assert knowledge.load(matrix).variants[("2.11.0", "13.0")].cuda_runtime == "13.0.2"
    assert cli.main(base + ["--versions", "2.11.0"]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["--versions", "2.0.1"], "torch 2.0.1 is not in"),
    (["--versions", "latest"], "malformed version"),
    (["--versions", "1.0; rm -rf /"], "malformed version"),
    (["--index-url", "http://127.0.0.1:1/simple/"], "cannot reach the package index"),
    (["--index-url", "ftp://x y"], "malformed index URL"),
    (["--index-url", "file:///opt/wheels"], "malformed index URL"),
])
def test_cli_bad_input_is_one_line(matrix, capsys, argv, needle):
    rc = cli.main(["knowledge", "sync", "pytorch", "--matrix", str(matrix), "--quiet"] + argv)
    err = capsys.readouterr().err
    assert rc == (3 if "cannot reach" in needle else 2)   # an index that does not answer: an outage
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
    assert matrix.read_text() == MATRIX


def test_missing_wheel_is_one_line(local_index, matrix, capsys):
    local_index.files["/simple/torch/"] = b"<html><body></body></html>"
    rc = cli.main(["knowledge", "sync", "pytorch", "--matrix", str(matrix), "--quiet", "--no-wheels",
                   "--index-url", local_index.url, "--versions", "2.4.1"])
    err = capsys.readouterr().err
    assert rc == 2 and "no CPython Linux x86_64 wheel" in err and len(err.strip().splitlines()) == 1


def test_index_without_metadata_or_ranges_is_refused(local_index):
    local_index.no_ranges = True
    with pytest.raises(sync.SyncError, match="neither PEP 658 metadata nor byte ranges"):
        sync.Index(local_index.url, settings={}).pins("2.4.1")
    assert local_index.sent < 10000  # the project page only: the wheel was never sent


def test_pip_settings_ignore_find_links_and_extra_index():
    class Proc:
        stdout = ("global.find-links='/opt/wheels'\n"
                  "global.extra-index-url='file:///opt/pypi/simple'\n"
                  "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
                  "global.index-url='https://mirror.example.invalid/simple'\n"
                  ":env:.index-url='https://env.example.invalid/simple'\n")
    got = sync.pip_settings(runner=lambda *a, **k: Proc())
    assert got == {"index-url": "https://env.example.invalid/simple",
                   "cert": "/etc/ssl/certs/ca-certificates.crt"}


# --------------------------------------------------------------------------------------------------
# validate and show


def test_validate_and_show(repo_root, capsys):
    path = str(repo_root / "matrix.yaml")
    assert cli.main(["knowledge", "validate", "--matrix", path]) == 0
    out = capsys.readouterr().out
    k = knowledge.load(path)
    assert f"sources:    {len(k.sources)}\n" in out and f"rules:      {len(k.rules)}\n" in out
    assert cli.main(["knowledge", "show", "gpus", "--matrix", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["gpu", "cc", "architecture", "data", "center", "source"]
    h100 = next(l for l in out if l.startswith("H100 "))
    assert h100.split()[:2] == ["H100", "9.0"] and h100.split()[-1] == f"[{k.gpus['H100'].source}]"
    for section in ("cuda", "pytorch", "drivers", "os", "constraints", "rules", "cudnn", "nccl"):
        assert cli.main(["knowledge", "show", section, "--matrix", path]) == 0
        rows = [l for l in capsys.readouterr().out.splitlines()
                if l and not l.endswith(":") and not set(l) <= {"-", " "}][1:]
        assert rows and all(re.search(r"\[[A-Za-z0-9]+\]", l) for l in rows
                            if not l.startswith(("mode ", "major ", "cuda ", "cudnn ", "since ",
                                                 "id ", "rule ", "os ", "branch ", "cuda major")))
    assert cli.main(["knowledge", "show", "nonsense", "--matrix", path]) == 2
    err = capsys.readouterr().err
    assert "unknown section 'nonsense'" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------------
# the real package index


def test_real_index_torch_2_4_1():
    """torch 2.4.1's default wheel pins nvidia-cudnn-cu12==9.1.0.70 (FACTS, S10)."""
    import requests

    index = sync.Index()
    try:
        requests.get(index.url, timeout=20, verify=index.session.verify).raise_for_status()
    except requests.RequestException as exc:
        need("the package index", f"{index.url} unreachable: {type(exc).__name__}")
    p = index.pins("2.4.1")
    assert (p.cudnn, p.nccl, p.cuda_runtime, p.cuda) == ("9.1.0.70", "2.20.5", "12.1.105", "12.1")
    assert sync.python_floor(p.requires_python) in ("3.8", "3.8.0")
    assert p.value("python") in ("3.8", "3.8.0") and "3.12" in p.wheel_pythons
    assert p.wheel.startswith("torch-2.4.1-") and p.wheel.endswith("_x86_64.whl")
    # the aarch64 wheel, read through HTTP ranges, is the record matrix.yaml keeps (PYPIWHEEL)
    from imagebuild.knowledge import wheelevidence

    ev = index.wheel_evidence("2.4.1", "aarch64")
    rec = next(w for w in knowledge.load(ROOT / "matrix.yaml").pytorch["2.4.1"].wheels
               if w.platform == "aarch64")
    assert (ev.file, ev.sha256, ev.size, ev.cuda, ev.commit) == \
        (rec.file, rec.sha256, rec.size, rec.cuda, rec.commit) and ev.cuda == wheelevidence.NONE
