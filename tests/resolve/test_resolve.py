"""The resolver against the real matrix.yaml: answers, modes, explanations, bad input."""

from __future__ import annotations

import json

import pytest

from imagebuild import cli
from imagebuild.resolve import solver as R
from imagebuild.errors import UsageError

from conftest import ROOT, answer

MATRIX = str(ROOT / "matrix.yaml")


def test_every_fact_names_a_known_source(k):
    for rule in k.rules:
        assert rule.source in k.sources or rule.source.startswith("https://"), rule.id
    for rel in k.releases.values():
        assert rel.source in k.sources


def test_native_mode_when_driver_is_new_enough(k):
    res = R.resolve(k, R.Host(driver="550.54.15", gpu="A100"), {"pytorch": "==2.4.1", "cuda": "12.1"})
    assert res.ok
    assert res.stack["cuda"] == "12.1.1" and res.mode.mode == "native"
    assert res.stack["cudnn"] == "9.1.0.70" and res.stack["nccl"] == "2.20.5"


def test_minor_version_mode_names_its_caveat(k):
    res = R.resolve(k, R.Host(driver="535.104.05", gpu="H100"), {"cuda": "12.6"})
    assert res.ok and res.mode.mode == "minor-version"
    assert "PTX" in res.mode.caveat


def test_forward_compat_follows_nvidias_table_and_needs_a_datacenter_gpu(k):
    # FWD615: cuda-compat-13-x lists R535 as a host: CUDA 13 runs through it on an H100 while
    # NVIDIA still supports R535 (its end of life is June 2026, S6) ...
    res = R.resolve(k, R.Host(driver="535.104.05", gpu="H100", date="2026-05-01"), {"cuda": "13.0"})
    assert res.ok and res.mode.mode == "forward-compat"
    assert res.mode.package == "cuda-compat-13-0"
    # ... not once R535 is past its end of life (S4: the compat libraries need a supported branch) ...
    for day in ("2026-07-01", None):       # None: the matrix's as_of, 2026-11-21
        res = R.resolve(k, R.Host(driver="535.104.05", gpu="H100", date=day), {"cuda": "13.0"})
        assert not res.ok
        assert any("end of life" in line and "cuda-compat cannot help" in line
                   for line in res.explanation), res.explanation
    # ... not on a consumer GPU ...
    res = R.resolve(k, R.Host(driver="535.104.05", gpu="RTX 4090", date="2026-05-01"), {"cuda": "13"})
    assert not res.ok
    assert any("not a data-center GPU" in line for line in res.explanation)
    # ... and not on a branch the table does not list (R550), whatever its end-of-life date.
    res = R.resolve(k, R.Host(driver="550.54.15", gpu="H100"), {"cuda": "13.0"})
    assert not res.ok
    assert any("cuda-compat-13-0 supports driver branches" in line and "R550" in line
               for line in res.explanation), res.explanation

def test_no_solution_gives_the_chain_of_facts(k):
    res = R.resolve(k, R.Host(driver="470.82.01", gpu="A100"), {"pytorch": "2.9"})
    assert not res.ok
    text = "\n".join(res.explanation)
    assert "torch 2.9.1 is built for CUDA 12.8" in text
    assert "525.60.13 even with minor-version compatibility [S5]" in text
    assert "cuda-compat-12-8 supports driver branches R535, not the host's R470 [FWD615]" in text
    assert "driver 470.82.01" in res.explanation[-2]
    # torch 2.9.1's CPU build (PTPREV) fits where no CUDA build does: the answer says so
    assert res.explanation[-1] == "no GPU stack fits; a CPU-only stack does (ask for it with --cuda none)"


def test_gpu_architecture_limits_cuda(k):
    # Volta is dropped by CUDA 13 and by the cu128 wheels of 2.11: a V100 gets 12.x
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="V100"), {"pytorch": "==2.11.0"})
    assert res.ok and res.stack["cuda"].startswith("12.6")
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="V100"), {"cuda": ">=13"})
    assert not res.ok


def test_best_stack_prefers_newest_pytorch_then_mode(k):
    res = R.resolve(k, R.Host(driver="580.95.05", gpu="H100"), {})
    groups = R.enumerate_stacks(k, R.Host(driver="580.95.05", gpu="H100"))
    newest = max((g.head["pytorch"] for g in groups if g.head["pytorch"] != "none"),
                 key=lambda v: tuple(int(x) for x in v.split(".")))
    assert res.stack["pytorch"] == newest


def test_every_enumerated_stack_checks_as_consistent(k):
    host = R.Host(driver="550.54.15", gpu="L40S")
    groups = R.enumerate_stacks(k, host, {"pytorch": ">=2.4"})
    assert groups
    for g in groups[:25]:
        stack = dict(g.head, openmpi=g.tails[0][0], ucx=g.tails[0][1])
        assert R.check(k, host, stack).ok, stack


