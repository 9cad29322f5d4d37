"""The answers people type (issue 24, section 3), through the commands as a user runs them: a driver
branch, a plan for CI, a GPU host without PyTorch, an end-of-life driver, what the matrix builds,
facts marked unverified, matrix mistakes that used to pass silently, and argument errors. Plus
where the knowledge comes from when no --matrix is given (section 1). Pure logic on the real
matrix: no engine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagebuild import cli
from imagebuild.deliver import hostfit
from imagebuild.render import images as I
from imagebuild.resolve import solver as R
from imagebuild.workspace import PACKAGED_MATRIX, locate_matrix

from conftest import ROOT, answer

MATRIX = str(ROOT / "matrix.yaml")


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- a driver branch ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv,flag", [
    (["resolve", "--driver", "580", "--gpu", "H100"], "--driver"),
    (["find", "--driver", "535", "--gpu", "H100"], "--driver"),
    (["check", "--driver", "550", "--gpu", "H100", "--cuda", "12.4.1"], "--driver"),
    (["plan", "--driver-from", "535", "--driver-to", "580.95.05", "--gpu", "H100"], "--driver-from"),
    (["plan", "--driver-from", "535.104.05", "--driver-to", "580", "--gpu", "H100"], "--driver-to"),
    (["resolve", "--driver", "R580", "--gpu", "H100"], "--driver"),      # NVIDIA's way of naming it
    (["find", "--driver", "r620", "--gpu", "H100"], "--driver"),
])
def test_a_driver_branch_is_refused_in_every_command(capsys, argv, flag):
    """One meaning everywhere: a branch is not a release (580 read as 580.0.0 gave 26 broken images
    where 580.95.05 gives none). The refusal names the flag and asks for the whole version."""
    code, _, err = _cli(capsys, *argv, "--matrix", MATRIX)
    line = _one_line(err)
    assert code == 2 and f"argument {flag}:" in line and "driver branch, not a driver release" in line


def test_a_driver_of_a_branch_the_matrix_does_not_know_is_answered_with_a_warning(capsys):
    """A release on a branch the matrix does not list (a newer one, or one it skipped) still gets
    its answer from the version, and the answer says that the branch's support is not known."""
    for drv in ("999.1.1", "600.10.01"):
        code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", drv, "--gpu", "H100")
        branch = drv.split(".")[0]
        assert code == 0 and f"warning: driver {drv}: branch R{branch} is not in the knowledge base" in out
        assert "whether NVIDIA still supports it is not known" in out
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "H100")
    assert code == 0 and "is not in the knowledge base" not in out


# -- plan for CI -------------------------------------------------------------------------------

def test_plan_needs_the_gpu_or_says_it_checked_none(capsys):
    code, _, err = _cli(capsys, "plan", "--matrix", MATRIX, "--driver-from", "535.104.05",
                        "--driver-to", "580.95.05")
    assert code == 2 and "--gpu" in _one_line(err)
    code, out, _ = _cli(capsys, "plan", "--matrix", MATRIX, "--driver-from", "535.104.05",
                        "--driver-to", "580.95.05", "--gpu", "any")
    assert code == 0 and "GPU: any (not checked)" in out
    code, out, _ = _cli(capsys, "plan", "--matrix", MATRIX, "--driver-from", "535.104.05",
                        "--driver-to", "580.95.05", "--gpu", "any", "--json")
    assert answer(out, "plan")["gpu"] == "any"


def test_plan_fails_on_broken_images_when_asked(capsys):
    down = ["plan", "--matrix", MATRIX, "--driver-from", "580.95.05", "--driver-to", "535.104.05",
            "--gpu", "H100"]
    code, out, _ = _cli(capsys, *down)
    assert code == 0 and " broken" in out            # reported, exit 0 without --fail-on
    code, out, err = _cli(capsys, *down, "--fail-on", "broken", "--json")
    doc = answer(out, "plan", code=1)
    broken = [v["image"] for v in doc["images"] if v["status"] == "broken"]
    assert code == 1 and broken and doc["failed"] == broken
    assert json.loads(err.strip().splitlines()[-1])["event"] == "error"
    code, _, _ = _cli(capsys, "plan", "--matrix", MATRIX, "--driver-from", "535.104.05",
                      "--driver-to", "580.95.05", "--gpu", "H100", "--fail-on", "broken")
    assert code == 0                                  # an upgrade that breaks nothing passes
    code, _, err = _cli(capsys, *down, "--fail-on", "borken")
    assert code == 2 and "--fail-on" in _one_line(err)


