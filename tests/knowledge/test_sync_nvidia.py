"""`imagebuild knowledge sync nvidia`: a CUDA, a cuDNN and an NCCL release the matrix does not have
enter it with one sync against a package index served on 127.0.0.1, and the resolver then answers
with them (the new CUDA through the wheels route, the new NCCL as a wish, the new cuDNN as a host's
system copy). Releases that are pre-releases, local builds, yanked or without a Linux wheel never
enter; a second sync agrees."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT
from range_server import RangeServer
from imagebuild import cli, knowledge
from imagebuild.knowledge import syncnvidia

# what the fixture index serves beyond the matrix's own releases (test data, not facts)
NEW_CUDA, NEW_CUDNN, NEW_NCCL = "13.9.0", "9.99.0.1", "2.99.1"


def _page(names: list[str], yanked: tuple[str, ...] = ()) -> bytes:
    links = []
    for n in names:
        attr = ' data-yanked=""' if n in yanked else ""
        links.append(f'<a href="../../files/{n}#sha256={"0" * 64}"{attr}>{n}</a>')
    return ("<html><body>" + "<br/>".join(links) + "</body></html>").encode()


def _wheel(project: str, version: str, plat: str = "manylinux_2_28_x86_64") -> str:
    return f"{project.replace('-', '_')}-{version}-py3-none-{plat}.whl"


@pytest.fixture
def served(tmp_path):
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "matrix.yaml", matrix)
    k = knowledge.load(str(matrix))
    doc = k.document
    srv = RangeServer()
    toolkit = [_wheel("cuda-toolkit", v) for v in k.releases if not v.startswith("11.")]
    toolkit += [_wheel("cuda-toolkit", NEW_CUDA),
                _wheel("cuda-toolkit", "13.9.1rc1"),                          # a pre-release
                _wheel("cuda-toolkit", "13.9.2+local"),                       # a local build
                _wheel("cuda-toolkit", "13.9.3"),                             # yanked only
                _wheel("cuda-toolkit", "13.9.4", "win_amd64")]                # no Linux wheel
    srv.files["/simple/cuda-toolkit/"] = _page(toolkit, yanked=(_wheel("cuda-toolkit", "13.9.3"),))
    for lib, new in (("cudnn", NEW_CUDNN), ("nccl", NEW_NCCL)):
        for rel in doc[lib]["releases"]:
            project = f"nvidia-{lib}-cu{rel['cuda_major']}"
            names = [_wheel(project, str(v)) for v in rel["versions"]]
            if rel["cuda_major"] == 13:
                names.append(_wheel(project, new))
            srv.files[f"/simple/{project}/"] = _page(names)
    yield matrix, srv
    srv.close()


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_sync_brings_a_cuda_a_cudnn_and_an_nccl_release(served, capsys):
    matrix, srv = served
    before = matrix.read_text()
    code, out, _ = _run(capsys, "knowledge", "sync", "nvidia", "--matrix", str(matrix),
                        "--index-url", srv.url, "--json")
    doc = json.loads(out)["result"]
    new = {(n["library"], n["version"]) for n in doc["new"]}
    assert code == 1 and new == {("cuda", NEW_CUDA), ("cudnn", NEW_CUDNN), ("nccl", NEW_NCCL)}
    assert matrix.read_text() == before                     # without --write nothing changes

    code, out, _ = _run(capsys, "knowledge", "sync", "nvidia", "--matrix", str(matrix),
                        "--index-url", srv.url, "--write")
    assert code == 1 and "updated (3 release(s) added)" in out
    after = matrix.read_text()
    # only added lines and the two touched list lines per library differ; comments stay
    assert after.count("\n") == before.count("\n") + 1
    assert [ln for ln in before.splitlines() if ln.lstrip().startswith("#")] == \
        [ln for ln in after.splitlines() if ln.lstrip().startswith("#")]
    k = knowledge.load(str(matrix))
    rel = k.releases[NEW_CUDA]
    assert rel.wheels_only and rel.driver is None and rel.source == "S10"
    assert NEW_NCCL in k.nccl_releases and NEW_CUDNN in k.cudnn_releases

    # the resolver answers with each of them
    code, out, _ = _run(capsys, "resolve", "--matrix", str(matrix), "--driver", "580.95.05",
                        "--gpu", "H100", "--cuda", "13.9", "--nccl", NEW_NCCL, "--json")
    doc = json.loads(out)["result"]
    assert code == 0, doc["explanation"]
    assert (doc["stack"]["cuda"], doc["stack"]["nccl"], doc["cuda_from"]) == \
        (NEW_CUDA, NEW_NCCL, "wheels")
    assert doc["modes"]["cuda"]["mode"] == "minor-version"
    code, out, _ = _run(capsys, "resolve", "--matrix", str(matrix), "--driver", "580.95.05",
                        "--gpu", "H100", "--system-cudnn", NEW_CUDNN, "--json")
    assert code == 0 and json.loads(out)["result"]["stack"]["system_cudnn"] == NEW_CUDNN

    # a second sync finds nothing new and writes nothing
    code, out, _ = _run(capsys, "knowledge", "sync", "nvidia", "--matrix", str(matrix),
                        "--index-url", srv.url, "--write")
    assert code == 0 and "every CUDA, cuDNN and NCCL release on the index is in the matrix" in out
    assert matrix.read_text() == after


def test_a_release_line_that_is_not_one_line_is_refused_whole(served, capsys):
    matrix, srv = served
    text = matrix.read_text()
    # the NCCL CUDA 13 releases written as a block mapping: sync cannot patch it by line
    old = next(ln for ln in text.splitlines() if "{cuda_major: 13, source: S10, versions: [\"2.27.7\"" in ln)
    indent = old[:len(old) - len(old.lstrip())]
    versions = old[old.index("versions: ") + len("versions: "):old.rindex("}")]
    block = f"{indent}- cuda_major: 13\n{indent}  source: S10\n{indent}  versions: {versions}"
    matrix.write_text(text.replace(old, block))
    before = matrix.read_text()
    code, out, err = _run(capsys, "knowledge", "sync", "nvidia", "--matrix", str(matrix),
                          "--index-url", srv.url, "--write", "--quiet")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{matrix}: nccl.releases: line " in err and "edit it by hand" in err
    assert "Traceback" not in err and matrix.read_text() == before


def test_widen_raises_only_an_upper_bound_below_the_new_release():
    line = '    - {cuda_major: 13, versions: ">=2.27.7,<=2.32.3", source: S10}\n'
    assert syncnvidia._widen(line, 1, "nccl.builds", "2.99.1") == \
        line.replace("<=2.32.3", "<=2.99.1")
    assert syncnvidia._widen(line, 1, "nccl.builds", "2.30.1") == line
    assert syncnvidia._cuda_version("12.8.2.0") == "12.8.2"
    assert syncnvidia._cuda_version("13.5") == "13.5.0"