def test_gpudirect_paths(k):
    res = R.resolve(k, R.Host(driver="550.54.15", gpu="H100", kernel="6.8", ofed=False,
                              open_kernel_modules=True), {"cuda": "12.4"})
    paths = {g["path"]: g["allowed"] for g in res.gpudirect}
    assert paths == {"dma-buf": "yes", "nvidia-peermem": "no", "nv_peer_mem": "no"}
    res = R.resolve(k, R.Host(driver="550.54.15", gpu="H100", kernel="5.4", ofed=True,
                              open_kernel_modules=True), {"cuda": "12.4"})
    paths = {g["path"]: g["allowed"] for g in res.gpudirect}
    assert paths["dma-buf"] == "no" and paths["nvidia-peermem"] == "yes"


@pytest.mark.parametrize("args,where", [
    (["--driver", "5x5"], "--driver"),
    (["--gpu", "Z100"], "--gpu"),
    (["--torch", ">=2.x"], "--torch"),
    (["--pytorch", ">=2.x"], "--pytorch"),
    (["--os", "windows11"], "--os"),
    (["--cuda", "12.4; rm -rf /"], "--cuda"),
    (["--driver", "535"], "a driver branch, not a driver release"),
    (["--drvier", "535.104.05"], "did you mean --driver?"),
])
def test_bad_arguments_are_one_line_exit_2(capsys, args, where):
    assert cli.main(["resolve", "--matrix", MATRIX] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and where in err[0] and "Traceback" not in err[0]


def test_json_document(capsys):
    assert cli.main(["resolve", "--matrix", MATRIX, "--driver", "535.104.05", "--gpu", "H100",
                     "--torch", ">=2.4", "--json"]) == 0
    doc = answer(capsys.readouterr().out, "resolve")
    assert doc["ok"] is True
    assert set(doc["stack"]) == {"driver", "gpu", "os", "platform", "python", "cuda", "cudnn", "nccl", "ucx",
                                 "openmpi", "pytorch"}
    assert all(isinstance(v, str) for v in doc["stack"].values())
    assert doc["modes"]["cuda"]["mode"] in ("native", "minor-version", "forward-compat")
    assert all("[" in line for line in doc["explanation"])


def test_no_solution_exit_code_1(capsys):
    assert cli.main(["resolve", "--matrix", MATRIX, "--driver", "470.82.01", "--gpu", "A100",
                     "--why-not", "torch==2.9.1"]) == 1
    assert "not the host's R470 [FWD615]" in capsys.readouterr().out


def test_check_reads_an_images_labels(tmp_path, capsys):
    labels = {"io.imagebuild.stack." + c: v for c, v in {
        "pytorch": "2.8.0", "cuda": "12.9.1", "cudnn": "9.10.2.21", "nccl": "2.27.3",
        "python": "3.10", "os": "ubuntu22.04", "ucx": "1.17.0", "openmpi": "4.1.7"}.items()}
    f = tmp_path / "inspect.json"
    f.write_text(json.dumps([{"Config": {"Labels": labels}}]))
    # 2.8.0's cu129 build is known only from third-party copies (TORCHRELMD): not confirmed
    assert cli.main(["check", "--matrix", MATRIX, "--from-json", str(f), "--driver", "550.54.15",
                     "--gpu", "A100"]) == 1
    assert "torch 2.8.0 is built for CUDA 12.8, 12.6 (builds for 12.9 are not confirmed)" in capsys.readouterr().out
    labels["io.imagebuild.stack.cuda"] = "12.8.1"
    f.write_text(json.dumps([{"Config": {"Labels": labels}}]))
    assert cli.main(["check", "--matrix", MATRIX, "--from-json", str(f), "--driver", "550.54.15",
                     "--gpu", "A100"]) == 0


def test_check_reads_what_resolve_json_printed(tmp_path, capsys):
    """resolve --json's envelope, saved, is a stack check reads back (README: --from-json)."""
    host = ["--driver", "550.54.15", "--gpu", "A100"]
    assert cli.main(["resolve", "--matrix", MATRIX, *host, "--json"]) == 0
    f = tmp_path / "resolved.json"
    f.write_text(capsys.readouterr().out)
    assert cli.main(["check", "--matrix", MATRIX, "--from-json", str(f), *host, "--json"]) == 0
    checked = answer(capsys.readouterr().out, "check")
    assert checked["ok"] and checked["stack"] == answer(f.read_text(), "resolve")["stack"]


def test_unknown_component_in_check_is_refused(k):
    with pytest.raises(UsageError):
        R.check(k, R.Host(), {"pytorch": "2.4.1", "tensorflow": "2.15"})


def test_check_leaves_unnamed_components_free(k):
    # Only the torch stack is named: UCX, Open MPI, OS, Python are "any", not required.
    res = R.check(k, R.Host(driver="550.54.15", gpu="A100"), {"pytorch": "2.4.1", "cuda": "12.1"})
    assert res.ok and res.stack["pytorch"] == "2.4.1" and res.stack["cuda"].startswith("12.1")