# -- a GPU host with no PyTorch ----------------------------------------------------------------

def test_a_gpu_host_without_pytorch_is_told_why_and_the_nearest_driver(k, capsys):
    # GH200 on R550 gets torch 2.14.1+cu126 since the aarch64 builds of 2.11-2.14 are recorded
    # (PTIAARCH; 2.10's PT210WV, 2.9's PT29), through CUDA minor-version compatibility; on R520
    # no torch build runs
    res = R.resolve(k, R.Host(driver="550.127.05", gpu="GH200"))
    assert (res.stack["pytorch"], res.stack["cuda"][:4], res.stack["platform"]) == \
        ("2.14.1", "12.6", "aarch64")
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "520.61.05",
                        "--gpu", "GH200", "--json")
    doc = answer(out, "resolve")
    assert code == 0 and doc["stack"]["pytorch"] == "none"
    warning = next(w for w in doc["warnings"] if w.startswith("no PyTorch fits this GPU host"))
    m = re.search(r"a driver >= ([0-9.]+) \(R[0-9]+\) gives torch ([0-9.]+)", warning)
    assert m, warning
    # the named change is true: that driver gives that torch, and no lower driver it tried does
    res = R.resolve(k, R.Host(driver=m.group(1), gpu="GH200"))
    assert res.ok and res.stack["pytorch"] == m.group(2)
    # asked for no PyTorch, nothing is said
    res = R.resolve(k, R.Host(driver="520.61.05", gpu="GH200"), {"pytorch": "none"})
    assert not any(w.startswith("no PyTorch") for w in res.warnings)


# -- end of life ---------------------------------------------------------------------------------

def test_end_of_life_is_judged_on_the_day_given(k):
    eol = k.branches[535].eol                           # "YYYY-MM": supported through that month
    assert isinstance(eol, str) and len(eol) == 7
    year, month = int(eol[:4]), int(eol[5:])
    before = f"{eol}-01"
    after = f"{year + (month == 12)}-{month % 12 + 1:02d}-01"
    host = dict(driver="535.104.05", gpu="H100")
    warned = [w for w in R.resolve(k, R.Host(**host, date=after)).warnings if "end of life" in w]
    assert len(warned) == 1 and f"[{k.branches[535].source}]" in warned[0] and after in warned[0]
    assert not [w for w in R.resolve(k, R.Host(**host, date=before)).warnings if "end of life" in w]


def test_r620_is_a_long_term_branch_with_its_own_page_cited(k):
    """R620's type and end of life come from NVIDIA's R620 page (NVDRV620), its release and newest
    CUDA from the redistributables (REDIST): each fact cites its own source."""
    b = k.branches[620]
    assert (b.type, b.eol, b.source, b.lifecycle_source) == ("LTSB", "2029-09", "REDIST", "NVDRV620")
    assert k.sources["NVDRV620"].url.startswith("https://docs.nvidia.com/datacenter/tesla/drivers/620/")
    assert k.branch_supported(620, "2029-09-30") == (True, "R620 (LTSB) is supported until 2029-09 [NVDRV620]")
    assert k.branch_supported(620, "2029-10-01") == (False, "R620 reached end of life 2029-09 [NVDRV620]")


@pytest.mark.parametrize("gpu, older, floor, words", [
    ("B200", "2.24.3", "2.25.1", "Blackwell GPUs (sm_100) run NCCL >=2.25.1 [NCCLHIST]"),
    ("H100", "2.14.3", "2.15.1", "Hopper GPUs (sm_90) run NCCL >=2.15.1 [NCCLHIST]"),
    ("GB10", "2.26.5", "2.27.3", "GB10 GPUs need NCCL 2.27.3 or newer (DGX Spark (GB10) support) [NCCLHIST]"),
    ("GB200", "2.27.3", "2.27.5", "GB200 GPUs need NCCL 2.27.5 or newer (GB200 officially supported) [S11]"),
])
def test_a_gpu_s_first_nccl_is_a_rule_the_chain_cites(k, gpu, older, floor, words):
    """NCCL's support of a GPU (a feature with cc: or gpu:) rules out older NCCL for that host,
    and the release that brought it is accepted."""
    host = R.Host(driver="580.95.05", gpu=gpu)
    res = R.resolve(k, host, {"nccl": f"=={older}"})
    assert not res.ok and any(words in line for line in res.explanation), res.explanation
    assert R.resolve(k, host, {"nccl": f">={floor}"}).ok
    # another GPU is not held to it
    assert R.resolve(k, R.Host(driver="580.95.05", gpu="A100"), {"nccl": f"=={older}"}).ok


