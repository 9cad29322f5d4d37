"""cuDNN and NCCL a host provides itself (issue 25: NGC-style machines, `--system-cudnn` and
`--system-nccl`): the releases NVIDIA publishes as redistributables but as no wheel (`redist:` in
matrix.yaml, CUDNNREDIST, CUDNNREDIST8, NCCLREDIST), the support-matrix GPU ranges of cuDNN 8.9 and
9.0 (S9), and what the answer says when no fact covers a system copy. Each test names the source id
of the facts it checks; the loader tests make one mistake in a copy of the real matrix."""

from __future__ import annotations

import json

import pytest

from imagebuild import cli
from imagebuild.resolve import solver as R

from conftest import ROOT, edit_matrix

MATRIX = str(ROOT / "matrix.yaml")


def _resolve_json(capsys, *argv) -> tuple[int, dict]:
    rc = cli.main(["resolve", "--matrix", MATRIX, *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def _warnings(doc: dict) -> list[str]:
    return [w["message"] if isinstance(w, dict) else w for w in doc["warnings"]]


def _system_line(doc: dict, comp: str) -> str:
    return next(e for e in doc["result"]["explanation"] if e.startswith(f"system {comp} "))


# -- cuDNN releases no wheel has (CUDNNREDIST8, CUDNNREDIST)

def test_a_system_cudnn_8_9_3_is_known_from_nvidias_manifest(capsys):
    """8.9.3.28 was never a wheel: before, "not a cudnn release the knowledge names"."""
    rc, doc = _resolve_json(capsys, "--driver", "550.54.15", "--gpu", "H100", "--system-cudnn", "8.9.3")
    stack = doc["result"]["stack"]
    assert rc == 0 and stack["system_cudnn"] == "8.9.3"
    # its support-matrix line (S9) keeps CUDA to 11.x or 12.0-12.2
    assert stack["cuda"].startswith("11.") or stack["cuda"].startswith(("12.0.", "12.1.", "12.2."))
    line = _system_line(doc, "cudnn")
    assert "release 8.9.3.28 [CUDNNREDIST8]" in line and "[S9]" in line


def test_a_cudnn_redistributable_for_cuda_11_only_is_refused_beside_cuda_12(k, capsys):
    """8.9.5.29: the wheels have 8.9.5.30 only, and NVIDIA built 8.9.5.29 for CUDA 11 only."""
    problems = R.check_system_copy(k, R.Host(driver="580.95.05", gpu="H100"), "cudnn", "8.9.5.29",
                                   {"cuda": "12.2.2"})
    assert problems == ["system cudnn 8.9.5.29: cudnn 8.9.5.29 is built for CUDA 11 [CUDNNREDIST8]"]
    assert R.check_system_copy(k, R.Host(driver="580.95.05", gpu="H100"), "cudnn", "8.9.5.29",
                               {"cuda": "11.8.0"}) == []
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="H100"), {}, system={"cudnn": "8.9.5.29"})
    assert res.ok and res.stack["cuda"].startswith("11.")


def test_cudnn_9_25_0_is_a_redistributable_for_cuda_12_and_13_only(k, capsys):
    rc, doc = _resolve_json(capsys, "--driver", "580.95.05", "--gpu", "H100", "--system-cudnn", "9.25.0")
    assert rc == 0 and doc["result"]["stack"]["system_cudnn"] == "9.25.0"
    assert "release 9.25.0.15 [CUDNNREDIST]" in _system_line(doc, "cudnn")
    assert "system cudnn 9.25.0: cudnn 9.25.0.15 is built for CUDA 12, 13 [CUDNNREDIST]" in \
        R.check_system_copy(k, R.Host(driver="580.95.05", gpu="H100"), "cudnn", "9.25.0", {"cuda": "11.8.0"})


def test_a_redistributable_is_never_a_stacks_own(k):
    """No wheel brings 9.25.0.15 or NCCL 2.20.3: no stack selects them, only a system copy is one."""
    assert "9.25.0.15" not in k.domain("cudnn", True) and "9.25.0.15" in k.cudnn_releases
    assert "2.20.3" not in k.domain("nccl", True) and "2.20.3" not in k.nccl_releases
    assert not R.resolve(k, R.Host(driver="580.95.05", gpu="H100"), {"nccl": "2.20.3"}).ok
    rel = k.library_releases["cudnn"]["9.25.0.15"]
    assert rel.redist_only and rel.cuda_majors == (12, 13) and rel.platforms == ("x86_64", "aarch64")
    # a wheel release with a redistributable for a further CUDA major: both sources name it
    both = k.library_releases["cudnn"]["8.9.7.29"]
    assert not both.redist_only and both.cuda_majors == (11, 12) and both.sources == ("S10", "CUDNNREDIST8")


# -- NCCL releases no wheel has (NCCLREDIST)

def test_a_system_nccl_known_only_from_nvidias_redist_listing(capsys):
    rc, doc = _resolve_json(capsys, "--driver", "550.54.15", "--gpu", "H100", "--system-nccl", "2.20.3")
    assert rc == 0 and doc["result"]["stack"]["system_nccl"] == "2.20.3"
    assert "release 2.20.3 [NCCLREDIST]" in _system_line(doc, "nccl")
    # its CUDA builds were not read: the answer says how it was judged instead
    assert any("system nccl 2.20.3: the CUDA builds of this release are not known [NCCLREDIST]" in w
               for w in _warnings(doc)), doc["warnings"]


