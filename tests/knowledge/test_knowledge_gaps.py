"""Unknown never reads as yes (issue 45): a GPU's driver floor within its branch and the NCCL
releases built for it are rules with their sources; what the matrix does not know is listed by
`knowledge evidence --gaps`, said in a warning of every answer that rests on it, and refused by
`resolve --strict`; a CUDA release known only from NVIDIA's wheels is offered with CUDA from the
wheels, and the answer says so."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from imagebuild import cli
from imagebuild.knowledge import completeness
from imagebuild.resolve import solver as R

MATRIX = str(ROOT / "matrix.yaml")


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# NVIDIA's per-GPU floors "R5xx (>= 5xx.y.z) or later" (MIG620): the release below is refused
# citing the source, the floor itself runs, and a later branch runs.
@pytest.mark.parametrize("gpu, below, floor, later", [
    ("H20", "535.154.05", "535.161.07", "550.54.14"),
    ("H200", "550.54.14", "550.90.07", "560.35.03"),
    ("B200", "570.124.06", "570.133.20", "575.51.03"),
    ("GB200", "570.124.06", "570.133.20", "580.65.06"),
    ("B300", "580.65.06", "580.82.07", "590.44.01"),
    ("RTX PRO 5000 Blackwell", "575.51.03", "575.57.08", "580.65.06"),
    ("A30", "460.32.03", "460.73.01", "470.57.02"),
])
def test_a_gpu_s_driver_floor_within_its_branch_is_a_rule(k, gpu, below, floor, later):
    res = R.resolve(k, R.Host(driver=below, gpu=gpu), {"pytorch": "none"}, warnings=False)
    assert not res.ok
    assert any(f"{gpu} GPUs need driver {floor} or newer" in ln and "[MIG620]" in ln
               for ln in res.explanation), res.explanation
    for drv in (floor, later):
        q = R.Problem(k, R.Host(driver=drv, gpu=gpu))
        assert not [r.id for r in q.host_violations if r.id.endswith("-first-driver")], (gpu, drv)


def test_first_driver_must_be_of_first_branch(tmp_path, capsys):
    text = open(MATRIX).read().replace('first_branch: 550, first_driver: "550.90.07"',
                                       'first_branch: 550, first_driver: "555.42.02"')
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    code, _, err = _cli(capsys, "knowledge", "validate", "--matrix", str(path))
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if 'first_driver: "555.42.02"' in ln)
    assert code == 2 and f"{path}:{line}:" in err and "is not of first_branch R550" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_gaps_are_listed_with_totals(k, capsys):
    code, out, _ = _cli(capsys, "knowledge", "evidence", "--gaps", "--matrix", MATRIX, "--json")
    doc = json.loads(out)["result"]
    assert code == 0
    gaps = {(g["subject"], g["cell"]) for g in doc["gaps"]}
    # T4's first branch is not in the matrix; H100's floor and NCCL are, B300's NCCL is (derived)
    assert ("T4", "driver_branch") in gaps and ("GB300", "driver_release") in gaps
    assert not {c for s, c in gaps if s in ("H100", "B200")}
    assert ("B300", "nccl") not in gaps
    # the totals are the gaps counted, and every GPU has its six cells
    assert doc["totals"]["gpu"]["cells"] == 6 * len(k.gpus)
    assert doc["totals"]["gpu"]["not_known"] + doc["totals"]["release"]["not_known"] == len(doc["gaps"])
    assert sum(doc["by_cell"].values()) == len(doc["gaps"])
    code, text, _ = _cli(capsys, "knowledge", "evidence", "--gaps", "--matrix", MATRIX)
    assert "gpu T4  driver_branch" in text and "not known by cell:" in text


def test_an_answer_resting_on_a_missing_cell_warns_and_strict_refuses(k, capsys):
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="T4"))
    assert res.ok and res.unknown == [u for u in res.warnings if u in res.unknown]
    assert any(u.startswith("T4: the first driver branch that drives it is not known") for u in res.unknown)
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "T4",
                        "--strict")
    assert code == 1 and "--strict: T4: the first driver branch" in out
    assert "Declared image" not in out          # a refused answer names no image either
    # H100 on R580: every cell it rests on is known, so --strict answers
    assert R.resolve(k, R.Host(driver="580.95.05", gpu="H100")).unknown == []
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                        "H100", "--strict")
    assert code == 0 and "Best stack:" in out
    # the release floor matters only on the GPU's first branch: GB300 on R580 depends on it,
    # on R595 not
    assert any("GB300: the first driver release" in u
               for u in R.resolve(k, R.Host(driver="580.95.05", gpu="GB300")).unknown)
    assert not any("first driver release" in u
                   for u in R.resolve(k, R.Host(driver="595.58.03", gpu="GB300")).unknown)


def test_host_unknowns_name_only_the_cells_the_stack_uses(k):
    gpu = k.gpu_by_name("T4")
    cells = {c.cell: c for c in completeness.gpu_cells(k, gpu)}
    assert cells["cc"].value == "7.5" and cells["nccl"].value == ">=2.3.5"
    # no driver given: the driver cells are not asked
    assert completeness.host_unknowns(k, "T4", None, {"cuda": "12.8.1", "nccl": "2.27.5"}) == []
    assert completeness.host_unknowns(k, "none", "580.95.05", {}) == []


def test_a_wheels_only_cuda_is_offered_from_the_wheels(k, capsys):
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                        "H100", "--cuda", "13.5", "--json")
    doc = json.loads(out)["result"]
    assert code == 0 and doc["cuda_from"] == "wheels" and doc["stack"]["cuda"] == "13.5.0"
    assert doc["stack"]["pytorch"] == "none" and doc["modes"]["cuda"]["mode"] == "minor-version"
    assert "package" not in doc["modes"]["cuda"]            # no cuda-compat from the wheels
    assert doc["explanation"][0].startswith("CUDA 13.5.0 from NVIDIA's wheels")
    assert "comms on debian12" in doc["explanation"][0]
    assert any("known from NVIDIA's wheels (cuda-toolkit) only" in ln for ln in doc["repository_chain"])
    # a driver below CUDA 13's minor-version floor gets no wheels route: no cuda-compat there
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "575.57.08", "--gpu",
                        "H100", "--cuda", "13.5")
    assert code == 1 and "No consistent stack" in out
    # with PyTorch asked for, CUDA is torch's own: no route
    code, _, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu",
                      "H100", "--cuda", "13.5", "--torch", "2.15")
    assert code == 1