def test_an_nccl_feature_naming_an_unknown_gpu_is_refused(tmp_path, capsys):
    path = tmp_path / "matrix.yaml"
    text = open(MATRIX).read().replace('feature: "GB200 officially supported", gpu: GB200,',
                                       'feature: "GB200 officially supported", gpu: GB2000,')
    path.write_text(text)
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    code, _, err = _cli(capsys, "knowledge", "validate", "--matrix", str(path))
    assert code == 2 and "nccl.features[]: GPU 'GB2000' is not under gpus" in err


def test_allow_unverified_opens_a_release_s_unconfirmed_builds(k):
    """torch 2.8.0's cu129 build is known only from third-party copies of RELEASE.md (TORCHRELMD):
    refused by default with the reason, and --allow-unverified answers with it (the
    confirmed-builds rule gave way to nothing before, so the flag changed nothing)."""
    host = R.Host(driver="580.95.05", gpu="H100")
    wishes = {"pytorch": "==2.8.0", "cuda": "==12.9.*"}
    default = R.resolve(k, host, wishes)
    assert not default.ok
    assert any("torch 2.8.0 is built for CUDA 12.8, 12.6 (builds for 12.9 are not confirmed)" in line
               for line in default.explanation), default.explanation
    opened = R.resolve(k, host, wishes, allow_unverified=True)
    assert opened.ok and opened.stack["cuda"].startswith("12.9")


def test_the_first_sm_120_wheels_serve_a_consumer_blackwell_card(k):
    """torch 2.7.1's cu128 build is the first with sm_120 wheels (RELEASE.md's row, S14:
    experimental, cuDNN 9.7.1.26, no NCCL listed). A published build, so it is offered by default
    (issue 25, class 4); its NCCL is not confirmed, and the answer says so."""
    res = R.resolve(k, R.Host(driver="575.57.08", gpu="RTX 5090"), {"pytorch": "==2.7.1"})
    assert res.ok and res.stack["cuda"].startswith("12.8") and res.stack["cudnn"] == "9.7.1.26"
    assert any("torch 2.7.1+cu128's wheels bundle is not confirmed" in w for w in res.warnings), res.warnings
    older = R.resolve(k, R.Host(driver="575.57.08", gpu="RTX 5090"), {"pytorch": "==2.6.0"})
    assert not older.ok and any("sm_120" in line or "12.0" in line for line in older.explanation)


def test_grace_hosts_get_the_torch_releases_published_for_arm64(k):
    """aarch64 per release and CUDA build, each from its source: 2.9 built Linux aarch64 wheels for
    every CUDA version (PT29), 2.7 its CUDA 12.8 build (PT27); 2.8's aarch64 builds are not
    recorded, and the answer says so."""
    host = R.Host(driver="580.95.05", gpu="GH200")
    res = R.resolve(k, host, {"pytorch": "==2.9.1"})
    # the newest CUDA build that runs natively: cu130, published for aarch64 (PT29)
    assert res.ok and res.stack["platform"] == "aarch64" and res.stack["cuda"].startswith("13.0")
    assert k.variants[("2.9.1", "13.0")].platforms == ("x86_64", "aarch64")
    cu128 = R.resolve(k, host, {"pytorch": "==2.9.1", "cuda": "==12.8.*"})
    assert cu128.ok and cu128.stack["platform"] == "aarch64"
    seven = R.resolve(k, host, {"pytorch": "==2.7.1"})
    assert seven.ok and seven.stack["cuda"].startswith("12.8") and seven.stack["platform"] == "aarch64"
    assert not R.resolve(k, host, {"pytorch": "==2.7.1", "cuda": "==12.6.*"}).ok   # x86_64 only
    older = R.resolve(k, host, {"pytorch": "==2.8.0"})
    assert not older.ok and any(
        "torch 2.8.0+cu128 wheels are known for x86_64 only (no other platform's build is recorded) [S10]" in line
        for line in older.explanation), older.explanation
    assert {k.sources["PT27"].url, k.sources["PT29"].url} == {
        "https://pytorch.org/blog/pytorch-2-7/", "https://pytorch.org/blog/pytorch-2-9/"}


def test_an_end_of_life_driver_is_flagged_without_a_date(k, capsys):
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "470.256.02", "--gpu", "V100")
    assert code == 0 and "warning: driver 470.256.02: R470 reached end of life" in out
    assert "the matrix's as_of" in out