def test_check_takes_a_redistributable_nccl_and_cites_its_source(capsys):
    rc = cli.main(["check", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "H100",
                   "--torch", "2.11.0", "--cuda", "12.6", "--system-nccl", "2.18.5", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["result"]["stack"]["system_nccl"] == "2.18.5"
    assert "release 2.18.5 [NCCLREDIST]" in _system_line(doc, "nccl")


def test_a_redistributable_nccl_is_still_held_to_the_gpus_minimum(k):
    """The per-GPU minimums of NCCL (an architecture's nccl range, NCCLHIST; a feature with gpu,
    S11) bind a system copy too."""
    problems = R.check_system_copy(k, R.Host(driver="580.95.05", gpu="GB200"), "nccl", "2.20.3",
                                   {"cuda": "12.8.1"})
    assert problems == [
        "system nccl 2.20.3: Blackwell GPUs (sm_100) run NCCL >=2.25.1 [NCCLHIST]",
        "system nccl 2.20.3: GB200 GPUs need NCCL 2.27.5 or newer (GB200 officially supported) [S11]"]


# -- cuDNN support-matrix GPU ranges (S9)

@pytest.mark.parametrize("gpu,driver,cuda", [("K80", "470.82.01", "11.8.0"), ("B200", "580.95.05", "12.2.2")])
def test_cudnn_8_9_is_refused_on_gpus_its_support_matrix_does_not_list(k, gpu, driver, cuda):
    """The 8.9.x and 9.0.0 matrices list compute capabilities 5.0 to 9.0 only."""
    problems = R.check_system_copy(k, R.Host(driver=driver, gpu=gpu), "cudnn", "8.9.7", {"cuda": cuda})
    assert len(problems) == 1 and "sm >=5.0,<=9.0" in problems[0] and problems[0].endswith("[S9]")
    assert R.check_system_copy(k, R.Host(driver="580.95.05", gpu="H100"), "cudnn", "8.9.7",
                               {"cuda": "11.8.0"}) == []


def test_a_cudnn_no_support_matrix_line_covers_is_said_so(capsys):
    """cuDNN 9.11 to 9.16: no NVIDIA matrix page of them was read. The answer keeps the stack (the
    CUDA builds are known, S10) and says plainly that its driver and GPUs are not checked."""
    rc, doc = _resolve_json(capsys, "--driver", "550.54.15", "--gpu", "H100", "--system-cudnn", "9.14.0")
    assert rc == 0 and "release 9.14.0.64 [S10]" in _system_line(doc, "cudnn")
    assert any(w.startswith("system cudnn 9.14.0: no support-matrix line of the knowledge covers it")
               for w in _warnings(doc)), doc["warnings"]
    rc, doc = _resolve_json(capsys, "--driver", "580.95.05", "--gpu", "H100", "--system-cudnn", "9.10.2")
    assert rc == 0 and "[S9]" in _system_line(doc, "cudnn")
    assert not any(w.startswith("system cudnn") for w in _warnings(doc)), doc["warnings"]


# -- the loader: a malformed `redist:` entry is refused at its line



@pytest.mark.parametrize("pattern,replacement,words", [
    (r'cuda_majors: \[12, 13\], (platforms: \[x86_64, aarch64\], released: "2026-07-17")',
     r'cuda_majors: ["12", 13], \1', "cudnn.redist[]: cuda_majors must be a list of integers"),
    (r'version: "9\.25\.0\.15", cuda_majors', 'version: "9.25.0.x", cuda_majors', "cudnn.redist[]: version"),
    (r'released: "2026-07-17"', 'released: "2027-01-05"', "released 2027-01-05, after the matrix's as_of"),
    (r'released: "2026-07-17"', 'released: "17.07.2026"', "released: malformed date"),
    (r'platforms: \[x86_64, aarch64\], released: "2026-07-17"', 'platforms: [ppc64le], released: "2026-07-17"',
     "unknown platform 'ppc64le'"),
    (r'\{version: "2\.20\.3", source: NCCLREDIST\}', '{version: "2.20.3", source: NCCLREDIST, cuda: "12.3"}',
     "nccl.redist[]: unknown key 'cuda'"),
    (r'\{version: "2\.20\.3", source: NCCLREDIST\}', '{version: "2.18.5", source: NCCLREDIST}',
     "nccl.redist[]: nccl 2.18.5 is listed twice"),
    (r'\{version: "2\.15\.1", source: NCCLREDIST\}', '{version: "2.15.1", source: NCCLREDIST9}',
     "nccl.redist[]: unknown source 'NCCLREDIST9'"),
])
def test_a_malformed_redist_entry_is_refused_at_its_line(tmp_path, capsys, pattern, replacement, words):
    path, line = edit_matrix(tmp_path, pattern, replacement)
    code = cli.main(["knowledge", "validate", "--matrix", path])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert f"{path}:{line}" in err[0] and words in err[0], err[0]