def test_forward_compatibility_onto_an_end_of_life_branch_is_refused(k):
    """R570 reached its end of life in February 2026 (S6); the compat libraries need a branch
    NVIDIA still supports (S4): CUDA 13.2 through cuda-compat runs there in January, not after."""
    res = R.resolve(k, R.Host(driver="570.26", gpu="H100", date="2026-01-15"), {"cuda": "13.2"})
    assert res.ok and res.mode.mode == "forward-compat" and not any("end of life" in w for w in res.warnings)
    res = R.resolve(k, R.Host(driver="570.26", gpu="H100"), {"cuda": "13.2"})
    assert not res.ok
    assert any("R570 reached end of life 2026-02" in line and "cuda-compat cannot help" in line
               for line in res.explanation), res.explanation


# -- what the answer says about its own choices -------------------------------------------------

def test_every_passed_over_reason_is_true(k):
    """"passed over: X (no consistent stack with it and the A, B chosen above)": with A and B as
    chosen, X really gives no stack."""
    host = R.Host(driver="580.95.05", gpu="H100")
    res = R.resolve(k, host)
    checked = 0
    for line in res.explanation:
        comp = line.split(" ", 1)[0]
        for cand, above in re.findall(r"(\S+) \(no consistent stack with it and the ([a-z_, ]+) "
                                      r"chosen above\)", line):
            wishes = {c: res.stack[c] if c not in ("os", "platform") else res.stack[c]
                      for c in above.split(", ")}
            wishes = {c: (v if c in ("os", "platform") else f"=={v}") for c, v in wishes.items()}
            wishes[comp] = cand if comp in ("os", "platform") else f"=={cand}"
            assert not R.resolve(k, host, wishes, explain=False).ok, (comp, cand, above)
            checked += 1
    assert checked >= 3


def test_the_answer_names_the_best_declared_image(k, capsys):
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05",
                        "--gpu", "H100", "--json")
    doc = answer(out, "resolve")
    specs, _ = I.expand(k)
    good, _ = hostfit.fits(k, specs, R.Host(driver="580.95.05", gpu="H100"))
    assert code == 0 and doc["image"]["id"] == good[0].spec.id      # what doctor and find name
    stack_matches = all(doc["stack"][c] == good[0].spec.stack[c] for c in ("os", "python", "cuda"))
    assert doc["image"]["matches_stack"] == stack_matches
    if not stack_matches:
        assert "not declared as an image" in doc["image"]["note"]
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "580.95.05", "--gpu", "H100")
    assert f"Declared image: {good[0].spec.id}" in out


def test_the_default_answer_names_the_unverified_facts_that_rule_it_out(k):
    host = R.Host(driver="535.104.05", gpu="H100", date="2026-05-01")    # R535 still supported
    res = R.resolve(k, host)
    flagged = [w for w in res.warnings if w.startswith("an unverified fact rules this stack out")]
    assert flagged, res.warnings
    line = int(re.search(r"matrix.yaml line (\d+)", flagged[0]).group(1))
    assert any(r.line == line and not r.verified for r in k.rules)
    # and it is so: with unverified facts applied, this very stack is refused
    stack = {c: res.stack[c] for c in R.STACK}
    assert R.check(k, host, stack).ok and not R.check(k, host, stack, allow_unverified=True).ok


def test_why_not_is_a_list_not_one_long_line(capsys):
    code, out, _ = _cli(capsys, "resolve", "--matrix", MATRIX, "--driver", "470.256.02",
                        "--gpu", "V100", "--why-not", "cuda>=13")
    assert code == 1 and out.count("\n  - ") > 5
    assert max(len(line) for line in out.splitlines()) < 400


# -- matrix mistakes ---------------------------------------------------------------------------

def test_a_matrix_copied_without_its_locks_is_an_error_not_zero_images(tmp_path, capsys):
    shutil.copy(MATRIX, tmp_path / "matrix.yaml")
    code, _, err = _cli(capsys, "generate", "--check", "--matrix", tmp_path / "matrix.yaml")
    line = _one_line(err)
    assert code == 2 and "matrix.yaml: declares no image that resolves" in line
    assert "locks/ folder" in line
    code, out, err = _cli(capsys, "images", "--matrix", tmp_path / "matrix.yaml")
    assert code == 0 and out.strip().endswith("0 images") and "give no image" in err


def test_a_family_that_matches_nothing_is_named(tmp_path, capsys):
    doc = yaml.safe_load(Path(MATRIX).read_text())
    fam = next(f for f in doc["images"] if "pytorch" in f)
    fam["pytorch"] = ">=99"
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    code, _, err = _cli(capsys, "images", "--matrix", tmp_path / "matrix.yaml")
    assert code == 0 and f"family {fam['family']} match no release" in err
    code, _, err = _cli(capsys, "generate", "--check", "--matrix", tmp_path / "matrix.yaml")
    assert f"family {fam['family']} match no release" in err


# -- argument errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv,want", [
    (["resolve", "--drvier", "535.104.05"], "unrecognized arguments: --drvier 535.104.05 "
                                            "(--drvier: did you mean --driver?)"),
    (["knowledge", "show", "gpus", "--jsn"], "did you mean --json?"),
    (["knowledge", "shw"], "did you mean 'show'?"),
    (["resolve", "--torch", "=2.8"], "argument --torch: malformed specifier"),
    # spelt right but after the action: said so, not "did you mean --matrix?"
    (["sources", "list", "--matrix", "matrix.yaml"], "(--matrix goes before the action: "
                                                     "sources --matrix ... ACTION)"),
])
def test_argument_errors_name_what_was_typed(capsys, argv, want):
    code, _, err = _cli(capsys, *argv)
    line = _one_line(err)
    assert code == 2 and want in line and line.count("imagebuild ") == 1, line


# -- which knowledge -----------------------------------------------------------------------------

def test_the_knowledge_is_found_in_order(tmp_path):
    assert locate_matrix("m.yaml", {"IMAGEBUILD_MATRIX": "e.yaml"}, tmp_path) == ("m.yaml", "--matrix")
    assert locate_matrix(None, {"IMAGEBUILD_MATRIX": "e.yaml"}, tmp_path) == ("e.yaml", "$IMAGEBUILD_MATRIX")
    assert locate_matrix(None, {}, tmp_path) == (str(PACKAGED_MATRIX), "packaged")
    (tmp_path / "matrix.yaml").write_text("broken: [")
    assert locate_matrix(None, {}, tmp_path) == (str(tmp_path / "matrix.yaml"), "./matrix.yaml")


def _imagebuild(cwd: Path, *argv, env=None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "IMAGEBUILD_MATRIX"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "imagebuild", *map(str, argv)], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300)


def test_with_no_matrix_here_the_packaged_one_answers(tmp_path):
    which = _imagebuild(tmp_path, "knowledge", "which", "--json")
    doc = answer(which.stdout, "knowledge which")
    assert which.returncode == 0 and doc["origin"] == "packaged"
    here = json.loads(_imagebuild(ROOT, "knowledge", "which", "--json").stdout)
    assert doc["sha256"] == here["result"]["sha256"] == here["knowledge"]["sha256"]
    res = _imagebuild(tmp_path, "resolve", "--driver", "580.95.05", "--gpu", "H100")
    assert res.returncode == 0 and "(packaged with imagebuild" in res.stdout.splitlines()[-1]
    # writing the packaged knowledge is refused; a copy is the way to edit it
    sync = _imagebuild(tmp_path, "wheels", "lock")
    assert sync.returncode == 2 and "read-only" in sync.stderr
    copy = _imagebuild(tmp_path, "knowledge", "copy", "site")
    assert copy.returncode == 0
    assert (tmp_path / "site" / "matrix.yaml").read_bytes() == Path(MATRIX).read_bytes()
    assert sorted(p.name for p in (tmp_path / "site" / "locks" / "wheels").iterdir()) == \
        sorted(p.name for p in (ROOT / "locks" / "wheels").iterdir())
    again = _imagebuild(tmp_path, "knowledge", "copy", "site")
    assert again.returncode == 2 and "exists" in again.stderr
    # and generate, with the packaged knowledge, writes into the current folder
    gen = _imagebuild(tmp_path, "generate", "smoke-cpu")
    assert gen.returncode == 0, gen.stderr
    assert (tmp_path / "Dockerfiles" / "smoke-cpu" / "Dockerfile").read_bytes() == \
        (ROOT / "Dockerfiles" / "smoke-cpu" / "Dockerfile").read_bytes()


def test_build_asks_for_the_engine_before_anything_else(tmp_path):
    shutil.copy(MATRIX, tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    res = _imagebuild(tmp_path, "build", "pytorch-2.13.0-cu130-debian12-runtime",
                      env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    line = _one_line(res.stderr)
    assert res.returncode == 3 and "no container engine answers" in line
    assert "systemctl" in line and ".ci/" not in line
    assert not (tmp_path / ".imagebuild").exists()      # nothing downloaded, nothing rendered
